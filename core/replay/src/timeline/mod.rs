//! The Active Memory Timeline (and its segment twin) with MemoryViz.js's semantics but no
//! cap on the number of allocations, plus a level-of-detail query per pixel column.
//!
//! Semantics, as in PyTorch's viewer: allocations and frees are paired by address; a free
//! with no recorded allocation becomes an element alive from the start; `active_allocated`
//! blocks of the final snapshot not accounted for by the trace are alive from the start too;
//! sizes are requested bytes. The x axis is the step: one per alloc or free. Elements are
//! stacked in the order they appeared (pre-existing ones at the bottom), and a freed element
//! lets the ones above slide down.

mod build;
mod inside;
mod pairing;

pub use inside::Inside;

use serde::{Deserialize, Serialize};

use crate::model::StackId;

/// Which memory the timeline follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TimelineKind {
    /// Allocations handed to tensors (`alloc` / `free_completed`).
    Blocks,
    /// Reserved memory: segments (`segment_alloc` / `segment_free`, `segment_map` / `segment_unmap`).
    Segments,
    /// Allocated memory with each private pool as its envelope (PyTorch's "Allocated Memory
    /// (incl. Private Pools)", [`crate::pools::envelope_timeline`]): the blocks timeline's
    /// steps and elements, a private pool's allocations at 0 bytes, drawn inside its envelope
    /// by a second pass ([`Inside`]).
    PoolEnvelopes,
}

/// Where an element comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Origin {
    /// Allocated inside the trace.
    Traced,
    /// Freed inside the trace, allocated before recording began.
    UnmatchedFree,
    /// Alive in the final snapshot, allocated before recording began.
    Snapshot,
}

/// One allocation (or segment) over its lifetime.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Element {
    /// Address.
    pub addr: u64,
    /// Requested bytes (segments: total bytes).
    pub size: u64,
    /// First step at which it is alive (0 for elements alive before the trace).
    pub start: u32,
    /// First step at which it is no longer alive (`n_steps` if alive at the end).
    pub end: u32,
    /// Where it comes from.
    pub origin: Origin,
    /// Trace entry of its allocation.
    pub alloc_entry: Option<u32>,
    /// Trace entry of its free.
    pub free_entry: Option<u32>,
    /// Its allocation's stack: the `alloc` entry's, or the final block's `frames`. `None` for
    /// an unmatched free (the free's stack, `free_entry`'s, is where it went, not where it was
    /// made; `sites::Charge` is the one rule for what an element is charged to).
    pub stack: Option<StackId>,
    /// For snapshot elements: the index of its segment in [`Snapshot::segments`](crate::model::Snapshot::segments).
    pub segment: Option<u32>,
    /// Position in the stacking order (lower is drawn below).
    pub order: u32,
}

/// A laid-out timeline of one device.
#[derive(Clone, Debug)]
pub struct Timeline {
    kind: TimelineKind,
    device: usize,
    elements: Vec<Element>,
    step_entry: Vec<u32>,
    totals: Vec<u64>,
    initial_total: u64,
    n_unmatched: usize,
    n_snapshot: usize,
    classes: Vec<ClassIndex>,
    block_argmax: Vec<u32>,
    /// The first step with the highest total, found once at layout: callers ask for it per
    /// request and per step, so it must not cost a scan.
    peak_step: u32,
    /// See [`Timeline::lasting_bytes`].
    lasting_bytes: u64,
}

const BLOCK: usize = 64;

/// Elements of one power-of-two size class, indexed for stabbing queries and sweeps.
#[derive(Clone, Debug, Default)]
struct ClassIndex {
    /// Element ids sorted by start, their starts, and a max-end tree over that order.
    ids: Vec<u32>,
    starts: Vec<u32>,
    max_end: Vec<u32>,
    /// Element ids sorted by end, their ends, and a min-start tree over that order.
    by_end: Vec<u32>,
    ends: Vec<u32>,
    min_start: Vec<u32>,
    leaves: usize,
}

/// A segment tree over `leaves` values; `better(a, b)` is true when `a` should win.
fn build_tree(values: impl Iterator<Item = u32>, leaves: usize, empty: u32, better: fn(u32, u32) -> bool) -> Vec<u32> {
    let mut tree = vec![empty; 2 * leaves];
    for (k, v) in values.enumerate() {
        tree[leaves + k] = v;
    }
    for k in (1..leaves).rev() {
        let (a, b) = (tree[2 * k], tree[2 * k + 1]);
        tree[k] = if better(a, b) { a } else { b };
    }
    tree
}

/// Calls `f(i)` for every leaf `i` in `qlo..qhi` whose value passes `keep`, visiting only
/// subtrees whose best value passes: O((k + 1) log n) for k hits.
fn visit(
    tree: &[u32],
    node: usize,
    lo: usize,
    hi: usize,
    q: (usize, usize),
    keep: &impl Fn(u32) -> bool,
    f: &mut impl FnMut(usize),
) {
    if hi <= q.0 || lo >= q.1 || !keep(tree[node]) {
        return;
    }
    if hi - lo == 1 {
        f(lo);
        return;
    }
    let mid = (lo + hi) / 2;
    visit(tree, 2 * node, lo, mid, q, keep, f);
    visit(tree, 2 * node + 1, mid, hi, q, keep, f);
}

/// Like [`visit`] over the leaves `q.0..q.1`, but a short range is scanned directly: a
/// sequential scan beats the descent until the range is long and mostly filtered out.
fn visit_range(tree: &[u32], leaves: usize, q: (usize, usize), keep: &impl Fn(u32) -> bool, f: &mut impl FnMut(usize)) {
    if q.1 <= q.0 {
        return;
    }
    if q.1 - q.0 <= 512 {
        for k in q.0..q.1 {
            if keep(tree[leaves + k]) {
                f(k);
            }
        }
    } else {
        visit(tree, 1, 0, leaves, q, keep, f);
    }
}

/// The first index at or after `from` whose value exceeds `x` (values sorted), by galloping.
fn gallop(v: &[u32], from: usize, x: u32) -> usize {
    gallop_while(v, from, |e| e <= x)
}

/// The first index at or after `from` whose value fails `before` (which holds for a prefix
/// of the sorted values), by galloping: O(log d) for an answer d places on.
pub fn gallop_while(v: &[u32], from: usize, before: impl Fn(u32) -> bool) -> usize {
    let mut step = 1;
    let mut lo = from;
    let mut hi = from;
    while hi < v.len() && before(v[hi]) {
        lo = hi + 1;
        hi += step;
        step *= 2;
    }
    let hi = hi.min(v.len());
    lo + v[lo.min(hi)..hi].partition_point(|&e| before(e))
}

/// An element's lifetime and id, as the class indexes sort them: sorting these records
/// rather than ids looked up in the elements keeps the sort in cache (at a million elements
/// the lookups made the layout grow 7x to 8x per 4x elements).
#[derive(Clone, Copy)]
struct Life {
    start: u32,
    end: u32,
    id: u32,
}

impl ClassIndex {
    /// `lives` in element order; both sorts are stable (ties by start keep element order,
    /// ties by end keep start order), as the sorts of ids did.
    fn build(mut lives: Vec<Life>) -> Self {
        lives.sort_by_key(|l| l.start);
        let ids: Vec<u32> = lives.iter().map(|l| l.id).collect();
        let starts: Vec<u32> = lives.iter().map(|l| l.start).collect();
        let leaves = lives.len().next_power_of_two().max(1);
        let max_end = build_tree(lives.iter().map(|l| l.end), leaves, 0, |a, b| a > b);
        lives.sort_by_key(|l| l.end);
        let by_end: Vec<u32> = lives.iter().map(|l| l.id).collect();
        let ends: Vec<u32> = lives.iter().map(|l| l.end).collect();
        let min_start = build_tree(lives.iter().map(|l| l.start), leaves, u32::MAX, |a, b| a < b);
        ClassIndex { ids, starts, max_end, by_end, ends, min_start, leaves }
    }

    /// Calls `f` for every element alive at `step`: start ≤ step < end.
    fn stab(&self, step: u32, f: &mut impl FnMut(u32)) {
        let prefix = self.starts.partition_point(|&s| s <= step);
        visit(&self.max_end, 1, 0, self.leaves, (0, prefix), &|end| end > step, &mut |k| f(self.ids[k]));
    }

    /// Calls `f` for every element alive at some step of `lo..hi`: start < hi and end > lo.
    fn overlapping(&self, lo: u32, hi: u32, f: &mut impl FnMut(u32)) {
        let prefix = self.starts.partition_point(|&s| s < hi);
        visit(&self.max_end, 1, 0, self.leaves, (0, prefix), &|end| end > lo, &mut |k| f(self.ids[k]));
    }
}

fn size_class(size: u64) -> usize {
    (64 - size.leading_zeros()) as usize
}

/// A stable, distinct colour for an element (seeded by its stacking order): hues spaced by
/// the golden angle.
pub fn colour(seed: u32) -> u32 {
    // A float remainder and `round` are library calls in wasm, and a sweep asks for the
    // colour of every band it opens: `h % 2.0` and the rounding are worked out exactly here
    // (h is in 0..6, the rounded values in 0..=255).
    hue(seed, |h| h - 2.0 * (h * 0.5).floor(), round)
}

/// [`colour`], given how to take the remainder of a division by 2 and how to round.
fn hue(seed: u32, rem2: impl Fn(f64) -> f64, round: impl Fn(f64) -> f64) -> u32 {
    let h = (f64::from(seed) * 0.618_033_988_749_895).fract() * 6.0;
    hsl_with(h, 0.55, 0.58, rem2, round)
}

/// RGB of hue `h` (0 to 6), saturation `s` and lightness `l`, given how to take the remainder
/// of a division by 2 and how to round.
pub(crate) fn hsl_with(h: f64, s: f64, l: f64, rem2: impl Fn(f64) -> f64, round: impl Fn(f64) -> f64) -> u32 {
    let c = (1.0 - (2.0 * l - 1.0f64).abs()) * s;
    let x = c * (1.0 - (rem2(h) - 1.0).abs());
    let (r, g, b) = match h as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let byte = |v: f64| round(((v + m) * 255.0).clamp(0.0, 255.0)) as u32;
    (byte(r) << 16) | (byte(g) << 8) | byte(b)
}

/// `x.round()` for `x` in 0..2^52, exactly, without the library call `round` is in wasm
/// (its halves go away from zero, wasm's `nearest` to even): the fraction `x - floor(x)`
/// is exact there.
fn round(x: f64) -> f64 {
    let f = x.floor();
    if x - f >= 0.5 {
        f + 1.0
    } else {
        f
    }
}

/// Bytes, colour and search hits of a run of elements too small to draw on their own.
#[derive(Clone, Copy, Debug, Default)]
struct Mix {
    bytes: u64,
    hit_bytes: u64,
    /// Each channel times the bytes of its element, summed: exact, so a run that empties
    /// again is empty.
    rgb: [u128; 3],
}

impl Mix {
    fn add(&mut self, size: u64, rgb: u32, hit: bool, sign: bool) {
        let channels = [(rgb >> 16) & 255, (rgb >> 8) & 255, rgb & 255];
        let apply = |x: u64, d: u64| if sign { x.saturating_add(d) } else { x.saturating_sub(d) };
        self.bytes = apply(self.bytes, size);
        if hit {
            self.hit_bytes = apply(self.hit_bytes, size);
        }
        // A u128 product is a library call in wasm: in u64 where it fits (always, in practice).
        let small = size <= u64::MAX / 255;
        for (sum, ch) in self.rgb.iter_mut().zip(channels) {
            let d = if small { u128::from(size * u64::from(ch)) } else { u128::from(size) * u128::from(ch) };
            *sum = if sign { sum.saturating_add(d) } else { sum.saturating_sub(d) };
        }
    }

    fn merge(&mut self, o: &Mix) {
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.hit_bytes = self.hit_bytes.saturating_add(o.hit_bytes);
        for (a, b) in self.rgb.iter_mut().zip(o.rgb) {
            *a = a.saturating_add(b);
        }
    }

    /// The bytes-weighted mean colour.
    fn colour(&self) -> u32 {
        let b = u128::from(self.bytes.max(1));
        // In u64 where the sum fits (always, below 2^56 bytes): a u128 division is a library
        // call in wasm, and every band a sweep opens asks for its colour.
        let ch = |k: usize| {
            let sum = self.rgb[k] + b / 2;
            let mean = match (u64::try_from(sum), u64::try_from(b)) {
                (Ok(s), Ok(d)) => u128::from(s / d),
                _ => sum / b,
            };
            mean.min(255) as u32
        };
        (ch(0) << 16) | (ch(1) << 8) | ch(2)
    }
}

/// An element drawn on its own in the live stack.
#[derive(Clone, Copy, Debug)]
struct Drawn {
    /// Its position in the stacking order.
    order: u32,
    id: u32,
    /// Its open band.
    band: usize,
    /// Its colour, worked out once: its band opens again whenever something below changes.
    rgb: u32,
}

/// The live stack during a sweep: the elements drawn on their own in stacking order, and
/// the runs of smaller elements around them (`gaps[i]` lies just below `drawn[i]`, the last
/// gap on top), each with its open band.
#[derive(Debug)]
struct Stack {
    drawn: Vec<Drawn>,
    gaps: Vec<(Mix, Option<usize>)>,
}

impl Default for Stack {
    fn default() -> Self {
        Stack { drawn: Vec::new(), gaps: vec![(Mix::default(), None)] }
    }
}

impl Stack {
    /// Closes the bands of `gaps[from..]` and `drawn[from..]` at the column before `c`.
    fn close_from(&self, from: usize, c: u32, bands: &mut [Band]) {
        let last = c.saturating_sub(1);
        for d in &self.drawn[from.min(self.drawn.len())..] {
            bands[d.band].last_column = last;
        }
        for &(_, band) in &self.gaps[from.min(self.gaps.len())..] {
            if let Some(band) = band {
                bands[band].last_column = last;
            }
        }
    }

    /// The top of the stack: bytes below the last band.
    fn top(&self, bands: &[Band]) -> u64 {
        let band = self.gaps.last().and_then(|g| g.1).or_else(|| self.drawn.last().map(|d| d.band));
        band.map_or(0, |b| bands[b].offset_bytes.saturating_add(bands[b].size_bytes))
    }

    /// Applies what changed before column `c` (sorted by order; an element that entered is
    /// newer than everything alive before, so entering ones all go on top), closes the bands
    /// that moved and opens their replacements. Returns the bytes below the lowest change.
    fn apply(
        &mut self,
        changed: &[(u32, u32, bool)],
        elements: &[Element],
        min_bytes: u64,
        hit: &impl Fn(u32) -> bool,
        c: u32,
        bands: &mut Vec<Band>,
    ) -> u64 {
        // The lowest gap index whose contents or position changed.
        let mut from = usize::MAX;
        let mut removed: Vec<usize> = Vec::new();
        let mut entering = false;
        for &(order, id, entered) in changed {
            let e = &elements[id as usize];
            if entered {
                entering = true;
            } else if e.size >= min_bytes {
                if let Ok(i) = self.drawn.binary_search_by_key(&order, |d| d.order) {
                    removed.push(i);
                    from = from.min(i);
                }
            } else {
                let g = self.drawn.partition_point(|d| d.order < order);
                self.gaps[g].0.add(e.size, colour(e.order), hit(id), false);
                from = from.min(g);
            }
        }
        if entering {
            from = from.min(self.drawn.len());
        }
        if from == usize::MAX {
            return u64::MAX;
        }
        self.close_from(from, c, bands);
        let below = match from.checked_sub(1) {
            Some(i) => bands[self.drawn[i].band].offset_bytes.saturating_add(bands[self.drawn[i].band].size_bytes),
            None => 0,
        };
        let mut offset = below;
        removed.sort_unstable();
        let old_drawn = self.drawn.split_off(from);
        let old_gaps = self.gaps.split_off(from);
        let mut acc = old_gaps[0].0;
        let mut r = 0;
        for (k, d) in old_drawn.into_iter().enumerate() {
            if r < removed.len() && removed[r] == from + k {
                r += 1;
                acc.merge(&old_gaps[k + 1].0);
            } else {
                self.gaps.push((acc, None));
                self.drawn.push(d);
                acc = old_gaps[k + 1].0;
            }
        }
        for &(order, id, entered) in changed {
            if !entered {
                continue;
            }
            let e = &elements[id as usize];
            if e.size >= min_bytes {
                self.gaps.push((acc, None));
                self.drawn.push(Drawn { order, id, band: 0, rgb: colour(e.order) });
                acc = Mix::default();
            } else {
                acc.add(e.size, colour(e.order), hit(id), true);
            }
        }
        self.gaps.push((acc, None));
        // New bands from `from` up.
        let mut open = |element: Option<u32>, size: u64, rgb: u32, hit_bytes: u64, offset: &mut u64| {
            bands.push(Band {
                element,
                first_column: c,
                last_column: c,
                offset_bytes: *offset,
                size_bytes: size,
                rgb,
                hit_bytes,
            });
            *offset = offset.saturating_add(size);
            bands.len() - 1
        };
        for i in from..self.gaps.len() {
            let mix = self.gaps[i].0;
            self.gaps[i].1 = (mix.bytes > 0).then(|| open(None, mix.bytes, mix.colour(), mix.hit_bytes, &mut offset));
            if let Some(d) = self.drawn.get_mut(i) {
                let size = elements[d.id as usize].size;
                let hit_bytes = if hit(d.id) { size } else { 0 };
                d.band = open(Some(d.id), size, d.rgb, hit_bytes, &mut offset);
            }
        }
        below
    }
}

/// A level-of-detail request: a window of steps drawn into `columns` pixel columns; elements
/// smaller than `min_bytes` (a fraction of a pixel row) are blended with their neighbours
/// in the stack instead of drawn on their own.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LodQuery {
    /// First visible step (fractional).
    pub start: f64,
    /// End of the visible window (fractional, exclusive).
    pub end: f64,
    /// Pixel columns.
    pub columns: u32,
    /// Smallest element drawn as a band of its own; `u64::MAX` asks for the columns' totals
    /// only (no bands).
    pub min_bytes: u64,
}

/// The answer to a [`LodQuery`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Lod {
    /// One per pixel column.
    pub columns: Vec<LodColumn>,
    /// Drawn bands: each is one element (or one blend of small ones) at one offset over a
    /// run of columns. A band ends where its contents end or where something below changes.
    pub bands: Vec<Band>,
    /// Bytes at the bottom of the stack that stay the same in every column (what is alive
    /// through the whole window and below everything that changes): where a y axis can
    /// start without hiding anything that moves.
    pub stable_bytes: u64,
}

/// What one pixel column shows: the state at the step with the highest total in its range.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LodColumn {
    /// The sampled step.
    pub step: u32,
    /// Live bytes at that step.
    pub total_bytes: u64,
    /// Bytes of the bands (elements and blends): the column's total, unless the trace's
    /// totals disagree with its elements (then the rest is summarized on top).
    pub drawn_bytes: u64,
    /// Bytes no band accounts for, stacked on top of the bands.
    pub summarized_bytes: u64,
}

/// One element at one offset over a run of columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Band {
    /// Element index; `None` for a blend of elements each smaller than the query's
    /// `min_bytes` (a run of them between two drawn elements).
    pub element: Option<u32>,
    /// First column.
    pub first_column: u32,
    /// Last column (inclusive).
    pub last_column: u32,
    /// Bytes below it.
    pub offset_bytes: u64,
    /// Its size.
    pub size_bytes: u64,
    /// Its colour: the element's ([`colour`] of its order), or a blend's, its elements'
    /// colours weighted by their bytes.
    pub rgb: u32,
    /// Bytes of search hits in it (the element's size when it is one).
    pub hit_bytes: u64,
}

/// The live bytes after each step (and one past the last) of elements that together hold more
/// than `u64::MAX` bytes, each total saturating there: summed in i128 (an element's bytes at
/// most 2^64, 2^32 of them at most 2^96). Only a hostile file gets here.
#[cold]
fn saturated_totals(elements: &[Element], n_steps: u32) -> Vec<u64> {
    let mut delta = vec![0i128; n_steps as usize + 1];
    for e in elements {
        delta[e.start as usize] += i128::from(e.size);
        delta[e.end as usize] -= i128::from(e.size);
    }
    let mut run = 0i128;
    delta
        .into_iter()
        .map(|d| {
            run += d;
            u64::try_from(run.max(0)).unwrap_or(u64::MAX)
        })
        .collect()
}

impl Timeline {
    /// A timeline over the same steps as `self` with other elements: `initial` alive before
    /// the first step (the first on top), `allocs` the rest in the order they start.
    pub(crate) fn relaid(
        &self,
        kind: TimelineKind,
        elements: Vec<Element>,
        initial: Vec<u32>,
        n_unmatched: usize,
        allocs: Vec<u32>,
    ) -> Timeline {
        Self::finish(kind, self.device, elements, initial, n_unmatched, allocs, self.step_entry.clone())
    }

    /// Stacks the elements (`initial` below, in reverse, then `allocs` in order) and sums the
    /// totals of every step.
    fn finish(
        kind: TimelineKind,
        device: usize,
        mut elements: Vec<Element>,
        initial: Vec<u32>,
        n_unmatched: usize,
        allocs: Vec<u32>,
        step_entry: Vec<u32>,
    ) -> Timeline {
        let n_steps = step_entry.len().max(1) as u32;
        // Pre-existing elements are reversed, so the last snapshot element lies at the bottom
        // and the earliest unmatched free on top, as in PyTorch's viewer.
        let m = initial.len() as u32;
        for (k, &id) in initial.iter().enumerate() {
            elements[id as usize].order = m - 1 - k as u32;
        }
        for (k, &id) in allocs.iter().enumerate() {
            elements[id as usize].order = m + k as u32;
        }
        // Each element's bytes are added at its first step and taken away at its end, and
        // the running sum is the total at each step, summed in place. An element never ends
        // before it starts, so the sum never goes below zero, and while all the elements
        // together hold at most u64::MAX bytes wrapping arithmetic is exact: one vector of
        // 8 bytes a step, where a difference vector of i128 beside the totals took 24 (a
        // 0.9 GB file: 172 MB, the largest moment of the layout). Sizes past that (a hostile
        // file's) are summed again exactly, each total saturating at u64::MAX.
        let mut totals = vec![0u64; n_steps as usize + 1];
        let mut initial_total = 0u64;
        let (mut all, mut past_max) = (0u64, false);
        // The lowest place in the stack where anything ever changes.
        let mut first_change = u32::MAX;
        for e in &mut elements {
            e.end = e.end.min(n_steps);
            if e.origin != Origin::Traced {
                initial_total = initial_total.saturating_add(e.size);
            }
            if e.start > 0 || e.end < n_steps {
                first_change = first_change.min(e.order);
            }
            let (sum, over) = all.overflowing_add(e.size);
            (all, past_max) = (sum, past_max | over);
            totals[e.start as usize] = totals[e.start as usize].wrapping_add(e.size);
            totals[e.end as usize] = totals[e.end as usize].wrapping_sub(e.size);
        }
        if past_max {
            totals = saturated_totals(&elements, n_steps);
        } else {
            let mut run = 0u64;
            for t in &mut totals {
                run = run.wrapping_add(*t);
                *t = run;
            }
        }
        totals.truncate(n_steps as usize);
        let block_argmax: Vec<u32> =
            totals.chunks(BLOCK).enumerate().map(|(b, c)| (b * BLOCK + argmax(c)) as u32).collect();
        let peak_step =
            block_argmax
                .iter()
                .copied()
                .fold(0, |best, i| if totals[i as usize] > totals[best as usize] { i } else { best });
        // Below it, every element lives through every step; they are the initial ones in
        // reverse, then the allocations in order.
        let by_order = initial.iter().rev().chain(&allocs);
        let lasting_bytes = (by_order.take(first_change as usize))
            .fold(0u64, |sum, &id| sum.saturating_add(elements[id as usize].size));
        let mut by_class: Vec<Vec<Life>> = vec![Vec::new(); 65];
        for (i, e) in elements.iter().enumerate() {
            by_class[size_class(e.size)].push(Life { start: e.start, end: e.end, id: i as u32 });
        }
        let classes = by_class.into_iter().map(ClassIndex::build).collect();
        Timeline {
            kind,
            device,
            n_snapshot: initial.len() - n_unmatched,
            n_unmatched,
            elements,
            step_entry,
            totals,
            initial_total,
            classes,
            block_argmax,
            peak_step,
            lasting_bytes,
        }
    }

    /// Which memory this timeline follows.
    pub fn kind(&self) -> TimelineKind {
        self.kind
    }
    /// The device.
    pub fn device(&self) -> usize {
        self.device
    }
    /// All elements.
    pub fn elements(&self) -> &[Element] {
        &self.elements
    }
    /// Alloc and free steps in the trace.
    pub fn n_actions(&self) -> usize {
        self.step_entry.len()
    }
    /// Steps on the x axis (at least 1, so a trace-less snapshot still has a state to draw).
    pub fn n_steps(&self) -> u32 {
        self.totals.len() as u32
    }
    /// The trace entry behind a step.
    pub fn step_entry(&self, step: u32) -> Option<u32> {
        self.step_entry.get(step as usize).copied()
    }
    /// The first step at or after trace entry `entry`.
    pub fn step_of_entry(&self, entry: u32) -> u32 {
        self.step_entry.partition_point(|&e| e < entry) as u32
    }
    /// Live bytes once trace entry `entry` and everything before it happened (the way to
    /// compare two timelines, whose steps count different actions).
    pub fn total_after_entry(&self, entry: u32) -> u64 {
        match self.step_of_entry(entry.saturating_add(1)) {
            0 => self.initial_total,
            k => self.totals[k as usize - 1],
        }
    }
    /// Live bytes after each step.
    pub fn totals(&self) -> &[u64] {
        &self.totals
    }
    /// Live bytes before the first step.
    pub fn initial_bytes(&self) -> u64 {
        self.initial_total
    }
    /// Highest total, the initial state included (O(1)).
    pub fn peak_bytes(&self) -> u64 {
        self.peak_total().max(self.initial_total)
    }
    /// Highest total after a step (the initial state not included; O(1)).
    pub fn peak_total(&self) -> u64 {
        self.totals.get(self.peak_step as usize).copied().unwrap_or(0)
    }
    /// The first step with the highest total (O(1)).
    pub fn peak_step(&self) -> u32 {
        self.peak_step
    }
    /// Bytes at the bottom of the stack that no step changes: the elements below the lowest
    /// one that starts or ends in the trace (O(1)). A window inside the trace, drawn with
    /// every element on its own, has at least these stable bytes (a blend of thin elements
    /// straddling the line can start lower; a window that runs past the trace has none).
    pub fn lasting_bytes(&self) -> u64 {
        self.lasting_bytes
    }
    /// Live bytes at the end.
    pub fn final_bytes(&self) -> u64 {
        if self.step_entry.is_empty() {
            self.initial_total
        } else {
            self.totals.last().copied().unwrap_or(0)
        }
    }
    /// Elements alive before the first step.
    pub fn n_initial(&self) -> usize {
        self.n_unmatched + self.n_snapshot
    }
    /// Frees without a recorded allocation.
    pub fn n_unmatched_frees(&self) -> usize {
        self.n_unmatched
    }
    /// Elements known only from the final snapshot.
    pub fn n_snapshot_only(&self) -> usize {
        self.n_snapshot
    }

    /// The step with the highest total in `lo..hi` (clamped; `lo` when the range is empty).
    pub fn argmax_in(&self, lo: u32, hi: u32) -> u32 {
        let n = self.totals.len();
        let (lo, hi) = ((lo as usize).min(n.saturating_sub(1)), (hi as usize).min(n));
        if hi <= lo + 1 {
            return lo as u32;
        }
        let mut best = lo;
        let mut consider = |i: usize| {
            if self.totals[i] > self.totals[best] {
                best = i;
            }
        };
        let first_full = lo.div_ceil(BLOCK);
        let last_full = hi / BLOCK;
        if first_full >= last_full {
            (lo..hi).for_each(&mut consider);
        } else {
            (lo..first_full * BLOCK).for_each(&mut consider);
            for b in first_full..last_full {
                consider(self.block_argmax[b] as usize);
            }
            (last_full * BLOCK..hi).for_each(&mut consider);
        }
        best as u32
    }

    /// Elements of at least `min_bytes` alive after `step`, bottom to top.
    pub fn live_at(&self, step: u32, min_bytes: u64) -> Vec<u32> {
        let mut out = Vec::new();
        for c in &self.classes[size_class(min_bytes)..] {
            c.stab(step, &mut |id| {
                if self.elements[id as usize].size >= min_bytes {
                    out.push(id);
                }
            });
        }
        out.sort_unstable_by_key(|&id| self.elements[id as usize].order);
        out
    }

    /// Elements alive at some step of `lo..hi`, in element order: O((k + 1) log n) for k
    /// of them (a tree descent per size class, as [`Timeline::live_at`]).
    pub fn live_in(&self, lo: u32, hi: u32) -> Vec<u32> {
        let mut out = Vec::new();
        for c in &self.classes {
            c.overlapping(lo, hi, &mut |id| out.push(id));
        }
        out.sort_unstable();
        out
    }

    /// Elements alive before the first step (allocated before recording began), in element
    /// order: O(k + log n) for k of them (they start at 0, a prefix of each class).
    pub fn initial_elements(&self) -> Vec<u32> {
        let mut out: Vec<u32> = (self.classes.iter())
            .flat_map(|c| c.ids[..c.starts.partition_point(|&s| s == 0)].iter().copied())
            .filter(|&id| self.elements[id as usize].origin != Origin::Traced)
            .collect();
        out.sort_unstable();
        out
    }

    /// The element at `bytes` above the axis after `step`: elements are stacked in their
    /// order, every one of them, so the answer is the same whatever is drawn on its own.
    pub fn element_at(&self, step: u32, bytes: u64) -> Option<u32> {
        self.element_near(step, bytes, 0)
    }

    /// The element at `bytes` after `step` when it is at least `slack / 2` bytes (a quarter
    /// of a pixel row when `slack` is half of one: what is drawn on its own), else the
    /// largest one within `slack` bytes of `bytes`: a pointer over a row of blended thin
    /// allocations finds the largest of them.
    pub fn element_near(&self, step: u32, bytes: u64, slack: u64) -> Option<u32> {
        let (lo, hi) = (bytes.saturating_sub(slack), bytes.saturating_add(slack));
        let mut offset = 0u64;
        let mut best: Option<(u64, u32)> = None;
        for id in self.live_at(step, 1) {
            let size = self.elements[id as usize].size;
            let end = offset.saturating_add(size);
            if bytes >= offset && bytes < end && size >= slack / 2 {
                return Some(id);
            }
            if end > lo && offset <= hi && best.is_none_or(|b| size > b.0) {
                best = Some((size, id));
            }
            if offset > hi {
                break;
            }
            offset = end;
        }
        best.map(|b| b.1)
    }

    /// Answers a level-of-detail query with no search marks (see [`Timeline::lod_marked`]).
    pub fn lod(&self, q: &LodQuery) -> Lod {
        self.lod_marked(q, None)
    }

    /// Answers a level-of-detail query. Each column samples the step with the highest total
    /// in its range; columns are swept left to right applying only what changed between
    /// samples, so the cost follows the bands returned and the changes between columns, not
    /// the length of the trace. Every live element keeps its place in the stack: those of at
    /// least `min_bytes` are bands of their own, and each run of smaller ones between two of
    /// them is one blended band, coloured by its elements' colours weighted by their bytes.
    /// `hits` (by element) marks search matches: a blend counts the bytes of its hits.
    pub fn lod_marked(&self, q: &LodQuery, hits: Option<&[bool]>) -> Lod {
        let n = self.totals.len() as f64;
        let hit = |id: u32| hits.is_some_and(|h| h.get(id as usize).copied().unwrap_or(false));
        let sample = |_, lo: f64, hi: f64| {
            if hi <= 0.0 || lo >= n {
                return None;
            }
            let a = lo.max(0.0).floor() as u32;
            let b = (hi.ceil().min(n) as u32).max(a + 1);
            Some(self.argmax_in(a, b))
        };
        self.sweep(q, sample, hit)
    }

    /// The sweep of [`Timeline::lod_marked`], column `c` (steps `lo..hi` of the window)
    /// showing the step `sample(c, lo, hi)` (`None`: an empty column, outside the trace), the
    /// steps never decreasing from column to column; `hit(id)` marks a search match.
    fn sweep(&self, q: &LodQuery, sample: impl Fn(u32, f64, f64) -> Option<u32>, hit: impl Fn(u32) -> bool) -> Lod {
        let mut out = Lod::default();
        let cols = q.columns.max(1);
        let width = (q.end - q.start) / f64::from(cols);
        if !(width.is_finite() && width > 0.0) {
            return out;
        }
        let min_bytes = q.min_bytes.max(1);
        // Per class: the index and two cursors (into the end order and the start order)
        // that only move forward, since sampled steps increase from column to column. With
        // `min_bytes` at its maximum only the totals are asked for: no class is swept.
        let totals_only = min_bytes == u64::MAX;
        let mut classes: Vec<(&ClassIndex, usize, usize)> =
            self.classes.iter().filter(|c| !c.ids.is_empty() && !totals_only).map(|c| (c, 0, 0)).collect();
        let mut stack = Stack::default();
        let mut prev: Option<u32> = None;
        // What changed between two samples: (order, element, entered).
        let mut changed: Vec<(u32, u32, bool)> = Vec::new();
        out.stable_bytes = u64::MAX;
        for c in 0..cols {
            let lo = q.start + width * f64::from(c);
            let hi = lo + width;
            let Some(step) = sample(c, lo, hi) else {
                // Outside the trace: an empty column closes every band.
                stack.close_from(0, c, &mut out.bands);
                stack = Stack::default();
                prev = None;
                out.stable_bytes = 0;
                out.columns.push(LodColumn { step: 0, total_bytes: 0, drawn_bytes: 0, summarized_bytes: 0 });
                continue;
            };
            changed.clear();
            match prev {
                Some(p) if p == step => {}
                Some(p) => {
                    // Left: alive at p, ended in (p, step]. Entered: started in (p, step] and
                    // alive at step. Both are tree descents limited to the elements that
                    // really changed, so an element living between two samples costs nothing.
                    for (ci, end_cur, start_cur) in &mut classes {
                        let end_to = gallop(&ci.ends, *end_cur, step);
                        visit_range(&ci.min_start, ci.leaves, (*end_cur, end_to), &|start| start <= p, &mut |k| {
                            let id = ci.by_end[k];
                            changed.push((self.elements[id as usize].order, id, false));
                        });
                        *end_cur = end_to;
                        let start_to = gallop(&ci.starts, *start_cur, step);
                        visit_range(&ci.max_end, ci.leaves, (*start_cur, start_to), &|end| end > step, &mut |k| {
                            let id = ci.ids[k];
                            changed.push((self.elements[id as usize].order, id, true));
                        });
                        *start_cur = start_to;
                    }
                }
                None => {
                    stack.close_from(0, c, &mut out.bands);
                    stack = Stack::default();
                    for (ci, end_cur, start_cur) in &mut classes {
                        ci.stab(step, &mut |id| changed.push((self.elements[id as usize].order, id, true)));
                        *end_cur = ci.ends.partition_point(|&e| e <= step);
                        *start_cur = ci.starts.partition_point(|&s| s <= step);
                    }
                }
            }
            if !changed.is_empty() {
                // By stacking order alone: it is unique to each element, and one integer
                // compares faster than the tuple.
                changed.sort_unstable_by_key(|c| c.0);
                let from = stack.apply(&changed, &self.elements, min_bytes, &hit, c, &mut out.bands);
                if prev.is_some() {
                    out.stable_bytes = out.stable_bytes.min(from);
                }
            }
            let drawn = stack.top(&out.bands);
            let total = self.totals[step as usize];
            out.columns.push(LodColumn {
                step,
                total_bytes: total,
                drawn_bytes: drawn,
                summarized_bytes: total.saturating_sub(drawn),
            });
            prev = Some(step);
        }
        stack.close_from(0, cols, &mut out.bands);
        if out.stable_bytes == u64::MAX {
            out.stable_bytes = out.columns.iter().map(|c| c.total_bytes).min().unwrap_or(0);
        }
        out
    }

    /// The drawn bands of column `c` of a [`Lod`], bottom to top (for tests and hit testing).
    pub fn bands_in_column(lod: &Lod, c: u32) -> Vec<Band> {
        let mut v: Vec<Band> =
            lod.bands.iter().filter(|b| b.first_column <= c && c <= b.last_column).copied().collect();
        v.sort_by_key(|b| b.offset_bytes);
        v
    }
}

fn argmax(v: &[u64]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_are_those_of_the_library_calls() {
        let seeds = (0..1 << 18).chain((0..u32::MAX - 4096).step_by(4093)).chain(u32::MAX - 4096..=u32::MAX);
        for seed in seeds {
            assert_eq!(colour(seed), hue(seed, |h| h % 2.0, f64::round), "seed {seed}");
        }
    }

    #[test]
    fn round_sends_halves_away_from_zero_as_the_library_does() {
        let near_half =
            [0.5, 1.5, 2.5, 254.5, 0.5 - f64::EPSILON / 4.0, 2.5 - 2.0 * f64::EPSILON, 2.5 + 2.0 * f64::EPSILON];
        let grid = (0..100_000).map(|k| f64::from(k) * 0.002_55);
        for x in near_half.into_iter().chain(grid).chain([0.0, 255.0, 4.5e15]) {
            assert_eq!(round(x), x.round(), "{x}");
        }
    }
}
