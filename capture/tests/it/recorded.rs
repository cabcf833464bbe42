//! Snapshots that `memscape capture` wrote on a real GPU (an H100, CUDA 13.0, driver 580, by
//! `capture/gpu-check`; see `capture/tests/data/h100/README.md`), read back without one: the
//! known pattern against what the program said it did, the in-process API, the ring, and a
//! PyTorch training step against PyTorch's own snapshot of the same run.

use std::path::{Path, PathBuf};

use snapshot::{Action, Snapshot};

const MIB: u64 = 1 << 20;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/h100").join(name)
}

fn load(name: &str) -> Snapshot {
    let loaded = snapshot::read(&std::fs::read(data(name)).unwrap()).unwrap();
    assert!(loaded.warnings.is_empty(), "{name}: {:?}", loaded.warnings);
    loaded.snapshot
}

fn json(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(data(name)).unwrap()).unwrap()
}

/// `[[addr, size], ...]` of a JSON field.
fn pairs(v: &serde_json::Value) -> Vec<(u64, u64)> {
    v.as_array().unwrap().iter().map(|p| (p[0].as_u64().unwrap(), p[1].as_u64().unwrap())).collect()
}

/// (addr, size) of every entry of device 0 with `action`, in order.
fn acts(snap: &Snapshot, action: Action) -> Vec<(u64, u64)> {
    let t = snap.trace(0);
    (0..t.len()).filter(|&i| t.action(i) == action).map(|i| (t.addr(i), t.size(i))).collect()
}

/// Frame names and files of a stack, innermost first.
fn frames(snap: &Snapshot, stack: Option<snapshot::StackId>) -> Vec<(String, String)> {
    stack.map_or_else(Vec::new, |s| {
        snap.stack(s).map(|f| (snap.str(f.name).into(), snap.str(f.filename).into())).collect()
    })
}

/// The first frame outside the driver, CUPTI and the recorder: who asked for the memory.
fn asker(snap: &Snapshot, stack: Option<snapshot::StackId>) -> (String, String) {
    frames(snap, stack).into_iter().find(|(n, f)| !memscape_capture::is_plumbing(n, f)).unwrap_or_default()
}

#[test]
fn the_known_pattern_recorded_on_an_h100_is_exactly_what_the_program_did() {
    let snap = load("pattern.pickle");
    let want = json("pattern.json");
    let allocated = pairs(&want["allocated"]);
    assert_eq!(allocated.len(), 10);
    let segs = acts(&snap, Action::SegmentAlloc);
    assert_eq!(segs.iter().filter(|a| allocated.contains(a)).copied().collect::<Vec<_>>(), allocated);
    let frees = acts(&snap, Action::SegmentFree);
    assert_eq!(frees, pairs(&want["freed"]), "every other one freed, with the size it had");
    assert_eq!(acts(&snap, Action::SegmentMap), pairs(&want["mapped"]));
    assert_eq!(acts(&snap, Action::SegmentUnmap)[0], pairs(&want["unmapped"])[0]);
    let t = snap.trace(0);
    let oom = (0..t.len()).find(|&i| t.action(i) == Action::Oom).expect("the failed 1 PiB request");
    assert_eq!(t.size(oom), want["oom_bytes"].as_u64().unwrap());
    assert!(t.device_free(oom).unwrap() > 70 << 30, "an idle H100 has over 70 GiB free");

    // Alive at exit: the unfreed half (the mapped range was unmapped before exit).
    let alive: Vec<(u64, u64)> = snap.segments.iter().map(|s| (s.address, s.total_size)).collect();
    let unfreed: Vec<(u64, u64)> = allocated.iter().step_by(2).copied().collect();
    assert_eq!(alive.iter().copied().collect::<std::collections::BTreeSet<_>>(), unfreed.into_iter().collect());

    // Stacks name the program's line; frames of the stripped driver name their library.
    let site = asker(&snap, snap.segments[0].frames);
    assert_eq!(site.0, "pattern::main", "{site:?}");
    assert!(site.1.ends_with("capture/examples/pattern.rs"), "{site:?}");
    assert!(frames(&snap, t.frames(0)).iter().any(|(n, f)| f.contains("libcuda.so") && n.starts_with("libcuda.so")));

    // NVML named the device.
    let gpu = &snap.device_info()[0];
    assert_eq!((gpu.device, gpu.name.as_str(), gpu.total_bytes), (0, "NVIDIA H100 80GB HBM3", 85_520_809_984));
    let s = snapshot::stats::summary(&snap);
    let d = &s.devices[0];
    assert_eq!(d.gpu.as_ref(), Some(gpu));
    let sum_of = |v: &[(u64, u64)]| v.iter().map(|a| a.1).sum::<u64>();
    assert_eq!(d.segment_timeline.peak_bytes, sum_of(&allocated), "1 + 2 + ... + 512 MiB, all alive at once");
    assert_eq!(d.reserved_bytes, 341 * MIB);
    // Each allocation is also a block, so the active memory timeline has the same history.
    assert_eq!(acts(&snap, Action::Alloc), segs);
    assert_eq!(acts(&snap, Action::FreeCompleted), frees);
    assert_eq!((d.timeline.peak_bytes, d.timeline.initially_allocated), (sum_of(&allocated), 0));
}

#[test]
fn the_rust_api_records_between_start_and_stop() {
    let snap = load("api.pickle");
    let want = json("api.json");
    assert_eq!(acts(&snap, Action::SegmentAlloc), pairs(&want["allocated"]));
    assert_eq!(acts(&snap, Action::SegmentFree), pairs(&want["freed"]));
    assert_eq!(snap.trace(0).len(), 8, "4 events (each a segment and its block), nothing after stop()");
    let after = want["after_stop"].as_u64().unwrap();
    assert!(!snap.segments.iter().any(|s| s.address == after));
}

#[test]
fn the_ring_kept_the_newest_thousand_events_of_ten_thousand() {
    let snap = load("ring.pickle");
    let t = snap.trace(0);
    assert_eq!(t.len(), 2000, "1000 events, each a segment and its block");
    assert_eq!(acts(&snap, Action::SegmentAlloc).len() + acts(&snap, Action::SegmentFree).len(), 1000);
    // `pattern --loop 5000`: alloc, free, alloc, free... of 64 KiB; the ring ends on a free.
    assert!((0..t.len()).all(|i| t.size(i) == 64 << 10));
    assert_eq!(t.action(t.len() - 1), Action::SegmentFree);
    assert!(snap.segments.is_empty(), "everything was freed");
}

#[test]
fn a_pytorch_step_every_pytorch_segment_is_ours_and_ours_shows_what_pytorch_cannot_see() {
    let torch = load("torch.pickle.gz");
    let ours = load("ours.pickle");
    let theirs: std::collections::BTreeSet<(u64, u64)> = acts(&torch, Action::SegmentAlloc).into_iter().collect();
    assert_eq!(theirs.len(), 50);
    let mine: std::collections::BTreeSet<(u64, u64)> = acts(&ours, Action::SegmentAlloc).into_iter().collect();
    assert!(theirs.is_subset(&mine), "missing: {:?}", theirs.difference(&mine).collect::<Vec<_>>());
    // PyTorch's segments, seen from our side, were asked for by its caching allocator.
    for s in ours.segments.iter().filter(|s| theirs.contains(&(s.address, s.total_size))) {
        let site = asker(&ours, s.frames);
        assert!(site.0.starts_with("c10::cuda::CUDACachingAllocator::"), "{site:?}");
    }
    // What PyTorch cannot see: cuBLAS's own workspaces and CuPy's 64 MiB.
    let unseen: Vec<_> = ours.segments.iter().filter(|s| !theirs.contains(&(s.address, s.total_size))).collect();
    let by_lib = |lib: &str| -> u64 {
        unseen.iter().filter(|s| asker(&ours, s.frames).1.contains(lib)).map(|s| s.total_size).sum()
    };
    assert_eq!(by_lib("libcublas"), 2 * 64 * MIB + 2 * 128 * 1024 + 2 * 1024);
    assert_eq!(by_lib("cupy"), 64 * MIB);
    assert_eq!(unseen.iter().map(|s| s.total_size).sum::<u64>(), by_lib("libcublas") + by_lib("cupy"));
    // The driver's count for the process covers our segments and more (context, kernels).
    let reserved: u64 = ours.segments.iter().map(|s| s.total_size).sum();
    let held = ours.device_info()[0].process_used_bytes.unwrap();
    let torch_reserved: u64 = torch.segments.iter().map(|s| s.total_size).sum();
    assert!(torch_reserved < reserved && reserved < held, "{torch_reserved} < {reserved} < {held}");
}

/// The `total_reserved` and `segments` lines of `_memory_viz.py stats` (PyTorch's own code,
/// vendored in third_party/pytorch) on a snapshot file.
fn memory_viz_stats(path: &Path) -> (String, String) {
    let text = testkit::memory_viz(path, "stats");
    let line =
        |key: &str| text.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("{text}")).to_string();
    (line("segments: "), line("total_reserved: "))
}

#[test]
fn pytorchs_memory_viz_reads_what_capture_writes() {
    // Written here from a recorded event sequence, and written on the H100.
    let mut r = memscape_capture::Recorder::new(1000);
    for (k, size) in [3 * MIB, 5 * MIB, 7 * MIB].into_iter().enumerate() {
        r.record(memscape_capture::Event::new(
            memscape_capture::EventKind::SegmentAlloc,
            0,
            (k as u64 + 1) << 32,
            size,
        ));
    }
    r.record(memscape_capture::Event::new(memscape_capture::EventKind::SegmentFree, 0, 2 << 32, 0));
    let written = std::env::temp_dir().join(format!("memscape-viz-{}.pickle", std::process::id()));
    std::fs::write(&written, snapshot::write::to_pickle_bytes(&r.to_snapshot(&mut |_| None))).unwrap();
    for path in [written.clone(), data("pattern.pickle"), data("ours.pickle"), data("ring.pickle")] {
        let snap = snapshot::read(&std::fs::read(&path).unwrap()).unwrap().snapshot;
        let ours = snapshot::stats::summary(&snap);
        let (segments, reserved) = memory_viz_stats(&path);
        assert_eq!(segments, ours.segments.to_string(), "{}", path.display());
        assert_eq!(reserved, snapshot::stats::format_size(ours.total_reserved.into()), "{}", path.display());
    }
    assert_eq!(memory_viz_stats(&written), ("2".into(), "10.0MiB".into()));
    std::fs::remove_file(written).ok();
}

/// PyTorch's snapshot of the step merged with the driver capture of the same step: PyTorch's
/// segments once, with its Python frames; the 201,590,784 bytes it cannot see (cuBLAS's
/// workspaces and CuPy's 64 MiB) as segments outside its allocator, each by the library that
/// asked; the reserved total the capture's.
#[test]
fn merging_pytorchs_snapshot_with_the_capture_counts_each_byte_once() {
    use snapshot::merge::{is_outside, merge_capture};
    let torch = load("torch.pickle.gz");
    let ours = load("ours.pickle");
    let (m, what) = merge_capture(&torch, &ours);
    let mine: Vec<_> = m.segments.iter().filter(|s| !is_outside(&m, s)).collect();
    assert_eq!(mine.len(), torch.segments.len(), "PyTorch's segments, once");
    assert_eq!(what.inside + what.outside.len(), ours.segments.len());
    let py_blocks = |snap: &Snapshot| -> usize {
        let py = |b: &snapshot::Block| frames(snap, b.frames).iter().any(|f| f.1.ends_with(".py"));
        snap.segments.iter().flat_map(|s| &s.blocks).filter(|b| py(b)).count()
    };
    assert!(py_blocks(&torch) > 0);
    assert_eq!(py_blocks(&m), py_blocks(&torch), "PyTorch's blocks keep their Python frames");
    let outside: Vec<_> = m.segments.iter().filter(|s| is_outside(&m, s)).collect();
    let by_lib = |lib: &str| -> u64 {
        outside.iter().filter(|s| asker(&m, s.blocks[0].frames).1.contains(lib)).map(|s| s.total_size).sum()
    };
    let unseen: u64 = outside.iter().map(|s| s.total_size).sum();
    assert_eq!(unseen, 201_590_784);
    assert_eq!(by_lib("libcublas"), 2 * 64 * MIB + 2 * 128 * 1024 + 2 * 1024);
    assert_eq!(by_lib("cupy"), 64 * MIB);
    let total = |s: &Snapshot| s.segments.iter().map(|s| s.total_size).sum::<u64>();
    assert_eq!(total(&m), total(&ours), "the capture's reserved total");
    assert!(total(&torch) < total(&m));
    // The driver's description of the device (NVML's name, memory and what the process held)
    // is kept: PyTorch's snapshot has none, and without it the summary and the doctor lose the
    // device's capacity (a run under --torch lost it on an H200).
    assert!(torch.device_info().is_empty());
    let gpu = &m.device_info()[..];
    assert_eq!(gpu, &ours.device_info()[..]);
    assert_eq!((gpu[0].name.as_str(), gpu[0].process_used_bytes), ("NVIDIA H100 80GB HBM3", Some(3_760_193_536)));
    // The outside allocations' own events come and go in the timeline, woven into PyTorch's
    // trace by time: PyTorch's entries unchanged and in order, the driver's marked outside.
    use snapshot::merge::is_outside_entry;
    let (t, mt) = (torch.trace(0), m.trace(0));
    let theirs: Vec<usize> = (0..mt.len()).filter(|&i| !is_outside_entry(&m, mt, i)).collect();
    assert_eq!(theirs.len(), t.len());
    assert!(theirs.iter().enumerate().all(|(k, &i)| mt.entry(i) == t.entry(k)), "PyTorch's entries as they were");
    let woven = mt.len() - t.len();
    assert_eq!(woven, what.events);
    assert!(woven > 0);
    // Each outside entry sits between PyTorch's entries of its time.
    for i in (0..mt.len()).filter(|&i| is_outside_entry(&m, mt, i)) {
        let at = mt.time_us(i).unwrap();
        let before = (0..i).rev().find(|&j| !is_outside_entry(&m, mt, j));
        let after = (i + 1..mt.len()).find(|&j| !is_outside_entry(&m, mt, j));
        assert!(
            before.is_none_or(|j| mt.time_us(j).unwrap() <= at) && after.is_none_or(|j| mt.time_us(j).unwrap() >= at)
        );
    }
    // And the timeline ends with PyTorch's memory and the outside memory alive at exit.
    use snapshot::timeline::{Timeline, TimelineKind};
    let alive_outside: u64 = outside
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == snapshot::BlockState::ActiveAllocated)
        .map(|b| b.size)
        .sum();
    let (tl, mtl) = (Timeline::build(&torch, 0, TimelineKind::Blocks), Timeline::build(&m, 0, TimelineKind::Blocks));
    assert_eq!(mtl.final_bytes(), tl.final_bytes() + alive_outside);
    assert!(mtl.peak_bytes() > tl.peak_bytes());
    // The categories give that memory its own category, and PyTorch's memory the ones it had.
    use snapshot::categories::{analyze, Category};
    let rules = Default::default();
    let (cats, mcats) = (analyze(&torch, &tl, &rules), analyze(&m, &mtl, &rules));
    let (end, mend) = (cats.bytes_at(&tl, tl.n_steps() - 1), mcats.bytes_at(&mtl, mtl.n_steps() - 1));
    let k = Category::OutsideAllocator.index();
    assert_eq!((end[k], mend[k]), (0, alive_outside));
    assert_eq!(mend.iter().sum::<u64>(), mtl.final_bytes());
    let theirs = |b: &[u64]| b.iter().enumerate().filter(|&(i, _)| i != k).map(|(_, b)| *b).collect::<Vec<_>>();
    assert_eq!(theirs(&mend), theirs(&end), "PyTorch's memory keeps its categories");
    // Written and read again (by our reader and by PyTorch's _memory_viz.py), the same.
    let path = std::env::temp_dir().join(format!("memscape-merged-{}.pickle", std::process::id()));
    std::fs::write(&path, snapshot::write::to_pickle_bytes(&m)).unwrap();
    let back = snapshot::read(&std::fs::read(&path).unwrap()).unwrap();
    assert!(back.warnings.is_empty(), "our own mark is no unknown key: {:?}", back.warnings);
    let back = back.snapshot;
    assert_eq!(back.segments.iter().filter(|s| is_outside(&back, s)).count(), outside.len());
    let (segments, reserved) = memory_viz_stats(&path);
    assert_eq!(segments, m.segments.len().to_string());
    assert_eq!(reserved, snapshot::stats::format_size(total(&ours).into()));
    std::fs::remove_file(&path).unwrap();
}
