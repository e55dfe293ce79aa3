//! The interface each backend gives the code written once for both (`store::decide`,
//! `store::failures`, `store::corrections`, ...): a writing transaction. The row reads and
//! writes those modules need are their own traits (`DecisionRows`, `FailureRows`,
//! `CorrectionRows`, ...), each implemented by both backends with their own SQL and deciding
//! nothing.

use crate::store::StoreError;

/// A backend's writing transaction.
pub(super) trait Transactions {
    /// On PostgreSQL a transaction; on SQLite one that holds the write lock from its start.
    type Tx: Send;

    async fn begin_write(&self) -> Result<Self::Tx, StoreError>;

    async fn commit(&self, tx: Self::Tx) -> Result<(), StoreError>;
}
