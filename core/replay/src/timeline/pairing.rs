//! A timeline's elements before they are stacked: the trace's allocations paired with their
//! frees by address, as MemoryViz.js pairs them, and what the final snapshot holds that the
//! trace does not account for. One pass over the trace (`O(n)` expected for blocks, through a
//! hash map; `O(n log n)` for segments, whose unmaps find what they overlap in an ordered map).

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use super::{Element, Origin, TimelineKind};
use crate::model::{Action, BlockState, Segment, Snapshot, StackId, Trace};

/// The elements of a timeline and its steps, in the order the trace made them.
pub(super) struct Paired {
    pub elements: Vec<Element>,
    /// Elements alive before the first step: the unmatched frees in the order of their frees,
    /// then the final snapshot's.
    pub initial: Vec<u32>,
    /// How many of `initial` are unmatched frees.
    pub n_unmatched: usize,
    /// Elements allocated inside the trace, in the order they start.
    pub allocs: Vec<u32>,
    /// The trace entry of each step.
    pub step_entry: Vec<u32>,
}

/// The blocks timeline's elements (`alloc` paired with `free_requested` or `free_completed`)
/// and the `active_allocated` blocks of the final snapshot the trace leaves unaccounted for.
pub(super) fn blocks(snap: &Snapshot, device: usize) -> Paired {
    let trace = snap.trace(device);
    let mut paired = Paired::sized_for(trace, TimelineKind::Blocks);
    let pending = pair_blocks(trace, &mut paired);
    paired.n_unmatched = paired.initial.len();
    for (si, seg) in segments_of(snap, device) {
        for (b, addr) in seg.blocks.iter().zip(seg.block_addresses()) {
            if b.state == BlockState::ActiveAllocated && !pending.contains_key(&addr) {
                paired.snapshot_only(addr, b.requested_bytes(), b.stack(), si);
            }
        }
    }
    paired
}

/// The segments timeline's elements (`segment_alloc` / `segment_map` paired with
/// `segment_free` / `segment_unmap`) and the final snapshot's segments, less what the trace
/// leaves mapped in them.
pub(super) fn segments(snap: &Snapshot, device: usize) -> Paired {
    let trace = snap.trace(device);
    let mut paired = Paired::sized_for(trace, TimelineKind::Segments);
    let pending = pair_segments(trace, &mut paired);
    paired.n_unmatched = paired.initial.len();
    for (si, seg) in segments_of(snap, device) {
        let size = unaccounted_bytes(seg, &pending, &paired.elements);
        if size > 0 {
            paired.snapshot_only(seg.address, size, seg.frames, si);
        }
    }
    paired
}

impl Paired {
    /// Empty, with the largest vectors made their size at once (a vector that doubles holds
    /// both copies for a moment, and wasm memory keeps that moment): one element per
    /// allocation, one step per allocation and free (segments: a little more).
    fn sized_for(trace: &Trace, kind: TimelineKind) -> Paired {
        let (n_alloc, n_free) = count_actions(trace, kind);
        Paired {
            elements: Vec::with_capacity(n_alloc + n_alloc / 64),
            initial: Vec::new(),
            n_unmatched: 0,
            allocs: Vec::with_capacity(n_alloc),
            step_entry: Vec::with_capacity(n_alloc + n_free),
        }
    }

    /// The step the next action takes.
    fn step(&self) -> u32 {
        self.step_entry.len() as u32
    }

    /// Ends the current step: trace entry `entry` took it.
    fn take_step(&mut self, entry: usize) {
        self.step_entry.push(entry as u32);
    }

    /// An element allocated at trace entry `entry`, alive from the current step; its id.
    fn alloc(&mut self, addr: u64, size: u64, entry: usize, stack: Option<StackId>) -> u32 {
        let id = self.elements.len() as u32;
        self.elements.push(element(addr, size, self.step(), Origin::Traced, Some(entry as u32), None, stack));
        self.allocs.push(id);
        id
    }

    /// Element `id` freed at trace entry `entry`: alive until the current step.
    fn free(&mut self, id: u32, entry: usize) {
        let step = self.step();
        let e = &mut self.elements[id as usize];
        e.end = step;
        e.free_entry = Some(entry as u32);
    }

    /// A free at trace entry `entry` with no recorded allocation: an element alive from the
    /// start until the current step, with the free's address and size. It has no stack: the
    /// free's is where it went, not where it was made (`sites::Charge::Before` names it).
    fn unmatched_free(&mut self, trace: &Trace, entry: usize) {
        let mut e =
            element(trace.addr(entry), trace.size(entry), 0, Origin::UnmatchedFree, None, Some(entry as u32), None);
        e.end = self.step();
        self.initial.push(self.elements.len() as u32);
        self.elements.push(e);
    }

    /// What the final snapshot's segment `segment` holds that the trace does not account for:
    /// an element alive from the start.
    fn snapshot_only(&mut self, addr: u64, size: u64, stack: Option<StackId>, segment: usize) {
        let mut e = element(addr, size, 0, Origin::Snapshot, None, None, stack);
        e.segment = Some(segment as u32);
        self.initial.push(self.elements.len() as u32);
        self.elements.push(e);
    }
}

/// An element alive to the end, placed in the stack later.
fn element(
    addr: u64,
    size: u64,
    start: u32,
    origin: Origin,
    alloc_entry: Option<u32>,
    free_entry: Option<u32>,
    stack: Option<StackId>,
) -> Element {
    Element { addr, size, start, end: u32::MAX, origin, alloc_entry, free_entry, stack, segment: None, order: 0 }
}

/// The trace's allocations and frees of `kind`.
fn count_actions(trace: &Trace, kind: TimelineKind) -> (usize, usize) {
    let (mut n_alloc, mut n_free) = (0usize, 0usize);
    for i in 0..trace.len() {
        match (kind, trace.action(i)) {
            (TimelineKind::Blocks, Action::Alloc)
            | (TimelineKind::Segments, Action::SegmentAlloc | Action::SegmentMap) => n_alloc += 1,
            (TimelineKind::Blocks, a) if a.ends_allocation() => n_free += 1,
            (TimelineKind::Segments, Action::SegmentFree | Action::SegmentUnmap) => n_free += 1,
            _ => {}
        }
    }
    (n_alloc, n_free)
}

/// The final snapshot's segments of `device`, with their indices.
fn segments_of(snap: &Snapshot, device: usize) -> impl Iterator<Item = (usize, &Segment)> {
    snap.segments.iter().enumerate().filter(move |(_, s)| s.device == device as i64)
}

/// Pairs allocations with frees by address, one step each; returns what is still allocated
/// at the end (address to element).
fn pair_blocks(trace: &Trace, paired: &mut Paired) -> FxHashMap<u64, u32> {
    let mut pending: FxHashMap<u64, u32> = FxHashMap::default();
    for i in 0..trace.len() {
        match trace.action(i) {
            Action::Alloc => {
                let id = paired.alloc(trace.addr(i), trace.size(i), i, trace.frames(i));
                pending.insert(trace.addr(i), id);
            }
            a if a.ends_allocation() => match pending.remove(&trace.addr(i)) {
                Some(id) => paired.free(id, i),
                None => paired.unmatched_free(trace, i),
            },
            _ => continue,
        }
        paired.take_step(i);
    }
    pending
}

/// Pairs segment allocations and maps with frees and unmaps; returns what is still mapped at
/// the end (address to element).
fn pair_segments(trace: &Trace, paired: &mut Paired) -> BTreeMap<u64, u32> {
    let mut pending: BTreeMap<u64, u32> = BTreeMap::new();
    for i in 0..trace.len() {
        match trace.action(i) {
            Action::SegmentAlloc | Action::SegmentMap => {
                let id = paired.alloc(trace.addr(i), trace.size(i), i, trace.frames(i));
                pending.insert(trace.addr(i), id);
                paired.take_step(i);
            }
            Action::SegmentFree => {
                match pending.remove(&trace.addr(i)) {
                    Some(id) => paired.free(id, i),
                    None => paired.unmatched_free(trace, i),
                }
                paired.take_step(i);
            }
            Action::SegmentUnmap => unmap(trace, i, &mut pending, paired),
            _ => {}
        }
    }
    pending
}

/// A `segment_unmap` at trace entry `i`: every mapped element it overlaps ends, one step
/// each, and the parts of each outside the unmapped range stay mapped as new elements, a
/// step each. An unmap that overlaps nothing is an unmatched free.
fn unmap(trace: &Trace, i: usize, pending: &mut BTreeMap<u64, u32>, paired: &mut Paired) {
    let (addr, size) = (trace.addr(i), trace.size(i));
    let end = addr.saturating_add(size);
    let before = pending.range(..addr).next_back().map(|(&a, &id)| (a, id));
    let mut hit: Vec<(u64, u32)> = pending.range(addr..end).map(|(&a, &id)| (a, id)).collect();
    if let Some((a, id)) = before {
        if a.saturating_add(paired.elements[id as usize].size) > addr {
            hit.insert(0, (a, id));
        }
    }
    if hit.is_empty() {
        paired.unmatched_free(trace, i);
        paired.take_step(i);
    }
    for (a, id) in hit {
        pending.remove(&a);
        let (e_addr, e_end) = (a, a.saturating_add(paired.elements[id as usize].size));
        paired.free(id, i);
        paired.take_step(i);
        let stack = paired.elements[id as usize].stack;
        for (lo, hi) in [(e_addr, addr.max(e_addr)), (end.min(e_end), e_end)] {
            if hi > lo {
                let rest = paired.alloc(lo, hi - lo, i, stack);
                pending.insert(lo, rest);
                paired.take_step(i);
            }
        }
    }
}

/// Bytes of a final segment the trace leaves unaccounted for: an expandable segment's bytes
/// less the mapped elements inside it; another segment's whole size, unless an element the
/// trace allocated is still there.
fn unaccounted_bytes(seg: &Segment, pending: &BTreeMap<u64, u32>, elements: &[Element]) -> u64 {
    if seg.is_expandable == Some(true) {
        let end = seg.address.saturating_add(seg.total_size);
        let covered =
            pending.range(seg.address..end).map(|(_, &id)| elements[id as usize].size).fold(0, u64::saturating_add);
        seg.total_size.saturating_sub(covered)
    } else if pending.contains_key(&seg.address) {
        0
    } else {
        seg.total_size
    }
}
