//! PyTorch's own categories beside memscape's, on the same allocations: a `torch.profiler`
//! trace and the raw memory timeline of the same run (`export_memory_timeline(".raw.json.gz")`).
//!
//! The timeline's CREATE rows are the trace's allocations of its device one for one, in
//! order, at the same nanosecond (PyTorch's memory profiler reads the same events); its other
//! rows (what existed before the profile, a tensor's new version) are not in the trace. An
//! allocation of the trace is matched to the next timeline allocation of the same size within
//! a microsecond (the timeline's times are PyTorch's float microseconds), looking ahead a
//! bounded number of rows, so the join is linear and a row that is not the trace's is passed
//! over. The category is the one the tensor was created with.

use serde::{Deserialize, Serialize};

use super::{Categories, Category};
use crate::model::{Action, Snapshot};
use crate::timeline::Timeline;

/// How far ahead in the timeline an allocation's row is looked for.
const LOOKAHEAD: usize = 256;

/// PyTorch's category of each allocation of a trace's timeline, and the two side by side.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Beside {
    /// Per element of the trace's blocks timeline: PyTorch's category (index in
    /// [`Category::ALL`]), or `u8::MAX` where no row matched.
    pub theirs: Vec<u8>,
    /// Allocations of the trace.
    pub allocations: u64,
    /// Of those, the ones a timeline row matched.
    pub matched: u64,
    /// At the trace's peak: bytes per (memscape's category, PyTorch's), largest first;
    /// PyTorch's is `None` for an allocation no row matched.
    pub at_peak: Vec<(Category, Option<Category>, u64)>,
    /// The step of the peak.
    pub peak_step: u32,
}

impl Beside {
    /// Bytes at the peak where the two agree, and in all.
    pub fn agreement(&self) -> (u64, u64) {
        let all = self.at_peak.iter().map(|r| r.2).sum();
        let same = self.at_peak.iter().filter(|r| Some(r.0) == r.1).map(|r| r.2).sum();
        (same, all)
    }
}

/// An allocation of a raw memory timeline: its size, time (µs) and PyTorch's category (index
/// in [`Category::ALL`]), in the timeline's order: what a trace's worker needs of a timeline
/// open in another.
pub type Row = (u64, i64, u8);

/// The allocations of a raw memory timeline read as a snapshot (its device 0).
pub fn timeline_rows(timeline: &Snapshot) -> Vec<Row> {
    let m = timeline.trace(0);
    (0..m.len())
        .filter(|&j| m.action(j) == Action::Alloc)
        .filter_map(|j| {
            let c = Category::parse(timeline.str(m.category(j)?))?;
            Some((m.size(j), m.time_us(j).unwrap_or(i64::MIN), c.index() as u8))
        })
        .collect()
}

/// PyTorch's categories of the trace `trace` (its timeline `tl`, memscape's `cats`) from the
/// raw memory timeline `timeline` of the same run, read as a snapshot.
pub fn beside(trace: &Snapshot, tl: &Timeline, cats: &Categories, timeline: &Snapshot) -> Beside {
    beside_rows(trace, tl, cats, &timeline_rows(timeline))
}

/// [`beside`] from the timeline's [`timeline_rows`].
pub fn beside_rows(trace: &Snapshot, tl: &Timeline, cats: &Categories, rows: &[Row]) -> Beside {
    let t = trace.trace(tl.device());
    let mut by_entry = vec![u8::MAX; t.len()];
    let (mut next, mut allocations, mut matched) = (0usize, 0u64, 0u64);
    for (i, slot) in by_entry.iter_mut().enumerate() {
        if t.action(i) != Action::Alloc {
            continue;
        }
        allocations += 1;
        let (size, time) = (t.size(i), t.time_us(i).unwrap_or(i64::MIN));
        let end = rows.len().min(next + LOOKAHEAD);
        if let Some(k) = (next..end).find(|&k| rows[k].0 == size && (rows[k].1 - time).abs() <= 1) {
            *slot = rows[k].2;
            matched += 1;
            next = k + 1;
        }
    }
    let theirs: Vec<u8> =
        tl.elements().iter().map(|e| e.alloc_entry.map_or(u8::MAX, |i| by_entry[i as usize])).collect();
    let peak_step = tl.peak_step();
    let mut sums: rustc_hash::FxHashMap<(Category, Option<Category>), u64> = Default::default();
    for id in tl.live_at(peak_step, 0) {
        let e = &tl.elements()[id as usize];
        let theirs = Category::ALL.get(usize::from(theirs[id as usize])).copied();
        *sums.entry((cats.class(id).category, theirs)).or_default() += e.size;
    }
    let mut at_peak: Vec<_> = sums.into_iter().map(|((a, b), n)| (a, b, n)).collect();
    at_peak.sort_by_key(|r| (std::cmp::Reverse(r.2), r.0.index(), r.1.map(Category::index)));
    Beside { theirs, allocations, matched, at_peak, peak_step }
}
