//! Where a captured program asked for its memory: a host stack's call site (its first frame
//! outside the machinery [`is_plumbing`] names), and a snapshot's reserved memory by call
//! site, which `memscape capture` prints for each process.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use snapshot::{Snapshot, StackId};

use crate::stacks::is_plumbing;

/// The call site of `stack`, `file:line:function` as every call site of memscape is written
/// (`snapshot::frames::frame_line`); `(no stack)` when it has no frame outside the plumbing.
pub fn call_site(snap: &Snapshot, stack: Option<StackId>) -> String {
    let site = stack.and_then(|st| snap.stack(st).find(|f| !is_plumbing(snap.str(f.name), snap.str(f.filename))));
    site.map_or_else(|| "(no stack)".into(), |f| snapshot::frames::frame_line(snap, f))
}

/// The bytes of the snapshot's segments (what is reserved at the dump) summed by call site,
/// the most first, call sites with as many bytes in the order of their names. `O(s log s)`
/// for s segments.
pub fn bytes_by_call_site(snap: &Snapshot) -> Vec<(String, u64)> {
    let mut sites: BTreeMap<String, u64> = BTreeMap::new();
    for seg in &snap.segments {
        *sites.entry(call_site(snap, seg.frames)).or_default() += seg.total_size;
    }
    let mut sites: Vec<(String, u64)> = sites.into_iter().collect();
    sites.sort_by_key(|s| Reverse(s.1));
    sites
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Event, EventKind, Recorder, Symbol};

    const MIB: u64 = 1 << 20;

    /// Each instruction pointer's frame: the recorder, cudarc and the driver above the
    /// program's own two call sites.
    fn symbol(ip: usize) -> Option<Symbol> {
        let (name, filename, line) = match ip {
            1 => ("memscape_capture::cupti::on_api", "capture/src/cupti.rs", 200),
            2 => ("cuMemAlloc_v2", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0),
            3 => ("cudarc::driver::result::malloc_sync", "cudarc/src/driver/result.rs", 900),
            10 => ("train::load_weights", "src/train.rs", 12),
            20 => ("train::step", "src/train.rs", 40),
            _ => return None,
        };
        Some(Symbol { name: name.into(), filename: filename.into(), line })
    }

    #[test]
    fn reserved_bytes_group_by_the_first_frame_outside_the_plumbing() {
        let mut r = Recorder::new(100);
        let weights = r.intern_stack(&[1, 2, 3, 10]);
        let step = r.intern_stack(&[1, 2, 20]);
        let plumbing_only = r.intern_stack(&[1, 2, 3]);
        for (k, (stack, size)) in
            [(weights, 40 * MIB), (step, 2 * MIB), (weights, 24 * MIB), (step, 8 * MIB), (plumbing_only, 20 * MIB)]
                .into_iter()
                .enumerate()
        {
            let mut e = Event::new(EventKind::SegmentAlloc, 0, 0x7f00_0000_0000 + k as u64 * 64 * MIB, size);
            e.stack = Some(stack);
            r.record(e);
        }
        // A stream-ordered pool's allocation is written without a host stack.
        r.record(Event::new(EventKind::PoolAlloc, 0, 0x7e00_0000_0000, 10 * MIB));
        let snap = r.to_snapshot(&mut symbol);
        assert_eq!(
            bytes_by_call_site(&snap),
            vec![
                ("src/train.rs:12:train::load_weights".to_string(), 64 * MIB),
                ("(no stack)".to_string(), 30 * MIB),
                ("src/train.rs:40:train::step".to_string(), 10 * MIB),
            ]
        );
    }
}
