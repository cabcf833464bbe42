//! `memscape slice`: its output opens in PyTorch's own `_memory_viz.py` (vendored in
//! third_party/pytorch) with the original's live bytes at the end, and in memscape as a
//! window that names its file; bad requests exit 2 naming what was wrong.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{memscape, stats_json};

/// `_memory_viz.py stats` (PyTorch's segsum): its `segments`, `total_reserved` and
/// `total_allocated` lines.
fn memory_viz_stats(path: &Path) -> Vec<String> {
    let text = testkit::memory_viz(path, "stats");
    ["segments: ", "total_reserved: ", "total_allocated: "]
        .iter()
        .map(|k| text.lines().find(|l| l.starts_with(k)).unwrap_or_else(|| panic!("{text}")).to_string())
        .collect()
}

fn tmp() -> PathBuf {
    let d = std::env::temp_dir().join(format!("memscape-slice-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn slice(file: &Path, out: &Path, window: &[&str]) -> std::process::Output {
    memscape(&[&["slice", file.to_str().unwrap(), "-o", out.to_str().unwrap()], window].concat())
}

#[test]
fn the_last_entries_open_in_pytorchs_viewer_with_the_originals_live_bytes() {
    let dir = tmp();
    let mut checked = 0;
    for name in [
        "pt25-cs336-fullstep-annotations.pickle",
        "pt210-cs336-training-usermeta.pickle",
        "pt21-llama-cppframes-multistream.pickle",
    ] {
        let Some(path) = testkit::file_or_skip(name) else { continue };
        let out = dir.join(format!("{name}.last.pickle"));
        let r = slice(&path, &out, &["--last", "2000"]);
        assert!(r.status.success(), "{name}: {}", String::from_utf8_lossy(&r.stderr));
        assert_eq!(memory_viz_stats(&out), memory_viz_stats(&path), "{name}");
        // PyTorch's `trace` lists the window's entries, on the device that has them.
        let listed = testkit::memory_viz(&out, "trace");
        let ours = stats_json(&out);
        let d = &ours["devices"][0];
        assert_eq!(d["trace_entries"], 2000, "{name}");
        assert!(listed.contains("2000 entries\n"), "{name}: {}", &listed[..200.min(listed.len())]);
        // memscape reads it as a window of the file it was cut from, with the same end.
        let whole = stats_json(&path);
        assert_eq!(ours["window"]["source"], Value::from(name));
        assert_eq!(ours["window"]["rule"], "the last 2000 entries");
        for k in ["segments", "total_reserved", "total_allocated"] {
            assert_eq!(ours[k], whole[k], "{name}: {k}");
        }
        assert_eq!(d["timeline"]["final_bytes"], whole["devices"][0]["timeline"]["final_bytes"], "{name}");
        checked += 1;
    }
    assert!(checked >= 1, "no file was sliced");
}

#[test]
fn a_window_inside_the_trace_ends_with_the_allocator_state_at_its_end() {
    let Some(path) = testkit::file_or_skip("pt25-cs336-fullstep-annotations.pickle") else { return };
    let dir = tmp();
    let out = dir.join("mid.pickle");
    let r = slice(&path, &out, &["--entries", "5000..9000", "--device", "0"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(String::from_utf8_lossy(&r.stderr).contains("device 0: entries 5000..9000 of 19464"));
    // PyTorch's segsum on the slice gives what memscape reads in it...
    let ours = stats_json(&out);
    let viz = memory_viz_stats(&out);
    assert_eq!(viz[0], format!("segments: {}", ours["segments"]));
    let fs = |v: &Value| snapshot::stats::format_size(v.as_u64().unwrap().into());
    assert_eq!(viz[1], format!("total_reserved: {}", fs(&ours["total_reserved"])));
    assert_eq!(viz[2], format!("total_allocated: {}", fs(&ours["total_allocated"])));
    // ...and that is the whole file's allocator state after entry 8999.
    let snap = snapshot::read(&std::fs::read(&path).unwrap()).unwrap().snapshot;
    let at_end = snapshot::state::StateIndex::build(&snap, 0).state_after(&snap, Some(8999));
    assert_eq!(ours["total_reserved"], at_end.reserved_bytes);
    assert_eq!(ours["segments"], at_end.segments.len());
    assert_eq!(ours["devices"][0]["timeline"]["final_bytes"], at_end.allocated_bytes);
    assert!(testkit::memory_viz(&out, "trace").contains("4000 entries\n"));
}

#[test]
fn bad_requests_exit_2_naming_what_was_wrong_and_write_nothing() {
    let Some(path) = testkit::file_or_skip("pt25-cs336-fullstep-annotations.pickle") else { return };
    let dir = tmp();
    let out = dir.join("never.pickle");
    let cases: [(&[&str], &str); 4] = [
        (&["--entries", "30000.."], "device 0 has 19464 entries"),
        (&["--entries", "a..b"], "\"a\" is not a whole number"),
        (&["--annotation", "no such"], "no annotation \"no such\" starts on device 0"),
        (&["--last", "5", "--device", "3"], "device 3 has no trace"),
    ];
    for (args, said) in cases {
        let r = slice(&path, &out, args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
    let r = slice(&path, &path, &["--last", "5"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("would overwrite its input"));
    let r = memscape(&["slice", path.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2), "a window must be chosen");
}
