//! The doctor: verdicts and figures on the corpus's out-of-memory file and on generated
//! out-of-memory errors, checked against the generator's own allocator and against a replay
//! written in Python on the pickle itself; what-if predictions against the generator's
//! simulation of the same loop under each change.

use std::process::Command;

use snapshot::categories::{self, Compiled};
use snapshot::doctor::{self, Change, Optimizer, Verdict};
use snapshot::state::StateIndex;
use snapshot::synth::{self, OptimizerKind, Options};
use snapshot::timeline::{Timeline, TimelineKind};

use crate::Rng;

/// Undoes the trace of device 0 from the final snapshot down to the state after entry
/// `argv[2]` and prints that state's figures. Block sizes as the allocator rounds them: 512
/// bytes, and a gap after a live block too small to be a free block of its own (under 512
/// bytes in a 2 MiB small-pool segment, at most 1 MiB elsewhere) belongs to the block.
const REPLAY: &str = r#"
import json, pickle, sys
snap = pickle.load(open(sys.argv[1], 'rb'))
upto = int(sys.argv[2])
segs, blocks = {}, {}
for s in snap['segments']:
    if s['device'] != 0:
        continue
    segs[s['address']] = s['total_size']
    a = s['address']
    for b in s['blocks']:
        if b['state'] in ('active_allocated', 'active_pending_free'):
            req = b.get('requested_size') or (b['history'][0]['real_size'] if b.get('history') else b['size'])
            blocks[a] = (b['size'], req)
        a += b['size']
trace = snap['device_traces'][0] if snap.get('device_traces') else []
for e in reversed(trace[upto + 1:]):
    act = e['action']
    if act == 'alloc':
        blocks.pop(e['addr'], None)
    elif act in ('free_completed', 'free'):
        blocks[e['addr']] = (e['size'], e['size'])
    elif act == 'segment_free':
        segs[e['addr']] = e['size']
    elif act == 'segment_alloc':
        segs.pop(e['addr'], None)
out = dict(reserved=0, allocated=0, live=0, free=0, free_blocks=0, largest_large=0, largest_small=0, largest=0)
addrs = sorted(blocks)
for a, size in sorted(segs.items()):
    small = size == 2 << 20
    inside = [b for b in addrs if a <= b < a + size]
    out['reserved'] += size
    cursor, gaps = a, []
    for k, b in enumerate(inside):
        bsize, req = blocks[b]
        if b > cursor:
            gaps.append(b - cursor)
        nxt = inside[k + 1] if k + 1 < len(inside) else a + size
        end = min(b + max(bsize, -(-max(req, 1) // 512) * 512), nxt)
        if nxt - end < (512 if small else (1 << 20) + 1):
            end = nxt
        out['allocated'] += req
        out['live'] += end - b
        cursor = end
    if a + size > cursor:
        gaps.append(a + size - cursor)
    out['free'] += sum(gaps)
    out['free_blocks'] += len(gaps)
    key = 'largest_small' if small else 'largest_large'
    out[key] = max([out[key]] + gaps)
    out['largest'] = max([out['largest']] + gaps)
print(json.dumps(out))
"#;

fn replay(pickle: &std::path::Path, upto: i64) -> serde_json::Value {
    let r = Command::new("python3")
        .args(["-c", REPLAY])
        .arg(pickle)
        .arg(upto.to_string())
        .output()
        .expect("python3 is needed for this test");
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    serde_json::from_slice(&r.stdout).unwrap()
}

fn write_temp(name: &str, snap: &snapshot::Snapshot) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("memscape-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, snapshot::write::to_pickle_bytes(snap)).unwrap();
    p
}

fn read(path: &std::path::Path) -> snapshot::Snapshot {
    snapshot::read(&std::fs::read(path).unwrap()).unwrap().snapshot
}

#[test]
fn the_corpus_oom_file_reads_as_exhausted_with_the_replayed_figures() {
    let Some(path) = testkit::file_or_skip("pt20-flexgen-opt-oom-history.pickle") else { return };
    let snap = read(&path);
    let r = doctor::doctor(&snap, 0, &Compiled::default());
    // The file holds no `oom` event: a snapshot dumped when the error was caught.
    assert!(r.ooms.is_empty());
    let end = r.at_end.as_ref().expect("a reading of the final state");
    assert_eq!(end.verdict, Some(Verdict::Exhausted), "{}", end.why);
    let py = replay(&path, 0);
    let f = &end.figures;
    assert_eq!(f.reserved_bytes, py["reserved"].as_u64().unwrap());
    assert_eq!(f.allocated_bytes, py["allocated"].as_u64().unwrap());
    assert_eq!(f.live_block_bytes, py["live"].as_u64().unwrap());
    assert_eq!(f.cached_free_bytes, py["free"].as_u64().unwrap());
    assert_eq!(f.free_blocks as u64, py["free_blocks"].as_u64().unwrap());
    assert_eq!(f.largest_free_block_any_bytes, py["largest"].as_u64().unwrap());
    // Under 1% of what is reserved is free: no request above it could have fit after
    // defragmenting the cache.
    assert!(f.cached_free_bytes * 100 < f.reserved_bytes);
    // Who holds it: every live byte is accounted to a site, the weights' allocator first.
    let listed: u64 = end.holders.iter().map(|h| h.bytes).sum();
    assert!(listed <= f.allocated_bytes && listed * 10 >= f.allocated_bytes * 9, "{listed} of {}", f.allocated_bytes);
    assert!(end.holders[0].site.contains("flexgen/"), "{:?}", end.holders[0]);
    // No capacity in the file: no headroom.
    assert_eq!(r.peak.capacity_bytes, None);
    assert_eq!(r.peak.peak_bytes, f.allocated_bytes);
}

fn generated(opts: &Options) -> (snapshot::Snapshot, synth::Truth, std::path::PathBuf) {
    let (snap, truth) = synth::generate_with_truth(opts);
    let path = write_temp(&format!("gen-{}-{}.pickle", opts.seed, opts.fragmentation_oom), &snap);
    (read(&path), truth, path)
}

/// The doctor's figures equal the simulated allocator's own (its block list, not the trace).
#[track_caller]
fn same_as_the_generator(o: &doctor::Oom, t: &synth::OomTruth) {
    assert_eq!(o.entry as usize, t.entry);
    assert_eq!(o.requested_bytes, t.requested_bytes);
    assert_eq!(o.device_free_bytes, Some(t.device_free_bytes));
    assert_eq!(o.reserved_bytes, t.reserved_bytes);
    assert_eq!(o.allocated_bytes, t.allocated_bytes);
    assert_eq!(o.live_block_bytes, t.live_block_bytes);
    assert_eq!(o.cached_free_bytes, t.cached_free_bytes);
    assert_eq!(o.largest_free_block_bytes, t.largest_free_large_bytes);
}

#[test]
fn a_generated_exhaustion_oom_is_exhausted_with_exact_figures() {
    for seed in [1, 7] {
        let opts = Options { seed, target_entries: 8_000, oom: true, capacity_bytes: 40 << 30, ..Default::default() };
        let (snap, truth, path) = generated(&opts);
        let r = doctor::doctor(&snap, 0, &Compiled::default());
        assert_eq!(r.ooms.len(), 1);
        let (o, t) = (&r.ooms[0], &truth.ooms[0]);
        assert_eq!(o.verdict, Verdict::Exhausted, "{}", o.why);
        same_as_the_generator(o, t);
        let py = replay(&path, o.entry as i64 - 1);
        assert_eq!(o.cached_free_bytes, py["free"].as_u64().unwrap());
        // Live memory plus the request exceed reserved plus the device's free bytes.
        assert!(o.live_block_bytes + o.requested_bytes > o.reserved_bytes + t.device_free_bytes);
        // The device's capacity is known from the error: reserved + free.
        assert_eq!(r.peak.capacity_bytes, Some(t.reserved_bytes + t.device_free_bytes));
        assert_eq!(r.peak.headroom_bytes, Some((40i64 << 30) - r.peak.peak_bytes as i64));
    }
}

#[test]
fn a_generated_fragmentation_oom_is_fragmentation_with_replayed_figures() {
    for seed in [2, 11] {
        let opts = Options {
            seed,
            target_entries: 8_000,
            fragmentation_oom: true,
            capacity_bytes: 40 << 30,
            ..Default::default()
        };
        let (snap, truth, path) = generated(&opts);
        let r = doctor::doctor(&snap, 0, &Compiled::default());
        assert_eq!(r.ooms.len(), 1, "one planted error");
        let (o, t) = (&r.ooms[0], &truth.ooms[0]);
        assert_eq!(o.verdict, Verdict::Fragmentation, "{}", o.why);
        same_as_the_generator(o, t);
        // The error is not the last event: the program freed memory after it, which the
        // replay undoes.
        assert!((o.entry as usize) < snap.trace(0).len() - 1);
        let py = replay(&path, o.entry as i64 - 1);
        assert_eq!(o.reserved_bytes, py["reserved"].as_u64().unwrap());
        assert_eq!(o.allocated_bytes, py["allocated"].as_u64().unwrap());
        assert_eq!(o.live_block_bytes, py["live"].as_u64().unwrap());
        assert_eq!(o.cached_free_bytes, py["free"].as_u64().unwrap());
        assert_eq!(o.largest_free_block_bytes, py["largest_large"].as_u64().unwrap());
        // Enough free bytes in the cache, no block large enough, no room on the device.
        assert!(o.cached_free_bytes >= o.requested_bytes);
        assert!(o.largest_free_block_bytes < o.requested_bytes);
        assert!(t.device_free_bytes < o.segment_bytes_needed);
        assert!(o.advice.iter().any(|a| a.setting == "expandable_segments:True"), "{:?}", o.advice);
        assert!(o.advice.iter().any(|a| a.setting.starts_with("max_split_size_mb")), "{:?}", o.advice);
    }
}

#[test]
fn errors_in_the_middle_of_the_trace_have_the_allocators_own_figures() {
    // Each state is made by the trace: blocks known by their requested sizes only, rounded
    // (activations are not multiples of 512 bytes) and with the large pool's unsplit remainders.
    let opts = Options { seed: 4, target_entries: 12_000, oom_every_iteration: true, ..Default::default() };
    let (snap, truth, path) = generated(&opts);
    let r = doctor::doctor(&snap, 0, &Compiled::default());
    assert!(r.ooms.len() >= 4, "{} errors", r.ooms.len());
    assert_eq!(r.ooms.len(), truth.ooms.len());
    let mut slack = 0;
    for (o, t) in r.ooms.iter().zip(&truth.ooms) {
        assert_eq!(o.verdict, Verdict::Exhausted, "{}", o.why);
        same_as_the_generator(o, t);
        slack += o.live_block_bytes - o.allocated_bytes;
    }
    assert!(slack > 0, "rounding is exercised");
    for o in [&r.ooms[0], &r.ooms[r.ooms.len() / 2]] {
        let py = replay(&path, o.entry as i64 - 1);
        assert_eq!(o.live_block_bytes, py["live"].as_u64().unwrap());
        assert_eq!(o.cached_free_bytes, py["free"].as_u64().unwrap());
        assert_eq!(o.largest_free_block_bytes, py["largest_large"].as_u64().unwrap());
    }
}

#[test]
fn states_for_many_entries_at_once_equal_each_state_alone() {
    let snap = synth::generate(&Options { target_entries: 20_000, seed: 5, ..Default::default() });
    let index = StateIndex::build(&snap, 0);
    let n = snap.trace(0).len();
    let mut asked: Vec<Option<usize>> = (0..60).map(|k| Some(k * 7919 % (n + 10))).collect();
    asked.extend([None, Some(0), Some(n - 1), Some(5), Some(5)]);
    let mut got = vec![None; asked.len()];
    index.states_after_each(&snap, &asked, |k, s| got[k] = Some(s));
    for (k, e) in asked.iter().enumerate() {
        assert_eq!(got[k].as_ref(), Some(&index.state_after(&snap, *e)), "entry {e:?}");
    }
}

#[test]
fn one_oom_asked_alone_equals_the_whole_report() {
    let opts = Options { seed: 3, target_entries: 6_000, fragmentation_oom: true, oom: true, ..Default::default() };
    let snap = synth::generate(&Options { capacity_bytes: 40 << 30, ..opts });
    let tl = Timeline::build(&snap, 0, TimelineKind::Blocks);
    let cats = categories::analyze(&snap, &tl, &Compiled::default());
    let index = StateIndex::build(&snap, 0);
    let report = doctor::diagnose(&snap, &tl, &cats, &index);
    assert_eq!(report.ooms.len(), 2);
    assert_eq!(report.ooms[0].verdict, Verdict::Exhausted);
    assert_eq!(report.ooms[1].verdict, Verdict::Fragmentation);
    for o in &report.ooms {
        let alone = doctor::diagnose_ooms(&snap, &tl, &cats, &index, &report.what_if, &[o.entry as usize]);
        assert_eq!(alone.as_slice(), std::slice::from_ref(o));
    }
    // Not an oom entry: nothing.
    assert!(doctor::diagnose_ooms(&snap, &tl, &cats, &index, &report.what_if, &[0, usize::MAX]).is_empty());
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["ooms"][1]["verdict"], "fragmentation");
}

/// The two loops of the validation: one whose peak is in the forward pass (activations), one
/// whose peak is in the optimizer step (parameters).
fn loops() -> Vec<(&'static str, Options)> {
    vec![
        (
            "activation-heavy (8 layers, hidden 1024, 32768 tokens)",
            Options { layers: 8, hidden: 1024, tokens: 32768, target_entries: 4_000, seed: 21, ..Default::default() },
        ),
        (
            "parameter-heavy (24 layers, hidden 2048, 4096 tokens)",
            Options { target_entries: 12_000, seed: 22, ..Default::default() },
        ),
        (
            "activation-heavy, one Block class (8 layers sharing their code)",
            Options {
                layers: 8,
                shared_layer_code: true,
                hidden: 1024,
                tokens: 32768,
                target_entries: 4_000,
                seed: 23,
                ..Default::default()
            },
        ),
    ]
}

fn predict(opts: &Options, change: Change) -> doctor::WhatIf {
    let snap = synth::generate(opts);
    let tl = Timeline::build(&snap, 0, TimelineKind::Blocks);
    let cats = categories::analyze(&snap, &tl, &Compiled::default());
    let w = doctor::what_if(&snap, &tl, &cats, &[change]).remove(0);
    assert_eq!(w.baseline_peak_bytes, tl.peak_bytes(), "the sweep's own peak is the timeline's");
    // A basis found once answers any change alike (what a slider asks).
    let basis = doctor::Basis::new(&snap, &tl, &cats);
    assert_eq!(basis.predict(&tl, &cats, &[Change::Batch(3.0), change])[1], w);
    w
}

#[test]
fn what_if_predictions_land_within_10_percent_of_the_simulated_peaks() {
    let gib = |b: u64| b as f64 / f64::from(1 << 30);
    let mut table = vec![
        "| loop | change | baseline peak | predicted | simulated | error |".to_string(),
        "|---|---|---:|---:|---:|---:|".to_string(),
    ];
    let mut worst: f64 = 0.0;
    let mut failed = Vec::new();
    for (name, base) in loops() {
        let late = Options { zero_grad_after_forward: true, ..base.clone() };
        let cases: Vec<(Change, Options, Options)> = vec![
            (Change::Checkpointing, base.clone(), Options { checkpointing: true, ..base.clone() }),
            (Change::Bf16Activations, base.clone(), Options { bf16_activations: true, ..base.clone() }),
            (
                Change::Optimizer(Optimizer::SgdMomentum),
                base.clone(),
                Options { optimizer: OptimizerKind::SgdMomentum, ..base.clone() },
            ),
            (
                Change::Optimizer(Optimizer::Adam8bit),
                base.clone(),
                Options { optimizer: OptimizerKind::Adam8bit, ..base.clone() },
            ),
            (
                Change::Optimizer(Optimizer::Adafactor),
                base.clone(),
                Options { optimizer: OptimizerKind::Adafactor, ..base.clone() },
            ),
            (Change::ZeroGradBeforeForward, late.clone(), base.clone()),
            (Change::Batch(2.0), base.clone(), Options { tokens: base.tokens * 2, ..base.clone() }),
            (Change::Batch(0.5), base.clone(), Options { tokens: base.tokens / 2, ..base.clone() }),
        ];
        for (change, from, simulated) in cases {
            let w = predict(&from, change);
            assert!(w.applies, "{name}: {}", w.change);
            let sim = synth::generate_with_truth(&simulated).1.peak_bytes;
            let err = (w.predicted_peak_bytes as f64 - sim as f64) / sim as f64;
            worst = worst.max(err.abs());
            table.push(format!(
                "| {name} | {} | {:.2} GiB | {:.2} GiB | {:.2} GiB | {:+.3}% |",
                w.change,
                gib(w.baseline_peak_bytes),
                gib(w.predicted_peak_bytes),
                gib(sim),
                100.0 * err
            ));
            // A prediction that moves the peak must move it the right way.
            let moved = sim as f64 - w.baseline_peak_bytes as f64;
            if moved.abs() > 0.05 * sim as f64 {
                let predicted_move = w.predicted_peak_bytes as f64 - w.baseline_peak_bytes as f64;
                if moved.signum() != predicted_move.signum() {
                    failed.push(format!("{name}: {}: the peak moves the wrong way", w.change));
                }
            }
            if err.abs() > 0.10 {
                failed.push(format!("{name}: {}: predicted {} simulated {sim}", w.change, w.predicted_peak_bytes));
            }
        }
    }
    assert!(failed.is_empty(), "over 10%:\n{}\n{}", failed.join("\n"), table.join("\n"));
    eprintln!("{}\nworst error {:.1}%", table.join("\n"), 100.0 * worst);
}

#[test]
fn block_sizes_are_rounded_as_the_allocator_rounds_them() {
    use snapshot::doctor::{figures, Settings};
    use snapshot::state::{AllocatorState, BlockView, SegmentState};
    const MIB: u64 = 1 << 20;
    let block = |address: u64, requested: u64| BlockView {
        address,
        size: requested, // as the trace gives it: the requested size
        requested_size: requested,
        pending_free: false,
        stack: None,
    };
    let seg = |address: u64, size: u64, blocks: Vec<BlockView>| SegmentState {
        address,
        size,
        stream: 0,
        pool: None,
        expandable: false,
        blocks,
        internal_free_bytes: 0,
        external_free_bytes: 0,
    };
    let large = 0x7f00_0000_0000u64;
    let small = large + 64 * MIB;
    let state = AllocatorState {
        segments: vec![
            // 20 MiB: a 10 MiB + 100 B tensor given a block 600 KiB larger (a remainder of 1 MiB
            // or less is never split off), then a 3 MiB tensor, then 6 MiB and a bit free.
            seg(large, 20 * MIB, vec![block(large, 10 * MIB + 100), block(large + 10 * MIB + 600 * 1024, 3 * MIB)]),
            // 2 MiB small pool: 1000 B rounded to 1024, a 300-byte gap too small to split off,
            // then 512 B free before a 4096 B tensor.
            seg(
                small,
                2 * MIB,
                vec![block(small, 1000), block(small + 1324, 4096 - 12), block(small + 1324 + 4096 + 512, 4096)],
            ),
        ],
        ..Default::default()
    };
    let layout = figures::layout(&state, &Settings::default());
    let f = layout.figures(&state);
    let large_live = 10 * MIB + 600 * 1024 + 3 * MIB;
    let small_live = 1324 + 4096 + 4096;
    assert_eq!(f.live_block_bytes, large_live + small_live);
    assert_eq!(f.cached_free_bytes, 22 * MIB - large_live - small_live);
    // Free blocks: the large segment's tail, the 512 B gap and the small segment's tail.
    assert_eq!(f.free_blocks, 3);
    assert_eq!(f.largest_free_block_any_bytes, 20 * MIB - large_live);
    let small_pool = f.pools.iter().find(|p| p.pool == figures::PoolKind::Small).unwrap();
    assert_eq!(small_pool.largest_free_block_bytes, 2 * MIB - 1324 - 4096 - 512 - 4096);
    assert_eq!(small_pool.free_blocks, 2);
}

#[track_caller]
fn consistent(what: &str, snap: &snapshot::Snapshot, device: usize) {
    let r = doctor::doctor(snap, device, &Compiled::default());
    let tl = Timeline::build(snap, device, TimelineKind::Blocks);
    assert_eq!(r.peak.peak_bytes, tl.peak_bytes(), "{what}");
    for w in &r.what_if {
        assert_eq!(w.baseline_peak_bytes, tl.peak_bytes(), "{what}");
        assert!(w.applies || w.predicted_peak_bytes == w.baseline_peak_bytes, "{what}");
    }
    let figures = r.ooms.iter().map(|o| (o.reserved_bytes, o.live_block_bytes, o.cached_free_bytes));
    for (reserved, live, free) in figures.chain(
        r.at_end.iter().map(|e| (e.figures.reserved_bytes, e.figures.live_block_bytes, e.figures.cached_free_bytes)),
    ) {
        // Live blocks and free blocks tile the segments.
        assert_eq!(live.saturating_add(free), reserved, "{what}");
    }
    assert!(serde_json::to_string(&r).is_ok());
}

#[test]
fn every_corpus_file_and_mutated_files_get_a_consistent_report() {
    for (name, bytes) in testkit::files() {
        let snap = snapshot::read(&bytes).unwrap().snapshot;
        for d in snap.devices() {
            consistent(&format!("{name} device {d}"), &snap, d);
        }
    }
    // Hostile values: sizes, addresses and actions changed at random, the doctor never panics.
    let synth = snapshot::write::to_pickle_bytes(&synth::generate(&Options {
        target_entries: 1_500,
        devices: 2,
        layers: 2,
        oom: true,
        fragmentation_oom: true,
        capacity_bytes: 8 << 30,
        ..Default::default()
    }));
    let mut inputs = vec![("synth", synth)];
    inputs.extend(testkit::read_or_skip("pt24-linear-tiny.pkl").map(|tiny| ("pt24-linear-tiny.pkl", tiny)));
    let mut rng = Rng(0xd0c7);
    for (name, orig) in &inputs {
        let mut read_ok = 0;
        for _ in 0..200 {
            let mut b = orig.clone();
            for _ in 0..1 + rng.below(2) {
                let i = rng.below(b.len() as u64) as usize;
                b[i] = rng.next_u64() as u8;
            }
            let Ok(loaded) = snapshot::read(&b) else { continue };
            read_ok += 1;
            for d in loaded.snapshot.devices() {
                drop(doctor::doctor(&loaded.snapshot, d, &Compiled::default()));
            }
        }
        assert!(read_ok > 20, "{name}: only {read_ok} mutations read");
    }
}

#[test]
fn expandable_segments_free_space_runs_across_adjacent_mapped_ranges() {
    use snapshot::doctor::{figures, Settings};
    use snapshot::state::{AllocatorState, BlockView, SegmentState};
    const MIB: u64 = 1 << 20;
    let base = 0x7f00_0000_0000u64;
    let range = |address: u64, size: u64, stream: i64, blocks: Vec<(u64, u64)>| SegmentState {
        address,
        size,
        stream,
        pool: None,
        expandable: true,
        blocks: blocks
            .into_iter()
            .map(|(address, size)| BlockView { address, size, requested_size: size, pending_free: false, stack: None })
            .collect(),
        internal_free_bytes: 0,
        external_free_bytes: 0,
    };
    let state = AllocatorState {
        segments: vec![
            // 40 MiB mapped, a 10 MiB tensor at its start: 30 MiB free at its end ...
            range(base, 40 * MIB, 0, vec![(base, 10 * MIB)]),
            // ... running on into the next mapped range (8 MiB free before a tensor).
            range(base + 40 * MIB, 20 * MIB, 0, vec![(base + 48 * MIB, 12 * MIB)]),
            // Adjacent, but another stream: a free block of its own.
            range(base + 60 * MIB, 20 * MIB, 1, vec![]),
        ],
        ..Default::default()
    };
    let layout = figures::layout(&state, &Settings::default());
    let f = layout.figures(&state);
    assert_eq!(f.free_blocks, 2);
    assert_eq!(f.largest_free_block_any_bytes, 38 * MIB);
    assert_eq!(f.cached_free_bytes, 58 * MIB);
    let stream0 = f.pools.iter().find(|p| p.stream == 0).unwrap();
    assert!(stream0.expandable);
    assert_eq!((stream0.segments, stream0.free_blocks, stream0.largest_free_block_bytes), (2, 1, 38 * MIB));
}

#[test]
fn the_verdict_follows_the_deciding_numbers() {
    use snapshot::doctor::verdict::{decide, Inputs};
    const MIB: u64 = 1 << 20;
    let base = Inputs {
        requested: 600 * MIB,
        device_free: Some(100 * MIB),
        live: 9000 * MIB,
        reserved: 10_000 * MIB,
        cached_free: 1000 * MIB,
        largest_fit: 200 * MIB,
        segment_needed: 600 * MIB,
    };
    // 1000 MiB free in the cache, 100 MiB on the device, no block of 600 MiB.
    let (v, why) = decide(&base);
    assert_eq!(v, Verdict::Fragmentation);
    assert!(why.contains("1.1GiB was free") && why.contains("200.0MiB"), "{why}");
    // Live + request over reserved + free.
    let (v, why) = decide(&Inputs { requested: 1200 * MIB, segment_needed: 1200 * MIB, ..base });
    assert_eq!(v, Verdict::Exhausted);
    assert!(why.contains("by 100.0MiB"), "{why}");
    // The device had room for the segment: something else refused.
    assert_eq!(decide(&Inputs { device_free: Some(700 * MIB), ..base }).0, Verdict::OtherLimit);
    // A block would have fit.
    assert_eq!(decide(&Inputs { largest_fit: 600 * MIB, ..base }).0, Verdict::OtherLimit);
    // Without device_free, only the cache counts.
    assert_eq!(decide(&Inputs { device_free: None, requested: 1050 * MIB, ..base }).0, Verdict::Exhausted);
}

#[test]
fn when_no_setting_helps_the_advice_names_a_what_if_change_that_fits() {
    for seed in [1, 7] {
        let opts = Options { seed, target_entries: 8_000, oom: true, capacity_bytes: 40 << 30, ..Default::default() };
        let snap = synth::generate(&opts);
        let r = doctor::doctor(&snap, 0, &Compiled::default());
        let o = &r.ooms[0];
        assert_eq!(o.verdict, doctor::Verdict::Exhausted, "seed {seed}");
        let settings: Vec<&doctor::Advice> = o.advice.iter().filter(|a| a.request_fits == Some(true)).collect();
        assert_eq!(settings.len(), 1, "seed {seed}: one change fits: {:#?}", o.advice);
        let a = settings[0];
        // It is a what-if row, and its figures are the row's, scaled from the demand at the error.
        let w = r.what_if.iter().find(|w| w.change == a.setting).expect("a what-if change");
        assert!(w.applies && w.predicted_peak_bytes < w.baseline_peak_bytes);
        let capacity = o.reserved_bytes + o.device_free_bytes.unwrap();
        let demand = o.allocated_bytes + o.requested_bytes;
        let need = (demand as f64 * w.predicted_peak_bytes as f64 / w.baseline_peak_bytes as f64) as u64;
        assert!(need <= capacity, "seed {seed}: {need} > {capacity}");
        assert_eq!(a.predicted_effect_bytes, demand - need);
        // The least change that fits: every what-if row that needs more does not fit.
        for other in r.what_if.iter().filter(|x| x.applies && x.predicted_peak_bytes < x.baseline_peak_bytes) {
            let n = (demand as f64 * other.predicted_peak_bytes as f64 / other.baseline_peak_bytes as f64) as u64;
            assert!(n <= need || n > capacity, "seed {seed}: {} needs {n}, fits and changes less", other.change);
        }
        assert!(a.text.contains("fits in the"), "{}", a.text);
    }
}
