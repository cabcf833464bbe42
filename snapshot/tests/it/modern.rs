//! What PyTorch 2.10 to 2.15 adds, on snapshots its own pickler writes by protocols 4 and 5
//! (`testkit/modern_snapshots.py`): compiled code's FX frames name the original model code,
//! a C++-only backward stack its autograd node and op, `forward_frames` and `annotate`
//! entries reach their allocation, an overflowed ring buffer is told, and an OOM file opens
//! on the device that ran out of memory.

use snapshot::categories::{self, Compiled};
use snapshot::diff::profile;
use snapshot::flame::{flame, peak, FlameQuery};
use snapshot::history::{no_stack_cause, recording};
use snapshot::labels::Labels;
use snapshot::search::{find, Query};
use snapshot::sites::{forward_frames, forward_site, site_name};
use snapshot::timeline::{Element, Origin, Timeline, TimelineKind};
use snapshot::Snapshot;

const A: u64 = 0x7F00_0000_0000;
const MB: u64 = 1 << 20;

fn read(protocol: u8, name: &str) -> snapshot::Loaded {
    let p = testkit::modern(protocol).join(name);
    snapshot::read(&std::fs::read(&p).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn element_at(tl: &Timeline, addr: u64) -> (u32, &Element) {
    let (i, e) = tl.elements().iter().enumerate().find(|(_, e)| e.addr == addr).expect("an element there");
    (i as u32, e)
}

#[test]
fn both_protocols_read_alike_and_nothing_is_an_unknown_key() {
    for p in [4, 5] {
        let loaded = read(p, "compiled.pickle");
        assert!(loaded.warnings.is_empty(), "protocol {p}: {:?}", loaded.warnings);
        let s = snapshot::stats::summary(&loaded.snapshot);
        let other = snapshot::stats::summary(&read(9 - p, "compiled.pickle").snapshot);
        assert_eq!(s, other);
    }
}

#[test]
fn compiled_code_is_named_by_the_original_model_code() {
    let snap = read(5, "compiled.pickle").snapshot;
    let tl = Timeline::build(&snap, 0, TimelineKind::Blocks);
    let (_, addmm) = element_at(&tl, A);
    assert_eq!(site_name(&snap, addmm.stack), "/home/user/model.py:12:forward");
    // The details and *Copy stack*: the frame, then its node and the original code.
    let lines = snapshot::frames::stack_lines(&snap, addmm.stack.unwrap(), true);
    let at = lines.iter().position(|l| l == "<eval_with_key>.3:5:forward").expect("the generated frame");
    assert_eq!(lines[at + 1], "    FX node=addmm, op=call_function, target=aten.addmm.default");
    assert_eq!(lines[at + 2], "    original code:");
    assert!(lines[at + 3..].iter().any(|l| l.trim() == "a = self.net1(x)"), "{lines:#?}");

    // The diff's call sites and the flame graph's lines of your code name the model file.
    let cats = categories::analyze(&snap, &tl, &Compiled::default());
    let prof = profile(&snap, &tl, &cats);
    let sites: Vec<&str> = prof.sites.iter().map(|s| s.site.as_str()).collect();
    assert!(sites.contains(&"/home/user/model.py:12:forward"), "{sites:?}");
    assert!(!sites.iter().any(|s| s.starts_with("<eval_with_key>")), "{sites:?}");
    let f = flame(&snap, &tl, &FlameQuery::whole(peak(&tl), false));
    let lines: Vec<&str> = f.lines.iter().map(|l| l.site.as_str()).collect();
    assert!(lines.contains(&"/home/user/model.py:12:forward"), "{lines:?}");
    assert!(!lines.iter().any(|s| s.starts_with("<eval_with_key>")), "{lines:?}");

    // Search matches the node and the original code.
    let hits = find(&snap, &tl, &Query::Substring("self.NET1".into())).unwrap();
    assert_eq!(hits, vec![element_at(&tl, A).0]);
    let relu = find(&snap, &tl, &Query::Regex("target=aten\\.relu".into())).unwrap();
    assert_eq!(relu, vec![element_at(&tl, A + 4 * MB).0]);
}

#[test]
fn a_cpp_backward_stack_is_named_by_its_node_and_op_and_its_forward_line() {
    let snap = read(4, "compiled.pickle").snapshot;
    let tl = Timeline::build(&snap, 0, TimelineKind::Blocks);
    let (_, bw) = element_at(&tl, A + 8 * MB);
    assert_eq!(site_name(&snap, bw.stack), "backward: SelectBackward0, aten::zeros");
    let trace = snap.trace(0);
    let text = forward_frames(&snap, trace.extras(bw.alloc_entry.unwrap() as usize)).expect("its forward frames");
    assert!(text.contains("c = b[:, 0]"), "{text}");
    assert_eq!(forward_site(&text).as_deref(), Some("/home/user/model.py:14:forward"));
    // The final block says the same.
    let block = snap.segments[0].blocks.iter().find(|b| b.address == Some(A + 8 * MB)).unwrap();
    assert_eq!(forward_frames(&snap, &block.extras), Some(text));
}

#[test]
fn annotate_entries_label_the_allocation_alive_at_their_address() {
    let snap = read(5, "compiled.pickle").snapshot;
    let tl = Timeline::build(&snap, 0, TimelineKind::Blocks);
    let labels = Labels::new(&snap, 0);
    let (id, addmm) = element_at(&tl, A);
    assert_eq!(labels.of(&snap, 0, addmm), vec!["activation of net1".to_string()]);
    for e in tl.elements().iter().filter(|e| e.addr != A) {
        assert!(labels.of(&snap, 0, e).is_empty(), "{e:?}");
    }
    assert_eq!(find(&snap, &tl, &Query::Substring("of net1".into())).unwrap(), vec![id]);
    // A trace without annotate entries needs no replay and labels nothing.
    let plain = read(5, "oom-cuda1.pickle").snapshot;
    assert!(Labels::new(&plain, 0).is_empty());
}

#[test]
fn lost_history_is_told_and_each_missing_stack_has_its_cause() {
    let loaded = read(5, "compiled.pickle");
    let snap = &loaded.snapshot;
    let rec = recording(snap, 0);
    assert_eq!((rec.overflowed, rec.max_entries), (Some(true), Some(9)));
    let s = snapshot::stats::summary(snap);
    assert_eq!((s.devices[0].history_overflowed, s.devices[0].history_max_entries), (Some(true), Some(9)));
    let tl = Timeline::build(snap, 0, TimelineKind::Blocks);
    let cause = |addr: u64| {
        let (_, e) = element_at(&tl, addr);
        no_stack_cause(snap, &tl, e)
    };
    let evicted = cause(A + 16 * MB).unwrap();
    assert!(evicted.contains("evicted from the ring buffer") && evicted.contains("last 9 events"), "{evicted}");
    let threadless = cause(A + 10 * MB).unwrap();
    assert!(threadless.starts_with("no Python frames"), "{threadless}");
    let before = cause(0x7F10_0000_0000).unwrap();
    assert!(before.contains("reconstructed from the final segments"), "{before}");
    assert_eq!(element_at(&tl, 0x7F10_0000_0000).1.origin, Origin::Snapshot);
    assert_eq!(cause(A), None, "an allocation with a stack has no cause");
    // A file that does not say: null, and causes without the ring buffer.
    let plain = snapshot::stats::summary(&read(5, "oom-cuda1.pickle").snapshot);
    assert_eq!((plain.devices[0].history_overflowed, plain.devices[0].history_max_entries), (None, None));
}

#[test]
fn an_oom_file_opens_and_is_diagnosed_on_the_device_that_ran_out() {
    let snap: Snapshot = read(5, "oom-cuda1.pickle").snapshot;
    assert_eq!(snap.devices(), vec![0, 1, 2]);
    assert!(snap.trace(0).len() > snap.trace(1).len(), "cuda:0 has the most events");
    assert_eq!(snap.devices_with_oom(), vec![1]);
    assert_eq!(snap.default_device(), Some(1));
    // Without an OOM, the busiest device as before.
    let compiled = read(5, "compiled.pickle").snapshot;
    assert_eq!(compiled.default_device(), Some(0));
}

#[test]
fn a_trace_without_time_us_has_the_event_index_as_its_axis() {
    let snap = read(5, "no-time.pickle").snapshot;
    let timed = read(5, "compiled.pickle").snapshot;
    assert!(!snap.trace(0).has_time() && timed.trace(0).has_time());
    // Everything else reads as with timestamps.
    assert_eq!(
        serde_json::to_value(snapshot::stats::summary(&snap)).unwrap(),
        serde_json::to_value(snapshot::stats::summary(&timed)).unwrap()
    );
    let tl = Timeline::build(&snap, 0, TimelineKind::Blocks);
    assert!(tl.n_steps() > 0 && (0..snap.trace(0).len()).all(|i| snap.trace(0).time_us(i).is_none()));
}

#[test]
fn a_graph_pool_is_counted_with_its_envelope() {
    let s = snapshot::stats::summary(&read(4, "graph-pool.pickle").snapshot);
    let d = &s.devices[0];
    let pools: Vec<_> = d
        .private_pools
        .iter()
        .map(|p| (p.pool_id, p.stream, p.reserved_peak_bytes, p.final_reserved_bytes, p.live_peak_bytes))
        .collect();
    // (1, 2): 20 MiB reserved, 10 MiB at most alive in it; (1, 3) released before the dump.
    assert_eq!(pools, vec![((1, 2), 0, 20 * MB, 20 * MB, 10 * MB), ((1, 3), 0, 4 * MB, 0, 3 * MB)]);
    // The default pool's 3 MiB plus both envelopes (neither shrinks).
    assert_eq!(
        (d.timeline_incl_private_pools.peak_bytes, d.timeline_incl_private_pools.final_bytes),
        (27 * MB, 27 * MB)
    );
    assert_eq!(d.timeline.peak_bytes, 12 * MB);
    let json = serde_json::to_value(d).unwrap();
    assert_eq!(json["private_pools"][0]["pool_id"], serde_json::json!([1, 2]));
    assert_eq!(json["timeline_incl_private_pools"]["peak_bytes"], 27 * MB);
}

#[test]
fn pinned_host_memory_reads_as_a_device_of_its_own() {
    let snap = read(5, "pinned-host.pickle").snapshot;
    assert!(snapshot::host::has_host(&snap));
    let s = snapshot::stats::summary(&snap);
    let h = s.host.as_deref().expect("the host's figures");
    assert_eq!(h.device, snapshot::host::HOST_DEVICE);
    assert_eq!((h.trace_entries, h.reserved_bytes), (8, 28 * MB));
    // Three pinned buffers of 16, 8 and 4 MiB; the 8 MiB one freed before the 4 MiB one came.
    assert_eq!((h.timeline.peak_bytes, h.timeline.final_bytes, h.timeline.elements), (24 * MB, 20 * MB, 3));
    assert_eq!(h.segment_timeline.final_bytes, 28 * MB);
    // The GPU's figures do not count it, as PyTorch's segsum does not.
    assert_eq!(s.total_reserved, 64 * MB);
    assert_eq!(s.devices.len(), 1);
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["host"]["device"], -1);
    assert_eq!(json["host"]["timeline"]["peak_bytes"], 24 * MB);
    // The host as a snapshot: every per-device analysis applies to its device 0.
    let host = snapshot::host::as_snapshot(&snap).unwrap();
    let index = snapshot::state::StateIndex::build(&host, 0);
    let state = index.state_after(&host, Some(host.trace(0).len() - 1));
    assert_eq!((state.reserved_bytes, state.allocated_bytes), (28 * MB, 20 * MB));
    assert_eq!(index.state_after(&host, None).reserved_bytes, 0, "before the first event: nothing pinned");
    assert!(
        serde_json::to_value(snapshot::stats::summary(&read(5, "compiled.pickle").snapshot)).unwrap()["host"].is_null()
    );
}
