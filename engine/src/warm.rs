//! A spare worker's warm-up: it opens a small generated snapshot, shaped like a recording,
//! the way a real file is opened (read in slices and finished, `PASSES` times; laid out
//! again with every allocation of one size, `LAYOUTS` times; its first views, the minimap,
//! the event list, a hover, some background analysis) and then forgets it. The messages a
//! file's worker would send meanwhile are handed to the worker to encode and drop, so that
//! the code that sends a file's answers is warm too.
//!
//! Why: a worker's wasm starts on V8's baseline code (Liftoff), which runs the reader and
//! the level-of-detail sweep 3 to 5 times slower than the optimised code (TurboFan) that a
//! function gets only after it has run a while, and only for its *next* call (wasm has no
//! on-stack replacement). A file opened in a fresh worker was read and drawn almost wholly
//! on baseline code. Warmed up while the page is idle, the worker meets the file with
//! optimised code; and as workers of one page share their compiled module, every later
//! worker does too.
//!
//! Each [`Warmup::step`] is a few milliseconds of baseline code, so a file chosen meanwhile
//! waits at most one step; the worker drops the warm-up as soon as a file comes.

use snapshot::synth;
use snapshot::timeline::Timeline;
use snapshot::{Entry, Snapshot, Trace};

use crate::protocol::{FromWorker, Kind, LoadEvent, PaletteVm, Request, Response, ViewQuery};
use crate::{Engine, Loading};

/// The generated snapshot's size: small enough that its first read, on baseline code, is
/// short (the passes after it run mostly on optimised code).
const BYTES: u64 = 400_000;
/// Times it is read (and finished): the reader's helpers (the memo, the stacks' table, the
/// general path of [`like_a_recording`]) are optimised only after as much work as a few MB of
/// a real file makes: read once, 9 to 13 of them were optimised in the middle of the first
/// real file instead (V8's log of its compiles). The layout's long calls need [`LAYOUTS`].
const PASSES: u8 = 8;
/// Times its device's timeline is then laid out again, every allocation of one size (see
/// [`one_class`]).
const LAYOUTS: u8 = 8;
/// The slices it is read in: one step each.
const SLICE: usize = 32 << 10;
/// Its id in the warm-up's own engine.
const DOC: u32 = 1;
/// The plot size of its views (a typical window's).
const COLUMNS: u32 = 1200;
const ROWS: u32 = 300;
/// The requests made of it (see [`Warmup::view`]): V8 optimises a function only once it has
/// run a while, and the sweep is one long call per view.
const VIEWS: u8 = 16;
/// Background analysis per step, in the engine's units.
const UNITS: usize = 512;
/// Background steps at most.
const WORK_STEPS: u32 = 8;

/// The warm-up in progress; [`Warmup::step`] until it returns false.
pub struct Warmup {
    stage: Stage,
    engine: Engine,
    /// Steps taken: what [`Warmup::steps`] reports.
    steps: u32,
}

/// Where the warm-up is, with what that step needs.
enum Stage {
    Generate,
    Write(Box<snapshot::Snapshot>),
    Read {
        bytes: Vec<u8>,
        at: usize,
        loading: Box<Loading>,
        pass: u8,
    },
    Finish {
        bytes: Vec<u8>,
        loading: Box<Loading>,
        pass: u8,
    },
    /// Lays out `snap`'s (the snapshot read, in [`one_class`]) timeline of the device, `left`
    /// more times; then its views.
    Layout {
        snap: Box<Snapshot>,
        left: u8,
        device: u32,
        entries: f64,
    },
    /// The `i`th request; `entries`: the device's trace entries (at least its steps: where
    /// zoomed views end).
    View {
        i: u8,
        device: u32,
        entries: f64,
    },
    Work(u32),
    Done,
}

impl Stage {
    /// Pass `pass` over the snapshot's bytes, from their start.
    fn read(bytes: Vec<u8>, pass: u8) -> Stage {
        let loading = Box::new(Loading::new("warm-up.pickle", bytes.len() as u64, 0.0));
        Stage::Read { bytes, at: 0, loading, pass }
    }
}

impl Default for Warmup {
    fn default() -> Self {
        Self::new()
    }
}

impl Warmup {
    /// A warm-up that has not started (nothing generated yet: the first step does it).
    pub fn new() -> Self {
        Warmup { stage: Stage::Generate, engine: Engine::new(), steps: 0 }
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// Takes one step; false once the warm-up is over (its snapshot dropped). What a file's
    /// worker would send at this step goes to `sent` (its load's progress and end, the
    /// answers to its requests).
    pub fn step(&mut self, sent: &mut impl FnMut(&FromWorker)) -> bool {
        if matches!(self.stage, Stage::Done) {
            return false;
        }
        self.steps += 1;
        self.stage = match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Generate => {
                let mut snap = synth::generate(&synth::Options::for_bytes(BYTES));
                like_a_recording(&mut snap);
                Stage::Write(Box::new(snap))
            }
            Stage::Write(snap) => Stage::read(snapshot::write::to_pickle_bytes(&snap), 0),
            Stage::Read { bytes, at, mut loading, pass } => {
                let end = (at + SLICE).min(bytes.len());
                let (read, total) = (end as u64, bytes.len() as u64);
                sent(&FromWorker::Load { id: DOC, event: LoadEvent::Progress { bytes: read, total } });
                match loading.feed(&bytes[at..end]) {
                    Err(_) => Stage::Done,
                    Ok(()) if end < bytes.len() => Stage::Read { bytes, at: end, loading, pass },
                    Ok(()) => Stage::Finish { bytes, loading, pass },
                }
            }
            Stage::Finish { bytes, loading, pass } => match self.engine.finish(DOC, *loading, &|| 0.0) {
                Ok(_) if pass + 1 < PASSES => Stage::read(bytes, pass + 1),
                Ok(info) => {
                    let device = info.first_device();
                    let entries = info.devices.iter().find(|d| d.device == device).map_or(0, |d| d.entries) as f64;
                    sent(&FromWorker::Load { id: DOC, event: LoadEvent::Loaded(info) });
                    match self.engine.docs.get(&DOC) {
                        Some(doc) => Stage::Layout {
                            snap: Box::new(one_class(doc.file.snapshot())),
                            left: LAYOUTS,
                            device,
                            entries,
                        },
                        None => Stage::View { i: 0, device, entries },
                    }
                }
                Err(_) => Stage::Done,
            },
            Stage::Layout { snap, left, device, entries } => {
                drop(Timeline::build(&snap, device as usize, Kind::Blocks));
                if left > 1 {
                    Stage::Layout { snap, left: left - 1, device, entries }
                } else {
                    Stage::View { i: 0, device, entries }
                }
            }
            Stage::View { i, device, entries } => {
                let response = self.view(i, device, entries);
                sent(&FromWorker::Reply { id: u32::from(i), response });
                if i + 1 < VIEWS {
                    Stage::View { i: i + 1, device, entries }
                } else {
                    Stage::Work(0)
                }
            }
            Stage::Work(n) => {
                if self.engine.work(UNITS) && n + 1 < WORK_STEPS {
                    Stage::Work(n + 1)
                } else {
                    Stage::Done
                }
            }
            Stage::Done => Stage::Done,
        };
        if matches!(self.stage, Stage::Done) {
            self.engine = Engine::new();
            return false;
        }
        true
    }

    /// The requests a page makes on opening a file: its first view from the baseline, the
    /// minimap's totals, the first rows of the event list, the allocator's state and a
    /// hover; then views zoomed in on one part and another. Returns the answer.
    fn view(&mut self, i: u8, device: u32, entries: f64) -> Response {
        let doc = DOC;
        // The first calls run on baseline code, each function compiled as it is first
        // called: the first views are a quarter of the size, so no step is long.
        let scale = if i < VIEWS / 2 { 4 } else { 1 };
        let query = |totals_only: bool, start: f64, end: f64| ViewQuery {
            doc,
            device,
            kind: Kind::Blocks,
            start,
            end,
            columns: COLUMNS / scale,
            rows: if totals_only { 1 } else { ROWS / scale },
            y: None,
            baseline: !totals_only,
            totals_only,
            pinned: None,
            palette: PaletteVm::default(),
        };
        let request = match i {
            0 => Request::View(query(false, 0.0, 0.0)),
            1 => Request::View(query(true, 0.0, 0.0)),
            2 => Request::Events { doc, device, first: 0, count: 15 },
            3 => Request::State { doc, device, entry: Some((entries / 2.0) as u32) },
            4 => Request::Hit {
                doc,
                device,
                kind: Kind::Blocks,
                step: (entries / 4.0) as u32,
                bytes: 1 << 20,
                slack: 1 << 20,
            },
            _ => {
                let start = f64::from(i % 4) / 8.0 * entries;
                Request::View(query(false, start, start + entries / 2.0))
            }
        };
        self.engine.handle(request)
    }
}

/// The snapshot with every traced allocation of one size, for [`Stage::Layout`]. A layout
/// sorts each size class's elements twice (`Timeline::build`): pt25's largest class holds
/// 3,221 of its 7,801, the generated snapshot's 365 of 1,662, too short a sort for V8 to
/// optimise its loops, however often it is read. V8's log of its compiles showed the sort
/// and `Timeline::finish` optimised in the middle of a page's first 4 MB file (12 to 23 ms
/// of compiling, while that file's layout ran on baseline code); laid out in one class
/// eight times, both are optimised before any file comes.
fn one_class(snap: &Snapshot) -> Snapshot {
    let mut out = snap.clone();
    rewrite_entries(&mut out, |_, _, e| e.size = ONE_SIZE);
    out
}

/// Rebuilds every device's trace entry by entry; `f` changes each entry (given its index in
/// its trace) and may add to the snapshot (strings, frames, stacks) meanwhile.
fn rewrite_entries(snap: &mut Snapshot, mut f: impl FnMut(&mut Snapshot, usize, &mut Entry)) {
    let Some(traces) = snap.device_traces.take() else { return };
    let traces = traces
        .iter()
        .map(|t| {
            let mut out = Trace::with_capacity(t.len());
            for i in 0..t.len() {
                let mut e = t.entry(i);
                f(snap, i, &mut e);
                out.push(&e);
            }
            out
        })
        .collect();
    snap.device_traces = Some(traces);
}

/// The size of every allocation in [`one_class`].
const ONE_SIZE: u64 = 1 << 20;

/// Every how many entries the warm-up's trace has a frame not seen before.
const NEW_FRAME_EVERY: usize = 10;

/// Makes the generated snapshot read as a recording does, so that the reader's general
/// path gets warm too. An entry whose stack brings a frame not read before takes that path
/// (the fast one knows only frames already read): in real files about one entry in a
/// hundred, most of them in the first steps (pt25: 189 of 19,464; pt210: 212 of 22,332).
/// The generator's program has a few dozen call sites, all read in its first steps: 7 such
/// entries in 400 KB, too few for V8 to optimise that path (a few thousand calls). Every
/// [`NEW_FRAME_EVERY`]th entry here gets a new innermost frame. The entries also get the
/// `compile_context` and `user_metadata` PyTorch 2.8+ writes on each one; PyTorch makes
/// each entry's `compile_context` afresh, so the pickle's memo does not share it (pt210
/// spells out 23,552 strings for its 22,332 entries) and the reader interns one per entry.
/// This writer shares equal strings, so each entry of a device gets a text of its own.
fn like_a_recording(snap: &mut Snapshot) {
    let metadata = snap.strings.intern("");
    rewrite_entries(snap, |snap, i, e| {
        e.compile_context = Some(snap.strings.intern(&format!("[{i}/0]")));
        e.user_metadata = Some(metadata);
        if let Some(stack) = e.frames.filter(|_| i % NEW_FRAME_EVERY == 0) {
            let mut frames = snap.stacks.get(stack).to_vec();
            if let Some(f) = frames.first().and_then(|f| snap.frames.get(f.0 as usize)) {
                let (name, file) = (snap.str(f.name).to_string(), snap.str(f.filename).to_string());
                frames[0] = snap.add_frame(&name, &file, 100_000 + i as i64);
                e.frames = Some(snap.add_stack(&frames));
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The warm-up opens its snapshot and draws it (a warm-up that failed early would warm
    /// nothing up), hands over what a file's worker would send, then ends with nothing kept.
    #[test]
    fn the_warm_up_reads_and_draws_its_snapshot_then_forgets_it() {
        let mut w = Warmup::new();
        let mut drawn = false;
        let (mut progress, mut loaded, mut replies, mut pictures) = (0, 0, 0, 0);
        let mut sent = |m: &FromWorker| match m {
            FromWorker::Load { event: LoadEvent::Progress { bytes, total }, .. } => {
                assert!(bytes <= total);
                progress += 1;
            }
            FromWorker::Load { event: LoadEvent::Loaded(info), .. } => {
                assert!(info.devices.iter().any(|d| d.entries > 0), "the generated snapshot has a trace");
                loaded += 1;
            }
            FromWorker::Reply { response, .. } => {
                assert!(!matches!(response, Response::Error(_)), "a request of the warm-up failed: {response:?}");
                replies += 1;
                pictures += usize::from(matches!(response, Response::View(v) if !v.pixels.is_empty()));
            }
            other => panic!("not a message of a file's load: {other:?}"),
        };
        while w.step(&mut sent) {
            assert!(w.steps() < 1_000, "the warm-up does not end");
            if let Stage::View { i: 1, device, .. } = w.stage {
                let doc = w.engine.handle(Request::Events { doc: DOC, device, first: 0, count: 1 });
                assert!(matches!(doc, Response::Events(_)), "the snapshot is open after its first view");
                drawn = w.engine.docs.get(&DOC).is_some_and(|d| d.lanes.values().any(|l| !l.drawn.is_empty()));
            }
        }
        assert_eq!(loaded, 1, "its load ends once");
        assert!(
            progress >= usize::from(PASSES) * 400_000 / SLICE,
            "its progress is told at each slice of each of its {PASSES} reads ({progress})"
        );
        assert_eq!(replies, usize::from(VIEWS), "every request is answered");
        // Every view but the minimap's totals (the other three requests are not views).
        assert_eq!(pictures, usize::from(VIEWS) - 4, "its views are pictures");
        assert!(drawn, "the first view drew bands");
        let slices =
            (w.steps() as usize).saturating_sub(2 + usize::from(PASSES) + usize::from(LAYOUTS) + VIEWS as usize);
        assert!(
            slices >= usize::from(PASSES) * 400_000 / SLICE,
            "read {PASSES} times in slices of {SLICE} bytes, one a step ({} steps)",
            w.steps()
        );
        assert!(w.engine.docs.is_empty(), "nothing is kept once done");
        assert!(!w.step(&mut |_| {}), "a finished warm-up stays finished");
    }

    /// The generated snapshot, reshaped, keeps showing frames not read before to its last
    /// entry, and every entry has the keys PyTorch 2.8+ writes, its `compile_context` a
    /// string of its own on its device.
    #[test]
    fn its_snapshot_shows_new_frames_to_the_end() {
        let mut snap = synth::generate(&synth::Options::for_bytes(BYTES));
        let before = snap.frames.len();
        like_a_recording(&mut snap);
        assert!(snap.frames.len() > before, "new frames were made");
        let traces = snap.device_traces.as_ref().expect("the generated snapshot has traces");
        let mut seen = std::collections::HashSet::new();
        for t in traces {
            let mut contexts = std::collections::HashSet::new();
            let n = t.len();
            let (mut last_third, mut new_in_last_third) = (0, 0);
            for i in 0..n {
                assert!(t.user_metadata(i).is_some(), "entry {i} has no user_metadata");
                let context = t.compile_context(i).expect("every entry has a compile_context");
                assert!(contexts.insert(context), "entry {i}'s compile_context is another entry's");
                let Some(stack) = t.frames(i) else { continue };
                let mut new = false;
                for f in snap.stacks.get(stack) {
                    let f = &snap.frames[f.0 as usize];
                    new |= seen.insert((snap.str(f.name).to_string(), snap.str(f.filename).to_string(), f.line));
                }
                if i >= 2 * n / 3 {
                    last_third += 1;
                    new_in_last_third += usize::from(new);
                }
            }
            assert!(
                new_in_last_third * (NEW_FRAME_EVERY + 1) >= last_third,
                "{new_in_last_third} of the last {last_third} entries with a stack bring a new frame"
            );
        }
    }

    /// The layouts after the reads sort every traced allocation in one size class, a long
    /// sort as a real file's largest classes are, and lay out the same lives as the snapshot
    /// read (only the sizes changed).
    #[test]
    fn its_layouts_sort_every_allocation_in_one_class() {
        use snapshot::timeline::Origin;
        let mut snap = synth::generate(&synth::Options::for_bytes(BYTES));
        like_a_recording(&mut snap);
        let one = one_class(&snap);
        for device in snap.devices() {
            let (read, laid) =
                (Timeline::build(&snap, device, Kind::Blocks), Timeline::build(&one, device, Kind::Blocks));
            let lives = |tl: &Timeline| {
                tl.elements()
                    .iter()
                    .filter(|e| e.origin == Origin::Traced)
                    .map(|e| (e.start, e.end, e.addr))
                    .collect::<Vec<_>>()
            };
            assert_eq!(lives(&laid), lives(&read), "device {device}: the same allocations live the same steps");
            let traced: Vec<_> = laid.elements().iter().filter(|e| e.origin == Origin::Traced).collect();
            assert!(traced.len() >= 1_000, "device {device}: {} allocations in the class, a short sort", traced.len());
            assert!(traced.iter().all(|e| e.size == ONE_SIZE), "device {device}: every allocation is of one size");
            let sizes: std::collections::HashSet<u64> =
                read.elements().iter().filter(|e| e.origin == Origin::Traced).map(|e| e.size).collect();
            assert!(sizes.len() > 10, "device {device}: the snapshot read has sizes of its own ({})", sizes.len());
        }
    }
}
