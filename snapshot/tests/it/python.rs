//! Checks that need python3: the writer's output loads in Python as the same data, and JSON
//! snapshots (as `json.dumps(snapshot)` writes them) read like their pickles.

use std::process::Command;

const COMPARE: &str = r#"
import base64, json, pickle, re, sys
def payload(path):
    data = open(path, 'rb').read()
    if data[:1] == b'\x80':
        return data
    m = re.search(rb'const local_files\s*=\s*(\[.*?\])\s*\n', data, re.S)
    return base64.b64decode(json.loads(m.group(1))[0]['base64'])
orig = pickle.loads(payload(sys.argv[1]))
ours = pickle.load(open(sys.argv[2], 'rb'))
if orig != ours:
    print('DIFFERENT', type(orig), type(ours)); sys.exit(1)
# segsum's sums on what Python loaded from our file
segs = ours if isinstance(ours, list) else ours['segments']
alloc = sum(b.get('requested_size', b['size']) if 'frames' in b or 'history' not in b else b['history'][0]['real_size']
            for s in segs for b in s['blocks'] if b['state'] == 'active_allocated')
print(json.dumps({'total_reserved': sum(s['total_size'] for s in segs), 'total_allocated': alloc}))
"#;

#[test]
fn written_pickles_load_in_python_as_the_original_data() {
    let dir = std::env::temp_dir().join(format!("memscape-py-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in testkit::files() {
        let snap = snapshot::read(&bytes).unwrap().snapshot;
        let out = dir.join(format!("{name}.out.pickle"));
        std::fs::write(&out, snapshot::write::to_pickle_bytes(&snap)).unwrap();
        let r = Command::new("python3")
            .args(["-c", COMPARE])
            .arg(testkit::dir().join(&name))
            .arg(&out)
            .output()
            .expect("python3 is needed for this test");
        assert!(
            r.status.success(),
            "{name}: {}{}",
            String::from_utf8_lossy(&r.stdout),
            String::from_utf8_lossy(&r.stderr)
        );
        let sums: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        let exp = testkit::expected(&name);
        assert_eq!(sums["total_reserved"], exp["segsum"]["total_reserved"], "{name}");
        assert_eq!(sums["total_allocated"], exp["segsum"]["total_allocated"], "{name}");
    }
}

const TO_JSON: &str = r#"
import json, pickle, sys
obj = pickle.load(open(sys.argv[1], 'rb'))
json.dump(obj, open(sys.argv[2], 'w'))
"#;

#[test]
fn json_snapshots_read_like_their_pickles() {
    let dir = std::env::temp_dir().join(format!("memscape-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Python's json module is slow on the multi-megabyte files: the smaller ones cover every
    // format generation.
    for (name, bytes) in testkit::files().into_iter().filter(|(n, b)| !n.ends_with(".html") && b.len() < 700_000) {
        let out = dir.join(format!("{name}.json"));
        let r =
            Command::new("python3").args(["-c", TO_JSON]).arg(testkit::dir().join(&name)).arg(&out).output().unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let from_json = snapshot::read(&std::fs::read(&out).unwrap()).unwrap();
        assert_eq!(from_json.format, snapshot::Format::Json);
        let from_pickle = snapshot::read(&bytes).unwrap();
        assert_eq!(
            snapshot::stats::summary(&from_json.snapshot),
            snapshot::stats::summary(&from_pickle.snapshot),
            "{name}"
        );
    }
}

/// A snapshot with every key of every format generation that the corpus lacks, made by
/// Python's own pickler with frames shared as PyTorch shares them.
const EVERY_GENERATION: &str = r#"
import pickle, sys
f1 = {'name': 'forward', 'filename': 'model.py', 'line': 12}
f2 = {'name': 'train', 'filename': 'train.py', 'line': 40, 'fx_node_op': 'call_function', 'fx_node_name': 'mm'}
stack = [f1, f2]
empty = []
E = 0x7f0000000000
def seg(dev, addr, size, blocks, **kw):
    d = dict(device=dev, address=addr, total_size=size, allocated_size=0, active_size=0, requested_size=0,
             stream=0, segment_type='large', segment_pool_id=(0, 0), is_expandable=False, frames=empty, blocks=blocks)
    d.update(kw)
    return d
snap = {
  'segments': [
    seg(0, E, 4 << 20, [dict(address=E, size=2 << 20, requested_size=2000000, state='active_allocated', frames=stack,
                             forward_frames=['  File "model.py", line 12, in forward\n']),
                        dict(address=E + (2 << 20), size=2 << 20, requested_size=0, state='inactive', frames=empty)]),
    seg(0, E + (64 << 20), 8 << 20, [dict(address=E + (64 << 20), size=8 << 20, requested_size=8 << 20,
        state='active_pending_free', frames=stack)], segment_pool_id=(1, 7), is_expandable=True),
  ],
  'device_traces': [[
    dict(action='segment_map', addr=E + (64 << 20), size=8 << 20, stream=0, time_us=1700000000000000, frames=stack),
    dict(action='segment_map', addr=E + (72 << 20), size=2 << 20, stream=0, time_us=1700000000000001, frames=stack),
    dict(action='segment_alloc', addr=E, size=4 << 20, stream=0, time_us=1700000000000002, frames=stack),
    dict(action='segment_unmap', addr=E + (72 << 20), size=2 << 20, stream=0, time_us=1700000000000003),
    dict(action='alloc', addr=E, size=2000000, stream=0, time_us=1700000000000004, frames=stack, category='activation',
         compile_context='Torch-Compiled Region: 0/0', user_metadata='{"step": 1}', pool_id=(0, 0),
         forward_frames=['  File "model.py", line 12, in forward\n'], internal_metadata='mallocWithAddress'),
    dict(action='annotate', addr=E, size=2000000, stream=0, time_us=1700000000000005, user_metadata='weights'),
    dict(action='alloc', addr=E + (64 << 20), size=8 << 20, stream=0, time_us=1700000000000006, frames=stack, pool_id=(1, 7)),
    dict(action='free_requested', addr=E + (64 << 20), size=8 << 20, stream=0, time_us=1700000000000007),
    dict(action='oom', device_free=1024, size=1 << 40, stream=0, time_us=1700000000000008, frames=stack),
    dict(action='snapshot', addr=0, size=0, stream=0, time_us=1700000000000009),
  ], []],
  'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True', 'max_split_size': -1,
                         'garbage_collection_threshold': 0.0, 'expandable_segments': True,
                         'roundup_power2_divisions': {'1': 0, '2': 0}, 'graph_capture_record_stream_reuse': False,
                         'max_round_threshold': -1, 'max_cached_size': -1},
  'external_annotations': [dict(stage='START', name='ProfilerStep#1', device=0, time_us=1699999999999999),
                           dict(name='ProfilerStep#1', stage='END', time_us=1700000000000010, device=0),
                           dict(stage='END', name='lonely', device=0, time_us=1700000000000011)],
  'host_segments': [dict(device=-1, address=0x100000, total_size=4096, allocated_size=4096, active_size=4096,
                         requested_size=4096, stream=0, segment_type='small', is_expandable=False, frames=empty,
                         blocks=[dict(address=0x100000, size=4096, requested_size=4096, state='active_allocated', frames=stack)])],
  'host_traces': [dict(action='alloc', addr=0x100000, size=4096, stream=0, time_us=1700000000000000, frames=stack)],
}
for proto in (2, 4, 5):
    open(sys.argv[1] + f'.p{proto}', 'wb').write(pickle.dumps(snap, protocol=proto))
"#;

const SAME: &str = r#"
import pickle, sys
a = pickle.load(open(sys.argv[1], 'rb')); b = pickle.load(open(sys.argv[2], 'rb'))
sys.exit(0 if a == b else 1)
"#;

#[test]
fn every_format_generation_reads_and_writes_back_unchanged() {
    let dir = std::env::temp_dir().join(format!("memscape-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("every");
    let r = Command::new("python3").args(["-c", EVERY_GENERATION]).arg(&base).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    for proto in [2u8, 4, 5] {
        let path = dir.join(format!("every.p{proto}"));
        let loaded = snapshot::read(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(loaded.format, snapshot::Format::Pickle(Some(proto)));
        assert!(loaded.warnings.is_empty(), "protocol {proto}: {:?}", loaded.warnings);
        let s = &loaded.snapshot;
        let t = s.trace(0);
        assert_eq!(t.len(), 10);
        assert_eq!(t.action(8), snapshot::Action::Oom);
        assert_eq!((t.addr(8), t.device_free(8)), (0, Some(1024)));
        assert_eq!(t.pool_id(6), Some((1, 7)));
        assert_eq!(s.str(t.category(4).unwrap()), "activation");
        assert_eq!(s.str(t.compile_context(4).unwrap()), "Torch-Compiled Region: 0/0");
        assert_eq!(t.extras(4).len(), 2, "forward_frames and internal_metadata kept");
        assert_eq!(s.host_segments.as_ref().map(Vec::len), Some(1));
        assert_eq!(s.host_traces.as_ref().map(|t| t.len()), Some(1));
        assert_eq!(s.external_annotations.as_ref().map(Vec::len), Some(3));
        let f2 = s.stack(t.frames(0).unwrap()).nth(1).unwrap();
        assert_eq!(f2.extras.len(), 2, "FX frame fields kept");
        // The segment timeline follows map/unmap: 8 MiB mapped, 2 more, a 4 MiB segment
        // (14 MiB), then the 2 MiB unmapped; it ends at the reserved total.
        let seg = snapshot::timeline::Timeline::build(s, 0, snapshot::timeline::TimelineKind::Segments);
        assert_eq!(seg.peak_bytes(), 14 << 20);
        assert_eq!(seg.final_bytes(), 12 << 20);
        // The allocator state knows the pending free and the private pool.
        let st = snapshot::state::StateIndex::build(s, 0).state_after(s, Some(9));
        assert_eq!(st.reserved_bytes, 12 << 20);
        assert!(st.segments.iter().any(|g| g.pool == Some((1, 7)) && g.blocks.iter().any(|b| b.pending_free)));
        // Written back, Python loads exactly the data it pickled.
        let out = dir.join(format!("every.p{proto}.ours"));
        std::fs::write(&out, snapshot::write::to_pickle_bytes(s)).unwrap();
        let r = Command::new("python3").args(["-c", SAME]).arg(&path).arg(&out).output().unwrap();
        assert!(r.status.success(), "protocol {proto}: Python sees different data");
    }
}
