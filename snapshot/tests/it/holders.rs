//! "Who holds the memory", checked by brute force: written apart from the timeline, the
//! allocator state and the doctor, from the raw trace entries alone. At every `oom` entry, at
//! the peak and at the end, each live block is found by replaying the trace from its start
//! (an `alloc` until its `free_completed`; a free with no `alloc` before it, alive from the
//! start; a final block the trace leaves unaccounted for, alive throughout) and charged to its
//! **allocation's** stack by the documented rule (docs/doctor.md, "Who holds it"). The
//! doctor's holders must be the same, site by site and byte for byte.
//!
//! Also: no holder, call site or flame-graph row on any corpus file is a destructor, an
//! allocator or unwinder frame, an interpreter or dispatcher frame, or a bare aten op whose
//! stack names an autograd node.

use std::collections::HashMap;

use snapshot::categories::{self, Categories, Compiled, Why};
use snapshot::doctor::{self, Holder};
use snapshot::flame::{flame, peak, FlameQuery, NodeKind};
use snapshot::synth::{self, Options};
use snapshot::timeline::{Timeline, TimelineKind};
use snapshot::{Action, BlockState, Snapshot, StackId};

/// A file of the user's own code, as the rule has it: Python outside PyTorch, site-packages,
/// the standard library and generated code.
fn is_user_file(file: &str) -> bool {
    let f = file.replace('\\', "/");
    f.ends_with(".py")
        && !f.starts_with('<')
        && !["site-packages/", "dist-packages/", "/lib/python", "torch/", "torchinductor_"]
            .iter()
            .any(|p| f.contains(p))
}

/// The innermost `File "f", line N, in name` of a traceback whose file is the user's.
fn traceback_user_line(text: &str) -> Option<String> {
    let mut found = None;
    for l in text.lines() {
        let Some(rest) = l.trim_start().strip_prefix("File \"") else { continue };
        let Some((file, rest)) = rest.split_once("\", line ") else { continue };
        let (num, name) = rest.split_once(", in ").unwrap_or((rest, ""));
        if is_user_file(file) {
            found = Some(format!("{file}:{}:{}", num.trim(), name.trim()));
        }
    }
    found
}

/// The node of `torch::autograd::[generated::]Node::apply(` or `CppNode<ns::F>::apply(`.
fn node_of(name: &str) -> Option<String> {
    let rest = name.split("torch::autograd::").nth(1)?;
    let class = rest.split('(').next()?.strip_suffix("::apply")?;
    let class = class.trim_start_matches("generated::");
    let class = match class.strip_prefix("CppNode<") {
        Some(inner) => inner.trim_end_matches('>').rsplit("::").next()?,
        None => class,
    };
    let word = !class.is_empty() && class.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    (word && class != "Node").then(|| match class {
        "AccumulateGrad" => "gradient accumulation (AccumulateGrad)".to_string(),
        "PyNode" => "custom Function (PyNode)".to_string(),
        c => c.to_string(),
    })
}

/// A dispatched op (`at::_ops::zeros::call`).
fn op_of(name: &str) -> Option<String> {
    let op = name.split("at::_ops::").nth(1)?.split("::").next()?;
    (!op.is_empty()).then(|| format!("aten::{op}"))
}

/// ATen's `empty` functions that generated code calls without the dispatcher.
fn empty_of(name: &str) -> Option<String> {
    let f = name.split("at::detail::").nth(1)?.trim_start_matches('_');
    let op = ["empty_strided", "empty"].into_iter().find(|e| f.starts_with(e))?;
    Some(format!("aten::{op}"))
}

/// The rule, from the frames: the innermost line of the user's code (compiled code by the
/// original model line it carries); else the first Python frame; else a C++ stack's autograd
/// node and aten op (`backward: ...` when it ran in autograd's engine). A C++ stack naming
/// neither is left to `sites::site_name`'s fallback, which these files never reach.
fn expected_site(snap: &Snapshot, stack: StackId) -> String {
    let frames: Vec<_> = snap.stack(stack).collect();
    for f in &frames {
        let fx = f.extras.iter().find(|(k, _)| snap.str(*k) == "fx_original_trace");
        if let Some((_, snapshot::Value::Str(text))) = fx {
            if let Some(line) = traceback_user_line(text) {
                return line;
            }
        }
        if is_user_file(snap.str(f.filename)) {
            return format!("{}:{}:{}", snap.str(f.filename), f.line, snap.str(f.name));
        }
    }
    if let Some(f) = frames.iter().find(|f| snap.str(f.filename).ends_with(".py")) {
        return format!("{}:{}:{}", snap.str(f.filename), f.line, snap.str(f.name));
    }
    let node = frames.iter().find_map(|f| node_of(snap.str(f.name)));
    let op = (frames.iter().find_map(|f| op_of(snap.str(f.name))))
        .or_else(|| frames.iter().find_map(|f| empty_of(snap.str(f.name))));
    let engine = frames.iter().any(|f| snap.str(f.name).contains("torch::autograd::Engine::"));
    let what = match (&node, &op) {
        (Some(n), Some(o)) => format!("{n}, {o}"),
        (Some(n), None) => n.clone(),
        (None, Some(o)) => o.clone(),
        (None, None) => return snapshot::sites::site_name(snap, Some(stack)),
    };
    if node.is_some() || engine {
        format!("backward: {what}")
    } else {
        what
    }
}

fn has_frames(snap: &Snapshot, s: Option<StackId>) -> Option<StackId> {
    s.filter(|&s| snap.stack(s).next().is_some())
}

/// A block allocated before the recording: where its free's stack says it went.
fn before_recording(snap: &Snapshot, free: Option<StackId>) -> String {
    let Some(s) = has_frames(snap, free) else { return "allocated before recording".into() };
    let frames: Vec<_> = snap.stack(s).collect();
    let user = frames.iter().find(|f| is_user_file(snap.str(f.filename)));
    let at = match user {
        Some(f) => Some(format!("{}:{}:{}", snap.str(f.filename), f.line, snap.str(f.name))),
        None => frames.iter().find_map(|f| node_of(snap.str(f.name))).map(|n| format!("backward: {n}")),
    };
    match at {
        Some(at) => format!("allocated before recording; freed at {at}"),
        None => "allocated before recording".into(),
    }
}

/// What the categories inferred of a block alive throughout with no stack.
fn inferred(cats: &Categories, addr: u64) -> Option<&'static str> {
    Some(match cats.before_recording(addr)?.why {
        Why::InferredParameter => "(no frames) parameters, inferred",
        Why::InferredOptimizerState => "(no frames) optimizer state, inferred",
        Why::InferredBuffer => "(no frames) buffers or frozen parameters, inferred",
        _ => "(no frames) persistent before recording: parameters or optimizer state",
    })
}

/// A block over its life: alive after `start` entries and until `end` (after `k` entries
/// it is alive when `start <= k < end`), its requested bytes and the site it is charged to.
#[derive(Clone, Debug)]
struct Block {
    start: usize,
    end: usize,
    addr: u64,
    bytes: u64,
    site: String,
    /// The stack its allocation recorded (`None` for one allocated before the recording).
    stack: Option<StackId>,
}

/// Every block of `device`'s trace and final snapshot, by one replay of the raw entries: an
/// `alloc` lives until the free of its address (an `alloc` over a live address leaves the
/// older block alive to the end, as PyTorch's viewer does), a free with no `alloc` before it
/// lived from the start, and a final `active_allocated` block at an address the trace leaves
/// free lived throughout.
fn blocks(snap: &Snapshot, device: usize, cats: &Categories) -> Vec<Block> {
    let t = snap.trace(device);
    let mut open: HashMap<u64, Block> = HashMap::new();
    let mut out = Vec::new();
    for i in 0..t.len() {
        let (addr, size) = (t.addr(i), t.size(i));
        match t.action(i) {
            Action::Alloc => {
                let site = match has_frames(snap, t.frames(i)) {
                    Some(s) => expected_site(snap, s),
                    None => "(no stack)".into(),
                };
                let b = Block { start: i + 1, end: usize::MAX, addr, bytes: size, site, stack: t.frames(i) };
                out.extend(open.insert(addr, b));
            }
            Action::Free | Action::FreeCompleted => match open.remove(&addr) {
                Some(b) => out.push(Block { end: i + 1, ..b }),
                None => {
                    let site = before_recording(snap, t.frames(i));
                    out.push(Block { start: 0, end: i + 1, addr, bytes: size, site, stack: None })
                }
            },
            _ => {}
        }
    }
    for seg in snap.segments.iter().filter(|s| s.device == device as i64) {
        for (b, addr) in seg.blocks.iter().zip(seg.block_addresses()) {
            if b.state != BlockState::ActiveAllocated || open.contains_key(&addr) {
                continue;
            }
            let site = match has_frames(snap, b.stack()) {
                Some(s) => expected_site(snap, s),
                None => inferred(cats, addr).map_or_else(|| before_recording(snap, None), str::to_string),
            };
            out.push(Block { start: 0, end: usize::MAX, addr, bytes: b.requested_bytes(), site, stack: b.stack() });
        }
    }
    out.extend(open.into_values());
    out
}

/// The blocks alive after `k` entries.
fn alive(blocks: &[Block], k: usize) -> Vec<&Block> {
    blocks.iter().filter(|b| b.start <= k && k < b.end).collect()
}

/// The peak of live bytes, `(after how many entries, bytes)`: the first alloc or free after
/// which the most is alive, or before the first entry when more was alive then.
fn peak_of(snap: &Snapshot, device: usize, blocks: &[Block]) -> (usize, u64) {
    let t = snap.trace(device);
    let mut change: HashMap<usize, i128> = HashMap::new();
    for b in blocks {
        *change.entry(b.start).or_default() += i128::from(b.bytes);
        if b.end != usize::MAX {
            *change.entry(b.end).or_default() -= i128::from(b.bytes);
        }
    }
    let initial = change.get(&0).copied().unwrap_or(0);
    let (mut total, mut best): (i128, Option<(usize, i128)>) = (initial, None);
    for i in 0..t.len() {
        total += change.get(&(i + 1)).copied().unwrap_or(0);
        let step = matches!(t.action(i), Action::Alloc | Action::Free | Action::FreeCompleted);
        if step && best.is_none_or(|(_, b)| total > b) {
            best = Some((i + 1, total));
        }
    }
    match best {
        Some((k, b)) if b >= initial => (k, b as u64),
        _ => (0, initial as u64),
    }
}

/// The ten largest sites, as the doctor lists them.
fn top(blocks: &[&Block]) -> Vec<Holder> {
    let mut by: HashMap<&str, (u64, u32)> = HashMap::new();
    for b in blocks {
        let e = by.entry(&b.site).or_default();
        e.0 += b.bytes;
        e.1 += 1;
    }
    let mut v: Vec<Holder> =
        by.into_iter().map(|(site, (bytes, count))| Holder { site: site.into(), bytes, count }).collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    v.truncate(doctor::holders::TOP_SITES);
    v
}

#[track_caller]
fn same(what: &str, got: &[Holder], want: &[Holder]) {
    assert_eq!(got, want, "{what}: the doctor's holders (left) against the trace's (right)");
}

/// The doctor's holders at every OOM, the peak and the end of `device`, against the replay;
/// how many moments it checked.
fn check(name: &str, snap: &Snapshot, device: usize) -> usize {
    let tl = Timeline::build(snap, device, TimelineKind::Blocks);
    let cats = categories::analyze(snap, &tl, &Compiled::default());
    let report = doctor::doctor(snap, device, &Compiled::default());
    let all = blocks(snap, device, &cats);
    let what = |at: &str| format!("{name} device {device}, {at}");
    for o in &report.ooms {
        // The state the request failed in: after the entries before the `oom` one.
        same(&what(&format!("oom at entry {}", o.entry)), &o.holders, &top(&alive(&all, o.entry as usize)));
    }
    let (after, bytes) = peak_of(snap, device, &all);
    assert_eq!(report.peak.peak_bytes, bytes, "{}: the peak", what("peak"));
    same(&what("peak"), &report.peak.holders, &top(&alive(&all, after)));
    if let Some(e) = &report.at_end {
        same(&what("end"), &e.holders, &top(&alive(&all, snap.trace(device).len())));
    }
    report.ooms.len() + 1 + usize::from(report.at_end.is_some())
}

#[test]
fn holders_equal_a_replay_of_the_raw_trace_on_every_corpus_file() {
    let mut points = 0;
    for (name, bytes) in testkit::files() {
        let snap = snapshot::read(&bytes).unwrap_or_else(|e| panic!("{name}: {e}")).snapshot;
        for d in snap.devices() {
            points += check(&name, &snap, d);
        }
    }
    assert!(points >= testkit::if_full(30, 10), "{points} points checked");
}

#[test]
fn holders_equal_a_replay_when_an_oom_is_raised_in_a_worker_thread() {
    for seed in [1, 2, 3] {
        let opts = Options {
            seed,
            target_entries: 6_000,
            oom_in_worker: true,
            capacity_bytes: 40 << 30,
            warmup_steps: usize::from(seed == 2),
            ..Default::default()
        };
        let snap = synth::generate(&opts);
        let report = doctor::doctor(&snap, 0, &Compiled::default());
        let oom = report.ooms.last().expect("the worker's request fails");
        // The unwinding's frees name the worker's frames; the memory is the model's.
        assert!(oom.holders.iter().all(|h| !h.site.contains("parallel_apply.py")), "{:?}", oom.holders);
        assert!(oom.holders.iter().any(|h| h.site.starts_with("models.py:")), "{:?}", oom.holders);
        assert_eq!(check(&format!("generated seed {seed}"), &snap, 0), report.ooms.len() + 1);
    }
}

#[test]
fn every_allocator_state_names_its_blocks_by_their_allocation() {
    let mut compared = 0;
    for (name, bytes) in testkit::files() {
        let snap = snapshot::read(&bytes).unwrap_or_else(|e| panic!("{name}: {e}")).snapshot;
        for d in snap.devices() {
            let n = snap.trace(d).len();
            if n == 0 {
                continue;
            }
            let tl = Timeline::build(&snap, d, TimelineKind::Blocks);
            let cats = categories::analyze(&snap, &tl, &Compiled::default());
            let all = blocks(&snap, d, &cats);
            let index = snapshot::state::StateIndex::build(&snap, d);
            for k in [0, n / 5, n / 2, 4 * n / 5, n - 1] {
                let state = index.state_after(&snap, Some(k));
                let made: HashMap<u64, Option<StackId>> =
                    alive(&all, k + 1).iter().map(|b| (b.addr, b.stack)).collect();
                for bv in state.segments.iter().flat_map(|s| &s.blocks).chain(&state.orphan_blocks) {
                    let Some(&want) = made.get(&bv.address) else { continue };
                    assert_eq!(bv.stack, want, "{name} device {d} after entry {k}: block {:#x}", bv.address);
                    compared += 1;
                }
            }
        }
    }
    assert!(compared > testkit::if_full(5_000, 500), "{compared} blocks compared");
}

/// A destructor, allocator, unwinder, interpreter or dispatcher frame's text.
fn is_plumbing(text: &str) -> bool {
    [
        "::~",
        "intrusive_ptr",
        "StorageImpl",
        "CachingAllocator",
        "unwind::unwind",
        "CapturedTraceback",
        "gather_with_cpp",
        "_PyEval",
        "PyObject_",
        "Py_BytesMain",
        "_PyRun",
        "PyMethod_New",
        "PyType_GetModule",
        "__libc",
        "c10::impl::",
        "c10::Dispatcher",
    ]
    .iter()
    .any(|p| text.contains(p))
}

#[test]
fn no_holder_site_or_flame_row_on_the_corpus_is_plumbing() {
    for (name, bytes) in testkit::files() {
        let snap = snapshot::read(&bytes).unwrap_or_else(|e| panic!("{name}: {e}")).snapshot;
        for d in snap.devices() {
            let tl = Timeline::build(&snap, d, TimelineKind::Blocks);
            let report = doctor::doctor(&snap, d, &Compiled::default());
            let holders = report.ooms.iter().flat_map(|o| &o.holders).chain(&report.peak.holders);
            for h in holders.chain(report.at_end.iter().flat_map(|e| &e.holders)) {
                assert!(!is_plumbing(&h.site), "{name} device {d}: holder {}", h.site);
            }
            if tl.n_actions() == 0 {
                continue;
            }
            let f = flame(&snap, &tl, &FlameQuery::whole(peak(&tl), false));
            for l in &f.lines {
                assert!(!is_plumbing(&l.site), "{name} device {d}: line {}", l.site);
            }
            for n in &f.nodes {
                let text = match n.kind {
                    NodeKind::Frame(id) => {
                        let fr = &snap.frames[id.0 as usize];
                        assert!(snapshot::sites::is_python(&snap, fr), "{name}: a C++ row {}", snap.str(fr.name));
                        snap.str(fr.name).to_string()
                    }
                    NodeKind::Op(o) => o.text(&snap),
                    _ => continue,
                };
                assert!(!is_plumbing(&text), "{name} device {d}: flame row {text}");
            }
            // A bare aten op names a stack without an autograd node; a stack with one names it.
            for id in tl.live_in(0, tl.n_steps()) {
                let Some(s) = tl.elements()[id as usize].stack else { continue };
                let site = snapshot::sites::site_name(&snap, Some(s));
                let node = snap.stack(s).find_map(|f| node_of(snap.str(f.name)));
                if let Some(n) = node.filter(|_| !site.contains(".py:")) {
                    assert!(site.contains(&n), "{name}: {site} does not name {n}");
                }
                assert!(!is_plumbing(&site), "{name} device {d}: site {site}");
            }
        }
    }
}
