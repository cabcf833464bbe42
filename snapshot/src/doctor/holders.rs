//! Who holds the memory at one moment: bytes per category, and the call sites (the first frame
//! of the user's own code) of the live blocks.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::categories::{Categories, Category, CategoryBytes, Why, N};
use crate::model::{Snapshot, StackId};
use crate::state::BlockView;
use crate::timeline::Timeline;

/// How many call sites a report lists.
pub const TOP_SITES: usize = 10;

/// Live bytes of one call site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// `filename:line:name` of the first frame of the user's code (`(no stack)` without one).
    pub site: String,
    /// Requested bytes of its live blocks.
    pub bytes: u64,
    /// Its live blocks.
    pub count: u32,
}

/// The `TOP_SITES` largest call sites of `(stack, bytes)` pairs, largest first.
pub fn top_sites(snap: &Snapshot, live: impl Iterator<Item = (Option<StackId>, u64)>) -> Vec<Holder> {
    let mut by_stack: FxHashMap<Option<StackId>, (u64, u32)> = FxHashMap::default();
    for (stack, bytes) in live {
        let e = by_stack.entry(stack).or_default();
        e.0 = e.0.saturating_add(bytes);
        e.1 += 1;
    }
    let mut by_site: FxHashMap<String, (u64, u32)> = FxHashMap::default();
    for (stack, (bytes, count)) in by_stack {
        let site = crate::diff::site_name(snap, stack);
        let e = by_site.entry(site).or_default();
        e.0 = e.0.saturating_add(bytes);
        e.1 += count;
    }
    let mut v: Vec<Holder> = by_site.into_iter().map(|(site, (bytes, count))| Holder { site, bytes, count }).collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    v.truncate(TOP_SITES);
    v
}

/// The `TOP_SITES` largest holders of live `blocks`: call sites, and for blocks without a line
/// of their own that were alive from before the recording, what the categories made of them
/// (`(no frames) optimizer state, inferred`).
pub fn live<'a>(snap: &Snapshot, cats: &Categories, blocks: impl Iterator<Item = &'a BlockView>) -> Vec<Holder> {
    let mut before: FxHashMap<&'static str, (u64, u32)> = FxHashMap::default();
    let no_site = |s: Option<StackId>| s.is_none_or(|s| crate::sites::call_site(snap, s).is_none());
    let rest = blocks.filter_map(|b| match cats.before_recording(b.address) {
        Some(class) if no_site(b.stack) => {
            let e = before.entry(before_recording_name(class.why)).or_default();
            e.0 = e.0.saturating_add(b.requested_size);
            e.1 += 1;
            None
        }
        _ => Some((b.stack, b.requested_size)),
    });
    let mut v = top_sites(snap, rest);
    v.extend(before.into_iter().map(|(site, (bytes, count))| Holder { site: site.into(), bytes, count }));
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
