//! What a file read from `torch.profiler` was ([`ProfilerInfo`]): kept in the model under
//! [`PROFILER_KEY`](crate::model::PROFILER_KEY), read back by `Snapshot::profiler_info`. A leaf:
//! the model and the reader both use it.

use crate::value::Value;

/// What a profiler file was, kept in the model under
/// [`PROFILER_KEY`](crate::model::PROFILER_KEY) so every view can say it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProfilerInfo {
    /// `torch.profiler trace`, `torch.profiler memory timeline (raw)`, ...
    pub source: String,
    /// The name of each device index: `cuda:0`, `cpu`.
    pub devices: Vec<String>,
    /// Whether the memory events carry `Addr` (allocations paired by address).
    pub addresses: bool,
    /// Whether the trace says some memory was reserved (`Total Reserved` above 0).
    pub reserved: bool,
    /// The rank of a distributed run (`distributedInfo.rank`).
    pub rank: Option<i64>,
    /// Memory events read.
    pub memory_events: u64,
}

impl ProfilerInfo {
    /// As the model's top-level value.
    pub fn to_value(&self) -> Value {
        let s = |v: &str| Value::Str(v.into());
        let mut items = vec![
            (s("source"), s(&self.source)),
            (s("devices"), Value::List(self.devices.iter().map(|d| s(d)).collect())),
            (s("addresses"), Value::Bool(self.addresses)),
            (s("reserved"), Value::Bool(self.reserved)),
            (s("memory_events"), Value::Int(self.memory_events.into())),
        ];
        if let Some(r) = self.rank {
            items.push((s("rank"), Value::Int(r.into())));
        }
        Value::Dict(items)
    }

    /// Read back from the model's top-level value (a snapshot written by `memscape convert`
    /// keeps it).
    pub fn from_value(v: &Value) -> Option<ProfilerInfo> {
        let source = match v.get("source")? {
            Value::Str(s) if KNOWN_SOURCES.contains(&&**s) => s.to_string(),
            _ => return None,
        };
        let devices = match v.get("devices") {
            Some(Value::List(l)) => {
                l.iter().filter_map(|d| if let Value::Str(s) = d { Some(s.to_string()) } else { None }).collect()
            }
            _ => Vec::new(),
        };
        let int = |k: &str| match v.get(k) {
            Some(Value::Int(i)) => i64::try_from(*i).ok(),
            _ => None,
        };
        Some(ProfilerInfo {
            source,
            devices,
            addresses: matches!(v.get("addresses"), Some(Value::Bool(true))),
            reserved: matches!(v.get("reserved"), Some(Value::Bool(true))),
            rank: int("rank"),
            memory_events: int("memory_events").unwrap_or(0).max(0) as u64,
        })
    }
}

/// What [`ProfilerInfo::source`] says.
pub(crate) const TRACE: &str = "torch.profiler trace";
pub(crate) const RAW_TIMELINE: &str = "torch.profiler memory timeline (raw)";
pub(crate) const COALESCED_TIMELINE: &str = "torch.profiler memory timeline (per category totals)";
const KNOWN_SOURCES: [&str; 3] = [TRACE, RAW_TIMELINE, COALESCED_TIMELINE];

impl ProfilerInfo {
    /// What the file was and what that means for the views, in a sentence (the page's notice,
    /// `memscape stats`).
    pub fn describe(&self) -> String {
        let reserved = if self.reserved {
            "; the trace's Total Reserved is drawn as reserved memory, but a trace does not say where the allocator's segments are"
        } else {
            ""
        };
        match self.source.as_str() {
            TRACE if self.addresses => format!(
                "a torch.profiler trace: {} memory events, allocations paired by address, each with the operators and Python functions around it as its frames{reserved}",
                self.memory_events
            ),
            TRACE => format!(
                "a torch.profiler trace without addresses (PyTorch before 1.10): {} memory events; the totals curve is exact, but which allocation a free ends is a guess (the latest of its size){reserved}",
                self.memory_events
            ),
            RAW_TIMELINE => "a torch.profiler memory timeline (raw): PyTorch's categories on every allocation; it names no tensors, so a free ends the latest allocation of its size and category".to_string(),
            _ => "a torch.profiler memory timeline (per category totals): PyTorch's categories over time; the allocations drawn are made up from the totals".to_string(),
        }
    }
}
