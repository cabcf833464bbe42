//! `torch.profiler`'s files, read as they arrive: Chrome traces with memory events
//! (`prof.export_chrome_trace`, `tensorboard_trace_handler`; Kineto's JSON, optionally
//! gzipped) and the memory timelines of `prof.export_memory_timeline` (raw and coalesced).
//!
//! Module map: `scan` splits the JSON into pieces (the root's members, each event) without
//! building it; `event` parses one event's fields; `build` turns a trace's events into the
//! model; `timeline` does the same for a memory timeline. What the file was is said under
//! [`PROFILER_KEY`](crate::model::PROFILER_KEY) ([`ProfilerInfo`]).

use crate::profiler::ProfilerInfo;

mod build;
mod event;
mod scan;
mod timeline;

use crate::error::{ReadError, Warning};
use crate::model::Snapshot;

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
