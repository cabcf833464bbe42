//! Messages between the page and the worker. Both ends are Rust; they travel as postcard
//! bytes. Everything here is a view model: plain numbers and strings ready to draw.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
pub use snapshot::categories::{Category, Report, Rule, Rules, Target};
pub use snapshot::diff::{Align, Diff, Profile, SiteMode};
pub use snapshot::doctor::Report as DoctorReport;
pub use snapshot::search::Query;
pub use snapshot::stats::Summary;
pub use snapshot::timeline::Band;
pub use snapshot::timeline::TimelineKind as Kind;

/// An open file.
pub type DocId = u32;

/// A question from the page.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Request {
    /// The timeline drawn in a window of steps.
    View(ViewQuery),
    /// The element at `bytes` in the column that sampled `step` (hover and click): the one
    /// there when it is at least `slack / 2` bytes (`slack` is half a pixel row: a quarter
    /// row is drawn on its own), else the largest within `slack` bytes; and where the last
    /// view drew it.
    Hit { doc: DocId, device: u32, kind: Kind, step: u32, bytes: u64, slack: u64 },
    /// Everything known about one element (hover and pin).
    Details { doc: DocId, device: u32, kind: Kind, element: u32 },
    /// A page of the event list.
    Events { doc: DocId, device: u32, first: u32, count: u32 },
    /// The allocator after an event (`None`: before the first).
    State { doc: DocId, device: u32, entry: Option<u32> },
    /// Finds elements; later views highlight them.
    Search { doc: DocId, device: u32, kind: Kind, query: Query },
    /// Clears the search highlight.
    ClearSearch { doc: DocId },
    /// Forgets a file.
    Close { doc: DocId },
    /// The user's category rules for this file (later answers use them).
    Rules { doc: DocId, rules: Rules },
    /// Bytes by category over a window, the breakdown at the peak and at `at`, the budget,
    /// iterations and leak suspects.
    Categories { doc: DocId, device: u32, start: f64, end: f64, columns: u32, at: Option<u32> },
    /// The file reduced for a diff.
    Profile { doc: DocId, device: u32 },
    /// The doctor's report of a device: every OOM (figures, verdict, holders, advice), the
    /// peak's headroom, what-if budgets.
    Doctor { doc: DocId, device: u32 },
    /// This file (B) against another's profile (A).
    Diff { doc: DocId, device: u32, a: Box<Profile>, align: Align, sites_by: SiteMode },
    /// This file's allocations as a raw memory timeline of `torch.profiler` lists them, with
    /// PyTorch's categories (for [`Request::Beside`] in another file's worker).
    TimelineRows { doc: DocId },
    /// PyTorch's categories (a raw memory timeline's rows, from its worker) beside memscape's
    /// on this trace's allocations of `device`.
    Beside { doc: DocId, device: u32, rows: Vec<snapshot::categories::Row> },
    /// The flame graph of the allocations alive after `step` (`None`: at the peak) by call
    /// stack, and the lines of the user's code holding them; with `window` (steps), bytes ×
    /// steps alive inside it instead. Frames matching `query` are flagged.
    Flame {
        doc: DocId,
        device: u32,
        step: Option<u32>,
        window: Option<(f64, f64)>,
        all_frames: bool,
        query: Option<Query>,
    },
}

/// The device number of the host's pinned memory (`snapshot::host`) in requests and
/// [`DeviceInfo`]s.
pub const HOST: u32 = u32::MAX;

/// Said for the categories, the doctor and comparisons of the host's memory.
pub const PER_GPU: &str = "categories, the doctor and comparisons are per GPU: the host's pinned memory has none";

impl Request {
    /// The device the request is about, when it is about one, to read or to change.
    pub fn device_mut(&mut self) -> Option<&mut u32> {
        match self {
            Request::View(q) => Some(&mut q.device),
            Request::Hit { device, .. }
            | Request::Details { device, .. }
            | Request::Events { device, .. }
            | Request::State { device, .. }
            | Request::Search { device, .. }
            | Request::Categories { device, .. }
            | Request::Profile { device, .. }
            | Request::Doctor { device, .. }
            | Request::Diff { device, .. }
            | Request::Beside { device, .. }
            | Request::Flame { device, .. } => Some(device),
            Request::ClearSearch { .. }
            | Request::Close { .. }
            | Request::Rules { .. }
            | Request::TimelineRows { .. } => None,
        }
    }

    /// The file the request is about.
    pub fn doc(&self) -> DocId {
        match self {
            Request::View(q) => q.doc,
            Request::Hit { doc, .. }
            | Request::Details { doc, .. }
            | Request::Events { doc, .. }
            | Request::State { doc, .. }
            | Request::Search { doc, .. }
            | Request::ClearSearch { doc }
            | Request::Close { doc }
            | Request::Rules { doc, .. }
            | Request::Categories { doc, .. }
            | Request::Profile { doc, .. }
            | Request::Doctor { doc, .. }
            | Request::Diff { doc, .. }
            | Request::TimelineRows { doc }
            | Request::Beside { doc, .. }
            | Request::Flame { doc, .. } => *doc,
        }
    }
}

/// The answer to a [`Request`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Response {
    View(ViewModel),
    Hit(Option<Details>, Vec<OutlineVm>),
    Details(Details),
    Events(EventPage),
    State(StateView),
    Search(SearchResult),
    Categories(Box<CategoriesVm>),
    Profile(Box<Profile>),
    Doctor(Box<DoctorReport>),
    Diff(Box<Diff>),
    TimelineRows(Vec<snapshot::categories::Row>),
    /// PyTorch's categories beside memscape's (its per-element list left empty: the page
    /// shows the table at the peak).
    Beside(Box<snapshot::categories::Beside>),
    Flame(Box<FlameVm>),
    /// A batch of a run's files profiled by a pool worker (which keeps nothing of them): per
    /// file, in the order given, its profile or why it could not be read (naming it).
    Ranks(Vec<Result<crate::ranks::RankProfile, String>>),
    Done,
    Error(String),
}

/// What the worker says about a load.
// One `Loaded` per file: its size does not matter, and boxing it would touch every reader.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum LoadEvent {
    Progress {
        bytes: u64,
        total: u64,
    },
    Loaded(DocInfo),
    Failed(String),
    /// The file is too large to read whole though its size said otherwise (a compressed
    /// file whose pickle passed the limit as it decompressed): the page opens the window of
    /// its last [`WINDOW_ENTRIES`] events instead, in a fresh worker.
    TooLargeWhole,
    Cancelled,
}

/// A message from the worker: the request (or load) it answers and the answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum FromWorker {
    Ready,
    /// The worker panicked (its last words); it is gone after this.
    Crashed(String),
    Load {
        id: u32,
        event: LoadEvent,
    },
    /// A whole-file analysis of a device finished (in the background or for a request):
    /// answers that depend on it come at once from now on.
    Analysed {
        doc: DocId,
        device: u32,
        what: Finished,
    },
    Reply {
        id: u32,
        response: Response,
    },
}

/// The whole-file analyses the engine runs in the background.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Finished {
    /// The categories: details carry their category from now on.
    Categories,
    /// The allocator-state checkpoints: the state after any event, and before the first,
    /// answers at once.
    AllocatorState,
}

pub use crate::loading::{ReadWindow, WINDOW_ENTRIES};

/// The load id of the bundled example, which the page's early worker (started by
/// `index.html`) reads by itself; the page's own load ids start after it.
pub const EARLY_ID: u32 = 1;

/// A message from the page. Each travels as its postcard bytes in an envelope
/// (`app/src/wire.rs`), beside at most one JS value that postcard cannot carry, which its
/// variant names: what a message is, is said by its variant, never by a position or a name.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ToWorker {
    /// Read the file that comes with the message (a `Blob`) as load `id`, named `name`:
    /// whole, or a window of it (a file over what the page reads whole opens as the window of
    /// its last [`WINDOW_ENTRIES`] without being asked).
    Open {
        id: u32,
        name: String,
        window: Option<ReadWindow>,
    },
    /// Profile the files that come with the message (an array of `File`s), named `names` in
    /// the same order, for the ranks overview, one after another and keeping nothing of them:
    /// answered once all are read, as a reply to request `id` ([`Response::Ranks`]). A batch
    /// of files is one message each way: a message costs the page more than a profile's
    /// figures ([`crate::ranks::batches`]).
    Ranks {
        id: u32,
        names: Vec<String>,
    },
    Request {
        id: u32,
        request: Request,
    },
    /// A spare worker, idle: open a small generated snapshot and forget it, so that the
    /// next file meets optimised code ([`crate::warm`]). Dropped when a file comes.
    Warm,
    /// The first view the page will ask of the file this worker is reading: drawn as soon
    /// as the file is read (or at once, if it is), answered as request `id`. The page's
    /// thread may be busy when the file is read (building the page, or the views it lays
    /// out while the file loads); the worker need not wait for it to ask. For load `load`
    /// only: a worker that reads another file ignores it (the page's early worker can be
    /// asked before its file has arrived, and become the spare if it never does).
    Ahead {
        id: u32,
        load: u32,
        first: FirstView,
    },
}

/// A file's first view, as far as the page knows it before the file is read: its plot and
/// colours. The rest is the file's: its default device, the whole trace, in blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FirstView {
    pub columns: u32,
    pub rows: u32,
    pub baseline: bool,
    pub palette: PaletteVm,
}

impl FirstView {
    /// The query of the view, once the file is known: what the page asks for a tab just
    /// opened (`Tab::new` in the app: the file's first device, [`DocInfo::first_device`],
    /// the whole trace, blocks, no zoom, no pin).
    pub fn query(&self, doc: DocId, device: u32) -> ViewQuery {
        ViewQuery {
            doc,
            device,
            kind: Kind::Blocks,
            start: 0.0,
            end: 0.0,
            columns: self.columns,
            rows: self.rows,
            y: None,
            baseline: self.baseline,
            totals_only: false,
            pinned: None,
            palette: self.palette,
        }
    }
}

/// A file that finished loading.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DocInfo {
    pub doc: DocId,
    pub name: String,
    pub bytes: u64,
    pub format: String,
    pub warnings: Vec<String>,
    pub devices: Vec<DeviceInfo>,
    /// The device to show first (`Snapshot::default_device`: the first that ran out of
    /// memory, else the one with most events; never an empty one).
    pub default_device: Option<u32>,
    pub summary: Summary,
    /// Worker-side time from the first slice asked for to the model built, ms (the reads
    /// included), and then to the default device's layout.
    pub parse_ms: f64,
    pub layout_ms: f64,
    /// Of `parse_ms`, the time spent waiting on the browser for the file's bytes (set by the
    /// worker; 0 natively).
    pub read_ms: f64,
    /// Bytes the model holds.
    pub model_bytes: u64,
    /// The worker's whole memory after loading (set by the worker; 0 natively).
    pub heap_bytes: u64,
    /// The window this load read, if it read one (`summary.window` also names one for a file
    /// `memscape slice` cut, read whole).
    pub read_window: Option<ReadWindow>,
}

impl DocInfo {
    /// The statistics of a device (of the host's pinned memory for [`HOST`]).
    pub fn device_summary(&self, device: u32) -> Option<&snapshot::stats::DeviceSummary> {
        if device == HOST {
            return self.summary.host.as_deref();
        }
        self.summary.devices.iter().find(|d| d.device == i64::from(device))
    }

    /// The device a new tab of the file shows: the default one, else device 0 (a file with
    /// no trace and no segments).
    pub fn first_device(&self) -> u32 {
        self.default_device.unwrap_or(0)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub device: u32,
    pub entries: u64,
    /// Out-of-memory events in its trace.
    pub ooms: u64,
    pub segments: u64,
    pub has_time: bool,
}

/// A window of the timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewQuery {
    pub doc: DocId,
    pub device: u32,
    pub kind: Kind,
    /// First step (fractional).
    pub start: f64,
    /// End step (exclusive).
    pub end: f64,
    /// Pixel columns.
    pub columns: u32,
    /// Pixel rows of the plot: elements thinner than a fraction of a row are blended with
    /// their neighbours instead of drawn on their own.
    pub rows: u32,
    /// The bytes the plot spans, bottom to top (y zoom); `None`: from 0 (or the baseline)
    /// to a little above the peak.
    pub y: Option<(u64, u64)>,
    /// With no `y`, start the axis at the bytes that stay the same through the window
    /// (when they are at least a tenth of the peak).
    pub baseline: bool,
    /// Leave out bands (the minimap needs only the totals).
    pub totals_only: bool,
    /// Drawn in its own colour.
    pub pinned: Option<u32>,
    /// Colours of the page's theme.
    pub palette: PaletteVm,
}

/// The theme's colours for what is not an element (0xRRGGBB).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaletteVm {
    pub summarized: u32,
    pub hit: u32,
    pub pinned: u32,
}

impl Default for PaletteVm {
    fn default() -> Self {
        PaletteVm { summarized: 0xa4aab1, hit: 0xd3372c, pinned: 0x1d1f23 }
    }
}

/// What to draw.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ViewModel {
    pub n_steps: u32,
    /// The window drawn (the query's, or the whole trace when the query's was empty).
    pub start: f64,
    pub end: f64,
    /// The peak of the whole trace, bytes.
    pub y_max: u64,
    /// Bytes at the bottom and at the top of the plot.
    pub y_lo: u64,
    pub y_top: u64,
    /// Bytes at the bottom that stay the same through the window (the baseline, whether or
    /// not the axis starts there).
    pub stable_bytes: u64,
    pub peak_step: u32,
    pub peak_bytes: u64,
    pub columns: Vec<ColumnVm>,
    /// The drawn bands (not sent: the page gets them as `pixels`), shared with the engine's
    /// record of the last view drawn (what a hover outlines) rather than copied.
    #[serde(skip)]
    pub bands: Arc<Vec<Band>>,
    /// The plot area, `columns.len()` x `rows` RGBA pixels from the top (sent beside the
    /// message as a transferable buffer, not through postcard).
    #[serde(skip)]
    pub pixels: Vec<u8>,
    /// Steps of out-of-memory events.
    pub ooms: Vec<u32>,
    /// Their trace entries (what the doctor names them by).
    pub oom_entries: Vec<u32>,
    /// `record_function` spans from `external_annotations`.
    pub spans: Vec<SpanVm>,
    /// Search matches in the whole timeline.
    pub hits: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ColumnVm {
    pub step: u32,
    pub total: u64,
    /// Bytes drawn as bands (all of `total`, unless the trace disagrees with itself: the
    /// rest is summarized on top in grey).
    pub drawn: u64,
    pub time_us: Option<i64>,
    /// Segment views: bytes allocated to tensors after the same event.
    pub allocated: Option<u64>,
}

/// Where a view drew one element: a run of columns at one offset.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutlineVm {
    pub first: u32,
    pub last: u32,
    pub offset: u64,
    pub size: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SpanVm {
    pub name: String,
    /// Steps (fractional).
    pub start: f64,
    pub end: f64,
    /// Row within the lane (nested spans go lower).
    pub depth: u32,
    /// An END without a START (drawn from the beginning of the trace).
    pub unmatched_end: bool,
    /// A START without an END (drawn to the end).
    pub unmatched_start: bool,
}

/// One element, for the details panel.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Details {
    pub element: u32,
    pub kind: Kind,
    pub addr: u64,
    pub size: u64,
    pub requested: Option<u64>,
    pub stream: Option<i64>,
    pub pool: Option<(u64, u64)>,
    pub time_us: Option<i64>,
    pub start_step: u32,
    pub end_step: u32,
    pub alloc_entry: Option<u32>,
    pub free_entry: Option<u32>,
    /// Live bytes right after it was allocated.
    pub total_after: u64,
    pub compile_context: Option<String>,
    pub user_metadata: Option<String>,
    pub category: Option<String>,
    /// Blocks: what it is for and the rule that decided it.
    pub class: Option<(Category, String)>,
    /// Blocks: the categories are still being worked out in the background; `class` comes
    /// with a later answer (the worker says `FromWorker::Analysed` when it is ready).
    pub class_pending: bool,
    /// `Allocated in the trace`, `Freed in the trace, allocated before recording began`, ...
    pub origin: String,
    /// Why it has no stack, where the file tells (`snapshot::history::no_stack_cause`).
    pub no_stack: Option<String>,
    /// Where a backward allocation's tensor was created in forward (`forward_frames`): its
    /// innermost user line, and the whole traceback.
    pub forward_site: Option<String>,
    pub forward_frames: Option<String>,
    /// Labels put on it after the fact (`annotate` entries), oldest first.
    pub labels: Vec<String>,
    pub frames: Vec<String>,
    pub all_frames: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EventPage {
    pub total: u32,
    pub first: u32,
    pub rows: Vec<EventRow>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EventRow {
    pub entry: u32,
    pub action: String,
    pub addr: u64,
    pub size: u64,
    pub stream: i64,
    pub time_us: Option<i64>,
    /// The line of code it is charged to (`snapshot::sites::site_name`: the user's own
    /// line, compiled code's original line, a C++ stack's node and op); empty without one.
    pub frame: String,
}

/// The allocator after an event.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StateView {
    pub after_entry: Option<u32>,
    /// The event's step on the allocation timeline.
    pub step: Option<u32>,
    pub reserved: u64,
    pub allocated: u64,
    pub internal_free: u64,
    pub external_free: u64,
    pub pending_frees: u32,
    pub private_pools: u32,
    /// Each private pool on each stream, by pool id then stream.
    pub pools: Vec<PoolVm>,
    pub segments: Vec<SegmentVm>,
    /// Blocks whose segment is unknown (trace started after the segment was made).
    pub orphan_blocks: u32,
}

/// A private pool (CUDA graph, `MemPool`) on one stream in an allocator state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolVm {
    pub pool: (u64, u64),
    pub stream: i64,
    pub segments: u32,
    pub reserved: u64,
    /// Requested bytes of its live blocks.
    pub allocated: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SegmentVm {
    pub address: u64,
    pub size: u64,
    pub stream: i64,
    pub pool: Option<(u64, u64)>,
    pub expandable: bool,
    pub blocks: Vec<BlockVm>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BlockVm {
    /// Bytes from the segment's start.
    pub offset: u64,
    pub size: u64,
    pub requested: u64,
    pub pending_free: bool,
    pub rgb: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SearchResult {
    pub count: u32,
    /// Matching elements with their lifetimes (steps), in element order.
    pub matches: Vec<(u32, u32, u32)>,
}

/// The category view of one device.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CategoriesVm {
    pub n_steps: u32,
    pub start: f64,
    pub end: f64,
    /// Per pixel column: the sampled step and bytes per category (in `Category::ALL` order).
    pub columns: Vec<(u32, [u64; snapshot::categories::N])>,
    /// Colours of the categories (0xRRGGBB, `Category::ALL` order).
    pub colours: [u32; snapshot::categories::N],
    pub report: Report,
    /// The breakdown at the asked step.
    pub selected: Option<(u32, [u64; snapshot::categories::N])>,
    /// Total bytes after the asked step.
    pub selected_total: Option<u64>,
}

/// A flame graph: the tree in pre-order (a parent before its children, children heaviest
/// first, node 0 the root) and the lines of code. Weights are bytes, or byte-steps over a
/// window.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FlameVm {
    pub n_steps: u32,
    /// The step shown (`None`: before the first step, or a window).
    pub step: Option<u32>,
    /// The window of steps weighed (bytes × lifetime).
    pub window: Option<(u32, u32)>,
    /// Where the peak is (`None`: before the first step).
    pub peak_step: Option<u32>,
    pub peak_bytes: u64,
    /// The root's weight.
    pub total: u64,
    pub nodes: Vec<FlameNodeVm>,
    /// Nodes whose frame matches the search.
    pub hits: u32,
    /// Heaviest first (the first `engine::flame::LINES`).
    pub lines: Vec<FlameLineVm>,
    /// All the lines there are.
    pub n_lines: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FlameNodeVm {
    pub parent: Option<u32>,
    pub depth: u32,
    /// The frame's function, or what the node stands for (`all`, `(no stack recorded)`).
    pub name: String,
    pub file: String,
    pub line: i64,
    pub weight: u64,
    /// Of elements whose stack ends here.
    pub self_weight: u64,
    /// Of children too light to send.
    pub pruned: u64,
    /// Where it starts on its row, in the root's weight.
    pub offset: u64,
    /// Elements under it.
    pub count: u32,
    /// The colour of its heaviest element on the timeline.
    pub rgb: u32,
    /// Its frame matches the search.
    pub hit: bool,
}

/// A line of the user's code (the diff's call site) and what it holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FlameLineVm {
    pub site: String,
    pub weight: u64,
    pub count: u32,
    /// The colour of its heaviest element on the timeline.
    pub rgb: u32,
}
