//! A spare worker's warm-up: it opens a small generated snapshot the way a real file is
//! opened (read in slices, finished, its first views, the minimap, the event list, a hover,
//! some background analysis) and then forgets it. The messages a file's worker would send
//! meanwhile are handed to the worker to encode and drop, so that the code that sends a
//! file's answers is warm too.
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

use crate::protocol::{FromWorker, Kind, LoadEvent, PaletteVm, Request, Response, ViewQuery};
use crate::{Engine, Loading};

/// The generated snapshot's size: enough that every hot function of the open runs long
/// enough to be optimised, small enough that the whole warm-up is about 100 ms of baseline
/// code.
const BYTES: u64 = 400_000;
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
    },
    Finish(Box<Loading>),
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
            Stage::Generate => Stage::Write(Box::new(synth::generate(&synth::Options::for_bytes(BYTES)))),
            Stage::Write(snap) => {
                let bytes = snapshot::write::to_pickle_bytes(&snap);
                let loading = Box::new(Loading::new("warm-up.pickle", bytes.len() as u64, 0.0));
                Stage::Read { bytes, at: 0, loading }
            }
            Stage::Read { bytes, at, mut loading } => {
                let end = (at + SLICE).min(bytes.len());
                let (read, total) = (end as u64, bytes.len() as u64);
                sent(&FromWorker::Load { id: DOC, event: LoadEvent::Progress { bytes: read, total } });
                match loading.feed(&bytes[at..end]) {
                    Err(_) => Stage::Done,
                    Ok(()) if end < bytes.len() => Stage::Read { bytes, at: end, loading },
                    Ok(()) => Stage::Finish(loading),
                }
            }
            Stage::Finish(loading) => match self.engine.finish(DOC, *loading, &|| 0.0) {
                Ok(info) => {
                    let device = info.first_device();
                    let entries = info.devices.iter().find(|d| d.device == device).map_or(0, |d| d.entries) as f64;
                    sent(&FromWorker::Load { id: DOC, event: LoadEvent::Loaded(info) });
                    Stage::View { i: 0, device, entries }
                }
                Err(_) => Stage::Done,
            },
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
        assert!(progress >= 400_000 / SLICE, "its progress is told at each slice ({progress})");
        assert_eq!(replies, usize::from(VIEWS), "every request is answered");
        // Every view but the minimap's totals (the other three requests are not views).
        assert_eq!(pictures, usize::from(VIEWS) - 4, "its views are pictures");
        assert!(drawn, "the first view drew bands");
        let slices = (w.steps() as usize).saturating_sub(3 + VIEWS as usize);
        assert!(slices >= 400_000 / SLICE, "read in slices of {SLICE} bytes, one a step ({} steps)", w.steps());
        assert!(w.engine.docs.is_empty(), "nothing is kept once done");
        assert!(!w.step(&mut |_| {}), "a finished warm-up stays finished");
    }
}
