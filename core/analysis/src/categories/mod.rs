//! What the memory is for: a category for every allocation of the Active Memory Timeline
//! (parameter, optimizer state, gradient, input, activation, autograd detail, temporary,
//! unknown, and outside PyTorch's allocator in merged snapshots) with the rule that decided it, the training phase of every event, iterations
//! with their peaks, per-category bytes over time, the memory budget and leak suspects.
//!
//! Sources, in order: a `category` field in the snapshot; the user's [`Rules`]; built-in
//! rules from stack frames, `record_function` annotations and lifetime. `docs/categories.md`
//! describes every rule.

use regex_lite::Regex;
use serde::{Deserialize, Serialize};

use crate::model::Snapshot;
use crate::timeline::Timeline;

mod analysis;
mod evidence;
mod persistent;
mod pytorch;

pub use analysis::{Analysis, Stage};
pub use evidence::{annotation_phase, spans, stack_phase, Span};
pub use persistent::Inference;
pub use pytorch::{beside, beside_rows, timeline_rows, Beside, Row};

/// Number of categories.
pub const N: usize = 10;

/// What an allocation is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Model weights.
    Parameter,
    /// Optimizer state (Adam's moments), made by the first step and kept.
    OptimizerState,
    /// Gradients, made in backward and consumed by the step.
    Gradient,
    /// Batches, made outside the model and used through a forward pass.
    Input,
    /// Made in forward and kept (for backward, or as outputs).
    Activation,
    /// Made by autograd in backward and freed there.
    AutogradDetail,
    /// Short-lived: workspaces, intermediates, optimizer intermediates.
    Temporary,
    /// No evidence.
    Unknown,
    /// Allocated from the driver outside PyTorch's caching allocator (NCCL, cuBLAS
    /// workspaces, CuPy): only in snapshots merged with a driver capture.
    OutsideAllocator,
    /// Alive from before the recording to its end with too little evidence to tell
    /// parameters from optimizer state (see `persistent.rs`).
    Persistent,
}

impl Category {
    /// All categories, in the order of their indices (profiles store their bytes in this
    /// order, so a new one comes last).
    pub const ALL: [Category; N] = [
        Category::Parameter,
        Category::OptimizerState,
        Category::Gradient,
        Category::Input,
        Category::Activation,
        Category::AutogradDetail,
        Category::Temporary,
        Category::Unknown,
        Category::OutsideAllocator,
        Category::Persistent,
    ];

    /// All categories in stacking order, bottom first: what lasts below what comes and goes.
    pub const STACKED: [Category; N] = [
        Category::Parameter,
        Category::OptimizerState,
        Category::Persistent,
        Category::Gradient,
        Category::Input,
        Category::Activation,
        Category::AutogradDetail,
        Category::Temporary,
        Category::Unknown,
        Category::OutsideAllocator,
    ];

    /// Position in [`Category::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name in JSON and rule files: `optimizer_state`.
    pub fn key(self) -> &'static str {
        [
            "parameter",
            "optimizer_state",
            "gradient",
            "input",
            "activation",
            "autograd_detail",
            "temporary",
            "unknown",
            "outside_allocator",
            "persistent",
        ][self.index()]
    }

    /// The name for people: `optimizer state`.
    pub fn label(self) -> &'static str {
        [
            "parameter",
            "optimizer state",
            "gradient",
            "input",
            "activation",
            "autograd detail",
            "temporary",
            "unknown",
            "outside PyTorch's allocator",
            "persistent before recording",
        ][self.index()]
    }

    /// Reads a key, a label or PyTorch's profiler name (`OPTIMIZER_STATE`), in any case.
    pub fn parse(s: &str) -> Option<Category> {
        let k = s.trim().to_ascii_lowercase().replace([' ', '-'], "_");
        let k = k.strip_prefix("category.").unwrap_or(&k);
        Category::ALL.into_iter().find(|c| c.key() == k || format!("{}s", c.key()) == k)
    }
}

/// Where in a training step an event happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Phase {
    /// Outside the other phases (set-up, data loading, between steps).
    Other,
    /// A module's forward.
    Forward,
    /// Autograd's backward.
    Backward,
    /// `optimizer.zero_grad`.
    ZeroGrad,
    /// `optimizer.step`.
    Optimizer,
}

/// What a user rule's pattern is matched against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Any frame of the allocation's stack, as `filename:line:name`.
    #[default]
    Frame,
    /// Any `record_function` annotation open when it was allocated.
    Annotation,
}

/// One user rule: a regular expression and the category it gives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// A regular expression (`regex` syntax, unanchored).
    pub pattern: String,
    /// The category of what matches.
    pub category: Category,
    /// What the pattern is matched against.
    #[serde(default)]
    pub on: Target,
}

/// The user's rules, tried in order before the built-in ones. The JSON form
/// (`{"rules": [{"pattern": "kv_cache", "category": "activation", "on": "frame"}]}`) is what the
/// viewer exports and `memscape --rules` reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    /// The rules, first match wins.
    pub rules: Vec<Rule>,
}

impl Rules {
    /// Reads the JSON form; the message names what is wrong and where.
    pub fn from_json(text: &str) -> Result<Rules, String> {
        let rules: Rules = serde_json::from_str(text).map_err(|e| format!("not a rules file: {e}"))?;
        rules.compile()?;
        Ok(rules)
    }

    /// The rules ready to match, or which one is not a valid regular expression.
    pub fn compile(&self) -> Result<Compiled, String> {
        let regexes = self
            .rules
            .iter()
            .enumerate()
            .map(|(k, r)| Regex::new(&r.pattern).map_err(|e| format!("rule {} ({:?}): {e}", k + 1, r.pattern)))
            .collect::<Result<_, _>>()?;
        Ok(Compiled { rules: self.clone(), regexes })
    }

    /// The JSON form.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// Rules whose patterns compiled ([`Rules::compile`]).
#[derive(Clone, Debug, Default)]
pub struct Compiled {
    rules: Rules,
    regexes: Vec<Regex>,
}

impl Compiled {
    /// The rules as written.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }
}

/// The rule that decided a category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Why {
    /// The snapshot's own `category` field.
    Field,
    /// The user's rule with this index.
    User(u16),
    /// Allocated before recording inside `optimizer.step`.
    EarlierOptimizer,
    /// Allocated before recording and freed by `zero_grad`.
    ClearedByZeroGrad,
    /// Allocated before recording by autograd.
    EarlierAutograd,
    /// Allocated before recording inside a forward and alive at the end.
    EarlierForward,
    /// Allocated before recording and freed in backward.
    FreedInBackward,
    /// Allocated before recording and freed during a forward pass.
    FreedInForward,
    /// Allocated before recording and freed inside `optimizer.step`.
    FreedInOptimizer,
    /// Alive from before the first forward pass to the end.
    AliveThroughout,
    /// Made in `optimizer.step` and alive after it.
    OptimizerKept,
    /// Made in `optimizer.step` and freed within it.
    OptimizerTemp,
    /// Made in `zero_grad`.
    ZeroGradTemp,
    /// Made in backward and alive after it.
    BackwardKept,
    /// Made in backward and freed in backward.
    BackwardTemp,
    /// Made in forward and freed in backward.
    ForwardSaved,
    /// Made in forward and alive after the forward and backward passes.
    ForwardKept,
    /// Made in forward and freed in forward.
    ForwardTemp,
    /// Made outside the model and used through a training phase.
    UsedByModel,
    /// Made and freed outside the training phases.
    OutsideTemp,
    /// A driver allocation outside PyTorch's allocator (a merged snapshot).
    OutsideAllocator,
    /// Nothing to go on.
    NoEvidence,
    /// Alive before the recording and throughout, no stack: one block per gradient of its
    /// size, the optimizer keeping the others ([`Inference`]).
    InferredParameter,
    /// Alive before the recording and throughout, no stack: a block of a gradient's size past
    /// the one per gradient that is the parameter.
    InferredOptimizerState,
    /// Alive before the recording and throughout, no stack, of a size no gradient has, once
    /// the optimizer's state is accounted for: a buffer or frozen parameter.
    InferredBuffer,
    /// Alive before the recording and throughout, no stack, and too little evidence to split.
    Unsplit,
}

impl Why {
    /// The rule in words.
    pub fn describe(self, rules: &Rules) -> String {
        let s = match self {
            Why::Field => "the snapshot's own category field",
            Why::User(k) => {
                return match rules.rules.get(k as usize) {
                    Some(r) => format!(
                        "your rule {}: /{}/ on {}",
                        k + 1,
                        r.pattern,
                        if r.on == Target::Frame { "frames" } else { "annotations" }
                    ),
                    None => format!("your rule {}", k + 1),
                }
            }
            Why::EarlierOptimizer => "allocated before recording, inside optimizer.step, and kept: optimizer state",
            Why::ClearedByZeroGrad => "allocated before recording and freed by zero_grad: the previous step's gradient",
            Why::EarlierAutograd => "allocated before recording by autograd (backward) and kept: gradient",
            Why::EarlierForward => "allocated before recording inside a forward and kept: activation",
            Why::FreedInBackward => "allocated before recording and freed in backward: activation",
            Why::FreedInForward => {
                "allocated before recording and freed when a forward pass replaced it: the previous step's output (activation)"
            }
            Why::FreedInOptimizer => {
                "allocated before recording and freed inside optimizer.step, which replaced it: the previous step's optimizer state"
            }
            Why::AliveThroughout => "alive from before the first forward pass to the end: parameter",
            Why::OptimizerKept => "made in optimizer.step and alive after it: optimizer state",
            Why::OptimizerTemp => "made in optimizer.step and freed within it: optimizer intermediate",
            Why::ZeroGradTemp => "made in zero_grad: temporary",
            Why::BackwardKept => "made in backward and alive after it (consumed by the step): gradient",
            Why::BackwardTemp => "made in backward and freed in backward: autograd detail",
            Why::ForwardSaved => "made in forward and freed in backward: activation saved for backward",
            Why::ForwardKept => "made in forward and alive after it: activation (an output or kept tensor)",
            Why::ForwardTemp => "made in forward and freed in forward: temporary",
            Why::UsedByModel => "made outside the model and alive into a training phase: input",
            Why::OutsideTemp => "made and freed outside forward, backward and the optimizer: temporary",
            Why::NoEvidence => "no stack, annotation or lifetime evidence",
            Why::OutsideAllocator => "allocated from the driver outside PyTorch's allocator (memscape capture --torch, memscape merge)",
            Why::InferredParameter => {
                "inferred: alive before recording with no stack; one block per gradient of its size is the parameter, the optimizer keeping the others (its step's name says how many)"
            }
            Why::InferredOptimizerState => {
                "inferred: alive before recording with no stack; a block of a gradient's size past the parameter's own: optimizer state (its step's name says how many per parameter)"
            }
            Why::InferredBuffer => {
                "inferred: alive before recording with no stack, of a size no gradient has, the optimizer's state being accounted for: a buffer or frozen parameter"
            }
            Why::Unsplit => {
                "alive before recording and throughout, no stack, and too little evidence (optimizer, gradients, sizes) to tell parameters from optimizer state"
            }
        };
        s.to_string()
    }
}

/// A decision: the category and the rule that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Class {
    /// The category.
    pub category: Category,
    /// The rule.
    pub why: Why,
}

/// One training iteration, in timeline steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Iteration {
    /// First step.
    pub start: u32,
    /// First step after it.
    pub end: u32,
    /// Highest live bytes in it and where.
    pub peak_bytes: u64,
    /// The step of `peak_bytes`.
    pub peak_step: u32,
    /// It contains the phase that ends an iteration (an optimizer step, or a backward pass
    /// when there is no optimizer); the trace's first and last may be cut.
    pub complete: bool,
}

/// Allocations of one call site that survive iterations and grow every iteration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leak {
    /// The call site (first non-library frame), `filename:line:name`.
    pub site: String,
    /// A stack of one of its allocations, innermost first, filtered as in the viewer.
    pub stack: Vec<String>,
    /// Live bytes of the site at the end of each complete iteration.
    pub live_at_iteration_end: Vec<u64>,
    /// Average growth per iteration.
    pub bytes_per_iteration: u64,
    /// Its allocations alive at the end of the last complete iteration.
    pub count: u32,
}

/// `parameters + optimizer state + max(gradients + optimizer intermediates, activations)`,
/// each term measured (its highest value in the trace); memory alive before the recording
/// that could not be split into parameters and optimizer state is a term of its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// Parameters at their highest.
    pub parameters: u64,
    /// Optimizer state at its highest.
    pub optimizer_state: u64,
    /// Memory alive before the recording that could not be split into the two above.
    #[serde(default)]
    pub persistent: u64,
    /// Gradients plus temporaries, at their highest during an optimizer step (gradients
    /// alone when there is none).
    pub gradients_and_intermediates: u64,
    /// Activations (and inputs) at their highest.
    pub activations: u64,
    /// The formula's total.
    pub total: u64,
    /// The measured peak, for comparison.
    pub peak: u64,
}

/// How iterations were found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IterationSource {
    /// One per optimizer step (from annotations or stacks).
    OptimizerSteps,
    /// One per backward pass (no optimizer step seen).
    BackwardPasses,
    /// No repeating phases: the whole trace is one.
    None,
}

/// In words, as a place in the step: "in a forward pass", "in the optimizer step" (the page's
/// doctor and `memscape doctor` say it so).
impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Forward => "in a forward pass",
            Phase::Backward => "in the backward pass",
            Phase::ZeroGrad => "in zero_grad",
            Phase::Optimizer => "in the optimizer step",
            Phase::Other => "outside forward, backward and the optimizer",
        })
    }
}

/// In words, as the page's category view and `memscape stats` say it: "one per optimizer
/// step".
impl std::fmt::Display for IterationSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IterationSource::OptimizerSteps => "one per optimizer step",
            IterationSource::BackwardPasses => "one per backward pass",
            IterationSource::None => "no training steps found",
        })
    }
}

/// The categories of one device's Active Memory Timeline.
#[derive(Clone, Debug)]
pub struct Categories {
    classes: Vec<Class>,
    /// The category of the element that changes at each step (the amount is the change of
    /// the timeline's total there): one byte a step.
    step_cat: Vec<u8>,
    /// Runs of phases over the steps: (first step, phase).
    phase_runs: Vec<(u32, Phase)>,
    checkpoints: Vec<[u64; N]>,
    /// Highest bytes of each category over the trace.
    pub max: [u64; N],
    /// Bytes per category at the timeline's peak.
    pub at_peak: [u64; N],
    /// Iterations in order.
    pub iterations: Vec<Iteration>,
    /// How they were found.
    pub iteration_source: IterationSource,
    /// Leak suspects, largest growth first.
    pub leaks: Vec<Leak>,
    /// The memory budget.
    pub budget: Budget,
    /// Bytes of each category of elements decided by each rule (for the documentation and
    /// the statistics).
    pub by_rule: Vec<(Why, Category, u64)>,
    /// What was inferred of the memory alive before the recording, when there was some.
    pub inference: Option<Inference>,
    /// The blocks it decided, by address (sorted).
    before_recording: Vec<(u64, Class)>,
}

/// Per-category checkpoints are kept every this many steps ([`Categories::bytes_at`] replays
/// at most this many).
const CHECKPOINT: usize = 1024;

/// Classifies every element of a blocks timeline (`tl` of `snap`) and measures the
/// categories over time, in one go ([`Analysis`] does the same in slices).
pub fn analyze(snap: &Snapshot, tl: &Timeline, compiled: &Compiled) -> Categories {
    Analysis::new(snap, tl, compiled).finish(snap, tl)
}

impl Categories {
    /// The decision for element `id` of the timeline.
    pub fn class(&self, id: u32) -> Class {
        self.classes.get(id as usize).copied().unwrap_or(Class { category: Category::Unknown, why: Why::NoEvidence })
    }

    /// The decisions, by element id.
    pub fn classes(&self) -> &[Class] {
        &self.classes
    }

    /// The decision for the block at `addr` when it is memory alive from before the recording
    /// to its end with nothing of its own to go on (inferred, or left persistent). O(log n).
    pub fn before_recording(&self, addr: u64) -> Option<Class> {
        let k = self.before_recording.binary_search_by_key(&addr, |b| b.0).ok()?;
        Some(self.before_recording[k].1)
    }

    /// The phase of a step.
    pub fn phase(&self, step: u32) -> Phase {
        match self.phase_runs.partition_point(|r| r.0 <= step) {
            0 => Phase::Other,
            k => self.phase_runs[k - 1].1,
        }
    }

    /// Applies the change at `step` (> 0): the total's change, to the category of the element
    /// allocated or freed there.
    pub(super) fn apply(&self, tl: &Timeline, step: u32, bytes: &mut [u64; N]) {
        let Some(&k) = self.step_cat.get(step as usize) else { return };
        let t = tl.totals();
        let (Some(&now), Some(&before)) = (t.get(step as usize), t.get(step as usize - 1)) else { return };
        if let Some(b) = bytes.get_mut(usize::from(k)) {
            *b = if now >= before { b.saturating_add(now - before) } else { b.saturating_sub(before - now) };
        }
    }

    /// Bytes alive per category at `step`.
    pub fn bytes_at(&self, tl: &Timeline, step: u32) -> [u64; N] {
        let k = step as usize / CHECKPOINT;
        let Some(mut b) = self.checkpoints.get(k).copied() else { return [0; N] };
        for s in (k * CHECKPOINT) as u32 + 1..=step {
            self.apply(tl, s, &mut b);
        }
        b
    }

    /// Per pixel column of the window `start..end` (steps): the step with the highest total
    /// in it and the bytes per category there (the same sample as the timeline's columns).
    pub fn columns(&self, tl: &Timeline, start: f64, end: f64, columns: u32) -> Vec<(u32, [u64; N])> {
        let n = f64::from(tl.n_steps());
        let width = (end - start) / f64::from(columns.max(1));
        if !(width.is_finite() && width > 0.0) || n == 0.0 {
            return Vec::new();
        }
        (0..columns.max(1))
            .map(|c| {
                let lo = (start + width * f64::from(c)).max(0.0);
                let hi = (lo + width).min(n);
                if hi <= lo {
                    return (u32::MAX, [0; N]);
                }
                let step = tl.argmax_in(lo.floor() as u32, (hi.ceil() as u32).max(lo.floor() as u32 + 1));
                (step, self.bytes_at(tl, step))
            })
            .collect()
    }
}

/// Bytes of one category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CategoryBytes {
    /// The category.
    pub category: Category,
    /// Bytes.
    pub bytes: u64,
}

/// A rule and what it decided, in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleUse {
    /// The rule in words.
    pub rule: String,
    /// The category it gave.
    pub category: Category,
    /// Bytes of the allocations it decided (each counted once, whatever its lifetime).
    pub bytes: u64,
}

/// The findings of one device, as `memscape stats --json` prints them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The device.
    pub device: u32,
    /// Live bytes at the peak and its step.
    pub peak_bytes: u64,
    /// The step of the peak.
    pub peak_step: u32,
    /// Bytes per category at the peak.
    pub at_peak: Vec<CategoryBytes>,
    /// Highest bytes of each category over the trace.
    pub max: Vec<CategoryBytes>,
    /// The budget formula, measured.
    pub budget: Budget,
    /// How iterations were found.
    pub iteration_source: IterationSource,
    /// The iterations.
    pub iterations: Vec<Iteration>,
    /// Leak suspects.
    pub leaks: Vec<Leak>,
    /// What each rule decided.
    pub rules: Vec<RuleUse>,
    /// What was inferred of the memory alive before the recording (with no stack, to the
    /// end), when there was some.
    #[serde(default)]
    pub inference: Option<Inference>,
}

impl Categories {
    /// The findings as plain data.
    pub fn report(&self, tl: &Timeline, rules: &Rules) -> Report {
        let list =
            |b: &[u64; N]| Category::ALL.iter().map(|&c| CategoryBytes { category: c, bytes: b[c.index()] }).collect();
        Report {
            device: tl.device() as u32,
            peak_bytes: tl.peak_bytes(),
            peak_step: tl.peak_step(),
            at_peak: list(&self.at_peak),
            max: list(&self.max),
            budget: self.budget,
            iteration_source: self.iteration_source,
            iterations: self.iterations.clone(),
            leaks: self.leaks.clone(),
            rules: self
                .by_rule
                .iter()
                .map(|&(why, category, bytes)| RuleUse { rule: why.describe(rules), category, bytes })
                .collect(),
            inference: self.inference.clone(),
        }
    }
}
