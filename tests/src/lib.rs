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
pub use db::TestDb;
