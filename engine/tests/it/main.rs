//! The engine answers the page's questions with what the core computes: these tests ask
//! as the page does, on real corpus files, and check the answers against the core's own
//! analyses and against the files' contents.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::protocol::*;
use engine::{Engine, Loading};
use snapshot::timeline::Timeline;
use snapshot::{frames, stats, Action, Snapshot};

mod flame;
mod modern;
mod predicted;
mod preview;
mod profiler;
mod ranks;

/// Loads like the worker: in slices.
fn open(engine: &mut Engine, name: &str, bytes: &[u8], slice: usize) -> Result<DocInfo, String> {
    let mut l = Loading::new(name, bytes.len() as u64, 0.0);
    for c in bytes.chunks(slice) {
        l.feed(c)?;
    }
    assert_eq!(l.bytes(), bytes.len() as u64);
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    engine.finish(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed), l, &|| 0.0)
}

/// A view of 300 pixel rows, the memory axis from zero.
fn query(doc: DocId, device: u32, kind: Kind, start: f64, end: f64, columns: u32) -> ViewQuery {
    ViewQuery {
        doc,
        device,
        kind,
        start,
        end,
        columns,
        rows: 300,
        y: None,
        baseline: false,
        totals_only: false,
        pinned: None,
        palette: PaletteVm::default(),
    }
}

fn view(e: &mut Engine, doc: DocId, device: u32, kind: Kind, start: f64, end: f64, columns: u32) -> ViewModel {
    match e.handle(Request::View(query(doc, device, kind, start, end, columns))) {
        Response::View(v) => v,
        other => panic!("{other:?}"),
    }
}

#[test]
fn load_reports_the_core_statistics_and_default_device() {
    let bytes = testkit::example("cs336-fullstep.pickle");
    let mut e = Engine::new();
    let info = open(&mut e, "ex.pickle", &bytes, 1 << 20).unwrap();
    let snap = snapshot::read(&bytes).unwrap().snapshot;
    assert_eq!(info.summary, stats::summary(&snap));
    assert_eq!(info.default_device, snap.default_device().map(|d| d as u32));
    assert_eq!(info.devices.len(), snap.devices().len());
    assert_eq!(info.devices[0].entries, snap.trace(0).len() as u64);
    assert_eq!(info.name, "ex.pickle");
}

#[test]
fn views_draw_what_the_timeline_holds() {
    let bytes = testkit::example("cs336-fullstep.pickle");
    let mut e = Engine::new();
    let info = open(&mut e, "ex", &bytes, 3 << 20).unwrap();
    let snap = snapshot::read(&bytes).unwrap().snapshot;
    let tl = Timeline::build(&snap, 0, Kind::Blocks);
    // An empty window means the whole trace.
    let v = view(&mut e, info.doc, 0, Kind::Blocks, 0.0, 0.0, 640);
    assert_eq!((v.start, v.end), (0.0, f64::from(tl.n_steps())));
    assert_eq!(v.columns.len(), 640);
    assert_eq!(v.peak_bytes, tl.peak_bytes());
    assert_eq!(v.columns[0].total, tl.totals()[v.columns[0].step as usize]);
    assert!(v.columns.iter().any(|c| c.step == tl.peak_step()), "the peak column is sampled");
    assert!(!v.bands.is_empty());
    let min_bytes = engine::min_bytes(v.y_max, 300);
    for c in (0..640).step_by(37) {
        let mut in_col: Vec<&Band> = v.bands.iter().filter(|b| b.first_column <= c && c <= b.last_column).collect();
        in_col.sort_by_key(|b| b.offset_bytes);
        let mut top = 0;
        for b in &in_col {
            assert_eq!(b.offset_bytes, top, "bands stack without gaps in column {c}");
            // An element of its own is at least a quarter row; a blend holds smaller ones.
            assert!(b.element.is_none() || b.size_bytes >= min_bytes);
            top += b.size_bytes;
        }
        let col = &v.columns[c as usize];
        assert_eq!(top, col.drawn);
        assert_eq!(col.drawn, col.total, "every byte is an element's or a blend's");
        // What the page's hit test finds is what is drawn there, and its outline is where
        // the view drew it.
        if let Some(b) = in_col.iter().filter(|b| b.element.is_some()).nth(3) {
            let r = e.handle(Request::Hit {
                doc: info.doc,
                device: 0,
                kind: Kind::Blocks,
                step: col.step,
                bytes: b.offset_bytes + b.size_bytes / 2,
                slack: 0,
            });
            let Response::Hit(Some(d), outline) = r else { panic!("{r:?}") };
            assert_eq!(Some(d.element), b.element);
            let mine: Vec<OutlineVm> = v
                .bands
                .iter()
                .filter(|x| x.element == b.element)
                .map(|x| OutlineVm {
                    first: x.first_column,
                    last: x.last_column,
                    offset: x.offset_bytes,
                    size: x.size_bytes,
                })
                .collect();
            assert_eq!(outline, mine);
            assert!(outline.iter().any(|o| o.first <= c && c <= o.last && o.offset == b.offset_bytes));
        }
    }
    assert!(v.bands.iter().any(|b| b.element.is_none()), "the example has allocations thinner than a quarter row");
    // The pixels: the plot area, painted where the columns hold memory.
    assert_eq!(v.pixels.len(), 640 * 300 * 4);
    let painted = v.pixels.chunks(4).filter(|p| p[3] > 0).count();
    let expect: f64 = v.columns.iter().map(|c| c.total as f64 / (v.y_max as f64 * engine::HEADROOM) * 300.0).sum();
    assert!((painted as f64 - expect).abs() < expect * 0.02 + 640.0, "{painted} pixels painted, {expect} expected");
    // Zooming in: fewer steps per column, same scale.
    let z = view(&mut e, info.doc, 0, Kind::Blocks, 4000.0, 4200.0, 400);
    assert_eq!(z.y_max, v.y_max);
    assert!(z.columns.iter().all(|c| (4000..4201).contains(&c.step)));
    // The minimap asks for totals only.
    let q = ViewQuery {
        doc: info.doc,
        device: 0,
        kind: Kind::Blocks,
        start: 0.0,
        end: 0.0,
        columns: 100,
        rows: 1,
        y: None,
        baseline: false,
        totals_only: true,
        pinned: None,
        palette: PaletteVm::default(),
    };
    let Response::View(m) = e.handle(Request::View(q)) else { panic!() };
    assert!(m.bands.is_empty());
    assert_eq!(m.columns.len(), 100);
}

#[test]
fn details_events_state_and_search_agree_with_the_core() {
    let bytes = testkit::example("cs336-fullstep.pickle");
    let mut e = Engine::new();
    let info = open(&mut e, "ex", &bytes, 1 << 22).unwrap();
    let snap = snapshot::read(&bytes).unwrap().snapshot;
    let tl = Timeline::build(&snap, 0, Kind::Blocks);
    let trace = snap.trace(0);
    let doc = info.doc;

    // Details: a traced allocation with a stack.
    let (id, el) =
        tl.elements().iter().enumerate().find(|(_, x)| x.alloc_entry.is_some() && x.stack.is_some()).unwrap();
    let Response::Details(d) = e.handle(Request::Details { doc, device: 0, kind: Kind::Blocks, element: id as u32 })
    else {
        panic!()
    };
    let entry = el.alloc_entry.unwrap() as usize;
    assert_eq!((d.addr, d.size), (trace.addr(entry), el.size));
    assert_eq!(d.frames, frames::stack_lines(&snap, el.stack.unwrap(), true));
    assert_eq!(d.all_frames.len(), frames::stack_lines(&snap, el.stack.unwrap(), false).len());
    assert_eq!(d.time_us, trace.time_us(entry));
    assert_eq!(d.total_after, tl.totals()[el.start as usize]);
    assert!(d.origin.contains(&format!("event {entry}")));
    // Elements alive before recording are labelled as such.
    let (pre, _) = tl.elements().iter().enumerate().find(|(_, x)| x.alloc_entry.is_none()).unwrap();
    let Response::Details(p) = e.handle(Request::Details { doc, device: 0, kind: Kind::Blocks, element: pre as u32 })
    else {
        panic!()
    };
    assert!(p.origin.contains("before recording began"), "{}", p.origin);

    // Event pages.
    let Response::Events(page) = e.handle(Request::Events { doc, device: 0, first: 100, count: 5 }) else { panic!() };
    assert_eq!(page.total as usize, trace.len());
    assert_eq!(page.rows.len(), 5);
    for r in &page.rows {
        let i = r.entry as usize;
        assert_eq!(
            (r.addr, r.size, r.action.as_str()),
            (trace.addr(i), trace.size(i), trace.action(i).name().unwrap())
        );
    }
    let Response::Events(end) = e.handle(Request::Events { doc, device: 0, first: page.total - 2, count: 10 }) else {
        panic!()
    };
    assert_eq!(end.rows.len(), 2);

    // Allocator state after an event equals the core's.
    let idx = snapshot::state::StateIndex::build(&snap, 0);
    for entry in [0u32, 777, trace.len() as u32 - 1] {
        let Response::State(st) = e.handle(Request::State { doc, device: 0, entry: Some(entry) }) else { panic!() };
        let want = idx.state_after(&snap, Some(entry as usize));
        assert_eq!((st.reserved, st.allocated), (want.reserved_bytes, want.allocated_bytes));
        assert_eq!(st.segments.len(), want.segments.len());
        assert_eq!(st.step, Some(tl.step_of_entry(entry)));
        let blocks: usize = st.segments.iter().map(|s| s.blocks.len()).sum();
        assert_eq!(blocks, want.segments.iter().map(|s| s.blocks.len()).sum::<usize>());
    }

    // Search by text: every element whose stack has a matching frame, and only those.
    let Response::Search(r) =
        e.handle(Request::Search { doc, device: 0, kind: Kind::Blocks, query: Query::Substring("OPTIMIZER".into()) })
    else {
        panic!()
    };
    let brute: Vec<u32> = tl
        .elements()
        .iter()
        .enumerate()
        .filter(|(_, x)| {
            x.stack.is_some_and(|s| {
                snap.stack(s).any(|f| frames::frame_line(&snap, f).to_lowercase().contains("optimizer"))
            })
        })
        .map(|(i, _)| i as u32)
        .collect();
    assert!(!brute.is_empty());
    assert_eq!(r.matches.iter().map(|m| m.0).collect::<Vec<_>>(), brute);
    // Views now flag the hits.
    let v = view(&mut e, doc, 0, Kind::Blocks, 0.0, 0.0, 500);
    assert_eq!(v.hits as usize, brute.len());
    for b in v.bands.iter() {
        match b.element {
            Some(el) => assert_eq!(b.hit_bytes > 0, brute.binary_search(&el).is_ok()),
            None => assert!(b.hit_bytes <= b.size_bytes),
        }
    }
    assert!(v.bands.iter().any(|b| b.element.is_none() && b.hit_bytes > 0), "hits among the thin ones are counted");
    // Regex and address.
    let Response::Search(rx) =
        e.handle(Request::Search { doc, device: 0, kind: Kind::Blocks, query: Query::Regex("(?i)optimizer".into()) })
    else {
        panic!()
    };
    assert_eq!(rx.count as usize, brute.len());
    let target = &tl.elements()[id];
    let q = Query::Address(format!("0x{:x}", target.addr + 1));
    let Response::Search(ra) = e.handle(Request::Search { doc, device: 0, kind: Kind::Blocks, query: q }) else {
        panic!()
    };
    assert!(ra.matches.iter().any(|m| m.0 == id as u32));
    assert!(matches!(
        e.handle(Request::Search { doc, device: 0, kind: Kind::Blocks, query: Query::Regex("(".into()) }),
        Response::Error(m) if m.contains("regular expression")
    ));
    e.handle(Request::ClearSearch { doc });
    assert_eq!(view(&mut e, doc, 0, Kind::Blocks, 0.0, 0.0, 10).hits, 0);
}

fn annotations(snap: &Snapshot) -> (usize, usize) {
    let a = snap.external_annotations.as_deref().unwrap_or(&[]);
    let n = |stage: &str| a.iter().filter(|x| snap.str(x.stage) == stage).count();
    (n("START"), n("END"))
}

#[test]
fn annotations_and_ooms_become_lanes_without_dropping_any() {
    let mut checked = 0;
    for name in [
        "pt29-blockzero-maxentries1-unmatched-annotation.pickle",
        "pt25-cs336-fullstep-annotations.pickle",
        "pt25-cs336-2.7b-compile-annotations.pickle",
        "pt20-flexgen-opt-oom-history.pickle",
    ] {
        let Some(bytes) = testkit::read_or_skip(name) else { continue };
        let snap = snapshot::read(&bytes).unwrap().snapshot;
        let mut e = Engine::new();
        let info = open(&mut e, name, &bytes, 1 << 20).unwrap();
        let Some(dev) = info.default_device else { continue };
        let v = view(&mut e, info.doc, dev, Kind::Blocks, 0.0, 0.0, 200);
        let t = snap.trace(dev as usize);
        let ooms = (0..t.len()).filter(|&i| t.action(i) == Action::Oom).count();
        assert_eq!(v.ooms.len(), ooms, "{name}");
        if t.has_time() && snap.external_annotations.is_some() {
            let (starts, ends) = annotations(&snap);
            let matched = v.spans.iter().filter(|s| !s.unmatched_end && !s.unmatched_start).count();
            let un_end = v.spans.iter().filter(|s| s.unmatched_end).count();
            let un_start = v.spans.iter().filter(|s| s.unmatched_start).count();
            assert_eq!(matched + un_start, starts, "{name}: every START is a span");
            assert_eq!(matched + un_end, ends, "{name}: every END is a span");
            assert!(v.spans.iter().all(|s| s.start <= s.end));
            if name.contains("unmatched") {
                assert!(un_end > 0, "{name}: the unmatched END is shown");
            }
            checked += 1;
        }
    }
    assert!(checked >= testkit::if_full(2, 1), "annotations checked on {checked} files");
}

#[test]
fn bad_files_fail_with_the_name_and_the_place_and_leave_the_rest_open() {
    let bytes = testkit::example("cs336-fullstep.pickle");
    let mut e = Engine::new();
    let good = open(&mut e, "good.pickle", &bytes, 1 << 20).unwrap();
    let err = open(&mut e, "half.pickle", &bytes[..bytes.len() / 2], 1 << 16).unwrap_err();
    assert!(err.starts_with("half.pickle: "), "{err}");
    assert!(err.contains("offset") || err.contains("byte"), "{err}");
    let err = open(&mut e, "notes.txt", b"hello", 1 << 16).unwrap_err();
    assert!(err.starts_with("notes.txt: "), "{err}");
    // The good file still answers.
    assert!(!view(&mut e, good.doc, 0, Kind::Blocks, 0.0, 0.0, 50).bands.is_empty());
    assert!(matches!(e.handle(Request::Close { doc: good.doc }), Response::Done));
    assert!(matches!(e.handle(Request::Events { doc: good.doc, device: 0, first: 0, count: 1 }), Response::Error(_)));
}

#[test]
fn segment_view_follows_reserved_memory() {
    let Some(bytes) = testkit::read_or_skip("pt25plus-expandable-2gpu-tiny-nohistory.pickle") else { return };
    let snap = snapshot::read(&bytes).unwrap().snapshot;
    let mut e = Engine::new();
    let info = open(&mut e, "x", &bytes, 1 << 20).unwrap();
    for d in &info.devices {
        let v = view(&mut e, info.doc, d.device, Kind::Segments, 0.0, 0.0, 50);
        let sum = info.summary.devices.iter().find(|x| x.device == i64::from(d.device)).unwrap();
        assert_eq!(v.peak_bytes, sum.segment_timeline.peak_bytes);
        assert_eq!(
            v.columns.last().unwrap().total,
            Timeline::build(&snap, d.device as usize, Kind::Segments).final_bytes()
        );
    }
}

#[test]
fn colours_are_distinct_for_neighbours() {
    let c: Vec<u32> = (0..12).map(engine::colour).collect();
    for w in c.windows(2) {
        assert_ne!(w[0], w[1]);
    }
}

#[test]
fn segment_views_carry_the_allocated_line_inside_reserved_memory() {
    let mut checked = 0;
    for name in [
        "pt21-llama-cppframes-multistream.pickle",
        "pt25-cs336-fullstep-annotations.pickle",
        "pt20-flexgen-opt1.3b-history.pickle",
    ] {
        let Some(bytes) = testkit::read_or_skip(name) else { continue };
        let mut e = Engine::new();
        let info = open(&mut e, name, &bytes, 1 << 20).unwrap();
        let Some(dev) = info.default_device else { continue };
        let v = view(&mut e, info.doc, dev, Kind::Segments, 0.0, 0.0, 300);
        let b = view(&mut e, info.doc, dev, Kind::Blocks, 0.0, 0.0, 300);
        assert!(b.columns.iter().all(|c| c.allocated.is_none()));
        for c in &v.columns {
            let a = c.allocated.expect("segment views carry the allocated bytes");
            assert!(a <= c.total, "{name}: {a} allocated > {} reserved at step {}", c.total, c.step);
        }
        let last = v.columns.last().unwrap().allocated.unwrap();
        let sum = info.summary.devices.iter().find(|d| d.device == i64::from(dev)).unwrap();
        if v.n_steps > 1 {
            assert!(last <= sum.timeline.peak_bytes);
        }
        checked += 1;
    }
    assert_eq!(checked, testkit::if_full(3, 2));
}

#[test]
fn a_file_too_large_for_the_tab_is_refused_at_once_with_what_to_do_instead() {
    let bytes = testkit::example("cs336-fullstep.pickle");
    let limits = snapshot::Limits { max_pickle_bytes: 1 << 20, ..snapshot::Limits::default() };
    let mut l = Loading::with_limits("big.pickle", bytes.len() as u64, 0.0, limits);
    let e = l.feed(&bytes[..4096]).expect_err("refused on the first slice");
    assert!(e.starts_with("big.pickle: the snapshot is too large"), "{e}");
    assert!(e.contains("this reader takes pickles up to"), "{e}");
    assert!(e.contains("memscape stats big.pickle") && e.contains("max_entries"), "{e}");
}

#[test]
fn a_compressed_file_whose_pickle_is_too_large_would_open_as_a_window() {
    let bytes = testkit::example("cs336-fullstep.pickle");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &bytes).unwrap();
    let gz = gz.finish().unwrap();
    // The file is under the limit, its pickle over: the whole read fails as it decompresses.
    let limit = (gz.len() as u64 + bytes.len() as u64) / 2;
    let limits = snapshot::Limits { max_pickle_bytes: limit, ..snapshot::Limits::default() };
    let mut l = Loading::with_limits("big.pickle.gz", gz.len() as u64, 0.0, limits);
    let e = gz.chunks(1 << 16).map(|c| l.feed(c)).find_map(Result::err).expect("over the limit");
    assert!(e.starts_with("big.pickle.gz: the snapshot is too large"), "{e}");
    assert!(l.window_would_open());
    // Not for a file that is wrong rather than large, nor for a read that is a window already.
    let mut bad = Loading::new("bad.pickle", 8, 0.0);
    assert!(bad.feed(b"\x80\x04\x00junk").is_err() && !bad.window_would_open());
    let mut w = Loading::with_limits(
        "w.pickle.gz",
        gz.len() as u64,
        0.0,
        snapshot::Limits { keep_last_entries: Some(10), ..limits },
    );
    let _ = gz.chunks(1 << 16).map(|c| w.feed(c)).find_map(Result::err);
    assert!(!w.window_would_open());
}

#[test]
fn a_file_opened_as_a_window_draws_its_last_entries_and_says_so() {
    let bytes = testkit::example("cs336-fullstep.pickle");
    let whole = snapshot::read(&bytes).unwrap().snapshot;
    let n = whole.trace(0).len() as u64;
    // Even under a size limit the whole file would break: memory follows the window.
    let limits =
        snapshot::Limits { max_pickle_bytes: 1 << 20, keep_last_entries: Some(2000), ..snapshot::Limits::default() };
    let mut l = Loading::with_limits("big.pickle", bytes.len() as u64, 0.0, limits);
    for c in bytes.chunks(1 << 16) {
        l.feed(c).unwrap();
    }
    let mut e = Engine::new();
    let info = e.finish(1, l, &|| 0.0).unwrap();
    assert_eq!(info.devices[0].entries, 2000);
    let w = info.summary.window.as_ref().expect("a window");
    assert_eq!((w.source.as_str(), w.rule.as_str()), ("big.pickle", "the last 2000 entries"));
    assert_eq!(
        w.ranges[0],
        snapshot::slice::Range { device: 0, start: (n - 2000) as usize, end: n as usize, of: n as usize }
    );
    // Its figures are those of the same window cut from the whole file.
    let (cut, _) = snapshot::slice::slice(&whole, &snapshot::slice::Window::Last(2000), &[0], "big.pickle").unwrap();
    assert_eq!(info.summary.devices, stats::summary(&cut).devices);
    let v = view(&mut e, info.doc, 0, Kind::Blocks, 0.0, 0.0, 400);
    assert_eq!(v.n_steps, Timeline::build(&cut, 0, Kind::Blocks).n_steps());
    // The page's own path: a window of the last N however large the file.
    let mut l = Loading::window("huge.pickle", 64 << 30, 0.0, ReadWindow::Last(2000));
    for c in bytes.chunks(1 << 16) {
        l.feed(c).unwrap();
    }
    assert!(Loading::too_large_whole(64 << 30) == cfg!(target_pointer_width = "32"));
    assert_eq!(e.finish(2, l, &|| 0.0).unwrap().devices[0].entries, 2000);
}

/// Categories, hover classes, rules and a diff across two engines (as across two workers).
#[test]
fn categories_and_a_diff_across_two_workers() {
    use snapshot::synth::{generate, Options, EXTRA_SITE};
    let opts = Options { target_entries: 8_000, layers: 4, hidden: 1024, tokens: 32768, seed: 3, ..Default::default() };
    let a_bytes = snapshot::write::to_pickle_bytes(&generate(&opts));
    let b_bytes =
        snapshot::write::to_pickle_bytes(&generate(&Options { extra_activation_bytes: 16 << 20, ..opts.clone() }));
    let (mut ea, mut eb) = (Engine::new(), Engine::new());
    let a = open(&mut ea, "a.pickle", &a_bytes, 1 << 20).unwrap();
    let b = open(&mut eb, "b.pickle", &b_bytes, 1 << 20).unwrap();

    // The category columns stack up to the timeline's columns.
    let v = view(&mut ea, a.doc, 0, Kind::Blocks, 0.0, 0.0, 400);
    let Response::Categories(c) = ea.handle(Request::Categories {
        doc: a.doc,
        device: 0,
        start: 0.0,
        end: 0.0,
        columns: 400,
        at: Some(v.peak_step),
    }) else {
        panic!("no categories")
    };
    assert_eq!(c.columns.len(), v.columns.len());
    for (cc, vc) in c.columns.iter().zip(&v.columns) {
        assert_eq!((cc.0, cc.1.iter().sum::<u64>()), (vc.step, vc.total));
    }
    let (step, at) = c.selected.unwrap();
    assert_eq!(step, v.peak_step);
    assert_eq!(at.iter().sum::<u64>(), v.peak_bytes);
    assert_eq!(c.report.at_peak.iter().map(|x| x.bytes).collect::<Vec<_>>(), at.to_vec());
    assert!(c.report.iterations.len() > 1);

    // Hover says what an element is for; a user rule changes it and says so.
    let Response::Hit(Some(d), _) =
        ea.handle(Request::Hit { doc: a.doc, device: 0, kind: Kind::Blocks, step: v.peak_step, bytes: 0, slack: 0 })
    else {
        panic!("nothing at the bottom of the peak")
    };
    let (cat, why) = d.class.clone().unwrap();
    assert_eq!(cat, Category::Parameter, "{why}");
    let rules =
        Rules { rules: vec![Rule { pattern: "Block.__init__".into(), category: Category::Input, on: Target::Frame }] };
    assert!(matches!(ea.handle(Request::Rules { doc: a.doc, rules: rules.clone() }), Response::Done));
    // The details answer at once; the category under the new rules is worked out in the
    // background, and the engine says when it is ready.
    let details = |e: &mut Engine| match e.handle(Request::Details {
        doc: a.doc,
        device: 0,
        kind: Kind::Blocks,
        element: d.element,
    }) {
        Response::Details(d) => d,
        other => panic!("{other:?}"),
    };
    let pending = details(&mut ea);
    assert!(pending.class.is_none() && pending.class_pending);
    assert_eq!((pending.addr, pending.size), (d.addr, d.size));
    ea.take_finished();
    while ea.work(1000) {}
    assert!(ea.take_finished().contains(&(a.doc, 0, Finished::Categories)));
    let d2 = details(&mut ea);
    assert!(!d2.class_pending);
    assert_eq!(d2.class.as_ref().map(|c| c.0), Some(Category::Input));
    assert!(d2.class.unwrap().1.contains("Block.__init__"));
    let bad = Rules { rules: vec![Rule { pattern: "(".into(), category: Category::Input, on: Target::Frame }] };
    let Response::Error(e) = ea.handle(Request::Rules { doc: a.doc, rules: bad }) else { panic!() };
    assert!(e.contains("rule 1"), "{e}");
    assert!(matches!(ea.handle(Request::Rules { doc: a.doc, rules: Rules::default() }), Response::Done));

    // A's profile travels to B's worker, which answers the diff.
    let Response::Profile(pa) = ea.handle(Request::Profile { doc: a.doc, device: 0 }) else { panic!() };
    // A's profile travels to B's worker as the page sends it (postcard), and arrives whole.
    let wire = postcard::to_allocvec(&Request::Diff {
        doc: b.doc,
        device: 0,
        a: pa.clone(),
        align: Align::Iteration,
        sites_by: SiteMode::Frame,
    })
    .unwrap();
    let Request::Diff { a: arrived, .. } = postcard::from_bytes::<Request>(&wire).unwrap() else { panic!() };
    assert_eq!(arrived, pa);
    let Response::Diff(d) =
        eb.handle(Request::Diff { doc: b.doc, device: 0, a: pa, align: Align::Iteration, sites_by: SiteMode::Frame })
    else {
        panic!()
    };
    assert_eq!(d.sites[0].site, EXTRA_SITE);
    assert_eq!(d.sites[0].b - d.sites[0].a, 16 << 20);
    assert_eq!(d.peak.1 - d.peak.0, 16 << 20);
}

#[test]
fn a_hover_never_waits_for_a_whole_file_analysis() {
    // After the first view, the categories and the allocator-state checkpoints are worked
    // out in the background, a slice at a time; requests in between answer at once with what
    // the allocation itself says, and the category comes once the analysis is done.
    let bytes = testkit::example("cs336-fullstep.pickle");
    let snap = snapshot::read(&bytes).unwrap().snapshot;
    let tl = Timeline::build(&snap, 0, Kind::Blocks);
    let core = snapshot::categories::analyze(&snap, &tl, &Rules::default().compile().unwrap());
    let mut e = Engine::new();
    let doc = open(&mut e, "ex", &bytes, 1 << 20).unwrap().doc;
    let v = view(&mut e, doc, 0, Kind::Blocks, 0.0, 0.0, 500);
    assert!(e.has_work(), "the first view puts the analyses in line");
    let hit = Request::Hit { doc, device: 0, kind: Kind::Blocks, step: v.peak_step, bytes: v.peak_bytes / 3, slack: 0 };
    let Response::Hit(Some(first), _) = e.handle(hit.clone()) else { panic!("nothing under the pointer") };
    assert!(first.class.is_none() && first.class_pending, "the first hover does not wait for the categories");
    assert!(!first.frames.is_empty() && first.size > 0);
    let mut slices = 0;
    let mut finished = Vec::new();
    while finished.is_empty() {
        assert!(e.work(500), "the categories come before the work ends");
        finished = e.take_finished();
        slices += 1;
        let Response::Hit(Some(d), _) = e.handle(hit.clone()) else { panic!() };
        assert_eq!((d.element, d.class_pending), (first.element, finished.is_empty()));
    }
    assert!(slices > 10, "the analysis took {slices} slices of 500 units");
    assert_eq!(finished, vec![(doc, 0, Finished::Categories)]);
    let Response::Hit(Some(d), _) = e.handle(hit) else { panic!() };
    let want = core.class(d.element);
    assert_eq!(d.class.as_ref().map(|c| c.0), Some(want.category));
    // The allocator state asked before its checkpoints are all made finishes them at once,
    // from where the background got to, and equals the core's.
    assert!(e.has_work());
    e.work(300);
    let entry = snap.trace(0).len() as u32 / 3;
    let Response::State(st) = e.handle(Request::State { doc, device: 0, entry: Some(entry) }) else { panic!() };
    let want = snapshot::state::StateIndex::build(&snap, 0).state_after(&snap, Some(entry as usize));
    assert_eq!(
        (st.reserved, st.allocated, st.segments.len()),
        (want.reserved_bytes, want.allocated_bytes, want.segments.len())
    );
    assert!(!e.has_work(), "nothing is left once the state was asked for");
    // Finished for a request or in the background, the page hears of it alike.
    assert_eq!(e.take_finished(), vec![(doc, 0, Finished::AllocatorState)]);

    // The category view asked mid-analysis finishes it, and its report is the core's.
    let mut e = Engine::new();
    let doc = open(&mut e, "ex", &bytes, 1 << 20).unwrap().doc;
    view(&mut e, doc, 0, Kind::Blocks, 0.0, 0.0, 500);
    e.work(2000);
    let cats = Request::Categories { doc, device: 0, start: 0.0, end: 0.0, columns: 100, at: None };
    let Response::Categories(c) = e.handle(cats) else { panic!() };
    assert_eq!(c.report, core.report(&tl, &Rules::default()));
    assert_eq!(e.take_finished(), vec![(doc, 0, Finished::Categories)]);
    assert!(e.has_work(), "the state checkpoints are still in line");
    while e.work(usize::MAX) {}
    assert_eq!(e.take_finished(), vec![(doc, 0, Finished::AllocatorState)], "the categories were not analysed twice");
}

#[test]
fn rules_changed_while_the_categories_are_half_done_start_them_again() {
    let bytes = testkit::example("cs336-fullstep.pickle");
    let mut e = Engine::new();
    let doc = open(&mut e, "ex", &bytes, 1 << 20).unwrap().doc;
    let v = view(&mut e, doc, 0, Kind::Blocks, 0.0, 0.0, 500);
    for _ in 0..5 {
        assert!(e.work(300));
    }
    assert!(e.take_finished().is_empty(), "the categories are not done after 5 slices of 300");
    let rules = Rules { rules: vec![Rule { pattern: ".".into(), category: Category::Input, on: Target::Frame }] };
    assert!(matches!(e.handle(Request::Rules { doc, rules }), Response::Done));
    while e.work(300) {}
    let finished = e.take_finished();
    assert_eq!(finished.iter().filter(|f| f.2 == Finished::Categories).count(), 1, "{finished:?}");
    // Every allocation with a stack now says the new rule decided it.
    let hit = Request::Hit { doc, device: 0, kind: Kind::Blocks, step: v.peak_step, bytes: v.peak_bytes / 2, slack: 0 };
    let Response::Hit(Some(d), _) = e.handle(hit) else { panic!("nothing under the pointer") };
    assert!(!d.frames.is_empty());
    assert_eq!(d.class.map(|c| c.0), Some(Category::Input));
}

/// The doctor's report as the viewer asks for it (after the background began, and before)
/// is the core's report; the load says how many OOMs each device has.
#[test]
fn the_doctor_answers_with_the_cores_report_and_the_load_counts_ooms() {
    use snapshot::synth::{generate, Options};
    let opts = Options { target_entries: 6_000, oom: true, fragmentation_oom: true, seed: 5, ..Default::default() };
    // Without `allocator_settings` (as older PyTorch writes): settings left at their defaults
    // must still cross to the page.
    let mut generated = generate(&opts);
    generated.allocator_settings = None;
    let bytes = snapshot::write::to_pickle_bytes(&generated);
    let snap = snapshot::read(&bytes).unwrap().snapshot;
    let core = snapshot::doctor::doctor(&snap, 0, &snapshot::categories::Compiled::default());
    assert_eq!(core.ooms.len(), 2, "the planted errors");
    assert!(!core.allocator_what_if.is_empty(), "a fragmentation OOM: allocator settings tried");
    for background in [0, 3, 1 << 20] {
        let mut e = Engine::new();
        let info = open(&mut e, "oom.pickle", &bytes, 1 << 16).unwrap();
        assert_eq!(info.devices[0].ooms, 2);
        view(&mut e, info.doc, 0, Kind::Blocks, 0.0, 0.0, 400);
        e.work(background);
        // As the page receives it: through postcard, which needs every field of every struct
        // (a `skip_serializing_if` breaks it).
        let wire = postcard::to_allocvec(&e.handle(Request::Doctor { doc: info.doc, device: 0 })).unwrap();
        match postcard::from_bytes::<Response>(&wire).unwrap() {
            Response::Doctor(r) => assert_eq!(*r, core, "after {background} units of background work"),
            other => panic!("{other:?}"),
        }
    }
    // A file without OOM events says so at load.
    let mut e = Engine::new();
    let info = open(&mut e, "ex.pickle", &testkit::example("cs336-fullstep.pickle"), 1 << 20).unwrap();
    assert!(info.devices.iter().all(|d| d.ooms == 0));
}

/// The baseline starts the axis at what stays alive through the window; a y range makes a
/// small allocation a band of its own that a hover finds.
#[test]
fn baseline_and_y_zoom() {
    let bytes = testkit::example("cs336-fullstep.pickle");
    let mut e = Engine::new();
    let doc = open(&mut e, "ex", &bytes, 1 << 20).unwrap().doc;
    let snap = snapshot::read(&bytes).unwrap().snapshot;
    let tl = Timeline::build(&snap, 0, Kind::Blocks);
    let ask = |e: &mut Engine, y: Option<(u64, u64)>, baseline: bool| {
        let q = ViewQuery { y, baseline, ..query(doc, 0, Kind::Blocks, 0.0, 0.0, 800) };
        let Response::View(v) = e.handle(Request::View(q)) else { panic!() };
        v
    };
    let flat = ask(&mut e, None, false);
    assert_eq!(flat.y_lo, 0);
    let v = ask(&mut e, None, true);
    let peak = tl.peak_bytes();
    assert!(v.stable_bytes > peak / 10, "{} of {peak}", v.stable_bytes);
    assert_eq!((v.y_lo, v.stable_bytes), (flat.stable_bytes, flat.stable_bytes));
    assert!(v.y_top > peak && v.y_top < peak + peak / 20);
    // Below the baseline nothing changes: every band there spans the whole window.
    for b in v.bands.iter().filter(|b| b.offset_bytes + b.size_bytes <= v.y_lo) {
        assert_eq!((b.first_column, b.last_column), (0, 799), "{b:?}");
    }
    // The finer scale draws more elements on their own.
    let own = |v: &ViewModel| v.bands.iter().filter(|b| b.element.is_some()).count();
    assert!(own(&v) > own(&flat), "{} vs {}", own(&v), own(&flat));
    assert_eq!(ask(&mut e, None, true).y_lo, v.y_lo, "the window's baseline is kept");
    // A search whose matches lie below the baseline lowers the axis to show them.
    let q = Query::Substring("adapters.py:887".into());
    let Response::Search(r) = e.handle(Request::Search { doc, device: 0, kind: Kind::Blocks, query: q }) else {
        panic!()
    };
    assert!(!r.matches.is_empty());
    let s = ask(&mut e, None, true);
    let lowest = s.bands.iter().filter(|b| b.hit_bytes > 0).map(|b| b.offset_bytes).min().unwrap();
    assert!(lowest < v.y_lo, "the optimizer state lies under the baseline");
    assert!(s.y_lo <= lowest, "{} above the lowest match at {lowest}", s.y_lo);
    assert!(matches!(e.handle(Request::ClearSearch { doc }), Response::Done));
    assert_eq!(ask(&mut e, None, true).y_lo, v.y_lo);

    // A small allocation alive at the peak (the example's largest under 1 MiB are 160 KiB):
    // too thin to draw alone at full height; at 1/100 of it, a hover on its pixel row finds it.
    let step = tl.peak_step();
    let mut offset = 0;
    let mut small = Vec::new();
    for id in tl.live_at(step, 1) {
        let size = tl.elements()[id as usize].size;
        if (128 << 10..1 << 20).contains(&size) {
            small.push((id, offset, size));
        }
        offset += size;
    }
    let span = (v.y_top - v.y_lo) / 100;
    let row = span / 300;
    let hover = |e: &mut Engine, bytes: u64, slack: u64| match e.handle(Request::Hit {
        doc,
        device: 0,
        kind: Kind::Blocks,
        step,
        bytes,
        slack,
    }) {
        Response::Hit(d, _) => d.map(|d| d.element),
        other => panic!("{other:?}"),
    };
    let full_row = (v.y_top - v.y_lo) / 300;
    let found: Vec<_> = small
        .iter()
        .filter(|&&(id, at, size)| {
            hover(&mut e, at + size / 2, row / 2) == Some(id) && hover(&mut e, at + size / 2, full_row / 2) != Some(id)
        })
        .collect();
    assert!(
        !found.is_empty(),
        "of {} allocations of 128 KiB to 1 MiB at the peak, none is found at 1/100",
        small.len()
    );
    let &(id, at, _) = found[0];
    assert!(flat.bands.iter().all(|b| b.element != Some(id)), "too thin to draw alone at full height");
    let z = ask(&mut e, Some((at - span / 2, at + span / 2)), true);
    assert_eq!((z.y_lo, z.y_top), (at - span / 2, at + span / 2));
    // Exactly on a band drawn alone, the hover finds it and outlines where it was drawn.
    let b = z
        .bands
        .iter()
        .filter(|b| b.element.is_some() && b.size_bytes > 4 * row)
        .nth(2)
        .expect("bands in the zoomed view");
    let r = e.handle(Request::Hit {
        doc,
        device: 0,
        kind: Kind::Blocks,
        step: z.columns[b.first_column as usize].step,
        bytes: b.offset_bytes + b.size_bytes / 2,
        slack: row / 2,
    });
    let Response::Hit(Some(d), outline) = r else { panic!("{r:?}") };
    assert_eq!(Some(d.element), b.element);
    assert!(outline.iter().any(|o| o.first == b.first_column && o.offset == b.offset_bytes && o.size == b.size_bytes));
}

/// The first view the page asks for (from the baseline) draws every corpus file that has
/// memory: a file whose trace is one step (a dump with no history) or where nothing moves
/// has every byte stable, and its axis starts at zero instead of at its peak.
#[test]
fn the_first_view_from_the_baseline_draws_every_file() {
    for (name, bytes) in testkit::files() {
        let mut e = Engine::new();
        let Ok(info) = open(&mut e, &name, &bytes, 1 << 20) else { continue };
        let Some(device) = info.default_device else { continue };
        let q = ViewQuery {
            doc: info.doc,
            device,
            kind: Kind::Blocks,
            start: 0.0,
            end: 0.0,
            columns: 400,
            rows: 100,
            y: None,
            baseline: true,
            totals_only: false,
            pinned: None,
            palette: PaletteVm::default(),
        };
        let Response::View(v) = e.handle(Request::View(q)) else { panic!("{name}") };
        if v.peak_bytes == 0 {
            continue;
        }
        let painted = v.pixels.chunks(4).filter(|p| p[3] > 0).count();
        assert!(
            painted > 400,
            "{name}: {painted} pixels painted, axis {}..{} of a peak of {}",
            v.y_lo,
            v.y_top,
            v.peak_bytes
        );
        assert!(v.y_lo < v.peak_bytes, "{name}");
    }
}

#[test]
fn the_corpus_first_views_are_drawn_as_later_requests_for_their_window() {
    // The first view has no earlier one to take its baseline from: it guesses it from the
    // bytes no step changes, and sweeps again when that guess was more than twice off.
    // Within twice it keeps the guess's threshold (so this is not true of every file), but
    // in these files the guess is the baseline, or far enough off to be swept again.
    let mut differ = 0;
    for (name, bytes) in testkit::files() {
        let mut e = Engine::new();
        let Ok(info) = open(&mut e, &name, &bytes, 4 << 20) else { continue };
        for d in 0..info.devices.len() as u32 {
            let ask = |e: &mut Engine| {
                let q = ViewQuery { baseline: true, ..query(info.doc, d, Kind::Blocks, 0.0, 0.0, 1188) };
                match e.handle(Request::View(q)) {
                    Response::View(v) => v,
                    other => panic!("{other:?}"),
                }
            };
            let (first, again) = (ask(&mut e), ask(&mut e));
            let bands = |v: &ViewModel| {
                v.bands
                    .iter()
                    .map(|b| (b.element, b.first_column, b.last_column, b.offset_bytes, b.size_bytes))
                    .collect::<Vec<_>>()
            };
            assert_eq!((first.y_lo, first.y_top), (again.y_lo, again.y_top), "{name} device {d}");
            if bands(&first) != bands(&again) || first.pixels != again.pixels {
                differ += 1;
                eprintln!("{name} device {d}: {} bands, then {}", first.bands.len(), again.bands.len());
            }
        }
    }
    assert_eq!(differ, 0);
}

/// What a view's pixels should be, painted the plain way: every band adds its colour, in
/// proportion to the share of each pixel it covers, to every pixel it covers, in f64; then
/// each pixel is its colours' mean weighted by coverage, its opacity the coverage.
fn painted_one_by_one(v: &ViewModel, rows: u32, searching: bool, pinned: Option<u32>) -> Vec<u8> {
    let pal = engine::raster::Palette::default();
    let (w, h) = (v.columns.len(), rows as usize);
    let mut acc = vec![[0f64; 4]; w * h];
    let scale = h as f64 / (v.y_top - v.y_lo) as f64;
    let mut paint = |col: usize, lo: f64, hi: f64, rgb: u32, alpha: f64| {
        let (y0, y1) = ((lo - v.y_lo as f64) * scale, (hi - v.y_lo as f64) * scale);
        for row in 0..h {
            let cover = (y1.min(row as f64 + 1.0) - y0.max(row as f64)).max(0.0) * alpha;
            let px = &mut acc[(h - 1 - row) * w + col];
            for (k, ch) in [(rgb >> 16) & 255, (rgb >> 8) & 255, rgb & 255].into_iter().enumerate() {
                px[k] += f64::from(ch) * cover;
            }
            px[3] += cover;
        }
    };
    for b in v.bands.iter() {
        let hit = b.hit_bytes as f64 / b.size_bytes as f64;
        let layers = if pinned.is_some() && pinned == b.element {
            vec![(pal.pinned, 1.0)]
        } else if searching {
            vec![(pal.hit, hit), (b.rgb, (1.0 - hit) * f64::from(pal.dimmed))]
        } else {
            vec![(b.rgb, 1.0)]
        };
        for col in b.first_column as usize..=(b.last_column as usize).min(w - 1) {
            for &(rgb, alpha) in &layers {
                paint(col, b.offset_bytes as f64, (b.offset_bytes + b.size_bytes) as f64, rgb, alpha);
            }
        }
    }
    for (col, c) in v.columns.iter().enumerate() {
        if c.total > c.drawn {
            paint(col, c.drawn as f64, c.total as f64, pal.summarized, 1.0);
        }
    }
    let byte = |x: f64| (x.round() as u32).min(255) as u8;
    acc.iter()
        .flat_map(|p| {
            if p[3] > 0.0 {
                [0, 1, 2].map(|k| byte(p[k] / p[3])).into_iter().chain([byte(p[3] * 255.0)]).collect()
            } else {
                vec![0; 4]
            }
        })
        .collect()
}

#[test]
fn the_pixels_are_each_bands_share_of_them() {
    // A band adds its colour where it begins on a pixel row and takes it away after it ends
    // (`engine::raster`): the picture must be the one painting every pixel gives, to within
    // a rounding step, on real files: plain, zoomed (bands cut at the rows at both ends),
    // searched, and with an element pinned.
    for name in ["pt25-cs336-fullstep-annotations.pickle", "pt21-llama-cppframes-multistream.pickle"] {
        let Some(bytes) = testkit::read_or_skip(name) else { continue };
        let mut e = Engine::new();
        let doc = open(&mut e, name, &bytes, 1 << 20).unwrap().doc;
        for kind in [Kind::Blocks, Kind::Segments] {
            let plain = view(&mut e, doc, 0, kind, 0.0, 0.0, 611);
            let pinned = plain.bands.iter().filter_map(|b| b.element).nth(5);
            assert!(pinned.is_some(), "{name}: an element to pin");
            // Zoomed in on a window and a memory range: bands cut at the bottom and top rows.
            let n = f64::from(plain.n_steps);
            let y = Some((plain.peak_bytes / 3, plain.peak_bytes / 3 * 2));
            let q = ViewQuery { y, pinned, ..query(doc, 0, kind, n / 4.0, n / 2.0, 611) };
            let Response::View(zoomed) = e.handle(Request::View(q)) else { panic!() };
            let Response::Search(found) =
                e.handle(Request::Search { doc, device: 0, kind, query: Query::Substring("a".into()) })
            else {
                panic!()
            };
            assert!(!found.matches.is_empty(), "{name}: something to mark");
            let q = ViewQuery { pinned, ..query(doc, 0, kind, 0.0, 0.0, 611) };
            let Response::View(marked) = e.handle(Request::View(q)) else { panic!() };
            e.handle(Request::ClearSearch { doc });
            assert_eq!(zoomed.y_lo, plain.peak_bytes / 3);
            for (v, searching, pinned) in [(&plain, false, None), (&zoomed, false, pinned), (&marked, true, pinned)] {
                let want = painted_one_by_one(v, 300, searching, pinned);
                assert_eq!(v.pixels.len(), want.len());
                let off = v.pixels.iter().zip(&want).filter(|(a, b)| a.abs_diff(**b) > 1).count();
                assert_eq!(off, 0, "{name} {kind:?} searching {searching}: {off} bytes differ by more than one");
                assert!(v.pixels.iter().zip(&want).filter(|(a, b)| a != b).count() < want.len() / 100);
            }
        }
    }
}
