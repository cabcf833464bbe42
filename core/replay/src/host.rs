//! Pinned host memory (`_record_memory_history(record_host=True)`, PyTorch 2.14+):
//! `host_segments` (shaped like `segments`, device -1) and `host_traces` (one trace, shaped
//! like a device's). Read as a snapshot of its own whose device 0 is the host, every
//! per-device analysis applies unchanged: timelines, allocator state, statistics, events,
//! the flame graph. Categories and the doctor stay per GPU.

use crate::model::Snapshot;

/// The device number PyTorch writes on host segments, and the host's in statistics.
pub const HOST_DEVICE: i64 = -1;

/// Whether the snapshot recorded pinned host memory.
pub fn has_host(snap: &Snapshot) -> bool {
    snap.host_segments.as_ref().is_some_and(|s| !s.is_empty())
        || snap.host_traces.as_ref().is_some_and(|t| !t.is_empty())
}

/// The host's memory as a snapshot whose device 0 is the host (its strings, frames and
/// stacks copied: made once, for files that have host memory); `None` without any.
pub fn as_snapshot(snap: &Snapshot) -> Option<Snapshot> {
    if !has_host(snap) {
        return None;
    }
    let mut segments = snap.host_segments.clone().unwrap_or_default();
    for s in &mut segments {
        s.device = 0;
    }
    Some(Snapshot {
        strings: snap.strings.clone(),
        frames: snap.frames.clone(),
        stacks: snap.stacks.clone(),
        root: snap.root,
        segments,
        device_traces: Some(vec![snap.host_traces.clone().unwrap_or_default()]),
        allocator_settings: None,
        external_annotations: None,
        host_segments: None,
        host_traces: None,
        extras: Vec::new(),
    })
}
