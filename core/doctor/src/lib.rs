//! Why did it run out of memory: the doctor.
//!
//! For every `oom` trace event, the allocator state just before it (replayed by
//! [`StateIndex`], all the events of a device in one backward pass per checkpoint interval) gives
//! the figures ([`figures`]), the verdict ([`verdict`]), who holds the memory ([`holders`]) and
//! advice with predicted effects ([`advice`]); [`whatif`] predicts the peak under changes of the
//! training setup. Without an `oom` event the report gives the headroom at the peak, the
//! final state, and what an error there was for a snapshot dumped at one. Plain functions over plain data: every
//! result is serializable, and [`diagnose_ooms`] answers any chosen events without a pass over
//! the whole trace (the viewer asks for one OOM at a time). `docs/doctor.md` explains the rules.
//!
//! A layer above the analyses: it uses the format, the replay and the analyses.
#![deny(missing_docs)]

use serde::{Deserialize, Serialize};

use memscape_analysis::categories::{self, Categories, CategoryBytes, Compiled, Phase};
use memscape_analysis::flame;
use memscape_format::model::{self, Action, Snapshot};
use memscape_format::units::{self, format_size};
use memscape_replay::sites::{self, SiteNames};
use memscape_replay::state::{AllocatorState, StateIndex};
use memscape_replay::timeline::{self, Timeline, TimelineKind};
use memscape_replay::{allocator, layout};

pub mod advice;
/// The allocator's figures at one moment, read where the replay reads them
/// ([`memscape_replay::layout`]).
pub use memscape_replay::layout as figures;
pub mod holders;
mod layers;
/// The allocator settings, read where the replay reads them ([`memscape_replay::settings`]).
pub use memscape_replay::settings;
pub mod tuning;
pub mod verdict;
pub mod whatif;

pub use advice::Advice;
pub use figures::{Figures, PoolFree, PoolKind};
pub use holders::Holder;
pub use settings::Settings;
pub use tuning::Tuning;
pub use verdict::Verdict;
pub use whatif::{what_if, Basis, Change, Optimizer, WhatIf};

/// The doctor's findings on one out-of-memory error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Oom {
    /// The device.
    pub device: u32,
    /// The `oom` trace entry.
    pub entry: u32,
    /// The timeline step whose state it failed in (the last alloc or free before it).
    pub step: u32,
    /// µs since the epoch, when recorded.
    pub time_us: Option<i64>,
    /// Bytes the allocator looked for (rounded).
    pub requested_bytes: u64,
    /// The device's free bytes, as the allocator saw them (`device_free`), when recorded.
    pub device_free_bytes: Option<u64>,
    /// Reserved bytes just before the error.
    pub reserved_bytes: u64,
    /// Requested bytes of live blocks (pending frees counted as allocated).
    pub allocated_bytes: u64,
    /// Rounded bytes of live blocks.
    pub live_block_bytes: u64,
    /// Bytes free inside the cache, every pool and stream.
    pub cached_free_bytes: u64,
    /// The largest free block the request could use (its pool and stream).
    pub largest_free_block_bytes: u64,
    /// The largest free block of any pool and stream.
    pub largest_free_block_any_bytes: u64,
    /// The request's pool.
    pub pool: PoolKind,
    /// The request's stream.
    pub stream: i64,
    /// The segment the allocator would have asked the device for.
    pub segment_bytes_needed: u64,
    /// Free memory per pool and stream.
    pub free_by_pool: Vec<PoolFree>,
    /// Exhausted, fragmentation or other limit.
    pub verdict: Verdict,
    /// The numbers that decide it, in one sentence.
    pub why: String,
    /// The phase of the program (forward, backward, ...).
    pub phase: Phase,
    /// Bytes per category.
    pub categories: Vec<CategoryBytes>,
    /// The largest call sites of live memory.
    pub holders: Vec<Holder>,
    /// What would help, with predicted effects.
    pub advice: Vec<Advice>,
    /// The allocator settings in force.
    pub settings: Settings,
}

/// The peak of live memory and the room left at it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Peak {
    /// The device.
    pub device: u32,
    /// Highest live bytes (the Active Memory Timeline's peak).
    pub peak_bytes: u64,
    /// Its step.
    pub step: u32,
    /// Its trace entry, when it is one.
    pub entry: Option<u32>,
    /// Reserved bytes there.
    pub reserved_bytes: u64,
    /// The device's memory, where the file says it.
    pub capacity_bytes: Option<u64>,
    /// Where the capacity comes from: `memscape_devices` (the device's memory), or `oom`
    /// (reserved + `device_free` at an error: what this process could reach).
    pub capacity_source: Option<String>,
    /// Capacity minus the peak of live bytes (negative: over).
    pub headroom_bytes: Option<i64>,
    /// Bytes per category at the peak.
    pub categories: Vec<CategoryBytes>,
    /// The largest call sites of live memory at the peak.
    pub holders: Vec<Holder>,
}

/// The final state of a file with no `oom` event: what the cache holds, and what an error
/// there was for a snapshot dumped at one without that event (`_dump_snapshot` in an
/// `except torch.cuda.OutOfMemoryError`, an OOM observer). A run that ended well is not read
/// as a failure: the verdict is conditional, and says so.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtEnd {
    /// The figures of the final state.
    pub figures: Figures,
    /// The final state in one sentence: reserved, free in the cache, in how many blocks.
    pub state: String,
    /// What an error there was, were the snapshot dumped at one (`None`: the figures cannot
    /// tell).
    pub verdict: Option<Verdict>,
    /// Why, in one sentence.
    pub why: String,
    /// The reading's assumption.
    pub assumption: String,
    /// The largest call sites of live memory.
    pub holders: Vec<Holder>,
}

/// Everything the doctor says about one device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The device.
    pub device: u32,
    /// Every out-of-memory error, in trace order.
    pub ooms: Vec<Oom>,
    /// The peak and its headroom.
    pub peak: Peak,
    /// The final state, when the trace has no `oom` event.
    pub at_end: Option<AtEnd>,
    /// Predicted peaks under changes of the training setup.
    pub what_if: Vec<WhatIf>,
    /// Allocator settings tried on the recorded trace ([`tuning`]), when fragmentation caused
    /// an out-of-memory error.
    #[serde(default)]
    pub allocator_what_if: Vec<Tuning>,
    /// The allocator settings in force.
    pub settings: Settings,
}

/// The `oom` entries of `device`.
pub fn oom_entries(snap: &Snapshot, device: usize) -> Vec<usize> {
    let t = snap.trace(device);
    (0..t.len()).filter(|&i| t.action(i) == Action::Oom).collect()
}

/// Reads, lays out and analyses `device` of `snap`, then diagnoses it ([`diagnose`]).
pub fn doctor(snap: &Snapshot, device: usize, rules: &Compiled) -> Report {
    let tl = Timeline::build(snap, device, TimelineKind::Blocks);
    let cats = categories::analyze(snap, &tl, rules);
    let index = StateIndex::build(snap, device);
    diagnose(snap, &tl, &cats, &index)
}

/// The whole report of the device of `index` (`tl`: its blocks timeline, `cats`: its
/// categories). O(trace + OOMs × live state).
pub fn diagnose(snap: &Snapshot, tl: &Timeline, cats: &Categories, index: &StateIndex) -> Report {
    let device = index.device();
    let settings = settings::settings(snap, device);
    let what_if = what_if(snap, tl, cats, &Change::DEFAULTS);
    let entries = oom_entries(snap, device);
    let n = snap.trace(device).len();
    let peak_entry = tl.step_entry(tl.peak_step()).map(|e| e as usize);
    // One replay for every state the report needs: before each OOM, at the peak, at the end.
    let mut asked: Vec<Option<usize>> = entries.iter().map(|&e| e.checked_sub(1)).collect();
    asked.push(peak_entry);
    asked.push(n.checked_sub(1));
    // Each OOM is read as its state is handed over, so only the peak's and the end's states
    // are held at once (every OOM's state at once could be the live state times the OOMs).
    let mut ooms: Vec<Option<Oom>> = vec![None; entries.len()];
    let mut r = Reading { snap, tl, cats, settings: &settings, what_if: &what_if, names: SiteNames::default() };
    let (mut at_peak, mut at_end_state) = (None, None);
    index.states_after_each(snap, &asked, |k, s| match k.checked_sub(entries.len()) {
        None => ooms[k] = Some(oom(&mut r, entries[k], &s)),
        Some(0) => at_peak = Some(s),
        Some(_) => at_end_state = Some(s),
    });
    let empty = AllocatorState::default();
    let ooms: Vec<Oom> =
        ooms.into_iter().zip(&entries).map(|(o, &e)| o.unwrap_or_else(|| oom(&mut r, e, &empty))).collect();
    let (at_peak, at_end_state) = (at_peak.unwrap_or_default(), at_end_state.unwrap_or_default());
    let peak = peak(&mut r, &ooms, peak_entry, &at_peak);
    let at_end = ooms.is_empty().then(|| at_end(&mut r, &at_end_state));
    let allocator_what_if = if ooms.iter().any(|o| o.verdict == Verdict::Fragmentation) {
        let reach = ooms.iter().find_map(|o| Some(o.reserved_bytes.saturating_add(o.device_free_bytes?)));
        tuning::tune(snap, device, reach.or(peak.capacity_bytes), &tuning::offered(snap, device)).unwrap_or_default()
    } else {
        Vec::new()
    };
    Report { device: device as u32, ooms, peak, at_end, what_if, allocator_what_if, settings }
}

/// The OOMs at `entries` of the device of `index` (each must be an `oom` entry; others are
/// skipped): one replay per checkpoint interval, no pass over the whole trace.
pub fn diagnose_ooms(
    snap: &Snapshot,
    tl: &Timeline,
    cats: &Categories,
    index: &StateIndex,
    what_if: &[WhatIf],
    entries: &[usize],
) -> Vec<Oom> {
    let device = index.device();
    let t = snap.trace(device);
    let entries: Vec<usize> = entries.iter().copied().filter(|&e| e < t.len() && t.action(e) == Action::Oom).collect();
    let settings = settings::settings(snap, device);
    let asked: Vec<Option<usize>> = entries.iter().map(|&e| e.checked_sub(1)).collect();
    let mut out: Vec<Option<Oom>> = vec![None; entries.len()];
    let mut r = Reading { snap, tl, cats, settings: &settings, what_if, names: SiteNames::default() };
    index.states_after_each(snap, &asked, |k, s| out[k] = Some(oom(&mut r, entries[k], &s)));
    out.into_iter().flatten().collect()
}

/// What the findings of one report read, and the names of the charges met so far (each
/// named once for the whole report, however many OOMs it holds memory at).
struct Reading<'a> {
    snap: &'a Snapshot,
    tl: &'a Timeline,
    cats: &'a Categories,
    settings: &'a Settings,
    what_if: &'a [WhatIf],
    names: SiteNames,
}

fn oom(r: &mut Reading, entry: usize, state: &AllocatorState) -> Oom {
    let (snap, tl, cats, settings, what_if) = (r.snap, r.tl, r.cats, r.settings, r.what_if);
    let device = tl.device();
    let t = snap.trace(device);
    let requested = t.size(entry);
    let stream = t.stream(entry);
    let pool = figures::request_pool(requested, t.pool_id(entry));
    let layout = figures::layout(state, settings);
    let fig = layout.figures(state);
    let largest_fit = layout
        .gaps_for(pool, stream)
        .map(|g| g.size)
        .filter(|&g| figures::may_serve(g, requested, settings.max_split_size_bytes))
        .max()
        .unwrap_or(0);
    let expandable = settings.expandable() || state.segments.iter().any(|s| s.expandable);
    let segment_needed = if expandable {
        // The stream's range grows by whole pages from its free tail.
        let tail = layout
            .gaps
            .iter()
            .filter(|g| {
                let s = &layout.segments[g.segment];
                s.expandable
                    && s.stream == stream
                    && g.address.saturating_add(g.size) == s.address.saturating_add(s.size)
            })
            .map(|g| g.size)
            .max()
            .unwrap_or(0);
        // Pages of 2 MiB in the small pool, 20 MiB in the large (PyTorch's `ExpandableSegment`).
        let page = if pool.0 == PoolKind::Small { allocator::SMALL_BUFFER } else { allocator::LARGE_BUFFER };
        requested.saturating_sub(tail).div_ceil(page).saturating_mul(page)
    } else {
        allocator::segment_size(requested)
    };
    let device_free = t.device_free(entry);
    let (verdict, why) = verdict::decide(&verdict::Inputs {
        requested,
        device_free,
        live: fig.live_block_bytes,
        reserved: fig.reserved_bytes,
        cached_free: fig.cached_free_bytes,
        largest_fit,
        segment_needed,
    });
    let cat_bytes = holders::categories_after(tl, cats, entry.checked_sub(1));
    let step = holders::step_after(tl, entry.checked_sub(1));
    let phase = cats.phase(step);
    let advice = advice::advise(&advice::Context {
        layout: &layout,
        settings,
        verdict,
        requested,
        pool,
        stream,
        device_free: device_free.unwrap_or(0),
        largest_fit,
        free_anywhere: fig.cached_free_bytes.saturating_add(device_free.unwrap_or(0)),
        allocated: fig.allocated_bytes,
        capacity: device_free.map(|f| fig.reserved_bytes.saturating_add(f)),
        categories: cat_bytes,
        phase,
        what_if,
    });
    let holders = holders::live(snap, tl, cats, &holders::alive_after(tl, entry.checked_sub(1)), &mut r.names);
    Oom {
        device: device as u32,
        entry: entry as u32,
        step,
        time_us: t.time_us(entry),
        requested_bytes: requested,
        device_free_bytes: device_free,
        reserved_bytes: fig.reserved_bytes,
        allocated_bytes: fig.allocated_bytes,
        live_block_bytes: fig.live_block_bytes,
        cached_free_bytes: fig.cached_free_bytes,
        largest_free_block_bytes: largest_fit,
        largest_free_block_any_bytes: fig.largest_free_block_any_bytes,
        pool: pool.0,
        stream,
        segment_bytes_needed: segment_needed,
        free_by_pool: fig.pools,
        verdict,
        why,
        phase,
        categories: holders::category_list(&cat_bytes),
        holders,
        advice,
        settings: settings.clone(),
    }
}

/// The elements alive at the peak of `tl` (before the first step when that is the highest).
fn peak_elements(tl: &Timeline) -> Vec<u32> {
    match crate::flame::peak(tl) {
        crate::flame::At::Step(s) => tl.live_at(s, 0),
        _ => tl.initial_elements(),
    }
}

fn peak(r: &mut Reading, ooms: &[Oom], entry: Option<usize>, state: &AllocatorState) -> Peak {
    let (snap, tl, cats) = (r.snap, r.tl, r.cats);
    let device = tl.device();
    let info = snap.device_info().into_iter().find(|d| d.device == device as i64 && d.total_bytes > 0);
    let from_oom = ooms.iter().filter_map(|o| Some(o.reserved_bytes.saturating_add(o.device_free_bytes?))).max();
    let (capacity, source) = match (info, from_oom) {
        (Some(d), _) => (Some(d.total_bytes), Some("memscape_devices".to_string())),
        (None, Some(c)) => (Some(c), Some("oom".to_string())),
        (None, None) => (None, None),
    };
    let peak_bytes = tl.peak_bytes();
    Peak {
        device: device as u32,
        peak_bytes,
        step: tl.peak_step(),
        entry: entry.map(|e| e as u32),
        reserved_bytes: state.reserved_bytes,
        capacity_bytes: capacity,
        capacity_source: source,
        headroom_bytes: capacity
            .map(|c| (i128::from(c) - i128::from(peak_bytes)).clamp(i64::MIN.into(), i64::MAX.into()) as i64),
        categories: holders::category_list(&cats.at_peak),
        holders: holders::live(snap, tl, cats, &peak_elements(tl), &mut r.names),
    }
}

fn at_end(r: &mut Reading, state: &AllocatorState) -> AtEnd {
    let (snap, tl, cats, settings) = (r.snap, r.tl, r.cats, r.settings);
    let layout = figures::layout(state, settings);
    let f = layout.figures(state);
    let s = |b: u64| format_size(i128::from(b));
    let share = if f.reserved_bytes == 0 { 0.0 } else { f.cached_free_bytes as f64 / f.reserved_bytes as f64 };
    let described = if f.reserved_bytes == 0 {
        "nothing is reserved at the end".to_string()
    } else {
        format!(
            "{} reserved, {} of it free in the cache ({:.2}%) in {} blocks, the largest {}",
            s(f.reserved_bytes),
            s(f.cached_free_bytes),
            100.0 * share,
            f.free_blocks,
            s(f.largest_free_block_any_bytes)
        )
    };
    let (verdict, why) = if f.reserved_bytes == 0 {
        (None, "with nothing reserved there was nothing to run out of".to_string())
    } else if share < 0.01 {
        (
            Some(Verdict::Exhausted),
            format!(
                "live memory fills what was reserved, so any request above {} needed new device memory",
                s(f.cached_free_bytes)
            ),
        )
    } else if share >= 0.1 && f.largest_free_block_any_bytes.saturating_mul(2) < f.cached_free_bytes {
        (
            Some(Verdict::Fragmentation),
            format!(
                "a request between {} and {} finds enough free bytes in the cache but no block to hold it, and needs new device memory",
                s(f.largest_free_block_any_bytes),
                s(f.cached_free_bytes)
            ),
        )
    } else {
        (None, "without the request's size the figures cannot tell".to_string())
    };
    let alive = holders::alive_after(tl, snap.trace(tl.device()).len().checked_sub(1));
    AtEnd {
        figures: f,
        state: described,
        verdict,
        why,
        assumption: "the trace has no oom event, so nothing failed in it; the verdict is for a snapshot dumped at an error without one (an OOM observer, `_dump_snapshot` in an `except torch.cuda.OutOfMemoryError`): under 1% of reserved free in the cache, exhausted; over 10% free with no block half that size, fragmentation".into(),
        holders: holders::live(snap, tl, cats, &alive, &mut r.names),
    }
}
