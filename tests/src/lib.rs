//! The integration harness: a fresh real PostgreSQL database per test, the real `settle` app on
//! a random port, and requests signed the way each provider signs them.

pub mod adyen;
pub mod app;
pub mod cluster;
pub mod db;
pub mod fleet;
pub mod hostile;
pub mod logs;
pub mod process;
pub mod schema;
pub mod sign;
pub mod stripe;

pub use app::{TestApp, spawn_app};

/// Instantiates each listed test, `async fn name(backend: Backend)` in the calling module (which
/// imports `Backend`), for both backends: `<module>::postgres::<name>` and
/// `<module>::sqlite::<name>`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(#[tokio::test] async fn $name() { super::$name(super::Backend::Postgres).await })*
        }
        mod sqlite {
            $(#[tokio::test] async fn $name() { super::$name(super::Backend::Sqlite).await })*
        }
    };
}
pub use db::TestDb;
