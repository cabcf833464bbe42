//! Memory alive before a recording that starts mid-training: parameters and optimizer state
//! told apart by the optimizer's name, the gradients and the blocks' sizes, checked against
//! the generator's own accounting of runs recorded after a warm-up step.

use snapshot::categories::{analyze, Categories, Category, Rules, Why};
use snapshot::doctor::{what_if, Change, Optimizer};
use snapshot::synth::{generate_with_truth, OptimizerKind, Options, Truth};
use snapshot::timeline::{Timeline, TimelineKind};
use snapshot::Snapshot;

fn warm(optimizer: OptimizerKind) -> Options {
    Options {
        target_entries: 12_000,
        layers: 6,
        hidden: 1024,
        tokens: 32768,
        seed: 11,
        optimizer,
        warmup_steps: 1,
        ..Default::default()
    }
}

/// Generated, written and read back; its blocks timeline and categories.
fn run(opts: &Options) -> (Snapshot, Timeline, Categories, Truth) {
    let (snap, truth) = generate_with_truth(opts);
    let snap = snapshot::read(&snapshot::write::to_pickle_bytes(&snap)).unwrap().snapshot;
    let tl = Timeline::build(&snap, 0, TimelineKind::Blocks);
    let cats = analyze(&snap, &tl, &Rules::default().compile().unwrap());
    (snap, tl, cats, truth)
}

fn within_1pct(got: u64, want: u64) -> bool {
    got.abs_diff(want) <= want / 100
}

const OPTIMIZERS: [(OptimizerKind, u32); 4] =
    [(OptimizerKind::Adam, 2), (OptimizerKind::AdamW, 2), (OptimizerKind::SgdMomentum, 1), (OptimizerKind::Sgd, 0)];

#[test]
fn a_run_recorded_after_a_warmup_step_splits_parameters_and_optimizer_state_as_they_were_made() {
    for (optimizer, k) in OPTIMIZERS {
        for zero_grad_after_forward in [false, true] {
            let what = format!("{optimizer:?}, zero_grad after forward: {zero_grad_after_forward}");
            let (snap, tl, cats, truth) = run(&Options { zero_grad_after_forward, ..warm(optimizer) });
            // Recorded mid-training: the parameters were allocated before, and have no frames.
            let first = snap.trace(0).len();
            let frameless = |e: &snapshot::timeline::Element| e.stack.is_none_or(|s| snap.stack(s).next().is_none());
            assert!(first > 0 && tl.elements().iter().any(|e| e.alloc_entry.is_none() && frameless(e)), "{what}");
            for c in [Category::Parameter, Category::OptimizerState, Category::Gradient] {
                let (got, want) = (cats.at_peak[c.index()], truth.at_peak[c.index()]);
                assert!(within_1pct(got, want), "{what}: {} at the peak: {got} found, {want} made", c.label());
            }
            assert!(truth.at_peak[Category::Parameter.index()] > 0, "{what}");
            assert_eq!(cats.at_peak[Category::Persistent.index()], 0, "{what}: nothing left unsplit");
            let inf = cats.inference.as_ref().expect("an inference");
            assert_eq!(inf.state_blocks_per_parameter, Some(k), "{what}: {}", inf.summary);
            assert_eq!(inf.optimizer.as_deref(), Some(optimizer.class_name()), "{what}");
            assert!(inf.optimizer_named_by.as_deref().is_some_and(|b| b.contains("annotation")), "{what}");
            // Each block says how it was decided.
            let inferred = cats.classes().iter().filter(|c| c.why == Why::InferredOptimizerState).count();
            assert_eq!(inferred > 0, k > 0, "{what}");
            let budget = &cats.budget;
            assert_eq!(budget.persistent, 0);
            assert!(within_1pct(budget.optimizer_state, truth.at_peak[Category::OptimizerState.index()]), "{what}");
        }
    }
}

#[test]
fn the_same_runs_recorded_from_their_first_step_are_unchanged() {
    for (optimizer, _) in OPTIMIZERS {
        let (_, _, cats, truth) = run(&Options { warmup_steps: 0, ..warm(optimizer) });
        for c in [Category::Parameter, Category::OptimizerState, Category::Gradient, Category::Persistent] {
            assert_eq!(cats.at_peak[c.index()], truth.at_peak[c.index()], "{optimizer:?}: {}", c.label());
        }
        // The parameters carry their frames and are decided by the rule for what is alive
        // before the first forward pass, not inferred.
        assert!(!cats.classes().iter().any(|c| matches!(c.why, Why::InferredOptimizerState | Why::Unsplit)));
    }
}

#[test]
fn the_optimizer_named_by_a_frame_of_its_step_splits_as_its_annotation_does() {
    let (_, _, cats, truth) = run(&Options { annotations: false, ..warm(OptimizerKind::AdamW) });
    let inf = cats.inference.as_ref().unwrap();
    assert!(inf.optimizer_named_by.as_deref().is_some_and(|b| b.contains("torch/optim/adamw.py")), "{inf:?}");
    for c in [Category::Parameter, Category::OptimizerState] {
        assert!(within_1pct(cats.at_peak[c.index()], truth.at_peak[c.index()]), "{}", c.label());
    }
}

#[test]
fn without_evidence_nothing_is_mislabelled_the_memory_stays_persistent() {
    // Recorded after a warm-up step and ended in the next forward pass, with no annotations:
    // no optimizer step, no zero_grad, no gradient made or freed in the recording.
    let opts = Options {
        annotations: false,
        end_in_forward: true,
        zero_grad_after_forward: true,
        ..warm(OptimizerKind::AdamW)
    };
    let (_, tl, cats, truth) = run(&opts);
    let (p, o, g) = (Category::Parameter.index(), Category::OptimizerState.index(), Category::Gradient.index());
    let made = truth.at_peak[p] + truth.at_peak[o] + truth.at_peak[g];
    assert!(truth.at_peak[o] > 0 && truth.at_peak[g] > 0);
    let persistent = cats.at_peak[Category::Persistent.index()];
    assert_eq!(persistent, made, "parameters, optimizer state and last step's gradients, unsplit");
    for (e, class) in tl.elements().iter().zip(cats.classes()) {
        if e.alloc_entry.is_none() && e.free_entry.is_none() {
            assert_eq!(class.category, Category::Persistent, "{e:?}");
        }
    }
    for c in [Category::OptimizerState, Category::Gradient] {
        assert_eq!(cats.at_peak[c.index()], 0, "nothing called {}", c.label());
    }
    let inf = cats.inference.as_ref().unwrap();
    assert_eq!(inf.unsplit_bytes, persistent);
    assert!(inf.summary.contains("no annotation or frame names the optimizer"), "{}", inf.summary);
    assert_eq!(cats.budget.persistent, persistent);
}

#[test]
fn another_optimizer_s_what_if_applies_to_a_run_recorded_mid_training() {
    // AdamW recorded after a warm-up step: its state is inferred, so the what-if for SGD with
    // momentum applies; the generator's SGD run says what the peak would really be.
    let (snap, tl, cats, _) = run(&warm(OptimizerKind::AdamW));
    let change = Change::Optimizer(Optimizer::SgdMomentum);
    let w = what_if(&snap, &tl, &cats, &[change]).remove(0);
    assert!(w.applies, "{}", w.assumption);
    // The words name the run's optimizer as the file does, not an assumed one.
    assert_eq!(w.change, "SGD with momentum instead of the run's optimizer");
    assert!(w.assumption.starts_with("the run's optimizer state (AdamW's, "), "{}", w.assumption);
    let (snap, tl, cats, _) = run(&warm(OptimizerKind::SgdMomentum));
    let w8 = what_if(&snap, &tl, &cats, &[Change::Optimizer(Optimizer::Adam8bit)]).remove(0);
    assert!(w8.assumption.starts_with("the run's optimizer state (SGD's, "), "{}", w8.assumption);
    let (_, _, _, sgd) = run(&warm(OptimizerKind::SgdMomentum));
    let err = (w.predicted_peak_bytes as f64 - sgd.peak_bytes as f64).abs() / sgd.peak_bytes as f64;
    assert!(
        err < 0.10,
        "predicted {} against {} measured ({:.1}%)",
        w.predicted_peak_bytes,
        sgd.peak_bytes,
        100.0 * err
    );
}
