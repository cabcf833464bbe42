//! What every fuzz target checks once the reader accepted an input: the analyses (the
//! categories and what-if among them) run on the model without panicking, and the writer's
//! output reads back to a fixpoint. The targets of the layers above the replay add the doctor
//! and the flame graph ([`doctor`]; the allocator replay too), slices ([`slices`]), the diff and the budget check
//! ([`compare`]). Built with overflow checks on (`Cargo.toml`): a size from the file summed
//! without saturating is a crash.

use snapshot::categories::{self, Categories, Category, Compiled};
use snapshot::check::{check, Budgets};
use snapshot::diff::{diff, profile, Align, Profile, SiteMode};
use snapshot::flame::{flame, peak, At, FlameQuery};
use snapshot::slice::Window;
use snapshot::state::StateIndex;
use snapshot::timeline::{LodQuery, Timeline, TimelineKind};
use snapshot::Snapshot;

pub fn exercise(loaded: &snapshot::Loaded) {
    let snap = &loaded.snapshot;
    let _ = snapshot::stats::summary(snap);
    for d in snap.devices().into_iter().take(4) {
        for kind in [TimelineKind::Blocks, TimelineKind::Segments] {
            let t = Timeline::build(snap, d, kind);
            let n = f64::from(t.n_steps());
            let _ = t.lod(&LodQuery { start: -1.0, end: n + 1.0, columns: 64, min_bytes: t.peak_bytes() / 64 });
            let _ = t.element_at(t.peak_step(), t.peak_bytes() / 2);
            let _ = t.element_near(t.peak_step(), t.peak_bytes() / 2, t.peak_bytes() / 100);
            if kind == TimelineKind::Blocks {
                // The categories and the what-if predictions (the layers of the forward passes).
                let cats = snapshot::categories::analyze(snap, &t, &snapshot::categories::Compiled::default());
                let _ = snapshot::doctor::what_if(snap, &t, &cats, &snapshot::doctor::Change::DEFAULTS);
            }
        }
        let st = snapshot::state::StateIndex::build(snap, d);
        let len = snap.trace(d).len();
        let _ = st.state_after(snap, None);
        let _ = st.state_after(snap, Some(len / 2));
        let _ = snapshot::state::merged_events(snap.trace(d));
    }
    // One round trip normalizes (dict key order inside unknown keys, frames written in
    // canonical order); after it, writing and reading must be a fixpoint.
    let once = snapshot::write::to_pickle_bytes(snap);
    let back = snapshot::read(&once).expect("our own pickle must read back");
    let twice = snapshot::write::to_pickle_bytes(&back.snapshot);
    let again = snapshot::read(&twice).expect("our own pickle must read back");
    let thrice = snapshot::write::to_pickle_bytes(&again.snapshot);
    assert!(twice == thrice, "the writer does not reach a fixpoint");
}

/// Feeds `body` to `l` in chunks of 1 to 97 bytes whose sizes follow from `seed`; stops at the
/// first error.
pub fn feed_chunked(l: &mut snapshot::Loader, body: &[u8], seed: u8) -> Result<(), snapshot::ReadError> {
    let mut rest = body;
    let mut k = u32::from(seed) | 1;
    while !rest.is_empty() {
        k = k.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let n = ((k >> 16) as usize % 97 + 1).min(rest.len());
        l.feed(&rest[..n])?;
        rest = &rest[n..];
    }
    Ok(())
}

/// At most this many devices of a file are analysed (a file may name thousands).
const DEVICES: usize = 4;

/// The blocks timeline and categories of `device`.
fn analysed(snap: &Snapshot, device: usize) -> (Timeline, Categories) {
    let tl = Timeline::build(snap, device, TimelineKind::Blocks);
    let cats = categories::analyze(snap, &tl, &Compiled::default());
    (tl, cats)
}

/// The doctor's report on each device (every OOM, the peak, the end, the what-if) and the
/// flame graph at the peak, before the recording, at a step `seed` picks and over a window,
/// with and without PyTorch's frame filter: no panic, and each graph's parts add up within it.
pub fn doctor(snap: &Snapshot, seed: u8) {
    for d in snap.devices().into_iter().take(DEVICES) {
        let (tl, cats) = analysed(snap, d);
        let index = StateIndex::build(snap, d);
        // The allocator replay: counts that hold together.
        let a = snapshot::simulate::replay(snap, d);
        assert!(a.placed_as_recorded <= a.allocations && a.segment_events_matched <= a.segment_events);
        let report = snapshot::doctor::diagnose(snap, &tl, &cats, &index);
        assert_eq!(report.ooms.len(), snapshot::doctor::oom_entries(snap, d).len());
        let ooms = snapshot::doctor::oom_entries(snap, d);
        let again = snapshot::doctor::diagnose_ooms(snap, &tl, &cats, &index, &report.what_if, &ooms);
        assert_eq!(again.len(), ooms.len());
        let n = tl.n_steps();
        let step = u32::from(seed) * n / 255;
        let (lo, hi) = (step / 2, step.saturating_add(n / 3 + 1));
        for all_frames in [false, true] {
            for at in [peak(&tl), At::Before, At::Step(step), At::Window(lo, hi), At::Window(0, n)] {
                for q in [
                    FlameQuery::whole(at, all_frames),
                    FlameQuery { at, all_frames, min_share: u64::from(seed % 64) + 1, lines: usize::from(seed % 8) },
                ] {
                    let f = flame(snap, &tl, &q);
                    for node in &f.nodes {
                        assert!(node.self_weight <= node.weight && node.pruned <= node.weight, "{node:?}");
                    }
                    assert!(f.lines.len() <= q.lines, "{} lines for {}", f.lines.len(), q.lines);
                }
            }
        }
    }
}

/// The windows of `device` that `seed` picks: the last entries, a range, a time span, an
/// annotation's span.
fn windows(snap: &Snapshot, device: usize, seed: u8) -> Vec<Window> {
    let t = snap.trace(device);
    let n = t.len();
    let k = usize::from(seed);
    let mut out = vec![
        Window::Last(n * (k % 16) / 15),
        Window::Entries { start: n * (k % 7) / 8, end: Some(n * (k % 5 + 4) / 8) },
        Window::Entries { start: k % 8, end: None },
    ];
    let times: Vec<i64> = (0..n).filter_map(|i| t.time_us(i)).collect();
    if let (Some(&a), Some(&b)) = (times.iter().min(), times.iter().max()) {
        let q = (i128::from(b) - i128::from(a)) / 4;
        let at = |x: i128| i64::try_from(x).unwrap_or(i64::MAX);
        out.push(Window::Time { from: Some(at(i128::from(a) + q)), to: Some(at(i128::from(b) - q)) });
    }
    if let Some(a) = snap.external_annotations.iter().flatten().nth(k % 4) {
        out.push(Window::Annotation(snap.str(a.name).to_string()));
    }
    out
}

/// Slices of every device (and of each device alone) by the windows `seed` picks: no panic,
/// each range inside its trace, and each slice a snapshot of its own that every analysis
/// reads and that writes and reads back.
pub fn slices(snap: &Snapshot, seed: u8) {
    let Ok(all) = snapshot::slice::devices(snap, None) else { return };
    let mut sets: Vec<Vec<usize>> = all.iter().take(DEVICES).map(|&d| vec![d]).collect();
    sets.push(all.iter().copied().take(DEVICES).collect());
    for devices in sets {
        let Some(&first) = devices.first() else { continue };
        for window in windows(snap, first, seed) {
            let Ok((cut, sliced)) = snapshot::slice::slice(snap, &window, &devices, "fuzz") else { continue };
            for r in &sliced.ranges {
                assert!(r.start <= r.end && r.end <= r.of, "{window}: {r:?}");
            }
            let _ = snapshot::stats::summary(&cut);
            if let Some(d) = cut.devices().first() {
                let (tl, cats) = analysed(&cut, *d);
                let _ = snapshot::doctor::diagnose(&cut, &tl, &cats, &StateIndex::build(&cut, *d));
            }
            let bytes = snapshot::write::to_pickle_bytes(&cut);
            let back = snapshot::read(&bytes).expect("a slice's pickle must read back");
            assert_eq!(back.snapshot.n_trace_lists(), cut.n_trace_lists());
        }
    }
}

/// The profile of each device the diff and the check compare.
pub fn profiles(snap: &Snapshot) -> Vec<Profile> {
    snap.devices()
        .into_iter()
        .take(DEVICES)
        .map(|d| {
            let (tl, cats) = analysed(snap, d);
            profile(snap, &tl, &cats)
        })
        .collect()
}

/// `a` against `b` under every alignment and both keys of call sites, and the budget check of
/// `a` with `b` as its baseline (limits from `seed`): no panic, a profile against itself
/// changes nothing, and the check's verdict is its budgets'.
pub fn compare(a: &Profile, b: &Profile, seed: u8) {
    for align in Align::ALL {
        for mode in [SiteMode::Frame, SiteMode::Stack] {
            let same = diff(a, a, align, mode);
            assert!(same.sites.is_empty() && same.allocs.is_empty(), "{align:?}: a profile differs from itself");
            assert!(same.segments_only_a.is_empty() && same.segments_only_b.is_empty());
            let d = diff(a, b, align, mode);
            assert_eq!(d.peak, (a.peak_bytes, b.peak_bytes));
            let _ = diff(b, a, align, mode);
        }
    }
    let shift = u32::from(seed % 64);
    let budgets = Budgets {
        max_peak: Some(a.peak_bytes >> (shift % 8)),
        max_growth_pct: Some(f64::from(seed)),
        max_category: Category::ALL.iter().map(|&c| (c, u64::MAX >> shift)).collect(),
    };
    for baseline in [b, a] {
        let out = check(a, Some(baseline), &budgets).expect("every budget can be checked");
        assert_eq!(out.passed, out.budgets.iter().all(|r| r.passed));
        assert!(out.grown.len() <= snapshot::check::GROWN);
    }
    assert!(check(a, None, &Budgets { max_growth_pct: None, ..budgets }).is_ok());
}
