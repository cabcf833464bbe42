//! `torch.profiler`'s files, read as they arrive: Chrome traces with memory events
//! (`prof.export_chrome_trace`, `tensorboard_trace_handler`; Kineto's JSON, optionally
//! gzipped) and the memory timelines of `prof.export_memory_timeline` (raw and coalesced).
//!
//! Module map: `scan` splits the JSON into pieces (the root's members, each event) without
//! building it; `event` parses one event's fields; `build` turns a trace's events into the
//! model; `timeline` does the same for a memory timeline. What the file was is said under
//! [`PROFILER_KEY`](crate::model::PROFILER_KEY) ([`ProfilerInfo`]).

mod build;
mod event;
mod scan;
mod timeline;

use crate::error::{ReadError, Warning};
use crate::model::Snapshot;
use crate::value::Value;

/// No piece of a trace (one event, `deviceProperties`, one list of a coalesced timeline) may
/// be longer than this.
const PIECE_CAP: usize = 256 << 20;

/// What a JSON document is, from its first key or element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A Chrome trace: an object with `traceEvents`, or an array of events.
    Trace,
    /// `export_memory_timeline`'s raw rows or coalesced `[times, sizes]`.
    Timeline,
}

/// The keys of a snapshot's root dict: a JSON object starting with one is a snapshot.
const SNAPSHOT_KEYS: [&str; 7] = [
    "segments",
    "device_traces",
    "allocator_settings",
    "external_annotations",
    "host_segments",
    "host_traces",
    "memscape_",
];

/// Decides from the first bytes of a JSON document (after leading whitespace) whether it is a
/// profiler file; `Ok(None)` for a snapshot, `Err(())` while more bytes are needed.
pub(crate) fn classify(b: &[u8], at_end: bool) -> Result<Option<Kind>, ()> {
    let mut it = b.iter().copied().enumerate().filter(|(_, c)| !c.is_ascii_whitespace());
    let more = if at_end { Ok(None) } else { Err(()) };
    let Some((_, root)) = it.next() else { return more };
    let Some((i, next)) = it.next() else { return more };
    match (root, next) {
        (b'[', b'[') => Ok(Some(Kind::Timeline)),
        (b'{', b'"') => match first_key(&b[i..]) {
            Some(k) if SNAPSHOT_KEYS.iter().any(|s| k.starts_with(s)) => Ok(None),
            Some(_) => Ok(Some(Kind::Trace)),
            None => more,
        },
        (b'[', b'{') => {
            let Some((j, _)) = it.next() else { return more };
            match first_key(&b[j..]) {
                Some(k) if ["ph", "name", "cat", "ts", "pid", "tid", "args", "dur", "s", "id"].contains(&k) => {
                    Ok(Some(Kind::Trace))
                }
                Some(_) => Ok(None),
                None => more,
            }
        }
        _ => Ok(None),
    }
}

/// The text of a string starting at `b[0] == b'"'`, when it ends before `b` does (escapes
/// left as they are: keys of either format have none).
fn first_key(b: &[u8]) -> Option<&str> {
    let rest = b.strip_prefix(b"\"")?;
    let end = memchr::memchr(b'"', rest)?;
    std::str::from_utf8(&rest[..end]).ok()
}

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

/// A profiler file being read.
pub(crate) struct Reader {
    kind: Kind,
    scan: scan::Scanner,
    trace: build::Builder,
    timeline: timeline::Timeline,
}

impl Reader {
    pub(crate) fn new(kind: Kind) -> Self {
        Reader {
            kind,
            scan: scan::Scanner::new("traceEvents", PIECE_CAP),
            trace: build::Builder::default(),
            timeline: timeline::Timeline::default(),
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<(), ReadError> {
        let Reader { kind, scan, trace, timeline } = self;
        scan.feed(chunk, &mut |piece| match (piece, *kind) {
            (scan::Piece::Member { key, value }, Kind::Trace) => {
                trace.member(key, value);
                Ok(())
            }
            (scan::Piece::Element { index, value, offset }, Kind::Trace) => trace.event(index, value, offset),
            (scan::Piece::Element { index, value, offset }, Kind::Timeline) => timeline.element(index, value, offset),
            (scan::Piece::Member { .. }, Kind::Timeline) => Ok(()),
        })
    }

    pub(crate) fn finish(self) -> Result<(Snapshot, Vec<Warning>), ReadError> {
        self.scan.finish()?;
        let end = self.scan.consumed();
        let built = match self.kind {
            Kind::Trace => self.trace.finish(),
            Kind::Timeline => self.timeline.finish(),
        };
        let (mut snap, warnings, info) = built.map_err(|e| e.at(end))?;
        let key = snap.strings.intern(crate::model::PROFILER_KEY);
        snap.extras.push((key, info.to_value()));
        Ok((snap, warnings))
    }
}
