//! The evidence the categories are decided from: which frames are the user's own code, the
//! training phase a stack or a `record_function` annotation shows, and the annotations'
//! spans over time.

use regex_lite::Regex;
use rustc_hash::FxHashMap;

use super::Phase;
use crate::model::{Frame, Snapshot, StackId};
use crate::StrId;

use crate::sites::{has, is_py};

/// The phase a stack shows: zero_grad, then the optimizer, then autograd, then a forward.
pub fn stack_phase(snap: &Snapshot, stack: StackId) -> Option<Phase> {
    phase_of(snap.stack(stack).fold(0, |bits, f| bits | frame_phase(snap, f)))
}

/// What one frame shows of the phase, as bits ([`phase_of`] reads the bits of a whole stack):
/// a stack's phase depends on which of these its frames show, not on their order, so callers
/// that see the same frame in many stacks work each frame out once.
pub fn frame_phase(snap: &Snapshot, f: &Frame) -> u8 {
    let name = snap.str(f.name);
    let file = snap.str(f.filename);
    let mut bits = 0;
    if name == "zero_grad" && is_py(file) {
        bits |= ZERO_GRAD;
    }
    if is_py(file) && has(file, "torch/optim/") {
        bits |= OPTIMIZER;
    }
    if name.contains("torch::autograd::Engine")
        || name.contains("AccumulateGrad")
        || name == "_engine_run_backward"
        || (name == "backward" && (has(file, "torch/_tensor.py") || has(file, "torch/autograd/")))
    {
        bits |= BACKWARD;
    }
    if (name == "_call_impl" && file.ends_with("module.py"))
        || (is_py(file) && (name == "forward" || name.ends_with(".forward")))
    {
        bits |= FORWARD;
    }
    bits
}

const ZERO_GRAD: u8 = 1;
const OPTIMIZER: u8 = 2;
const BACKWARD: u8 = 4;
const FORWARD: u8 = 8;

/// The phase a stack's frames show together ([`frame_phase`] of each, or-ed).
pub fn phase_of(bits: u8) -> Option<Phase> {
    if bits & ZERO_GRAD != 0 {
        Some(Phase::ZeroGrad)
    } else if bits & OPTIMIZER != 0 {
        Some(Phase::Optimizer)
    } else if bits & BACKWARD != 0 {
        Some(Phase::Backward)
    } else if bits & FORWARD != 0 {
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
///
/// An END closes the latest open START of its name. A span's depth is the number of spans
/// opened before it and still open: a count over the opening order (a Fenwick tree), so a
/// file with many STARTs that never end costs O(n log n), not a scan per END.
pub fn spans(snap: &Snapshot, device: usize) -> Vec<Span> {
    let mine = |a: &&crate::model::Annotation| a.on_device(device);
    let all = || snap.external_annotations.iter().flatten().filter(mine);
    let n_starts = all().filter(|a| snap.str(a.stage) == "START").count();
    // Opened spans in order, whether each is still open, and a count of the open ones.
    let mut opened: Vec<(StrId, i64)> = Vec::with_capacity(n_starts);
    let mut open = vec![false; n_starts];
    let mut counts = Fenwick::new(n_starts);
    // The latest open START of each name, and for each START the one of its name it hid:
    // a stack per name threaded through one array (no allocation per name).
    let mut latest: FxHashMap<StrId, u32> = FxHashMap::default();
    latest.reserve(n_starts);
    let mut hid: Vec<u32> = Vec::with_capacity(n_starts);
    let mut n_open = 0u32;
    let mut out = Vec::new();
    for a in all() {
        let stage = snap.str(a.stage);
        if stage == "START" {
            let k = opened.len();
            opened.push((a.name, a.time_us));
            open[k] = true;
            counts.add(k, 1);
            hid.push(latest.insert(a.name, k as u32).unwrap_or(NONE));
            n_open += 1;
        } else if stage == "END" {
            let top = latest.get_mut(&a.name).filter(|k| **k != NONE);
            match top.map(|top| std::mem::replace(top, hid[*top as usize])) {
                Some(k) => {
                    let k = k as usize;
                    let (name, start) = opened[k];
                    let depth = counts.before(k) as u32;
                    open[k] = false;
                    counts.add(k, -1);
                    n_open -= 1;
                    out.push(Span { name, start_us: Some(start), end_us: Some(a.time_us.max(start)), depth });
                }
                None => out.push(Span { name: a.name, start_us: None, end_us: Some(a.time_us), depth: n_open }),
            }
        }
    }
    let still_open = opened.into_iter().zip(open).filter(|(_, o)| *o).map(|(s, _)| s);
    for (k, (name, start)) in still_open.enumerate() {
        out.push(Span { name, start_us: Some(start), end_us: None, depth: k as u32 });
    }
    out
}

/// No START (the end of a name's stack of open ones).
const NONE: u32 = u32::MAX;

/// Counts over positions `0..n`: add at a position, sum before a position, O(log n) each.
struct Fenwick(Vec<i32>);

impl Fenwick {
    fn new(n: usize) -> Self {
        Fenwick(vec![0; n + 1])
    }

    fn add(&mut self, at: usize, v: i32) {
        let mut i = at + 1;
        while i < self.0.len() {
            self.0[i] += v;
            i += i & i.wrapping_neg();
        }
    }

    /// The sum over positions `0..at`.
    fn before(&self, at: usize) -> i32 {
        let (mut i, mut s) = (at, 0);
        while i > 0 {
            s += self.0[i];
            i &= i - 1;
        }
        s
    }
}

/// `record_function` spans of one device flattened into time intervals, each with its
/// innermost open span; spans know their parent.
#[derive(Default)]
pub(super) struct Windows {
    /// Interval starts (µs); interval `k` is `bounds[k]..bounds[k + 1]`.
    bounds: Vec<i64>,
    inner: Vec<u32>,
    /// Per span: its phase, or the nearest enclosing span's.
    pub(super) phase_up: Vec<Option<Phase>>,
    /// Per span: the first user annotation rule matching it or an enclosing span.
    pub(super) rule_up: Vec<Option<u16>>,
}

impl Windows {
    pub(super) fn build(snap: &Snapshot, device: usize, rules: &[(u16, &Regex)]) -> Windows {
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
            // Spans that ended are dropped from the top only: one below the top is never
            // looked at until everything above it is gone, and an ended span stays ended, so
            // the top is always the latest span still open (amortized O(1) per bound).
            while active.last().is_some_and(|&s| spans[s as usize].1.saturating_add(1) <= p) {
                active.pop();
            }
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
    pub(super) fn at(&self, t: i64) -> Option<usize> {
        let k = self.bounds.partition_point(|&b| b <= t).checked_sub(1)?;
        let s = self.inner[k];
        (s != u32::MAX).then_some(s as usize)
    }

    /// The same, starting from the interval `*k` of the time before and leaving the answer's
    /// there: O(1) for times in order (a trace), a binary search otherwise.
    pub(super) fn at_from(&self, k: &mut usize, t: i64) -> Option<usize> {
        let b = &self.bounds;
        let near = *k < b.len() && b[*k] <= t && (*k + 1 == b.len() || t < b[*k + 1]);
        if !near {
            if *k + 1 < b.len() && b[*k + 1] <= t && (*k + 2 == b.len() || t < b[*k + 2]) {
                *k += 1;
            } else {
                match b.partition_point(|&x| x <= t).checked_sub(1) {
                    Some(j) => *k = j,
                    None => return None,
                }
            }
        }
        let s = self.inner[*k];
        (s != u32::MAX).then_some(s as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_cursor_finds_what_a_search_finds_in_any_order() {
        // Nested, crossing and unpaired spans; times in order, backwards and at random.
        let mut snap = Snapshot::default();
        let (start, end) = (snap.strings.intern("START"), snap.strings.intern("END"));
        let names: Vec<_> =
            ["forward", "backward", "optimizer.step", "x"].iter().map(|n| snap.strings.intern(n)).collect();
        let mut x = 0x9e37_79b9_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let events = (0..300)
            .map(|t| crate::model::Annotation {
                stage: if next() % 2 == 0 { start } else { end },
                name: names[(next() % 4) as usize],
                device: 0,
                time_us: t * 10,
                extras: Vec::new(),
            })
            .collect();
        snap.external_annotations = Some(events);
        let w = Windows::build(&snap, 0, &[]);
        assert!(w.bounds.len() > 100);
        let mut times: Vec<i64> = (-5..3010).collect();
        let orders = [times.clone(), times.iter().rev().copied().collect(), {
            times.sort_by_cached_key(|_| next());
            times
        }];
        for order in orders {
            let mut k = 0;
            for &t in &order {
                assert_eq!(w.at_from(&mut k, t), w.at(t), "t = {t}");
            }
        }
    }
}
