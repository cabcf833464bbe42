//! What the memory is for: a category for every allocation of the Active Memory Timeline
//! (parameter, optimizer state, gradient, input, activation, autograd detail, temporary,
//! unknown) with the rule that decided it, the training phase of every event, iterations
//! with their peaks, per-category bytes over time, the memory budget and leak suspects.
//!
//! Sources, in order: a `category` field in the snapshot; the user's [`Rules`]; built-in
//! rules from stack frames, `record_function` annotations and lifetime. `docs/categories.md`
//! describes every rule.

use regex_lite::Regex;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::frames::frame_line;
use crate::model::{Action, Frame, FrameId, Snapshot, StackId};
use crate::timeline::{Origin, Timeline, TimelineKind};

/// Number of categories.
pub const N: usize = 8;

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
}

impl Category {
    /// All categories, in stacking order (bottom first).
    pub const ALL: [Category; N] = [
        Category::Parameter,
        Category::OptimizerState,
        Category::Gradient,
        Category::Input,
        Category::Activation,
        Category::AutogradDetail,
        Category::Temporary,
        Category::Unknown,
    ];

    /// Position in [`Category::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name in JSON and rule files: `optimizer_state`.
    pub fn key(self) -> &'static str {
        ["parameter", "optimizer_state", "gradient", "input", "activation", "autograd_detail", "temporary", "unknown"]
            [self.index()]
    }

    /// The name for people: `optimizer state`.
    pub fn label(self) -> &'static str {
        ["parameter", "optimizer state", "gradient", "input", "activation", "autograd detail", "temporary", "unknown"]
            [self.index()]
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
    /// Nothing to go on.
    NoEvidence,
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
/// each term measured (its highest value in the trace).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// Parameters at their highest.
    pub parameters: u64,
    /// Optimizer state at its highest.
    pub optimizer_state: u64,
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
}

const CHECKPOINT: usize = 1024;

/// `name` of a file as `/`-separated text.
fn has(file: &str, part: &str) -> bool {
    file.contains(part) || file.contains(&part.replace('/', "\\"))
}

fn is_py(file: &str) -> bool {
    file.ends_with(".py")
}

/// A frame from a library (PyTorch, site-packages, the standard library) or C++.
fn is_library(snap: &Snapshot, f: &Frame) -> bool {
    let file = snap.str(f.filename);
    !is_py(file)
        || has(file, "site-packages/")
        || has(file, "dist-packages/")
        || has(file, "/lib/python")
        || has(file, "torch/")
        || file.starts_with('<')
}

/// The first frame of a stack that is the user's own code (else the first Python frame, else
/// the first frame).
pub fn call_site(snap: &Snapshot, stack: StackId) -> Option<FrameId> {
    let ids = snap.stacks.get(stack);
    let frame = |id: &FrameId| &snap.frames[id.0 as usize];
    ids.iter()
        .find(|id| !is_library(snap, frame(id)))
        .or_else(|| ids.iter().find(|id| is_py(snap.str(frame(id).filename))))
        .or_else(|| ids.iter().find(|id| !crate::frames::is_hidden(snap, frame(id))))
        .copied()
}

/// The phase a stack shows: zero_grad, then the optimizer, then autograd, then a forward.
pub fn stack_phase(snap: &Snapshot, stack: StackId) -> Option<Phase> {
    let (mut opt, mut bwd, mut fwd) = (false, false, false);
    for f in snap.stack(stack) {
        let name = snap.str(f.name);
        let file = snap.str(f.filename);
        if name == "zero_grad" && is_py(file) {
            return Some(Phase::ZeroGrad);
        }
        opt |= is_py(file) && has(file, "torch/optim/");
        bwd |= name.contains("torch::autograd::Engine")
            || name.contains("AccumulateGrad")
            || name == "_engine_run_backward"
            || (name == "backward" && (has(file, "torch/_tensor.py") || has(file, "torch/autograd/")));
        fwd |= (name == "_call_impl" && file.ends_with("module.py"))
            || (is_py(file) && (name == "forward" || name.ends_with(".forward")));
    }
    if opt {
        Some(Phase::Optimizer)
    } else if bwd {
        Some(Phase::Backward)
    } else if fwd {
        Some(Phase::Forward)
    } else {
        None
    }
}

/// The phase an annotation name stands for.
pub fn annotation_phase(name: &str) -> Option<Phase> {
    let l = name.to_ascii_lowercase();
    if l.contains("zero_grad") {
        Some(Phase::ZeroGrad)
    } else if l.starts_with("optimizer.step") || l.contains("optimizer_step") || l.contains("optimizer.step") {
        Some(Phase::Optimizer)
    } else if l.contains("backward") {
        Some(Phase::Backward)
    } else if l.contains("forward") {
        Some(Phase::Forward)
    } else {
        None
    }
}

/// One `record_function` span: a START and its END (matched by name, innermost first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// The name.
    pub name: crate::StrId,
    /// µs of the START (`None`: an END without a START, open since before the trace).
    pub start_us: Option<i64>,
    /// µs of the END (`None`: a START without an END, still open at the end).
    pub end_us: Option<i64>,
    /// How many spans were open around it when it closed (or at the end).
    pub depth: u32,
}

/// The `record_function` spans of one device (annotations with device -1 count for all), in
/// the order they close; those still open at the end last.
pub fn spans(snap: &Snapshot, device: usize) -> Vec<Span> {
    let mut open: Vec<(crate::StrId, i64)> = Vec::new();
    let mut out = Vec::new();
    for a in snap.external_annotations.iter().flatten() {
        if a.device >= 0 && a.device != device as i64 {
            continue;
        }
        match snap.str(a.stage) {
            "START" => open.push((a.name, a.time_us)),
            "END" => match open.iter().rposition(|(n, _)| *n == a.name) {
                Some(k) => {
                    let (name, start) = open.remove(k);
                    out.push(Span { name, start_us: Some(start), end_us: Some(a.time_us.max(start)), depth: k as u32 });
                }
                None => {
                    out.push(Span { name: a.name, start_us: None, end_us: Some(a.time_us), depth: open.len() as u32 })
                }
            },
            _ => {}
        }
    }
    for (k, (name, start)) in open.into_iter().enumerate() {
        out.push(Span { name, start_us: Some(start), end_us: None, depth: k as u32 });
    }
    out
}

/// `record_function` spans of one device flattened into time intervals, each with its
/// innermost open span; spans know their parent.
struct Windows {
    /// Interval starts (µs); interval `k` is `bounds[k]..bounds[k + 1]`.
    bounds: Vec<i64>,
    inner: Vec<u32>,
    /// Per span: its phase, or the nearest enclosing span's.
    phase_up: Vec<Option<Phase>>,
    /// Per span: the first user annotation rule matching it or an enclosing span.
    rule_up: Vec<Option<u16>>,
}

impl Windows {
    fn build(snap: &Snapshot, device: usize, rules: &[(u16, &Regex)]) -> Windows {
        let mut spans: Vec<(i64, i64, &str)> = spans(snap, device)
            .into_iter()
            .map(|sp| (sp.start_us.unwrap_or(i64::MIN), sp.end_us.unwrap_or(i64::MAX - 1), snap.str(sp.name)))
            .collect();
        spans.sort_by_key(|s| (s.0, std::cmp::Reverse(s.1)));
        let mut bounds: Vec<i64> = spans.iter().flat_map(|s| [s.0, s.1.saturating_add(1)]).collect();
        bounds.sort_unstable();
        bounds.dedup();
        let mut inner = Vec::with_capacity(bounds.len());
        let mut parent = vec![u32::MAX; spans.len()];
        let mut active: Vec<u32> = Vec::new();
        let mut next = 0;
        for &p in &bounds {
            active.retain(|&s| spans[s as usize].1.saturating_add(1) > p);
            while next < spans.len() && spans[next].0 <= p {
                parent[next] = active.last().copied().unwrap_or(u32::MAX);
                active.push(next as u32);
                next += 1;
            }
            inner.push(active.last().copied().unwrap_or(u32::MAX));
        }
        let mut phase_up: Vec<Option<Phase>> = Vec::with_capacity(spans.len());
        let mut rule_up: Vec<Option<u16>> = Vec::with_capacity(spans.len());
        for (k, s) in spans.iter().enumerate() {
            let up = parent[k] as usize;
            phase_up.push(annotation_phase(s.2).or_else(|| phase_up.get(up).copied().flatten()));
            let own = rules.iter().find(|(_, re)| re.is_match(s.2)).map(|&(k, _)| k);
            rule_up.push(own.or_else(|| rule_up.get(up).copied().flatten()));
        }
        Windows { bounds, inner, phase_up, rule_up }
    }

    /// The innermost span open at `t`.
    fn at(&self, t: i64) -> Option<usize> {
        let k = self.bounds.partition_point(|&b| b <= t).checked_sub(1)?;
        let s = self.inner[k];
        (s != u32::MAX).then_some(s as usize)
    }
}

/// Classifies every element of a blocks timeline (`tl` of `snap`) and measures the
/// categories over time.
pub fn analyze(snap: &Snapshot, tl: &Timeline, compiled: &Compiled) -> Categories {
    debug_assert_eq!(tl.kind(), TimelineKind::Blocks, "categories are for the blocks timeline");
    let (rules, regexes) = (&compiled.rules, &compiled.regexes);
    let on = |t: Target| -> Vec<(u16, &Regex)> {
        rules
            .rules
            .iter()
            .zip(regexes)
            .enumerate()
            .filter(|(_, (r, _))| r.on == t)
            .map(|(k, (_, re))| (k as u16, re))
            .collect()
    };
    let (frame_rules, ann_rules) = (on(Target::Frame), on(Target::Annotation));
    let device = tl.device();
    let trace = snap.trace(device);
    let windows = Windows::build(snap, device, &ann_rules);
    let timed = trace.has_time();

    // Phases of the stacks (cached) and of every entry.
    let mut stack_cache: FxHashMap<StackId, Option<Phase>> = FxHashMap::default();
    let mut phase_of_stack = |s: StackId| *stack_cache.entry(s).or_insert_with(|| stack_phase(snap, s));
    let mut phases: Vec<Phase> = Vec::with_capacity(trace.len());
    let mut carry = Phase::Other;
    let mut requested: FxHashMap<u64, Phase> = FxHashMap::default();
    let mut death: FxHashMap<u32, Phase> = FxHashMap::default();
    for i in 0..trace.len() {
        let window =
            if timed { trace.time_us(i).and_then(|t| windows.at(t)).and_then(|s| windows.phase_up[s]) } else { None };
        let own = trace.frames(i).and_then(&mut phase_of_stack);
        let p = window.or(own).unwrap_or(carry);
        if let Some(o) = own {
            // The optimizer and zero_grad end a step: what follows without evidence is
            // between steps, not in them.
            carry = if matches!(o, Phase::Optimizer | Phase::ZeroGrad) { Phase::Other } else { o };
        } else if window.is_some() && matches!(p, Phase::Optimizer | Phase::ZeroGrad) {
            carry = Phase::Other;
        }
        match trace.action(i) {
            Action::FreeRequested => {
                requested.insert(trace.addr(i), p);
            }
            Action::FreeCompleted => {
                if let Some(r) = requested.remove(&trace.addr(i)) {
                    if r != p {
                        death.insert(i as u32, r);
                    }
                }
            }
            _ => {}
        }
        phases.push(p);
    }
    let first_forward = phases.iter().position(|&p| p == Phase::Forward).unwrap_or(usize::MAX) as u32;

    // User frame rules per stack (cached).
    let mut frame_rule_cache: FxHashMap<StackId, Option<u16>> = FxHashMap::default();
    let mut frame_rule = |s: StackId| -> Option<u16> {
        if frame_rules.is_empty() {
            return None;
        }
        *frame_rule_cache.entry(s).or_insert_with(|| {
            let lines: Vec<String> = snap.stack(s).map(|f| frame_line(snap, f)).collect();
            frame_rules.iter().find(|(_, re)| lines.iter().any(|l| re.is_match(l))).map(|&(k, _)| k)
        })
    };

    let n_steps = tl.n_steps();
    let classes: Vec<Class> = tl
        .elements()
        .iter()
        .map(|e| {
            let entry = e.alloc_entry.map(|i| i as usize);
            if let Some(c) = entry.and_then(|i| trace.category(i)).and_then(|c| Category::parse(snap.str(c))) {
                return Class { category: c, why: Why::Field };
            }
            let user = e.stack.and_then(&mut frame_rule).or_else(|| {
                let t = entry.and_then(|i| trace.time_us(i))?;
                windows.at(t).and_then(|s| windows.rule_up[s])
            });
            if let Some(k) = user {
                return Class { category: rules.rules[k as usize].category, why: Why::User(k) };
            }
            let pa = entry.map(|i| phases[i]);
            let pf = e.free_entry.map(|i| death.get(&i).copied().unwrap_or(phases[i as usize]));
            let alive_at_end = e.end >= n_steps;
            let (category, why) = match pa {
                None => match (e.stack.and_then(&mut phase_of_stack), pf) {
                    (Some(Phase::Optimizer), _) => (Category::OptimizerState, Why::EarlierOptimizer),
                    (_, Some(Phase::ZeroGrad)) => (Category::Gradient, Why::ClearedByZeroGrad),
                    (Some(Phase::Backward), _) => (Category::Gradient, Why::EarlierAutograd),
                    (Some(Phase::Forward), None) => (Category::Activation, Why::EarlierForward),
                    (_, None) if e.origin == Origin::Snapshot => (Category::Parameter, Why::AliveThroughout),
                    (_, Some(Phase::Backward)) => (Category::Activation, Why::FreedInBackward),
                    (_, Some(Phase::Forward)) => (Category::Activation, Why::FreedInForward),
                    _ => (Category::Unknown, Why::NoEvidence),
                },
                Some(Phase::Optimizer) if pf == Some(Phase::Optimizer) => (Category::Temporary, Why::OptimizerTemp),
                Some(Phase::Optimizer) => (Category::OptimizerState, Why::OptimizerKept),
                Some(Phase::ZeroGrad) => (Category::Temporary, Why::ZeroGradTemp),
                Some(Phase::Backward) if pf == Some(Phase::Backward) => (Category::AutogradDetail, Why::BackwardTemp),
                Some(Phase::Backward) => (Category::Gradient, Why::BackwardKept),
                Some(Phase::Forward) => match pf {
                    Some(Phase::Forward) => (Category::Temporary, Why::ForwardTemp),
                    Some(Phase::Backward) => (Category::Activation, Why::ForwardSaved),
                    _ => (Category::Activation, Why::ForwardKept),
                },
                Some(Phase::Other) => {
                    let before_forward = e.alloc_entry.is_some_and(|a| a < first_forward);
                    if alive_at_end && before_forward {
                        (Category::Parameter, Why::AliveThroughout)
                    } else if alive_at_end || pf.is_some_and(|p| p != Phase::Other) {
                        (Category::Input, Why::UsedByModel)
                    } else {
                        (Category::Temporary, Why::OutsideTemp)
                    }
                }
            };
            Class { category, why }
        })
        .collect();

    // The category that changes at each step, and runs of phases over the steps.
    let els = tl.elements();
    let mut step_cat = vec![u8::MAX; n_steps as usize];
    for (e, cl) in els.iter().zip(&classes) {
        if e.origin == Origin::Traced && (e.start as usize) < step_cat.len() {
            step_cat[e.start as usize] = cl.category as u8;
        }
        if (e.end as usize) < step_cat.len() {
            step_cat[e.end as usize] = cl.category as u8;
        }
    }
    let mut phase_runs: Vec<(u32, Phase)> = Vec::new();
    for s in 0..n_steps {
        let p = tl.step_entry(s).map_or(Phase::Other, |e| phases[e as usize]);
        if phase_runs.last().is_none_or(|r| r.1 != p) {
            phase_runs.push((s, p));
        }
    }

    let mut c = Categories {
        classes,
        step_cat,
        phase_runs,
        checkpoints: Vec::new(),
        max: [0; N],
        at_peak: [0; N],
        iterations: Vec::new(),
        iteration_source: IterationSource::None,
        leaks: Vec::new(),
        budget: Budget::default(),
        by_rule: Vec::new(),
    };
    c.sweep(tl);
    c.find_iterations(tl, &phases);
    c.find_leaks(snap, tl);
    let mut by_rule: FxHashMap<(Why, Category), u64> = FxHashMap::default();
    for (e, cl) in els.iter().zip(&c.classes) {
        *by_rule.entry((cl.why, cl.category)).or_default() += e.size;
    }
    c.by_rule = by_rule.into_iter().map(|((w, cat), b)| (w, cat, b)).collect();
    c.by_rule.sort_by_key(|r| std::cmp::Reverse(r.2));
    c
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

    /// The phase of a step.
    pub fn phase(&self, step: u32) -> Phase {
        match self.phase_runs.partition_point(|r| r.0 <= step) {
            0 => Phase::Other,
            k => self.phase_runs[k - 1].1,
        }
    }

    /// Applies the change at `step` (> 0): the total's change, to the category of the element
    /// allocated or freed there.
    fn apply(&self, tl: &Timeline, step: u32, bytes: &mut [u64; N]) {
        let Some(&k) = self.step_cat.get(step as usize) else { return };
        let t = tl.totals();
        let (Some(&now), Some(&before)) = (t.get(step as usize), t.get(step as usize - 1)) else { return };
        if let Some(b) = bytes.get_mut(usize::from(k)) {
            *b = (*b + now).saturating_sub(before);
        }
    }

    /// Bytes per category of the elements that pass `keep`.
    fn sum_of(&self, tl: &Timeline, keep: impl Fn(&crate::timeline::Element) -> bool) -> [u64; N] {
        let mut b = [0; N];
        for (e, cl) in tl.elements().iter().zip(&self.classes) {
            if keep(e) {
                b[cl.category.index()] += e.size;
            }
        }
        b
    }

    /// One pass over every step: checkpoints, highest values, the peak's breakdown, budget.
    fn sweep(&mut self, tl: &Timeline) {
        let n = tl.n_steps();
        let mut b = self.sum_of(tl, |e| e.start == 0 && e.end > 0);
        let (mut grad_int, mut grad_only, mut acts) = (0u64, 0u64, 0u64);
        let mut saw_optimizer = false;
        for s in 0..n {
            if s > 0 {
                self.apply(tl, s, &mut b);
            }
            if (s as usize).is_multiple_of(CHECKPOINT) {
                self.checkpoints.push(b);
            }
            for (m, &v) in self.max.iter_mut().zip(&b) {
                *m = (*m).max(v);
            }
            if s == tl.peak_step() {
                self.at_peak = b;
            }
            let g = b[Category::Gradient.index()];
            grad_only = grad_only.max(g);
            if self.phase(s) == Phase::Optimizer {
                saw_optimizer = true;
                grad_int = grad_int.max(g + b[Category::Temporary.index()]);
            }
            acts = acts.max(b[Category::Activation.index()] + b[Category::Input.index()]);
        }
        // Before the first event (what was alive before recording) can be the peak.
        let before = self.sum_of(tl, |e| e.origin != Origin::Traced);
        if before.iter().sum::<u64>() > tl.totals().iter().copied().max().unwrap_or(0) {
            self.at_peak = before;
        }
        for (m, &v) in self.max.iter_mut().zip(&before) {
            *m = (*m).max(v);
        }
        let parameters = self.max[Category::Parameter.index()];
        let optimizer_state = self.max[Category::OptimizerState.index()];
        let gradients_and_intermediates = if saw_optimizer { grad_int } else { grad_only };
        self.budget = Budget {
            parameters,
            optimizer_state,
            gradients_and_intermediates,
            activations: acts,
            total: parameters + optimizer_state + gradients_and_intermediates.max(acts),
            peak: tl.peak_bytes(),
        };
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

    fn find_iterations(&mut self, tl: &Timeline, phases: &[Phase]) {
        let has = |p: Phase| phases.contains(&p);
        let (closer, source) = if has(Phase::Optimizer) {
            (Phase::Optimizer, IterationSource::OptimizerSteps)
        } else if has(Phase::Backward) && has(Phase::Forward) {
            (Phase::Backward, IterationSource::BackwardPasses)
        } else {
            (Phase::Other, IterationSource::None)
        };
        self.iteration_source = source;
        let n = tl.n_steps();
        if n == 0 {
            return;
        }
        // Boundaries (steps): right after each run of the closing phase; with backward
        // passes, at the next forward.
        let mut starts = vec![0u32];
        let mut closed = Vec::new();
        if source != IterationSource::None {
            let mut in_closer = false;
            let mut pending = false;
            for s in 0..n {
                let p = self.phase(s);
                if p == closer {
                    in_closer = true;
                    continue;
                }
                if in_closer {
                    in_closer = false;
                    pending = true;
                }
                let opens = match source {
                    IterationSource::OptimizerSteps => true,
                    _ => p == Phase::Forward,
                };
                if pending && opens {
                    pending = false;
                    closed.push(starts.len() - 1);
                    starts.push(s);
                }
            }
            if in_closer || pending {
                closed.push(starts.len() - 1);
            }
        }
        self.iterations = starts
            .iter()
            .enumerate()
            .map(|(k, &start)| {
                let end = starts.get(k + 1).copied().unwrap_or(n);
                let peak_step = tl.argmax_in(start, end);
                Iteration {
                    start,
                    end,
                    peak_bytes: tl.totals().get(peak_step as usize).copied().unwrap_or(0),
                    peak_step,
                    complete: closed.contains(&k),
                }
            })
            .collect();
    }

    fn find_leaks(&mut self, snap: &Snapshot, tl: &Timeline) {
        let ends: Vec<u32> = self.iterations.iter().filter(|it| it.complete).map(|it| it.end - 1).collect();
        if ends.len() < 2 {
            return;
        }
        let mut live: FxHashMap<FrameId, (Vec<u64>, Vec<u32>, StackId)> = FxHashMap::default();
        let mut sites: FxHashMap<StackId, Option<FrameId>> = FxHashMap::default();
        for (e, cl) in tl.elements().iter().zip(&self.classes) {
            if e.origin != Origin::Traced
                || matches!(cl.category, Category::Parameter | Category::OptimizerState | Category::Gradient)
            {
                continue;
            }
            let first = ends.partition_point(|&s| s < e.start);
            let last = ends.partition_point(|&s| s < e.end);
            if first >= last {
                continue;
            }
            let Some(stack) = e.stack else { continue };
            let Some(site) = *sites.entry(stack).or_insert_with(|| call_site(snap, stack)) else { continue };
            let (bytes, count, _) =
                live.entry(site).or_insert_with(|| (vec![0; ends.len()], vec![0; ends.len()], stack));
            for k in first..last {
                bytes[k] += e.size;
                count[k] += 1;
            }
        }
        let mut leaks: Vec<Leak> = live
            .into_iter()
            .filter(|(_, (b, _, _))| b[0] > 0 && b.windows(2).all(|w| w[1] > w[0]))
            .map(|(site, (b, count, stack))| {
                let n = b.len() as u64;
                Leak {
                    site: frame_line(snap, &snap.frames[site.0 as usize]),
                    stack: crate::frames::stack_lines(snap, stack, true),
                    bytes_per_iteration: (b[b.len() - 1] - b[0]) / (n - 1),
                    count: count[count.len() - 1],
                    live_at_iteration_end: b,
                }
            })
            .collect();
        leaks.sort_by(|a, b| b.bytes_per_iteration.cmp(&a.bytes_per_iteration).then(a.site.cmp(&b.site)));
        self.leaks = leaks;
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
        }
    }
}
