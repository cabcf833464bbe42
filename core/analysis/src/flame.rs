//! What is alive, by call stack: the flame graph (an icicle, outermost frame at the root) of
//! the blocks timeline at one step or over a window, and the lines of the user's own code
//! that hold the most.
//!
//! At a step every element alive after it weighs its requested bytes (the sizes the
//! timeline stacks), so the root is that step's total; over a window of steps each element
//! alive in it weighs bytes × the steps of its life inside the window, so what holds memory
//! longest is widest. Each element is charged to its allocation's stack ([`Charge`], the rule
//! of every call site). Unless `all_frames`, a stack is read as the user knows it: its Python
//! frames, and below the innermost one a single row for the operator that allocated (the
//! autograd node or aten op, [`Operator`]), the interpreter's, dispatcher's, allocator's and
//! unwinder's frames hidden; a stack without Python frames is that one row. An element
//! allocated without a stack sits under `(no stack recorded)`, one allocated before the
//! recording under `(allocated before recording)` (and under it the user's line where its
//! free says it went, when it does), one whose frames all go under `(no frames)`. The lines of code are keyed as the diff keys call sites ([`Charge::site`]).

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::model::{FrameId, Snapshot};
use crate::sites::{self, Charge, Operator, SiteNames};
use crate::timeline::Timeline;

/// Which elements count, and how much each weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum At {
    /// Alive before the first step (allocated before recording began), weighted by bytes.
    Before,
    /// Alive after this step, weighted by bytes.
    Step(u32),
    /// Alive at some step of `lo..hi`, weighted by bytes × steps alive inside it.
    Window(u32, u32),
}

/// A flame graph request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlameQuery {
    /// The step or window.
    pub at: At,
    /// Every frame, without PyTorch's filter.
    pub all_frames: bool,
    /// Nodes lighter than `1 / min_share` of the root are left out, their weight counted in
    /// their parent's `pruned` (0 keeps every node).
    pub min_share: u64,
    /// The heaviest lines of code kept (`usize::MAX`: all).
    pub lines: usize,
}

impl FlameQuery {
    /// Every node and every line.
    pub fn whole(at: At, all_frames: bool) -> FlameQuery {
        FlameQuery { at, all_frames, min_share: 0, lines: usize::MAX }
    }
}

/// What a node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum NodeKind {
    /// Everything counted.
    Root,
    /// One frame of a stack.
    Frame(FrameId),
    /// The operator that allocated, in place of the C++ frames below the innermost Python
    /// frame (or of a stack without Python frames).
    Op(Operator),
    /// Elements whose allocation recorded no stack.
    NoStack,
    /// Elements allocated before the recording, with no stack of their own.
    BeforeRecording,
    /// Under [`NodeKind::BeforeRecording`]: those whose free's stack names this frame of the
    /// user's code (where they went).
    FreedAt(FrameId),
    /// Elements whose stack has no frame left once filtered (or none at all).
    NoFrames,
}

/// One node of the tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Node {
    /// What it stands for.
    pub kind: NodeKind,
    /// Its parent (`None` for the root, node 0).
    pub parent: Option<u32>,
    /// 0 for the root.
    pub depth: u32,
    /// Weight of everything under it (bytes, or byte-steps over a window).
    pub weight: u64,
    /// Weight of the elements whose stack ends here.
    pub self_weight: u64,
    /// Weight of its children left out ([`FlameQuery::min_share`]).
    pub pruned: u64,
    /// Weight of the nodes before it on its row, within the root's span (where it starts).
    pub offset: u64,
    /// Elements under it.
    pub count: u32,
    /// The element with the largest weight under it (its colour is the node's).
    pub largest: u32,
}

/// A line of the user's own code and what its allocations hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UserLine {
    /// `file:line:name` as the diff names call sites ([`Charge::site`]).
    pub site: String,
    /// Bytes (byte-steps over a window).
    pub weight: u64,
    /// Elements.
    pub count: u32,
    /// The element with the largest weight.
    pub largest: u32,
}

/// A flame graph and the lines of code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Flame {
    /// What was asked (a step clamped to the timeline).
    pub at: At,
    /// The tree in pre-order: a parent before its children, children heaviest first.
    pub nodes: Vec<Node>,
    /// Heaviest first ([`FlameQuery::lines`] of them).
    pub lines: Vec<UserLine>,
    /// All the lines there are.
    pub n_lines: usize,
}

impl Flame {
    /// The root's weight: at a step, the live bytes.
    pub fn total(&self) -> u64 {
        self.nodes.first().map_or(0, |n| n.weight)
    }
}

/// Elements of one stack: their weight, count and heaviest element (weight, id).
#[derive(Clone, Copy, Default)]
struct Group {
    weight: u64,
    count: u32,
    largest: (u64, u32),
}

impl Group {
    fn add(&mut self, weight: u64, count: u32, largest: (u64, u32)) {
        let heavier = largest.0 > self.largest.0 || (largest.0 == self.largest.0 && largest.1 < self.largest.1);
        if self.count == 0 || heavier {
            self.largest = largest;
        }
        self.weight = self.weight.saturating_add(weight);
        self.count = self.count.saturating_add(count);
    }
}

/// Where the timeline peaks: after [`Timeline::peak_step`], or before the first step when
/// more was alive then (a trace that begins with frees), so that the root at `peak(tl)` is
/// [`Timeline::peak_bytes`].
pub fn peak(tl: &Timeline) -> At {
    if tl.initial_bytes() > tl.peak_total() {
        At::Before
    } else {
        At::Step(tl.peak_step())
    }
}

/// The flame graph of the blocks timeline `tl` at `q.at`. Cost: O(k log n) to find the k
/// elements (alive at the step, or in the window: [`Timeline::live_at`],
/// [`Timeline::live_in`]), then O(d) per distinct stack among them for d frames; nothing
/// is proportional to the whole trace.
pub fn flame(snap: &Snapshot, tl: &Timeline, q: &FlameQuery) -> Flame {
    let last = tl.n_steps().saturating_sub(1);
    let at = match q.at {
        At::Before => At::Before,
        At::Step(s) => At::Step(s.min(last)),
        At::Window(lo, hi) => At::Window(lo.min(last), hi.min(tl.n_steps()).max(lo.min(last) + 1)),
    };
    let (ids, lo, hi) = match at {
        // Before the first step every element counts once whatever its steps: a free at
        // step 0 of something allocated before recording began has none.
        At::Before => (tl.initial_elements(), 0, u32::MAX),
        At::Step(s) => (tl.live_at(s, 0), s, s + 1),
        At::Window(lo, hi) => (tl.live_in(lo, hi), lo, hi),
    };
    let els = tl.elements();
    let mut groups: FxHashMap<Charge, Group> = FxHashMap::default();
    for id in ids {
        let e = &els[id as usize];
        let steps = if at == At::Before { 1 } else { e.end.min(hi).saturating_sub(e.start.max(lo)) };
        let w = e.size.saturating_mul(u64::from(steps));
        groups.entry(Charge::of(snap, tl.device(), e)).or_default().add(w, 1, (w, id));
    }
    let mut groups: Vec<(Charge, Group)> = groups.into_iter().collect();
    groups.sort_unstable_by_key(|g| g.0);

    let mut tree = Tree::default();
    tree.nodes.push(Building::new(NodeKind::Root, 0));
    let mut rows = Rows::default();
    let mut path: Vec<NodeKind> = Vec::new();
    let mut names = SiteNames::default();
    let mut lines: FxHashMap<std::rc::Rc<str>, Group> = FxHashMap::default();
    for &(charge, g) in &groups {
        path.clear();
        match charge {
            Charge::NoStack => path.push(NodeKind::NoStack),
            Charge::Before(free) => {
                path.push(NodeKind::BeforeRecording);
                path.extend(free.and_then(|s| sites::user_frame(snap, s)).map(NodeKind::FreedAt));
            }
            Charge::Stack(s) => rows.of(snap, snap.stacks.get(s), q.all_frames, &mut path),
        }
        if path.is_empty() {
            path.push(NodeKind::NoFrames);
        }
        tree.add(&path, g);
        lines.entry(names.get(snap, charge)).or_default().add(g.weight, g.count, g.largest);
    }
    let mut lines: Vec<UserLine> = lines
        .into_iter()
        .map(|(site, g)| UserLine { site: site.to_string(), weight: g.weight, count: g.count, largest: g.largest.1 })
        .collect();
    let n_lines = lines.len();
    let heavier = |a: &UserLine, b: &UserLine| b.weight.cmp(&a.weight).then_with(|| a.site.cmp(&b.site));
    // Only the lines kept are sorted: with an allocation per line, sorting them all is what
    // would cost most.
    if q.lines < lines.len() {
        lines.select_nth_unstable_by(q.lines, heavier);
        lines.truncate(q.lines);
    }
    lines.sort_by(heavier);
    Flame { at, nodes: tree.preorder(q.min_share), lines, n_lines }
}

/// What the rows of stacks are made of, each decided once.
#[derive(Default)]
struct Rows {
    python: FxHashMap<FrameId, bool>,
    /// One operator per text: two stacks of the same op through other frames of it
    /// (`::call`, `::redispatch`) share their row.
    ops: FxHashMap<String, Operator>,
}

impl Rows {
    /// The rows of a stack (`frames`, innermost first), outermost first: every frame with
    /// `all_frames`; else its Python frames and, below the innermost, the operator that
    /// allocated ([`sites::operator`] of the C++ frames under it), or the frame a call site
    /// would fall back to when they name none (a C++ library's own allocation).
    fn of(&mut self, snap: &Snapshot, frames: &[FrameId], all_frames: bool, path: &mut Vec<NodeKind>) {
        if all_frames {
            let valid = |f: &&FrameId| (f.0 as usize) < snap.frames.len();
            path.extend(frames.iter().rev().filter(valid).map(|&f| NodeKind::Frame(f)));
            return;
        }
        let python = &mut self.python;
        let mut is_python = |f: FrameId| {
            *python
                .entry(f)
                .or_insert_with(|| snap.frames.get(f.0 as usize).is_some_and(|fr| sites::is_python(snap, fr)))
        };
        let inner = frames.iter().position(|&f| is_python(f)).unwrap_or(frames.len());
        for &f in frames[inner..].iter().rev() {
            if is_python(f) {
                path.push(NodeKind::Frame(f));
            }
        }
        let cpp = &frames[..inner];
        match sites::operator(snap, cpp) {
            Some(o) => path.push(NodeKind::Op(*self.ops.entry(o.text(snap)).or_insert(o))),
            None => path.extend(sites::fallback_frame(snap, cpp).map(NodeKind::Frame)),
        }
    }
}

/// A node while the tree grows.
struct Building {
    kind: NodeKind,
    depth: u32,
    group: Group,
    self_weight: u64,
    children: Vec<u32>,
}

impl Building {
    fn new(kind: NodeKind, depth: u32) -> Self {
        Building { kind, depth, group: Group::default(), self_weight: 0, children: Vec::new() }
    }
}

#[derive(Default)]
struct Tree {
    nodes: Vec<Building>,
    child: FxHashMap<(u32, NodeKind), u32>,
}

impl Tree {
    /// Adds a group of elements along `path` (below the root).
    fn add(&mut self, path: &[NodeKind], g: Group) {
        let mut at = 0u32;
        self.nodes[0].group.add(g.weight, g.count, g.largest);
        for &kind in path {
            let next = match self.child.get(&(at, kind)) {
                Some(&k) => k,
                None => {
                    let k = self.nodes.len() as u32;
                    let depth = self.nodes[at as usize].depth + 1;
                    self.nodes.push(Building::new(kind, depth));
                    self.nodes[at as usize].children.push(k);
                    self.child.insert((at, kind), k);
                    k
                }
            };
            self.nodes[next as usize].group.add(g.weight, g.count, g.largest);
            at = next;
        }
        let leaf = &mut self.nodes[at as usize];
        leaf.self_weight = leaf.self_weight.saturating_add(g.weight);
    }

    /// The nodes in pre-order, children heaviest first, with their offsets, leaving out
    /// those lighter than `1 / min_share` of the root (an explicit stack: a hostile stack
    /// may be deep).
    fn preorder(mut self, min_share: u64) -> Vec<Node> {
        let total = self.nodes[0].group.weight;
        let light = |w: u64| min_share > 0 && u128::from(w) * u128::from(min_share) < u128::from(total);
        let mut out: Vec<Node> = Vec::new();
        // (building index, new parent index, offset)
        let mut todo: Vec<(u32, Option<u32>, u64)> = vec![(0, None, 0)];
        while let Some((k, parent, offset)) = todo.pop() {
            let mut children = std::mem::take(&mut self.nodes[k as usize].children);
            let mut pruned = 0u64;
            children.retain(|&c| {
                let w = self.nodes[c as usize].group.weight;
                let keep = !light(w);
                if !keep {
                    pruned = pruned.saturating_add(w);
                }
                keep
            });
            children.sort_by_key(|&c| {
                let n = &self.nodes[c as usize];
                (std::cmp::Reverse(n.group.weight), n.kind)
            });
            let b = &self.nodes[k as usize];
            let me = out.len() as u32;
            out.push(Node {
                kind: b.kind,
                parent,
                depth: b.depth,
                weight: b.group.weight,
                self_weight: b.self_weight,
                pruned,
                offset,
                count: b.group.count,
                largest: b.group.largest.1,
            });
            // Children start where their parent does, heaviest leftmost; what is left on
            // the right is its own share and its pruned children's.
            let mut at = offset;
            let first = todo.len();
            for &c in &children {
                todo.push((c, Some(me), at));
                at = at.saturating_add(self.nodes[c as usize].group.weight);
            }
            todo[first..].reverse();
        }
        out
    }
}
