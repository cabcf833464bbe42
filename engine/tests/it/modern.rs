//! The details of allocations in what recent PyTorch writes (`testkit/modern_snapshots.py`):
//! compiled code's FX node and original code under its frame, the forward line of a backward
//! allocation, labels, why a stack is missing; and an OOM file's first device.

use engine::protocol::*;
use engine::Engine;

fn details(e: &mut Engine, doc: DocId, addr: u64) -> Details {
    let Response::Search(found) =
        e.handle(Request::Search { doc, device: 0, kind: Kind::Blocks, query: Query::Address(format!("{addr:#x}")) })
    else {
        panic!("a search answer")
    };
    let element = found.matches.iter().map(|m| m.0).next().expect("an allocation there");
    match e.handle(Request::Details { doc, device: 0, kind: Kind::Blocks, element }) {
        Response::Details(d) => d,
        other => panic!("{other:?}"),
    }
}

#[test]
fn details_show_what_recent_pytorch_writes() {
    let bytes = std::fs::read(testkit::modern(5).join("compiled.pickle")).unwrap();
    let mut e = Engine::new();
    let info = super::open(&mut e, "compiled.pickle", &bytes, 512).unwrap();
    let a = 0x7F00_0000_0000u64;
    let addmm = details(&mut e, info.doc, a);
    assert!(addmm.frames.contains(&"    FX node=addmm, op=call_function, target=aten.addmm.default".to_string()));
    assert!(addmm.frames.iter().any(|l| l.trim() == "a = self.net1(x)"), "{:#?}", addmm.frames);
    assert_eq!(addmm.labels, vec!["activation of net1".to_string()]);
    assert_eq!(addmm.no_stack, None);
    let bw = details(&mut e, info.doc, a + (8 << 20));
    assert_eq!(bw.forward_site.as_deref(), Some("/home/user/model.py:14:forward"));
    assert!(bw.forward_frames.as_deref().is_some_and(|f| f.contains("c = b[:, 0]")));
    let nf = details(&mut e, info.doc, a + (10 << 20));
    assert!(nf.frames.is_empty() && nf.no_stack.as_deref().is_some_and(|c| c.starts_with("no Python frames")));
    assert_eq!(info.summary.devices[0].history_overflowed, Some(true));
    // The event list names each event's line as the call sites are named.
    let Response::Events(ev) = e.handle(Request::Events { doc: info.doc, device: 0, first: 0, count: 9 }) else {
        panic!()
    };
    let frames: Vec<&str> = ev.rows.iter().map(|r| r.frame.as_str()).collect();
    assert_eq!(frames[2], "/home/user/model.py:12:forward");
    assert_eq!(frames[5], "backward: SelectBackward0, aten::zeros");
    assert_eq!((frames[0], frames[6]), ("", ""), "no stack: nothing");

    let oom = std::fs::read(testkit::modern(5).join("oom-cuda1.pickle")).unwrap();
    let info = super::open(&mut e, "oom-cuda1.pickle", &oom, 4096).unwrap();
    assert_eq!(info.first_device(), 1);
    assert_eq!(info.devices.iter().map(|d| d.ooms).collect::<Vec<_>>(), vec![0, 1, 0]);
}

#[test]
fn the_hosts_pinned_memory_answers_as_a_device() {
    let bytes = std::fs::read(testkit::modern(5).join("pinned-host.pickle")).unwrap();
    let mut e = Engine::new();
    let info = super::open(&mut e, "pinned-host.pickle", &bytes, 1024).unwrap();
    let host = info.devices.iter().find(|d| d.device == HOST).expect("the host in the device list");
    assert_eq!((host.entries, host.segments, host.ooms), (8, 3, 0));
    assert_eq!(info.first_device(), 0, "a GPU is shown first");
    assert_eq!(info.device_summary(HOST).map(|s| s.timeline.peak_bytes), Some(24 << 20));
    let doc = info.doc;
    let Response::View(v) = e.handle(Request::View(ViewQuery {
        doc,
        device: HOST,
        kind: Kind::Blocks,
        start: 0.0,
        end: 0.0,
        columns: 200,
        rows: 100,
        y: None,
        baseline: false,
        totals_only: false,
        pinned: None,
        palette: PaletteVm::default(),
    })) else {
        panic!("a view of the host")
    };
    assert_eq!((v.n_steps, v.peak_bytes), (4, 24 << 20));
    let Response::Events(ev) = e.handle(Request::Events { doc, device: HOST, first: 0, count: 100 }) else { panic!() };
    assert_eq!(ev.total, 8);
    assert_eq!(ev.rows[0].action, "segment_alloc");
    let Response::State(st) = e.handle(Request::State { doc, device: HOST, entry: Some(7) }) else { panic!() };
    assert_eq!((st.reserved, st.allocated), (28 << 20, 20 << 20));
    let Response::Details(d) = e.handle(Request::Details { doc, device: HOST, kind: Kind::Blocks, element: 0 }) else {
        panic!()
    };
    assert!(!d.class_pending && d.class.is_none(), "no categories for the host");
    assert_eq!(d.frames, vec!["/home/user/data.py:17:pin_memory".to_string()]);
    let flame =
        e.handle(Request::Flame { doc, device: HOST, step: None, window: None, all_frames: false, query: None });
    assert!(matches!(flame, Response::Flame(f) if f.total == 24 << 20));
    // The background work of the host runs, and says so for the host.
    while e.work(1 << 16) {}
    for r in [
        Request::Categories { doc, device: HOST, start: 0.0, end: 4.0, columns: 10, at: None },
        Request::Doctor { doc, device: HOST },
    ] {
        assert!(matches!(e.handle(r), Response::Error(m) if m == PER_GPU));
    }
    // The GPU is unchanged by it.
    let Response::Events(gpu) = e.handle(Request::Events { doc, device: 0, first: 0, count: 1 }) else { panic!() };
    assert_eq!(gpu.total, 37);
}

#[test]
fn private_pools_are_drawn_as_their_envelopes() {
    let bytes = std::fs::read(testkit::modern(5).join("graph-pool.pickle")).unwrap();
    let mut e = Engine::new();
    let info = super::open(&mut e, "graph-pool.pickle", &bytes, 1024).unwrap();
    let incl = info.summary.devices[0].timeline_incl_private_pools;
    let view = |e: &mut Engine, kind: Kind| match e.handle(Request::View(ViewQuery {
        doc: info.doc,
        device: 0,
        kind,
        start: 0.0,
        end: 0.0,
        columns: 64,
        rows: 200,
        y: None,
        baseline: false,
        totals_only: false,
        pinned: None,
        palette: PaletteVm::default(),
    })) {
        Response::View(v) => v,
        other => panic!("{other:?}"),
    };
    let blocks = view(&mut e, Kind::Blocks);
    let pools = view(&mut e, Kind::PoolEnvelopes);
    assert_eq!(pools.n_steps, blocks.n_steps, "the same steps");
    assert_eq!((pools.peak_bytes, blocks.peak_bytes), (incl.peak_bytes, info.summary.devices[0].timeline.peak_bytes));
    // At the last step: the default pool's 2 MiB, then the envelope of pool (1, 2), 20 MiB,
    // with its 4 MiB block drawn at its bottom, then the default pool's 1 MiB.
    let last = pools.n_steps - 1;
    let hit = |e: &mut Engine, bytes: u64| match e.handle(Request::Hit {
        doc: info.doc,
        device: 0,
        kind: Kind::PoolEnvelopes,
        step: last,
        bytes,
        slack: 0,
    }) {
        Response::Hit(Some(d), outline) => (d, outline),
        other => panic!("an element {bytes} bytes up at the last step: {other:?}"),
    };
    // Above the block, the envelope is an element of its own, with its pool in the details.
    let (d, outline) = hit(&mut e, 12 << 20);
    assert_eq!(d.size, 20 << 20);
    assert!(d.origin.starts_with("private pool (1, 2), stream 0: its envelope grew here"), "{}", d.origin);
    assert_eq!((d.no_stack, d.frames.len()), (None, 0));
    // Its outline is what is drawn of it: the 16 MiB its block leaves, above the block.
    assert!(outline.iter().any(|o| o.last == 63 && (o.offset, o.size) == (6 << 20, 16 << 20)), "{outline:?}");
    // Inside it, its block: its own size, stack and pool.
    let (d, outline) = hit(&mut e, 3 << 20);
    assert_eq!((d.size, d.pool, d.alloc_entry), (4 << 20, Some((1, 2)), Some(4)));
    assert_eq!(d.frames.len(), 1, "{:?}", d.frames);
    assert!(outline.iter().any(|o| o.last == 63 && (o.offset, o.size) == (2 << 20, 4 << 20)), "{outline:?}");
    // Its details asked for by its id (a link, a search match) say the same.
    let Response::Details(by_id) =
        e.handle(Request::Details { doc: info.doc, device: 0, kind: Kind::PoolEnvelopes, element: d.element })
    else {
        panic!()
    };
    assert_eq!((by_id.size, by_id.pool), (4 << 20, Some((1, 2))));
    // The allocator panel's pools: (1, 2) after the last event; (1, 3) was released.
    let last_entry = 12;
    let Response::State(st) = e.handle(Request::State { doc: info.doc, device: 0, entry: Some(last_entry) }) else {
        panic!()
    };
    let pools: Vec<_> = st.pools.iter().map(|p| (p.pool, p.stream, p.segments, p.reserved, p.allocated)).collect();
    assert_eq!(pools, vec![((1, 2), 0, 1, 20 << 20, 4 << 20)]);
    let Response::State(mid) = e.handle(Request::State { doc: info.doc, device: 0, entry: Some(8) }) else { panic!() };
    assert_eq!(mid.pools.iter().map(|p| p.pool).collect::<Vec<_>>(), vec![(1, 2), (1, 3)]);
}
