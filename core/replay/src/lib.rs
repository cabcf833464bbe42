//! A snapshot replayed: what was alive when, the allocator's state and layout after any event,
//! private pools, stacks and call sites, and the windows and searches built on them.
//!
//! The second layer of memscape's core; it uses only the file format
//! ([`memscape_format`]). Every function is plain: a [`Snapshot`](memscape_format::Snapshot)
//! in, plain structs out.
#![deny(missing_docs)]

// The format's modules under the paths the code has always used (`crate::model::Snapshot`).
use memscape_format::{intern, model, value, StrId, Trace, Value};

pub mod allocator;
pub mod frames;
pub mod history;
pub mod host;
pub mod labels;
pub mod layout;
pub mod merge;
pub mod pools;
pub mod search;
pub mod settings;
pub mod simulate;
pub mod sites;
pub mod slice;
pub mod state;
pub mod timeline;
