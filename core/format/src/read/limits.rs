//! The reader's resource limits ([`Limits`], public), and the windowed reads they ask for.

/// Resource limits of one read.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The reader refuses a snapshot whose working memory would exceed this.
    pub max_memory_bytes: u64,
    /// Longest single string or bytes value.
    pub max_string_bytes: u64,
    /// Largest pickle stream (after decompression) the reader takes whole. A file known to be
    /// larger is refused before it is read; a compressed one when its output passes this. A
    /// windowed read ([`Limits::keep_last_entries`]) takes any size.
    pub max_pickle_bytes: u64,
    /// A windowed read: each trace keeps only its last this many entries
    /// ([`Trace::dropped`](crate::model::Trace::dropped) counts the others), and the memo
    /// forgets what only those entries used, so memory follows the window, not the file.
    /// `None`: the whole trace.
    pub keep_last_entries: Option<u64>,
    /// A windowed read of entries `start..end` of each trace (file indices; `end` past the
    /// trace: to its end). What follows the window is reduced as it goes to what the
    /// allocator state at the window's end needs (`slice::settle_tail`).
    pub keep_entries: Option<(u64, u64)>,
}

impl Limits {
    /// Whether this is a windowed read (of the last entries, or of a range).
    pub fn windowed(&self) -> bool {
        self.keep_last_entries.is_some() || self.keep_entries.is_some()
    }

    /// The largest pickle this read takes: [`Limits::max_pickle_bytes`], or any size for a
    /// windowed read, whose memory follows its window.
    pub fn whole_file_cap(&self) -> u64 {
        if self.windowed() {
            u64::MAX
        } else {
            self.max_pickle_bytes
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        let wasm = cfg!(target_pointer_width = "32");
        Limits {
            max_memory_bytes: if wasm { 3 << 30 } else { 64 << 30 },
            max_string_bytes: if wasm { 256 << 20 } else { 2 << 30 },
            // Measured in Chromium on generated snapshots (the densest: ~94 bytes an event):
            // 2.87 GiB opens with 3.3 GiB of wasm memory; at 2.98 GiB an array of the layout
            // outgrows wasm32's largest allocation (2 GiB). See docs/benchmarks.md.
            max_pickle_bytes: if wasm { 23 << 27 } else { u64::MAX },
            keep_last_entries: None,
            keep_entries: None,
        }
    }
}
