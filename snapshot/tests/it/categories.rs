//! Categories, iterations, leaks and the diff: planted truths of the generator and what the
//! corpus files with annotations show (written down in docs/categories.md).

use snapshot::categories::{analyze, Category, IterationSource, Rule, Rules, Target, Why};
use snapshot::diff::{diff, profile, Align, SiteMode};
use snapshot::synth::{generate_with_truth, Options, EXTRA_SITE, LEAK_SITE};
use snapshot::timeline::{Timeline, TimelineKind};
use snapshot::Snapshot;

fn blocks(snap: &Snapshot) -> Timeline {
    Timeline::build(snap, 0, TimelineKind::Blocks)
}

/// Written and read back, so the analyses see what a user's file holds.
fn roundtrip(snap: &Snapshot) -> Snapshot {
    snapshot::read(&snapshot::write::to_pickle_bytes(snap)).unwrap().snapshot
}

fn planted() -> Options {
    Options { target_entries: 12_000, layers: 6, hidden: 1024, tokens: 32768, seed: 7, ..Default::default() }
}

#[test]
fn category_bytes_at_the_peak_equal_the_planted_ones() {
    for seed in [7, 8, 9] {
        let (snap, truth) = generate_with_truth(&Options { seed, ..planted() });
        let snap = roundtrip(&snap);
        let tl = blocks(&snap);
        assert_eq!(tl.peak_bytes(), truth.peak_bytes, "seed {seed}: the generator's peak is the timeline's");
        let cats = analyze(&snap, &tl, &Rules::default().compile().unwrap());
        for c in Category::ALL {
            let (got, want) = (cats.at_peak[c.index()], truth.at_peak[c.index()]);
            // Within 1% of the planted bytes (of the peak, for a category with none planted).
            let bound = if want == 0 { truth.peak_bytes / 100 } else { want / 100 };
            assert!(got.abs_diff(want) <= bound, "seed {seed}: {} at the peak: {got} found, {want} planted", c.label());
        }
        // The planted truths are all present: parameters, state, gradients, activations.
        for c in [Category::Parameter, Category::OptimizerState, Category::Gradient, Category::Activation] {
            assert!(truth.at_peak[c.index()] > 0, "seed {seed}: nothing planted for {}", c.label());
        }
        assert_eq!(cats.iteration_source, IterationSource::OptimizerSteps);
        assert_eq!(cats.iterations.iter().filter(|i| i.complete).count(), truth.iterations);
        assert!(cats.leaks.is_empty(), "seed {seed}: no leak was planted, found {:?}", cats.leaks);
        // Iteration peaks are the highest totals of their steps.
        for it in &cats.iterations {
            let max = tl.totals()[it.start as usize..it.end as usize].iter().max().copied().unwrap_or(0);
            assert_eq!(it.peak_bytes, max);
        }
    }
}

#[test]
fn a_planted_leak_is_reported_with_its_call_site() {
    let leak = 3 << 20;
    let (snap, truth) = generate_with_truth(&Options { leak_bytes: leak, ..planted() });
    let snap = roundtrip(&snap);
    let tl = blocks(&snap);
    let cats = analyze(&snap, &tl, &Rules::default().compile().unwrap());
    assert!(truth.iterations >= 3, "{} iterations", truth.iterations);
    assert_eq!(cats.leaks.len(), 1, "{:?}", cats.leaks);
    let l = &cats.leaks[0];
    assert_eq!(l.site, LEAK_SITE);
    assert_eq!(l.bytes_per_iteration, leak);
    assert_eq!(l.live_at_iteration_end.len(), truth.iterations);
    assert_eq!(l.live_at_iteration_end, (1..=truth.iterations as u64).map(|k| k * leak).collect::<Vec<_>>());
    assert!(l.stack.iter().any(|s| s == LEAK_SITE));
}

#[test]
fn the_diff_of_two_runs_differing_by_one_activation_puts_it_first() {
    let extra = 24 << 20;
    let (a, _) = generate_with_truth(&planted());
    let (b, truth_b) = generate_with_truth(&Options { extra_activation_bytes: extra, ..planted() });
    let (a, b) = (roundtrip(&a), roundtrip(&b));
    let prof = |s: &Snapshot| {
        let tl = blocks(s);
        let cats = analyze(s, &tl, &Rules::default().compile().unwrap());
        profile(s, &tl, &cats)
    };
    let (pa, pb) = (prof(&a), prof(&b));
    for align in Align::ALL {
        let d = diff(&pa, &pb, align, SiteMode::Frame);
        assert_eq!(d.align, align, "{:?}", d.align_note);
        assert_eq!(d.peak.1 - d.peak.0, extra);
        assert_eq!(d.sites.len(), 1, "only the planted site changed: {:?}", &d.sites[..d.sites.len().min(5)]);
        let top = &d.sites[0];
        assert_eq!((top.site.as_str(), top.a, top.b), (EXTRA_SITE, 0, extra));
        let act = d.categories.iter().find(|c| c.0 == Category::Activation).unwrap();
        assert_eq!(act.2 - act.1, extra);
        assert_eq!(d.allocs.len(), 1);
        assert_eq!((d.allocs[0].site.as_str(), d.allocs[0].size), (EXTRA_SITE, extra));
        assert_eq!((d.allocs[0].count_a, d.allocs[0].count_b), (0, truth_b.iterations as u32));
        assert!(d.curve.iter().any(|p| p.b > p.a), "B is above A somewhere");
        // The difference strip shows the planted bytes most of the time.
        let deltas: Vec<i128> = d.curve.iter().filter_map(|p| p.delta).collect();
        let exact = deltas.iter().filter(|&&v| v == i128::from(extra)).count();
        // (By event index or time B drifts: it has more events per iteration.)
        if matches!(align, Align::Iteration | Align::Annotation) {
            assert!(exact * 2 > deltas.len(), "{align:?}: {exact} of {} buckets", deltas.len());
        }
    }
    // Keyed by whole stack, the top row is the planted stack.
    let d = diff(&pa, &pb, Align::Event, SiteMode::Stack);
    assert!(d.sites[0].site.contains(EXTRA_SITE) && d.sites[0].b - d.sites[0].a == extra);
    // A run against itself: nothing changed.
    let same = diff(&pa, &pa, Align::Iteration, SiteMode::Frame);
    assert!(
        same.sites.is_empty()
            && same.allocs.is_empty()
            && same.segments_only_a.is_empty()
            && same.segments_only_b.is_empty()
    );
}

#[test]
fn user_rules_come_before_the_built_in_ones() {
    let (snap, _) = generate_with_truth(&planted());
    let tl = blocks(&snap);
    let rules = Rules {
        rules: vec![
            Rule { pattern: r"Head\.forward|cross_entropy".into(), category: Category::Input, on: Target::Frame },
            Rule { pattern: "^Optimizer.step".into(), category: Category::Unknown, on: Target::Annotation },
        ],
    };
    let json = rules.to_json();
    assert_eq!(Rules::from_json(&json).unwrap(), rules);
    let cats = analyze(&snap, &tl, &rules.compile().unwrap());
    let mut saw = [false; 2];
    for (e, cl) in tl.elements().iter().zip(cats.classes()) {
        let lines = e.stack.map(|s| snapshot::frames::stack_lines(&snap, s, false)).unwrap_or_default();
        if lines.iter().any(|l| l.contains("cross_entropy")) {
            assert_eq!((cl.category, cl.why), (Category::Input, Why::User(0)));
            saw[0] = true;
        } else if e.alloc_entry.is_some() && lines.iter().any(|l| l.contains("_multi_tensor_adamw")) {
            assert_eq!((cl.category, cl.why), (Category::Unknown, Why::User(1)));
            saw[1] = true;
        }
    }
    assert_eq!(saw, [true, true]);
    assert!(Why::User(1).describe(&rules).contains("^Optimizer.step"));
    let bad = Rules::from_json(r#"{"rules":[{"pattern":"(","category":"activation"}]}"#).unwrap_err();
    assert!(bad.contains("rule 1"), "{bad}");
    assert!(Rules::from_json(r#"{"rules":[{"pattern":"x","category":"weights"}]}"#).unwrap_err().contains("weights"));
}

/// A corpus file's categories; `None` (skipped) when a partial corpus lacks it.
fn corpus_categories(name: &str) -> Option<(Snapshot, Timeline, snapshot::categories::Categories)> {
    let bytes = testkit::read_or_skip(name)?;
    let snap = snapshot::read(&bytes).unwrap().snapshot;
    let tl = Timeline::build(&snap, snap.default_device().unwrap_or(0), TimelineKind::Blocks);
    let cats = analyze(&snap, &tl, &Rules::default().compile().unwrap());
    Some((snap, tl, cats))
}

#[test]
fn per_category_bytes_add_up_to_the_timeline_on_every_corpus_file() {
    for (name, _) in testkit::files() {
        let (_, tl, cats) = corpus_categories(&name).unwrap();
        assert_eq!(cats.at_peak.iter().sum::<u64>(), tl.peak_bytes(), "{name}");
        let n = tl.n_steps();
        for step in (0..n).step_by((n as usize / 97).max(1)).chain([n.saturating_sub(1)]) {
            if n == 0 {
                break;
            }
            assert_eq!(cats.bytes_at(&tl, step).iter().sum::<u64>(), tl.totals()[step as usize], "{name} step {step}");
        }
        for (c, &m) in cats.max.iter().enumerate() {
            assert!(m >= cats.at_peak[c], "{name}");
        }
        let cols = cats.columns(&tl, 0.0, f64::from(n), 300);
        for (step, b) in cols.iter().filter(|c| c.0 != u32::MAX) {
            assert_eq!(b.iter().sum::<u64>(), tl.totals()[*step as usize], "{name}");
        }
    }
}

/// docs/categories.md, "pt25-cs336-fullstep-annotations": one training step of a ~970M
/// parameter model with AdamW, zero_grad called after the forward pass.
#[test]
fn fullstep_annotations_shows_its_training_step() {
    let Some((_, tl, cats)) = corpus_categories("pt25-cs336-fullstep-annotations.pickle") else { return };
    let at = |c: Category| cats.at_peak[c.index()];
    assert_eq!(cats.iteration_source, IterationSource::OptimizerSteps);
    assert_eq!(cats.iterations.len(), 1);
    assert!(cats.iterations[0].complete);
    // The peak is in the forward pass.
    assert_eq!(cats.phase(tl.peak_step()), snapshot::categories::Phase::Forward);
    // Parameters: alive throughout, 3.61 GiB.
    assert_eq!(at(Category::Parameter), 3_877_655_552);
    // AdamW's two moments per parameter, made before recording inside optimizer.step.
    let grads_made_in_backward: u64 = cats.by_rule.iter().filter(|r| r.0 == Why::BackwardKept).map(|r| r.2).sum();
    assert_eq!(grads_made_in_backward, 3_877_647_360);
    assert_eq!(at(Category::OptimizerState), 2 * grads_made_in_backward);
    // zero_grad runs after the forward pass: the previous step's gradients are still alive at
    // the peak, freed by zero_grad later (the same bytes backward makes again).
    let cleared: u64 = cats.by_rule.iter().filter(|r| r.0 == Why::ClearedByZeroGrad).map(|r| r.2).sum();
    assert_eq!(cleared, grads_made_in_backward);
    assert!(at(Category::Gradient) >= cleared);
    assert_eq!(at(Category::Activation), 7_308_808_196);
    // The budget formula leaves out exactly those gradients.
    assert_eq!(cats.budget.total + at(Category::Gradient), tl.peak_bytes());
    assert!(cats.leaks.is_empty());
}

/// docs/categories.md, "pt210-cs336-training-usermeta": one training step, the peak at the
/// start of backward.
#[test]
fn training_usermeta_shows_its_training_step() {
    let Some((_, tl, cats)) = corpus_categories("pt210-cs336-training-usermeta.pickle") else { return };
    let at = |c: Category| cats.at_peak[c.index()];
    assert_eq!(cats.iteration_source, IterationSource::OptimizerSteps);
    assert_eq!(cats.iterations.len(), 1);
    assert_eq!(cats.phase(tl.peak_step()), snapshot::categories::Phase::Backward);
    assert_eq!(at(Category::Parameter), 1_710_100_480);
    assert_eq!(at(Category::Gradient), 0, "gradients were set to None before this step");
    let grads = cats.max[Category::Gradient.index()];
    assert_eq!(grads, 1_692_733_440);
    assert_eq!(at(Category::OptimizerState), 2 * grads);
    assert_eq!(at(Category::Activation), 7_126_253_572);
    assert_eq!(at(Category::AutogradDetail), 204_808_196);
    // The formula explains the peak to within 0.5%.
    assert!(cats.budget.total.abs_diff(tl.peak_bytes()) * 200 < tl.peak_bytes());
}

/// Everything an analysis found, for comparing two of them.
fn findings(tl: &Timeline, c: &snapshot::categories::Categories) -> (String, Vec<[u64; snapshot::categories::N]>) {
    let report = c.report(tl, &Rules::default());
    let n = tl.n_steps();
    let at: Vec<[u64; snapshot::categories::N]> =
        (0..n).step_by((n as usize / 257).max(1)).map(|s| c.bytes_at(tl, s)).collect();
    (format!("{report:?} {:?} {:?} {:?}", c.classes(), c.max, c.by_rule), at)
}

#[test]
fn the_analysis_in_slices_finds_what_it_finds_in_one_go() {
    // The viewer's worker runs it a slice at a time between requests; any slice size must
    // give the same answer, whatever pass a slice ends in.
    let (leaky, _) = generate_with_truth(&Options { leak_bytes: 1 << 20, ..planted() });
    let (warm, _) = generate_with_truth(&Options { warmup_steps: 1, ..planted() });
    let mut inputs: Vec<(String, Snapshot)> = vec![
        ("planted leak".into(), roundtrip(&leaky)),
        ("backward passes".into(), without_optimizer(&leaky)),
        ("recorded after a warm-up step".into(), roundtrip(&warm)),
    ];
    for name in ["pt25-cs336-fullstep-annotations.pickle", "pt210-cs336-training-usermeta.pickle"] {
        let Some((snap, ..)) = corpus_categories(name) else { continue };
        inputs.push((name.into(), snap));
    }
    let rules = Rules::default().compile().unwrap();
    for (name, snap) in &inputs {
        let tl = Timeline::build(snap, snap.default_device().unwrap_or(0), TimelineKind::Blocks);
        let whole = findings(&tl, &analyze(snap, &tl, &rules));
        for units in [1, 7, 1000] {
            let mut a = snapshot::categories::Analysis::new(snap, &tl, &rules);
            let mut slices = 1;
            while !a.work(snap, &tl, units) {
                slices += 1;
            }
            if units == 1 {
                assert!(slices >= snap.trace(0).len(), "{name}: one entry a slice, {slices} slices");
            }
            assert_eq!(findings(&tl, &a.finish(snap, &tl)), whole, "{name}, slices of {units}");
        }
    }
}

#[test]
fn spans_pair_as_a_plain_search_of_the_open_ones_does() {
    // The reference: an END closes the latest open START of its name; depth is how many
    // were opened before it and are still open.
    fn reference(events: &[(bool, u32, i64)]) -> Vec<(u32, Option<i64>, Option<i64>, u32)> {
        let (mut open, mut out): (Vec<(u32, i64)>, Vec<_>) = (Vec::new(), Vec::new());
        for &(start, name, t) in events {
            if start {
                open.push((name, t));
            } else if let Some(k) = open.iter().rposition(|o| o.0 == name) {
                let (n, s) = open.remove(k);
                out.push((n, Some(s), Some(t.max(s)), k as u32));
            } else {
                out.push((name, None, Some(t), open.len() as u32));
            }
        }
        out.extend(open.into_iter().enumerate().map(|(k, (n, s))| (n, Some(s), None, k as u32)));
        out
    }
    let mut rng = crate::Rng(0x5eed);
    for round in 0..200 {
        let mut snap = Snapshot::default();
        let (start, end) = (snap.strings.intern("START"), snap.strings.intern("END"));
        let names: Vec<_> = (0..1 + round % 6).map(|k| snap.strings.intern(&format!("n{k}"))).collect();
        let len = rng.next_u64() % 60;
        let events: Vec<(bool, u32, i64)> = (0..len)
            .map(|t| (!rng.next_u64().is_multiple_of(3), (rng.next_u64() % names.len() as u64) as u32, t as i64))
            .collect();
        snap.external_annotations = Some(
            events
                .iter()
                .map(|&(s, n, t)| snapshot::Annotation {
                    stage: if s { start } else { end },
                    name: names[n as usize],
                    device: 0,
                    time_us: t,
                    extras: Vec::new(),
                })
                .collect(),
        );
        let got: Vec<_> = snapshot::categories::spans(&snap, 0)
            .iter()
            .map(|s| (names.iter().position(|&n| n == s.name).unwrap() as u32, s.start_us, s.end_us, s.depth))
            .collect();
        assert_eq!(got, reference(&events), "round {round}: {events:?}");
    }
}

/// The run with no trace of an optimizer (no `torch/optim/` frame, no `zero_grad`, no
/// optimizer annotation): its iterations are its backward passes.
fn without_optimizer(snap: &Snapshot) -> Snapshot {
    let mut s = roundtrip(snap);
    let (elsewhere, other) = (s.strings.intern("train_utils.py"), s.strings.intern("other_step"));
    for k in 0..s.frames.len() {
        let (file, name) = (s.str(s.frames[k].filename).to_string(), s.str(s.frames[k].name).to_string());
        if file.contains("torch/optim/") {
            s.frames[k].filename = elsewhere;
        }
        if name == "zero_grad" {
            s.frames[k].name = other;
        }
    }
    let strings = s.strings.clone();
    if let Some(a) = s.external_annotations.as_mut() {
        a.retain(|a| {
            snapshot::categories::annotation_phase(strings.get(a.name)).is_none_or(|p| {
                !matches!(p, snapshot::categories::Phase::Optimizer | snapshot::categories::Phase::ZeroGrad)
            })
        });
    }
    s
}

#[test]
fn iterations_are_the_boundaries_a_walk_over_every_step_finds() {
    // The analysis finds iteration boundaries from the runs of phases; walking every step, as
    // it did before, must find the same ones, with the same flags.
    let (leaky, _) = generate_with_truth(&Options { leak_bytes: 1 << 20, ..planted() });
    let mut inputs =
        vec![("optimizer steps".to_string(), roundtrip(&leaky)), ("backward passes".into(), without_optimizer(&leaky))];
    for (name, _) in testkit::files() {
        inputs.push((name.clone(), corpus_categories(&name).unwrap().0));
    }
    let mut sources = Vec::new();
    for (name, snap) in &inputs {
        let tl = Timeline::build(snap, snap.default_device().unwrap_or(0), TimelineKind::Blocks);
        let cats = analyze(snap, &tl, &Rules::default().compile().unwrap());
        use snapshot::categories::Phase;
        let n = tl.n_steps();
        let (closer, by_optimizer) = match cats.iteration_source {
            IterationSource::OptimizerSteps => (Phase::Optimizer, true),
            IterationSource::BackwardPasses => (Phase::Backward, false),
            IterationSource::None => {
                assert_eq!(cats.iterations.len(), 1, "{name}");
                continue;
            }
        };
        sources.push(cats.iteration_source);
        if name == "backward passes" {
            assert_eq!(cats.iteration_source, IterationSource::BackwardPasses);
            assert!(cats.iterations.len() > 3, "{} iterations", cats.iterations.len());
        }
        let (mut starts, mut closed) = (vec![0u32], Vec::new());
        let (mut in_closer, mut pending) = (false, false);
        for s in 0..n {
            let p = cats.phase(s);
            if p == closer {
                in_closer = true;
                continue;
            }
            if in_closer {
                in_closer = false;
                pending = true;
            }
            if pending && (by_optimizer || p == Phase::Forward) {
                pending = false;
                closed.push(starts.len() - 1);
                starts.push(s);
            }
        }
        if in_closer || pending {
            closed.push(starts.len() - 1);
        }
        let want: Vec<(u32, u32, bool)> = starts
            .iter()
            .enumerate()
            .map(|(k, &a)| (a, starts.get(k + 1).copied().unwrap_or(n), closed.contains(&k)))
            .collect();
        let got: Vec<(u32, u32, bool)> = cats.iterations.iter().map(|it| (it.start, it.end, it.complete)).collect();
        assert_eq!(got, want, "{name}");
    }
    assert!(sources.contains(&IterationSource::BackwardPasses) && sources.contains(&IterationSource::OptimizerSteps));
}
