//! The recorder: a bounded ring of events per device, a table of what is alive, and the
//! conversion of both into a snapshot.

use std::collections::{BTreeMap, HashMap, VecDeque};

use snapshot::{Action, Block, BlockState, Entry, FrameId, Segment, Snapshot, StackId, Trace};

use crate::event::{Event, EventKind};
use crate::stacks::Symbol;

/// A ring that keeps the newest `max` items, like PyTorch's trace buffer.
#[derive(Clone, Debug)]
pub struct Ring<T> {
    items: VecDeque<T>,
    max: usize,
    dropped: u64,
}

impl<T> Ring<T> {
    /// A ring of at most `max` items (at least 1).
    pub fn new(max: usize) -> Self {
        Ring { items: VecDeque::new(), max: max.max(1), dropped: 0 }
    }
    /// Adds an item, dropping the oldest when full.
    pub fn push(&mut self, item: T) {
        if self.items.len() == self.max {
            self.items.pop_front();
            self.dropped += 1;
        }
        self.items.push_back(item);
    }
    /// The items, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.items.iter()
    }
    /// Number of items held.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// Items dropped to stay within the bound.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LiveKind {
    Segment,
    Pool,
    Mapped,
}

#[derive(Clone, Debug)]
struct Live {
    size: u64,
    kind: LiveKind,
    stream: u64,
    stack: Option<u32>,
}

/// Records events and turns them into snapshots.
#[derive(Clone, Debug)]
pub struct Recorder {
    max_entries: usize,
    traces: Vec<Ring<Event>>,
    /// (device, address) -> what is alive there.
    live: BTreeMap<(usize, u64), Live>,
    stacks: Vec<Vec<usize>>,
    stack_ids: HashMap<Vec<usize>, u32>,
}

impl Recorder {
    /// A recorder keeping the newest `max_entries` events per device.
    pub fn new(max_entries: usize) -> Self {
        Recorder {
            max_entries,
            traces: Vec::new(),
            live: BTreeMap::new(),
            stacks: Vec::new(),
            stack_ids: HashMap::new(),
        }
    }

    /// Interns a stack of instruction pointers (innermost first).
    pub fn intern_stack(&mut self, ips: &[usize]) -> u32 {
        if let Some(&id) = self.stack_ids.get(ips) {
            return id;
        }
        let id = self.stacks.len() as u32;
        self.stacks.push(ips.to_vec());
        self.stack_ids.insert(ips.to_vec(), id);
        id
    }

    /// Events dropped from the ring of `device`.
    pub fn dropped(&self, device: usize) -> u64 {
        self.traces.get(device).map_or(0, Ring::dropped)
    }

    /// Records an event: the table of live memory always follows, the ring keeps the newest.
    /// Freeing address 0 is a no-op the driver accepts (cuBLAS does it when it creates a
    /// handle) and is not recorded.
    pub fn record(&mut self, mut e: Event) {
        if matches!(e.kind, EventKind::SegmentFree | EventKind::PoolFree) && e.addr == 0 {
            return;
        }
        let key = (e.device, e.addr);
        match e.kind {
            EventKind::SegmentAlloc | EventKind::PoolAlloc | EventKind::Map => {
                let kind = match e.kind {
                    EventKind::SegmentAlloc => LiveKind::Segment,
                    EventKind::PoolAlloc => LiveKind::Pool,
                    _ => LiveKind::Mapped,
                };
                self.live.insert(key, Live { size: e.size, kind, stream: e.stream, stack: e.stack });
            }
            EventKind::SegmentFree | EventKind::PoolFree => {
                if let Some(l) = self.live.remove(&key) {
                    if e.size == 0 {
                        e.size = l.size;
                    }
                    if e.stack.is_none() {
                        e.stack = l.stack;
                    }
                }
            }
            EventKind::Unmap => self.unmap(e.device, e.addr, e.size),
            EventKind::Oom => {}
        }
        while self.traces.len() <= e.device {
            self.traces.push(Ring::new(self.max_entries));
        }
        self.traces[e.device].push(e);
    }

    /// Removes `addr..addr+size` from the mapped ranges of `device`, keeping what is outside.
    fn unmap(&mut self, device: usize, addr: u64, size: u64) {
        let end = addr.saturating_add(size);
        let hit: Vec<(u64, Live)> = self
            .live
            .range((device, 0)..(device, end))
            .filter(|(&(_, a), l)| l.kind == LiveKind::Mapped && a + l.size > addr)
            .map(|(&(_, a), l)| (a, l.clone()))
            .collect();
        for (a, l) in hit {
            self.live.remove(&(device, a));
            let l_end = a + l.size;
            if a < addr {
                self.live.insert((device, a), Live { size: addr - a, ..l.clone() });
            }
            if l_end > end {
                self.live.insert((device, end), Live { size: l_end - end, ..l });
            }
        }
    }

    /// The snapshot of what is recorded: segments for every live allocation (so allocations
    /// older than the ring still show), and the ring as each device's trace, where a segment
    /// allocation or free is two entries (the segment and its one block). `symbolize`
    /// names an instruction pointer (`None`: unknown).
    pub fn to_snapshot(&self, symbolize: &mut dyn FnMut(usize) -> Option<Symbol>) -> Snapshot {
        let mut snap = Snapshot::default();
        let mut frame_of: HashMap<usize, FrameId> = HashMap::new();
        let mut stack_of: HashMap<u32, StackId> = HashMap::new();
        let mut stack = |snap: &mut Snapshot, id: Option<u32>| -> StackId {
            let id = id.unwrap_or(u32::MAX);
            if let Some(&s) = stack_of.get(&id) {
                return s;
            }
            let ips = self.stacks.get(id as usize).map_or(&[][..], Vec::as_slice);
            let mut frames = Vec::with_capacity(ips.len());
            for &ip in ips {
                let f = *frame_of.entry(ip).or_insert_with(|| {
                    let sym =
                        symbolize(ip).unwrap_or(Symbol { name: format!("0x{ip:x}"), filename: "??".into(), line: 0 });
                    snap.add_frame(&sym.name, &sym.filename, i64::from(sym.line))
                });
                frames.push(f);
            }
            let s = snap.add_stack(&frames);
            stack_of.insert(id, s);
            s
        };
        let large = snap.strings.intern("large");
        let empty = stack(&mut snap, None);
        for (&(device, address), l) in &self.live {
            let frames = stack(&mut snap, l.stack);
            snap.segments.push(Segment {
                device: device as i64,
                address,
                total_size: l.size,
                allocated_size: Some(l.size),
                active_size: Some(l.size),
                requested_size: Some(l.size),
                stream: l.stream as i64,
                segment_type: Some(large),
                segment_pool_id: Some((0, 0)),
                is_expandable: Some(l.kind == LiveKind::Mapped),
                frames: Some(if l.kind == LiveKind::Pool { empty } else { frames }),
                blocks: vec![Block {
                    address: Some(address),
                    size: l.size,
                    requested_size: Some(l.size),
                    state: BlockState::ActiveAllocated,
                    frames: Some(frames),
                    history: None,
                    extras: Vec::new(),
                }],
                extras: Vec::new(),
            });
        }
        let mut traces = Vec::with_capacity(self.traces.len());
        for ring in &self.traces {
            let mut t = Trace::default();
            for e in ring.iter() {
                let mut entry = Entry::new(e.kind.action(), e.addr, e.size, e.stream as i64);
                entry.time_us = Some(e.time_us);
                entry.frames = Some(stack(&mut snap, e.stack));
                if e.kind.action() == Action::Oom {
                    entry.addr = None;
                    entry.device_free = Some(e.device_free.unwrap_or(0));
                }
                // A driver allocation is both a segment and the one block in it, as PyTorch
                // writes a new segment: `segment_alloc` then `alloc`, `free_completed` then
                // `segment_free`. So the active memory timeline (PyTorch's and ours) shows
                // when each allocation lived, not only the segment timeline.
                match e.kind {
                    EventKind::SegmentAlloc => {
                        t.push(&entry);
                        entry.action = Action::Alloc;
                        t.push(&entry);
                    }
                    EventKind::SegmentFree => {
                        entry.action = Action::FreeCompleted;
                        t.push(&entry);
                        entry.action = Action::SegmentFree;
                        t.push(&entry);
                    }
                    _ => t.push(&entry),
                }
            }
            traces.push(t);
        }
        snap.device_traces = Some(traces);
        snap.external_annotations = Some(Vec::new());
        snap
    }
}
