//! One snapshot from PyTorch's recording and the driver capture of the same process
//! (`memscape capture`): PyTorch's segments, blocks, trace and Python frames as PyTorch wrote
//! them, plus every driver allocation that lies in none of PyTorch's segments (NCCL, cuBLAS
//! workspaces, CuPy, custom kernels) as a segment of its own with one block and its native
//! stack, marked as outside PyTorch's allocator. A driver allocation inside one of PyTorch's
//! segments (the segment itself, or a piece an expandable segment mapped) is PyTorch's and
//! is not counted again.

use rustc_hash::FxHashMap;

use crate::intern::StrId;
use crate::model::{Action, Segment, Snapshot, StackId, Trace};
use crate::value::Value;

pub use crate::model::OUTSIDE_KEY;

/// What a merge added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// Driver allocations outside PyTorch's segments: (device, address, bytes).
    pub outside: Vec<(i64, u64, u64)>,
    /// Driver allocations inside PyTorch's segments (left out: PyTorch has them).
    pub inside: usize,
    /// Trace entries of the driver's outside allocations woven into PyTorch's traces by
    /// time; 0 when either trace has no times.
    pub events: usize,
}

/// Whether `seg` was allocated outside PyTorch's caching allocator (by a merge).
pub fn is_outside(snap: &Snapshot, seg: &Segment) -> bool {
    seg.extras.iter().any(|(k, v)| snap.str(*k) == OUTSIDE_KEY && matches!(v, Value::Bool(true)))
}

/// Whether trace entry `i` of `trace` is a driver allocation outside PyTorch's allocator (by a
/// merge). O(log e) for e entries with extra keys.
pub fn is_outside_entry(snap: &Snapshot, trace: &Trace, i: usize) -> bool {
    trace.extras(i).iter().any(|(k, v)| snap.str(*k) == OUTSIDE_KEY && matches!(v, Value::Bool(true)))
}

/// PyTorch's address ranges per device: its segments at the end and every segment it
/// allocated or mapped in its trace (the driver's record of them is PyTorch's memory too),
/// sorted by start.
struct Spans(FxHashMap<i64, Vec<(u64, u64)>>);

impl Spans {
    fn of(torch: &Snapshot) -> Spans {
        let mut spans: FxHashMap<i64, Vec<(u64, u64)>> = FxHashMap::default();
        for s in &torch.segments {
            spans.entry(s.device).or_default().push((s.address, s.address.saturating_add(s.total_size)));
        }
        for d in 0..torch.n_trace_lists() {
            let t = torch.trace(d);
            for i in 0..t.len() {
                if matches!(t.action(i), Action::SegmentAlloc | Action::SegmentMap) {
                    let lo = t.addr(i);
                    spans.entry(d as i64).or_default().push((lo, lo.saturating_add(t.size(i))));
                }
            }
        }
        for v in spans.values_mut() {
            v.sort_unstable();
            // Overlapping ranges (a segment seen at the end and in the trace, pieces mapped
            // into an expandable segment) become one, so the last range starting at or before
            // an address is the only one that can hold it.
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(v.len());
            for &(lo, hi) in v.iter() {
                match merged.last_mut() {
                    Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                    _ => merged.push((lo, hi)),
                }
            }
            *v = merged;
        }
        Spans(spans)
    }

    /// Whether PyTorch's memory on `device` holds bytes `lo..hi`.
    fn holds(&self, device: i64, lo: u64, hi: u64) -> bool {
        self.0.get(&device).is_some_and(|v| {
            let k = v.partition_point(|s| s.0 <= lo);
            k > 0 && hi <= v[k - 1].1
        })
    }
}

/// Copies the driver's stacks into the merged snapshot, each once.
struct Stacks<'a> {
    driver: &'a Snapshot,
    copied: FxHashMap<StackId, StackId>,
}

impl Stacks<'_> {
    fn copy(&mut self, out: &mut Snapshot, id: Option<StackId>) -> Option<StackId> {
        let id = id?;
        if let Some(&m) = self.copied.get(&id) {
            return Some(m);
        }
        let d = self.driver;
        let frames: Vec<_> = d.stack(id).map(|f| out.add_frame(d.str(f.name), d.str(f.filename), f.line)).collect();
        let m = out.add_stack(&frames);
        self.copied.insert(id, m);
        Some(m)
    }
}

/// `torch` with the allocations of `driver` that none of its segments holds added as
/// segments outside PyTorch's allocator, and their trace entries woven into PyTorch's traces
/// by time (marked with [`OUTSIDE_KEY`]), so the timeline shows them come and go. An address
/// range PyTorch held at any time in its trace is PyTorch's. The driver's description of its
/// devices (name, memory, what the process held) is kept: PyTorch's snapshot has none. O((s +
/// d + t) log s) for s and d segments and t trace entries.
pub fn merge_capture(torch: &Snapshot, driver: &Snapshot) -> (Snapshot, Merged) {
    let mut out = torch.clone();
    let devices = driver.device_info();
    if !devices.is_empty() {
        out.set_device_info(&devices);
    }
    let mut merged = Merged::default();
    let spans = Spans::of(torch);
    let key = out.strings.intern(OUTSIDE_KEY);
    let mut stacks = Stacks { driver, copied: FxHashMap::default() };
    for s in &driver.segments {
        if spans.holds(s.device, s.address, s.address.saturating_add(s.total_size)) {
            merged.inside += 1;
            continue;
        }
        let frames = stacks.copy(&mut out, s.frames);
        let blocks = s
            .blocks
            .iter()
            .map(|b| {
                let mut b = b.clone();
                b.frames = stacks.copy(&mut out, b.frames);
                b.extras.clear();
                b
            })
            .collect();
        let segment_type = s.segment_type.map(|t| out.strings.intern(driver.str(t)));
        out.segments.push(Segment {
            frames,
            blocks,
            segment_type,
            extras: vec![(key, Value::Bool(true))],
            ..s.clone()
        });
        merged.outside.push((s.device, s.address, s.total_size));
    }
    merged.events = weave_traces(&mut out, driver, &spans, &mut stacks, key);
    (out, merged)
}

/// Weaves the driver's trace entries outside PyTorch's memory into `out`'s traces, in time
/// order (PyTorch's first at equal times); returns how many. Nothing when either trace of a
/// device has no times: there is no order to put them in. O(t) per device.
fn weave_traces(out: &mut Snapshot, driver: &Snapshot, spans: &Spans, stacks: &mut Stacks, key: StrId) -> usize {
    let mut woven = 0;
    for d in 0..driver.n_trace_lists() {
        let dt = driver.trace(d);
        let outside: Vec<usize> = (0..dt.len())
            .filter(|&i| {
                let lo = dt.addr(i);
                dt.has_time()
                    && dt.time_us(i).is_some()
                    && !matches!(dt.action(i), Action::Oom | Action::Snapshot)
                    && !spans.holds(d as i64, lo, lo.saturating_add(dt.size(i).max(1)))
            })
            .collect();
        if outside.is_empty() {
            continue;
        }
        let tt = out.trace(d);
        if !tt.is_empty() && (!tt.has_time() || (0..tt.len()).any(|i| tt.time_us(i).is_none())) {
            continue;
        }
        let mut woven_trace = Trace::with_capacity(tt.len() + outside.len());
        let mut next = outside.iter().peekable();
        let mut copy_driver = |out: &mut Snapshot, t: &mut Trace, i: usize| {
            let mut e = dt.entry(i);
            e.frames = stacks.copy(out, e.frames);
            if let Action::Other(s) = e.action {
                e.action = Action::Other(out.strings.intern(driver.str(s)));
            }
            e.compile_context = None;
            e.user_metadata = None;
            e.category = None;
            e.pool_id = None;
            e.extras = vec![(key, Value::Bool(true))];
            t.push(&e);
        };
        let traces = out.device_traces.get_or_insert_with(Vec::new);
        if traces.len() <= d {
            traces.resize_with(d + 1, Trace::default);
        }
        let torch_trace = std::mem::take(&mut traces[d]);
        for i in 0..torch_trace.len() {
            let at = torch_trace.time_us(i).unwrap_or(i64::MIN);
            while let Some(&&j) = next.peek() {
                if dt.time_us(j).unwrap_or(i64::MAX) >= at {
                    break;
                }
                copy_driver(out, &mut woven_trace, j);
                next.next();
            }
            woven_trace.push(&torch_trace.entry(i));
        }
        for &j in next {
            copy_driver(out, &mut woven_trace, j);
        }
        woven += outside.len();
        if let Some(t) = out.device_traces.as_mut().and_then(|t| t.get_mut(d)) {
            *t = woven_trace;
        }
    }
    woven
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Block, BlockState};

    fn seg(snap: &mut Snapshot, device: i64, address: u64, size: u64, frame: &str) -> Segment {
        let f = snap.add_frame(frame, "lib.so", 0);
        let st = snap.add_stack(&[f]);
        Segment {
            device,
            address,
            total_size: size,
            allocated_size: Some(size),
            active_size: Some(size),
            requested_size: Some(size),
            stream: 0,
            segment_type: None,
            segment_pool_id: None,
            is_expandable: None,
            frames: Some(st),
            blocks: vec![Block {
                address: Some(address),
                size,
                requested_size: Some(size),
                state: BlockState::ActiveAllocated,
                frames: Some(st),
                history: None,
                extras: Vec::new(),
            }],
            extras: Vec::new(),
        }
    }

    #[test]
    fn pieces_of_pytorchs_segments_are_its_own_and_the_rest_is_outside() {
        let mut torch = Snapshot::default();
        let a = seg(&mut torch, 0, 0x1000, 0x4000, "torch");
        torch.segments.push(a);
        let mut driver = Snapshot::default();
        // The same segment, a piece mapped inside it (expandable), one straddling its end, one
        // elsewhere and one on another device at the same address.
        for (d, addr, size, f) in [
            (0, 0x1000, 0x4000, "cudaMalloc"),
            (0, 0x2000, 0x1000, "cuMemMap"),
            (0, 0x4000, 0x2000, "straddles"),
            (0, 0x9000, 0x1000, "ncclMemAlloc"),
            (1, 0x1000, 0x4000, "cupy"),
        ] {
            let s = seg(&mut driver, d, addr, size, f);
            driver.segments.push(s);
        }
        let (m, what) = merge_capture(&torch, &driver);
        assert_eq!(what.inside, 2);
        assert_eq!(what.outside, vec![(0, 0x4000, 0x2000), (0, 0x9000, 0x1000), (1, 0x1000, 0x4000)]);
        assert_eq!(m.segments.len(), 4);
        assert!(!is_outside(&m, &m.segments[0]));
        let names: Vec<&str> = m.segments[1..]
            .iter()
            .map(|s| {
                assert!(is_outside(&m, s));
                m.str(m.stack(s.blocks[0].frames.unwrap()).next().unwrap().name)
            })
            .collect();
        assert_eq!(names, ["straddles", "ncclMemAlloc", "cupy"]);
    }
}
