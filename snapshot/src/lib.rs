//! `snapshot` reads PyTorch CUDA memory snapshots (`torch.cuda.memory._dump_snapshot`) without
//! executing them, holds them in a compact model, analyses them and writes them back.
//!
//! Brief overview:
//! - [`read()`] / [`Loader`]: bytes (whole or in chunks) to a [`Snapshot`]. Raw pickles,
//!   gzip, JSON and `_memory_viz.py` HTML pages are recognised by content.
//! - [`Snapshot`]: interned strings, a frame and a stack table, segments, and one columnar
//!   [`Trace`] per device.
//! - Analyses are plain functions over the model: [`timeline`], [`state`], [`stats`],
//!   [`categories`] (what the memory is for), [`diff`] (what changed between two runs),
//!   [`doctor`] (why it ran out of memory, and what-if budgets) and [`flame`] (what is alive,
//!   by call stack).
//! - [`ranks`]: a whole run, one file per rank: profile files, ranks from file names, and
//!   the outlier ranks with the call site that makes each one's difference.
//! - [`write`] produces a pickle that PyTorch's tools load; [`synth`] generates realistic
//!   snapshots of any size; [`merge`] puts PyTorch's snapshot and a driver capture of the
//!   same process together.
//!
//! ```
//! let pickle = snapshot::write::to_pickle_bytes(&snapshot::synth::generate(&snapshot::synth::Options {
//!     target_entries: 200,
//!     ..Default::default()
//! }));
//! let loaded = snapshot::read(&pickle).unwrap();
//! let stats = snapshot::stats::summary(&loaded.snapshot);
//! assert!(stats.total_reserved >= stats.total_allocated);
//! ```
#![deny(missing_docs)]

mod error;
mod intern;
mod model;
mod read;
mod value;

pub mod allocator;
pub mod categories;
pub mod check;
/// Fields of the diff's plain structs are named for what they hold (`a`, `b`, `bytes`).
#[allow(missing_docs)]
pub mod diff;
pub mod doctor;
pub mod flame;
pub mod frames;
pub mod history;
pub mod host;
pub mod labels;
pub mod merge;
pub mod pools;
pub mod ranks;
pub mod search;
pub mod settings;
pub mod sites;
pub mod slice;
pub mod state;
pub mod stats;
pub mod synth;
pub mod timeline;
pub mod write;

pub use error::{Bound, ErrorKind, ReadError, Warning};
pub use intern::{StrId, Strings};
pub use model::{
    Action, Annotation, Block, BlockState, DeviceInfo, Entry, Frame, FrameId, History, PoolId, Root, Segment, Snapshot,
    StackId, Stacks, Trace, DEVICE_INFO_KEY,
};
pub use read::{read, Format, Limits, Loaded, Loader};
pub use value::Value;
