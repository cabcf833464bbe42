//! The recorder's logic on recorded event sequences: no GPU needed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod recorded;
mod torch;

use memscape_capture::{capture_ips, symbolize, Event, EventKind, Recorder, Ring};
use snapshot::timeline::{Timeline, TimelineKind};
use snapshot::Action;

const MIB: u64 = 1 << 20;
const BASE: u64 = 0x7f00_0000_0000;

/// The pattern of the GPU check: allocate 1, 2, 4, ... 512 MiB, free every other one, map
/// and unmap a virtual range, then fail an allocation.
fn known_pattern(r: &mut Recorder) -> Vec<(u64, u64)> {
    let mut addr = BASE;
    let mut allocs = Vec::new();
    for k in 0..10 {
        let size = MIB << k;
        r.record(Event::new(EventKind::SegmentAlloc, 0, addr, size));
        allocs.push((addr, size));
        addr += size.next_multiple_of(2 * MIB);
    }
    for &(a, _) in allocs.iter().skip(1).step_by(2) {
        r.record(Event::new(EventKind::SegmentFree, 0, a, 0));
    }
    let va = 0x7e00_0000_0000;
    r.record(Event::new(EventKind::Map, 0, va, 64 * MIB));
    r.record(Event::new(EventKind::Map, 0, va + 64 * MIB, 32 * MIB));
    r.record(Event::new(EventKind::Unmap, 0, va + 64 * MIB, 32 * MIB));
    let mut oom = Event::new(EventKind::Oom, 0, 0, 1 << 40);
    oom.device_free = Some(3 * MIB);
    r.record(oom);
    allocs.iter().step_by(2).copied().chain([(va, 64 * MIB)]).collect()
}

fn read_back(snap: &snapshot::Snapshot) -> snapshot::Snapshot {
    let bytes = snapshot::write::to_pickle_bytes(snap);
    let loaded = snapshot::read(&bytes).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    loaded.snapshot
}

#[test]
fn a_known_pattern_comes_out_exactly() {
    let mut r = Recorder::new(1000);
    let alive = known_pattern(&mut r);
    let snap = read_back(&r.to_snapshot(&mut |_| None));
    let mut segs: Vec<(u64, u64)> = snap.segments.iter().map(|s| (s.address, s.total_size)).collect();
    segs.sort();
    let mut expect = alive.clone();
    expect.sort();
    assert_eq!(segs, expect);
    let t = snap.trace(0);
    let actions: Vec<Action> = (0..t.len()).map(|i| t.action(i)).collect();
    // Each driver allocation is a segment and its block; each free, the block then the segment.
    assert_eq!(&actions[..2], &[Action::SegmentAlloc, Action::Alloc]);
    assert_eq!(&actions[20..22], &[Action::FreeCompleted, Action::SegmentFree]);
    for (action, n) in
        [(Action::SegmentAlloc, 10), (Action::Alloc, 10), (Action::SegmentFree, 5), (Action::FreeCompleted, 5)]
    {
        assert_eq!(actions.iter().filter(|&&a| a == action).count(), n, "{action:?}");
    }
    assert_eq!(&actions[30..], &[Action::SegmentMap, Action::SegmentMap, Action::SegmentUnmap, Action::Oom]);
    // Frees carry the size of what they freed; the OOM has no address, and the free memory.
    assert_eq!((t.size(20), t.size(21)), (2 * MIB, 2 * MIB));
    assert_eq!((t.entry(33).addr, t.device_free(33), t.size(33)), (None, Some(3 * MIB), 1 << 40));
    // The reserved-memory timeline follows it: peak with all ten allocations, end with what
    // is alive (the mapped range included).
    let seg = Timeline::build(&snap, 0, TimelineKind::Segments);
    assert_eq!(seg.peak_bytes(), 1023 * MIB);
    let alive_bytes: u64 = alive.iter().map(|a| a.1).sum();
    assert_eq!(seg.final_bytes(), alive_bytes);
    assert_eq!(snapshot::stats::summary(&snap).total_reserved, alive_bytes);
    // So does the active memory timeline, where the allocations live and die in the trace;
    // the mapped range has no block event and shows as alive from the start.
    let blocks = Timeline::build(&snap, 0, TimelineKind::Blocks);
    assert_eq!(blocks.peak_bytes(), 1023 * MIB + 64 * MIB);
    assert_eq!(blocks.final_bytes(), alive_bytes);
    assert_eq!((blocks.n_initial(), blocks.n_unmatched_frees()), (1, 0));
}

#[test]
fn the_ring_keeps_the_newest_events_and_everything_alive_stays_visible() {
    let mut ring = Ring::new(3);
    for i in 0..10 {
        ring.push(i);
    }
    assert_eq!(ring.iter().copied().collect::<Vec<_>>(), vec![7, 8, 9]);
    assert_eq!(ring.dropped(), 7);
    let mut r = Recorder::new(4);
    for k in 0..10 {
        r.record(Event::new(EventKind::SegmentAlloc, 1, BASE + k * 4 * MIB, 2 * MIB));
    }
    assert_eq!(r.dropped(1), 6);
    let snap = read_back(&r.to_snapshot(&mut |_| None));
    assert_eq!(snap.trace(1).len(), 8, "4 events, each a segment and its block");
    assert_eq!(snap.segments.len(), 10);
    // The viewer reconstructs the six allocations from before the window as pre-existing.
    let seg = Timeline::build(&snap, 1, TimelineKind::Segments);
    assert_eq!((seg.elements().len(), seg.n_snapshot_only()), (10, 6));
    assert_eq!(seg.final_bytes(), 20 * MIB);
}

#[test]
fn pool_and_managed_allocations_and_several_devices() {
    let mut r = Recorder::new(100);
    let mut e = Event::new(EventKind::PoolAlloc, 0, BASE, 3 * MIB);
    e.stream = 0x55d0_0a1b_2c40;
    r.record(e);
    r.record(Event::new(EventKind::PoolAlloc, 0, BASE + 4 * MIB, MIB));
    r.record(Event::new(EventKind::PoolFree, 0, BASE, 0));
    let mut m = Event::new(EventKind::SegmentAlloc, 2, BASE, 8 * MIB);
    m.managed = true;
    r.record(m);
    let snap = read_back(&r.to_snapshot(&mut |_| None));
    assert_eq!(snap.n_trace_lists(), 3);
    assert_eq!(snap.devices(), vec![0, 2]);
    let t = snap.trace(0);
    assert_eq!(
        (t.action(0), t.stream(0), t.action(2), t.size(2)),
        (Action::Alloc, 0x55d0_0a1b_2c40, Action::FreeCompleted, 3 * MIB)
    );
    let blocks = Timeline::build(&snap, 0, TimelineKind::Blocks);
    assert_eq!((blocks.peak_bytes(), blocks.final_bytes()), (4 * MIB, MIB));
}

#[inline(never)]
fn a_recognisable_caller(r: &mut Recorder) -> u32 {
    let ips = capture_ips(0);
    r.intern_stack(&ips)
}

#[test]
fn host_stacks_are_symbolized_when_the_snapshot_is_written() {
    let mut r = Recorder::new(10);
    let stack = a_recognisable_caller(&mut r);
    let mut e = Event::new(EventKind::SegmentAlloc, 0, BASE, MIB);
    e.stack = Some(stack);
    r.record(e);
    let snap = read_back(&r.to_snapshot(&mut |ip| symbolize(ip)));
    let frames = snap.trace(0).frames(0).unwrap();
    let names: Vec<&str> = snap.stack(frames).map(|f| snap.str(f.name)).collect();
    assert!(names.iter().any(|n| n.contains("a_recognisable_caller")), "{names:?}");
    // The segment and its block carry the same stack.
    assert_eq!(snap.segments[0].frames, Some(frames));
    assert!(snap.segments[0].blocks[0].frames.is_some());
}

#[test]
fn python_loads_the_snapshot_and_segsum_adds_up() {
    let mut r = Recorder::new(1000);
    let alive = known_pattern(&mut r);
    let path = std::env::temp_dir().join(format!("memscape-capture-{}.pickle", std::process::id()));
    std::fs::write(&path, snapshot::write::to_pickle_bytes(&r.to_snapshot(&mut |_| None))).unwrap();
    let script = r#"
import pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
reserved = sum(g['total_size'] for g in s['segments'])
allocated = sum(b['requested_size'] for g in s['segments'] for b in g['blocks'] if b['state'] == 'active_allocated')
assert all(sum(b['size'] for b in g['blocks']) == g['total_size'] for g in s['segments'])
print(reserved, allocated, len(s['device_traces'][0]), s['device_traces'][0][-1]['action'])
"#;
    let out = std::process::Command::new("python3").args(["-c", script]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let total: u64 = alive.iter().map(|a| a.1).sum();
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), format!("{total} {total} 34 oom"));
}

#[test]
fn without_a_driver_recording_refuses_clearly() {
    if memscape_capture::driver_present() {
        eprintln!("skipped: this machine has a CUDA driver; the GPU check covers recording");
        return;
    }
    let err = memscape_capture::start(memscape_capture::Options::default()).unwrap_err();
    assert!(err.contains("no CUDA driver"), "{err}");
}

#[test]
fn frames_without_debug_info_name_their_library() {
    // libc has symbols but no line tables here: the frame says which library it is in.
    let sym = symbolize(libc::malloc as *const () as usize).unwrap();
    assert_eq!(sym.name, "malloc");
    assert!(sym.filename.contains("libc.so"), "{sym:?}");
    assert_eq!(sym.line, 0);
}

#[test]
fn device_names_survive_the_pickle_and_reach_the_summary() {
    let mut r = Recorder::new(10);
    r.record(Event::new(EventKind::SegmentAlloc, 1, BASE, 2 * MIB));
    let mut snap = r.to_snapshot(&mut |_| None);
    let gpu = snapshot::DeviceInfo {
        device: 1,
        name: "NVIDIA H100 80GB HBM3".into(),
        uuid: "GPU-0".into(),
        total_bytes: 85_520_809_984,
        process_used_bytes: Some(600 * MIB),
    };
    snap.set_device_info(std::slice::from_ref(&gpu));
    snap.set_device_info(std::slice::from_ref(&gpu)); // replaces, does not add
    let back = read_back(&snap);
    assert_eq!(back.device_info(), vec![gpu.clone()]);
    let s = snapshot::stats::summary(&back);
    assert_eq!(s.devices.iter().map(|d| (d.device, d.gpu.clone())).collect::<Vec<_>>(), vec![(1, Some(gpu))]);
}

#[cfg(target_os = "linux")]
#[test]
fn without_a_driver_devices_are_not_described() {
    if memscape_capture::driver_present() {
        eprintln!("skipped: this machine has a CUDA driver; the GPU check covers NVML");
        return;
    }
    assert!(memscape_capture::devices::describe(&[0, 1]).is_empty());
}

#[test]
fn freeing_null_is_not_an_event() {
    // cublasCreate calls cuMemFree(0), seen on the H100 (tests/data/h100/ours.pickle).
    let mut r = Recorder::new(10);
    r.record(Event::new(EventKind::SegmentFree, 0, 0, 0));
    r.record(Event::new(EventKind::PoolFree, 0, 0, 0));
    r.record(Event::new(EventKind::SegmentAlloc, 0, BASE, MIB));
    let snap = r.to_snapshot(&mut |_| None);
    assert_eq!(snap.trace(0).len(), 2, "only the allocation: its segment and block");
    assert_eq!(snap.trace(0).action(0), Action::SegmentAlloc);
}
