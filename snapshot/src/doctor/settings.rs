//! The allocator settings in force, from the snapshot's `allocator_settings` (PyTorch 2.1+)
//! and what the segments show (an expandable segment means `expandable_segments:True`).

use serde::{Deserialize, Serialize};

use crate::model::Snapshot;
use crate::value::Value;

/// The caching allocator's settings that decide how memory is split and reused.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// True when the snapshot records `allocator_settings`.
    pub recorded: bool,
    /// `PYTORCH_CUDA_ALLOC_CONF` as the program saw it.
    pub conf: Option<String>,
    /// `expandable_segments` (or `Some(true)` when a segment is expandable).
    pub expandable_segments: Option<bool>,
    /// `max_split_size_mb`, in bytes (`None`: unlimited, the default).
    pub max_split_size_bytes: Option<u64>,
    /// `garbage_collection_threshold` (0: off).
    pub garbage_collection_threshold: Option<f64>,
    /// True when some `roundup_power2_divisions` is set (block sizes are then rounded more
    /// than the doctor assumes).
    pub roundup_power2_divisions: bool,
}

impl Settings {
    /// True when expandable segments are known to be on.
    pub fn expandable(&self) -> bool {
        self.expandable_segments == Some(true)
    }
}

fn int(v: Option<&Value>) -> Option<i128> {
    match v {
        Some(Value::Int(i)) => Some(*i),
        Some(Value::Bool(b)) => Some(i128::from(*b)),
        _ => None,
    }
}

/// The settings of `device` in `snap`.
pub fn settings(snap: &Snapshot, device: usize) -> Settings {
    let mut s = Settings::default();
    if let Some(v) = &snap.allocator_settings {
        s.recorded = matches!(v, Value::Dict(_));
        s.conf = match v.get("PYTORCH_CUDA_ALLOC_CONF") {
            Some(Value::Str(c)) => Some(c.to_string()),
            _ => None,
        };
        s.expandable_segments = int(v.get("expandable_segments")).map(|i| i != 0);
        // PyTorch writes SIZE_MAX as -1 when unset.
        s.max_split_size_bytes =
            int(v.get("max_split_size")).filter(|&m| m > 0 && m < i128::from(u64::MAX)).map(|m| m as u64);
        s.garbage_collection_threshold = match v.get("garbage_collection_threshold") {
            Some(Value::Float(f)) => Some(*f),
            other => int(other).map(|i| i as f64),
        };
        s.roundup_power2_divisions = match v.get("roundup_power2_divisions") {
            Some(Value::Dict(items)) => items.iter().any(|(_, d)| int(Some(d)).is_some_and(|d| d > 0)),
            Some(Value::List(items)) => items.iter().any(|d| int(Some(d)).is_some_and(|d| d > 0)),
            other => int(other).is_some_and(|d| d > 0),
        };
    }
    if snap.segments.iter().any(|g| g.device == device as i64 && g.is_expandable == Some(true)) {
        s.expandable_segments = Some(true);
    }
    s
}
