//! `memscape convert`: any file the reader takes written as a pickle that reads back with the
//! same entries and peaks, and that PyTorch's own `_memory_viz.py` (vendored in
//! third_party/pytorch) reads as it reads the original; it never writes over its input, and a
//! bad input exits 2 naming the file and writes nothing.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::memscape;

fn tmp(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("memscape-convert-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn convert(file: &Path, out: &Path) -> std::process::Output {
    memscape(&["convert", file.to_str().unwrap(), "-o", out.to_str().unwrap()])
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// Each device's trace entries (the host's last, as -1), and the peaks of each device's
/// timelines: what a conversion must keep.
#[allow(clippy::type_complexity)]
fn entries_and_peaks(snap: &snapshot::Snapshot) -> (Vec<(i64, usize)>, Vec<(i64, u64, u64, u64)>) {
    let mut entries: Vec<(i64, usize)> = (0..snap.n_trace_lists()).map(|d| (d as i64, snap.trace(d).len())).collect();
    entries.extend(snap.host_traces.as_ref().map(|t| (-1, t.len())));
    let s = snapshot::stats::summary(snap);
    let peaks = s
        .devices
        .iter()
        .chain(s.host.as_deref())
        .map(|d| {
            (d.device, d.timeline.peak_bytes, d.segment_timeline.peak_bytes, d.timeline_incl_private_pools.peak_bytes)
        })
        .collect();
    (entries, peaks)
}

/// Every corpus file, gzip-compressed, converts to a protocol-4 pickle with each device's
/// entries and the summary's peaks of the original; the line printed names the output, the
/// input's format, the bytes written and the entries per device.
#[test]
fn a_gzip_snapshot_converts_to_a_pickle_with_the_same_entries_and_peaks() {
    let dir = tmp("gzip");
    let mut checked = 0;
    for path in testkit::paths() {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let original = snapshot::read(&std::fs::read(&path).unwrap()).unwrap().snapshot;
        let gz = dir.join(format!("{name}.gz"));
        std::fs::write(&gz, gzip(&std::fs::read(&path).unwrap())).unwrap();
        let out = dir.join(format!("{name}.pickle"));
        let r = convert(&gz, &out);
        assert!(r.status.success(), "{name}: {}", String::from_utf8_lossy(&r.stderr));
        let written = std::fs::read(&out).unwrap();
        let back = snapshot::read(&written).unwrap();
        assert_eq!(back.format, snapshot::Format::Pickle(Some(4)), "{name}");
        assert_eq!(entries_and_peaks(&back.snapshot), entries_and_peaks(&original), "{name}");
        let line = String::from_utf8(r.stdout).unwrap();
        assert_eq!(line.lines().count(), 1, "{name}: {line}");
        assert!(line.starts_with(&format!("{}: {}", out.display(), gz.display())), "{name}: {line}");
        assert!(line.contains(", gzip-compressed) as a pickle, "), "{name}: {line}");
        assert!(line.contains(&format!(" ({} bytes); ", written.len())), "{name}: {line}");
        for d in original.devices() {
            let n = original.trace(d).len();
            let said = if n == 1 { format!("device {d}: 1 entry") } else { format!("device {d}: {n} entries") };
            assert!(line.contains(&said), "{name}: {line}");
        }
        checked += 1;
    }
    assert!(checked >= testkit::if_full(testkit::MIN_FILES, 1), "only {checked} files were converted");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `_memory_viz.py` (PyTorch's segsum and its trace listing) reads the converted file as it
/// reads the original pickle: from a gzip-compressed copy, from `_memory_viz.py`'s own HTML
/// page, and from standard input (`-`), which gives the very bytes the file gives. An output
/// that exists is replaced, as `slice` and `merge` replace theirs.
#[test]
fn pytorchs_viewer_reads_the_converted_file_as_it_reads_the_original() {
    let dir = tmp("viz");
    let mut checked = 0;
    for (input, original) in [
        ("pt20-flexgen-opt1.3b-history.pickle", "pt20-flexgen-opt1.3b-history.pickle"),
        ("pt25plus-expandable-2gpu-tiny-nohistory.pickle", "pt25plus-expandable-2gpu-tiny-nohistory.pickle"),
        ("pt25-cs336-bf16-forward.html", "pt25-cs336-bf16-forward.pickle"),
    ] {
        let Some(input) = testkit::file_or_skip(input) else { continue };
        let Some(original) = testkit::file_or_skip(original) else { continue };
        let name = original.file_name().unwrap().to_str().unwrap();
        let from = if input.extension().is_some_and(|e| e == "html") {
            input
        } else {
            let gz = dir.join(format!("{name}.gz"));
            std::fs::write(&gz, gzip(&std::fs::read(&input).unwrap())).unwrap();
            gz
        };
        let out = dir.join(format!("{name}.converted.pickle"));
        std::fs::write(&out, b"an older file").unwrap();
        let r = convert(&from, &out);
        assert!(r.status.success(), "{name}: {}", String::from_utf8_lossy(&r.stderr));
        for command in ["stats", "trace"] {
            assert_eq!(
                testkit::memory_viz(&out, command),
                testkit::memory_viz(&original, command),
                "{name}: {command}"
            );
        }

        let piped = dir.join(format!("{name}.stdin.pickle"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_memscape"))
            .args(["convert", "-", "-o", piped.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&std::fs::read(&from).unwrap()).unwrap();
        let r = child.wait_with_output().unwrap();
        assert!(r.status.success(), "{name}: {}", String::from_utf8_lossy(&r.stderr));
        assert!(String::from_utf8_lossy(&r.stdout).contains(": <stdin> ("), "{name}");
        assert_eq!(std::fs::read(&piped).unwrap(), std::fs::read(&out).unwrap(), "{name}: from standard input");
        checked += 1;
    }
    assert!(checked >= 1, "no file was converted");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `-o` naming the input (as given, or spelled another way) is refused before anything is
/// read or written: exit 2, the file named, the input as it was.
#[test]
fn convert_refuses_to_overwrite_its_input() {
    let dir = tmp("same");
    let file = dir.join("run.pickle");
    let bytes = testkit::example("cs336-fullstep.pickle");
    std::fs::write(&file, &bytes).unwrap();
    for out in [file.clone(), dir.join(".").join("run.pickle")] {
        let r = convert(&file, &out);
        let err = String::from_utf8(r.stderr).unwrap();
        assert_eq!(r.status.code(), Some(2), "{err}");
        assert!(err.contains("run.pickle: the conversion would overwrite its input"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(r.stdout.is_empty());
        assert_eq!(std::fs::read(&file).unwrap(), bytes);
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "something was written beside the input");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file that is not a snapshot, a truncated one, one that does not exist and a truncated
/// standard input: exit 2 with one line naming the file (`<stdin>`), and nothing written, not
/// even over an output that was there.
#[test]
fn a_bad_input_exits_2_naming_the_file_and_writes_nothing() {
    let dir = tmp("bad");
    let bytes = testkit::example("cs336-fullstep.pickle");
    let truncated = dir.join("truncated.pickle.gz");
    let gz = gzip(&bytes);
    std::fs::write(&truncated, &gz[..gz.len() / 2]).unwrap();
    let text = dir.join("notes.txt");
    std::fs::write(&text, "not a snapshot\n").unwrap();
    let missing = dir.join("missing.pickle");
    let out = dir.join("out.pickle");
    let kept = dir.join("kept.pickle");
    std::fs::write(&kept, b"an older file").unwrap();
    for file in [&truncated, &text, &missing] {
        for o in [&out, &kept] {
            let r = convert(file, o);
            let err = String::from_utf8(r.stderr).unwrap();
            assert_eq!(r.status.code(), Some(2), "{}: {err}", file.display());
            assert!(err.starts_with(&format!("memscape: {}: ", file.display())), "{err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
            assert!(r.stdout.is_empty());
        }
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_memscape"))
        .args(["convert", "-", "-o", out.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&bytes[..bytes.len() / 2]).unwrap();
    let r = child.wait_with_output().unwrap();
    let err = String::from_utf8(r.stderr).unwrap();
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(err.starts_with("memscape: <stdin>: "), "{err}");
    assert!(!out.exists(), "{} was written", out.display());
    assert_eq!(std::fs::read(&kept).unwrap(), b"an older file");
    let mut left: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["kept.pickle", "notes.txt", "truncated.pickle.gz"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn profiler_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/profiler").join(name)
}

/// A `torch.profiler` trace and a memory timeline convert to pickles that PyTorch's own
/// `_memory_viz.py` reads, with the same entries and peaks, still saying what they were.
#[test]
fn a_profiler_trace_converts_to_a_snapshot_pytorchs_viewer_reads() {
    let dir = tmp("profiler");
    for name in ["cpu-mlp-adamw.pt.trace.json.gz", "cpu-mlp-adamw.raw.json.gz"] {
        let input = profiler_file(name);
        let original = snapshot::read(&std::fs::read(&input).unwrap()).unwrap().snapshot;
        let out = dir.join(format!("{name}.pickle"));
        let r = convert(&input, &out);
        assert!(r.status.success(), "{name}: {}", String::from_utf8_lossy(&r.stderr));
        assert!(
            String::from_utf8_lossy(&r.stdout).contains("torch.profiler"),
            "{}",
            String::from_utf8_lossy(&r.stdout)
        );
        let back = snapshot::read(&std::fs::read(&out).unwrap()).unwrap();
        assert!(back.warnings.is_empty(), "{name}: {:?}", back.warnings);
        assert_eq!(entries_and_peaks(&back.snapshot), entries_and_peaks(&original), "{name}");
        assert_eq!(back.snapshot.profiler_info(), original.profiler_info(), "{name}");
        let trace = testkit::memory_viz(&out, "trace");
        assert!(trace.lines().count() > 100, "{name}: {trace}");
    }
}
