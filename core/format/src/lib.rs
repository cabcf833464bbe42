//! The file format: PyTorch CUDA memory snapshots (`torch.cuda.memory._dump_snapshot`) read
//! without executing them, held in a compact model, and written back.
//!
//! The lowest layer of memscape's core; it uses no other of its crates.
//! - [`read()`] / [`Loader`]: bytes (whole or in chunks) to a [`Snapshot`]. Raw pickles,
//!   gzip, zstd, JSON and `_memory_viz.py` HTML pages are recognised by content. A windowed
//!   read of a range ([`Limits::keep_entries`]) keeps the entries after it as a tail, which the
//!   replay layer settles (`snapshot::read` does it).
//! - [`model`]: interned strings, a frame and a stack table, segments, and one columnar
//!   [`Trace`] per device.
//! - [`write`](mod@write) produces a pickle that PyTorch's tools load; [`units`] writes sizes in words.
#![deny(missing_docs)]

pub mod error;
pub mod intern;
pub mod model;
mod prediction;
mod profiler;
mod read;
pub mod units;
pub mod value;
pub mod write;

pub use error::{Bound, ErrorKind, ReadError, Warning};
pub use intern::{StrId, Strings};
pub use model::{
    Action, Annotation, Block, BlockState, DeviceInfo, Entry, Frame, FrameId, History, PoolId, Root, Segment, Snapshot,
    StackId, Stacks, Trace, DEVICE_INFO_KEY, OUTSIDE_KEY, PREDICTION_KEY, PROFILER_KEY, SPAN_FILE, WINDOW_KEY,
};
pub use prediction::PredictionInfo;
pub use profiler::ProfilerInfo;
pub use read::{read, Format, Limits, Loaded, Loader};
pub use value::Value;
