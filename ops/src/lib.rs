//! The `settle` binary's library: configuration, the composition root ([`App`]), the command
//! line, and the ops/finance HTTP API.

pub mod abuse;
pub mod actions;
pub mod api;
pub mod app;
pub mod auth;
pub mod cli;
pub mod config;
pub mod dashboard;
pub mod export;
pub mod feeds;
mod health;
pub mod hosts;
pub mod loadgen;
mod request_id;
pub mod server;
pub mod telemetry;
mod verify;

pub use app::{App, Role};
pub use config::Config;
