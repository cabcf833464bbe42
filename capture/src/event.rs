//! What the recorder records.

/// The kind of a memory event, in PyTorch's trace vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// `cuMemAlloc*` / `cudaMalloc`: a new segment (`segment_alloc`).
    SegmentAlloc,
    /// `cuMemFree*` / `cudaFree` of a segment (`segment_free`).
    SegmentFree,
    /// `cuMemMap`: physical memory mapped into a virtual range (`segment_map`).
    Map,
    /// `cuMemUnmap` (`segment_unmap`).
    Unmap,
    /// `cuMemAllocAsync` / `cuMemAllocFromPoolAsync`: a stream-ordered pool allocation (`alloc`).
    PoolAlloc,
    /// `cuMemFreeAsync` (`free_completed`).
    PoolFree,
    /// An allocation failed with out-of-memory (`oom`).
    Oom,
}

impl EventKind {
    /// The PyTorch action this event becomes.
    pub fn action(self) -> snapshot::Action {
        match self {
            EventKind::SegmentAlloc => snapshot::Action::SegmentAlloc,
            EventKind::SegmentFree => snapshot::Action::SegmentFree,
            EventKind::Map => snapshot::Action::SegmentMap,
            EventKind::Unmap => snapshot::Action::SegmentUnmap,
            EventKind::PoolAlloc => snapshot::Action::Alloc,
            EventKind::PoolFree => snapshot::Action::FreeCompleted,
            EventKind::Oom => snapshot::Action::Oom,
        }
    }
}

/// One memory event of one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// Device ordinal.
    pub device: usize,
    /// Device address (0 for `Oom`).
    pub addr: u64,
    /// Bytes (0 for a free: the recorder knows the size of what it frees).
    pub size: u64,
    /// Stream handle (0: the legacy default stream).
    pub stream: u64,
    /// Microseconds since the Unix epoch.
    pub time_us: i64,
    /// Host stack, as an id from [`crate::Recorder::intern_stack`].
    pub stack: Option<u32>,
    /// Free device memory reported at an out-of-memory failure.
    pub device_free: Option<u64>,
    /// `cuMemAllocManaged` memory.
    pub managed: bool,
}

impl Event {
    /// An event with no stack, stream 0 and the current time.
    pub fn new(kind: EventKind, device: usize, addr: u64, size: u64) -> Self {
        Event { kind, device, addr, size, stream: 0, time_us: now_us(), stack: None, device_free: None, managed: false }
    }
}

/// Microseconds since the Unix epoch.
pub fn now_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}
