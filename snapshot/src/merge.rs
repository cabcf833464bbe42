//! One snapshot from PyTorch's recording and the driver capture of the same process
//! (`memscape capture`): PyTorch's segments, blocks, trace and Python frames as PyTorch wrote
//! them, plus every driver allocation that lies in none of PyTorch's segments (NCCL, cuBLAS
//! workspaces, CuPy, custom kernels) as a segment of its own with one block and its native
//! stack, marked as outside PyTorch's allocator. A driver allocation inside one of PyTorch's
//! segments (the segment itself, or a piece an expandable segment mapped) is PyTorch's and
//! is not counted again.

use rustc_hash::FxHashMap;

use crate::model::{Segment, Snapshot, StackId};
use crate::value::Value;

/// The key a merged segment carries (value `True`) when the driver allocated it outside
/// PyTorch's caching allocator. PyTorch's tools ignore keys they do not know.
pub const OUTSIDE_KEY: &str = "memscape_outside_allocator";

/// What a merge added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// Driver allocations outside PyTorch's segments: (device, address, bytes).
    pub outside: Vec<(i64, u64, u64)>,
    /// Driver allocations inside PyTorch's segments (left out: PyTorch has them).
    pub inside: usize,
}

/// Whether `seg` was allocated outside PyTorch's caching allocator (by a merge).
pub fn is_outside(snap: &Snapshot, seg: &Segment) -> bool {
    seg.extras.iter().any(|(k, v)| snap.str(*k) == OUTSIDE_KEY && matches!(v, Value::Bool(true)))
}

/// `torch` with the allocations of `driver` that none of its segments holds added as
/// segments outside PyTorch's allocator. O((s + d) log s) for s and d segments.
pub fn merge_capture(torch: &Snapshot, driver: &Snapshot) -> (Snapshot, Merged) {
    let mut out = torch.clone();
    let mut merged = Merged::default();
    // PyTorch's segments per device, by start address.
    let mut spans: FxHashMap<i64, Vec<(u64, u64)>> = FxHashMap::default();
    for s in &torch.segments {
        spans.entry(s.device).or_default().push((s.address, s.address.saturating_add(s.total_size)));
    }
    for v in spans.values_mut() {
        v.sort_unstable();
    }
    let inside = |device: i64, lo: u64, hi: u64| {
        spans.get(&device).is_some_and(|v| {
            // The last segment starting at or before `lo` is the only one that can hold it
            // (PyTorch's segments do not overlap).
            let k = v.partition_point(|s| s.0 <= lo);
            k > 0 && hi <= v[k - 1].1
        })
    };
    let key = out.strings.intern(OUTSIDE_KEY);
    let mut stacks: FxHashMap<StackId, StackId> = FxHashMap::default();
    for s in &driver.segments {
        if inside(s.device, s.address, s.address.saturating_add(s.total_size)) {
            merged.inside += 1;
            continue;
        }
        let mut copy = |id: Option<StackId>| -> Option<StackId> {
            let id = id?;
            if let Some(&m) = stacks.get(&id) {
                return Some(m);
            }
            let frames: Vec<_> =
                driver.stack(id).map(|f| out.add_frame(driver.str(f.name), driver.str(f.filename), f.line)).collect();
            let m = out.add_stack(&frames);
            stacks.insert(id, m);
            Some(m)
        };
        let frames = copy(s.frames);
        let blocks = s
            .blocks
            .iter()
            .map(|b| {
                let mut b = b.clone();
                b.frames = copy(b.frames);
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
    (out, merged)
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
