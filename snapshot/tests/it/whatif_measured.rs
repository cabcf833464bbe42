//! The what-if predictions against runs measured on a GPU: `python/whatif-check` records a
//! baseline and each change for real and writes `results.json` and the snapshots; the ones
//! kept in `testdata/whatif/` must go on predicting within the error measured then (issue 44).
//! The checker itself is tested on the generator's loops written in the same layout.

use std::io::Write;
use std::path::{Path, PathBuf};

use snapshot::categories::{self, Compiled};
use snapshot::doctor::{self, Change};
use snapshot::synth::{self, Options};
use snapshot::timeline::{Timeline, TimelineKind};

/// Where `python/whatif-check`'s results are kept in the repository.
fn kept() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/whatif")
}

fn read(path: &Path) -> snapshot::Snapshot {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    snapshot::read(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display())).snapshot
}

/// The timeline and categories of device 0.
fn analyse(snap: &snapshot::Snapshot) -> (Timeline, categories::Categories) {
    let tl = Timeline::build(snap, 0, TimelineKind::Blocks);
    let cats = categories::analyze(snap, &tl, &Compiled::default());
    (tl, cats)
}

/// Checks `dir`'s results: for every measured row, the prediction from the model's baseline
/// snapshot is within the error measured then (plus half a point), and the change's own
/// snapshot, where kept, has the measured peak. Returns the table, or every row that failed.
fn check(dir: &Path) -> Result<Vec<String>, Vec<String>> {
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("results.json")).expect("results.json")).expect("its JSON");
    let (mut table, mut failed) = (Vec::new(), Vec::new());
    let mut basis: Option<(String, snapshot::Snapshot, Timeline, categories::Categories)> = None;
    for row in results["rows"].as_array().expect("rows") {
        if row.get("skipped").is_some() || row["outcome"] != "ok" {
            continue;
        }
        let (model, key) = (row["model"].as_str().unwrap(), row["change"].as_str().unwrap());
        if basis.as_ref().is_none_or(|b| b.0 != model) {
            let snap = read(&dir.join(model).join("baseline.pickle.gz"));
            let (tl, cats) = analyse(&snap);
            basis = Some((model.to_string(), snap, tl, cats));
        }
        let (_, snap, tl, cats) = basis.as_ref().unwrap();
        let change = *Change::DEFAULTS.iter().find(|c| c.key() == key).unwrap_or_else(|| panic!("change {key}"));
        let w = doctor::what_if(snap, tl, cats, &[change]).remove(0);
        let measured = row["measured_peak_bytes"].as_u64().unwrap();
        let own = dir.join(model).join(format!("{}.pickle.gz", key.replace(':', "-")));
        if own.exists() {
            let peak = Timeline::build(&read(&own), 0, TimelineKind::Blocks).peak_bytes();
            if peak != measured {
                failed.push(format!("{model} {key}: its snapshot's peak is {peak}, results.json says {measured}"));
            }
        }
        let err = 100.0 * (w.predicted_peak_bytes as f64 - measured as f64) / measured as f64;
        let then = row["error_pct"].as_f64().unwrap();
        table.push(format!(
            "{model} {key}: predicted {} measured {measured} ({err:+.1}%, {then:+.1}% then)",
            w.predicted_peak_bytes
        ));
        if err.abs() > then.abs() + 0.5 {
            failed.push(format!("{model} {key}: the prediction is {err:+.1}% off, {then:+.1}% when measured"));
        }
    }
    if table.is_empty() && failed.is_empty() {
        failed.push(format!("{}: results.json holds no measured row to check", dir.display()));
    }
    if failed.is_empty() {
        Ok(table)
    } else {
        Err(failed)
    }
}

#[test]
fn predictions_for_the_runs_measured_on_a_gpu_stay_within_their_measured_error() {
    let dir = kept();
    if !dir.join("results.json").exists() {
        testkit::skipped(&format!(
            "{} holds no measured runs yet (python/whatif-check makes them on a GPU)",
            dir.display()
        ));
        return;
    }
    match check(&dir) {
        Ok(table) => eprintln!("{}", table.join("\n")),
        Err(failed) => panic!("{}", failed.join("\n")),
    }
}

fn write_gz(path: &Path, snap: &snapshot::Snapshot) {
    let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(path).unwrap(), flate2::Compression::fast());
    gz.write_all(&snapshot::write::to_pickle_bytes(snap)).unwrap();
    gz.finish().unwrap();
}

#[test]
fn the_checker_passes_measured_runs_and_fails_a_prediction_that_drifted() {
    // The generator's loop under three changes, written as whatif-check writes a GPU's runs.
    let base = Options {
        layers: 8,
        shared_layer_code: true,
        hidden: 1024,
        tokens: 32768,
        target_entries: 4_000,
        seed: 31,
        ..Default::default()
    };
    let dir = std::env::temp_dir().join(format!("memscape-whatif-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("loop")).unwrap();
    let baseline = synth::generate(&base);
    write_gz(&dir.join("loop/baseline.pickle.gz"), &baseline);
    let (tl, cats) = analyse(&baseline);
    let runs = [
        (Change::Checkpointing, Options { checkpointing: true, ..base.clone() }),
        (Change::Batch(2.0), Options { tokens: base.tokens * 2, ..base.clone() }),
        (Change::Bf16Activations, Options { bf16_activations: true, ..base.clone() }),
    ];
    let mut rows = Vec::new();
    for (change, opts) in &runs {
        let run = synth::generate(opts);
        write_gz(&dir.join(format!("loop/{}.pickle.gz", change.key().replace(':', "-"))), &run);
        let measured = Timeline::build(&run, 0, TimelineKind::Blocks).peak_bytes();
        let w = doctor::what_if(&baseline, &tl, &cats, &[*change]).remove(0);
        let err = 100.0 * (w.predicted_peak_bytes as f64 - measured as f64) / measured as f64;
        rows.push(serde_json::json!({"model": "loop", "change": change.key(), "outcome": "ok",
            "measured_peak_bytes": measured, "predicted_peak_bytes": w.predicted_peak_bytes, "error_pct": err}));
    }
    rows.push(serde_json::json!({"model": "loop", "change": "optimizer:adam_8bit", "skipped": "bitsandbytes does not load here"}));
    let write = |rows: &[serde_json::Value]| {
        std::fs::write(dir.join("results.json"), serde_json::json!({"rows": rows}).to_string()).unwrap();
    };
    write(&rows);
    let table = check(&dir).unwrap_or_else(|f| panic!("{}", f.join("\n")));
    assert_eq!(table.len(), 3);
    // A prediction that is now further off than it was measured fails, naming the row.
    rows[1]["error_pct"] = serde_json::json!(0.0);
    rows[1]["measured_peak_bytes"] = serde_json::json!(rows[1]["measured_peak_bytes"].as_u64().unwrap() * 9 / 10);
    write(&rows);
    let failed = check(&dir).expect_err("a drifted prediction");
    assert!(failed.iter().any(|f| f.contains("loop batch:x2") && f.contains("when measured")), "{failed:?}");
    assert!(failed.iter().any(|f| f.contains("its snapshot's peak")), "{failed:?}");
    // Results with nothing measured in them are no pass.
    write(&rows[3..]);
    let failed = check(&dir).expect_err("nothing to check");
    assert!(failed.iter().any(|f| f.contains("no measured row")), "{failed:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
