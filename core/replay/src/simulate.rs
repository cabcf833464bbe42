//! PyTorch's CUDA caching allocator, simulated, and a recording replayed through it decision
//! by decision (`memscape replay`): does the simulator place each allocation where the real
//! allocator did, and make each segment when it did?
//!
//! The policy follows `c10/cuda/CUDACachingAllocator.cpp` (read, not copied):
//! - a request is rounded (`round_size`) and served from the small pool (up to 1 MiB) or the
//!   large pool, per stream, in a private pool (`pool_id`, CUDA graphs and `MemPool`) when the
//!   entry names one (`get_pool`);
//! - `get_free_block` takes the first free block of that pool and stream at least the rounded
//!   size, ordered by (size, address) as `BlockComparatorSize` orders them, and refuses it
//!   (taking none) when `max_split_size` forbids: an oversize block for a smaller request, or
//!   one more than `kLargeBuffer` over an oversize request;
//! - without one, `alloc_block` asks the device for `get_allocation_size` bytes (a new
//!   segment);
//! - the block is split when `should_split` says so (the request keeps the front), and a freed
//!   block merges with free neighbours in its segment (`free_block`, `try_merge_blocks`);
//!   a free waiting on another stream (`free_requested`) frees at `free_completed`.
//!
//! Not simulated yet: expandable segments (`segment_map` / `segment_unmap`), the device's
//! capacity and the out-of-memory path (release of cached blocks, retries),
//! `roundup_power2_divisions` and garbage collection. The replay takes the recording's own
//! `segment_free` entries as `empty_cache` calls, which the trace does not record otherwise.
//!
//! The replay starts from the allocator state before the first entry ([`StateIndex`]), laid
//! out as the allocator rounds blocks ([`crate::layout`]), and is forced back onto the
//! recording after every disagreement (the recorded placement is applied), so each decision is
//! judged from the state the real allocator was in.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::allocator::{is_small, round_size, segment_size, LARGE_BUFFER, MIN_BLOCK, SMALL_BUFFER, SMALL_SIZE};
use crate::layout::layout;
use crate::model::{Action, PoolId, Snapshot};
use crate::settings::{settings, Settings};
use crate::state::StateIndex;

/// The pool a block belongs to: a private pool's id (none: the default pools) and whether it
/// is the small one.
type Pool = (Option<PoolId>, bool);

/// A free block's place in its pool's ordered set: (pool, stream, size, address).
type FreeKey = (Pool, i64, u64, u64);

#[derive(Clone, Copy, Debug)]
struct Block {
    size: u64,
    /// The segment's address.
    segment: u64,
    allocated: bool,
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    size: u64,
    stream: i64,
    pool: Pool,
}

/// Where the simulator put a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The block's address.
    pub address: u64,
    /// The block's size (the request rounded, or the whole free block when not split).
    pub size: u64,
    /// The size of the segment made for it, when a free block did not serve it.
    pub new_segment: Option<u64>,
}

/// The caching allocator of one device.
#[derive(Clone, Debug)]
pub struct Simulator {
    max_split: Option<u64>,
    segments: BTreeMap<u64, Segment>,
    blocks: BTreeMap<u64, Block>,
    free: BTreeSet<FreeKey>,
    reserved: u64,
}

impl Simulator {
    /// An allocator with nothing reserved, under `settings` (`max_split_size`).
    pub fn new(settings: &Settings) -> Simulator {
        Simulator {
            max_split: settings.max_split_size_bytes,
            segments: BTreeMap::new(),
            blocks: BTreeMap::new(),
            free: BTreeSet::new(),
            reserved: 0,
        }
    }

    /// Bytes reserved from the device.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Adds a segment at `address`, all free.
    /// A segment of the small pool's size ([`SMALL_BUFFER`]) is the small pool's.
    /// False (nothing added) where it would overlap a segment the simulator has (a file whose
    /// segments overlap).
    pub fn add_segment(&mut self, address: u64, size: u64, stream: i64, pool: Option<PoolId>) -> bool {
        if size == 0 || self.overlaps(address, size) {
            return false;
        }
        let pool = (pool.filter(|p| *p != (0, 0)), size == SMALL_BUFFER);
        self.segments.insert(address, Segment { size, stream, pool });
        self.reserved = self.reserved.saturating_add(size);
        self.put_free(address, Block { size, segment: address, allocated: false });
        true
    }

    /// Whether `size` bytes at `address` overlap a segment.
    fn overlaps(&self, address: u64, size: u64) -> bool {
        let end = address.saturating_add(size);
        self.segments.range(..end).next_back().is_some_and(|(&a, s)| a.saturating_add(s.size) > address)
    }

    fn key(&self, address: u64, b: &Block) -> FreeKey {
        let (pool, stream) = self.segments.get(&b.segment).map_or(((None, false), 0), |s| (s.pool, s.stream));
        (pool, stream, b.size, address)
    }

    fn put_free(&mut self, address: u64, b: Block) {
        let k = self.key(address, &b);
        self.free.insert(k);
        self.blocks.insert(address, b);
    }

    fn take_free(&mut self, address: u64) -> Option<Block> {
        let b = *self.blocks.get(&address).filter(|b| !b.allocated)?;
        let k = self.key(address, &b);
        self.free.remove(&k);
        self.blocks.remove(&address);
        Some(b)
    }

    /// `get_free_block`: the first free block of the pool and stream at least `size`, if
    /// `max_split_size` lets it serve.
    fn find(&self, pool: Pool, stream: i64, size: u64) -> Option<u64> {
        let &(p, s, bsize, address) = self.free.range((pool, stream, size, 0)..).next()?;
        if p != pool || s != stream {
            return None;
        }
        if let Some(m) = self.max_split {
            if size < m && bsize >= m {
                return None;
            }
            if size >= m && bsize >= size.saturating_add(LARGE_BUFFER) {
                return None;
            }
        }
        Some(address)
    }

    /// Whether `bytes` are too few to be a block of `pool` (a large-pool block is over 1 MiB, a
    /// small-pool one at least 512 bytes): such a remainder stays with the block it was cut
    /// from.
    fn too_small(pool: Pool, bytes: u64) -> bool {
        if pool.1 {
            bytes < MIN_BLOCK
        } else {
            bytes <= SMALL_SIZE
        }
    }

    /// The allocated block of `segment` that ends at `start`, if any.
    fn allocated_before(&self, start: u64, segment: u64) -> Option<(u64, Block)> {
        let (&pa, &pb) = self.blocks.range(..start).next_back()?;
        (pb.allocated && pb.segment == segment && pa.saturating_add(pb.size) == start).then_some((pa, pb))
    }

    /// `should_split` for a block of `size` cut to `wanted`.
    fn should_split(&self, pool: Pool, size: u64, wanted: u64) -> bool {
        let remaining = size.saturating_sub(wanted);
        if pool.1 {
            remaining >= MIN_BLOCK
        } else {
            self.max_split.is_none_or(|m| wanted < m) && remaining > SMALL_SIZE
        }
    }

    /// Serves a request of `requested` bytes on `stream` (in private pool `pool`, if any). A
    /// new segment is put at the address `place` gives for its size.
    pub fn malloc(
        &mut self,
        requested: u64,
        stream: i64,
        pool: Option<PoolId>,
        place: impl FnOnce(u64) -> u64,
    ) -> Placement {
        let size = round_size(requested);
        let pool = (pool.filter(|p| *p != (0, 0)), is_small(size));
        let (address, new_segment) = match self.find(pool, stream, size) {
            Some(a) => (a, None),
            None => {
                let seg = segment_size(size);
                let mut a = place(seg);
                if self.overlaps(a, seg) {
                    // Where a file's segments overlap: past the highest segment, if anywhere.
                    a = self.segments.iter().next_back().map_or(0, |(&a, s)| a.saturating_add(s.size));
                }
                if !self.add_segment(a, seg, stream, pool.0) {
                    return Placement { address: u64::MAX, size, new_segment: None };
                }
                // The pool is the request's (a private pool's large segment may be 2 MiB).
                if let Some(s) = self.segments.get_mut(&a) {
                    if s.pool != pool {
                        let k = (s.pool, s.stream, seg, a);
                        s.pool = pool;
                        self.free.remove(&k);
                        self.free.insert((pool, stream, seg, a));
                    }
                }
                (a, Some(seg))
            }
        };
        let Some(b) = self.take_free(address) else {
            return Placement { address, size, new_segment };
        };
        let used = if self.should_split(pool, b.size, size) {
            self.put_free(
                address.saturating_add(size),
                Block { size: b.size - size, segment: b.segment, allocated: false },
            );
            size
        } else {
            b.size
        };
        self.blocks.insert(address, Block { size: used, segment: b.segment, allocated: true });
        Placement { address, size: used, new_segment }
    }

    /// Places a block of `size` bytes at `address` as the recording did, inside a free block
    /// there (what is left on either side stays free). False when no free block holds it.
    pub fn force(&mut self, address: u64, size: u64) -> bool {
        let Some((&start, &b)) = self.blocks.range(..=address).next_back() else { return false };
        if b.allocated || address.saturating_add(size) > start.saturating_add(b.size) {
            return false;
        }
        self.take_free(start);
        let pool = self.segments.get(&b.segment).map_or((None, false), |s| s.pool);
        if address > start {
            // What is left before it: a free block, unless too small to be one: then it is the
            // end of the allocated block before it, which kept the remainder when it was cut.
            let left = address - start;
            match self.allocated_before(start, b.segment).filter(|_| Self::too_small(pool, left)) {
                Some((pa, pb)) => {
                    self.blocks.insert(pa, Block { size: pb.size.saturating_add(left), ..pb });
                }
                None => self.put_free(start, Block { size: left, ..b }),
            }
        }
        let end = start.saturating_add(b.size);
        let rest = end.saturating_sub(address.saturating_add(size));
        // A remainder too small to be a block stays with the block, as the allocator keeps it.
        let used = if rest == 0 || self.should_split(pool, size.saturating_add(rest), size) {
            size
        } else {
            size.saturating_add(rest)
        };
        if used < end - address {
            self.put_free(address.saturating_add(used), Block { size: end - address - used, ..b });
        }
        self.blocks.insert(address, Block { size: used, segment: b.segment, allocated: true });
        true
    }

    /// The allocated block at `address` is `by` bytes longer, taken from the free block after
    /// it (a remainder it kept when it was cut, which the state before a recording cannot
    /// show). False when no such free block follows.
    pub fn extend(&mut self, address: u64, by: u64) -> bool {
        let Some(b) = self.blocks.get(&address).copied().filter(|b| b.allocated) else { return false };
        let end = address.saturating_add(b.size);
        let Some(next) = self.blocks.get(&end).copied().filter(|n| !n.allocated && n.segment == b.segment) else {
            return false;
        };
        if next.size < by {
            return false;
        }
        self.take_free(end);
        if next.size > by {
            self.put_free(end.saturating_add(by), Block { size: next.size - by, ..next });
        }
        self.blocks.insert(address, Block { size: b.size.saturating_add(by), ..b });
        true
    }

    /// `free_block`: the block at `address` is free again, merged with free neighbours.
    pub fn free(&mut self, address: u64) -> bool {
        let Some(b) = self.blocks.get(&address).copied().filter(|b| b.allocated) else { return false };
        self.blocks.remove(&address);
        let (mut start, mut size) = (address, b.size);
        if let Some((pa, p)) = self.blocks.range(..address).next_back().map(|(&pa, &p)| (pa, p)) {
            if !p.allocated && p.segment == b.segment && pa.saturating_add(p.size) == address {
                self.take_free(pa);
                start = pa;
                size += p.size;
            }
        }
        let end = address.saturating_add(b.size);
        if let Some(n) = self.blocks.get(&end).copied().filter(|_| end > address) {
            if !n.allocated && n.segment == b.segment {
                self.take_free(end);
                size += n.size;
            }
        }
        self.put_free(start, Block { size, segment: b.segment, allocated: false });
        true
    }

    /// Whether the segment at `address` holds no allocated block.
    pub fn is_free_segment(&self, address: u64) -> bool {
        self.segments
            .get(&address)
            .is_some_and(|s| self.blocks.get(&address).is_some_and(|b| !b.allocated && b.size == s.size))
    }

    /// Returns the segment at `address` to the device, with whatever it holds.
    pub fn release(&mut self, address: u64) -> bool {
        let Some(s) = self.segments.remove(&address) else { return false };
        let inside: Vec<u64> = self.blocks.range(address..address.saturating_add(s.size)).map(|(&a, _)| a).collect();
        for a in inside {
            if let Some(b) = self.blocks.remove(&a) {
                self.free.remove(&(s.pool, s.stream, b.size, a));
            }
        }
        self.reserved = self.reserved.saturating_sub(s.size);
        true
    }
}

/// The first decision the simulator made otherwise than the recording.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disagreement {
    /// The trace entry.
    pub entry: u32,
    /// What differed, in words.
    pub why: String,
}

/// How one device's recording agrees with the simulator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agreement {
    /// The device.
    pub device: u32,
    /// `alloc` entries replayed.
    pub allocations: u64,
    /// Of them, placed where the recording has them.
    pub placed_as_recorded: u64,
    /// `segment_alloc` and `segment_free` entries of the recording, and segments the simulator
    /// made where the recording made none.
    pub segment_events: u64,
    /// Of them, made (or freed) by the simulator at the same entry with the same size.
    pub segment_events_matched: u64,
    /// The largest difference between the simulated and the recorded reserved bytes after an
    /// entry.
    pub reserved_max_abs_diff_bytes: u64,
    /// Expandable segments' `segment_map` / `segment_unmap` entries, not simulated.
    pub not_simulated: u64,
    /// The first disagreement.
    pub first_disagreement: Option<Disagreement>,
}

/// Replays `device`'s trace through the simulator.
pub fn replay(snap: &Snapshot, device: usize) -> Agreement {
    let t = snap.trace(device);
    let set = settings(snap, device);
    let mut sim = Simulator::new(&set);
    let start = StateIndex::build(snap, device).state_after(snap, None);
    let laid = layout(&start, &set);
    for (s, l) in start.segments.iter().zip(&laid.segments) {
        sim.add_segment(s.address, s.size, s.stream, s.pool);
        for (b, &(size, _)) in s.blocks.iter().zip(&l.blocks) {
            sim.force(b.address, size.max(MIN_BLOCK));
        }
    }
    // A large-pool block is over 1 MiB: an allocation recorded less than that past the start of
    // a free block of the state before the recording shows that the live block before it kept
    // the remainder when it was cut. The first allocation in each such free block says so.
    let mut seen = rustc_hash::FxHashSet::default();
    for i in 0..t.len() {
        if t.action(i) != Action::Alloc {
            continue;
        }
        let addr = t.addr(i);
        let Some((start, b)) = sim.blocks.range(..=addr).next_back().map(|(&s, &b)| (s, b)) else { continue };
        if b.allocated || addr >= start.saturating_add(b.size) || !seen.insert(start) {
            continue;
        }
        let large = !sim.segments.get(&b.segment).is_some_and(|s| s.pool.1);
        if large && addr > start && Simulator::too_small((None, false), addr - start) {
            if let Some((pa, _)) = sim.allocated_before(start, b.segment) {
                sim.extend(pa, addr - start);
            }
        }
    }
    // The recording's reserved bytes, followed forward from the state before its first entry.
    let mut recorded = start.reserved_bytes;
    let mut a = Agreement {
        device: device as u32,
        allocations: 0,
        placed_as_recorded: 0,
        segment_events: 0,
        segment_events_matched: 0,
        reserved_max_abs_diff_bytes: 0,
        not_simulated: 0,
        first_disagreement: None,
    };
    let differ = |a: &mut Agreement, i: usize, why: String| {
        a.first_disagreement.get_or_insert(Disagreement { entry: i as u32, why });
    };
    // The recording's segment_alloc just before an alloc: the segment made for it.
    let mut announced: Option<(usize, u64, u64)> = None;
    for i in 0..t.len() {
        let (addr, size, stream, pool) = (t.addr(i), t.size(i), t.stream(i), t.pool_id(i));
        match t.action(i) {
            Action::SegmentAlloc => {
                a.segment_events += 1;
                if let Some((k, sa, ss)) = announced.replace((i, addr, size)) {
                    // Two in a row: the first served no allocation.
                    differ(&mut a, k, format!("the recording made a segment of {ss} bytes the simulator did not need"));
                    sim.add_segment(sa, ss, t.stream(k), t.pool_id(k));
                }
            }
            Action::Alloc => {
                a.allocations += 1;
                let seg = announced.take();
                // A segment where the recording has none goes where no segment is.
                let nowhere = u64::MAX - (1 << 50) + (i as u64 % (1 << 20)) * (1 << 28);
                let p = sim.malloc(size, stream, pool, |_| seg.map_or(nowhere, |(_, sa, _)| sa));
                // Where the simulator's placement is undone, the recording's is applied.
                let mut undone = false;
                match (seg, p.new_segment) {
                    (Some((_, _, ss)), Some(s)) if s == ss => a.segment_events_matched += 1,
                    (Some((k, sa, ss)), Some(s)) => {
                        differ(&mut a, k, format!("the simulator made a segment of {s} bytes, the recording {ss}"));
                        sim.release(sa);
                        sim.add_segment(sa, ss, stream, pool);
                        undone = true;
                    }
                    (Some((k, sa, ss)), None) => {
                        differ(
                            &mut a,
                            k,
                            format!(
                                "the recording made a segment of {ss} bytes where the simulator reused a free block"
                            ),
                        );
                        sim.free(p.address);
                        sim.add_segment(sa, ss, stream, pool);
                        undone = true;
                    }
                    (None, Some(s)) => {
                        a.segment_events += 1;
                        differ(
                            &mut a,
                            i,
                            format!(
                                "the simulator made a segment of {s} bytes where the recording reused a free block"
                            ),
                        );
                        sim.release(p.address);
                        undone = true;
                    }
                    (None, None) => {}
                }
                if p.address == addr {
                    a.placed_as_recorded += 1;
                } else {
                    differ(&mut a, i, format!("placed at {:#x}, recorded at {addr:#x}", p.address));
                    if !undone {
                        sim.free(p.address);
                    }
                }
                if undone || p.address != addr {
                    sim.force(addr, round_size(size));
                }
            }
            act if act.ends_allocation() => {
                sim.free(addr);
            }
            Action::SegmentFree => {
                a.segment_events += 1;
                if sim.is_free_segment(addr) {
                    a.segment_events_matched += 1;
                } else {
                    differ(
                        &mut a,
                        i,
                        format!("the recording freed the segment at {addr:#x}, which the simulator still uses"),
                    );
                }
                sim.release(addr);
            }
            Action::SegmentMap | Action::SegmentUnmap => a.not_simulated += 1,
            _ => {}
        }
        recorded = match t.action(i) {
            Action::SegmentAlloc | Action::SegmentMap => recorded.saturating_add(size),
            Action::SegmentFree | Action::SegmentUnmap => recorded.saturating_sub(size),
            _ => recorded,
        };
        let pending = announced.map_or(0, |(_, _, ss)| ss);
        let d = sim.reserved().saturating_add(pending).abs_diff(recorded);
        a.reserved_max_abs_diff_bytes = a.reserved_max_abs_diff_bytes.max(d);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim() -> Simulator {
        Simulator::new(&Settings::default())
    }

    /// Best fit by (size, address), the front of a split block, and merging on free.
    #[test]
    fn best_fit_split_and_merge_as_the_caching_allocator_does() {
        let mut s = sim();
        let mut next = 0x1000_0000u64;
        let mut place = |size| {
            let a = next;
            next += size;
            a
        };
        // A 1 KiB request: a small segment (2 MiB), split; the request keeps the front.
        let a = s.malloc(1000, 0, None, &mut place);
        assert_eq!(a, Placement { address: 0x1000_0000, size: 1024, new_segment: Some(2 << 20) });
        let b = s.malloc(512, 0, None, &mut place);
        assert_eq!((b.address, b.new_segment), (0x1000_0400, None));
        // Freed, the first block is the smallest that fits a 1 KiB request: reused.
        assert!(s.free(a.address));
        let c = s.malloc(1024, 0, None, &mut place);
        assert_eq!((c.address, c.new_segment), (0x1000_0000, None));
        // Another stream has its own free blocks.
        let d = s.malloc(1024, 7, None, &mut place);
        assert_eq!(d.new_segment, Some(2 << 20));
        // 12 MiB: a segment of its own size, not split (nothing over 1 MiB would remain).
        let e = s.malloc(12 << 20, 0, None, &mut place);
        assert_eq!((e.size, e.new_segment), (12 << 20, Some(12 << 20)));
        // 3 MiB in a 20 MiB segment: split, 17 MiB stays free.
        let f = s.malloc(3 << 20, 0, None, &mut place);
        assert_eq!((f.size, f.new_segment), (3 << 20, Some(20 << 20)));
        assert_eq!(s.reserved(), (2 << 20) * 2 + (12 << 20) + (20 << 20));
        // Freeing everything in a segment merges it back into one free block.
        assert!(s.free(b.address) && s.free(c.address));
        assert!(s.is_free_segment(0x1000_0000));
    }

    /// `max_split_size`: an oversize free block never serves a smaller request.
    #[test]
    fn an_oversize_block_does_not_serve_a_smaller_request() {
        let mut s = Simulator::new(&Settings { max_split_size_bytes: Some(64 << 20), ..Settings::default() });
        let mut next = 0x2000_0000u64;
        let mut place = |size| {
            let a = next;
            next += size;
            a
        };
        let big = s.malloc(100 << 20, 0, None, &mut place);
        assert!(s.free(big.address));
        let small = s.malloc(30 << 20, 0, None, &mut place);
        assert_ne!(small.address, big.address);
        assert_eq!(small.new_segment, Some(30 << 20));
    }
}
