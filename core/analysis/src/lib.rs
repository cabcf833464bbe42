//! What a replayed snapshot means: what the memory is for ([`categories`]), the figures of
//! `_memory_viz.py stats` ([`stats`]), and what is alive by call stack ([`flame`]).
//!
//! The third layer of memscape's core: it uses the file format and the replay.
#![deny(missing_docs)]

use memscape_format::{intern, model, units, value, StrId};
use memscape_replay::{allocator, frames, history, host, merge, pools, sites, slice, timeline};

pub mod categories;
pub mod flame;
pub mod stats;
