//! Checks that need python3: the writer's output loads in Python as the same data, and JSON
//! snapshots (as `json.dumps(snapshot)` writes them) read like their pickles.

use std::process::Command;

use crate::{corpus_dir, corpus_files};

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
    for (name, bytes) in corpus_files() {
        let snap = snapshot::read(&bytes).unwrap().snapshot;
        let out = dir.join(format!("{name}.out.pickle"));
        std::fs::write(&out, snapshot::write::to_pickle_bytes(&snap)).unwrap();
        let r = Command::new("python3")
            .args(["-c", COMPARE])
            .arg(corpus_dir().join(&name))
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
        let exp = crate::expected(&name);
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
    for (name, bytes) in corpus_files().into_iter().filter(|(n, b)| !n.ends_with(".html") && b.len() < 700_000) {
        let out = dir.join(format!("{name}.json"));
        let r = Command::new("python3").args(["-c", TO_JSON]).arg(corpus_dir().join(&name)).arg(&out).output().unwrap();
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
