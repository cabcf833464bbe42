//! Runs compared: two snapshots ([`diff`]), the ranks of a distributed run ([`ranks`]), and a
//! run held against budgets ([`check`]).
//!
//! A layer above the analyses (it uses the format, the replay and the analyses, never the
//! doctor).
#![deny(missing_docs)]

use memscape_analysis::categories;
use memscape_format::{model, units};
use memscape_replay::{frames, sites, timeline};

pub mod check;
// Fields of the diff's plain structs are named for what they hold (`a`, `b`, `bytes`).
#[allow(missing_docs)]
pub mod diff;
pub mod ranks;
