//! settle's domain and its storage: money, settlement events and their fingerprints, what is
//! recorded and how, and `store`, the only module that speaks SQL.

pub mod error;
pub mod event;
pub mod feed;
pub mod finance;
pub mod fingerprint;
pub mod group;
pub mod ids;
pub mod job;
pub mod minor_units;
pub mod money;
pub mod movement;
pub mod post_error;
pub mod posting;
pub mod record;
pub mod resolved;
pub mod review;
pub mod state;
pub mod store;
pub mod trigger;

pub use error::StoreError;
pub use event::{Amounts, EventParts, FactsError, Kind, SettlementEvent};
pub use fingerprint::Fingerprint;
pub use ids::{ConflictId, EventId, ExternalId, MovementId, PayoutId, Reference, SourceName};
pub use job::{JobPayload, JobRef, POST_SETTLEMENT_QUEUE, PostSettlement};
pub use money::{Amount, Currency, MoneyError};
pub use post_error::{PostError, ProviderError};
pub use posting::{Accounts, PostingRules};
pub use record::{Content, InvalidFacts, NewEvent, Recorded};
pub use state::EventStatus;
pub use store::{Store, StoreOptions};
