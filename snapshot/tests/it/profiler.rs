//! `torch.profiler`'s files read as snapshots: real traces (Kineto's TensorBoard samples of
//! 2021, without `Addr`; a CPU run of today's PyTorch, `testdata/profiler/record.py`) and the
//! memory timelines of the same run. The oracle is each file's own figures, read here with
//! serde_json apart from the reader.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use snapshot::categories::{analyze, Category, Rules};
use snapshot::timeline::{Timeline, TimelineKind};
use snapshot::{read, Action, ErrorKind, Format, Limits, Loader, Snapshot};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/profiler").join(name)
}

fn gunzip(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()).read_to_end(&mut out).unwrap();
    out
}

const CPU_TRACE: &str = "cpu-mlp-adamw.pt.trace.json.gz";
const RAW: &str = "cpu-mlp-adamw.raw.json.gz";
const COALESCED: &str = "cpu-mlp-adamw.timeline.json.gz";
const KINETO: [&str; 2] = [
    "kineto/resnet50_num_workers_0.worker0.1623143089861.pt.trace.json.gz",
    "kineto/resnet50_num_workers_4.worker0.1623212756351.pt.trace.json.gz",
];

/// The `[memory]` events of a trace as the file has them, in time order:
/// (device type, device id, ts µs, bytes, total allocated).
fn memory_events(json: &[u8]) -> Vec<(i64, i64, f64, i64, Option<i64>)> {
    let doc: serde_json::Value = serde_json::from_slice(json).unwrap();
    let mut out: Vec<_> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "[memory]")
        .map(|e| {
            let a = &e["args"];
            (
                a["Device Type"].as_i64().unwrap(),
                a["Device Id"].as_i64().unwrap(),
                e["ts"].as_f64().unwrap(),
                a["Bytes"].as_i64().unwrap(),
                a["Total Allocated"].as_i64(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.2.total_cmp(&b.2));
    out
}

/// The device index the reader gives a (type, id): from the names it says it gave.
fn device_of(snap: &Snapshot, kind: i64, id: i64) -> usize {
    let names = snap.profiler_info().unwrap().devices;
    let want = if kind == 0 { "cpu".to_string() } else { format!("cuda:{id}") };
    names.iter().position(|n| *n == want).unwrap_or_else(|| panic!("{want} not in {names:?}"))
}

/// The allocations entries (not the made-up ones of `Total Reserved`) of a device, in order.
fn memory_entries(snap: &Snapshot, device: usize) -> Vec<u32> {
    let t = snap.trace(device);
    (0..t.len() as u32).filter(|&i| matches!(t.action(i as usize), Action::Alloc | Action::FreeCompleted)).collect()
}

#[test]
fn a_trace_with_addresses_draws_pytorchs_total_allocated_at_every_event() {
    let json = gunzip(&data(CPU_TRACE));
    let loaded = read(&std::fs::read(data(CPU_TRACE)).unwrap()).unwrap();
    assert_eq!(loaded.format, Format::Gzip(Box::new(Format::ProfilerTrace)));
    let snap = &loaded.snapshot;
    let info = snap.profiler_info().unwrap();
    assert!(info.addresses);
    let events = memory_events(&json);
    assert_eq!(info.memory_events as usize, events.len());
    let d = device_of(snap, 0, -1);
    let tl = Timeline::build(snap, d, TimelineKind::Blocks);
    let entries = memory_entries(snap, d);
    // A first entry may stand for what `Total Allocated` counted before the trace began.
    let skip = entries.len() - events.len();
    assert!(skip <= 1);
    for (k, (e, &entry)) in events.iter().zip(&entries[skip..]).enumerate() {
        let ta = e.4.expect("today's traces carry Total Allocated") as u64;
        assert_eq!(tl.total_after_entry(entry), ta, "event {k} at {} µs", e.2);
    }
}

#[test]
fn traces_without_addresses_draw_the_running_sum_of_their_bytes() {
    for name in KINETO {
        let json = gunzip(&data(name));
        let loaded = read(&std::fs::read(data(name)).unwrap()).unwrap();
        let snap = &loaded.snapshot;
        assert!(!snap.profiler_info().unwrap().addresses, "{name}");
        assert!(loaded.warnings.iter().any(|w| w.message.contains("no `Addr`")), "{name}: {:?}", loaded.warnings);
        let events = memory_events(&json);
        assert!(events.len() > 10_000, "{name}: {} memory events", events.len());
        let mut devices: Vec<(i64, i64)> = events.iter().map(|e| (e.0, e.1)).collect();
        devices.sort();
        devices.dedup();
        assert_eq!(devices, vec![(0, -1), (1, 0)], "{name}: the CPU and one GPU");
        for (kind, id) in devices {
            let d = device_of(snap, kind, id);
            let tl = Timeline::build(snap, d, TimelineKind::Blocks);
            let entries = memory_entries(snap, d);
            let mine: Vec<_> = events.iter().filter(|e| (e.0, e.1) == (kind, id)).collect();
            assert_eq!(entries.len(), mine.len(), "{name} device {d}");
            // The curve is the running sum plus what frees of allocations made before the
            // trace say was alive at its start: one constant, at every event.
            let mut sum = 0i64;
            let mut offset = None;
            for (k, (e, &entry)) in mine.iter().zip(&entries).enumerate() {
                sum += e.3;
                let curve = tl.total_after_entry(entry) as i64;
                let o = *offset.get_or_insert(curve - sum);
                assert_eq!(curve - sum, o, "{name} device {d}, event {k}");
            }
            assert!(offset.unwrap_or(0) >= 0);
        }
        // The GPU's name and memory come from `deviceProperties`.
        let gpu = snap.device_info().into_iter().find(|i| i.device == device_of(snap, 1, 0) as i64).unwrap();
        assert_eq!((gpu.name.as_str(), gpu.total_bytes), ("Tesla V100-DGXS-32GB", 34_084_028_416));
    }
}

#[test]
fn an_allocation_is_charged_to_its_operator_and_python_lines() {
    let snap = read(&std::fs::read(data(CPU_TRACE)).unwrap()).unwrap().snapshot;
    let d = device_of(&snap, 0, -1);
    let t = snap.trace(d);
    // `torch.randn(256, 512)` in record.py: aten::randn, then aten::empty inside it.
    let first = (0..t.len()).find(|&i| t.action(i) == Action::Alloc && t.size(i) == 256 * 512 * 4).unwrap();
    let frames: Vec<(String, String, i64)> = snap
        .stack(t.frames(first).expect("a stack"))
        .map(|f| (snap.str(f.name).to_string(), snap.str(f.filename).to_string(), f.line))
        .collect();
    let names: Vec<&str> = frames.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(&names[..2], ["aten::empty", "aten::randn"], "{frames:?}");
    assert!(frames.iter().any(|f| f.1 == "record.py" && f.2 == 35 && f.0 == "main"), "{frames:?}");
    assert!(frames.iter().any(|f| f.1 == "record.py" && f.0 == "<module>"), "{frames:?}");
    let site = snapshot::sites::site_name(&snap, t.frames(first));
    assert!(site.contains("record.py:35"), "{site}");
    // On a GPU, backward's allocations are made on autograd's thread, without Python
    // frames: they are named by their node and op.
    let gpu = read(&std::fs::read(data(KINETO[0])).unwrap()).unwrap().snapshot;
    let g = gpu.trace(device_of(&gpu, 1, 0));
    let names: std::collections::BTreeSet<String> =
        (0..g.len()).filter_map(|i| g.frames(i)).map(|s| snapshot::sites::site_name(&gpu, Some(s))).collect();
    assert!(
        names.contains("backward: ConvolutionBackward0, aten::cudnn_convolution_backward_weight")
            || names.iter().any(|n| n.starts_with("backward: ") && n.contains(", aten::")),
        "{names:?}"
    );
    // record_function spans are annotations.
    let anns = snap.external_annotations.as_ref().unwrap();
    assert_eq!(anns.iter().filter(|a| snap.str(a.name) == "## backward ##").count(), 6);
}

/// Bytes per PyTorch category at each of the coalesced file's timestamps, as the file has them.
fn coalesced_figures() -> (Vec<i64>, Vec<Vec<i64>>) {
    let doc: (Vec<i64>, Vec<Vec<i64>>) = serde_json::from_slice(&gunzip(&data(COALESCED))).unwrap();
    doc
}

/// PyTorch's category indices (`_CATEGORY_TO_INDEX`) in memscape's.
const PYTORCH: [Category; 8] = [
    Category::Parameter,
    Category::OptimizerState,
    Category::Input,
    Category::Temporary,
    Category::Activation,
    Category::Gradient,
    Category::AutogradDetail,
    Category::Unknown,
];

#[test]
fn memory_timelines_give_pytorchs_bytes_per_category_at_every_timestamp() {
    let (times, sizes) = coalesced_figures();
    for name in [RAW, COALESCED] {
        let loaded = read(&std::fs::read(data(name)).unwrap()).unwrap();
        assert_eq!(loaded.format, Format::Gzip(Box::new(Format::MemoryTimeline)), "{name}");
        let snap = &loaded.snapshot;
        let tl = Timeline::build(snap, 0, TimelineKind::Blocks);
        let cats = analyze(snap, &tl, &Rules::default().compile().unwrap());
        let t = snap.trace(0);
        let mut entry = 0usize;
        for (i, (&time, row)) in times.iter().zip(&sizes).enumerate() {
            // Everything up to and including this timestamp.
            while entry < t.len() && t.time_us(entry).unwrap() <= time {
                entry += 1;
            }
            // PyTorch writes what was alive before the profile at the first timestamp, then
            // that timestamp again with its own events: compare after the last of equal times.
            if times.get(i + 1) == Some(&time) {
                continue;
            }
            let step = tl.step_of_entry(entry as u32) - 1;
            let mine = cats.bytes_at(&tl, step);
            for (k, c) in PYTORCH.iter().enumerate() {
                assert_eq!(mine[c.index()] as i64, row[k + 1], "{name}: {c:?} at timestamp {i} ({time} µs)");
            }
        }
    }
}

#[test]
fn reading_in_any_chunks_gives_the_same_model() {
    for name in [CPU_TRACE, RAW, KINETO[0]] {
        let bytes = gunzip(&data(name));
        let whole = read(&bytes).unwrap().snapshot;
        for chunk in [1usize, 7, 4096] {
            if chunk == 1 && bytes.len() > 2_000_000 {
                continue;
            }
            let mut l = Loader::new(Limits::default());
            for c in bytes.chunks(chunk) {
                l.feed(c).unwrap();
            }
            let s = l.finish().unwrap().snapshot;
            for d in 0..whole.device_traces.as_ref().unwrap().len() {
                let (a, b) = (whole.trace(d), s.trace(d));
                assert_eq!(a.len(), b.len(), "{name} in chunks of {chunk}");
                assert!((0..a.len()).all(|i| a.entry(i) == b.entry(i)), "{name} in chunks of {chunk}");
            }
        }
    }
}

#[test]
fn written_as_a_pickle_a_trace_keeps_its_figures_and_what_it_was() {
    let snap = read(&std::fs::read(data(CPU_TRACE)).unwrap()).unwrap().snapshot;
    let back = read(&snapshot::write::to_pickle_bytes(&snap)).unwrap();
    assert!(back.warnings.is_empty(), "{:?}", back.warnings);
    assert_eq!(back.snapshot.profiler_info(), snap.profiler_info());
    let d = device_of(&snap, 0, -1);
    let (a, b) =
        (Timeline::build(&snap, d, TimelineKind::Blocks), Timeline::build(&back.snapshot, d, TimelineKind::Blocks));
    assert_eq!((a.peak_bytes(), a.final_bytes()), (b.peak_bytes(), b.final_bytes()));
}

#[test]
fn hostile_traces_are_clear_errors() {
    let head = r#"{"schemaVersion": 1, "traceEvents": ["#;
    let mem = |args: &str| format!(r#"{head}{{"ph": "i", "name": "[memory]", "ts": 1, "args": {args}}}]}}"#);
    let cases: Vec<(String, ErrorKind, &str)> = vec![
        (format!("{head}{{\"ph\": \"X\", \"name\": \"a\""), ErrorKind::Truncated, "truncated"),
        (mem(r#"{"Bytes": "many", "Device Type": 1, "Device Id": 0}"#), ErrorKind::Schema, "traceEvents[0]"),
        (mem(r#"{"Bytes": 1e300, "Device Type": 1, "Device Id": 0}"#), ErrorKind::Schema, "traceEvents[0]"),
        (
            mem(r#"{"Bytes": 99999999999999999999999, "Device Type": 1, "Device Id": 0}"#),
            ErrorKind::Schema,
            "traceEvents[0]",
        ),
        (mem(r#"{"Bytes": 8, "Device Type": 1, "Device Id": 123456789}"#), ErrorKind::Schema, "not a device"),
        (mem(r#"{"Bytes": 8, "Addr": -5}"#), ErrorKind::Schema, "not an address"),
        (format!("{head}{}{}]}}", "[".repeat(100_000), "]".repeat(100_000)), ErrorKind::TooLarge, "nests deeper"),
        (format!(r#"{head}{{"ph": "i", "ts": "soon", "name": "[memory]"}}]}}"#), ErrorKind::Schema, "not a time"),
        (r#"{"schemaVersion": 1}"#.to_string(), ErrorKind::Schema, "no events in `traceEvents` and no `segments`"),
        (format!(r#"{head}{{"a": 1}} {{"b": 2}}]}}"#), ErrorKind::Malformed, "invalid JSON"),
        ("[[1, 2, 3, 4], [1, 9, 3, 4]]".to_string(), ErrorKind::Schema, "not PyTorch's"),
        ("[[1, 2, 3], [4, 5]]".to_string(), ErrorKind::Schema, "memory timeline element"),
    ];
    for (doc, kind, words) in cases {
        let e = match read(doc.as_bytes()) {
            Ok(_) => panic!("read: {}", &doc[..doc.len().min(120)]),
            Err(e) => e,
        };
        assert_eq!(e.kind, kind, "{e} for {}", &doc[..doc.len().min(120)]);
        assert!(e.to_string().contains(words), "{e}");
    }
}

#[test]
fn a_folder_of_traces_is_a_run_and_a_trace_says_its_rank() {
    use snapshot::ranks::{is_run_file, rank_from_name, RankInput};
    for name in KINETO {
        let file = name.rsplit('/').next().unwrap();
        assert!(is_run_file(file), "{file}");
        // `worker_name.<time in ms>.pt.trace.json.gz`: the time is not a rank.
        assert_eq!(rank_from_name(file), None, "{file}");
    }
    // A distributed run's trace says its rank (`distributedInfo`, as Kineto writes it).
    let doc = r#"{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},
        "traceEvents": [{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 7, "tid": 7, "ts": 1.5,
        "args": {"Total Reserved": 2097152, "Total Allocated": 512, "Bytes": 512, "Device Id": 0, "Device Type": 1, "Addr": 139637976727552}}]}"#;
    let mut d =
        snapshot::document::Document::new(read(doc.as_bytes()).unwrap().snapshot, Rules::default().compile().unwrap());
    let p = d.profile(0);
    assert_eq!(p.rank, Some(3));
    assert_eq!(RankInput::new("host_4242.1700000000000.pt.trace.json".into(), None, p).rank, Some(3));
}

#[test]
fn every_analysis_runs_on_profiler_files() {
    for name in [CPU_TRACE, RAW, COALESCED, KINETO[0], KINETO[1]] {
        let snap = read(&std::fs::read(data(name)).unwrap()).unwrap().snapshot;
        let devices = snap.devices();
        let mut doc = snapshot::document::Document::new(snap, Rules::default().compile().unwrap());
        for d in devices {
            let d = d as u32;
            let n = doc.snapshot().trace(d as usize).len();
            let tl = doc.blocks(d).clone();
            assert!(tl.peak_bytes() > 0, "{name} device {d}");
            let (cats, _) = doc.categories(d);
            assert!(cats.at_peak.iter().sum::<u64>() > 0, "{name} device {d}");
            for entry in [None, Some(0), Some(n / 2), Some(n - 1)] {
                let _ = doc.state_after(d, entry);
            }
            let report = doc.doctor(d);
            assert!(report.ooms.is_empty(), "{name}: no out-of-memory error in these runs");
            let tl = doc.blocks(d).clone();
            let q = snapshot::flame::FlameQuery::whole(snapshot::flame::At::Step(tl.peak_step()), false);
            let flame = snapshot::flame::flame(doc.snapshot(), &tl, &q);
            assert!(!flame.nodes.is_empty(), "{name} device {d}");
        }
    }
}

#[test]
fn pytorchs_categories_beside_memscapes_on_the_same_allocations() {
    let trace = read(&std::fs::read(data(CPU_TRACE)).unwrap()).unwrap().snapshot;
    let timeline = read(&std::fs::read(data(RAW)).unwrap()).unwrap().snapshot;
    let d = device_of(&trace, 0, -1);
    let tl = Timeline::build(&trace, d, TimelineKind::Blocks);
    let cats = analyze(&trace, &tl, &Rules::default().compile().unwrap());
    let b = snapshot::categories::beside(&trace, &tl, &cats, &timeline);
    // Every allocation of the trace is a CREATE row of the timeline.
    assert_eq!(b.matched, b.allocations);
    // The rows' own categories, CREATE rows in order, as the file has them.
    let rows: Vec<[i64; 4]> = serde_json::from_slice(&gunzip(&data(RAW))).unwrap();
    let created: Vec<usize> = rows.iter().filter(|r| r[1] == 2).map(|r| r[3] as usize).collect();
    let t = trace.trace(d);
    let allocs: Vec<u32> = (0..t.len() as u32).filter(|&i| t.action(i as usize) == Action::Alloc).collect();
    assert_eq!(allocs.len(), created.len());
    for (e, el) in tl.elements().iter().enumerate() {
        let Some(entry) = el.alloc_entry else { continue };
        let k = allocs.binary_search(&entry).unwrap();
        assert_eq!(Category::ALL[usize::from(b.theirs[e])], PYTORCH[created[k]], "allocation {k}");
    }
    // At the peak, the bytes of both add up to the peak, and PyTorch's sum per category is
    // what its own file says at that moment less what existed before the profile.
    let (same, all) = b.agreement();
    assert_eq!(all, tl.peak_bytes());
    assert!(same <= all);
}
