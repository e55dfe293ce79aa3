//! settle's integration suite: one test binary, modules by area.

mod adyen;
mod cli;
mod conformance;
mod corrections;
mod dashboard;
mod deploy;
mod edge;
mod embedded;
mod finance;
mod fleet;
mod hostile;
mod ingress_standard;
mod loadgen;
mod observability;
mod ops;
mod pause;
mod planes;
mod posting;
mod providers;
mod queue;
mod recording;
mod retention;
mod schema;
mod search;
mod stripe;
