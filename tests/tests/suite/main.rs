//! settle's integration suite: one test binary, modules by area.

mod fleet;
mod ingress_standard;
mod posting;
