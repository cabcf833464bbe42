//! What-if budgets: the peak of a real run predicted under a change of the training setup,
//! from the bytes of each category at every step.
//!
//! Each change rewrites some categories' bytes at every step of the Active Memory Timeline
//! (the rest stay as measured) and the prediction is the highest total of the rewritten run:
//! one sweep over the elements' starts and ends, O(n log n) for the sort and O(n × changes)
//! for the sweep. `docs/doctor.md` states each change's assumption and how the predictions
//! compare with the generator's simulation of the same loop under each change.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::layers::{first_of_each_layer, Act};
use crate::categories::{Categories, Category, Phase, N};
use crate::model::{FrameId, Snapshot, StackId};
use crate::sites::call_site;
use crate::timeline::Timeline;

/// An optimizer to compare with the run's own (taken to be Adam or AdamW: two fp32 moments).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Optimizer {
    /// SGD with momentum: one buffer the size of the parameters.
    SgdMomentum,
    /// 8-bit Adam (bitsandbytes): two 1-byte moments per parameter plus an fp32 scale per
    /// 2048 values of each.
    Adam8bit,
    /// Adafactor without momentum: a factored second moment, about 2√n values per n-value
    /// (square) matrix.
    Adafactor,
}

/// A change of the training setup.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Activation checkpointing per layer (layers told apart by their activations' call site,
    /// and layers running the same code by how those repeat: `layers.rs`).
    Checkpointing,
    /// Activations stored in bf16 instead of fp32.
    Bf16Activations,
    /// Another optimizer.
    Optimizer(Optimizer),
    /// `zero_grad(set_to_none=True)` before the forward pass.
    ZeroGradBeforeForward,
    /// The batch times this factor.
    Batch(f64),
}

impl Change {
    /// The changes the doctor reports by default.
    pub const DEFAULTS: [Change; 8] = [
        Change::Checkpointing,
        Change::Bf16Activations,
        Change::Optimizer(Optimizer::SgdMomentum),
        Change::Optimizer(Optimizer::Adam8bit),
        Change::Optimizer(Optimizer::Adafactor),
        Change::ZeroGradBeforeForward,
        Change::Batch(2.0),
        Change::Batch(0.5),
    ];

    /// A short stable name: `checkpointing`, `optimizer:sgd_momentum`, `batch:x2`.
    pub fn key(&self) -> String {
        match self {
            Change::Checkpointing => "checkpointing".into(),
            Change::Bf16Activations => "bf16_activations".into(),
            Change::Optimizer(Optimizer::SgdMomentum) => "optimizer:sgd_momentum".into(),
            Change::Optimizer(Optimizer::Adam8bit) => "optimizer:adam_8bit".into(),
            Change::Optimizer(Optimizer::Adafactor) => "optimizer:adafactor".into(),
            Change::ZeroGradBeforeForward => "zero_grad_before_forward".into(),
            Change::Batch(k) => format!("batch:x{k}"),
        }
    }

    /// The change in words.
    pub fn describe(&self) -> String {
        match self {
            Change::Checkpointing => "activation checkpointing per layer".into(),
            Change::Bf16Activations => "activations in bf16 instead of fp32".into(),
            // The prediction replaces the state the run measured, whatever kept it.
            Change::Optimizer(Optimizer::SgdMomentum) => "SGD with momentum instead of the run's optimizer".into(),
            Change::Optimizer(Optimizer::Adam8bit) => "8-bit Adam instead of the run's optimizer".into(),
            Change::Optimizer(Optimizer::Adafactor) => "Adafactor instead of the run's optimizer".into(),
            Change::ZeroGradBeforeForward => "zero_grad(set_to_none=True) before the forward pass".into(),
            Change::Batch(k) => format!("batch size x {k}"),
        }
    }
}

/// A predicted peak.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    /// The change in words.
    pub change: String,
    /// Its stable name ([`Change::key`]).
    pub key: String,
    /// The change itself.
    pub option: Change,
    /// The predicted highest live bytes.
    pub predicted_peak_bytes: u64,
    /// The run's own highest live bytes.
    pub baseline_peak_bytes: u64,
    /// The step the predicted peak falls on (in the run's own timeline).
    pub predicted_peak_step: u32,
    /// What the prediction assumes.
    pub assumption: String,
    /// The categories (terms) it changed.
    pub changed: Vec<Category>,
    /// False when the run lacks what the change needs (no optimizer state, no activations):
    /// the prediction is then the baseline.
    pub applies: bool,
}

/// What the predictions need of a run, found once ([`Basis::new`]: O(n log n)); each
/// [`Basis::predict`] is then one sweep, O(n × changes), so a viewer can move a slider
/// (batch × k) without analysing the run again.
#[derive(Clone, Debug)]
pub struct Basis {
    /// (step, element id, start?) sorted by step.
    events: Vec<(u32, u32, bool)>,
    /// Per element: its category, and whether it is an activation checkpointing would drop.
    class: Vec<(u8, bool)>,
    /// The largest activations of one layer in one iteration that checkpointing drops (bytes).
    layer_max: u64,
    /// Peak optimizer state.
    optimizer_max: u64,
    /// Peak activations and inputs.
    activation_max: u64,
    input_max: u64,
    /// Parameter bytes (each parameter once) and the Adafactor and 8-bit estimates.
    params: u64,
    adafactor: u64,
    adam8: u64,
    /// The run's optimizer, where the file names it (`Inference::optimizer`).
    optimizer: Option<String>,
}

impl Basis {
    /// Finds what the predictions need in the run (`tl`: its blocks timeline, `cats`: its
    /// categories).
    pub fn new(snap: &Snapshot, tl: &Timeline, cats: &Categories) -> Basis {
        basis(snap, tl, cats)
    }
}

fn basis(snap: &Snapshot, tl: &Timeline, cats: &Categories) -> Basis {
    let els = tl.elements();
    let mut events = Vec::with_capacity(2 * els.len());
    let mut class = Vec::with_capacity(els.len());
    let mut sites: FxHashMap<StackId, Option<FrameId>> = FxHashMap::default();
    let mut acts = Vec::new();
    let (mut params, mut adafactor, mut adam8) = (0u64, 0u64, 0u64);
    for (id, e) in els.iter().enumerate() {
        let c = cats.class(id as u32).category;
        class.push((c.index() as u8, false));
        if e.end > e.start {
            events.push((e.start, id as u32, true));
            events.push((e.end, id as u32, false));
        }
        match c {
            Category::Activation => {
                let site = e.stack.and_then(|s| *sites.entry(s).or_insert_with(|| call_site(snap, s)));
                let iteration = cats.iterations.partition_point(|it| it.start <= e.start) as u32;
                acts.push(Act { iteration, site, start: e.start, id: id as u32, size: e.size });
            }
            Category::Parameter => {
                params = params.saturating_add(e.size);
                let n = e.size / 4;
                adafactor = adafactor.saturating_add(8 * ((n as f64).sqrt().ceil() as u64));
                adam8 = adam8.saturating_add((2 * n).saturating_add(8 * n.div_ceil(2048)));
            }
            _ => {}
        }
    }
    let (firsts, layer_max) = first_of_each_layer(acts);
    for first in firsts {
        class[first as usize].1 = true;
    }
    // Every activation but each layer's first is dropped.
    for c in class.iter_mut() {
        c.1 = usize::from(c.0) == Category::Activation.index() && !c.1;
    }
    events.sort_unstable_by_key(|&(step, id, start)| (step, start, id));
    Basis {
        events,
        class,
        layer_max,
        optimizer_max: cats.max[Category::OptimizerState.index()],
        activation_max: cats.max[Category::Activation.index()],
        input_max: cats.max[Category::Input.index()],
        params,
        adafactor,
        adam8,
        optimizer: cats.inference.as_ref().and_then(|i| i.optimizer.clone()),
    }
}

/// The peak under each of `changes`, predicted from the run's categories (`tl`: its blocks
/// timeline, `cats`: its categories).
pub fn what_if(snap: &Snapshot, tl: &Timeline, cats: &Categories, changes: &[Change]) -> Vec<WhatIf> {
    Basis::new(snap, tl, cats).predict(tl, cats, changes)
}

impl Basis {
    /// The peak under each of `changes` (`tl` and `cats`: those the basis was found in).
    pub fn predict(&self, tl: &Timeline, cats: &Categories, changes: &[Change]) -> Vec<WhatIf> {
        predict(self, tl, cats, changes)
    }
}

fn predict(t: &Basis, tl: &Timeline, cats: &Categories, changes: &[Change]) -> Vec<WhatIf> {
    let n = tl.n_steps();
    let idx = |c: Category| c.index();
    let opt_ratio = |o: Optimizer| {
        let target = match o {
            Optimizer::SgdMomentum => t.params,
            Optimizer::Adam8bit => t.adam8,
            Optimizer::Adafactor => t.adafactor,
        };
        if t.optimizer_max == 0 {
            1.0
        } else {
            target as f64 / t.optimizer_max as f64
        }
    };
    let ratios: Vec<f64> =
        changes.iter().map(|c| if let Change::Optimizer(o) = c { opt_ratio(*o) } else { 1.0 }).collect();
    let mut best: Vec<(f64, u32)> = vec![(-1.0, 0); changes.len()];
    // The run's own peak (the sweep's highest total, or the state before the first step).
    let mut baseline = (0u64, tl.peak_step());
    let mut bytes = [0u64; N];
    let mut dropped = 0u64;
    let mut k = 0;
    let mut grads_in_forward = false;
    for step in 0..n {
        while let Some(&(s, id, start)) = t.events.get(k) {
            if s > step {
                break;
            }
            let (c, drop) = t.class[id as usize];
            let size = tl.elements()[id as usize].size;
            if start {
                bytes[usize::from(c)] = bytes[usize::from(c)].saturating_add(size);
                if drop {
                    dropped = dropped.saturating_add(size);
                }
            } else {
                bytes[usize::from(c)] = bytes[usize::from(c)].saturating_sub(size);
                if drop {
                    dropped = dropped.saturating_sub(size);
                }
            }
            k += 1;
        }
        let phase = cats.phase(step);
        let total = crate::layout::sum(bytes.iter().copied());
        grads_in_forward |= bytes[idx(Category::Gradient)] > 0 && !matches!(phase, Phase::Backward | Phase::Optimizer);
        let b = |c: Category| bytes[idx(c)] as f64;
        for (j, change) in changes.iter().enumerate() {
            let saving = match *change {
                Change::Checkpointing => (dropped - dropped.min(t.layer_max)) as f64,
                Change::Bf16Activations => b(Category::Activation) / 2.0,
                Change::Optimizer(_) => b(Category::OptimizerState) * (1.0 - ratios[j]),
                Change::ZeroGradBeforeForward => match phase {
                    Phase::Backward | Phase::Optimizer => 0.0,
                    _ => b(Category::Gradient),
                },
                Change::Batch(f) => {
                    let mut scaled = b(Category::Activation) + b(Category::Input);
                    if matches!(phase, Phase::Forward | Phase::Backward) {
                        scaled += b(Category::Temporary) + b(Category::AutogradDetail);
                    }
                    -(f - 1.0) * scaled
                }
            };
            let v = total as f64 - saving;
            if v > best[j].0 {
                best[j] = (v, step);
            }
        }
    }
    baseline.0 = tl.peak_bytes();
    changes
        .iter()
        .zip(best)
        .map(|(c, (v, step))| {
            let (assumption, changed, applies) = explain(c, t, grads_in_forward);
            WhatIf {
                change: c.describe(),
                key: c.key(),
                option: *c,
                predicted_peak_bytes: if applies { v.max(0.0).round() as u64 } else { baseline.0 },
                baseline_peak_bytes: baseline.0,
                predicted_peak_step: if applies { step } else { baseline.1 },
                assumption,
                changed,
                applies,
            }
        })
        .collect()
}

fn explain(c: &Change, t: &Basis, grads_in_forward: bool) -> (String, Vec<Category>, bool) {
    use Category as C;
    let size = |b: u64| crate::units::format_size(i128::from(b));
    let (text, changed, applies, missing) = match c {
        Change::Checkpointing => (
            "each layer keeps only its first activation (its input) through the forward pass and recomputes the rest in backward, one layer at a time; layers are told apart by the call site (first frame of your code) of their activations in each iteration, and layers running the same code by how their sites' activations repeat".to_string(),
            vec![C::Activation],
            t.class.iter().any(|c| c.1),
            "no layer has more than one activation",
        ),
        Change::Bf16Activations => (
            "every activation is fp32 today and would be stored in bf16 (half the bytes); inputs, temporaries and autograd buffers unchanged".into(),
            vec![C::Activation],
            t.activation_max > 0,
            "the run has no activations",
        ),
        Change::Optimizer(o) => {
            let (what, bytes) = match o {
                Optimizer::SgdMomentum => ("one momentum buffer the size of the parameters", t.params),
                Optimizer::Adam8bit => ("two 1-byte moments per fp32 parameter plus an fp32 scale per 2048 values", t.adam8),
                Optimizer::Adafactor => (
                    "a factored second moment of about 2*sqrt(n) fp32 values per n-value tensor (square matrices), no momentum",
                    t.adafactor,
                ),
            };
            (
                format!(
                    "the run's optimizer state ({}{} at its highest) becomes {what} ({} for {} of parameters), alive at the same times; optimizer intermediates unchanged",
                    t.optimizer.as_ref().map(|o| format!("{o}'s, ")).unwrap_or_default(),
                    size(t.optimizer_max),
                    size(bytes),
                    size(t.params),
                ),
                vec![C::OptimizerState],
                t.optimizer_max > 0,
                "the run has no optimizer state",
            )
        }
        Change::ZeroGradBeforeForward => (
            "gradients alive outside backward and the optimizer step are last step's, kept until zero_grad: with set_to_none before forward they are gone".into(),
            vec![C::Gradient],
            grads_in_forward,
            "no gradient is alive outside backward and the optimizer step: zero_grad already runs before the forward pass (or gradients are not kept)",
        ),
        Change::Batch(k) => (
            format!("activations, inputs, and temporaries and autograd buffers alive during forward and backward scale with the batch (x {k}); parameters, gradients, optimizer state and optimizer intermediates do not"),
            vec![C::Activation, C::Input, C::Temporary, C::AutogradDetail],
            (t.activation_max > 0 || t.input_max > 0) && k.is_finite() && *k >= 0.0,
            "the run has no activations or inputs (or the factor is not a number of at least 0)",
        ),
    };
    if applies {
        (text, changed, true)
    } else {
        (format!("does not apply: {missing}"), Vec::new(), false)
    }
}
