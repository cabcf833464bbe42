//! `memscape doctor --verify -- COMMAND`: the doctor's what-ifs executed, not only estimated.
//! The program runs under prediction as it is (the baseline, its whole run recorded), the
//! doctor estimates each change on that snapshot, and each change it can make from outside
//! the program (`python/memscape/_whatif.py`) runs again with the change made: the estimate
//! by arithmetic beside the prediction by execution.

use std::io::Write as _;
use std::path::Path;

use anyhow::{bail, Context as _};
use serde::Serialize;

use crate::input::load;
use crate::predict::Launch;

/// The changes the program's side can make (`_whatif.EXECUTABLE`; `test_predict.py` holds
/// the two lists equal through this command's output).
pub(crate) const EXECUTABLE: [&str; 4] =
    ["checkpointing", "bf16_activations", "optimizer:sgd_momentum", "zero_grad_before_forward"];

/// One change: the doctor's estimate and, where it could be made, the executed prediction.
#[derive(Serialize)]
struct Row {
    key: String,
    change: String,
    /// The doctor's estimate of the peak (bytes).
    by_arithmetic: u64,
    /// The peak of the run with the change made, when it could be.
    by_execution: Option<u64>,
    /// Why it was not executed, or why the run failed.
    note: Option<String>,
}

#[derive(Serialize)]
struct Verified {
    baseline_peak_bytes: u64,
    rows: Vec<Row>,
}

/// The highest live bytes of `path`'s device, as `memscape stats` has them.
fn peak(path: &Path) -> anyhow::Result<(u64, snapshot::Snapshot)> {
    let loaded = load(path)?;
    let snap = loaded.snapshot;
    let d = snap.pick_device(None).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let s = snapshot::stats::summary(&snap);
    let p = s.devices.iter().find(|x| x.device == d as i64).map_or(0, |x| x.timeline.peak_bytes);
    Ok((p, snap))
}

pub(crate) fn run(launch: &Launch, rules: &snapshot::categories::Compiled, json: bool) -> anyhow::Result<()> {
    let dir = crate::predict::tempfile_dir()?;
    let result = verify(launch, rules, &dir);
    std::fs::remove_dir_all(&dir).ok();
    let v = result?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, &v)?;
        writeln!(out)?;
        return Ok(());
    }
    let size = |b: u64| snapshot::stats::format_size(b.into());
    writeln!(out, "the program as it is, predicted: peak {}", size(v.baseline_peak_bytes))?;
    writeln!(out, "{:<28} {:>14} {:>14} {:>9}", "what-if", "by arithmetic", "by execution", "apart")?;
    for r in &v.rows {
        let (exec, apart) = match r.by_execution {
            Some(e) => {
                let apart = (r.by_arithmetic as f64 - e as f64) / e.max(1) as f64 * 100.0;
                (size(e), format!("{apart:+.1}%"))
            }
            None => ("-".to_string(), String::new()),
        };
        writeln!(out, "{:<28} {:>14} {:>14} {:>9}", r.key, size(r.by_arithmetic), exec, apart)?;
        if let Some(n) = &r.note {
            writeln!(out, "    {n}")?;
        }
    }
    Ok(())
}

fn verify(launch: &Launch, rules: &snapshot::categories::Compiled, dir: &Path) -> anyhow::Result<Verified> {
    let base = dir.join("baseline.pickle");
    let status = launch.run(Some(&base), None)?;
    if !status.success() {
        bail!("the program failed under prediction ({status}): the doctor has nothing to verify");
    }
    let (baseline_peak_bytes, snap) = peak(&base).context("the baseline prediction")?;
    let d = snap.pick_device(None).map_err(anyhow::Error::msg)?;
    let report = snapshot::doctor::doctor(&snap, d, rules);
    let mut rows = Vec::new();
    for w in &report.what_if {
        let mut row = Row {
            key: w.key.clone(),
            change: w.change.clone(),
            by_arithmetic: w.predicted_peak_bytes,
            by_execution: None,
            note: None,
        };
        if !EXECUTABLE.contains(&w.key.as_str()) {
            row.note = Some("not executed: memscape cannot make this change to an unchanged program".into());
        } else {
            let out = dir.join(format!("{}.pickle", w.key.replace(':', "-")));
            let status = launch.run(Some(&out), Some(&w.key))?;
            match peak(&out) {
                Ok((p, _)) if status.success() => row.by_execution = Some(p),
                Ok((p, _)) => {
                    row.by_execution = Some(p);
                    row.note =
                        Some(format!("the program stopped with the change made ({status}): the peak up to there"));
                }
                Err(e) => row.note = Some(format!("the run with the change made wrote no snapshot: {e:#}")),
            }
        }
        rows.push(row);
    }
    Ok(Verified { baseline_peak_bytes, rows })
}
