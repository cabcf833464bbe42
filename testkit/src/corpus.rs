//! Where the snapshot corpus is and whether it is all of it. The folder is `MEMSCAPE_CORPUS`,
//! else `../shared/corpus` beside the checkout (the full corpus), else the repository's
//! `testdata/corpus` (the files whose licences permit copying). On the full corpus a missing
//! file fails the test that asked; on a partial one (the fallback, or `MEMSCAPE_CORPUS_PARTIAL=1`)
//! that test skips, naming the file on stderr.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How many snapshot files the full corpus has at least (a partial copy of it fails loudly).
pub const MIN_FILES: usize = 19;

/// The corpus folder.
pub fn dir() -> &'static Path {
    &corpus().dir
}

/// Whether the corpus is the full one: a file it lacks is a failure, not a skip.
pub fn full() -> bool {
    corpus().full
}

/// A count a test expects of the corpus: `full` on the full corpus, else `partial` (the
/// figure of the repository's `testdata/corpus`).
pub fn if_full(full: usize, partial: usize) -> usize {
    if self::full() {
        full
    } else {
        partial
    }
}

/// One corpus file's path; `None` (the test returns, skipped) when a partial corpus lacks it.
pub fn file_or_skip(name: &str) -> Option<PathBuf> {
    let p = dir().join(name);
    if p.is_file() {
        return Some(p);
    }
    assert!(!full(), "{} is missing from the full corpus (a partial copy? set MEMSCAPE_CORPUS_PARTIAL=1)", p.display());
    skipped(&format!("needs {name} from the full corpus (../shared/corpus; see testdata/corpus/SOURCES.md)"));
    None
}

/// Says that the running test skipped, and why, past the test harness's capture, so that a
/// passing run still names what it did not check.
pub fn skipped(why: &str) {
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    writeln!(std::io::stderr(), "skipped {test}: {why}").ok();
}

/// One corpus file's bytes; `None` (the test returns, skipped) when a partial corpus lacks it.
pub fn read_or_skip(name: &str) -> Option<Vec<u8>> {
    file_or_skip(name).map(|p| std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

/// Every snapshot file of the corpus (not its notes), sorted by name: all of them on the full
/// corpus (at least `MIN_FILES`), what there is on a partial one.
pub fn paths() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e != "md"))
        .collect();
    v.sort();
    assert!(!full() || v.len() >= MIN_FILES, "expected the {MIN_FILES} corpus files, found {}", v.len());
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

struct Corpus {
    dir: PathBuf,
    full: bool,
}

fn corpus() -> &'static Corpus {
    static CORPUS: OnceLock<Corpus> = OnceLock::new();
    CORPUS.get_or_init(locate)
}

fn locate() -> Corpus {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let shared = repo.join("../shared/corpus");
    let said_partial = std::env::var_os("MEMSCAPE_CORPUS_PARTIAL").is_some_and(|v| v == "1");
    let (dir, full) = match std::env::var_os("MEMSCAPE_CORPUS") {
        Some(d) => (PathBuf::from(d), !said_partial),
        None if shared.is_dir() => (shared, !said_partial),
        None => (repo.join("testdata/corpus"), false),
    };
    assert!(dir.join("expected").is_dir(), "corpus not found at {} (set MEMSCAPE_CORPUS)", dir.display());
    Corpus { dir, full }
}
