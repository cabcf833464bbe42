//! What the Rust test crates share: the snapshot corpus (`../shared/corpus`, or
//! `MEMSCAPE_CORPUS`), its files, and PyTorch's own figures for them (`expected/`).
//! A dev-dependency only; a missing corpus fails the test that asked, saying where it looked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

pub mod pickle;

/// How many snapshot files the corpus has at least (a partial copy fails loudly).
pub const MIN_FILES: usize = 19;

/// The corpus folder: `MEMSCAPE_CORPUS`, else `shared/corpus` beside the checkout.
pub fn dir() -> PathBuf {
    let dir = std::env::var_os("MEMSCAPE_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus"));
    assert!(dir.join("expected").is_dir(), "corpus not found at {} (set MEMSCAPE_CORPUS)", dir.display());
    dir
}

/// One corpus file's path.
pub fn path(name: &str) -> PathBuf {
    dir().join(name)
}

/// One corpus file's bytes.
pub fn read(name: &str) -> Vec<u8> {
    let p = path(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every snapshot file of the corpus (not its notes), sorted by name.
pub fn paths() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e != "md"))
        .collect();
    v.sort();
    assert!(v.len() >= MIN_FILES, "expected the {MIN_FILES} corpus files, found {}", v.len());
    v
}

/// Every snapshot file of the corpus with its bytes, sorted by name.
pub fn files() -> Vec<(String, Vec<u8>)> {
    paths()
        .into_iter()
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect()
}

/// PyTorch's figures for a corpus file (`expected/NAME.json`).
pub fn expected(name: &str) -> serde_json::Value {
    let p = dir().join("expected").join(format!("{name}.json"));
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
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
