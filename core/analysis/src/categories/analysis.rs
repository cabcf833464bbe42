//! The categories analysis as a computation done in slices: [`Analysis::work`] does at most a
//! given number of units (a trace entry, an element, a step, a phase run or an iteration)
//! and returns, so the viewer's worker can answer a hover between two slices instead of
//! waiting for the whole file. [`super::analyze`] runs it in one go.
//!
//! Passes, each linear in what it walks (n log n at most, with the annotation spans):
//! 1. entries: the phase of every trace entry;
//! 2. elements: every element's class, the category changing at each step, the bytes alive
//!    before the trace and at its start, the bytes decided by each rule;
//! 3. steps: phase runs, per-category checkpoints, maxima, the peak's breakdown;
//! 4. elements again: the evidence about memory alive before the recording (the gradients at
//!    their highest, the blocks alive throughout by size), split into parameters and optimizer
//!    state (`persistent.rs`); the split moves constant bytes, so the sweep's figures are
//!    shifted, not swept again; then the budget;
//! 5. runs: iteration boundaries, from the phase runs (not the steps);
//! 6. iterations: each one's peak;
//! 7. elements again: leak suspects (the iteration ends each element is alive at, per call
//!    site; only a site with an element joining at every end can grow at every end, so the
//!    bytes per end are worked out for at most `elements / ends` sites: O(elements) in all).

use regex_lite::Regex;
use rustc_hash::FxHashMap;

use super::evidence::{frame_phase, phase_of, stack_phase, Windows};
use super::persistent::{self, annotation_optimizer, frame_optimizer, size_key, Evidence, Named};
use super::{
    Budget, Categories, Category, Class, Compiled, Iteration, IterationSource, Leak, Phase, Target, Why, CHECKPOINT, N,
};
use crate::frames::{frame_line, stack_lines};
use crate::intern::StrId;
use crate::model::{Action, FrameId, Snapshot, StackId, Trace};
use crate::sites::{call_site, site_name};
use crate::timeline::{gallop_while, Element, Origin, Timeline, TimelineKind};
use crate::value::Value;

/// Where an [`Analysis`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The phase of every trace entry.
    Entries,
    /// Every element's class.
    Elements,
    /// The sweep over the steps.
    Steps,
    /// The evidence about memory alive before the recording, and its split.
    Persistent,
    /// Iteration boundaries over the phase runs.
    Runs,
    /// The peak of every iteration.
    Iterations,
    /// Leak suspects over the elements.
    Leaks,
    /// Finished: [`Analysis::finish`] returns the result at once.
    Done,
}

/// A categories analysis of one device's blocks timeline, in progress. It owns what it has
/// computed so far and borrows nothing: each [`Analysis::work`] is given the snapshot and
/// timeline it was started with.
pub struct Analysis {
    stage: Stage,
    /// Position in the current stage's walk.
    at: usize,
    frame_rules: Vec<(u16, Regex)>,
    rule_categories: Vec<Category>,
    windows: Windows,
    /// Per stack id: its phase once worked out (`UNKNOWN` until then).
    stack_phases: Vec<u8>,
    /// What each frame shows of the phase ([`frame_phase`]), `UNKNOWN` until looked at.
    frame_phases: Vec<u8>,
    /// The annotation interval of the entry before (entries come mostly in time order).
    window_at: usize,
    /// Some annotation rule of the user's applies to some span.
    annotation_rules: bool,
    stack_rules: FxHashMap<StackId, Option<u16>>,
    /// The key that marks memory outside PyTorch's allocator, in a merged snapshot.
    outside: Option<StrId>,
    // Entries.
    phases: Vec<Phase>,
    seen: [bool; 5],
    carry: Phase,
    requested: FxHashMap<u64, Phase>,
    death: FxHashMap<u32, Phase>,
    first_forward: u32,
    /// The optimizer named by an annotation or by a frame in its step.
    named: Option<Named>,
    /// Stacks of optimizer entries already looked at for its name.
    named_stacks: rustc_hash::FxHashSet<StackId>,
    // Elements.
    at_start: [u64; N],
    before_trace: [u64; N],
    by_rule: FxHashMap<(Why, Category), u64>,
    // Steps.
    bytes: [u64; N],
    grad_and_temp: u64,
    grad_only: u64,
    /// The first step with `grad_only` gradient bytes.
    grad_step: u32,
    acts: u64,
    saw_optimizer: bool,
    // Persistent.
    evidence: Evidence,
    // Runs.
    closer: Phase,
    starts: Vec<u32>,
    closed: Vec<bool>,
    in_closer: bool,
    pending: bool,
    // Leaks.
    ends: Vec<u32>,
    /// The first of `ends` at or after the start of the element at hand.
    end_at: usize,
    sites: FxHashMap<StackId, Option<FrameId>>,
    /// Per call site: a stack, and its elements alive at some iteration end.
    live: FxHashMap<FrameId, Site>,
    out: Categories,
}

/// Phases by [`phase_index`].
const PHASES: [Phase; 5] = [Phase::Other, Phase::Forward, Phase::Backward, Phase::ZeroGrad, Phase::Optimizer];
/// In `stack_phases`: a stack whose phase is not worked out yet.
const UNKNOWN: u8 = u8::MAX;
/// In `stack_phases`: a stack that shows no phase (any value past [`PHASES`] reads as none).
const NONE: usize = 254;

fn phase_index(p: Phase) -> usize {
    match p {
        Phase::Other => 0,
        Phase::Forward => 1,
        Phase::Backward => 2,
        Phase::ZeroGrad => 3,
        Phase::Optimizer => 4,
    }
}

impl Analysis {
    /// Starts the analysis of `tl` (a blocks timeline of `snap`) with the user's rules. Costs
    /// only the annotation spans (O(a log a)); everything else waits for [`Analysis::work`].
    pub fn new(snap: &Snapshot, tl: &Timeline, compiled: &Compiled) -> Analysis {
        debug_assert_eq!(tl.kind(), TimelineKind::Blocks, "categories are for the blocks timeline");
        let rules = &compiled.rules.rules;
        let on = |t: Target| -> Vec<(u16, Regex)> {
            rules
                .iter()
                .zip(&compiled.regexes)
                .enumerate()
                .filter(|(_, (r, _))| r.on == t)
                .map(|(k, (_, re))| (k as u16, re.clone()))
                .collect()
        };
        let ann_rules = on(Target::Annotation);
        let ann_rules: Vec<(u16, &Regex)> = ann_rules.iter().map(|(k, re)| (*k, re)).collect();
        let windows = Windows::build(snap, tl.device(), &ann_rules);
        let annotation_rules = windows.rule_up.iter().any(Option::is_some);
        let n_entries = snap.trace(tl.device()).len();
        Analysis {
            stage: Stage::Entries,
            at: 0,
            frame_rules: on(Target::Frame),
            rule_categories: rules.iter().map(|r| r.category).collect(),
            windows,
            stack_phases: vec![UNKNOWN; snap.stacks.len()],
            frame_phases: vec![UNKNOWN; snap.frames.len()],
            window_at: 0,
            annotation_rules,
            stack_rules: FxHashMap::default(),
            outside: snap.strings.find(crate::model::OUTSIDE_KEY),
            phases: Vec::with_capacity(n_entries),
            seen: [false; 5],
            carry: Phase::Other,
            requested: FxHashMap::default(),
            death: FxHashMap::default(),
            first_forward: u32::MAX,
            named: optimizer_annotation(snap, tl.device()),
            named_stacks: Default::default(),
            at_start: [0; N],
            before_trace: [0; N],
            by_rule: FxHashMap::default(),
            bytes: [0; N],
            grad_and_temp: 0,
            grad_only: 0,
            grad_step: 0,
            acts: 0,
            saw_optimizer: false,
            evidence: Evidence::default(),
            closer: Phase::Other,
            starts: vec![0],
            closed: Vec::new(),
            in_closer: false,
            pending: false,
            ends: Vec::new(),
            end_at: 0,
            sites: FxHashMap::default(),
            live: FxHashMap::default(),
            out: Categories {
                classes: Vec::with_capacity(tl.elements().len()),
                step_cat: Vec::new(),
                phase_runs: Vec::new(),
                checkpoints: Vec::new(),
                max: [0; N],
                at_peak: [0; N],
                iterations: Vec::new(),
                iteration_source: IterationSource::None,
                leaks: Vec::new(),
                budget: Budget::default(),
                by_rule: Vec::new(),
                inference: None,
                before_recording: Vec::new(),
            },
        }
    }

    /// Where it is.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// True once [`Analysis::finish`] has its result.
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// Does at most about `units` units of work (a unit is one entry, element, step, phase
    /// run or iteration) on `snap` and `tl`, the ones it was started with, stopping early at
    /// the end of a pass. True when done.
    pub fn work(&mut self, snap: &Snapshot, tl: &Timeline, units: usize) -> bool {
        let mut left = units.max(1);
        let stage = self.stage;
        while left > 0 && self.stage == stage && self.stage != Stage::Done {
            let used = match self.stage {
                Stage::Entries => self.entries(snap, tl, left),
                Stage::Elements => self.elements(snap, tl, left),
                Stage::Steps => self.steps(tl, left),
                Stage::Persistent => self.persistent(tl, left),
                Stage::Runs => self.runs(tl, left),
                Stage::Iterations => self.iterations(tl, left),
                Stage::Leaks => self.leaks(snap, tl, left),
                Stage::Done => 0,
            };
            left = left.saturating_sub(used.max(1));
        }
        self.is_done()
    }

    /// Does what is left at once and returns the result.
    pub fn finish(mut self, snap: &Snapshot, tl: &Timeline) -> Categories {
        while !self.work(snap, tl, usize::MAX) {}
        self.out
    }

    /// The next `units` positions of a walk over `len` items, and whether it ends there.
    fn range(&self, len: usize, units: usize) -> (std::ops::Range<usize>, bool) {
        let end = self.at.saturating_add(units).min(len);
        (self.at.min(end)..end, end == len)
    }

    fn next_stage(&mut self, stage: Stage) {
        self.stage = stage;
        self.at = 0;
    }

    fn stack_phase(&mut self, snap: &Snapshot, s: StackId) -> Option<Phase> {
        match self.stack_phases.get(s.0 as usize) {
            Some(&UNKNOWN) => {
                // Stacks share most of their frames: each frame is looked at once.
                let mut bits = 0;
                for id in snap.stacks.get(s) {
                    let k = id.0 as usize;
                    let b = match self.frame_phases.get(k) {
                        Some(&b) if b != UNKNOWN => b,
                        _ => {
                            let b = frame_phase(snap, &snap.frames[k]);
                            if let Some(slot) = self.frame_phases.get_mut(k) {
                                *slot = b;
                            }
                            b
                        }
                    };
                    bits |= b;
                }
                let p = phase_of(bits);
                self.stack_phases[s.0 as usize] = p.map_or(NONE, phase_index) as u8;
                p
            }
            Some(&k) => PHASES.get(usize::from(k)).copied(),
            None => stack_phase(snap, s),
        }
    }

    /// Pass 1: the phase of every entry; what a pending free was requested in.
    fn entries(&mut self, snap: &Snapshot, tl: &Timeline, units: usize) -> usize {
        let trace = snap.trace(tl.device());
        let timed = trace.has_time();
        let (range, last) = self.range(trace.len(), units);
        let used = range.len();
        for i in range {
            let window = if timed {
                trace
                    .time_us(i)
                    .and_then(|t| self.windows.at_from(&mut self.window_at, t))
                    .and_then(|s| self.windows.phase_up[s])
            } else {
                None
            };
            let own = trace.frames(i).and_then(|s| self.stack_phase(snap, s));
            let p = window.or(own).unwrap_or(self.carry);
            if let Some(o) = own {
                // The optimizer and zero_grad end a step: what follows without evidence is
                // between steps, not in them.
                self.carry = if matches!(o, Phase::Optimizer | Phase::ZeroGrad) { Phase::Other } else { o };
            } else if window.is_some() && matches!(p, Phase::Optimizer | Phase::ZeroGrad) {
                self.carry = Phase::Other;
            }
            match trace.action(i) {
                Action::FreeRequested => {
                    self.requested.insert(trace.addr(i), p);
                }
                Action::FreeCompleted => {
                    if let Some(r) = self.requested.remove(&trace.addr(i)) {
                        if r != p {
                            self.death.insert(i as u32, r);
                        }
                    }
                }
                _ => {}
            }
            if p == Phase::Optimizer && self.named.is_none() {
                if let Some(s) = trace.frames(i).filter(|&s| self.named_stacks.insert(s)) {
                    self.named = stack_optimizer(snap, s);
                }
            }
            if p == Phase::Forward && self.first_forward == u32::MAX {
                self.first_forward = i as u32;
            }
            self.seen[phase_index(p)] = true;
            self.phases.push(p);
        }
        self.at += used;
        if last {
            self.requested = FxHashMap::default();
            self.named_stacks = Default::default();
            self.out.step_cat = vec![u8::MAX; tl.n_steps() as usize];
            self.next_stage(Stage::Elements);
        }
        used
    }

    /// The first user frame rule matching any frame of the stack (cached per stack).
    fn frame_rule(&mut self, snap: &Snapshot, s: StackId) -> Option<u16> {
        if self.frame_rules.is_empty() {
            return None;
        }
        let rules = &self.frame_rules;
        *self.stack_rules.entry(s).or_insert_with(|| {
            let lines: Vec<String> = snap.stack(s).map(|f| frame_line(snap, f)).collect();
            rules.iter().find(|(_, re)| lines.iter().any(|l| re.is_match(l))).map(|&(k, _)| k)
        })
    }

    fn classify(&mut self, snap: &Snapshot, tl: &Timeline, id: usize) -> Class {
        let trace = snap.trace(tl.device());
        let e = &tl.elements()[id];
        let entry = e.alloc_entry.map(|i| i as usize);
        if self.outside.is_some_and(|key| is_outside(snap, trace, e, key)) {
            return Class { category: Category::OutsideAllocator, why: Why::OutsideAllocator };
        }
        if let Some(c) = entry.and_then(|i| trace.category(i)).and_then(|c| Category::parse(snap.str(c))) {
            return Class { category: c, why: Why::Field };
        }
        let user = e.stack.and_then(|s| self.frame_rule(snap, s)).or_else(|| {
            if !self.annotation_rules {
                return None;
            }
            let t = entry.and_then(|i| trace.time_us(i))?;
            self.windows.at(t).and_then(|s| self.windows.rule_up[s])
        });
        if let Some(k) = user {
            return Class { category: self.rule_categories[k as usize], why: Why::User(k) };
        }
        let pa = entry.map(|i| self.phases[i]);
        let pf = e.free_entry.map(|i| self.death.get(&i).copied().unwrap_or(self.phases[i as usize]));
        let alive_at_end = e.end >= tl.n_steps();
        let (category, why) = match pa {
            None => match (e.stack.and_then(|s| self.stack_phase(snap, s)), pf) {
                (Some(Phase::Optimizer), _) => (Category::OptimizerState, Why::EarlierOptimizer),
                (_, Some(Phase::ZeroGrad)) => (Category::Gradient, Why::ClearedByZeroGrad),
                (Some(Phase::Backward), _) => (Category::Gradient, Why::EarlierAutograd),
                (Some(Phase::Forward), None) => (Category::Activation, Why::EarlierForward),
                (_, None) if e.origin == Origin::Snapshot => (Category::Parameter, Why::AliveThroughout),
                (_, Some(Phase::Backward)) => (Category::Activation, Why::FreedInBackward),
                (_, Some(Phase::Forward)) => (Category::Activation, Why::FreedInForward),
                (_, Some(Phase::Optimizer)) => (Category::OptimizerState, Why::FreedInOptimizer),
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
                let before_forward = e.alloc_entry.is_some_and(|a| a < self.first_forward);
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
    }

    /// Pass 2: every element's class, and what the sweep starts from.
    fn elements(&mut self, snap: &Snapshot, tl: &Timeline, units: usize) -> usize {
        let els = tl.elements();
        let (range, last) = self.range(els.len(), units);
        let used = range.len();
        for id in range {
            let cl = self.classify(snap, tl, id);
            let e = &els[id];
            let k = cl.category.index();
            // The category that changes at each step.
            if e.origin == Origin::Traced && (e.start as usize) < self.out.step_cat.len() {
                self.out.step_cat[e.start as usize] = k as u8;
            }
            if (e.end as usize) < self.out.step_cat.len() {
                self.out.step_cat[e.end as usize] = k as u8;
            }
            if e.start == 0 && e.end > 0 {
                self.at_start[k] = self.at_start[k].saturating_add(e.size);
            }
            if e.origin != Origin::Traced {
                self.before_trace[k] = self.before_trace[k].saturating_add(e.size);
            }
            let by_rule = self.by_rule.entry((cl.why, cl.category)).or_default();
            *by_rule = by_rule.saturating_add(e.size);
            self.out.classes.push(cl);
        }
        self.at += used;
        if last {
            // What only the entries and elements needed goes now: a tab holds files near its
            // memory limit.
            self.death = FxHashMap::default();
            self.windows = Windows::default();
            self.stack_phases = Vec::new();
            self.stack_rules = FxHashMap::default();
            self.bytes = self.at_start;
            self.next_stage(Stage::Steps);
        }
        used
    }

    /// Pass 3: one walk over the steps: phase runs, checkpoints, highest values, the peak's
    /// breakdown; at its end the budget.
    fn steps(&mut self, tl: &Timeline, units: usize) -> usize {
        let (range, last) = self.range(tl.n_steps() as usize, units);
        let used = range.len();
        let peak_step = tl.peak_step();
        for s in range {
            let s = s as u32;
            let p = tl.step_entry(s).map_or(Phase::Other, |e| self.phases[e as usize]);
            if self.out.phase_runs.last().is_none_or(|r| r.1 != p) {
                self.out.phase_runs.push((s, p));
            }
            let mut b = self.bytes;
            if s > 0 {
                self.out.apply(tl, s, &mut b);
            }
            if (s as usize).is_multiple_of(CHECKPOINT) {
                self.out.checkpoints.push(b);
            }
            for (m, &v) in self.out.max.iter_mut().zip(&b) {
                *m = (*m).max(v);
            }
            if s == peak_step {
                self.out.at_peak = b;
            }
            let g = b[Category::Gradient.index()];
            if g > self.grad_only {
                (self.grad_only, self.grad_step) = (g, s);
            }
            if p == Phase::Optimizer {
                self.saw_optimizer = true;
                self.grad_and_temp = self.grad_and_temp.max(g.saturating_add(b[Category::Temporary.index()]));
            }
            self.acts = self.acts.max(b[Category::Activation.index()].saturating_add(b[Category::Input.index()]));
            self.bytes = b;
        }
        self.at += used;
        if last {
            self.phases = Vec::new();
            self.next_stage(Stage::Persistent);
        }
        used
    }

    /// Pass 3b: the evidence about the blocks alive from before the recording to its end with
    /// nothing of their own to go on; at its end their split, then the budget.
    fn persistent(&mut self, tl: &Timeline, units: usize) -> usize {
        let els = tl.elements();
        let (range, last) = self.range(els.len(), units);
        let used = range.len();
        let (n, g) = (tl.n_steps(), self.grad_step);
        let ev = &mut self.evidence;
        for id in range {
            let (e, cl) = (&els[id], self.out.classes[id]);
            let key = size_key(e.size);
            let at_end = e.end >= n;
            match cl.category {
                Category::Parameter
                    if cl.why == Why::AliveThroughout && e.origin == Origin::Snapshot && e.start == 0 && at_end =>
                {
                    ev.persistent.push((id as u32, key, e.addr, e.size));
                }
                Category::Parameter if at_end => *ev.parameters.entry(key).or_default() += 1,
                Category::OptimizerState if at_end => *ev.state.entry(key).or_default() += 1,
                Category::Gradient if e.start <= g && g < e.end => {
                    *ev.gradients.entry(key).or_default() += 1;
                }
                _ => {}
            }
        }
        self.at += used;
        if last {
            self.split_persistent();
            self.end_sweep(tl);
            self.next_stage(Stage::Runs);
        }
        used
    }

    /// Decides the blocks alive throughout ([`persistent::split`]). They were counted as
    /// parameters from step 0 to the end, so what moves to another category moves by the same
    /// bytes at every step: the checkpoints, the peak's breakdown, the highest values and the
    /// rules' bytes are shifted.
    fn split_persistent(&mut self) {
        let mut ev = std::mem::take(&mut self.evidence);
        if ev.persistent.is_empty() {
            return;
        }
        ev.gradient_bytes = self.grad_only;
        let (classes, inference) = persistent::split(&ev, self.named.as_ref());
        let addr: FxHashMap<u32, u64> = ev.persistent.iter().map(|p| (p.0, p.2)).collect();
        let mut blocks: Vec<(u64, Class)> = classes.iter().map(|&(id, c, _)| (addr[&id], c)).collect();
        blocks.sort_unstable_by_key(|b| b.0);
        self.out.before_recording = blocks;
        let mut moved = [0u64; N];
        for (id, class, size) in classes {
            if let Some(slot) = self.out.classes.get_mut(id as usize) {
                *slot = class;
            }
            if let Some(b) = self.by_rule.get_mut(&(Why::AliveThroughout, Category::Parameter)) {
                *b = b.saturating_sub(size);
            }
            let by_rule = self.by_rule.entry((class.why, class.category)).or_default();
            *by_rule = by_rule.saturating_add(size);
            let m = &mut moved[class.category.index()];
            *m = m.saturating_add(size);
        }
        moved[Category::Parameter.index()] = 0;
        let out_of_params = moved.iter().copied().fold(0, u64::saturating_add);
        let shift = |b: &mut [u64; N]| {
            b[Category::Parameter.index()] = b[Category::Parameter.index()].saturating_sub(out_of_params);
            for (x, m) in b.iter_mut().zip(&moved) {
                *x = x.saturating_add(*m);
            }
        };
        for c in &mut self.out.checkpoints {
            shift(c);
        }
        shift(&mut self.out.at_peak);
        shift(&mut self.out.max);
        shift(&mut self.before_trace);
        self.by_rule.retain(|_, b| *b > 0);
        self.out.inference = Some(inference);
    }

    fn end_sweep(&mut self, tl: &Timeline) {
        let out = &mut self.out;
        // Before the first event (what was alive before recording) can be the peak.
        let before = self.before_trace;
        if before.iter().copied().fold(0, u64::saturating_add) > tl.peak_total() {
            out.at_peak = before;
        }
        for (m, &v) in out.max.iter_mut().zip(&before) {
            *m = (*m).max(v);
        }
        let parameters = out.max[Category::Parameter.index()];
        let optimizer_state = out.max[Category::OptimizerState.index()];
        let persistent = out.max[Category::Persistent.index()];
        let gradients_and_intermediates = if self.saw_optimizer { self.grad_and_temp } else { self.grad_only };
        out.budget = Budget {
            parameters,
            optimizer_state,
            persistent,
            gradients_and_intermediates,
            activations: self.acts,
            total: parameters
                .saturating_add(optimizer_state)
                .saturating_add(persistent)
                .saturating_add(gradients_and_intermediates.max(self.acts)),
            peak: tl.peak_bytes(),
        };
        let mut by_rule: Vec<(Why, Category, u64)> =
            std::mem::take(&mut self.by_rule).into_iter().map(|((w, cat), b)| (w, cat, b)).collect();
        by_rule.sort_by_key(|r| std::cmp::Reverse(r.2));
        out.by_rule = by_rule;
        let seen = |p: Phase| self.seen[phase_index(p)];
        (self.closer, out.iteration_source) = if seen(Phase::Optimizer) {
            (Phase::Optimizer, IterationSource::OptimizerSteps)
        } else if seen(Phase::Backward) && seen(Phase::Forward) {
            (Phase::Backward, IterationSource::BackwardPasses)
        } else {
            (Phase::Other, IterationSource::None)
        };
    }

    /// Pass 4: iteration boundaries, right after each run of the closing phase (with
    /// backward passes, at the next forward). Within a run nothing changes after its first
    /// step, so the walk is over the runs.
    fn runs(&mut self, tl: &Timeline, units: usize) -> usize {
        let source = self.out.iteration_source;
        let n_runs = if source == IterationSource::None { 0 } else { self.out.phase_runs.len() };
        let (range, last) = self.range(n_runs, units);
        let used = range.len();
        for k in range {
            let (s, p) = self.out.phase_runs[k];
            if p == self.closer {
                self.in_closer = true;
                continue;
            }
            if self.in_closer {
                self.in_closer = false;
                self.pending = true;
            }
            let opens = source == IterationSource::OptimizerSteps || p == Phase::Forward;
            if self.pending && opens {
                self.pending = false;
                self.closed.push(true);
                self.starts.push(s);
            }
        }
        self.at += used;
        if last {
            self.closed.push(source != IterationSource::None && (self.in_closer || self.pending));
            if tl.n_steps() == 0 {
                self.starts.clear();
            }
            self.next_stage(Stage::Iterations);
        }
        used
    }

    /// Pass 5: each iteration's peak.
    fn iterations(&mut self, tl: &Timeline, units: usize) -> usize {
        let (range, last) = self.range(self.starts.len(), units);
        let used = range.len();
        for k in range {
            let start = self.starts[k];
            let end = self.starts.get(k + 1).copied().unwrap_or(tl.n_steps());
            let peak_step = tl.argmax_in(start, end);
            self.out.iterations.push(Iteration {
                start,
                end,
                peak_bytes: tl.totals().get(peak_step as usize).copied().unwrap_or(0),
                peak_step,
                complete: self.closed[k],
            });
        }
        self.at += used;
        if last {
            self.ends = self.out.iterations.iter().filter(|it| it.complete).map(|it| it.end - 1).collect();
            if self.ends.len() < 2 {
                self.next_stage(Stage::Done);
            } else {
                self.next_stage(Stage::Leaks);
            }
        }
        used
    }

    /// Pass 6: live bytes per call site at each complete iteration's end; the sites that
    /// grow at every one are leak suspects.
    fn leaks(&mut self, snap: &Snapshot, tl: &Timeline, units: usize) -> usize {
        let els = tl.elements();
        let (range, last) = self.range(els.len(), units);
        let used = range.len();
        let n = self.ends.len();
        for id in range {
            let (e, cl) = (&els[id], self.out.classes[id]);
            if e.origin != Origin::Traced
                || matches!(cl.category, Category::Parameter | Category::OptimizerState | Category::Gradient)
            {
                continue;
            }
            // Traced elements come in the order of their starts, so the first end at or
            // after the start only moves forward; the first at or after the end is found by
            // galloping from there (most elements die within the iteration: one step).
            if self.ends.get(self.end_at.wrapping_sub(1)).is_some_and(|&s| s >= e.start) {
                self.end_at = self.ends.partition_point(|&s| s < e.start);
            }
            while self.ends.get(self.end_at).is_some_and(|&s| s < e.start) {
                self.end_at += 1;
            }
            let first = self.end_at;
            let last = gallop_while(&self.ends, first, |s| s < e.end);
            if first >= last {
                continue;
            }
            let Some(stack) = e.stack else { continue };
            let Some(site) = *self.sites.entry(stack).or_insert_with(|| call_site(snap, stack)) else { continue };
            let at = self.live.entry(site).or_insert_with(|| Site { stack, alive: Vec::new() });
            at.alive.push(Alive { first: first as u32, last: last as u32, size: e.size });
        }
        self.at += used;
        if last {
            self.out.leaks = leak_suspects(snap, std::mem::take(&mut self.live), n);
            self.next_stage(Stage::Done);
        }
        used
    }
}

/// The optimizer a `torch.optim` annotation of the device names (`Optimizer.step#AdamW.step`).
fn optimizer_annotation(snap: &Snapshot, device: usize) -> Option<Named> {
    let mut seen = rustc_hash::FxHashSet::default();
    snap.external_annotations.iter().flatten().filter(|a| a.on_device(device) && seen.insert(a.name)).find_map(|a| {
        let text = snap.str(a.name);
        annotation_optimizer(text)
            .map(|name| Named { name: name.to_string(), by: format!("named by the annotation {text}") })
    })
}

/// The optimizer a frame of an optimizer step's stack names (`torch/optim/adamw.py`).
fn stack_optimizer(snap: &Snapshot, s: StackId) -> Option<Named> {
    snap.stack(s).find_map(|f| {
        frame_optimizer(snap, f)
            .map(|name| Named { name, by: format!("named by a frame of its step, {}", frame_line(snap, f)) })
    })
}

/// An element alive at the iteration ends `first..last` (indices into the ends).
struct Alive {
    first: u32,
    last: u32,
    size: u64,
}

/// One call site's elements that are alive at some iteration end.
struct Site {
    stack: StackId,
    alive: Vec<Alive>,
}

/// The call sites whose live bytes grow at every one of the `n` iteration ends.
///
/// Growing at every end takes an element that becomes alive at each of them (and one alive at
/// the first), so only a site with at least `n` elements can qualify: at most `elements / n`
/// sites get their bytes per end worked out, and the whole costs O(elements), however many
/// sites and iterations there are.
fn leak_suspects(snap: &Snapshot, live: FxHashMap<FrameId, Site>, n: usize) -> Vec<Leak> {
    let mut leaks: Vec<Leak> = live
        .into_iter()
        .filter(|(_, s)| s.alive.len() >= n)
        .filter_map(|(_, s)| {
            // Live bytes at each end: a change at both edges of each element, then a running sum.
            let mut change = vec![0i128; n + 1];
            for a in &s.alive {
                change[a.first as usize] += i128::from(a.size);
                change[a.last as usize] -= i128::from(a.size);
            }
            let mut acc = 0i128;
            let b: Vec<u64> = change[..n]
                .iter()
                .map(|x| {
                    acc += x;
                    u64::try_from(acc.max(0)).unwrap_or(u64::MAX)
                })
                .collect();
            let grows = b[0] > 0 && b.windows(2).all(|w| w[1] > w[0]);
            grows.then(|| Leak {
                site: site_name(snap, Some(s.stack)),
                stack: stack_lines(snap, s.stack, true),
                bytes_per_iteration: (b[n - 1] - b[0]) / (n as u64 - 1),
                count: s.alive.iter().filter(|a| a.last as usize == n).count() as u32,
                live_at_iteration_end: b,
            })
        })
        .collect();
    leaks.sort_by(|a, b| b.bytes_per_iteration.cmp(&a.bytes_per_iteration).then(a.site.cmp(&b.site)));
    leaks
}

/// Whether a merge marked `e` (its allocation or free entry, or its segment) as outside
/// PyTorch's allocator.
fn is_outside(snap: &Snapshot, trace: &Trace, e: &Element, key: StrId) -> bool {
    let marked = |extras: &[(StrId, Value)]| extras.iter().any(|(k, v)| *k == key && matches!(v, Value::Bool(true)));
    e.alloc_entry.or(e.free_entry).is_some_and(|i| marked(trace.extras(i as usize)))
        || e.segment.and_then(|s| snap.segments.get(s as usize)).is_some_and(|s| marked(&s.extras))
}
