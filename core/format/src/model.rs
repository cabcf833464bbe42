//! The compact model of a snapshot: interned strings, a frame table and a stack table
//! (a frame or stack shared in the pickle is stored once), segments and blocks with every
//! field of the format, and one columnar trace per device.

use rustc_hash::FxHashMap;

use crate::intern::{StrId, Strings};
use crate::value::Value;

/// Index of a frame in [`Snapshot::frames`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct FrameId(pub u32);

/// Index of a stack (a list of frames, innermost first) in the stack table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct StackId(pub u32);

/// One stack frame: `{name, filename, line}`, plus any extra keys (FX fields).
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// Function name.
    pub name: StrId,
    /// Source file (`??` for unknown C++ frames).
    pub filename: StrId,
    /// Line number (0 for C++ frames).
    pub line: i64,
    /// Keys other than the three above, in file order.
    pub extras: Vec<(StrId, Value)>,
}

/// Deduplicated stacks stored back to back.
#[derive(Clone, Debug, Default)]
pub struct Stacks {
    starts: Vec<u32>,
    frames: Vec<FrameId>,
}

impl Stacks {
    pub(crate) fn push(&mut self, frames: &[FrameId]) -> StackId {
        if self.starts.is_empty() {
            self.starts.push(0);
        }
        self.frames.extend_from_slice(frames);
        self.starts.push(self.frames.len() as u32);
        StackId(self.starts.len() as u32 - 2)
    }

    /// The frames of a stack, innermost first; empty for an unknown id.
    #[inline]
    pub fn get(&self, id: StackId) -> &[FrameId] {
        let i = id.0 as usize;
        match (self.starts.get(i), self.starts.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.frames[a as usize..b as usize],
            _ => &[],
        }
    }

    /// Number of distinct stacks.
    #[inline]
    pub fn len(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// True when there are no stacks.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn heap_bytes(&self) -> usize {
        self.starts.capacity() * 4 + self.frames.capacity() * 4
    }
}

/// Private pool id `(a, b)`; `(0, 0)` is the default pool.
pub type PoolId = (u64, u64);

/// How a block is used at snapshot time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Handed out to a tensor.
    ActiveAllocated,
    /// Freed by the user but still used by another stream (`record_stream`).
    ActivePendingFree,
    /// Cached, free.
    Inactive,
    /// A state string this version does not know.
    Other(StrId),
}

/// A 2.0-era block history record.
#[derive(Clone, Debug, PartialEq)]
pub struct History {
    /// Address of the allocation.
    pub addr: u64,
    /// Requested size.
    pub real_size: u64,
    /// Stack, when recorded.
    pub frames: Option<StackId>,
    /// Unknown keys.
    pub extras: Vec<(StrId, Value)>,
}

/// A block of a segment.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// The block's own `address` key (absent in 2.0 files); see [`Segment::block_addresses`].
    pub address: Option<u64>,
    /// Rounded size.
    pub size: u64,
    /// Requested size, when the key is present.
    pub requested_size: Option<u64>,
    /// State.
    pub state: BlockState,
    /// Allocation stack (`frames` key), when present.
    pub frames: Option<StackId>,
    /// Legacy 2.0 history.
    pub history: Option<Vec<History>>,
    /// Unknown or rare keys (`forward_frames`, ...), in file order.
    pub extras: Vec<(StrId, Value)>,
}

impl Block {
    /// Requested bytes as PyTorch's viewer computes them: `requested_size` if non-zero, else
    /// the first history record's `real_size`, else `size`.
    pub fn requested_bytes(&self) -> u64 {
        match self.requested_size {
            Some(r) if r != 0 => r,
            _ => match self.history.as_ref().and_then(|h| h.first()) {
                Some(h) => h.real_size,
                None => self.requested_size.unwrap_or(self.size),
            },
        }
    }

    /// The allocation stack: `frames`, or the first history record's frames.
    #[inline]
    pub fn stack(&self) -> Option<StackId> {
        self.frames.or_else(|| self.history.as_ref()?.first()?.frames)
    }
}

/// A segment (one cudaMalloc, or one mapped range of an expandable segment).
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// Device ordinal (-1 for host segments).
    pub device: i64,
    /// Start address.
    pub address: u64,
    /// Bytes covered.
    pub total_size: u64,
    /// Σ size of allocated blocks, when present.
    pub allocated_size: Option<u64>,
    /// Σ size of active blocks, when present.
    pub active_size: Option<u64>,
    /// Σ requested size of active blocks, when present.
    pub requested_size: Option<u64>,
    /// Stream handle.
    pub stream: i64,
    /// `large` or `small`, when present.
    pub segment_type: Option<StrId>,
    /// Owning pool, when present.
    pub segment_pool_id: Option<PoolId>,
    /// Whether the segment is expandable, when present.
    pub is_expandable: Option<bool>,
    /// Stack of the allocation that created it, when present.
    pub frames: Option<StackId>,
    /// Blocks in address order.
    pub blocks: Vec<Block>,
    /// Unknown or rare keys, in file order.
    pub extras: Vec<(StrId, Value)>,
}

impl Segment {
    /// Block addresses as the viewers compute them: the segment address plus the sizes
    /// of the blocks before (the file's own `address` keys are ignored, 2.0 has none).
    #[inline]
    pub fn block_addresses(&self) -> impl Iterator<Item = u64> + '_ {
        self.blocks.iter().scan(self.address, |next, b| {
            let addr = *next;
            *next = next.wrapping_add(b.size);
            Some(addr)
        })
    }
}

/// What a trace entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A block handed to the caller.
    Alloc,
    /// The caller freed a block.
    FreeRequested,
    /// The block went back to the cache.
    FreeCompleted,
    /// A merged free (only in files re-pickled from the viewer).
    Free,
    /// cudaMalloc of a segment.
    SegmentAlloc,
    /// cudaFree of a segment.
    SegmentFree,
    /// Pages mapped into an expandable segment.
    SegmentMap,
    /// Pages unmapped from an expandable segment.
    SegmentUnmap,
    /// Marker written by `snapshot()`.
    Snapshot,
    /// An allocation failed.
    Oom,
    /// `_annotate_tensor` (2.14+).
    Annotate,
    /// An action string this version does not know.
    Other(StrId),
}

impl Action {
    pub(crate) const KNOWN: [(&'static str, Action); 11] = [
        ("alloc", Action::Alloc),
        ("free_requested", Action::FreeRequested),
        ("free_completed", Action::FreeCompleted),
        ("free", Action::Free),
        ("segment_alloc", Action::SegmentAlloc),
        ("segment_free", Action::SegmentFree),
        ("segment_map", Action::SegmentMap),
        ("segment_unmap", Action::SegmentUnmap),
        ("snapshot", Action::Snapshot),
        ("oom", Action::Oom),
        ("annotate", Action::Annotate),
    ];

    #[inline]
    fn code(self) -> u8 {
        match self {
            Action::Other(_) => u8::MAX,
            known => Self::KNOWN.iter().position(|&(_, a)| a == known).unwrap_or(0) as u8,
        }
    }

    /// The name written in snapshots, for known actions.
    #[inline]
    pub fn name(self) -> Option<&'static str> {
        Self::KNOWN.iter().find(|&&(_, a)| a == self).map(|&(n, _)| n)
    }

    /// Whether it ends the allocation alive at its address: the one pairing rule of every
    /// analysis (the timelines, the allocator state, labels). An `alloc` lives until its
    /// block goes back to the cache (`free_completed`, or a merged `free`), as PyTorch's viewer
    /// pairs them; a `free_requested` whose completion waits on another stream leaves it alive
    /// (pending), which is what holds the memory.
    #[inline]
    pub fn ends_allocation(self) -> bool {
        matches!(self, Action::FreeCompleted | Action::Free)
    }
}

/// A column that costs nothing until some row has a value: 0 means "absent".
#[derive(Clone, Debug, Default)]
pub(crate) struct Sparse32(Vec<u32>);

impl Sparse32 {
    /// Sets `row`, the next one. `rows` is how many rows the table expects: a column that
    /// gets its first value makes room for them all at once, as the table's other columns
    /// did, instead of doubling (each doubling a copy of the column).
    #[inline]
    fn set(&mut self, row: usize, value: u32, rows: usize) {
        if self.0.len() == row && row > 0 {
            self.0.push(value);
        } else if value != 0 || !self.0.is_empty() {
            self.first_or_gap(row, value, rows);
        }
    }

    #[cold]
    #[inline]
    fn first_or_gap(&mut self, row: usize, value: u32, rows: usize) {
        if self.0.is_empty() {
            self.0.reserve(rows);
        }
        self.0.resize(row, 0);
        self.0.push(value);
    }
    #[inline]
    fn get(&self, row: usize) -> u32 {
        self.0.get(row).copied().unwrap_or(0)
    }
    #[inline]
    fn is_used(&self) -> bool {
        !self.0.is_empty()
    }
}

/// One trace entry, unpacked. The reader fills it and [`Trace::push`] packs it into columns.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The action.
    pub action: Action,
    /// `addr`, when the key is present (absent on `oom`).
    pub addr: Option<u64>,
    /// `size`.
    pub size: u64,
    /// Stream handle.
    pub stream: i64,
    /// µs since the Unix epoch (2.2+).
    pub time_us: Option<i64>,
    /// The stack, when the `frames` key is present.
    pub frames: Option<StackId>,
    /// `compile_context` (2.8+).
    pub compile_context: Option<StrId>,
    /// `user_metadata` (2.10+).
    pub user_metadata: Option<StrId>,
    /// `category` (profiler-made snapshots).
    pub category: Option<StrId>,
    /// `pool_id` (2.12+).
    pub pool_id: Option<PoolId>,
    /// `device_free` (on `oom`).
    pub device_free: Option<u64>,
    /// Other keys (`forward_frames`, `internal_metadata`, unknown ones), in file order.
    pub extras: Vec<(StrId, Value)>,
}

impl Entry {
    /// An entry with only an action, size and stream.
    pub fn new(action: Action, addr: u64, size: u64, stream: i64) -> Self {
        Entry {
            action,
            addr: Some(addr),
            size,
            stream,
            time_us: None,
            frames: None,
            compile_context: None,
            user_metadata: None,
            category: None,
            pool_id: None,
            device_free: None,
            extras: Vec::new(),
        }
    }
}

const NO_TIME: i64 = i64::MIN;

/// The trace of one device, stored by column.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    action: Vec<u8>,
    addr: Vec<u64>,
    size: Vec<u64>,
    stream: Vec<i64>,
    time_us: Vec<i64>,
    has_addr: Vec<bool>,
    frames: Sparse32,
    compile_context: Sparse32,
    user_metadata: Sparse32,
    category: Sparse32,
    pools: Vec<PoolId>,
    /// Position of each pool in `pools`, so an entry finds its pool in O(1) however many
    /// there are.
    pool_index: FxHashMap<PoolId, u32>,
    pool: Sparse32,
    other_actions: Vec<(u32, StrId)>,
    device_free: Vec<(u32, u64)>,
    extras: Vec<(u32, Vec<(StrId, Value)>)>,
    /// Entries a windowed read left out before the first one kept ([`Trace::dropped`]).
    dropped: u64,
    /// A windowed read of a range: what came after it, while the file is read.
    tail: Option<Box<Tail>>,
    /// Entries a windowed read of a range left out after the last one kept.
    after: u64,
}

/// The entries after a window of a range, reduced as they come to what undoing them from the
/// final segments needs: every segment event, and per address the block events up to its
/// first that is not a `free_requested` (undoing an earlier event of an address overrides
/// what undoing its later ones did, except that undoing a `free_requested` only clears the
/// pending flag the next one left). So it holds about one entry per address, not per event.
#[derive(Clone, Debug, Default)]
pub struct Tail {
    /// Entries after the window, all of them.
    pub seen: u64,
    /// The entries kept, in order.
    pub entries: Vec<Entry>,
    /// Addresses whose block events no longer matter.
    closed: rustc_hash::FxHashSet<u64>,
    /// The stack of each live allocation's `alloc` so far: a range read sees every entry,
    /// kept or not ([`Trace::follow`]).
    live: rustc_hash::FxHashMap<u64, StackId>,
    /// A block alive at the window's end and freed after it: its allocation's stack, which
    /// the kept free does not carry (its own stack is where it went).
    pub made: rustc_hash::FxHashMap<u64, StackId>,
}

impl Trace {
    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.action.len()
    }

    /// True when the trace has no entries.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.action.is_empty()
    }

    /// An empty trace with room for `n` entries in its main columns.
    pub fn with_capacity(n: usize) -> Self {
        Trace {
            action: Vec::with_capacity(n),
            addr: Vec::with_capacity(n),
            size: Vec::with_capacity(n),
            stream: Vec::with_capacity(n),
            has_addr: Vec::with_capacity(n),
            ..Default::default()
        }
    }

    /// Appends an entry.
    pub fn push(&mut self, e: &Entry) {
        let row = self.action.len();
        let code = e.action.code();
        self.action.push(code);
        if let Action::Other(s) = e.action {
            self.other_actions.push((row as u32, s));
        }
        self.addr.push(e.addr.unwrap_or(0));
        self.has_addr.push(e.addr.is_some());
        self.size.push(e.size);
        self.stream.push(e.stream);
        let rows = self.action.capacity();
        if e.time_us.is_some() || !self.time_us.is_empty() {
            if self.time_us.is_empty() {
                self.time_us.reserve(rows);
            }
            if self.time_us.len() < row {
                self.time_us.resize(row, NO_TIME);
            }
            self.time_us.push(e.time_us.unwrap_or(NO_TIME));
        }
        self.frames.set(row, e.frames.map_or(0, |s| s.0 + 1), rows);
        self.compile_context.set(row, e.compile_context.map_or(0, |s| s.0 + 1), rows);
        self.user_metadata.set(row, e.user_metadata.map_or(0, |s| s.0 + 1), rows);
        self.category.set(row, e.category.map_or(0, |s| s.0 + 1), rows);
        let pool = match e.pool_id {
            None => 0,
            Some(p) => {
                let next = self.pools.len() as u32;
                let k = *self.pool_index.entry(p).or_insert(next);
                if k == next {
                    self.pools.push(p);
                }
                k + 1
            }
        };
        self.pool.set(row, pool, rows);
        if let Some(f) = e.device_free {
            self.device_free.push((row as u32, f));
        }
        if !e.extras.is_empty() {
            self.extras.push((row as u32, e.extras.clone()));
        }
    }

    /// Entries of the file's trace before this one's first: a windowed read
    /// ([`crate::Limits::keep_last_entries`]) keeps only the last ones, and entry `i` here is
    /// entry `dropped() + i` of the file.
    #[inline]
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Counts an entry before a window of a range, not kept.
    #[inline]
    pub(crate) fn skip_front(&mut self) {
        self.dropped += 1;
    }

    /// Entries after a window of a range seen so far.
    #[inline]
    pub(crate) fn tail_len(&self) -> u64 {
        self.tail.as_ref().map_or(0, |t| t.seen)
    }

    /// An entry after a window of a range: kept if undoing it can change the state at the
    /// window's end (see [`Tail`]); returns whether it was.
    pub(crate) fn push_tail(&mut self, e: &Entry) -> bool {
        let t = self.tail.get_or_insert_with(Box::default);
        t.seen += 1;
        let keep = match e.action {
            Action::Alloc | Action::Free | Action::FreeCompleted | Action::FreeRequested => {
                let addr = e.addr.unwrap_or(0);
                let open = !t.closed.contains(&addr);
                if open && e.action != Action::FreeRequested {
                    t.closed.insert(addr);
                    if e.action.ends_allocation() {
                        if let Some(&s) = t.live.get(&addr) {
                            t.made.insert(addr, s);
                        }
                    }
                }
                open
            }
            Action::SegmentAlloc | Action::SegmentFree | Action::SegmentMap | Action::SegmentUnmap => true,
            _ => false,
        };
        if keep {
            t.entries.push(Entry { extras: Vec::new(), ..e.clone() });
        }
        keep
    }

    /// Any entry of a range read, once placed: the stacks of live allocations follow it, so
    /// that a block alive at the window's end keeps its allocation's stack even when that
    /// `alloc` was before the window. O(live allocations) of memory.
    pub(crate) fn follow(&mut self, e: &Entry) {
        let t = self.tail.get_or_insert_with(Box::default);
        let Some(addr) = e.addr else { return };
        match (e.action, e.frames) {
            (Action::Alloc, Some(s)) => {
                t.live.insert(addr, s);
            }
            (a, _) if a == Action::Alloc || a.ends_allocation() => {
                t.live.remove(&addr);
            }
            _ => {}
        }
    }

    /// The entries after a window of a range, taken out (empty for other reads): the replay
    /// settles them (`slice::settle_tails`).
    #[inline]
    pub fn take_tail(&mut self) -> Option<Box<Tail>> {
        // Taken out whatever it holds: what `follow` kept goes with it.
        let t = self.tail.take().filter(|t| t.seen > 0)?;
        self.after = t.seen;
        Some(t)
    }

    /// Entries of the file's trace after this one's last: a windowed read of a range leaves
    /// them out (the file has `dropped() + len() + after()`).
    #[inline]
    pub fn after(&self) -> u64 {
        self.after
    }

    /// Drops the first `k` entries (a windowed read keeping the last ones). O(entries left).
    pub(crate) fn drop_front(&mut self, k: usize) {
        let k = k.min(self.len());
        if k == 0 {
            return;
        }
        #[inline]
        fn front<T>(v: &mut Vec<T>, k: usize) {
            v.drain(..k.min(v.len()));
        }
        #[inline]
        fn rows<T>(v: &mut Vec<(u32, T)>, k: usize) {
            v.retain(|(row, _)| *row as usize >= k);
            for (row, _) in v.iter_mut() {
                *row -= k as u32;
            }
        }
        front(&mut self.action, k);
        front(&mut self.addr, k);
        front(&mut self.size, k);
        front(&mut self.stream, k);
        front(&mut self.time_us, k);
        front(&mut self.has_addr, k);
        for c in
            [&mut self.frames, &mut self.compile_context, &mut self.user_metadata, &mut self.category, &mut self.pool]
        {
            front(&mut c.0, k);
        }
        rows(&mut self.other_actions, k);
        rows(&mut self.device_free, k);
        rows(&mut self.extras, k);
        self.dropped += k as u64;
    }

    /// Whether some entry has `action` (a scan of one byte per entry).
    #[inline]
    pub fn has_action(&self, action: Action) -> bool {
        let code = action.code();
        self.action.contains(&code)
            && (code != u8::MAX || self.other_actions.iter().any(|&(_, s)| Action::Other(s) == action))
    }

    /// The action of entry `i`.
    #[inline]
    pub fn action(&self, i: usize) -> Action {
        let code = self.action.get(i).copied().unwrap_or(0);
        if code == u8::MAX {
            return match self.other_actions.binary_search_by_key(&(i as u32), |&(r, _)| r) {
                Ok(k) => Action::Other(self.other_actions[k].1),
                Err(_) => Action::Snapshot,
            };
        }
        Action::KNOWN.get(code as usize).map_or(Action::Snapshot, |&(_, a)| a)
    }
    /// `addr` of entry `i` (0 when absent).
    #[inline]
    pub fn addr(&self, i: usize) -> u64 {
        self.addr.get(i).copied().unwrap_or(0)
    }
    /// `size` of entry `i`.
    #[inline]
    pub fn size(&self, i: usize) -> u64 {
        self.size.get(i).copied().unwrap_or(0)
    }
    /// Stream of entry `i`.
    #[inline]
    pub fn stream(&self, i: usize) -> i64 {
        self.stream.get(i).copied().unwrap_or(0)
    }
    /// `time_us` of entry `i`, when present.
    #[inline]
    pub fn time_us(&self, i: usize) -> Option<i64> {
        self.time_us.get(i).copied().filter(|&t| t != NO_TIME)
    }
    /// True when some entry has `time_us`.
    #[inline]
    pub fn has_time(&self) -> bool {
        !self.time_us.is_empty()
    }
    /// Stack of entry `i`, when its `frames` key is present.
    #[inline]
    pub fn frames(&self, i: usize) -> Option<StackId> {
        opt_id(self.frames.get(i)).map(StackId)
    }
    /// `compile_context` of entry `i`.
    #[inline]
    pub fn compile_context(&self, i: usize) -> Option<StrId> {
        opt_id(self.compile_context.get(i)).map(StrId)
    }
    /// `user_metadata` of entry `i`.
    #[inline]
    pub fn user_metadata(&self, i: usize) -> Option<StrId> {
        opt_id(self.user_metadata.get(i)).map(StrId)
    }
    /// `category` of entry `i`.
    #[inline]
    pub fn category(&self, i: usize) -> Option<StrId> {
        opt_id(self.category.get(i)).map(StrId)
    }
    /// True when some entry has a `category`.
    #[inline]
    pub fn has_categories(&self) -> bool {
        self.category.is_used()
    }
    /// The entries that have other keys ([`Trace::extras`]), with them.
    #[inline]
    pub fn all_extras(&self) -> impl Iterator<Item = (usize, &[(StrId, Value)])> + '_ {
        self.extras.iter().map(|(r, e)| (*r as usize, e.as_slice()))
    }

    /// The distinct `pool_id`s of the entries, in order of first appearance.
    #[inline]
    pub fn pool_ids(&self) -> &[PoolId] {
        &self.pools
    }

    /// `pool_id` of entry `i`, when present.
    #[inline]
    pub fn pool_id(&self, i: usize) -> Option<PoolId> {
        opt_id(self.pool.get(i)).and_then(|k| self.pools.get(k as usize).copied())
    }
    /// `device_free` of entry `i` (on `oom` entries).
    #[inline]
    pub fn device_free(&self, i: usize) -> Option<u64> {
        let k = self.device_free.binary_search_by_key(&(i as u32), |&(r, _)| r).ok()?;
        Some(self.device_free[k].1)
    }
    /// Extra keys of entry `i`.
    #[inline]
    pub fn extras(&self, i: usize) -> &[(StrId, Value)] {
        match self.extras.binary_search_by_key(&(i as u32), |(r, _)| *r) {
            Ok(k) => &self.extras[k].1,
            Err(_) => &[],
        }
    }

    /// Entry `i`, unpacked.
    pub fn entry(&self, i: usize) -> Entry {
        Entry {
            action: self.action(i),
            addr: self.has_addr.get(i).copied().unwrap_or(false).then(|| self.addr(i)),
            size: self.size(i),
            stream: self.stream(i),
            time_us: self.time_us(i),
            frames: self.frames(i),
            compile_context: self.compile_context(i),
            user_metadata: self.user_metadata(i),
            category: self.category(i),
            pool_id: self.pool_id(i),
            device_free: self.device_free(i),
            extras: self.extras(i).to_vec(),
        }
    }

    /// Approximate heap bytes used.
    pub fn heap_bytes(&self) -> usize {
        self.action.capacity()
            + self.has_addr.capacity()
            + (self.addr.capacity() + self.size.capacity() + self.stream.capacity() + self.time_us.capacity()) * 8
            + (self.frames.0.capacity()
                + self.compile_context.0.capacity()
                + self.user_metadata.0.capacity()
                + self.category.0.capacity()
                + self.pool.0.capacity())
                * 4
            + self.device_free.capacity() * 16
            + self.extras.capacity() * 32
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.action.shrink_to_fit();
        self.addr.shrink_to_fit();
        self.size.shrink_to_fit();
        self.stream.shrink_to_fit();
        self.time_us.shrink_to_fit();
        self.has_addr.shrink_to_fit();
        for c in
            [&mut self.frames, &mut self.compile_context, &mut self.user_metadata, &mut self.category, &mut self.pool]
        {
            c.0.shrink_to_fit();
        }
    }
}

#[inline]
fn opt_id(v: u32) -> Option<u32> {
    v.checked_sub(1)
}

/// One `external_annotations` record (a `record_function` START or END).
#[derive(Clone, Debug, PartialEq)]
pub struct Annotation {
    /// `START` or `END`.
    pub stage: StrId,
    /// The record_function name.
    pub name: StrId,
    /// Device of the recording thread.
    pub device: i64,
    /// µs since the Unix epoch.
    pub time_us: i64,
    /// Other keys.
    pub extras: Vec<(StrId, Value)>,
}

impl Annotation {
    /// Whether it applies to `device`: one rule for every analysis. A thread with no current
    /// device records `-1` (a `record_function` on the CPU side of a step), which applies to
    /// every device.
    #[inline]
    pub fn on_device(&self, device: usize) -> bool {
        self.device < 0 || self.device == device as i64
    }
}

/// A device as `memscape capture` describes it (from NVML), under the top-level key
/// [`DEVICE_INFO_KEY`]. PyTorch's snapshots carry no device names; PyTorch's tools ignore the key.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceInfo {
    /// Device ordinal, as in `device_traces`.
    pub device: i64,
    /// Product name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// The device's UUID (`GPU-...`).
    pub uuid: String,
    /// Memory installed, in bytes.
    pub total_bytes: u64,
    /// Device memory the recorded process held by the driver's count when the snapshot was
    /// written (context, code and everything allocated), when the driver reports it.
    pub process_used_bytes: Option<u64>,
}

/// The top-level key holding [`DeviceInfo`]s: a list of dicts.
pub const DEVICE_INFO_KEY: &str = "memscape_devices";

/// The key a merged segment carries (value `True`) when the driver allocated it outside
/// PyTorch's caching allocator (`memscape merge`). PyTorch's tools ignore keys they do not know.
pub const OUTSIDE_KEY: &str = "memscape_outside_allocator";

/// The file of a frame a profiler trace's span makes without one (an operator, a
/// `record_function`, `nn.Module: Linear_0`): views show such a frame by its name alone.
pub const SPAN_FILE: &str = "torch.profiler span";

/// The top-level key under which a snapshot read from a `torch.profiler` file says what the
/// file was (`profiler::ProfilerInfo`). PyTorch's tools ignore it.
pub const PROFILER_KEY: &str = "memscape_profiler";

/// The top-level key under which a predicted snapshot says what it is (`memscape predict`,
/// `prediction::PredictionInfo`). PyTorch's tools ignore it.
pub const PREDICTION_KEY: &str = "memscape_prediction";

/// The top-level key under which a slice says what it is a window of (`memscape slice`).
/// PyTorch's tools ignore it.
pub const WINDOW_KEY: &str = "memscape_window";

/// The shape of the top-level object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    /// The dict written by `_dump_snapshot`.
    Dict,
    /// A bare list of segments (`torch.cuda.memory_snapshot()` pickled by a user).
    SegmentList,
}

/// A whole snapshot.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The interned strings.
    pub strings: Strings,
    /// The frame table.
    pub frames: Vec<Frame>,
    /// The stack table.
    pub stacks: Stacks,
    /// Top-level shape.
    pub root: Root,
    /// Segments of all devices.
    pub segments: Vec<Segment>,
    /// Per-device traces (index = device); `None` when the key is absent.
    pub device_traces: Option<Vec<Trace>>,
    /// `allocator_settings`, kept as written.
    pub allocator_settings: Option<Value>,
    /// `external_annotations`.
    pub external_annotations: Option<Vec<Annotation>>,
    /// `host_segments` (2.14+).
    pub host_segments: Option<Vec<Segment>>,
    /// `host_traces` (2.14+).
    pub host_traces: Option<Trace>,
    /// Unknown top-level keys, in file order.
    pub extras: Vec<(StrId, Value)>,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            strings: Strings::default(),
            frames: Vec::new(),
            stacks: Stacks::default(),
            root: Root::Dict,
            segments: Vec::new(),
            device_traces: Some(Vec::new()),
            allocator_settings: None,
            external_annotations: None,
            host_segments: None,
            host_traces: None,
            extras: Vec::new(),
        }
    }
}

impl Snapshot {
    /// The text of an interned string.
    #[inline]
    pub fn str(&self, id: StrId) -> &str {
        self.strings.get(id)
    }

    /// Adds a frame (for writers of snapshots, such as the capture tool).
    pub fn add_frame(&mut self, name: &str, filename: &str, line: i64) -> FrameId {
        let f = Frame {
            name: self.strings.intern(name),
            filename: self.strings.intern(filename),
            line,
            extras: Vec::new(),
        };
        self.frames.push(f);
        FrameId(self.frames.len() as u32 - 1)
    }

    /// Adds a stack of frames, innermost first.
    #[inline]
    pub fn add_stack(&mut self, frames: &[FrameId]) -> StackId {
        self.stacks.push(frames)
    }

    /// The frames of a stack, innermost first.
    #[inline]
    pub fn stack(&self, id: StackId) -> impl Iterator<Item = &Frame> + '_ {
        self.stacks.get(id).iter().filter_map(|f| self.frames.get(f.0 as usize))
    }

    /// The trace of `device` (empty when there is none).
    #[inline]
    pub fn trace(&self, device: usize) -> &Trace {
        static EMPTY: std::sync::OnceLock<Trace> = std::sync::OnceLock::new();
        self.device_traces.as_ref().and_then(|t| t.get(device)).unwrap_or_else(|| EMPTY.get_or_init(Trace::default))
    }

    /// Number of trace lists.
    #[inline]
    pub fn n_trace_lists(&self) -> usize {
        self.device_traces.as_ref().map_or(0, Vec::len)
    }

    /// What the file was when it was read from a `torch.profiler` file (under
    /// [`PROFILER_KEY`]); `None` for a snapshot PyTorch recorded.
    pub fn profiler_info(&self) -> Option<crate::profiler::ProfilerInfo> {
        let v = self.extras.iter().find(|(k, _)| self.str(*k) == PROFILER_KEY).map(|(_, v)| v)?;
        crate::profiler::ProfilerInfo::from_value(v)
    }

    /// What a predicted snapshot is (under [`PREDICTION_KEY`]); `None` for a recording.
    pub fn prediction_info(&self) -> Option<crate::prediction::PredictionInfo> {
        let v = self.extras.iter().find(|(k, _)| self.str(*k) == PREDICTION_KEY).map(|(_, v)| v)?;
        crate::prediction::PredictionInfo::from_value(v)
    }

    /// The devices described under [`DEVICE_INFO_KEY`] (written by `memscape capture`); empty
    /// for PyTorch's snapshots. Entries that are not dicts with an integer `device` are skipped.
    pub fn device_info(&self) -> Vec<DeviceInfo> {
        let Some(Value::List(items)) =
            self.extras.iter().find(|(k, _)| self.str(*k) == DEVICE_INFO_KEY).map(|(_, v)| v)
        else {
            return Vec::new();
        };
        let int = |d: &Value, k: &str| match d.get(k) {
            Some(Value::Int(i)) => Some(*i),
            _ => None,
        };
        let text = |d: &Value, k: &str| match d.get(k) {
            Some(Value::Str(s)) => s.to_string(),
            _ => String::new(),
        };
        items
            .iter()
            .filter_map(|d| {
                Some(DeviceInfo {
                    device: i64::try_from(int(d, "device")?).ok()?,
                    name: text(d, "name"),
                    uuid: text(d, "uuid"),
                    total_bytes: int(d, "total_bytes").and_then(|v| u64::try_from(v).ok()).unwrap_or(0),
                    process_used_bytes: int(d, "process_used_bytes").and_then(|v| u64::try_from(v).ok()),
                })
            })
            .collect()
    }

    /// Replaces the [`DEVICE_INFO_KEY`] entry with `devices`.
    pub fn set_device_info(&mut self, devices: &[DeviceInfo]) {
        let key = self.strings.intern(DEVICE_INFO_KEY);
        self.extras.retain(|(k, _)| *k != key);
        let s = |v: &str| Value::Str(v.into());
        let list = devices
            .iter()
            .map(|d| {
                let mut items = vec![
                    (s("device"), Value::Int(d.device.into())),
                    (s("name"), s(&d.name)),
                    (s("uuid"), s(&d.uuid)),
                    (s("total_bytes"), Value::Int(d.total_bytes.into())),
                ];
                if let Some(u) = d.process_used_bytes {
                    items.push((s("process_used_bytes"), Value::Int(u.into())));
                }
                Value::Dict(items)
            })
            .collect();
        self.extras.push((key, Value::List(list)));
    }

    /// Devices worth showing: every device with trace entries or segments, ascending.
    #[inline]
    pub fn devices(&self) -> Vec<usize> {
        let mut out: Vec<usize> = (0..self.n_trace_lists()).filter(|&d| !self.trace(d).is_empty()).collect();
        out.extend(self.segments.iter().filter_map(|s| usize::try_from(s.device).ok()));
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Per device: its segments and their total size, in one pass over the segments (a file
    /// may name many devices, so no caller filters the segments once per device).
    pub fn segments_by_device(&self) -> FxHashMap<i64, (usize, u64)> {
        let mut per: FxHashMap<i64, (usize, u64)> = FxHashMap::default();
        for s in &self.segments {
            let d = per.entry(s.device).or_default();
            d.0 += 1;
            d.1 = d.1.saturating_add(s.total_size);
        }
        per
    }

    /// The devices whose trace has an out-of-memory error (`oom`), ascending.
    #[inline]
    pub fn devices_with_oom(&self) -> Vec<usize> {
        self.devices().into_iter().filter(|&d| self.trace(d).has_action(Action::Oom)).collect()
    }

    /// The device to open and diagnose first (the viewer, `memscape doctor`, a rank's
    /// profile): the first that ran out of memory, else the one with the most trace
    /// entries, then the most segments; `None` when nothing is recorded.
    pub fn default_device(&self) -> Option<usize> {
        if let Some(&d) = self.devices_with_oom().first() {
            return Some(d);
        }
        let segs = self.segments_by_device();
        self.devices()
            .into_iter()
            .max_by_key(|&d| (self.trace(d).len(), segs.get(&(d as i64)).map_or(0, |s| s.0), std::cmp::Reverse(d)))
    }

    /// The device a command reads, by one rule for every front end: `asked` when the file
    /// has it ([`Snapshot::devices`]), else an error naming the devices it has; without
    /// `asked`, [`Snapshot::default_device`] (0 for a file with none).
    pub fn pick_device(&self, asked: Option<usize>) -> Result<usize, String> {
        let Some(d) = asked else { return Ok(self.default_device().unwrap_or(0)) };
        let all = self.devices();
        if all.contains(&d) {
            return Ok(d);
        }
        let list: Vec<String> = all.iter().map(usize::to_string).collect();
        Err(match list.len() {
            0 => format!("no device {d}: the file has no device (no trace entries, no segments)"),
            1 => format!("no device {d}: the file has device {}", list[0]),
            _ => format!("no device {d}: the file has devices {}", list.join(", ")),
        })
    }

    /// Approximate heap bytes used by the model.
    pub fn heap_bytes(&self) -> usize {
        let segs = |v: &[Segment]| -> usize {
            v.iter().map(|s| std::mem::size_of::<Segment>() + s.blocks.capacity() * std::mem::size_of::<Block>()).sum()
        };
        self.strings.heap_bytes()
            + self.frames.capacity() * std::mem::size_of::<Frame>()
            + self.stacks.heap_bytes()
            + segs(&self.segments)
            + self.host_segments.as_deref().map_or(0, segs)
            + self.device_traces.iter().flatten().map(Trace::heap_bytes).sum::<usize>()
            + self.host_traces.as_ref().map_or(0, Trace::heap_bytes)
            + self.external_annotations.as_ref().map_or(0, |a| a.capacity() * std::mem::size_of::<Annotation>())
    }
}
