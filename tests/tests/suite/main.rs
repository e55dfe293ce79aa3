//! settle's integration suite: one test binary, modules by area.

mod ingress_standard;
