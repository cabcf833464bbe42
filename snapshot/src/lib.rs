//! `snapshot` reads PyTorch CUDA memory snapshots (`torch.cuda.memory._dump_snapshot`) without
//! executing them, holds them in a compact model, analyses them and writes them back.
//!
//! It is the front door to the core's layers, each a crate that uses only those below it
//! (ARCHITECTURE.md draws them):
//! - `memscape-format`: [`read()`] / [`Loader`] (bytes, whole or in chunks, to a [`Snapshot`];
//!   raw pickles, gzip, zstd, JSON and `_memory_viz.py` HTML pages recognised by content), the
//!   model (interned strings, a frame and a stack table, segments, one columnar [`Trace`] per
//!   device), [`write`](mod@write) (a pickle PyTorch's tools load) and [`units`].
//! - `memscape-replay`: [`timeline`], [`state`] and [`layout`] (the allocator after any event),
//!   [`pools`], [`frames`] and [`sites`], [`labels`], [`history`], [`host`], [`merge`] (PyTorch's
//!   snapshot and a driver capture together), [`slice`](mod@slice) and [`search`].
//! - `memscape-analysis`: [`categories`] (what the memory is for), [`stats`], [`flame`] (what
//!   is alive, by call stack).
//! - `memscape-doctor`: [`doctor`] (why it ran out of memory, and what-if budgets).
//! - `memscape-compare`: [`diff`] (what changed between two runs), [`ranks`] (a whole run, one
//!   file per rank) and [`check`] (a run against budgets).
//! - `memscape-synth`: [`synth`], realistic snapshots of any size.
//! - `memscape-predict`: [`predict`], the snapshot a program would record, from the
//!   allocations it asked for (`memscape predict`).
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

pub use memscape_analysis::{categories, flame, stats};
pub use memscape_compare::{check, diff, ranks};
pub use memscape_doctor as doctor;
pub use memscape_format::{units, write};
pub use memscape_predict as predict;
pub use memscape_replay::{
    allocator, frames, history, host, labels, layout, merge, pools, search, settings, simulate, sites, slice, state,
    timeline,
};
pub use memscape_synth as synth;

pub mod document;

pub use memscape_format::{
    Action, Annotation, Block, BlockState, Bound, DeviceInfo, Entry, ErrorKind, Format, Frame, FrameId, History,
    Limits, Loaded, PoolId, ProfilerInfo, ReadError, Root, Segment, Snapshot, StackId, Stacks, StrId, Strings, Trace,
    Value, Warning, DEVICE_INFO_KEY, PROFILER_KEY,
};

/// Reads a whole snapshot from memory.
pub fn read(bytes: &[u8]) -> Result<Loaded, ReadError> {
    memscape_format::read(bytes)
}

/// An incremental reader: feed it chunks in order, then call [`Loader::finish`]. A windowed
/// read of a range ([`Limits::keep_entries`]) ends with each device's segments as the
/// allocator state where its window ends ([`slice::settle_tails`]).
pub struct Loader {
    inner: memscape_format::Loader,
    /// A window of a range: its tails are settled at the end.
    range: bool,
}

impl Loader {
    /// A loader with these limits.
    pub fn new(limits: Limits) -> Self {
        Loader { inner: memscape_format::Loader::new(limits), range: limits.keep_entries.is_some() }
    }

    /// Tells the reader how many bytes will be fed in all (a file's size), so it can reserve
    /// memory once instead of growing it. Call before the first [`Loader::feed`].
    pub fn set_size_hint(&mut self, total_bytes: u64) {
        self.inner.set_size_hint(total_bytes);
    }

    /// Bytes fed so far (of the outer file, before decompression).
    pub fn bytes_consumed(&self) -> u64 {
        self.inner.bytes_consumed()
    }

    /// Feeds the next chunk. After an error the loader refuses further input.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), ReadError> {
        self.inner.feed(chunk)
    }

    /// Ends the input and builds the model.
    pub fn finish(self) -> Result<Loaded, ReadError> {
        let mut loaded = self.inner.finish()?;
        if self.range {
            slice::settle_tails(&mut loaded.snapshot);
        }
        Ok(loaded)
    }
}
