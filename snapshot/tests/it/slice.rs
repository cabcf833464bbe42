//! `slice`: a window of a recording as a snapshot of its own, checked on every corpus file
//! against the whole file's analyses and against brute force over the whole file's elements.

use std::collections::{BTreeMap, BTreeSet};

use snapshot::slice::{self, Window};
use snapshot::state::{AllocatorState, StateIndex};
use snapshot::timeline::{Timeline, TimelineKind};
use snapshot::Action;
use snapshot::Snapshot;

/// The windows tried on a device of `n` entries: its last third, its middle half, and the
/// middle half of its time span where it has times.
fn windows(snap: &Snapshot, device: usize) -> Vec<Window> {
    let t = snap.trace(device);
    let n = t.len();
    let mut out = vec![Window::Last(n / 3), Window::Entries { start: n / 4, end: Some(3 * n / 4) }];
    if let (Some(a), Some(b)) = (t.time_us(0), t.time_us(n - 1)) {
        let q = (b - a) / 4;
        out.push(Window::Time { from: Some(a + q), to: Some(b - q) });
    }
    out
}

/// Live bytes after entry `i` of the whole file (`None`: before its first entry), summed over
/// its timeline's elements one by one.
fn brute_force_after(tl: &Timeline, i: Option<u32>) -> u64 {
    tl.elements()
        .iter()
        .filter(|e| match i {
            Some(i) => e.alloc_entry.is_none_or(|a| a <= i) && e.free_entry.is_none_or(|f| f > i),
            None => e.alloc_entry.is_none(),
        })
        .map(|e| e.size)
        .sum()
}

/// What of an allocator state a window must reproduce: the bytes, the segments and the live
/// blocks by address with their requested bytes. (Not whether a free is pending: a block
/// allocated before the window and pending when it ends is written as allocated, so that
/// PyTorch's viewer draws it.)
type StateKey = (u64, u64, Vec<(u64, u64)>, Vec<(u64, u64)>);
fn key(s: &AllocatorState) -> StateKey {
    let segs = s.segments.iter().map(|g| (g.address, g.size)).collect();
    let blocks = s
        .segments
        .iter()
        .flat_map(|g| &g.blocks)
        .chain(&s.orphan_blocks)
        .map(|b| (b.address, b.requested_size))
        .collect();
    (s.reserved_bytes, s.allocated_bytes, segs, blocks)
}

#[test]
fn a_window_draws_and_replays_as_the_whole_file_does_over_its_entries() {
    let mut checked = 0;
    for (name, bytes) in testkit::files() {
        let snap = snapshot::read(&bytes).unwrap().snapshot;
        for d in snap.devices().into_iter().filter(|&d| snap.trace(d).len() >= 8) {
            let whole = Timeline::build(&snap, d, TimelineKind::Blocks);
            let whole_state = StateIndex::build(&snap, d);
            for w in windows(&snap, d) {
                let (cut, what) = slice::slice(&snap, &w, &[d], &name).unwrap();
                let r = what.ranges[0];
                if r.start == r.end {
                    continue;
                }
                let at = |i: usize| format!("{name} device {d}, {w} (entries {}..{}): {i}", r.start, r.end);
                // The peak: the whole file's highest total over the window's entries, the state
                // before its first entry included.
                let tl = Timeline::build(&cut, d, TimelineKind::Blocks);
                let before = r.start.checked_sub(1).map(|i| whole.total_after_entry(i as u32));
                let expected = (r.start..r.end)
                    .map(|i| whole.total_after_entry(i as u32))
                    .chain(before.or(Some(whole.initial_bytes())))
                    .max()
                    .unwrap();
                assert_eq!(tl.peak_bytes(), expected, "{}", at(0));
                // Brute force at a sample of entries and at the window's own peak.
                let peak_entry = tl.step_entry(tl.peak_step()).unwrap_or(0) as usize;
                let step = ((r.end - r.start) / 40).max(1);
                for j in (0..r.end - r.start).step_by(step).chain([peak_entry, r.end - r.start - 1]) {
                    let i = (r.start + j) as u32;
                    assert_eq!(tl.total_after_entry(j as u32), brute_force_after(&whole, Some(i)), "{}", at(j));
                }
                // The allocator state at the window's first event is the whole file's there.
                let state = StateIndex::build(&cut, d);
                let first = state.state_after(&cut, Some(0));
                assert_eq!(key(&first), key(&whole_state.state_after(&snap, Some(r.start))), "{}", at(0));
                // Replayed forward over the window, that state ends as the slice's segments.
                assert_eq!(forward(&first, &cut, d), ends(&cut, d), "{}", at(0));
                checked += 1;
            }
        }
    }
    assert!(checked >= testkit::if_full(20, 8), "{checked} windows checked");
}

/// Addresses of the live blocks and segments after replaying the window's entries forward
/// from `first` (the state after its first entry).
fn forward(first: &AllocatorState, cut: &Snapshot, d: usize) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let mut blocks: BTreeSet<u64> =
        first.segments.iter().flat_map(|g| &g.blocks).chain(&first.orphan_blocks).map(|b| b.address).collect();
    let mut segs: BTreeMap<u64, u64> = first.segments.iter().map(|g| (g.address, g.size)).collect();
    let t = cut.trace(d);
    for i in 1..t.len() {
        let (a, size) = (t.addr(i), t.size(i));
        match t.action(i) {
            Action::Alloc => {
                blocks.insert(a);
            }
            Action::Free | Action::FreeCompleted => {
                blocks.remove(&a);
            }
            Action::SegmentAlloc | Action::SegmentMap => {
                segs.insert(a, size);
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                segs.remove(&a);
            }
            _ => {}
        }
    }
    (blocks, segs.into_keys().collect())
}

/// Addresses of the live blocks and segments the slice's own segments list.
fn ends(cut: &Snapshot, d: usize) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let end = StateIndex::build(cut, d).state_after(cut, Some(usize::MAX));
    (
        end.segments.iter().flat_map(|g| &g.blocks).chain(&end.orphan_blocks).map(|b| b.address).collect(),
        end.segments.iter().map(|g| g.address).collect(),
    )
}

#[test]
fn a_slice_written_and_read_back_is_the_window_and_says_what_it_is_a_window_of() {
    let Some(bytes) = testkit::read_or_skip("pt25-cs336-fullstep-annotations.pickle") else { return };
    let snap = snapshot::read(&bytes).unwrap().snapshot;
    let n = snap.trace(0).len();
    let w = Window::Entries { start: n / 3, end: Some(2 * n / 3) };
    let (cut, _) = slice::slice(&snap, &w, &[0], "run.pickle").unwrap();
    let read = snapshot::read(&snapshot::write::to_pickle_bytes(&cut)).unwrap();
    assert!(read.warnings.is_empty(), "{:?}", read.warnings);
    let (a, b) = (snapshot::stats::summary(&cut), snapshot::stats::summary(&read.snapshot));
    assert_eq!(a, b);
    let info = b.window.expect("the window is named");
    assert_eq!(info.source, "run.pickle");
    assert_eq!(info.rule, format!("entries {}..{}", n / 3, 2 * n / 3));
    assert_eq!(info.ranges, vec![slice::Range { device: 0, start: n / 3, end: 2 * n / 3, of: n }]);
    // Its categories are those of the window it holds.
    let rules = snapshot::categories::Compiled::default();
    let tl = Timeline::build(&read.snapshot, 0, TimelineKind::Blocks);
    let cats = snapshot::categories::analyze(&read.snapshot, &tl, &rules).report(&tl, rules.rules());
    assert_eq!(cats.at_peak.iter().map(|c| c.bytes).sum::<u64>(), tl.peak_bytes());
}

#[test]
fn windows_are_chosen_by_entries_time_and_annotation_and_refused_with_a_reason() {
    let Some(bytes) = testkit::read_or_skip("pt25-cs336-fullstep-annotations.pickle") else { return };
    let snap = snapshot::read(&bytes).unwrap().snapshot;
    let t = snap.trace(0);
    let n = t.len();
    let r = slice::resolve(&snap, 0, &Window::Last(10)).unwrap();
    assert_eq!((r.start, r.end, r.of), (n - 10, n, n));
    assert_eq!(slice::resolve(&snap, 0, &Window::Last(n + 5)).unwrap().start, 0);
    let r = slice::resolve(&snap, 0, &Window::Entries { start: n + 1, end: None }).unwrap();
    assert_eq!((r.start, r.end), (n, n), "a start past the trace keeps none of it");
    let e = slice::resolve(&snap, 0, &Window::Entries { start: 20, end: Some(10) }).unwrap_err();
    assert!(e.contains("the end comes before the start"), "{e}");
    // Time: the entries from the first at or after `from` to the last at or before `to`.
    let (from, to) = (t.time_us(100).unwrap(), t.time_us(200).unwrap());
    let r = slice::resolve(&snap, 0, &Window::Time { from: Some(from), to: Some(to) }).unwrap();
    assert!(t.time_us(r.start).unwrap() >= from && t.time_us(r.end - 1).unwrap() <= to);
    assert!(r.start == 0 || t.time_us(r.start - 1).unwrap() < from);
    assert!(r.end == n || t.time_us(r.end).unwrap() > to);
    // An annotation: from its START to the END after it, and the slice keeps that pair.
    let anns = snap.external_annotations.as_deref().unwrap();
    let first = anns.iter().find(|a| snap.str(a.stage) == "START" && a.device == 0).unwrap();
    let name = snap.str(first.name).to_string();
    let end =
        anns.iter().find(|a| snap.str(a.stage) == "END" && snap.str(a.name) == name && a.time_us >= first.time_us);
    let w = Window::Annotation(name.clone());
    let r = slice::resolve(&snap, 0, &w).unwrap();
    assert!(r.end > r.start);
    assert!(t.time_us(r.start).unwrap() >= first.time_us);
    if let Some(end) = end {
        assert!(t.time_us(r.end - 1).unwrap() <= end.time_us);
    }
    let (cut, _) = slice::slice(&snap, &w, &[0], "f").unwrap();
    let kept = cut.external_annotations.unwrap();
    assert!(kept
        .iter()
        .all(|a| a.time_us >= t.time_us(r.start).unwrap() && a.time_us <= t.time_us(r.end - 1).unwrap()));
    let e = slice::resolve(&snap, 0, &Window::Annotation("no such".into())).unwrap_err();
    assert!(e.contains("no annotation \"no such\""), "{e}");
    assert!(slice::devices(&snap, Some(7)).unwrap_err().contains("device 7 has no trace"));
}

#[test]
fn an_annotation_of_device_minus_one_is_on_every_device_as_the_categories_and_diff_read_it() {
    // PyTorch records -1 for a record_function on a thread with no current device.
    let mut snap = snapshot::synth::generate(&snapshot::synth::Options {
        seed: 3,
        target_entries: 6_000,
        devices: 2,
        ..Default::default()
    });
    for a in snap.external_annotations.iter_mut().flatten() {
        a.device = -1;
    }
    // The optimizer step's: it allocates (the first zero_grad frees nothing).
    let name = snap.external_annotations.iter().flatten().map(|a| snap.str(a.name)).find(|n| n.ends_with(".step"));
    let name = name.unwrap().to_string();
    for d in [0, 1] {
        let r =
            slice::resolve(&snap, d, &Window::Annotation(name.clone())).unwrap_or_else(|e| panic!("device {d}: {e}"));
        assert!(r.end > r.start, "device {d}: {r:?}");
        let (cut, _) = slice::slice(&snap, &Window::Annotation(name.clone()), &[d], "f").unwrap();
        assert!(!cut.external_annotations.unwrap().is_empty(), "device {d}: the slice keeps the annotation");
    }
}

/// `bytes` read keeping each trace's last `n` entries, fed in chunks of 1 to 64 KiB.
fn read_last(bytes: &[u8], n: u64, rng: &mut crate::Rng) -> snapshot::Snapshot {
    read_windowed(bytes, snapshot::Limits { keep_last_entries: Some(n), ..Default::default() }, rng)
}

fn read_windowed(bytes: &[u8], limits: snapshot::Limits, rng: &mut crate::Rng) -> snapshot::Snapshot {
    let mut l = snapshot::Loader::new(limits);
    l.set_size_hint(bytes.len() as u64);
    let mut at = 0;
    while at < bytes.len() {
        let k = (1 + rng.below(64 << 10) as usize).min(bytes.len() - at);
        l.feed(&bytes[at..at + k]).unwrap();
        at += k;
    }
    l.finish().unwrap().snapshot
}

#[test]
fn a_windowed_read_holds_what_slicing_the_whole_file_keeps() {
    let mut rng = crate::Rng(7);
    let mut checked = 0;
    for (name, bytes) in testkit::files() {
        let whole = snapshot::read(&bytes).unwrap().snapshot;
        let longest = (0..whole.n_trace_lists()).map(|d| whole.trace(d).len()).max().unwrap_or(0);
        if longest == 0 {
            continue;
        }
        for n in [1, 1000, longest / 3, longest + 1] {
            let read = read_last(&bytes, n as u64, &mut rng);
            let (cut, what) =
                slice::slice(&whole, &Window::Last(n), &(0..whole.n_trace_lists()).collect::<Vec<_>>(), &name).unwrap();
            for d in 0..whole.n_trace_lists() {
                let (a, b) = (read.trace(d), cut.trace(d));
                assert_eq!(a.len(), b.len(), "{name} device {d}, last {n}");
                assert_eq!(a.dropped() as usize, what.ranges[d].start, "{name} device {d}, last {n}");
                for i in 0..a.len() {
                    assert_eq!(a.entry(i), b.entry(i), "{name} device {d}, last {n}: entry {i}");
                }
            }
            assert_eq!(read.segments.len(), cut.segments.len(), "{name}, last {n}");
            assert!(read.segments == cut.segments, "{name}, last {n}: segments differ");
            let mut marked = read.clone();
            slice::mark_window(&mut marked, &name, &Window::Last(n));
            let (sa, sb) = (snapshot::stats::summary(&marked), snapshot::stats::summary(&cut));
            assert_eq!(
                sa.window.as_ref().unwrap().ranges,
                sb.window.as_ref().unwrap().ranges.iter().copied().filter(|r| r.of > 0).collect::<Vec<_>>(),
                "{name}"
            );
            assert_eq!(
                snapshot::stats::Summary { window: None, ..sa },
                snapshot::stats::Summary { window: None, ..sb },
                "{name}, last {n}"
            );
            checked += 1;
        }
    }
    assert!(checked >= testkit::if_full(48, 20), "{checked}");
}

/// Segments in a stable order (a read keeps the file's; a slice lists them device by device).
fn sorted(mut s: Vec<snapshot::Segment>) -> Vec<snapshot::Segment> {
    s.sort_by_key(|g| (g.device, g.address));
    s
}

#[test]
fn a_windowed_read_of_a_range_holds_what_slicing_the_whole_file_keeps() {
    let mut rng = crate::Rng(11);
    let mut checked = 0;
    for (name, bytes) in testkit::files() {
        let whole = snapshot::read(&bytes).unwrap().snapshot;
        let n = (0..whole.n_trace_lists()).map(|d| whole.trace(d).len()).max().unwrap_or(0);
        if n == 0 {
            continue;
        }
        let all: Vec<usize> = (0..whole.n_trace_lists()).collect();
        for (a, b) in [(0, n / 2), (n / 4, 3 * n / 4), (n / 3, n), (n - 1, n + 5), (5, 6)] {
            let limits = snapshot::Limits { keep_entries: Some((a as u64, b as u64)), ..Default::default() };
            let read = read_windowed(&bytes, limits, &mut rng);
            let (cut, what) = slice::slice(&whole, &Window::Entries { start: a, end: Some(b) }, &all, &name).unwrap();
            let at = format!("{name}, entries {a}..{b}");
            for d in 0..whole.n_trace_lists() {
                let (x, y) = (read.trace(d), cut.trace(d));
                assert_eq!(x.len(), y.len(), "{at}: device {d}");
                assert_eq!(x.dropped() as usize, what.ranges[d].start.min(whole.trace(d).len()), "{at}: device {d}");
                for i in 0..x.len() {
                    assert_eq!(x.entry(i), y.entry(i), "{at}: device {d} entry {i}");
                }
            }
            let (x, y) = (sorted(read.segments.clone()), sorted(cut.segments.clone()));
            assert_eq!(x.len(), y.len(), "{at}");
            for (s, t) in x.iter().zip(&y) {
                assert!(s == t, "{at}: segment {:#x} differs:\n{s:?}\n{t:?}", s.address);
            }
            checked += 1;
        }
    }
    assert!(checked >= testkit::if_full(60, 25), "{checked}");
}
