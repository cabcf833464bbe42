//! What a file says of its own recording: whether the trace's ring buffer overflowed (recent
//! PyTorch writes `trace_alloc_overflowed` and `trace_alloc_max_entries` in
//! `allocator_settings`, newer builds one value per device), and why an allocation has no
//! stack, in one line, where the file tells which.

use serde::{Deserialize, Serialize};

use crate::model::Snapshot;
use crate::timeline::{Element, Origin, Timeline};
use crate::value::Value;

/// What the file says of one device's recording; `None` where it does not say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recording {
    /// The ring buffer overflowed: the trace keeps only its last `max_entries` events.
    pub overflowed: Option<bool>,
    /// The ring buffer's size (`max_entries` of `_record_memory_history`).
    pub max_entries: Option<u64>,
}

/// What `snap` says of `device`'s recording.
pub fn recording(snap: &Snapshot, device: usize) -> Recording {
    let setting = |key: &str| crate::settings::setting(snap, key, device);
    Recording {
        overflowed: setting("trace_alloc_overflowed").and_then(|v| match v {
            Value::Bool(b) => Some(*b),
            Value::Int(i) => Some(*i != 0),
            _ => None,
        }),
        max_entries: setting("trace_alloc_max_entries").and_then(|v| match v {
            Value::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }),
    }
}

/// Why `e` (an element of `tl`) has no stack, in one line; `None` when it has one or the file
/// does not tell. PyTorch's viewer lists five possible causes for every such block; the
/// element and the file usually say which one it is.
pub fn no_stack_cause(snap: &Snapshot, tl: &Timeline, e: &Element) -> Option<String> {
    let frames = e.stack.map(|s| snap.stacks.get(s).len());
    if frames.is_some_and(|n| n > 0) {
        return None;
    }
    let rec = recording(snap, tl.device());
    let kept = match rec.max_entries {
        Some(n) => format!("the recording kept only the last {n} events"),
        None => "the recording kept only its last events".into(),
    };
    Some(match e.origin {
        Origin::Snapshot if rec.overflowed == Some(true) => format!(
            "allocated before the trace's first event ({kept}): reconstructed from the final segments, whose block has no stack"
        ),
        Origin::Snapshot => {
            "allocated before recording began: reconstructed from the final segments, which keep no stack for it".into()
        }
        Origin::UnmatchedFree => {
            let free = e.free_entry.and_then(|i| snap.trace(tl.device()).frames(i as usize));
            let free_has = free.is_some_and(|s| !snap.stacks.get(s).is_empty());
            let then = if free_has { "the stack shown is its free's" } else { "and its free has no stack" };
            if rec.overflowed == Some(true) {
                format!("its allocation was evicted from the ring buffer ({kept}); {then}")
            } else {
                format!("allocated before recording began, so its allocation has no stack; {then}")
            }
        }
        Origin::Traced if frames.is_none() => {
            "the trace keeps no stacks: recorded with context=None or \"state\" (_record_memory_history's context)".into()
        }
        Origin::Traced => {
            "no Python frames: allocated on a thread without Python (autograd's backward threads); stacks=\"all\" records C++ frames"
                .into()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::with_settings;

    #[test]
    fn settings_once_or_per_device() {
        let s = with_settings(vec![
            ("trace_alloc_overflowed", Value::Bool(true)),
            ("trace_alloc_max_entries", Value::Int(1000)),
        ]);
        assert_eq!(recording(&s, 3), Recording { overflowed: Some(true), max_entries: Some(1000) });
        let s = with_settings(vec![
            ("trace_alloc_overflowed", Value::List(vec![Value::Bool(false), Value::Bool(true)])),
            ("trace_alloc_max_entries", Value::Dict(vec![(Value::Str("1".into()), Value::Int(7))])),
        ]);
        assert_eq!(recording(&s, 0), Recording { overflowed: Some(false), max_entries: None });
        assert_eq!(recording(&s, 1), Recording { overflowed: Some(true), max_entries: Some(7) });
        assert_eq!(recording(&Snapshot::default(), 0), Recording::default());
    }
}
