//! The command line on `torch.profiler` files: a folder of traces is a run, and a trace with
//! its raw memory timeline shows PyTorch's categories beside memscape's.

use std::path::{Path, PathBuf};

use super::memscape;

fn profiler_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/profiler").join(name)
}

/// `memscape ranks` on a folder of `tensorboard_trace_handler` files reads each as a rank.
#[test]
fn ranks_reads_a_folder_of_traces() {
    let r = memscape(&["ranks", profiler_file("kineto").to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(out.starts_with("2 ranks"), "{out}");
    assert_eq!(out.matches(".pt.trace.json.gz").count(), 2, "{out}");
}

/// `memscape stats TRACE --pytorch-categories RAW`: every allocation found in the timeline,
/// and the bytes at the peak per pair of categories adding up to the peak.
#[test]
fn stats_shows_pytorchs_categories_beside_memscapes() {
    let trace = profiler_file("cpu-mlp-adamw.pt.trace.json.gz");
    let raw = profiler_file("cpu-mlp-adamw.raw.json.gz");
    let r = memscape(&["stats", "--json", trace.to_str().unwrap(), "--pytorch-categories", raw.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let b = &v["pytorch_categories"][0][1];
    assert_eq!(b["matched"], b["allocations"]);
    let sum: u64 = b["at_peak"].as_array().unwrap().iter().map(|r| r[2].as_u64().unwrap()).sum();
    assert_eq!(sum, v["devices"][0]["timeline"]["peak_bytes"].as_u64().unwrap());
    let text = memscape(&["stats", trace.to_str().unwrap(), "--pytorch-categories", raw.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("PyTorch's categories beside memscape's at the peak"), "{text}");
    // A file that is not a raw timeline is refused, naming it.
    let r = memscape(&["stats", trace.to_str().unwrap(), "--pytorch-categories", trace.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("not a raw memory timeline"));
}
