//! Profiler files in the engine as the page asks: a trace's load says what it was (through
//! postcard, as the worker sends it), and a raw memory timeline open in another worker gives
//! the trace PyTorch's categories beside memscape's.

use std::path::Path;

use engine::protocol::*;
use engine::Engine;

use super::open;

fn file(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/profiler").join(name)).unwrap()
}

/// Through postcard, as the page and the workers exchange it.
fn wire<T: serde::Serialize + serde::de::DeserializeOwned>(v: &T) -> T {
    postcard::from_bytes(&postcard::to_allocvec(v).unwrap()).unwrap()
}

#[test]
fn a_trace_and_its_timeline_in_two_workers_put_both_categories_side_by_side() {
    let (mut traces, mut timelines) = (Engine::default(), Engine::default());
    let trace = wire(
        &open(&mut traces, "cpu-mlp-adamw.pt.trace.json.gz", &file("cpu-mlp-adamw.pt.trace.json.gz"), 1 << 16).unwrap(),
    );
    let p = trace.summary.profiler.as_ref().expect("the load says it was a profiler trace");
    assert_eq!(p.devices, vec!["cpu".to_string()]);
    assert!(p.addresses);
    let raw =
        wire(&open(&mut timelines, "cpu-mlp-adamw.raw.json.gz", &file("cpu-mlp-adamw.raw.json.gz"), 1 << 16).unwrap());
    assert!(raw.summary.profiler.as_ref().unwrap().source.contains("raw"));
    let Response::TimelineRows(rows) = wire(&timelines.handle(Request::TimelineRows { doc: raw.doc })) else {
        panic!()
    };
    let device = trace.first_device();
    let asked = wire(&Request::Beside { doc: trace.doc, device, rows });
    let Response::Beside(b) = wire(&traces.handle(asked)) else { panic!() };
    assert_eq!(b.matched, b.allocations);
    assert!(b.allocations > 100);
    let (same, all) = b.agreement();
    let peak = trace.device_summary(device).unwrap().timeline.peak_bytes;
    assert_eq!(all, peak);
    assert!(same > 0 && same < all, "the two disagree somewhere on this run: {same} of {all}");
}
