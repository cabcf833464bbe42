//! Who holds the memory at one moment: bytes per category, and the call sites of the live
//! allocations, each charged to its allocation's stack ([`Charge`], the rule the flame graph
//! and the comparison of runs use too).

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::categories::{Categories, Category, CategoryBytes, Why, N};
use crate::model::Snapshot;
use crate::sites::{Charge, SiteNames};
use crate::timeline::{Origin, Timeline};

/// How many call sites a report lists.
pub const TOP_SITES: usize = 10;

/// Live bytes of one call site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// `filename:line:name` of the first frame of the user's code in the allocations' stack
    /// ([`Charge::site`]: a C++ stack's node and op, `allocated before recording; freed at
    /// ...`, `(no stack)`), or what the categories inferred of memory alive from before the
    /// recording without a stack (`(no frames) optimizer state, inferred`).
    pub site: String,
    /// Requested bytes of its live blocks.
    pub bytes: u64,
    /// Its live blocks.
    pub count: u32,
}

/// The elements of the blocks timeline `tl` alive once trace entry `entry` and everything
/// before it happened (`None`: before the first entry): the allocator's live blocks then,
/// pending frees included. O(k log n) for k of them.
pub fn alive_after(tl: &Timeline, entry: Option<usize>) -> Vec<u32> {
    let step = entry.map_or(0, |e| tl.step_of_entry(u32::try_from(e).unwrap_or(u32::MAX).saturating_add(1)));
    match step {
        0 => tl.initial_elements(),
        k => tl.live_at(k - 1, 0),
    }
}

/// The `TOP_SITES` largest holders among the elements `ids` of `tl`, largest first (ties by
/// name); `names` keeps each charge's name for the next call. Memory alive from before the recording to its end with no stack is named by what
/// the categories made of it (`(no frames) optimizer state, inferred`).
pub fn live(snap: &Snapshot, tl: &Timeline, cats: &Categories, ids: &[u32], names: &mut SiteNames) -> Vec<Holder> {
    let els = tl.elements();
    let mut by_site: FxHashMap<std::rc::Rc<str>, (u64, u32)> = FxHashMap::default();
    for &id in ids {
        let Some(e) = els.get(id as usize) else { continue };
        let charge = Charge::of(snap, tl.device(), e);
        let inferred = match charge {
            Charge::Before(_) if e.origin == Origin::Snapshot => cats.before_recording(e.addr),
            _ => None,
        };
        let site = match inferred {
            Some(class) => before_recording_name(class.why).into(),
            None => names.get(snap, charge),
        };
        let slot = by_site.entry(site).or_default();
        slot.0 = slot.0.saturating_add(e.size);
        slot.1 = slot.1.saturating_add(1);
    }
    let mut v: Vec<Holder> =
        by_site.into_iter().map(|(site, (bytes, count))| Holder { site: site.to_string(), bytes, count }).collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    v.truncate(TOP_SITES);
    v
}

/// A holder's name for blocks alive from before the recording with no line of their own.
fn before_recording_name(why: Why) -> &'static str {
    match why {
        Why::InferredParameter => "(no frames) parameters, inferred",
        Why::InferredOptimizerState => "(no frames) optimizer state, inferred",
        Why::InferredBuffer => "(no frames) buffers or frozen parameters, inferred",
        _ => "(no frames) persistent before recording: parameters or optimizer state",
    }
}

/// Bytes per category once trace entry `entry` and everything before it happened (`None`:
/// before the first entry, which the categories know only from the first step).
pub fn categories_after(tl: &Timeline, cats: &Categories, entry: Option<usize>) -> [u64; N] {
    let step = entry.map_or(0, |e| tl.step_of_entry((e as u32).saturating_add(1)));
    cats.bytes_at(tl, step.saturating_sub(1))
}

/// The step whose state is the one after `entry` (the last alloc or free at or before it).
pub fn step_after(tl: &Timeline, entry: Option<usize>) -> u32 {
    entry.map_or(0, |e| tl.step_of_entry((e as u32).saturating_add(1))).saturating_sub(1)
}

/// The categories as a list, in [`Category::ALL`] order.
pub fn category_list(b: &[u64; N]) -> Vec<CategoryBytes> {
    Category::ALL.iter().map(|&c| CategoryBytes { category: c, bytes: b[c.index()] }).collect()
}
