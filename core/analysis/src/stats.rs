//! The statistics of `_memory_viz.py stats` (segsum) and a per-device summary.

use serde::{Deserialize, Serialize};

use crate::model::{Block, BlockState, DeviceInfo, Snapshot};
use crate::pools::{InclPools, PrivatePool};
use crate::timeline::{Timeline, TimelineKind};

/// Bytes in words (`1.5GiB`), where the front ends have always found it.
pub use crate::units::format_size;

/// Whole-snapshot figures, as `_memory_viz.py stats` computes them, plus one entry per device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of segments (all devices).
    pub segments: u64,
    /// Σ `total_size` of all segments.
    pub total_reserved: u64,
    /// Σ requested bytes of `active_allocated` blocks.
    pub total_allocated: u64,
    /// Σ (size − requested) of `active_allocated` blocks (rounding).
    pub free_internal: i64,
    /// Σ size of every other block (`inactive`, and `active_pending_free` as segsum counts it).
    pub free_external: u64,
    /// One entry per device with trace entries or segments.
    pub devices: Vec<DeviceSummary>,
    /// Pinned host memory, when recorded (`record_host=True`): the fields of a device's,
    /// `device` -1 ([`crate::host`]).
    #[serde(default)]
    pub host: Option<Box<DeviceSummary>>,
    /// What the file is a window of, when `memscape slice` cut it ([`crate::slice`]).
    #[serde(default)]
    pub window: Option<crate::slice::WindowInfo>,
    /// What the file was when it was read from a `torch.profiler` file.
    #[serde(default)]
    pub profiler: Option<memscape_format::ProfilerInfo>,
    /// What the prediction is, when `memscape predict` made the file rather than PyTorch.
    #[serde(default)]
    pub prediction: Option<memscape_format::PredictionInfo>,
}

/// Figures for one device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSummary {
    /// Device ordinal (-1: the host's pinned memory).
    pub device: i64,
    /// Entries in its trace.
    pub trace_entries: u64,
    /// Σ `total_size` of its segments.
    pub reserved_bytes: u64,
    /// Of those, bytes of segments outside PyTorch's caching allocator (added from a driver
    /// capture by [`crate::merge::merge_capture`]; 0 in PyTorch's own snapshots).
    #[serde(default)]
    pub outside_allocator_bytes: u64,
    /// The Active Memory Timeline.
    pub timeline: TimelineSummary,
    /// The reserved-memory (segment) timeline.
    pub segment_timeline: TimelineSummary,
    /// Name and memory of the device, when the snapshot says (`memscape capture` does).
    pub gpu: Option<DeviceInfo>,
    /// The trace's ring buffer overflowed, so its first events were lost (`None`: the file
    /// does not say; `allocator_settings.trace_alloc_overflowed`).
    #[serde(default)]
    pub history_overflowed: Option<bool>,
    /// The ring buffer's size (`allocator_settings.trace_alloc_max_entries`), when written.
    #[serde(default)]
    pub history_max_entries: Option<u64>,
    /// Its private pools (CUDA graphs, `MemPool`), each per stream ([`crate::pools`]).
    #[serde(default)]
    pub private_pools: Vec<PrivatePool>,
    /// Allocated memory with each private pool counted as its envelope (PyTorch's
    /// "Allocated Memory (incl. Private Pools)"); the timeline's figures without pools.
    #[serde(default)]
    pub timeline_incl_private_pools: InclPools,
}

/// Figures of one timeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineSummary {
    /// Distinct allocation records.
    pub elements: u64,
    /// Highest total of live bytes.
    pub peak_bytes: u64,
    /// Live bytes after the last event.
    pub final_bytes: u64,
    /// Elements alive before the first event (unmatched frees and snapshot-only blocks).
    pub initially_allocated: u64,
    /// Frees whose allocation was not recorded.
    pub unmatched_frees: u64,
    /// Allocations known only from the final snapshot.
    pub snapshot_only: u64,
    /// Alloc and free steps.
    pub actions: u64,
}

impl TimelineSummary {
    /// Summarises a laid-out timeline.
    pub fn of(t: &Timeline) -> Self {
        TimelineSummary {
            elements: t.elements().len() as u64,
            peak_bytes: t.peak_bytes(),
            final_bytes: t.final_bytes(),
            initially_allocated: t.n_initial() as u64,
            unmatched_frees: t.n_unmatched_frees() as u64,
            snapshot_only: t.n_snapshot_only() as u64,
            actions: t.n_actions() as u64,
        }
    }
}

/// Bytes segsum counts as allocated for an `active_allocated` block: `requested_size` for
/// blocks with `frames`; for 2.0 blocks the first history record's `real_size`, else
/// `requested_size`, else `size`.
pub fn segsum_allocated(b: &Block) -> u64 {
    if b.frames.is_some() {
        return b.requested_size.unwrap_or(b.size);
    }
    match b.history.as_ref() {
        Some(h) => h.first().map_or(b.requested_size.unwrap_or(b.size), |h| h.real_size),
        None => b.requested_size.unwrap_or(b.size),
    }
}

/// Computes the summary. Timelines are laid out for every device.
pub fn summary(snap: &Snapshot) -> Summary {
    summary_with(snap, |_| {})
}

/// Computes the summary and hands each device's blocks timeline to `also`, for analyses that
/// need the same layout (the command line's categories; the viewer keeps the one it shows
/// first instead of laying it out again).
pub fn summary_with(snap: &Snapshot, mut also: impl FnMut(Timeline)) -> Summary {
    let mut s = Summary {
        segments: snap.segments.len() as u64,
        total_reserved: 0,
        total_allocated: 0,
        free_internal: 0,
        free_external: 0,
        devices: Vec::new(),
        host: host_summary(snap).map(Box::new),
        window: crate::slice::WindowInfo::of(snap),
        profiler: snap.profiler_info(),
        prediction: snap.prediction_info(),
    };
    // Sizes are the file's: a hostile one's sums saturate instead of overflowing (the rounding,
    // which can be negative, is summed exactly and saturates once).
    let mut internal = 0i128;
    for seg in &snap.segments {
        s.total_reserved = s.total_reserved.saturating_add(seg.total_size);
        for b in &seg.blocks {
            if b.state == BlockState::ActiveAllocated {
                let a = segsum_allocated(b);
                s.total_allocated = s.total_allocated.saturating_add(a);
                internal += i128::from(b.size) - i128::from(a);
            } else {
                s.free_external = s.free_external.saturating_add(b.size);
            }
        }
    }
    s.free_internal = i64::try_from(internal).unwrap_or(if internal > 0 { i64::MAX } else { i64::MIN });
    let gpus = snap.device_info();
    let per_device = snap.segments_by_device();
    for d in snap.devices() {
        let blocks = Timeline::build(snap, d, TimelineKind::Blocks);
        let segs = Timeline::build(snap, d, TimelineKind::Segments);
        let recording = crate::history::recording(snap, d);
        let (private_pools, incl) = if crate::pools::has_private(snap, d) {
            let p = crate::pools::pools(snap, &blocks);
            let incl = p.incl();
            (p.pools, incl)
        } else {
            (Vec::new(), InclPools { peak_bytes: blocks.peak_bytes(), final_bytes: blocks.final_bytes() })
        };
        s.devices.push(DeviceSummary {
            device: d as i64,
            trace_entries: snap.trace(d).len() as u64,
            reserved_bytes: per_device.get(&(d as i64)).map_or(0, |s| s.1),
            outside_allocator_bytes: snap
                .segments
                .iter()
                .filter(|s| s.device == d as i64 && crate::merge::is_outside(snap, s))
                .map(|s| s.total_size)
                .fold(0, u64::saturating_add),
            timeline: TimelineSummary::of(&blocks),
            segment_timeline: TimelineSummary::of(&segs),
            gpu: gpus.iter().find(|g| g.device == d as i64).cloned(),
            history_overflowed: recording.overflowed,
            history_max_entries: recording.max_entries,
            private_pools,
            timeline_incl_private_pools: incl,
        });
        also(blocks);
    }
    s
}

/// The host's figures, with the fields of a device's (`device` is
/// [`HOST_DEVICE`](crate::host::HOST_DEVICE)): the host's memory read as a snapshot of its own
/// ([`crate::host::as_snapshot`]).
pub fn host_summary(snap: &Snapshot) -> Option<DeviceSummary> {
    let host = crate::host::as_snapshot(snap)?;
    let mut d = summary(&host).devices.into_iter().next()?;
    d.device = crate::host::HOST_DEVICE;
    Some(d)
}
