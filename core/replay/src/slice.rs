//! A window of a recording as a snapshot of its own (`memscape slice`): the trace entries of a
//! range and, as its segments, the allocator state where the range ends.
//!
//! What was alive when the window starts appears as PyTorch represents memory allocated before
//! a recording: a block in the segments with no `alloc` in the trace, or a free with no
//! `alloc` (the free's entry carries the allocation's stack, as PyTorch records it). So
//! PyTorch's viewer and ours draw it alive from the window's first step, and every analysis
//! reads the window as it would a recording started there.

use serde::{Deserialize, Serialize};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::intern::StrId;
use crate::layout::{layout, PoolKind};
use crate::model::{Action, Block, BlockState, Segment, Snapshot, Trace};
use crate::state::{AllocatorState, StateIndex};
use crate::value::Value;

pub use crate::model::WINDOW_KEY;

/// Which entries of each device's trace a window keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Window {
    /// The last `n` entries.
    Last(usize),
    /// Entries by index.
    Entries {
        /// The first entry kept.
        start: usize,
        /// One past the last (`None`, or past the trace: to its end).
        end: Option<usize>,
    },
    /// Entries whose `time_us` lies in `from..=to`, from the first such entry to the last.
    Time {
        /// The earliest time kept (`None`: from the start).
        from: Option<i64>,
        /// The latest time kept (`None`: to the end).
        to: Option<i64>,
    },
    /// Entries between the first `START` of the annotation `name` on the device and the
    /// `END` that follows it (the trace's end when none does).
    Annotation(String),
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let end = |e: &Option<i64>| e.map_or(String::new(), |t| t.to_string());
        match self {
            Window::Last(n) => write!(f, "the last {n} entries"),
            Window::Entries { start, end: e } => {
                write!(f, "entries {start}..{}", e.map_or(String::new(), |e| e.to_string()))
            }
            Window::Time { from, to } => write!(f, "time_us {}..{}", end(from), end(to)),
            Window::Annotation(name) => write!(f, "annotation {name:?}"),
        }
    }
}

/// A window resolved on one device: its entries `start..end` of `of`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    /// The device.
    pub device: usize,
    /// First entry kept.
    pub start: usize,
    /// One past the last entry kept.
    pub end: usize,
    /// Entries the device's trace has.
    pub of: usize,
}

/// What a slice is a window of, as [`WINDOW_KEY`] records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowInfo {
    /// The file it was cut from, as the user named it.
    pub source: String,
    /// The rule, in words ("the last 1000 entries").
    pub rule: String,
    /// Each device's range.
    pub ranges: Vec<Range>,
}

/// What [`slice()`] made, beside the snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sliced {
    /// Each kept device's range.
    pub ranges: Vec<Range>,
    /// Blocks alive at a window's end that lie in no segment the replay knows (the trace
    /// lacks the segment's events): left out of the segments.
    pub orphan_blocks: usize,
    /// Pinned host memory was left out (its entries do not share the devices' indices).
    pub dropped_host: bool,
}

/// The entries of `device` that `window` keeps. An error says why none can be chosen.
///
/// Indices are the file's; the range returned is of the entries `snap` holds (a windowed read
/// holds some of the file's: [`Trace::dropped`]).
pub fn resolve(snap: &Snapshot, device: usize, window: &Window) -> Result<Range, String> {
    let t = snap.trace(device);
    let of = t.len();
    let (before, file) = (t.dropped() as usize, t.dropped() as usize + of + t.after() as usize);
    // File indices to held ones.
    let range = |start: usize, end: usize| {
        let held = |i: usize| i.saturating_sub(before).min(of);
        Range { device, start: held(start), end: held(end), of }
    };
    match window {
        Window::Last(n) => Ok(range(file.saturating_sub(*n), file)),
        Window::Entries { start, end } => {
            let end = end.unwrap_or(file).min(file);
            if end < *start && end < file {
                return Err(format!("entries {start}..{end}: the end comes before the start"));
            }
            // A start past a device's trace keeps none of it (another device may be longer).
            Ok(range((*start).min(end), end))
        }
        Window::Time { from, to } => {
            if of > 0 && !t.has_time() {
                return Err(format!("device {device}'s trace has no times (time_us); choose entries instead"));
            }
            let from = from.unwrap_or(i64::MIN);
            let to = to.unwrap_or(i64::MAX);
            let inside = |i: usize| t.time_us(i).is_some_and(|x| from <= x && x <= to);
            let Some(start) = (0..of).find(|&i| inside(i)) else {
                return Ok(Range { device, start: of, end: of, of });
            };
            let end = (start..of).rev().find(|&i| inside(i)).map_or(start, |i| i + 1);
            Ok(Range { device, start, end, of })
        }
        Window::Annotation(name) => {
            let anns = snap.external_annotations.as_deref().unwrap_or_default();
            let on = |a: &&crate::model::Annotation, stage: &str| {
                a.on_device(device) && snap.str(a.name) == name && snap.str(a.stage) == stage
            };
            let Some(start) = anns.iter().find(|a| on(a, "START")) else {
                return Err(format!("no annotation {name:?} starts on device {device}"));
            };
            let end = anns.iter().find(|a| on(a, "END") && a.time_us >= start.time_us).map(|a| a.time_us);
            resolve(snap, device, &Window::Time { from: Some(start.time_us), to: end })
        }
    }
}

/// The devices a window applies to: `device` alone, or every device with a trace.
pub fn devices(snap: &Snapshot, device: Option<usize>) -> Result<Vec<usize>, String> {
    let n = snap.n_trace_lists();
    match device {
        Some(d) if d < n => Ok(vec![d]),
        Some(d) => Err(format!("device {d} has no trace (the file has {n} device traces)")),
        None if n == 0 => Err("the file has no trace to take a window of".to_string()),
        None => Ok((0..n).collect()),
    }
}

/// `snap` cut to `window` on `devices` (see [`devices`]): their entries in the window, their
/// segments as the allocator state at its end; other devices keep neither.
pub fn slice(snap: &Snapshot, window: &Window, devices: &[usize], source: &str) -> Result<(Snapshot, Sliced), String> {
    let n = snap.n_trace_lists();
    let mut out = Snapshot {
        strings: snap.strings.clone(),
        frames: snap.frames.clone(),
        stacks: snap.stacks.clone(),
        root: snap.root,
        segments: Vec::new(),
        device_traces: Some((0..n).map(|_| Trace::default()).collect()),
        allocator_settings: snap.allocator_settings.clone(),
        external_annotations: None,
        host_segments: None,
        host_traces: None,
        extras: snap.extras.iter().filter(|(k, _)| snap.str(*k) != WINDOW_KEY).cloned().collect(),
    };
    let mut sliced =
        Sliced { dropped_host: snap.host_segments.is_some() || snap.host_traces.is_some(), ..Default::default() };
    let mut kept_times = Vec::new();
    let types = (out.strings.intern("large"), out.strings.intern("small"));
    for &d in devices {
        let r = resolve(snap, d, window)?;
        let t = snap.trace(d);
        let mut kept = Trace::with_capacity(r.end - r.start);
        for i in r.start..r.end {
            kept.push(&t.entry(i));
        }
        if let Some(traces) = out.device_traces.as_mut() {
            traces[d] = kept;
        }
        if r.end == r.of {
            out.segments.extend(snap.segments.iter().filter(|s| s.device == d as i64).cloned());
        } else {
            let state = StateIndex::build(snap, d).state_after(snap, r.end.checked_sub(1));
            sliced.orphan_blocks += state.orphan_blocks.len();
            out.segments.extend(segments_of(snap, d, &state, &allocated_in(t, r.start..r.end), types));
        }
        if r.start < r.end {
            if let (Some(a), Some(b)) = (t.time_us(r.start), t.time_us(r.end - 1)) {
                kept_times.push((d as i64, a, b));
            }
        }
        let before = t.dropped() as usize;
        let of = before + r.of + t.after() as usize;
        sliced.ranges.push(Range { start: r.start + before, end: r.end + before, of, ..r });
    }
    out.external_annotations = snap.external_annotations.as_ref().map(|anns| {
        anns.iter()
            .filter(|a| {
                kept_times.iter().any(|&(d, from, to)| a.on_device(d as usize) && from <= a.time_us && a.time_us <= to)
            })
            .cloned()
            .collect()
    });
    set_window(
        &mut out,
        WindowInfo { source: source.to_string(), rule: window.to_string(), ranges: sliced.ranges.clone() },
    );
    Ok((out, sliced))
}

/// Finishes a windowed read of a range ([`memscape_format::Limits::keep_entries`]): each device's
/// segments become the allocator state where its window ends, found by undoing what the read
/// kept of the entries after it from the final segments; pinned host memory is left out, as
/// [`slice()`] leaves it.
pub fn settle_tails(snap: &mut Snapshot) {
    let types = (snap.strings.intern("large"), snap.strings.intern("small"));
    snap.host_segments = None;
    snap.host_traces = None;
    for d in 0..snap.n_trace_lists() {
        let Some(tail) = snap.device_traces.as_mut().and_then(|t| t[d].take_tail()) else { continue };
        let mut after = Snapshot {
            segments: snap.segments.iter().filter(|s| s.device == d as i64).cloned().collect(),
            device_traces: Some(vec![Trace::default(); d + 1]),
            ..Snapshot::default()
        };
        if let Some(traces) = after.device_traces.as_mut() {
            let t = &mut traces[d];
            for e in &tail.entries {
                t.push(e);
            }
        }
        let mut state = StateIndex::build(&after, d).state_after(&after, None);
        // A block freed after the window was allocated before it: its stack is its alloc's.
        for b in state.segments.iter_mut().flat_map(|s| &mut s.blocks).chain(&mut state.orphan_blocks) {
            if b.stack.is_none() {
                b.stack = tail.made.get(&b.address).copied();
            }
        }
        let t = snap.trace(d);
        let segments = segments_of(snap, d, &state, &allocated_in(t, 0..t.len()), types);
        snap.segments.retain(|s| s.device != d as i64);
        snap.segments.extend(segments);
    }
    // Device by device, as a slice lists them (stable: each device's keep their order).
    snap.segments.sort_by_key(|s| s.device);
}

/// Marks a windowed read ([`memscape_format::Limits::keep_last_entries`], `keep_entries`) as a window of `source`:
/// each trace's range of the file's entries, from what the read left out.
pub fn mark_window(snap: &mut Snapshot, source: &str, window: &Window) {
    let ranges = (0..snap.n_trace_lists())
        .filter(|&d| snap.trace(d).dropped() + snap.trace(d).after() > 0 || !snap.trace(d).is_empty())
        .map(|d| {
            let t = snap.trace(d);
            let before = t.dropped() as usize;
            Range { device: d, start: before, end: before + t.len(), of: before + t.len() + t.after() as usize }
        })
        .collect();
    set_window(snap, WindowInfo { source: source.to_string(), rule: window.to_string(), ranges });
}

/// Records `info` under [`WINDOW_KEY`], in place of any there.
fn set_window(snap: &mut Snapshot, info: WindowInfo) {
    let key = snap.strings.intern(WINDOW_KEY);
    snap.extras.retain(|(k, _)| *k != key);
    snap.extras.push((key, info.to_value()));
}

/// Addresses allocated by entries `range` of `t` (their blocks' pending frees are their own).
fn allocated_in(t: &Trace, range: std::ops::Range<usize>) -> FxHashSet<u64> {
    range.filter(|&i| t.action(i) == Action::Alloc).map(|i| t.addr(i)).collect()
}

/// The segments of `device` as `state` holds them, each with its blocks in address order:
/// live blocks rounded as the allocator rounds them and the gaps between them as free
/// (inactive) blocks, as PyTorch lists a segment (the doctor's [`layout`], one rule). A
/// segment the file's final snapshot also has (same address and size) keeps its type, pool
/// and stack.
///
/// A block whose free waits on another stream when the window ends, allocated before the
/// window, is written as allocated: PyTorch's viewer draws only the final snapshot's allocated
/// blocks, and the memory is in use until the free completes, after the window.
fn segments_of(
    snap: &Snapshot,
    device: usize,
    state: &AllocatorState,
    traced: &FxHashSet<u64>,
    (large, small): (StrId, StrId),
) -> Vec<Segment> {
    let finals: FxHashMap<(u64, u64), &Segment> =
        snap.segments.iter().filter(|s| s.device == device as i64).map(|s| ((s.address, s.total_size), s)).collect();
    let laid = layout(state, &crate::settings::settings(snap, device));
    state
        .segments
        .iter()
        .zip(&laid.segments)
        .map(|(s, l)| {
            let known = finals.get(&(s.address, s.size));
            let free = |address, size| Block {
                address: Some(address),
                size,
                requested_size: Some(0),
                state: BlockState::Inactive,
                frames: None,
                history: None,
                extras: Vec::new(),
            };
            let mut blocks = Vec::with_capacity(2 * s.blocks.len() + 1);
            let (mut allocated, mut active, mut requested) = (0, 0, 0);
            let mut cursor = s.address;
            for (b, &(size, req)) in s.blocks.iter().zip(&l.blocks) {
                let start = b.address.max(cursor);
                if start > cursor {
                    blocks.push(free(cursor, start - cursor));
                }
                let pending = b.pending_free && traced.contains(&b.address);
                if !pending {
                    allocated = u64::saturating_add(allocated, size);
                    requested = u64::saturating_add(requested, req);
                }
                active = u64::saturating_add(active, size);
                blocks.push(Block {
                    address: Some(start),
                    size,
                    requested_size: Some(req),
                    state: if pending { BlockState::ActivePendingFree } else { BlockState::ActiveAllocated },
                    frames: b.stack,
                    history: None,
                    extras: Vec::new(),
                });
                cursor = start.saturating_add(size);
            }
            let end = s.address.saturating_add(s.size);
            if end > cursor {
                blocks.push(free(cursor, end - cursor));
            }
            let kind = Some(if l.pool == PoolKind::Small { small } else { large });
            Segment {
                device: device as i64,
                address: s.address,
                total_size: s.size,
                allocated_size: Some(allocated),
                active_size: Some(active),
                requested_size: Some(requested),
                stream: s.stream,
                segment_type: known.map_or(kind, |k| k.segment_type),
                segment_pool_id: known.map_or(s.pool, |k| k.segment_pool_id),
                is_expandable: known.map_or(Some(s.expandable), |k| k.is_expandable),
                frames: known.and_then(|k| k.frames),
                blocks,
                extras: Vec::new(),
            }
        })
        .collect()
}

impl WindowInfo {
    fn to_value(&self) -> Value {
        let s = |v: &str| Value::Str(v.into());
        let int = |v: usize| Value::Int(v as i128);
        let ranges = self
            .ranges
            .iter()
            .map(|r| {
                Value::Dict(vec![
                    (s("device"), int(r.device)),
                    (s("start"), int(r.start)),
                    (s("end"), int(r.end)),
                    (s("of"), int(r.of)),
                ])
            })
            .collect();
        Value::Dict(vec![
            (s("source"), s(&self.source)),
            (s("rule"), s(&self.rule)),
            (s("ranges"), Value::List(ranges)),
        ])
    }

    /// What `snap` says it is a window of, if it is a slice.
    pub fn of(snap: &Snapshot) -> Option<WindowInfo> {
        let v = snap.extras.iter().find(|(k, _)| snap.str(*k) == WINDOW_KEY).map(|(_, v)| v)?;
        let text = |k: &str| match v.get(k) {
            Some(Value::Str(s)) => Some(s.to_string()),
            _ => None,
        };
        let int = |d: &Value, k: &str| match d.get(k) {
            Some(Value::Int(i)) => usize::try_from(*i).ok(),
            _ => None,
        };
        let ranges = match v.get("ranges") {
            Some(Value::List(items)) => items
                .iter()
                .filter_map(|r| {
                    Some(Range {
                        device: int(r, "device")?,
                        start: int(r, "start")?,
                        end: int(r, "end")?,
                        of: int(r, "of")?,
                    })
                })
                .collect(),
            _ => Vec::new(),
        };
        Some(WindowInfo { source: text("source")?, rule: text("rule").unwrap_or_default(), ranges })
    }

    /// The window in words: "the last 1000 entries of run.pickle (device 0: entries 9000..10000
    /// of 10000)".
    pub fn describe(&self) -> String {
        let ranges: Vec<String> = self
            .ranges
            .iter()
            .map(|r| format!("device {}: entries {}..{} of {}", r.device, r.start, r.end, r.of))
            .collect();
        format!("{} of {} ({})", self.rule, self.source, ranges.join("; "))
    }
}
