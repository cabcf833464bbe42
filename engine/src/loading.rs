//! A file being read, chunk by chunk (the worker feeds what the page's stream gives it), and
//! a failed read in words.

use snapshot::{Limits, Loader};

use serde::{Deserialize, Serialize};

/// Which entries of each trace a windowed read keeps (file indices).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadWindow {
    /// The last N.
    Last(u64),
    /// Entries `start..end` (`end` past the trace: to its end).
    Entries(u64, u64),
}

/// The entries of each trace a file too large to read whole keeps when it opens: its last
/// twenty million (1.75 GB in the worker for a generated 10 GB file: `e2e/bench-window.mjs`).
pub const WINDOW_ENTRIES: u64 = 20_000_000;

/// A file being read, chunk by chunk.
pub struct Loading {
    pub(crate) name: String,
    pub(crate) total: u64,
    pub(crate) loader: Loader,
    pub(crate) started: f64,
    /// A windowed read: which entries of each trace it keeps.
    pub(crate) window: Option<ReadWindow>,
    /// A whole read failed for the size of what it held (a compressed file whose pickle is
    /// over the limit): read as a window, it would open ([`Loading::window_would_open`]).
    pub(crate) too_large: bool,
}

impl Loading {
    /// Starts reading `name` of `total` bytes; `now_ms` is the caller's clock.
    pub fn new(name: &str, total: u64, now_ms: f64) -> Self {
        Self::with_limits(name, total, now_ms, Limits::default())
    }

    /// Starts reading with other limits than this platform's.
    pub fn with_limits(name: &str, total: u64, now_ms: f64, limits: Limits) -> Self {
        let mut loader = Loader::new(limits);
        loader.set_size_hint(total);
        let window = match (limits.keep_last_entries, limits.keep_entries) {
            (Some(n), _) => Some(ReadWindow::Last(n)),
            (None, Some((a, b))) => Some(ReadWindow::Entries(a, b)),
            (None, None) => None,
        };
        Loading { name: name.to_string(), total, loader, started: now_ms, window, too_large: false }
    }

    /// Starts reading a window of `name`. Memory follows the window, so the size limit of a
    /// whole file does not apply.
    pub fn window(name: &str, total: u64, now_ms: f64, window: ReadWindow) -> Self {
        let limits = match window {
            ReadWindow::Last(n) => Limits { keep_last_entries: Some(n), ..Limits::default() },
            ReadWindow::Entries(a, b) => Limits { keep_entries: Some((a, b)), ..Limits::default() },
        };
        Self::with_limits(name, total, now_ms, limits)
    }

    /// Whether a file of `total` bytes is over what the page reads whole: it opens as a
    /// window ([`Loading::window`]).
    pub fn too_large_whole(total: u64) -> bool {
        total > Limits::default().max_pickle_bytes
    }

    /// Feeds the next slice; an error names the file, what was wrong and where.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), String> {
        self.loader.feed(chunk).map_err(|e| {
            self.too_large = self.window.is_none() && e.bound == Some(snapshot::Bound::Size);
            failed(&self.name, &e)
        })
    }

    /// After a failed [`Loading::feed`]: whether the file failed only for being too large to
    /// read whole though its size said otherwise (a compressed file whose pickle passes the
    /// limit as it decompresses, or a model over the memory limit). Read again as the window
    /// of its last [`WINDOW_ENTRIES`](WINDOW_ENTRIES) events, it would open.
    pub fn window_would_open(&self) -> bool {
        self.too_large
    }

    /// Bytes read so far.
    pub fn bytes(&self) -> u64 {
        self.loader.bytes_consumed()
    }

    /// The file's size.
    pub fn total(&self) -> u64 {
        self.total
    }
}

/// A failed read in words: the file, what and where; for a file too large for this reader,
/// what to do instead.
pub(crate) fn failed(name: &str, e: &snapshot::ReadError) -> String {
    let mut msg = format!("{name}: {e}");
    // Only for a snapshot that is simply big (its size or its memory), not for hostile
    // shapes (absurd lengths, bombs), which the command line refuses as well.
    if e.bound == Some(snapshot::Bound::Size) {
        msg.push_str(&format!(
            ". The command-line `memscape stats {name}` reads snapshots of any size, and `memscape slice {name} -o window.pickle --last 1000000` cuts a window of it that the viewer opens; a smaller one can be recorded with a lower max_entries in torch.cuda.memory._record_memory_history."
        ));
    }
    msg
}
