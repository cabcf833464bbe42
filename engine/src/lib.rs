//! `engine` is the viewer's store: it holds the open snapshots and answers the page's
//! questions ([`protocol::Request`]) with view models ([`protocol::Response`]). It runs in
//! the Web Worker, but is plain Rust over plain data, so everything the viewer shows is
//! tested natively here. Layout, colours and summaries are decided here; the page only
//! turns view models into pixels.

#![deny(missing_docs)]

pub mod flame;
pub mod preview;
#[allow(missing_docs)]
pub mod protocol;
pub mod ranks;
#[allow(missing_docs)]
pub mod raster;
pub mod warm;
pub mod window;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use protocol::*;
use snapshot::categories::{Analysis, Categories, Compiled};
use snapshot::labels::Labels;
use snapshot::state::{StateBuilder, StateIndex};
use snapshot::timeline::{LodQuery, Origin, Timeline};
use snapshot::{frames, history, search, sites, stats, Action, Limits, Loader, Snapshot};

/// A file being read, chunk by chunk.
pub struct Loading {
    name: String,
    total: u64,
    loader: Loader,
    started: f64,
    /// A windowed read: which entries of each trace it keeps.
    window: Option<ReadWindow>,
    /// A whole read failed for the size of what it held (a compressed file whose pickle is
    /// over the limit): read as a window, it would open ([`Loading::window_would_open`]).
    too_large: bool,
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
    /// of its last [`WINDOW_ENTRIES`](protocol::WINDOW_ENTRIES) events, it would open.
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

struct Lane {
    timeline: Timeline,
    /// Out-of-memory events: (step, trace entry).
    ooms: Vec<(u32, u32)>,
    spans: Vec<SpanVm>,
    /// Search hits: a flag per element and their count.
    hits: Option<(Vec<bool>, u32)>,
    /// The bands of the last view drawn (what a hover outlines).
    drawn: Arc<Vec<Band>>,
    /// The baseline of the last view (the next view's first guess).
    baseline: Option<u64>,
    /// The `annotate` entries by the allocation they label.
    labels: Labels,
    /// [`Kind::PoolEnvelopes`]: the private pool of each envelope element (the last ones).
    pieces: Vec<(snapshot::PoolId, i64)>,
}

impl Lane {
    /// A laid-out timeline with its OOM and annotation lanes.
    fn new(snap: &Snapshot, timeline: Timeline) -> Lane {
        let device = timeline.device() as u32;
        let trace = snap.trace(device as usize);
        let ooms = (0..trace.len())
            .filter(|&i| trace.action(i) == Action::Oom)
            .map(|i| (timeline.step_of_entry(i as u32), i as u32))
            .collect();
        let spans = spans(snap, &timeline, device);
        let labels =
            if timeline.kind() == Kind::Blocks { Labels::new(snap, device as usize) } else { Labels::default() };
        Lane { timeline, ooms, spans, hits: None, drawn: Arc::default(), baseline: None, labels, pieces: Vec::new() }
    }

    /// Where the last view drew `element` (nothing when it was not drawn on its own).
    fn outline(&self, element: u32) -> Vec<OutlineVm> {
        self.drawn
            .iter()
            .filter(|b| b.element == Some(element))
            .map(|b| OutlineVm {
                first: b.first_column,
                last: b.last_column,
                offset: b.offset_bytes,
                size: b.size_bytes,
            })
            .collect()
    }
}

struct Doc {
    info: DocInfo,
    snap: Snapshot,
    lanes: HashMap<(u32, Kind), Lane>,
    states: HashMap<u32, StateIndex>,
    rules: Compiled,
    /// Categories per device, made with `rules`.
    cats: HashMap<u32, (Categories, Report)>,
    /// The doctor's report per device, made with `rules` (asked again on every visit to the
    /// doctor and every click on an OOM mark: made once).
    doctors: HashMap<u32, snapshot::doctor::Report>,
    /// Whole-file analyses under way in the background, first in line first.
    jobs: VecDeque<Job>,
    /// Analyses finished since the caller last asked ([`Engine::take_finished`]).
    finished: Vec<(u32, Finished)>,
    /// The pinned host memory as a file of its own whose device 0 is the host
    /// (`snapshot::host`): requests for device [`HOST`] go there.
    host: Option<Box<Doc>>,
    /// This is a file's host memory: no categories (they stay per GPU).
    is_host: bool,
}

/// A whole-file analysis done in slices by [`Engine::work`], so that no view, hit or
/// details request waits for it; a request that needs its result finishes it at once.
enum Job {
    /// The categories of a device (its blocks timeline is laid out).
    Categories(u32, Box<Analysis>),
    /// The allocator-state checkpoints of a device.
    State(u32, Box<StateBuilder>),
}

impl Job {
    fn device(&self) -> u32 {
        match self {
            Job::Categories(d, _) | Job::State(d, _) => *d,
        }
    }
}

/// The open files.
#[derive(Default)]
pub struct Engine {
    docs: HashMap<DocId, Doc>,
}

/// A failed read in words: the file, what and where; for a file too large for this reader,
/// what to do instead.
fn failed(name: &str, e: &snapshot::ReadError) -> String {
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

impl Engine {
    /// An engine with nothing open.
    pub fn new() -> Self {
        Self::default()
    }

    /// Finishes a load: the snapshot is kept as `doc` (the caller's name for it) and its
    /// default device laid out. `now_ms` is the caller's clock (the worker has no `Instant`).
    pub fn finish(&mut self, doc: DocId, loading: Loading, now_ms: &dyn Fn() -> f64) -> Result<DocInfo, String> {
        let name = loading.name.clone();
        let loaded = loading.loader.finish().map_err(|e| failed(&name, &e))?;
        let parsed = now_ms();
        let mut snap = loaded.snapshot;
        if let Some(w) = loading.window {
            let index = |i: u64| usize::try_from(i).unwrap_or(usize::MAX);
            let rule = match w {
                ReadWindow::Last(n) => snapshot::slice::Window::Last(index(n)),
                ReadWindow::Entries(a, b) => snapshot::slice::Window::Entries {
                    start: index(a),
                    end: Some(index(b)).filter(|&b| b < usize::MAX),
                },
            };
            snapshot::slice::mark_window(&mut snap, &name, &rule);
        }
        // The summary lays out every device; the default one's layout is kept for its lane.
        let default_device = snap.default_device();
        let mut first_lane = None;
        let summary = stats::summary_with(&snap, |tl| {
            if Some(tl.device()) == default_device {
                first_lane = Some(tl);
            }
        });
        let segments = snap.segments_by_device();
        let devices = snap
            .devices()
            .into_iter()
            .map(|d| DeviceInfo {
                device: d as u32,
                entries: snap.trace(d).len() as u64,
                ooms: snapshot::doctor::oom_entries(&snap, d).len() as u64,
                segments: segments.get(&(d as i64)).map_or(0, |s| s.0 as u64),
                has_time: snap.trace(d).has_time(),
            })
            .collect();
        let mut info = DocInfo {
            doc,
            name,
            bytes: loading.total,
            format: loaded.format.to_string(),
            warnings: loaded.warnings.iter().map(|w| w.to_string()).collect(),
            devices,
            default_device: default_device.map(|d| d as u32),
            summary,
            parse_ms: parsed - loading.started,
            layout_ms: 0.0,
            read_ms: 0.0,
            model_bytes: snap.heap_bytes() as u64,
            heap_bytes: 0,
            read_window: loading.window,
        };
        let host = snapshot::host::as_snapshot(&snap).map(|h| {
            let entries = h.trace(0).len() as u64;
            info.devices.push(DeviceInfo {
                device: HOST,
                entries,
                ooms: 0,
                segments: h.segments.len() as u64,
                has_time: h.trace(0).has_time(),
            });
            Box::new(Doc::new(info.clone(), h, true))
        });
        let mut d = Doc::new(info, snap, false);
        d.host = host;
        // The default device is laid out now (by the summary); its analyses wait for its first
        // view, so that nothing delays the first picture.
        if let Some(tl) = first_lane {
            let lane = Lane::new(&d.snap, tl);
            d.lanes.insert((lane.timeline.device() as u32, Kind::Blocks), lane);
        }
        d.info.layout_ms = now_ms() - parsed;
        let info = d.info.clone();
        self.docs.insert(doc, d);
        Ok(info)
    }

    /// Does about `units` units (entries, elements or steps) of the background analyses and
    /// returns whether any is left: the caller answers waiting requests between two calls.
    /// What is scheduled: the categories and the allocator-state checkpoints of every device
    /// that has been viewed, so that the category of a hovered allocation, the category view
    /// and the allocator state are ready before they are asked for.
    pub fn work(&mut self, units: usize) -> bool {
        for d in self.docs.values_mut() {
            if !d.jobs.is_empty() {
                d.work(units);
                break;
            }
            if let Some(h) = d.host.as_deref_mut().filter(|h| !h.jobs.is_empty()) {
                h.work(units);
                break;
            }
        }
        self.has_work()
    }

    /// The analyses finished since the last call, in the background or for a request: the
    /// worker tells the page, which asks again for what was waiting on them.
    pub fn take_finished(&mut self) -> Vec<(DocId, u32, Finished)> {
        let mut out = Vec::new();
        for (&id, d) in &mut self.docs {
            out.extend(d.finished.drain(..).map(|(device, what)| (id, device, what)));
            if let Some(h) = d.host.as_deref_mut() {
                out.extend(h.finished.drain(..).map(|(_, what)| (id, HOST, what)));
            }
        }
        out
    }

    /// No file is open.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Background work is left ([`Engine::work`]).
    pub fn has_work(&self) -> bool {
        self.docs.values().any(|d| !d.jobs.is_empty() || d.host.as_ref().is_some_and(|h| !h.jobs.is_empty()))
    }

    /// Answers one request.
    pub fn handle(&mut self, req: Request) -> Response {
        let doc_id = req.doc();
        if let Request::Close { doc } = req {
            self.docs.remove(&doc);
            return Response::Done;
        }
        let Some(doc) = self.docs.get_mut(&doc_id) else {
            return Response::Error(format!("no open file #{doc_id}"));
        };
        // The host's pinned memory is a file of its own, its device 0.
        let mut req = req;
        let per_gpu = matches!(
            req,
            Request::Categories { .. } | Request::Doctor { .. } | Request::Profile { .. } | Request::Diff { .. }
        );
        let doc = match req.device_mut() {
            Some(d) if *d == HOST => {
                *d = 0;
                match doc.host.as_deref_mut() {
                    Some(_) if per_gpu => return Response::Error(PER_GPU.into()),
                    Some(h) => h,
                    None => return Response::Error("this file recorded no pinned host memory".into()),
                }
            }
            _ => doc,
        };
        match req {
            Request::View(q) => Response::View(doc.view(&q)),
            Request::Hit { device, kind, step, bytes, slack, .. } => {
                let lane = doc.lane(device, kind);
                let el = lane.timeline.element_near(step, bytes, slack);
                let outline = el.map_or_else(Vec::new, |el| lane.outline(el));
                Response::Hit(el.and_then(|el| doc.details(device, kind, el)), outline)
            }
            Request::Details { device, kind, element, .. } => match doc.details(device, kind, element) {
                Some(d) => Response::Details(d),
                None => Response::Error(format!("no element {element}")),
            },
            Request::Events { device, first, count, .. } => Response::Events(doc.events(device, first, count)),
            Request::State { device, entry, .. } => Response::State(doc.state(device, entry)),
            Request::Search { device, kind, query, .. } => match doc.search(device, kind, &query) {
                Ok(r) => Response::Search(r),
                Err(e) => Response::Error(e),
            },
            Request::ClearSearch { .. } => {
                doc.clear_search();
                if let Some(h) = doc.host.as_deref_mut() {
                    h.clear_search();
                }
                Response::Done
            }
            Request::Close { .. } => Response::Done,
            Request::Rules { rules, .. } => match rules.compile() {
                Ok(c) => {
                    if doc.rules.rules() != &rules {
                        doc.rules = c;
                        // Analyses made or begun with the old rules start again.
                        let mut devices: Vec<u32> = doc.cats.drain().map(|(d, _)| d).collect();
                        doc.doctors.clear();
                        doc.jobs.retain(|j| match j {
                            Job::Categories(d, _) => {
                                devices.push(*d);
                                false
                            }
                            Job::State(..) => true,
                        });
                        devices.sort_unstable();
                        devices.dedup();
                        for d in devices {
                            doc.schedule(d);
                        }
                    }
                    Response::Done
                }
                Err(e) => Response::Error(e),
            },
            Request::Categories { device, start, end, columns, at, .. } => {
                Response::Categories(Box::new(doc.categories_vm(device, start, end, columns, at)))
            }
            Request::Profile { device, .. } => Response::Profile(Box::new(doc.profile(device))),
            Request::Doctor { device, .. } => Response::Doctor(Box::new(doc.doctor(device))),
            Request::Diff { device, a, align, sites_by, .. } => {
                let b = doc.profile(device);
                Response::Diff(Box::new(snapshot::diff::diff(&a, &b, align, sites_by)))
            }
            Request::Flame { device, step, window, all_frames, query, .. } => {
                doc.lane(device, Kind::Blocks);
                let tl = &doc.lanes[&(device, Kind::Blocks)].timeline;
                flame::view(&doc.snap, tl, step, window, all_frames, query.as_ref())
                    .map_or_else(Response::Error, |v| Response::Flame(Box::new(v)))
            }
        }
    }
}

/// Colours of the categories, in `Category::ALL` order: parameters and optimizer state in
/// cool blues (they sit at the bottom and rarely change), gradients green, inputs and
/// activations warm, the short-lived ones light, unknown grey, memory outside PyTorch's allocator
/// teal, memory from before the recording not split into parameters and optimizer state slate.
pub const CATEGORY_COLOURS: [u32; snapshot::categories::N] =
    [0x3b6ea5, 0x6a51a3, 0x2e9a5b, 0xb07d2b, 0xe0663a, 0xd99ac0, 0xf2c14e, 0xa4aab1, 0x17847f, 0x7d88a8];

/// Elements as thin as `1 / SUBPIXEL` of a pixel row are still drawn on their own.
pub const SUBPIXEL: u64 = 4;

/// Room above the highest total: the y axis ends at `y_max * HEADROOM`.
pub const HEADROOM: f64 = 1.04;

/// The smallest element drawn on its own when `span` bytes span `rows` pixel rows.
pub fn min_bytes(span: u64, rows: u32) -> u64 {
    (span / (u64::from(rows.max(1)) * SUBPIXEL)).max(1)
}

/// A baseline shorter than this share of the peak leaves the axis at zero: it would
/// stretch the plot by less than a tenth.
const BASELINE_SHARE: f64 = 0.1;

/// The memory axis when the user has not zoomed it: from the baseline (`stable` bytes, when
/// asked for, at least a tenth of the peak and below it) or zero, to a little above the peak.
/// Where nothing moves (a trace of one step, a window where nothing changes) every byte is
/// stable: the axis starts at zero, else the plot would show nothing.
pub fn natural_axis(peak: u64, stable: u64, baseline: bool) -> (u64, u64) {
    let lo = if baseline && stable as f64 >= BASELINE_SHARE * peak as f64 && stable < peak { stable } else { 0 };
    (lo, lo + ((peak - lo) as f64 * HEADROOM).ceil() as u64)
}

pub use snapshot::timeline::colour;

impl Doc {
    fn new(info: DocInfo, snap: Snapshot, is_host: bool) -> Doc {
        Doc {
            info,
            snap,
            lanes: HashMap::new(),
            states: HashMap::new(),
            rules: Compiled::default(),
            cats: HashMap::new(),
            doctors: HashMap::new(),
            jobs: VecDeque::new(),
            finished: Vec::new(),
            host: None,
            is_host,
        }
    }

    /// Puts the analyses of `device` in line for the background, unless they are done or
    /// already in line, and moves them to the front: the device on screen goes first. Its
    /// blocks timeline must be laid out.
    fn schedule(&mut self, device: u32) {
        let Some(lane) = self.lanes.get(&(device, Kind::Blocks)) else { return };
        let queued = |jobs: &VecDeque<Job>, cats: bool| {
            jobs.iter().any(|j| j.device() == device && matches!(j, Job::Categories(..)) == cats)
        };
        if !self.is_host && !self.cats.contains_key(&device) && !queued(&self.jobs, true) {
            let a = Analysis::new(&self.snap, &lane.timeline, &self.rules);
            self.jobs.push_back(Job::Categories(device, Box::new(a)));
        }
        if !self.states.contains_key(&device) && !queued(&self.jobs, false) {
            self.jobs.push_back(Job::State(device, Box::new(StateBuilder::new(&self.snap, device as usize))));
        }
        // Stable: each device's categories stay before its state.
        self.jobs.make_contiguous().sort_by_key(|j| j.device() != device);
    }

    /// A slice of the first job in line.
    fn work(&mut self, units: usize) {
        let Some(job) = self.jobs.front_mut() else { return };
        let done = match job {
            // A job is only put in line with its lane laid out, and lanes stay.
            Job::Categories(device, a) => match self.lanes.get(&(*device, Kind::Blocks)) {
                Some(lane) => a.work(&self.snap, &lane.timeline, units),
                None => {
                    debug_assert!(false, "categories in line for device {device} without its timeline");
                    true
                }
            },
            Job::State(_, b) => b.work(&self.snap, units),
        };
        if !done {
            return;
        }
        match self.jobs.pop_front() {
            Some(Job::Categories(device, a)) => self.finish_categories(device, Some(*a)),
            Some(Job::State(device, b)) => self.finish_state(device, *b),
            None => {}
        }
    }

    /// Finishes the categories of `device` now: from where the background got to, or from
    /// the start.
    fn finish_categories(&mut self, device: u32, begun: Option<Analysis>) {
        let (snap, rules) = (&self.snap, &self.rules);
        let Some(lane) = self.lanes.get(&(device, Kind::Blocks)) else { return };
        let tl = &lane.timeline;
        let cats = begun.unwrap_or_else(|| Analysis::new(snap, tl, rules)).finish(snap, tl);
        // The findings are made once with the categories; views only add columns.
        let report = cats.report(tl, rules.rules());
        self.cats.insert(device, (cats, report));
        self.finished.push((device, Finished::Categories));
    }

    fn finish_state(&mut self, device: u32, b: StateBuilder) {
        self.states.insert(device, b.finish(&self.snap));
        self.finished.push((device, Finished::AllocatorState));
    }

    /// The categories of `device`, finishing their analysis now if it is not done.
    fn categories(&mut self, device: u32) -> &Categories {
        self.lane(device, Kind::Blocks);
        if !self.cats.contains_key(&device) {
            let begun = self.jobs.iter().position(|j| matches!(j, Job::Categories(d, _) if *d == device));
            let begun = begun.and_then(|k| self.jobs.remove(k)).and_then(|j| match j {
                Job::Categories(_, a) => Some(*a),
                Job::State(..) => None,
            });
            self.finish_categories(device, begun);
        }
        &self.cats[&device].0
    }

    /// The allocator-state index of `device`, finishing its checkpoints now if needed.
    fn state_index(&mut self, device: u32) -> &StateIndex {
        if !self.states.contains_key(&device) {
            let begun = self.jobs.iter().position(|j| matches!(j, Job::State(d, _) if *d == device));
            let builder = match begun.and_then(|k| self.jobs.remove(k)) {
                Some(Job::State(_, b)) => *b,
                _ => StateBuilder::new(&self.snap, device as usize),
            };
            self.finish_state(device, builder);
        }
        &self.states[&device]
    }

    fn categories_vm(&mut self, device: u32, start: f64, end: f64, columns: u32, at: Option<u32>) -> CategoriesVm {
        self.categories(device);
        let tl = &self.lanes[&(device, Kind::Blocks)].timeline;
        let (cats, report) = &self.cats[&device];
        let n = f64::from(tl.n_steps());
        let (start, end) = if end > start { (start, end) } else { (0.0, n) };
        let at = at.filter(|&s| s < tl.n_steps());
        CategoriesVm {
            n_steps: tl.n_steps(),
            start,
            end,
            columns: cats.columns(tl, start, end, columns),
            colours: CATEGORY_COLOURS,
            report: report.clone(),
            selected: at.map(|s| (s, cats.bytes_at(tl, s))),
            selected_total: at.map(|s| tl.totals()[s as usize]),
        }
    }

    fn profile(&mut self, device: u32) -> Profile {
        self.categories(device);
        let tl = &self.lanes[&(device, Kind::Blocks)].timeline;
        snapshot::diff::profile(&self.snap, tl, &self.cats[&device].0)
    }

    /// The doctor's report: needs the device's categories and allocator-state checkpoints
    /// (finished now if the background has not).
    fn doctor(&mut self, device: u32) -> snapshot::doctor::Report {
        if let Some(r) = self.doctors.get(&device) {
            return r.clone();
        }
        self.categories(device);
        self.state_index(device);
        let tl = &self.lanes[&(device, Kind::Blocks)].timeline;
        let r = snapshot::doctor::diagnose(&self.snap, tl, &self.cats[&device].0, &self.states[&device]);
        self.doctors.insert(device, r.clone());
        r
    }

    fn lane(&mut self, device: u32, kind: Kind) -> &mut Lane {
        if kind == Kind::PoolEnvelopes && !self.lanes.contains_key(&(device, kind)) {
            // Laid out from the blocks timeline, with the pool of each envelope element.
            self.lane(device, Kind::Blocks);
            let base = &self.lanes[&(device, Kind::Blocks)].timeline;
            let (tl, pieces) = snapshot::pools::envelope_timeline(&self.snap, base);
            let mut lane = Lane::new(&self.snap, tl);
            lane.pieces = pieces;
            self.lanes.insert((device, kind), lane);
        }
        let snap = &self.snap;
        self.lanes
            .entry((device, kind))
            .or_insert_with(|| Lane::new(snap, Timeline::build(snap, device as usize, kind)))
    }

    fn clear_search(&mut self) {
        for lane in self.lanes.values_mut() {
            lane.hits = None;
        }
    }

    fn view(&mut self, q: &ViewQuery) -> ViewModel {
        self.lane(q.device, Kind::Blocks);
        self.lane(q.device, q.kind);
        self.schedule(q.device);
        let blocks = &self.lanes[&(q.device, Kind::Blocks)].timeline;
        let lane = &self.lanes[&(q.device, q.kind)];
        let tl = &lane.timeline;
        // Allocated bytes after the event behind a segment step (the two timelines count
        // steps differently, so they meet at trace entries).
        let allocated = |step: u32| -> Option<u64> {
            if q.kind != Kind::Segments {
                return None;
            }
            Some(tl.step_entry(step).map_or(blocks.final_bytes(), |e| blocks.total_after_entry(e)))
        };
        let y_max = tl.peak_bytes().max(1);
        let n = f64::from(tl.n_steps());
        let (start, end) = if q.end > q.start { (q.start, q.end) } else { (0.0, n) };
        let hits = lane.hits.as_ref().map(|(h, _)| h.as_slice());
        // Elements down to 1/SUBPIXEL of a pixel row are bands of their own (thin bands
        // blend into a texture, as in PyTorch's viewer, and stay hoverable); runs of smaller
        // ones are blended in their place in the stack.
        let lod_of = |lo: u64, hi: u64| {
            let min_bytes = if q.totals_only { u64::MAX } else { min_bytes(hi.saturating_sub(lo), q.rows) };
            tl.lod_marked(&LodQuery { start, end, columns: q.columns, min_bytes }, hits)
        };
        let zoomed = q.y.filter(|y| y.1 > y.0);
        // The baseline is a by-product of the sweep. Until it is known, the last view's sets
        // how thin an element may be and still be drawn alone; positions do not depend on
        // that threshold, so the axis moves to this window's baseline after one sweep, and
        // only a guess more than twice too coarse is swept again. The first view guesses
        // from the bytes no step changes (`Timeline::lasting_bytes`): where those are the
        // window's baseline, as in a training loop whose weights were there before the
        // trace, it sweeps once and draws what every later request for the window gets.
        // A guess more than twice too fine (the baseline far below them, or left at zero
        // where nothing moves) is swept again too; within twice, the first view keeps its
        // guess's threshold, as any view does.
        let first = lane.baseline.is_none();
        let guess = zoomed
            .unwrap_or_else(|| natural_axis(y_max, lane.baseline.unwrap_or_else(|| tl.lasting_bytes()), q.baseline));
        let mut lod = lod_of(guess.0, guess.1);
        // Where nothing in the window moves, every byte is "stable": no baseline then (the
        // axis would start at the top of what is drawn, and the plot show nothing).
        let top = lod.columns.iter().map(|c| c.total_bytes).max().unwrap_or(0);
        let stable_bytes = if lod.stable_bytes < top { lod.stable_bytes } else { 0 };
        let (y_lo, y_top) = match zoomed {
            Some(y) => y,
            None => {
                // Search matches below the baseline would be hidden: the axis starts under them.
                let lowest_hit = lod.bands.iter().filter(|b| b.hit_bytes > 0).map(|b| b.offset_bytes).min();
                let axis = natural_axis(y_max, stable_bytes.min(lowest_hit.unwrap_or(u64::MAX)), q.baseline);
                let (span, guessed) = (axis.1 - axis.0, guess.1 - guess.0);
                if span.saturating_mul(2) < guessed || (first && guessed.saturating_mul(2) < span) {
                    lod = lod_of(axis.0, axis.1);
                }
                axis
            }
        };
        let trace = self.snap.trace(q.device as usize);
        let trace_time = |step: u32| -> Option<i64> { tl.step_entry(step).and_then(|e| trace.time_us(e as usize)) };
        let columns: Vec<ColumnVm> = lod
            .columns
            .iter()
            .map(|c| ColumnVm {
                step: c.step,
                total: c.total_bytes,
                drawn: if q.totals_only { 0 } else { c.drawn_bytes },
                time_us: trace_time(c.step),
                allocated: allocated(c.step),
            })
            .collect();
        // Moved, not copied: the same bands are the raster's, the answer's and the lane's.
        let bands = Arc::new(lod.bands);
        let pixels = if q.totals_only {
            Vec::new()
        } else {
            let p = &q.palette;
            let pal = raster::Palette { summarized: p.summarized, hit: p.hit, pinned: p.pinned, ..Default::default() };
            let rows = raster::Rows { count: q.rows, lo: y_lo as f64, top: y_top as f64 };
            raster::raster(&bands, &columns, rows, hits.is_some(), q.pinned, &pal).rgba
        };
        if let Some(lane) = self.lanes.get_mut(&(q.device, q.kind)).filter(|_| !q.totals_only) {
            lane.drawn = Arc::clone(&bands);
            lane.baseline = Some(stable_bytes);
        }
        let lane = &self.lanes[&(q.device, q.kind)];
        let tl = &lane.timeline;
        // Only what the window shows: the page draws nothing else of them.
        let shown_ooms: Vec<(u32, u32)> =
            lane.ooms.iter().copied().filter(|&(o, _)| f64::from(o) + 1.0 >= start && f64::from(o) <= end).collect();
        ViewModel {
            n_steps: tl.n_steps(),
            start,
            end,
            y_max,
            y_lo,
            y_top,
            stable_bytes,
            peak_step: tl.peak_step(),
            peak_bytes: tl.peak_bytes(),
            columns,
            bands,
            pixels,
            ooms: shown_ooms.iter().map(|o| o.0).collect(),
            oom_entries: shown_ooms.iter().map(|o| o.1).collect(),
            spans: lane.spans.iter().filter(|sp| sp.end >= start && sp.start <= end).cloned().collect(),
            hits: lane.hits.as_ref().map_or(0, |(_, n)| *n),
        }
    }

    /// Everything the element itself says, at once; its category only when the background
    /// analysis has it (`class_pending` otherwise: a hover never waits for a whole file).
    fn details(&mut self, device: u32, kind: Kind, element: u32) -> Option<Details> {
        self.lane(device, kind);
        let class = if kind == Kind::Blocks {
            self.schedule(device);
            self.cats.get(&device).map(|(c, _)| c.class(element))
        } else {
            None
        };
        let class_pending = kind == Kind::Blocks && !self.is_host && class.is_none();
        let class = class.map(|c| (c.category, c.why.describe(self.rules.rules())));
        let lane = &self.lanes[&(device, kind)];
        let snap = &self.snap;
        let tl = &lane.timeline;
        let e = tl.elements().get(element as usize)?;
        let trace = snap.trace(device as usize);
        let entry = e.alloc_entry.or(e.free_entry).map(|i| i as usize).filter(|&i| i < trace.len());
        let seg = e.segment.and_then(|s| snap.segments.get(s as usize));
        let block = seg.and_then(|s| s.blocks.iter().find(|b| b.address == Some(e.addr)));
        // An allocation made before the recording shows its free's stack, and `no_stack` says so.
        let stack = match e.origin {
            Origin::UnmatchedFree => e.free_entry.and_then(|i| trace.frames(i as usize)),
            _ => e.stack,
        };
        let text = |id: Option<snapshot::StrId>| id.map(|s| snap.str(s).to_string());
        let n_elements = tl.elements().len();
        let piece = (element as usize).checked_sub(n_elements - lane.pieces.len()).map(|k| lane.pieces[k]);
        let origin = match e.origin {
            _ if piece.is_some() => {
                let ((a, b), stream) = piece.unwrap_or_default();
                format!(
                    "private pool ({a}, {b}), stream {stream}: its envelope grew here by this much, to the larger of what its allocations hold and what it reserves (it never shrinks)"
                )
            }
            Origin::Traced => match e.alloc_entry {
                Some(a) => format!("allocated at event {a}"),
                None => "allocated in the trace".into(),
            },
            Origin::UnmatchedFree => format!(
                "allocated before recording began: its allocation was never recorded, freed at event {}",
                e.free_entry.map_or("?".to_string(), |f| f.to_string())
            ),
            Origin::Snapshot => "alive before recording began: known only from the final snapshot".into(),
        };
        let forward_frames = match (entry, block) {
            (Some(i), _) if e.origin == Origin::Traced => sites::forward_frames(snap, trace.extras(i)),
            (_, Some(b)) => sites::forward_frames(snap, &b.extras),
            _ => None,
        };
        let total_after = if e.origin == Origin::Traced {
            tl.totals().get(e.start as usize).copied().unwrap_or(0)
        } else {
            tl.initial_bytes()
        };
        Some(Details {
            element,
            kind,
            addr: e.addr,
            size: e.size,
            requested: block.map(|b| b.requested_bytes()),
            stream: entry.map(|i| trace.stream(i)).or(seg.map(|s| s.stream)),
            pool: entry.and_then(|i| trace.pool_id(i)).or(seg.and_then(|s| s.segment_pool_id)),
            time_us: entry.and_then(|i| trace.time_us(i)),
            start_step: e.start,
            end_step: e.end,
            alloc_entry: e.alloc_entry,
            free_entry: e.free_entry,
            total_after,
            compile_context: entry.and_then(|i| text(trace.compile_context(i))),
            user_metadata: entry.and_then(|i| text(trace.user_metadata(i))).filter(|s| !s.is_empty()),
            category: entry.and_then(|i| text(trace.category(i))),
            class,
            class_pending,
            origin,
            no_stack: if piece.is_some() { None } else { history::no_stack_cause(snap, tl, e) },
            forward_site: forward_frames.as_deref().and_then(sites::forward_site),
            forward_frames,
            labels: lane.labels.of(snap, device as usize, e),
            frames: stack.map(|s| frames::stack_lines(snap, s, true)).unwrap_or_default(),
            all_frames: stack.map(|s| frames::stack_lines(snap, s, false)).unwrap_or_default(),
        })
    }

    fn events(&self, device: u32, first: u32, count: u32) -> EventPage {
        let snap = &self.snap;
        let t = snap.trace(device as usize);
        let total = t.len() as u32;
        let end = first.saturating_add(count).min(total);
        let rows = (first.min(end)..end)
            .map(|i| {
                let i = i as usize;
                // The line of code it is charged to, as everywhere else (a C++ stack's
                // innermost frames are the allocator's own).
                let frame = t
                    .frames(i)
                    .map(|s| sites::site_name(snap, Some(s)))
                    .filter(|s| s != "(no frames)")
                    .unwrap_or_default();
                EventRow {
                    entry: i as u32,
                    action: t.action(i).name().unwrap_or("?").to_string(),
                    addr: t.addr(i),
                    size: t.size(i),
                    stream: t.stream(i),
                    time_us: t.time_us(i),
                    frame,
                }
            })
            .collect();
        EventPage { total, first, rows }
    }

    fn state(&mut self, device: u32, entry: Option<u32>) -> StateView {
        let step = entry.map(|e| self.lane(device, Kind::Blocks).timeline.step_of_entry(e));
        self.state_index(device);
        let st = self.states[&device].state_after(&self.snap, entry.map(|e| e as usize));
        // Each private pool on each stream: its segments, reserved and allocated bytes.
        let mut pools: std::collections::BTreeMap<((u64, u64), i64), PoolVm> = std::collections::BTreeMap::new();
        let mut pending = 0;
        let segments: Vec<SegmentVm> = st
            .segments
            .iter()
            .map(|s| {
                if let Some(p) = s.pool.filter(|p| *p != (0, 0)) {
                    let vm = pools.entry((p, s.stream)).or_insert(PoolVm {
                        pool: p,
                        stream: s.stream,
                        segments: 0,
                        reserved: 0,
                        allocated: 0,
                    });
                    vm.segments += 1;
                    vm.reserved += s.size;
                    vm.allocated += s.blocks.iter().map(|b| b.requested_size).sum::<u64>();
                }
                SegmentVm {
                    address: s.address,
                    size: s.size,
                    stream: s.stream,
                    pool: s.pool,
                    expandable: s.expandable,
                    blocks: s
                        .blocks
                        .iter()
                        .map(|b| {
                            pending += u32::from(b.pending_free);
                            BlockVm {
                                offset: b.address.saturating_sub(s.address),
                                size: b.size,
                                requested: b.requested_size,
                                pending_free: b.pending_free,
                                rgb: colour((b.address >> 9) as u32 ^ (b.address >> 41) as u32),
                            }
                        })
                        .collect(),
                }
            })
            .collect();
        StateView {
            after_entry: st.after_entry,
            step,
            reserved: st.reserved_bytes,
            allocated: st.allocated_bytes,
            internal_free: st.segments.iter().map(|s| s.internal_free_bytes).sum(),
            external_free: st.segments.iter().map(|s| s.external_free_bytes).sum(),
            pending_frees: pending,
            private_pools: pools.len() as u32,
            pools: pools.into_values().collect(),
            segments,
            orphan_blocks: st.orphan_blocks.len() as u32,
        }
    }

    fn search(&mut self, device: u32, kind: Kind, q: &search::Query) -> Result<SearchResult, String> {
        self.lane(device, kind);
        self.clear_search();
        let snap = &self.snap;
        let Some(lane) = self.lanes.get_mut(&(device, kind)) else { return Err("no such device".into()) };
        let found = search::find(snap, &lane.timeline, q)?;
        let els = lane.timeline.elements();
        let mut hits = vec![false; els.len()];
        for &i in &found {
            hits[i as usize] = true;
        }
        let matches = found.iter().map(|&i| (i, els[i as usize].start, els[i as usize].end)).collect();
        lane.hits = Some((hits, found.len() as u32));
        Ok(SearchResult { count: found.len() as u32, matches })
    }
}

/// `record_function` spans of a device placed on its steps: STARTs and ENDs are paired by
/// name, innermost first; an END without a START starts at step 0 and a START without an
/// END runs to the end, both flagged so the page can show them.
fn spans(snap: &Snapshot, tl: &Timeline, device: u32) -> Vec<SpanVm> {
    let trace = snap.trace(device as usize);
    if snap.external_annotations.is_none() || !trace.has_time() {
        return Vec::new();
    }
    // The first step at or after time `t` (steps are in time order): a binary search over
    // the steps' times read as it goes, not a vector of them (8 bytes a step, the largest
    // thing a load of a 0.9 GB file made after the layout).
    let time_of = |s: usize| tl.step_entry(s as u32).and_then(|e| trace.time_us(e as usize)).unwrap_or(i64::MIN);
    let step_at = |t: i64| {
        let (mut lo, mut hi) = (0, tl.n_actions());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if time_of(mid) < t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo as f64
    };
    let n = f64::from(tl.n_steps());
    snapshot::categories::spans(snap, device as usize)
        .into_iter()
        .map(|sp| {
            let start = sp.start_us.map_or(0.0, step_at);
            SpanVm {
                name: snap.str(sp.name).to_string(),
                start,
                end: sp.end_us.map_or(n, |t| step_at(t).max(start)),
                depth: sp.depth,
                unmatched_end: sp.start_us.is_none(),
                unmatched_start: sp.end_us.is_none(),
            }
        })
        .collect()
}
