//! What the Rust test crates share: the snapshot corpus (`MEMSCAPE_CORPUS`, else
//! `../shared/corpus`, else the repository's partial `testdata/corpus`; see `corpus.rs`), its
//! files, and PyTorch's own figures for them (`expected/`); the bundled example; the modern
//! snapshots Python writes. A dev-dependency only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

mod corpus;
pub mod pickle;

pub use corpus::{dir, expected, file_or_skip, files, full, if_full, paths, read_or_skip, skipped, MIN_FILES};

/// What PyTorch's own `_memory_viz.py` (vendored in `third_party/pytorch/`) prints for
/// `command` (`stats`, `trace`, `segments`...) on the snapshot at `path`. Needs python3, not
/// torch.
pub fn memory_viz(path: &Path, command: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../third_party/pytorch/_memory_viz.py");
    let out =
        std::process::Command::new("python3").arg(script).arg(command).arg(path).output().expect("python3 is needed");
    assert!(out.status.success(), "{} {command}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The example the viewer opens at start (`examples/`, copied into the repository).
pub fn example(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The snapshots shaped as PyTorch 2.10 to 2.15 writes them (`modern_snapshots.py`:
/// compiled code's FX frames, C++-only backward stacks, `forward_frames`, `annotate`, an
/// overflowed ring buffer, an OOM on another device than the busiest), written by Python's
/// own pickler with `protocol` (4, or 5 as Python 3.14 writes): their folder, made once per
/// protocol and test process. Needs python3, as the writer's tests do.
pub fn modern(protocol: u8) -> PathBuf {
    static MADE: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());
    let dir = std::env::temp_dir().join(format!("memscape-modern-{}-p{protocol}", std::process::id()));
    let mut made = MADE.lock().unwrap();
    if !made.contains(&protocol) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("modern_snapshots.py");
        let out = std::process::Command::new("python3")
            .arg(&script)
            .arg(&dir)
            .arg(protocol.to_string())
            .output()
            .expect("python3 is needed to write the modern snapshots");
        assert!(out.status.success(), "{}: {}", script.display(), String::from_utf8_lossy(&out.stderr));
        made.push(protocol);
    }
    dir
}
