//! The allocator state (segments, blocks, pending frees) after any trace event.
//!
//! Like PyTorch's "Allocator State History", the state after event `i` is the final
//! snapshot with every later event undone. Undoing is done once, from the end, and the
//! state is saved every few thousand events; any event then opens from the nearest
//! checkpoint instead of replaying the whole trace.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{Action, BlockState, PoolId, Snapshot, StackId, Trace};

#[derive(Clone, Debug)]
struct Seg {
    size: u64,
    stream: i64,
    pool: Option<PoolId>,
    expandable: bool,
}

#[derive(Clone, Debug)]
struct Blk {
    size: u64,
    requested: u64,
    pending: bool,
    made: Made,
}

/// Where a live block's stack comes from. A block brought back by undoing its free has its
/// allocation further back in the trace, met later by the backward replay: until then it is
/// known by its free (the free's own stack is where it went, never its stack).
#[derive(Clone, Copy, Debug)]
enum Made {
    /// A block of the final snapshot: its `frames`, taken by PyTorch at the allocation.
    Final(Option<StackId>),
    /// Undone from its free at this entry: its allocation is the `alloc` paired with it.
    FreedAt(u32),
}

/// [`Pairs`]' value of a free no `alloc` before it pairs with.
const UNPAIRED: u32 = u32::MAX;
/// ... of a free whose `alloc` has no stack.
const NO_STACK: u32 = u32::MAX - 1;

/// Entries per count of [`Pairs::after`].
const RANK_BLOCK: usize = 512;

/// The stack of the `alloc` each free (`free`, `free_completed`) pairs with, filled by the
/// backward replay: a value per free, found by its rank among the frees after it (a bit per
/// entry marks the frees, a count per 512 entries says how many are after the block), about
/// 1.5 bytes an entry where a value per entry would take 4.
#[derive(Clone, Debug, Default)]
struct Pairs {
    /// Bit `i` is set when entry `i` is a free (set as the replay passes it).
    frees: Vec<u64>,
    /// `after[b]`: frees at entries from `b * RANK_BLOCK` on (set as the replay passes that entry).
    after: Vec<u32>,
    /// By rank from the end, as the replay meets them (0: the last free): `UNPAIRED`,
    /// `NO_STACK` or a stack id.
    values: Vec<u32>,
}

impl Pairs {
    fn new(n: usize) -> Pairs {
        Pairs { frees: vec![0; n.div_ceil(64)], after: vec![0; n / RANK_BLOCK + 2], values: Vec::new() }
    }

    /// Frees after entry `i`, once the replay has passed them all: O(1), at most 8 words.
    fn rank(&self, i: usize) -> usize {
        let block = i / RANK_BLOCK;
        let end = ((block + 1) * RANK_BLOCK / 64).min(self.frees.len());
        let w = i / 64;
        let Some(&word) = self.frees.get(w) else { return 0 };
        let above = if i % 64 == 63 { 0 } else { word >> (i % 64 + 1) };
        let rest: u32 = self.frees.get(w + 1..end).unwrap_or(&[]).iter().map(|x| x.count_ones()).sum();
        self.after.get(block + 1).map_or(0, |&a| a as usize) + above.count_ones() as usize + rest as usize
    }

    /// The replay undid free `i` (every entry after it is undone already).
    fn free(&mut self, i: usize) {
        if let Some(word) = self.frees.get_mut(i / 64) {
            *word |= 1 << (i % 64);
            self.values.push(UNPAIRED);
        }
    }

    /// The replay undid entry `i`, whatever it was.
    fn passed(&mut self, i: usize) {
        if i.is_multiple_of(RANK_BLOCK) {
            if let Some(a) = self.after.get_mut(i / RANK_BLOCK) {
                *a = self.values.len() as u32;
            }
        }
    }

    /// The `alloc` of free `f` has `stack`.
    fn pair(&mut self, f: usize, stack: Option<StackId>) {
        let r = self.rank(f);
        if let Some(v) = self.values.get_mut(r) {
            *v = stack.map_or(NO_STACK, |s| s.0);
        }
    }

    /// The stack of the `alloc` free `f` pairs with, if it has one.
    fn stack(&self, f: usize) -> Option<StackId> {
        if self.frees.get(f / 64).is_none_or(|w| w & (1 << (f % 64)) == 0) {
            return None;
        }
        match self.values.get(self.rank(f)).copied() {
            None | Some(UNPAIRED | NO_STACK) => None,
            Some(s) => Some(StackId(s)),
        }
    }
}

/// The sums are exact (a hostile file's sizes add up past `u64::MAX`, and a saturated sum
/// would not come back down as its parts go): [`sat`] reads them as bytes.
#[derive(Clone, Debug, Default)]
struct Live {
    segs: BTreeMap<u64, Seg>,
    blocks: BTreeMap<u64, Blk>,
    reserved: u128,
    allocated: u128,
}

#[derive(Clone, Debug)]
struct Checkpoint {
    segs: Vec<(u64, Seg)>,
    blocks: Vec<(u64, Blk)>,
    reserved: u128,
    allocated: u128,
}

/// An exact sum of sizes as bytes, `u64::MAX` past it.
fn sat(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

impl Live {
    fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            segs: self.segs.iter().map(|(&a, s)| (a, s.clone())).collect(),
            blocks: self.blocks.iter().map(|(&a, b)| (a, b.clone())).collect(),
            reserved: self.reserved,
            allocated: self.allocated,
        }
    }

    fn restore(c: &Checkpoint) -> Live {
        Live {
            segs: c.segs.iter().cloned().collect(),
            blocks: c.blocks.iter().cloned().collect(),
            reserved: c.reserved,
            allocated: c.allocated,
        }
    }

    fn insert_block(&mut self, addr: u64, b: Blk) {
        self.allocated += u128::from(b.requested);
        if let Some(old) = self.blocks.insert(addr, b) {
            self.allocated -= u128::from(old.requested);
        }
    }

    fn insert_seg(&mut self, addr: u64, s: Seg) {
        self.reserved += u128::from(s.size);
        if let Some(old) = self.segs.insert(addr, s) {
            self.reserved -= u128::from(old.size);
        }
    }

    /// Undoes entry `i`: the state after it becomes the state before it. Undoing an `alloc`
    /// pairs it with the free that brought its block back, in `pairs` (the allocation's
    /// stack by the free's entry) when given.
    fn undo(&mut self, t: &Trace, i: usize, pairs: Option<&mut Pairs>) {
        let (addr, size) = (t.addr(i), t.size(i));
        match t.action(i) {
            Action::Alloc => {
                if let Some(b) = self.blocks.remove(&addr) {
                    self.allocated -= u128::from(b.requested);
                    if let (Made::FreedAt(f), Some(pairs)) = (b.made, pairs) {
                        pairs.pair(f as usize, t.frames(i));
                    }
                }
            }
            a if a.ends_allocation() => {
                let pending = a == Action::FreeCompleted;
                let b = Blk { size, requested: size, pending, made: Made::FreedAt(i as u32) };
                self.insert_block(addr, b);
                if let Some(pairs) = pairs {
                    pairs.free(i);
                }
            }
            Action::FreeRequested => {
                if let Some(b) = self.blocks.get_mut(&addr) {
                    b.pending = false;
                }
            }
            Action::SegmentFree => {
                let s = Seg { size, stream: t.stream(i), pool: t.pool_id(i), expandable: false };
                self.insert_seg(addr, s);
            }
            Action::SegmentUnmap => {
                let stream = t.stream(i);
                let (mut start, mut len) = (addr, size);
                // Merge with address-adjacent segments on the same stream.
                if let Some((&a, s)) = self.segs.range(..addr).next_back() {
                    if a.saturating_add(s.size) == addr && s.stream == stream {
                        start = a;
                        len = len.saturating_add(s.size);
                        self.reserved -= u128::from(s.size);
                        self.segs.remove(&a);
                    }
                }
                if let Some(s) = self.segs.get(&addr.saturating_add(size)).cloned() {
                    if s.stream == stream {
                        len = len.saturating_add(s.size);
                        self.reserved -= u128::from(s.size);
                        self.segs.remove(&addr.saturating_add(size));
                    }
                }
                self.insert_seg(start, Seg { size: len, stream, pool: t.pool_id(i), expandable: true });
            }
            Action::SegmentAlloc => {
                if let Some(s) = self.segs.remove(&addr) {
                    self.reserved -= u128::from(s.size);
                }
            }
            Action::SegmentMap => {
                let found = self.segs.range(..=addr).next_back().map(|(&a, s)| (a, s.clone()));
                if let Some((a, s)) = found {
                    let (end, s_end) = (addr.saturating_add(size), a.saturating_add(s.size));
                    if addr < s_end {
                        self.segs.remove(&a);
                        self.reserved -= u128::from(s.size);
                        if addr > a {
                            self.insert_seg(a, Seg { size: addr - a, ..s.clone() });
                        }
                        if s_end > end {
                            self.insert_seg(end, Seg { size: s_end - end, ..s });
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// Checkpoints of the allocator state of one device.
#[derive(Clone, Debug)]
pub struct StateIndex {
    device: usize,
    n_entries: usize,
    every: usize,
    /// `checkpoints[k]` is the state after entry `min((k + 1) * every, n) - 1`.
    checkpoints: Vec<Checkpoint>,
    initial: Checkpoint,
    /// For each free, the stack of the `alloc` it pairs with, so that every state names its
    /// blocks' allocations.
    pairs: Pairs,
}

/// The allocator state at one point.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AllocatorState {
    /// The entry this is the state after (`None`: before the first entry).
    pub after_entry: Option<u32>,
    /// Σ segment sizes.
    pub reserved_bytes: u64,
    /// Σ requested bytes of allocated and pending-free blocks.
    pub allocated_bytes: u64,
    /// Segments in address order.
    pub segments: Vec<SegmentState>,
    /// Blocks that lie in no segment (only in inconsistent traces).
    pub orphan_blocks: Vec<BlockView>,
}

/// One segment and its live blocks.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SegmentState {
    /// Start address.
    pub address: u64,
    /// Bytes reserved.
    pub size: u64,
    /// Stream handle.
    pub stream: i64,
    /// Private pool, when known.
    pub pool: Option<PoolId>,
    /// Whether it belongs to an expandable segment.
    pub expandable: bool,
    /// Live blocks (allocated or pending free), in address order.
    pub blocks: Vec<BlockView>,
    /// Σ (size − requested) of its blocks: lost to rounding.
    pub internal_free_bytes: u64,
    /// size − Σ block sizes: cached, free.
    pub external_free_bytes: u64,
}

/// One live block.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BlockView {
    /// Address.
    pub address: u64,
    /// Rounded size.
    pub size: u64,
    /// Requested size.
    pub requested_size: u64,
    /// Freed but waiting for another stream.
    pub pending_free: bool,
    /// Its allocation's stack (never its free's): `None` when the allocation recorded none
    /// or happened before the recording.
    pub stack: Option<StackId>,
}

/// A [`StateIndex`] being built, in slices: [`StateBuilder::work`] undoes at most a given
/// number of entries and returns, so the viewer's worker can answer between two slices.
#[derive(Clone, Debug)]
pub struct StateBuilder {
    device: usize,
    n_entries: usize,
    every: usize,
    live: Live,
    /// The next entry to undo is `next - 1`.
    next: usize,
    checkpoints: Vec<Option<Checkpoint>>,
    /// [`StateIndex::pairs`] so far.
    pairs: Pairs,
}

/// The allocator as the final snapshot of `device` leaves it.
fn final_state(snap: &Snapshot, device: usize) -> Live {
    let mut live = Live::default();
    for s in snap.segments.iter().filter(|s| s.device == device as i64) {
        let seg = Seg {
            size: s.total_size,
            stream: s.stream,
            pool: s.segment_pool_id,
            expandable: s.is_expandable == Some(true),
        };
        live.insert_seg(s.address, seg);
        for (b, addr) in s.blocks.iter().zip(s.block_addresses()) {
            let pending = match b.state {
                BlockState::ActiveAllocated => false,
                BlockState::ActivePendingFree => true,
                _ => continue,
            };
            let blk = Blk { size: b.size, requested: b.requested_bytes(), pending, made: Made::Final(b.stack()) };
            live.insert_block(addr, blk);
        }
    }
    live
}

/// (reserved, allocated) bytes after each entry of `device`, by the same reverse replay as
/// [`StateIndex`] (which does not keep them: 16 bytes an entry).
pub fn totals(snap: &Snapshot, device: usize) -> Vec<(u64, u64)> {
    let t = snap.trace(device);
    let mut live = final_state(snap, device);
    let mut out = vec![(0, 0); t.len()];
    for i in (0..t.len()).rev() {
        out[i] = (sat(live.reserved), sat(live.allocated));
        live.undo(t, i, None);
    }
    out
}

impl StateBuilder {
    /// Starts from the final snapshot of `device` (O(segments + blocks)).
    pub fn new(snap: &Snapshot, device: usize) -> StateBuilder {
        let n = snap.trace(device).len();
        let every = (n / 128).max(1024);
        StateBuilder {
            device,
            n_entries: n,
            every,
            live: final_state(snap, device),
            next: n,
            checkpoints: vec![None; n.div_ceil(every)],
            pairs: Pairs::new(n),
        }
    }

    /// Undoes at most `units` more entries (a checkpoint costs as many units as it holds
    /// segments and blocks); true when every entry is undone.
    pub fn work(&mut self, snap: &Snapshot, units: usize) -> bool {
        let t = snap.trace(self.device);
        let mut left = units.max(1);
        while self.next > 0 && left > 0 {
            let i = self.next - 1;
            if i + 1 == self.n_entries || (i + 1).is_multiple_of(self.every) {
                self.checkpoints[i / self.every] = Some(self.live.checkpoint());
                left = left.saturating_sub(self.live.segs.len() + self.live.blocks.len());
            }
            self.live.undo(t, i, Some(&mut self.pairs));
            self.pairs.passed(i);
            self.next = i;
            left = left.saturating_sub(1);
        }
        self.next == 0
    }

    /// Undoes what is left at once and returns the index.
    pub fn finish(mut self, snap: &Snapshot) -> StateIndex {
        while !self.work(snap, usize::MAX) {}
        StateIndex {
            device: self.device,
            n_entries: self.n_entries,
            every: self.every,
            checkpoints: self.checkpoints.into_iter().flatten().collect(),
            initial: self.live.checkpoint(),
            pairs: self.pairs,
        }
    }
}

impl StateIndex {
    /// Undoes the whole trace of `device` once, keeping checkpoints ([`StateBuilder`] does
    /// the same in slices).
    pub fn build(snap: &Snapshot, device: usize) -> StateIndex {
        StateBuilder::new(snap, device).finish(snap)
    }

    /// The device.
    pub fn device(&self) -> usize {
        self.device
    }

    /// The state after `entry` (`None`: before the first entry). Entries past the end give
    /// the final state.
    pub fn state_after(&self, snap: &Snapshot, entry: Option<usize>) -> AllocatorState {
        let t = snap.trace(self.device);
        let live = match entry {
            None => Live::restore(&self.initial),
            Some(_) if self.n_entries == 0 => Live::restore(&self.initial),
            Some(i) => {
                let i = i.min(self.n_entries - 1);
                let k = i / self.every;
                let cp_entry = ((k + 1) * self.every).min(self.n_entries) - 1;
                let mut live = Live::restore(&self.checkpoints[k]);
                for j in (i + 1..=cp_entry).rev() {
                    live.undo(t, j, None);
                }
                live
            }
        };
        self.view(&live, entry.map(|i| i.min(self.n_entries.saturating_sub(1)) as u32))
    }

    /// The states after each of `entries` (as [`StateIndex::state_after`] gives them), handed
    /// to `f` with their position in `entries`. One backward replay per checkpoint interval
    /// that holds some of them, whatever their number: O(the entries of those intervals +
    /// the states handed out), where asking for each in turn would replay up to an interval
    /// per state (many OOMs in one file would make that quadratic).
    pub fn states_after_each(
        &self,
        snap: &Snapshot,
        entries: &[Option<usize>],
        mut f: impl FnMut(usize, AllocatorState),
    ) {
        let t = snap.trace(self.device);
        let last = self.n_entries.checked_sub(1);
        // (clamped entry, position), latest first; `None` (before the first entry) last.
        let mut order: Vec<(Option<usize>, usize)> =
            entries.iter().enumerate().map(|(k, e)| (e.and_then(|i| last.map(|l| i.min(l))), k)).collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        let mut live: Option<(usize, usize, Live)> = None; // (interval, state after this entry, state)
        for (entry, k) in order {
            let Some(i) = entry else {
                f(k, self.view(&Live::restore(&self.initial), None));
                continue;
            };
            let interval = i / self.every;
            let (_, at, state) = match live.take() {
                Some(l) if l.0 == interval => live.insert(l),
                _ => {
                    let cp_entry = ((interval + 1) * self.every).min(self.n_entries) - 1;
                    live.insert((interval, cp_entry, Live::restore(&self.checkpoints[interval])))
                }
            };
            for j in (i + 1..=*at).rev() {
                state.undo(t, j, None);
            }
            *at = i;
            f(k, self.view(state, Some(i as u32)));
        }
    }
}

impl StateIndex {
    /// The stack of a block's allocation.
    fn stack(&self, made: Made) -> Option<StackId> {
        match made {
            Made::Final(s) => s,
            Made::FreedAt(f) => self.pairs.stack(f as usize),
        }
    }

    fn view(&self, live: &Live, after_entry: Option<u32>) -> AllocatorState {
        let mut segments: Vec<SegmentState> = live
            .segs
            .iter()
            .map(|(&address, s)| SegmentState {
                address,
                size: s.size,
                stream: s.stream,
                pool: s.pool,
                expandable: s.expandable,
                blocks: Vec::new(),
                internal_free_bytes: 0,
                external_free_bytes: s.size,
            })
            .collect();
        let mut orphan_blocks = Vec::new();
        for (&address, b) in &live.blocks {
            let stack = self.stack(b.made);
            let bv = BlockView { address, size: b.size, requested_size: b.requested, pending_free: b.pending, stack };
            let k = segments.partition_point(|s| s.address <= address);
            match k.checked_sub(1).map(|k| &mut segments[k]) {
                Some(s) if address < s.address.saturating_add(s.size) => {
                    s.internal_free_bytes = s.internal_free_bytes.saturating_add(b.size.saturating_sub(b.requested));
                    s.external_free_bytes = s.external_free_bytes.saturating_sub(b.size);
                    s.blocks.push(bv);
                }
                _ => orphan_blocks.push(bv),
            }
        }
        AllocatorState {
            after_entry,
            reserved_bytes: sat(live.reserved),
            allocated_bytes: sat(live.allocated),
            segments,
            orphan_blocks,
        }
    }
}

/// Events as PyTorch's viewer lists them: a `free_requested` immediately followed by the
/// `free_completed` of the same address is one event. Returns, per event, its last entry.
pub fn merged_events(t: &Trace) -> Vec<u32> {
    let mut out = Vec::with_capacity(t.len());
    let mut i = 0;
    while i < t.len() {
        let merged = t.action(i) == Action::FreeRequested
            && i + 1 < t.len()
            && t.action(i + 1) == Action::FreeCompleted
            && t.addr(i + 1) == t.addr(i);
        i += if merged { 2 } else { 1 };
        out.push(i as u32 - 1);
    }
    out
}
