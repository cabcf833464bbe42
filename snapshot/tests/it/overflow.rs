//! Sizes from a hostile file: segments, blocks and trace entries of sizes near `u64::MAX`,
//! many alive at once, so that every sum of them passes `u64::MAX`. Every analysis completes
//! (tests run with overflow checks on, so an unchecked add panics) and its figures saturate:
//! a total is `u64::MAX`, never wrapped to a small number. Each analysis runs on the model as
//! built and on its pickle read back.

use snapshot::categories::{self, Category, Compiled, Rules};
use snapshot::check::{check, Budgets};
use snapshot::diff::{diff, profile, Align, Profile, SiteMode};
use snapshot::flame::{flame, peak, At, FlameQuery};
use snapshot::pools::{envelope_timeline, pools};
use snapshot::slice::{self, Window};
use snapshot::state::StateIndex;
use snapshot::timeline::{LodQuery, Timeline, TimelineKind};
use snapshot::{Action, Annotation, Block, BlockState, Entry, PoolId, Segment, Snapshot, StackId, Trace};

const MAX: u64 = u64::MAX;
/// A size whose rounding to 512 bytes passes `u64::MAX`.
const HUGE: u64 = MAX - 100;
/// Half of everything: three alive at once pass `u64::MAX`.
const HALF: u64 = MAX / 2;
/// The private pool of some segments and entries.
const POOL: PoolId = (1, 7);

fn block(size: u64, requested: u64, state: BlockState, frames: Option<StackId>) -> Block {
    Block { address: None, size, requested_size: Some(requested), state, frames, history: None, extras: Vec::new() }
}

fn segment(device: i64, address: u64, total_size: u64, pool: Option<PoolId>, blocks: Vec<Block>) -> Segment {
    Segment {
        device,
        address,
        total_size,
        allocated_size: Some(MAX),
        active_size: Some(MAX),
        requested_size: Some(MAX),
        stream: 0,
        segment_type: None,
        segment_pool_id: pool,
        is_expandable: None,
        frames: None,
        blocks,
        extras: Vec::new(),
    }
}

/// The hostile snapshot: device 0 with a training step's shape (a forward, a backward, an
/// AdamW step; a gradient and three blocks its size from before the recording, the blocks
/// with no stack, so that the persistent split matches them to a parameter and its two state
/// blocks), a private pool, an `oom`; and the host's pinned memory. Every size is near
/// `u64::MAX` or half of it. (Its totals are `u64::MAX` at every step, so the categories can
/// only see the gradient alive from the start: a category's bytes at a step follow the
/// totals.)
fn hostile() -> Snapshot {
    let mut s = Snapshot::default();
    let train = s.add_frame("train_step", "train.py", 42);
    let fwd = s.add_frame("forward", "model.py", 10);
    let call = s.add_frame("_call_impl", "torch/nn/modules/module.py", 1);
    let bwd = s.add_frame("torch::autograd::Engine::evaluate_function", "??", 0);
    let opt = s.add_frame("_multi_tensor_adamw", "/venv/lib/python3.12/site-packages/torch/optim/adamw.py", 300);
    let fwd = Some(s.add_stack(&[fwd, call, train]));
    let bwd = Some(s.add_stack(&[bwd, train]));
    let opt = Some(s.add_stack(&[opt, train]));
    use BlockState::{ActiveAllocated as Live, ActivePendingFree as Pending, Inactive as Free};
    s.segments = vec![
        // Parameters and AdamW's two state blocks each, from before the recording.
        segment(0, 0x1000_0000, MAX, None, (0..3).map(|_| block(HUGE, HUGE, Live, None)).collect()),
        // A gradient from before the recording (its stack is the backward's), kept.
        segment(0, 0x2000_0000, HUGE, None, vec![block(HUGE, HUGE, Live, bwd)]),
        // Cached: free inside the cache.
        segment(0, 0x3000_0000, MAX - 7, None, vec![block(MAX - 7, 0, Free, None), block(HALF, 0, Free, None)]),
        // A private pool's segment, its block alive with a rounding past `i64::MAX`.
        segment(
            0,
            0x4000_0000,
            MAX - 3,
            Some(POOL),
            vec![block(MAX - 3, 600, Live, fwd), block(HALF, HALF, Pending, fwd)],
        ),
        // A segment that runs past the end of the address space.
        segment(0, MAX - 4096, HALF, None, vec![block(HALF, HALF - 1, Live, fwd)]),
    ];
    let mut t = Trace::default();
    let mut time = 1_000_000i64;
    let mut push = |t: &mut Trace, action: Action, addr: u64, size: u64, frames: Option<StackId>| {
        let mut e = Entry::new(action, addr, size, 0);
        e.frames = frames;
        time += 10;
        e.time_us = Some(time);
        if (0x4000_0000..0x5000_0000).contains(&addr) {
            e.pool_id = Some(POOL);
        }
        t.push(&e);
        time
    };
    use Action::{Alloc, FreeCompleted, FreeRequested, Oom, SegmentAlloc, SegmentFree, SegmentMap, SegmentUnmap};
    // Forward: many allocations of half of everything, alive together.
    push(&mut t, SegmentAlloc, 0x5000_0000, MAX - 1, fwd);
    for k in 0..8u64 {
        push(&mut t, Alloc, 0x5000_0000 + k * 0x1000, HALF - k, fwd);
    }
    push(&mut t, SegmentMap, 0x4000_0000, MAX - 3, fwd);
    push(&mut t, Alloc, 0x4000_0000, MAX - 3, fwd);
    push(&mut t, Alloc, 0x4000_0000 + 0x1000, HALF, fwd);
    // An allocation that ends past the address space.
    push(&mut t, Alloc, MAX - 4096, HALF, fwd);
    // Backward: the activations freed.
    for k in 0..8u64 {
        push(&mut t, FreeRequested, 0x5000_0000 + k * 0x1000, HALF - k, bwd);
        push(&mut t, FreeCompleted, 0x5000_0000 + k * 0x1000, HALF - k, bwd);
    }
    push(&mut t, SegmentFree, 0x5000_0000, MAX - 1, bwd);
    // The optimizer's step: temporaries of everything, and a free of a block allocated before
    // the recording.
    let step_start = push(&mut t, SegmentAlloc, 0x6000_0000, MAX, opt);
    for k in 0..4u64 {
        push(&mut t, Alloc, 0x6000_0000 + k * 0x1000, MAX - k, opt);
    }
    for k in 0..4u64 {
        push(&mut t, FreeRequested, 0x6000_0000 + k * 0x1000, MAX - k, opt);
        push(&mut t, FreeCompleted, 0x6000_0000 + k * 0x1000, MAX - k, opt);
    }
    push(&mut t, FreeCompleted, 0x7000_0000, MAX - 50, opt);
    push(&mut t, SegmentUnmap, 0x6000_0000, MAX, opt);
    let step_end = push(&mut t, SegmentMap, 0x6000_0000, HALF, opt);
    // Out of memory, asking for everything with everything free.
    let mut oom = Entry::new(Oom, 0, MAX - 2, 0);
    oom.addr = None;
    oom.device_free = Some(MAX - 9);
    oom.time_us = Some(time + 10);
    oom.frames = fwd;
    t.push(&oom);
    let ann = |s: &mut Snapshot, stage: &str, time_us: i64| Annotation {
        stage: s.strings.intern(stage),
        name: s.strings.intern("Optimizer.step#AdamW.step"),
        device: 0,
        time_us,
        extras: Vec::new(),
    };
    let annotations = vec![ann(&mut s, "START", step_start - 1), ann(&mut s, "END", step_end + 1)];
    s.external_annotations = Some(annotations);
    s.device_traces = Some(vec![t]);
    // Pinned host memory.
    s.host_segments = Some(vec![
        segment(-1, 0x9000_0000, MAX - 1, None, vec![block(MAX - 1, MAX - 1, Live, fwd)]),
        segment(-1, 0xa000_0000, HALF, None, vec![block(HALF, HALF, Free, None)]),
    ]);
    let mut h = Trace::default();
    for k in 0..3u64 {
        let mut e = Entry::new(Alloc, 0xb000_0000 + k * 0x1000, HALF, 0);
        e.frames = fwd;
        h.push(&e);
    }
    s.host_traces = Some(h);
    s
}

/// The hostile snapshot as built, and its pickle read back.
fn both() -> Vec<(&'static str, Snapshot)> {
    let snap = hostile();
    let bytes = snapshot::write::to_pickle_bytes(&snap);
    let back = snapshot::read(&bytes).expect("its own pickle reads back").snapshot;
    assert_eq!(back.trace(0).len(), snap.trace(0).len());
    vec![("built", snap), ("read back", back)]
}

/// An ordinary run, to compare the hostile one with.
fn ordinary() -> Snapshot {
    snapshot::synth::generate(&snapshot::synth::Options { target_entries: 400, ..Default::default() })
}

/// The blocks timeline and categories of device 0.
fn analysed(snap: &Snapshot) -> (Timeline, categories::Categories) {
    let tl = Timeline::build(snap, 0, TimelineKind::Blocks);
    let cats = categories::analyze(snap, &tl, &Compiled::default());
    (tl, cats)
}

/// The profile of device 0 the diff and the check compare.
fn profiled(snap: &Snapshot) -> Profile {
    let (tl, cats) = analysed(snap);
    profile(snap, &tl, &cats)
}

#[test]
fn statistics_saturate() {
    for (what, snap) in both() {
        let s = snapshot::stats::summary(&snap);
        assert_eq!(s.total_reserved, MAX, "{what}");
        assert_eq!(s.total_allocated, MAX, "{what}");
        assert_eq!(s.free_external, MAX, "{what}");
        assert_eq!(s.free_internal, i64::MAX, "{what}");
        let d = s.devices.iter().find(|d| d.device == 0).expect("device 0");
        assert_eq!(d.reserved_bytes, MAX, "{what}");
        assert_eq!(d.timeline.peak_bytes, MAX, "{what}");
        assert_eq!(d.segment_timeline.peak_bytes, MAX, "{what}");
        assert_eq!(d.timeline_incl_private_pools.peak_bytes, MAX, "{what}");
        let host = s.host.as_ref().expect("the host's memory");
        assert_eq!(host.reserved_bytes, MAX, "{what}");
        assert_eq!(host.timeline.peak_bytes, MAX, "{what}");
        assert!(!snapshot::stats::format_size(i128::from(s.total_reserved)).is_empty());
    }
}

#[test]
fn timelines_saturate() {
    for (what, snap) in both() {
        for kind in [TimelineKind::Blocks, TimelineKind::Segments] {
            let tl = Timeline::build(&snap, 0, kind);
            assert_eq!(tl.peak_bytes(), MAX, "{what}, {kind:?}");
            // Each step's total is the sum of what is alive after it, up to `u64::MAX`: none
            // wraps to a small number.
            let sum = |alive: &dyn Fn(&snapshot::timeline::Element) -> bool| -> u64 {
                let s: u128 = tl.elements().iter().filter(|e| alive(e)).map(|e| u128::from(e.size)).sum();
                u64::try_from(s).unwrap_or(MAX)
            };
            for (s, &total) in tl.totals().iter().enumerate() {
                let s = s as u32;
                assert_eq!(total, sum(&|e| e.start <= s && s < e.end), "{what}, {kind:?}: step {s}");
            }
            assert_eq!(
                tl.initial_bytes(),
                sum(&|e| e.origin != snapshot::timeline::Origin::Traced),
                "{what}, {kind:?}"
            );
            // What the page asks of it: columns, their bands, hovers.
            let n = f64::from(tl.n_steps());
            for min_bytes in [0, 1 << 20, HALF, MAX] {
                let lod = tl.lod(&LodQuery { start: -1.0, end: n + 1.0, columns: 64, min_bytes });
                assert!(lod.columns.iter().any(|c| c.total_bytes == MAX), "{what}, {kind:?}");
                assert!(lod.columns.iter().all(|c| c.drawn_bytes.saturating_add(c.summarized_bytes) >= c.total_bytes));
            }
            for bytes in [0, HALF, MAX - 1, MAX] {
                let _ = tl.element_at(tl.peak_step(), bytes);
                let _ = tl.element_near(tl.peak_step(), bytes, MAX / 100);
            }
        }
    }
}

#[test]
fn private_pools_saturate() {
    for (what, snap) in both() {
        let tl = Timeline::build(&snap, 0, TimelineKind::Blocks);
        let p = pools(&snap, &tl);
        assert_eq!(p.pools.len(), 1, "{what}: {:?}", p.pools);
        let pool = &p.pools[0];
        assert_eq!(pool.pool_id, POOL);
        assert_eq!(pool.live_peak_bytes, MAX, "{what}");
        // The pool's segment runs to the end of the address space: the segments after it are
        // read as the pool's.
        assert_eq!(pool.reserved_peak_bytes, MAX, "{what}");
        assert_eq!(pool.final_reserved_bytes, MAX - 3, "{what}");
        assert_eq!(p.incl().peak_bytes, MAX, "{what}");
        let (env, pieces) = envelope_timeline(&snap, &tl);
        assert_eq!(pieces.len(), env.elements().len() - tl.elements().len(), "{what}");
        assert_eq!(env.peak_bytes(), MAX, "{what}");
    }
}

#[test]
fn categories_and_the_persistent_split_saturate() {
    for (what, snap) in both() {
        let tl = Timeline::build(&snap, 0, TimelineKind::Blocks);
        let rules = Rules::default();
        let cats = categories::analyze(&snap, &tl, &rules.compile().unwrap());
        let inf = cats.inference.as_ref().expect("blocks alive throughout, split");
        assert_eq!(inf.persistent_bytes, MAX, "{what}: {inf:?}");
        // AdamW, one gradient of their size: the lowest is the parameter, the others its state.
        assert_eq!(inf.state_blocks_per_parameter, Some(2), "{what}: {}", inf.summary);
        assert_eq!(inf.parameter_bytes, HUGE, "{what}");
        assert_eq!(inf.optimizer_state_bytes, MAX, "{what}");
        assert_eq!(cats.max[Category::OptimizerState.index()], MAX, "{what}");
        assert_eq!(cats.budget.total, MAX, "{what}: {:?}", cats.budget);
        let report = cats.report(&tl, &rules);
        assert!(!report.at_peak.is_empty(), "{what}");
        let n = tl.n_steps();
        assert_eq!(cats.columns(&tl, 0.0, f64::from(n), 16).len(), 16.min(n as usize), "{what}");
    }
}

#[test]
fn diffs_saturate() {
    let plain = ordinary();
    let normal = profiled(&plain);
    for (what, snap) in both() {
        let p = profiled(&snap);
        assert_eq!(p.peak_bytes, MAX, "{what}");
        assert_eq!(p.reserved_bytes, MAX, "{what}");
        assert!(p.sites.iter().all(|s| s.bytes > 0), "{what}");
        assert_eq!(p.sites.iter().map(|s| s.bytes).max(), Some(MAX), "{what}: {:?}", p.sites);
        for align in Align::ALL {
            for mode in [SiteMode::Frame, SiteMode::Stack] {
                let same = diff(&p, &p, align, mode);
                assert!(same.sites.iter().all(|s| s.delta() == 0), "{what}, {align:?}");
                let grew = diff(&normal, &p, align, mode);
                assert!(grew.sites.iter().any(|s| s.b == MAX), "{what}, {align:?}");
                let shrank = diff(&p, &normal, align, mode);
                assert!(shrank.sites.iter().any(|s| s.a == MAX), "{what}, {align:?}");
            }
        }
    }
}

#[test]
fn slices_saturate() {
    for (what, snap) in both() {
        let n = snap.trace(0).len();
        let (first, last) = (snap.trace(0).time_us(0), snap.trace(0).time_us(n - 2));
        for window in [
            Window::Last(n / 2),
            Window::Entries { start: n / 4, end: Some(3 * n / 4) },
            Window::Entries { start: 0, end: None },
            Window::Time { from: first.map(|t| t + 100), to: last },
            Window::Annotation("Optimizer.step#AdamW.step".into()),
        ] {
            let (cut, sliced) = slice::slice(&snap, &window, &[0], "hostile.pickle")
                .unwrap_or_else(|e| panic!("{what}, {window}: {e}"));
            assert_eq!(sliced.ranges.len(), 1, "{what}, {window}");
            // The slice is a snapshot of its own: every analysis runs on it.
            let s = snapshot::stats::summary(&cut);
            assert!(s.total_reserved >= HALF, "{what}, {window}: {}", s.total_reserved);
            let (tl, cats) = analysed(&cut);
            let _ = snapshot::doctor::diagnose(&cut, &tl, &cats, &StateIndex::build(&cut, 0));
            let back = snapshot::read(&snapshot::write::to_pickle_bytes(&cut)).expect("a slice reads back");
            assert_eq!(back.snapshot.trace(0).len(), cut.trace(0).len(), "{what}, {window}");
        }
    }
}

#[test]
fn the_doctor_saturates() {
    for (what, snap) in both() {
        let (tl, cats) = analysed(&snap);
        let report = snapshot::doctor::diagnose(&snap, &tl, &cats, &StateIndex::build(&snap, 0));
        assert_eq!(report.ooms.len(), 1, "{what}");
        let oom = &report.ooms[0];
        assert_eq!(oom.requested_bytes, MAX - 2, "{what}");
        assert_eq!(oom.device_free_bytes, Some(MAX - 9), "{what}");
        assert_eq!(oom.reserved_bytes, MAX, "{what}");
        assert_eq!(report.peak.peak_bytes, MAX, "{what}");
        assert!(!oom.why.is_empty(), "{what}");
        let again = snapshot::doctor::doctor(&snap, 0, &Compiled::default());
        assert_eq!(again.ooms.len(), 1, "{what}");
        let _ = snapshot::doctor::what_if(&snap, &tl, &cats, &snapshot::doctor::Change::DEFAULTS);
        let index = StateIndex::build(&snap, 0);
        let ooms =
            snapshot::doctor::diagnose_ooms(&snap, &tl, &cats, &index, &report.what_if, &[snap.trace(0).len() - 1]);
        assert_eq!(ooms.len(), 1, "{what}");
        let state = index.state_after(&snap, None);
        let _ = snapshot::layout::layout(&state, &snapshot::settings::settings(&snap, 0));
    }
}

#[test]
fn flame_graphs_saturate() {
    for (what, snap) in both() {
        let tl = Timeline::build(&snap, 0, TimelineKind::Blocks);
        let n = tl.n_steps();
        for all_frames in [false, true] {
            let at_peak = flame(&snap, &tl, &FlameQuery::whole(peak(&tl), all_frames));
            assert_eq!(at_peak.total(), MAX, "{what}: the root at the peak");
            assert!(at_peak.lines.iter().any(|l| l.weight == MAX), "{what}: {:?}", at_peak.lines);
            let before = flame(&snap, &tl, &FlameQuery::whole(At::Before, all_frames));
            assert_eq!(before.total(), MAX, "{what}: before the recording");
            // Bytes × steps over a window.
            let window = flame(&snap, &tl, &FlameQuery::whole(At::Window(0, n), all_frames));
            assert_eq!(window.total(), MAX, "{what}: over the whole recording");
            for f in [&at_peak, &before, &window] {
                assert!(f.nodes.iter().all(|x| x.self_weight <= x.weight && x.pruned <= x.weight), "{what}");
            }
            let pruned = flame(&snap, &tl, &FlameQuery { at: At::Window(0, n), all_frames, min_share: 3, lines: 2 });
            assert_eq!(pruned.total(), MAX, "{what}: pruned");
        }
    }
}

#[test]
fn checks_saturate() {
    let plain = ordinary();
    let normal = profiled(&plain);
    for (what, snap) in both() {
        let p = profiled(&snap);
        let budgets = Budgets {
            max_peak: Some(1 << 30),
            max_growth_pct: Some(10.0),
            max_category: Category::ALL.iter().map(|&c| (c, 1 << 20)).collect(),
        };
        let grew = check(&p, Some(&normal), &budgets).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(!grew.passed, "{what}");
        assert_eq!(grew.peak_bytes, MAX, "{what}");
        assert!(grew.grown.iter().any(|g| g.run_bytes == MAX && g.delta_bytes > 0), "{what}: {:?}", grew.grown);
        let same = check(&p, Some(&p), &budgets).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(same.budgets.iter().any(|b| b.name == "max-growth" && b.passed), "{what}: {:?}", same.budgets);
        let shrank = check(&normal, Some(&p), &budgets).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(shrank.grown.iter().all(|g| g.delta_bytes <= 0 || g.baseline_bytes < MAX), "{what}");
        assert!(shrank.budgets.iter().any(|b| b.name == "max-growth" && b.passed), "{what}");
    }
}

#[test]
fn the_allocator_replay_saturates() {
    for (what, snap) in both() {
        for d in snap.devices() {
            let a = snapshot::simulate::replay(&snap, d);
            assert!(a.placed_as_recorded <= a.allocations, "{what}: {a:?}");
            assert!(a.segment_events_matched <= a.segment_events, "{what}: {a:?}");
        }
    }
}
