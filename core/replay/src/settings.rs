//! The allocator settings in force, from the snapshot's `allocator_settings` (PyTorch 2.1+)
//! and what the segments show (an expandable segment means `expandable_segments:True`). The
//! one reader of `allocator_settings` ([`setting`]): a value written once for all devices,
//! or per device (newer builds write some as a list by ordinal or a dict keyed by it).

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
    /// The divisions of each power-of-two interval of sizes from 1 MiB (`[1 MiB, 2 MiB)`,
    /// `[2 MiB, 4 MiB)`, ..., the 16th from 32 GiB up), as `roundup_power2_divisions` sets them
    /// (0 or 1: no rounding beyond 512 bytes); empty where the file records none.
    /// (No `skip_serializing_if`: the page's worker speaks postcard, which needs every field.)
    #[serde(default)]
    pub roundup_divisions: Vec<u64>,
}

impl Settings {
    /// True when expandable segments are known to be on.
    pub fn expandable(&self) -> bool {
        self.expandable_segments == Some(true)
    }
}

/// One device's value of the setting `key`: the value written once for all devices (a bool,
/// an int, a string), or its entry in a per-device list (by ordinal) or dict (keyed by the
/// ordinal as an int or a string). `None` where the file does not say.
pub fn setting<'a>(snap: &'a Snapshot, key: &str, device: usize) -> Option<&'a Value> {
    per_device(snap.allocator_settings.as_ref()?.get(key)?, device)
}

fn per_device(v: &Value, device: usize) -> Option<&Value> {
    match v {
        Value::List(items) | Value::Tuple(items) => items.get(device),
        Value::Dict(items) => items.iter().find_map(|(k, x)| {
            let ordinal = match k {
                Value::Int(i) => usize::try_from(*i).ok(),
                Value::Str(s) => s.trim().parse().ok(),
                _ => None,
            };
            (ordinal == Some(device)).then_some(x)
        }),
        other => Some(other),
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
        let one = |key: &str| setting(snap, key, device);
        s.recorded = matches!(v, Value::Dict(_));
        s.conf = match one("PYTORCH_CUDA_ALLOC_CONF") {
            Some(Value::Str(c)) => Some(c.to_string()),
            _ => None,
        };
        s.expandable_segments = int(one("expandable_segments")).map(|i| i != 0);
        // PyTorch writes SIZE_MAX as -1 when unset.
        s.max_split_size_bytes =
            int(one("max_split_size")).filter(|&m| m > 0 && m < i128::from(u64::MAX)).map(|m| m as u64);
        s.garbage_collection_threshold = match one("garbage_collection_threshold") {
            Some(Value::Float(f)) => Some(*f),
            other => int(other).map(|i| i as f64),
        };
        // A dict of divisions by size in MiB (PyTorch writes the keys "1", "2", ..., "32768"),
        // a list by interval, or one value for every interval: the same for all devices.
        s.roundup_divisions = divisions(v.get("roundup_power2_divisions"));
        s.roundup_power2_divisions = s.roundup_divisions.iter().any(|&d| d > 0);
    }
    if snap.segments.iter().any(|g| g.device == device as i64 && g.is_expandable == Some(true)) {
        s.expandable_segments = Some(true);
    }
    s
}

/// How many power-of-two intervals `roundup_power2_divisions` sets (1 MiB to 32 GiB and up:
/// `kRoundUpPowerOfTwoIntervals`).
pub const INTERVALS: usize = 16;

/// The divisions of each interval, from the recorded `roundup_power2_divisions`.
fn divisions(v: Option<&Value>) -> Vec<u64> {
    let value = |d: &Value| int(Some(d)).map_or(0, |d| d.clamp(0, 1 << 20) as u64);
    match v {
        Some(Value::Dict(items)) => {
            let mut out = vec![0; INTERVALS];
            for (k, d) in items {
                let mib = match k {
                    Value::Str(s) => s.trim().parse::<u64>().ok(),
                    Value::Int(i) => u64::try_from(*i).ok(),
                    _ => None,
                };
                if let Some(mib) = mib.filter(|m| *m > 0) {
                    out[(mib.ilog2() as usize).min(INTERVALS - 1)] = value(d);
                }
            }
            out
        }
        Some(Value::List(items)) => {
            let mut out: Vec<u64> = items.iter().take(INTERVALS).map(value).collect();
            out.resize(INTERVALS, 0);
            out
        }
        Some(d) if int(Some(d)).is_some() => vec![value(d); INTERVALS],
        _ => Vec::new(),
    }
}

/// A snapshot whose `allocator_settings` are `items` (for tests of what reads them).
#[cfg(test)]
pub(crate) fn with_settings(items: Vec<(&str, Value)>) -> Snapshot {
    let items = items.into_iter().map(|(k, v)| (Value::Str(k.into()), v)).collect();
    Snapshot { allocator_settings: Some(Value::Dict(items)), ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_read_once_for_all_devices_or_per_device() {
        let s = with_settings(vec![
            ("expandable_segments", Value::List(vec![Value::Bool(false), Value::Bool(true)])),
            (
                "max_split_size",
                Value::Dict(vec![(Value::Str("0".into()), Value::Int(-1)), (Value::Int(1), Value::Int(512 << 20))]),
            ),
            ("garbage_collection_threshold", Value::Float(0.6)),
            ("roundup_power2_divisions", Value::Dict(vec![(Value::Str("1".into()), Value::Int(4))])),
        ]);
        let (zero, one) = (settings(&s, 0), settings(&s, 1));
        assert_eq!((zero.expandable_segments, zero.max_split_size_bytes), (Some(false), None));
        assert_eq!((one.expandable_segments, one.max_split_size_bytes), (Some(true), Some(512 << 20)));
        assert_eq!((zero.garbage_collection_threshold, one.garbage_collection_threshold), (Some(0.6), Some(0.6)));
        // Keyed by sizes, not devices: the same for every device.
        assert!(zero.roundup_power2_divisions && one.roundup_power2_divisions);
        // "1" is the interval of 1 MiB; the others are 0 (unset).
        assert_eq!(zero.roundup_divisions[..3], [4, 0, 0]);
        assert_eq!(setting(&s, "expandable_segments", 2), None, "a device the list does not reach");
    }
}
