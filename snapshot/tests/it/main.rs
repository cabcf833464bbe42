#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Tests of the snapshot core on the real corpus and on hostile input.

mod bad_input;
mod categories;
mod corpus;
mod doctor;
mod python;

use std::path::PathBuf;

pub fn corpus_dir() -> PathBuf {
    let dir = std::env::var_os("MEMSCAPE_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus"));
    assert!(dir.join("expected").is_dir(), "corpus not found at {} (set MEMSCAPE_CORPUS)", dir.display());
    dir
}

pub fn corpus_files() -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e != "md"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    v.sort();
    assert!(v.len() >= 19);
    v
}

pub fn expected(name: &str) -> serde_json::Value {
    let p = corpus_dir().join("expected").join(format!("{name}.json"));
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// A deterministic PRNG for chunk sizes and mutations.
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
