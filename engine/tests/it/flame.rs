//! The flame graph as the page asks for it: at the example's peak its root is the peak and
//! its lines of code are the profile's call sites; pruning keeps every byte; colours are the
//! timeline's; search flags frames and a call-site search finds a line's allocations; the
//! window mode weighs bytes × steps.

use engine::protocol::*;
use engine::Engine;
use snapshot::timeline::Timeline;

use crate::open;

fn ask(e: &mut Engine, doc: DocId, step: Option<u32>, window: Option<(f64, f64)>, query: Option<Query>) -> FlameVm {
    match e.handle(Request::Flame { doc, device: 0, step, window, all_frames: false, query }) {
        Response::Flame(v) => *v,
        other => panic!("{other:?}"),
    }
}

/// The example opened as the worker opens it, and its blocks timeline laid out by the core.
fn example() -> (Engine, DocId, Timeline) {
    let bytes = testkit::example("cs336-fullstep.pickle");
    let mut e = Engine::new();
    let doc = open(&mut e, "ex", &bytes, 4 << 20).unwrap().doc;
    let snap = snapshot::read(&bytes).unwrap().snapshot;
    let tl = Timeline::build(&snap, 0, Kind::Blocks);
    (e, doc, tl)
}

/// Every node is its own share, its pruned children's and its kept children's; kept nodes
/// are at least 1/MIN_SHARE of the root.
#[track_caller]
fn check_tree(v: &FlameVm) {
    assert_eq!(v.nodes[0].weight, v.total);
    let mut children = vec![0u64; v.nodes.len()];
    for n in &v.nodes[1..] {
        let p = n.parent.unwrap() as usize;
        children[p] += n.weight;
        assert!(n.weight * engine::flame::MIN_SHARE >= v.total, "a node under the budget was sent");
        assert!(n.offset >= v.nodes[p].offset && n.offset + n.weight <= v.nodes[p].offset + v.nodes[p].weight);
    }
    for (k, n) in v.nodes.iter().enumerate() {
        assert_eq!(n.self_weight + n.pruned + children[k], n.weight, "node {k} ({})", n.name);
    }
}

#[test]
fn at_the_peak_the_root_is_the_peak_and_the_lines_are_the_profiles_call_sites() {
    let (mut e, doc, tl) = example();
    let v = ask(&mut e, doc, None, None, None);
    assert_eq!(v.total, tl.peak_bytes());
    assert_eq!(v.total, v.peak_bytes);
    assert_eq!(v.step, Some(tl.peak_step()));
    assert_eq!(v.peak_step, Some(tl.peak_step()));
    check_tree(&v);
    assert!(v.nodes.len() > 20 && v.nodes.len() < 2000, "{} nodes", v.nodes.len());
    // The message stays small: its text is the names of the kept nodes and lines.
    let text: usize = v.nodes.iter().map(|n| n.name.len() + n.file.len()).sum::<usize>()
        + v.lines.iter().map(|l| l.site.len()).sum::<usize>();
    assert!(text < 256 << 10, "{text} bytes of text");

    let Response::Profile(p) = e.handle(Request::Profile { doc, device: 0 }) else { panic!() };
    let lines: Vec<(&str, u64, u32)> = v.lines.iter().map(|l| (l.site.as_str(), l.weight, l.count)).collect();
    let sites: Vec<(&str, u64, u32)> = p.sites.iter().map(|s| (s.site.as_str(), s.bytes, s.count)).collect();
    assert_eq!(lines, sites);

    // The root's colour is the timeline's colour of the largest allocation alive.
    let els = tl.elements();
    let live = tl.live_at(tl.peak_step(), 0);
    let biggest = live.iter().copied().max_by_key(|&id| (els[id as usize].size, std::cmp::Reverse(id))).unwrap();
    assert_eq!(v.nodes[0].rgb, engine::colour(els[biggest as usize].order));
}

#[test]
fn search_flags_frames_and_a_line_finds_its_allocations() {
    let (mut e, doc, _) = example();
    let v = ask(&mut e, doc, None, None, Some(Query::Substring("ADAPTERS.py".into())));
    assert!(v.hits > 0);
    for n in &v.nodes {
        assert_eq!(n.hit, n.file.contains("adapters.py"), "{} {}", n.file, n.name);
    }
    let Response::Error(err) = e.handle(Request::Flame {
        doc,
        device: 0,
        step: None,
        window: None,
        all_frames: false,
        query: Some(Query::Regex("(".into())),
    }) else {
        panic!("a bad regex answered")
    };
    assert!(err.contains("regular expression"), "{err}");

    // A line's call-site search: its allocations over the whole trace, of which those alive
    // at the peak are the line's count; the frame of that line is flagged in the flame graph.
    let line = v.lines.iter().find(|l| l.site.contains(".py:")).unwrap().clone();
    let q = Query::CallSite(line.site.clone());
    let Response::Search(r) = e.handle(Request::Search { doc, device: 0, kind: Kind::Blocks, query: q.clone() }) else {
        panic!()
    };
    let peak = v.step.unwrap();
    let alive = r.matches.iter().filter(|&&(_, a, b)| a <= peak && peak < b).count() as u32;
    assert_eq!(alive, line.count, "{}", line.site);
    assert!(r.count >= line.count);
    let flagged = ask(&mut e, doc, None, None, Some(q));
    assert!(flagged.hits > 0);
    for n in flagged.nodes.iter().filter(|n| n.hit) {
        assert_eq!(format!("{}:{}:{}", n.file, n.line, n.name), line.site);
    }
}

#[test]
fn the_window_mode_weighs_bytes_by_steps() {
    let (mut e, doc, tl) = example();
    let n = tl.n_steps();
    let whole = ask(&mut e, doc, None, Some((0.0, f64::from(n))), None);
    assert_eq!(whole.window, Some((0, n)));
    assert_eq!(whole.step, None);
    assert_eq!(whole.total, tl.totals().iter().sum::<u64>());
    check_tree(&whole);
    // A fractional window covers the steps it touches.
    let part = ask(&mut e, doc, None, Some((10.5, 200.2)), None);
    assert_eq!(part.window, Some((10, 201)));
    assert_eq!(part.total, tl.totals()[10..201].iter().sum::<u64>());
    // An empty window is the whole trace; a step past the end is the last one.
    assert_eq!(ask(&mut e, doc, None, Some((5.0, 5.0)), None).window, Some((0, n)));
    let last = ask(&mut e, doc, Some(u32::MAX), None, None);
    assert_eq!(last.step, Some(n - 1));
    assert_eq!(last.total, tl.final_bytes());
}
