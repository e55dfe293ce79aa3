//! `Store`'s calls, by who makes them; each runs on whichever backend the store has
//! (`on_backend!`).

mod feeds;
mod finance;
mod operators;
mod work;

use super::*;
