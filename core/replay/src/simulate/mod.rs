//! PyTorch's CUDA caching allocator, simulated: one allocator for the whole code base. The
//! generator runs its programs on it, the replay ([`replay()`]) checks it against what the real
//! allocator did in a recording, decision by decision (`memscape replay`), and the allocator
//! what-ifs ([`run()`]) run a recording's requests through it under other settings.
//!
//! The policy follows `c10/cuda/CUDACachingAllocator.cpp` (read, not copied):
//! - `malloc`: a request is rounded (`round_size`, with `roundup_power2_divisions`:
//!   [`Policy::round_size`]) and served from the small pool (up to 1 MiB) or the large pool,
//!   per stream, in a private pool (`pool_id`, CUDA graphs and `MemPool`) when the request
//!   names one (`get_pool`);
//! - `get_free_block` takes the first free block of that pool and stream at least the rounded
//!   size, ordered by (size, address) as `BlockComparatorSize` orders them (an expandable
//!   segment's last block counted at the size it can grow to), and refuses it when
//!   `max_split_size` forbids: an oversize block for a smaller request, or one more than
//!   `kLargeBuffer` over an oversize request;
//! - without one: `garbage_collect_cached_blocks` when a garbage-collection threshold and a
//!   memory limit are set, then `alloc_block` asks the device for `get_allocation_size` bytes
//!   (a new segment), or with expandable segments maps pages of 2 MiB (small pool) or 20 MiB
//!   (large pool) at the end of the stream's segment (`try_allocate_expandable_block`,
//!   `map_block`: `expandable.rs`); when the device refuses, `release_available_cached_blocks`
//!   (oversize blocks, with `max_split_size`) and then `release_cached_blocks` (every whole
//!   free segment, every free page of an expandable one) and a retry, and then the error
//!   ([`OutOfMemory`], PyTorch's `oom` entry): `release.rs`;
//! - the block is split when `should_split` says so (the request keeps the front), and a freed
//!   block merges with free neighbours in its segment (`free_block`, `try_merge_blocks`).
//!
//! What a program does around the allocator is the caller's: a free waiting on another stream
//! (`record_stream`) is a block the caller frees later, and the caller records the trace.
//! Private pools are never released by `empty_cache` here (PyTorch releases a pool whose
//! graphs are all gone).

mod conf;
mod expandable;
mod release;
pub mod replay;
pub mod run;
pub mod segments;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::allocator::{self, is_small, segment_size, LARGE_BUFFER, MIN_BLOCK, SMALL_BUFFER, SMALL_SIZE};
use crate::model::PoolId;
use crate::settings::{Settings, INTERVALS};

pub use replay::{replay, Agreement, Disagreement};
pub use run::{run, run_fresh, run_fresh_from, Run};

/// The allocator settings a simulation runs under, and the device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// `max_split_size_mb`, in bytes (`None`: unlimited).
    pub max_split: Option<u64>,
    /// `roundup_power2_divisions` of each power-of-two interval from 1 MiB (0 or 1: none).
    pub divisions: [u64; INTERVALS],
    /// `expandable_segments:True`.
    pub expandable: bool,
    /// `garbage_collection_threshold` (0: off; it acts only under a memory limit, as in
    /// PyTorch, where it needs `set_per_process_memory_fraction`).
    pub gc_threshold: f64,
    /// The bytes this process may reserve on the device (`None`: no limit).
    pub capacity: Option<u64>,
}

impl Policy {
    /// The policy of the recorded `settings`, without a memory limit.
    pub fn of(settings: &Settings) -> Policy {
        let mut divisions = [0; INTERVALS];
        for (d, &v) in divisions.iter_mut().zip(&settings.roundup_divisions) {
            *d = v;
        }
        Policy {
            max_split: settings.max_split_size_bytes,
            divisions,
            expandable: settings.expandable(),
            gc_threshold: settings.garbage_collection_threshold.unwrap_or(0.0).max(0.0),
            capacity: None,
        }
    }

    /// `round_size`: at least 512 bytes; a request over 512 × the divisions of its interval
    /// rounds up to the next division of its power of two (`roundup_power2_next_division`),
    /// any other to a multiple of 512.
    pub fn round_size(&self, requested: u64) -> u64 {
        if requested < MIN_BLOCK {
            return MIN_BLOCK;
        }
        let log = u64::from(requested.ilog2());
        let index = (log.saturating_sub(20) as usize).min(INTERVALS - 1);
        let d = self.divisions[index];
        if d > 1 && requested > MIN_BLOCK.saturating_mul(d) {
            next_division(requested, d)
        } else {
            allocator::round_size(requested)
        }
    }

    /// `should_split` for a block of `pool` of `size` bytes cut to `wanted`.
    fn should_split(&self, pool: Pool, size: u64, wanted: u64) -> bool {
        let remaining = size.saturating_sub(wanted);
        if pool.1 || self.expandable {
            remaining >= MIN_BLOCK
        } else {
            self.max_split.is_none_or(|m| wanted < m) && remaining > SMALL_SIZE
        }
    }
}

/// `roundup_power2_next_division`: `size` up to the next of `divisions` equal steps between
/// its power of two and the next.
fn next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << size.ilog2();
    let step = floor >> divisions.ilog2();
    if step == 0 {
        return floor.saturating_mul(2);
    }
    let down = size & !(step - 1);
    if down == size {
        size
    } else {
        down.saturating_add(step)
    }
}

/// The pool a block belongs to: a private pool's id (none: the default pools) and whether it
/// is the small one.
pub(crate) type Pool = (Option<PoolId>, bool);

/// A free block's place in its pool's ordered set: (pool, stream, size, address).
type FreeKey = (Pool, i64, u64, u64);

#[derive(Clone, Copy, Debug)]
struct Block {
    size: u64,
    /// The segment's address.
    segment: u64,
    allocated: bool,
    /// False for the unmapped address space of an expandable segment.
    mapped: bool,
    /// The count of free-block searches of the default large pool when it became free (its
    /// age for garbage collection is the count since).
    born: u64,
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    /// Its address space (an expandable segment's, mapped or not).
    size: u64,
    stream: i64,
    pool: Pool,
    expandable: bool,
}

/// What the allocator asked of the device, in order: the entries PyTorch's trace records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `segment_alloc`: a new segment (`cudaMalloc`).
    SegmentAlloc {
        /// Its address.
        address: u64,
        /// Its bytes.
        size: u64,
    },
    /// `segment_free`: a segment returned (`cudaFree`).
    SegmentFree {
        /// Its address.
        address: u64,
        /// Its bytes.
        size: u64,
    },
    /// `segment_map`: pages of an expandable segment mapped.
    SegmentMap {
        /// The first page's address.
        address: u64,
        /// The bytes mapped.
        size: u64,
    },
    /// `segment_unmap`: pages of an expandable segment unmapped.
    SegmentUnmap {
        /// The first page's address.
        address: u64,
        /// The bytes unmapped.
        size: u64,
    },
}

impl Event {
    /// As a trace entry: its action, address and bytes.
    pub fn entry(self) -> (crate::model::Action, u64, u64) {
        use crate::model::Action;
        match self {
            Event::SegmentAlloc { address, size } => (Action::SegmentAlloc, address, size),
            Event::SegmentFree { address, size } => (Action::SegmentFree, address, size),
            Event::SegmentMap { address, size } => (Action::SegmentMap, address, size),
            Event::SegmentUnmap { address, size } => (Action::SegmentUnmap, address, size),
        }
    }
}

/// The placement a program's own simulation gives `Simulator::malloc`: each new segment at
/// `*next`, which then moves past it, rounded to 2 MiB as the driver's addresses are (the
/// generator and the predictor place segments so).
pub fn place_after(next: &mut u64) -> impl FnMut(u64) -> u64 + '_ {
    move |size| {
        let a = *next;
        *next = next.saturating_add(allocator::round_large(size));
        a
    }
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

/// A request the device could not hold, after the cache was released: PyTorch's `oom` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutOfMemory {
    /// The bytes asked for (rounded).
    pub requested_bytes: u64,
    /// The device's free bytes as the allocator saw them (`device_free`): the limit less what
    /// is reserved.
    pub device_free_bytes: u64,
}

/// One free block of the simulator, or an allocated one, as a snapshot lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimBlock {
    /// Its address.
    pub address: u64,
    /// Its bytes.
    pub size: u64,
    /// Whether it is allocated.
    pub allocated: bool,
}

/// One segment as a snapshot lists it (an expandable segment: each mapped range).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimSegment {
    /// Its address.
    pub address: u64,
    /// Its bytes.
    pub size: u64,
    /// Its stream.
    pub stream: i64,
    /// Its private pool, if any.
    pub pool: Option<PoolId>,
    /// Whether it is in the small pool.
    pub small: bool,
    /// Whether it is (part of) an expandable segment.
    pub expandable: bool,
    /// Its blocks, by address.
    pub blocks: Vec<SimBlock>,
}

/// The caching allocator of one device.
#[derive(Clone, Debug)]
pub struct Simulator {
    policy: Policy,
    segments: BTreeMap<u64, Segment>,
    blocks: BTreeMap<u64, Block>,
    free: BTreeSet<FreeKey>,
    /// Unmapped address space of expandable segments, by (pool, stream, address): the order
    /// PyTorch searches it in (`BlockComparatorAddress`).
    unmapped: BTreeSet<(Pool, i64, u64)>,
    reserved: u64,
    /// Free-block searches of the default large pool (garbage collection's clock).
    searches: u64,
    events: Vec<Event>,
}

impl Simulator {
    /// An allocator with nothing reserved, under `settings` (`max_split_size`), without a
    /// memory limit.
    pub fn new(settings: &Settings) -> Simulator {
        Simulator::with_policy(Policy::of(settings))
    }

    /// An allocator with nothing reserved, under `policy`.
    pub fn with_policy(policy: Policy) -> Simulator {
        Simulator {
            policy,
            segments: BTreeMap::new(),
            blocks: BTreeMap::new(),
            free: BTreeSet::new(),
            unmapped: BTreeSet::new(),
            reserved: 0,
            searches: 0,
            events: Vec::new(),
        }
    }

    /// The policy it runs under.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Sets the bytes this process may reserve from now on (`set_per_process_memory_fraction`;
    /// `None`: no limit). What is reserved already stays.
    pub fn set_capacity(&mut self, capacity: Option<u64>) {
        self.policy.capacity = capacity;
    }

    /// Bytes reserved from the device.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// What it asked of the device since the last call, in order.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
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
        self.segments.insert(address, Segment { size, stream, pool, expandable: false });
        self.reserved = self.reserved.saturating_add(size);
        self.put_free(address, Block { size, segment: address, allocated: false, mapped: true, born: 0 });
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

    fn put_free(&mut self, address: u64, mut b: Block) {
        b.born = self.searches;
        if b.mapped {
            let k = self.key(address, &b);
            self.free.insert(k);
        } else {
            let (pool, stream, _, _) = self.key(address, &b);
            self.unmapped.insert((pool, stream, address));
        }
        self.blocks.insert(address, b);
    }

    /// Removes the free (or unmapped) block at `address` from the blocks and its set.
    fn take_free(&mut self, address: u64) -> Option<Block> {
        let b = *self.blocks.get(&address).filter(|b| !b.allocated)?;
        let k = self.key(address, &b);
        if b.mapped {
            self.free.remove(&k);
        } else {
            self.unmapped.remove(&(k.0, k.1, address));
        }
        self.blocks.remove(&address);
        Some(b)
    }

    /// `get_free_block`: the first free block of the pool and stream at least `size`, if
    /// `max_split_size` lets it serve.
    fn find(&mut self, pool: Pool, stream: i64, size: u64) -> Option<u64> {
        if pool == (None, false) && self.policy.gc_threshold > 0.0 && self.policy.capacity.is_some() {
            self.searches += 1;
        }
        let mut it = self.free.range((pool, stream, size, 0)..).take_while(|k| k.0 == pool && k.1 == stream);
        let mut found = *it.next()?;
        // An expandable segment's last block is as large as it can grow: a later block that
        // can grow less is the better fit.
        if self.policy.expandable && self.expandable_at(found.3) {
            for k in it {
                if !self.expandable_at(found.3) || self.growable(k.3) >= self.growable(found.3) {
                    break;
                }
                found = *k;
            }
        }
        let (_, _, bsize, address) = found;
        if let Some(m) = self.policy.max_split {
            if size < m && bsize >= m {
                return None;
            }
            if size >= m && bsize >= size.saturating_add(LARGE_BUFFER) {
                return None;
            }
        }
        Some(address)
    }

    /// Whether the block at `address` is in an expandable segment.
    fn expandable_at(&self, address: u64) -> bool {
        self.blocks.get(&address).and_then(|b| self.segments.get(&b.segment)).is_some_and(|s| s.expandable)
    }

    /// A free block's size with the unmapped space right after it.
    fn growable(&self, address: u64) -> u64 {
        let Some(b) = self.blocks.get(&address) else { return 0 };
        let end = address.saturating_add(b.size);
        let next = self.blocks.get(&end).filter(|n| !n.mapped && n.segment == b.segment).map_or(0, |n| n.size);
        b.size.saturating_add(next)
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

    /// Serves a request of `requested` bytes on `stream` (in private pool `pool`, if any). A
    /// new segment is put at the address `place` gives for its size; what the device could
    /// not give, after the cache was released, is an [`OutOfMemory`].
    pub fn malloc(
        &mut self,
        requested: u64,
        stream: i64,
        pool: Option<PoolId>,
        mut place: impl FnMut(u64) -> u64,
    ) -> Result<Placement, OutOfMemory> {
        let size = self.policy.round_size(requested);
        let pool = (pool.filter(|p| *p != (0, 0)), is_small(size));
        let (address, new_segment) = match self.find(pool, stream, size) {
            Some(a) => (a, None),
            None => {
                self.collect_garbage();
                let grown = match self.grow(pool, stream, size, &mut place) {
                    Some(g) => Some(g),
                    None if self.release_available(pool, stream, size) => self.grow(pool, stream, size, &mut place),
                    None => None,
                };
                let grown = match grown {
                    Some(g) => Some(g),
                    None => {
                        self.release_cached();
                        self.grow(pool, stream, size, &mut place)
                    }
                };
                let Some(g) = grown else {
                    let free = self.policy.capacity.map_or(0, |c| c.saturating_sub(self.reserved));
                    return Err(OutOfMemory { requested_bytes: size, device_free_bytes: free });
                };
                g
            }
        };
        let Some(b) = self.take_free(address) else {
            return Ok(Placement { address, size, new_segment });
        };
        let used = if self.policy.should_split(pool, b.size, size) {
            self.put_free(address.saturating_add(size), Block { size: b.size - size, ..b });
            size
        } else {
            b.size
        };
        self.blocks.insert(address, Block { size: used, allocated: true, ..b });
        Ok(Placement { address, size: used, new_segment })
    }

    /// `alloc_block`: room for `size` bytes from the device, a new segment or pages mapped at
    /// the end of an expandable one. The free block that holds the request and the bytes the
    /// device gave, or `None` when the limit refuses them.
    fn grow(
        &mut self,
        pool: Pool,
        stream: i64,
        size: u64,
        place: &mut impl FnMut(u64) -> u64,
    ) -> Option<(u64, Option<u64>)> {
        if self.policy.expandable && pool.0.is_none() {
            let before = self.reserved;
            let a = self.grow_expandable(pool, stream, size, place)?;
            return Some((a, Some(self.reserved - before)));
        }
        let seg = segment_size(size);
        if self.policy.capacity.is_some_and(|c| self.reserved.saturating_add(seg) > c) {
            return None;
        }
        let mut a = place(seg);
        if self.overlaps(a, seg) {
            // Where a file's segments overlap: past the highest segment, if anywhere.
            a = self.segments.iter().next_back().map_or(0, |(&a, s)| a.saturating_add(s.size));
        }
        if !self.add_segment(a, seg, stream, pool.0) {
            return None;
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
        self.events.push(Event::SegmentAlloc { address: a, size: seg });
        Some((a, Some(seg)))
    }

    /// Places a block of `size` bytes at `address` as the recording did, inside a free block
    /// there (what is left on either side stays free). False when no free block holds it.
    pub fn force(&mut self, address: u64, size: u64) -> bool {
        let Some((&start, &b)) = self.blocks.range(..=address).next_back() else { return false };
        if b.allocated || !b.mapped || address.saturating_add(size) > start.saturating_add(b.size) {
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
        let used = if rest == 0 || self.policy.should_split(pool, size.saturating_add(rest), size) {
            size
        } else {
            size.saturating_add(rest)
        };
        if used < end - address {
            self.put_free(address.saturating_add(used), Block { size: end - address - used, ..b });
        }
        self.blocks.insert(address, Block { size: used, allocated: true, ..b });
        true
    }

    /// The allocated block at `address` is `by` bytes longer, taken from the free block after
    /// it (a remainder it kept when it was cut, which the state before a recording cannot
    /// show). False when no such free block follows.
    pub fn extend(&mut self, address: u64, by: u64) -> bool {
        let Some(b) = self.blocks.get(&address).copied().filter(|b| b.allocated) else { return false };
        let end = address.saturating_add(b.size);
        let Some(next) = self.blocks.get(&end).copied().filter(|n| !n.allocated && n.mapped && n.segment == b.segment)
        else {
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
        let (start, size) = self.merged(address, b);
        self.put_free(start, Block { size, allocated: false, ..b });
        true
    }

    /// The free run around the block `b` at `address` (taken out of the sets): its free
    /// neighbours in the segment of the same mapping, `try_merge_blocks`.
    fn merged(&mut self, address: u64, b: Block) -> (u64, u64) {
        let (mut start, mut size) = (address, b.size);
        if let Some((pa, p)) = self.blocks.range(..address).next_back().map(|(&pa, &p)| (pa, p)) {
            if !p.allocated && p.mapped == b.mapped && p.segment == b.segment && pa.saturating_add(p.size) == address {
                self.take_free(pa);
                start = pa;
                size = size.saturating_add(p.size);
            }
        }
        let end = address.saturating_add(b.size);
        if let Some(n) = self.blocks.get(&end).copied().filter(|_| end > address) {
            if !n.allocated && n.mapped == b.mapped && n.segment == b.segment {
                self.take_free(end);
                size = size.saturating_add(n.size);
            }
        }
        (start, size)
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
        let mut mapped = 0u64;
        for a in inside {
            if let Some(b) = self.blocks.remove(&a) {
                self.free.remove(&(s.pool, s.stream, b.size, a));
                self.unmapped.remove(&(s.pool, s.stream, a));
                if b.mapped {
                    mapped = mapped.saturating_add(b.size);
                }
            }
        }
        self.reserved = self.reserved.saturating_sub(if s.expandable { mapped } else { s.size });
        true
    }

    /// The requested-size-free figures of the cache: bytes of free blocks, and the largest
    /// free block of the default large and small pools.
    pub fn cached(&self) -> (u64, u64, u64) {
        let total = self.free.iter().map(|k| k.2).fold(0u64, u64::saturating_add);
        let largest = |small: bool| self.free.iter().filter(|k| k.0 == (None, small)).map(|k| k.2).max().unwrap_or(0);
        (total, largest(false), largest(true))
    }

    /// The segments as a snapshot lists them, by address: an expandable segment as each of
    /// its mapped ranges.
    pub fn segments(&self) -> Vec<SimSegment> {
        let mut out = Vec::new();
        for (&address, s) in &self.segments {
            let mut current: Option<SimSegment> = None;
            for (&a, b) in self.blocks.range(address..address.saturating_add(s.size)) {
                if !b.mapped {
                    out.extend(current.take());
                    continue;
                }
                let view = current.get_or_insert_with(|| SimSegment {
                    address: a,
                    size: 0,
                    stream: s.stream,
                    pool: s.pool.0,
                    small: s.pool.1,
                    expandable: s.expandable,
                    blocks: Vec::new(),
                });
                view.size = view.size.saturating_add(b.size);
                view.blocks.push(SimBlock { address: a, size: b.size, allocated: b.allocated });
            }
            out.extend(current);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim() -> Simulator {
        Simulator::new(&Settings::default())
    }

    fn bump(start: u64) -> impl FnMut(u64) -> u64 {
        let mut next = start;
        move |size| {
            let a = next;
            next += size;
            a
        }
    }

    /// Best fit by (size, address), the front of a split block, and merging on free.
    #[test]
    fn best_fit_split_and_merge_as_the_caching_allocator_does() {
        let mut s = sim();
        let mut place = bump(0x1000_0000);
        // A 1 KiB request: a small segment (2 MiB), split; the request keeps the front.
        let a = s.malloc(1000, 0, None, &mut place).unwrap();
        assert_eq!(a, Placement { address: 0x1000_0000, size: 1024, new_segment: Some(2 << 20) });
        let b = s.malloc(512, 0, None, &mut place).unwrap();
        assert_eq!((b.address, b.new_segment), (0x1000_0400, None));
        // Freed, the first block is the smallest that fits a 1 KiB request: reused.
        assert!(s.free(a.address));
        let c = s.malloc(1024, 0, None, &mut place).unwrap();
        assert_eq!((c.address, c.new_segment), (0x1000_0000, None));
        // Another stream has its own free blocks.
        let d = s.malloc(1024, 7, None, &mut place).unwrap();
        assert_eq!(d.new_segment, Some(2 << 20));
        // 12 MiB: a segment of its own size, not split (nothing over 1 MiB would remain).
        let e = s.malloc(12 << 20, 0, None, &mut place).unwrap();
        assert_eq!((e.size, e.new_segment), (12 << 20, Some(12 << 20)));
        // 3 MiB in a 20 MiB segment: split, 17 MiB stays free.
        let f = s.malloc(3 << 20, 0, None, &mut place).unwrap();
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
        let mut place = bump(0x2000_0000);
        let big = s.malloc(100 << 20, 0, None, &mut place).unwrap();
        assert!(s.free(big.address));
        let small = s.malloc(30 << 20, 0, None, &mut place).unwrap();
        assert_ne!(small.address, big.address);
        assert_eq!(small.new_segment, Some(30 << 20));
    }

    /// `roundup_power2_divisions`: 4 divisions of [1 GiB, 2 GiB) round 1.1 GiB up to 1.25 GiB;
    /// a power of two stays; 1 or 0 divisions round to 512 bytes.
    #[test]
    fn roundup_power2_divisions_round_as_pytorch_does() {
        let mut p = Policy::default();
        p.divisions[10] = 4;
        p.divisions[0] = 8;
        let gib = 1u64 << 30;
        assert_eq!(p.round_size(gib + gib / 10), gib + gib / 4);
        assert_eq!(p.round_size(gib), gib);
        assert_eq!(p.round_size(gib + gib / 4), gib + gib / 4);
        // [1 MiB, 2 MiB) in eighths: 1.1 MiB up to 1.125 MiB.
        assert_eq!(p.round_size((1 << 20) + 100_000), (1 << 20) + (1 << 17));
        // Under 1 MiB the first interval applies too, but 512 × 8 = 4 KiB is the floor.
        assert_eq!(p.round_size(3000), 3072);
        assert_eq!(p.round_size(5000), 5120, "in [4 KiB, 8 KiB), eighths of 4 KiB");
        p.divisions[11] = 1;
        assert_eq!(p.round_size(3 * gib + 1), 3 * gib + 512);
    }

    /// The out-of-memory path: cached segments are released before the device is asked
    /// again, and a request that still does not fit is an error with PyTorch's figures.
    #[test]
    fn the_cache_is_released_before_an_out_of_memory_error() {
        let mut s = Simulator::with_policy(Policy { capacity: Some(100 << 20), ..Policy::default() });
        let mut place = bump(0x3000_0000);
        let a = s.malloc(60 << 20, 0, None, &mut place).unwrap();
        assert!(s.free(a.address));
        s.take_events();
        // 70 MiB does not fit beside the cached 60 MiB: it is released, then the segment made.
        let b = s.malloc(70 << 20, 0, None, &mut place).unwrap();
        assert_eq!(b.new_segment, Some(70 << 20));
        assert_eq!(
            s.take_events(),
            vec![
                Event::SegmentFree { address: 0x3000_0000, size: 60 << 20 },
                Event::SegmentAlloc { address: 0x3000_0000 + (60 << 20), size: 70 << 20 },
            ]
        );
        let err = s.malloc(40 << 20, 0, None, &mut place).unwrap_err();
        assert_eq!(err, OutOfMemory { requested_bytes: 40 << 20, device_free_bytes: 30 << 20 });
    }

    /// Expandable segments: pages of 20 MiB mapped at the end of the stream's address space as
    /// requests need them, the free block before the unmapped space grown, and every whole
    /// free page unmapped by `empty_cache` (the address space released when none is left).
    #[test]
    fn expandable_segments_map_and_unmap_pages() {
        const MIB: u64 = 1 << 20;
        let mut s = Simulator::with_policy(Policy { expandable: true, capacity: Some(8 << 30), ..Policy::default() });
        let mut place = bump(0x4000_0000_0000);
        let a = s.malloc(30 * MIB, 0, None, &mut place).unwrap();
        let base = a.address;
        assert_eq!(s.take_events(), vec![Event::SegmentMap { address: base, size: 40 * MIB }]);
        // 25 MiB: the 10 MiB free after the first block and 20 MiB more mapped after it.
        let b = s.malloc(25 * MIB, 0, None, &mut place).unwrap();
        assert_eq!(b.address, base + 30 * MIB);
        assert_eq!(s.take_events(), vec![Event::SegmentMap { address: base + 40 * MIB, size: 20 * MIB }]);
        assert_eq!(s.reserved(), 60 * MIB);
        let listed = s.segments();
        assert_eq!(listed.len(), 1, "one mapped range, one segment as PyTorch lists it");
        assert_eq!((listed[0].address, listed[0].size, listed[0].expandable), (base, 60 * MIB, true));
        assert!(s.free(a.address) && s.free(b.address));
        s.empty_cache();
        assert_eq!(s.take_events(), vec![Event::SegmentUnmap { address: base, size: 60 * MIB }]);
        assert_eq!((s.reserved(), s.segments().len()), (0, 0));
    }

    /// `garbage_collection_threshold`: past the threshold of the memory limit, whole free
    /// segments of the large pool are released before the device is asked for more, where
    /// without it they stay cached.
    #[test]
    fn garbage_collection_releases_old_free_segments_past_the_threshold() {
        const MIB: u64 = 1 << 20;
        let events = |gc: f64| {
            let mut s =
                Simulator::with_policy(Policy { gc_threshold: gc, capacity: Some(100 * MIB), ..Policy::default() });
            let mut place = bump(0x5000_0000);
            let a = s.malloc(30 * MIB, 0, None, &mut place).unwrap();
            let b = s.malloc(22 * MIB, 0, None, &mut place).unwrap();
            s.free(a.address);
            s.free(b.address);
            s.take_events();
            s.malloc(40 * MIB, 0, None, &mut place).unwrap();
            (s.take_events(), s.reserved())
        };
        let (kept, reserved) = events(0.0);
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(reserved, 92 * MIB);
        let (collected, reserved) = events(0.5);
        assert!(matches!(collected[0], Event::SegmentFree { .. }), "{collected:?}");
        assert!(reserved < 92 * MIB);
    }
}
