//! `memscape replay`: a recording replayed through the simulated caching allocator
//! (`snapshot::simulate`), decision by decision: how many allocations it places where PyTorch
//! did, which segments it makes and frees when PyTorch did, and the first decision it makes
//! otherwise, with that entry's call site.

use std::io::Write as _;
use std::path::PathBuf;

use crate::input::load;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// A snapshot in any form `stats` reads.
    file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Device (default: every device with a trace).
    #[arg(long)]
    device: Option<usize>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let Args { file, json, device } = args;
    let loaded = load(&file)?;
    for w in &loaded.warnings {
        eprintln!("memscape: {}: warning: {w}", file.display());
    }
    let snap = &loaded.snapshot;
    let devices = match device {
        Some(_) => vec![snap.pick_device(device).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?],
        None => snap.devices().into_iter().filter(|&d| !snap.trace(d).is_empty()).collect(),
    };
    let agreements: Vec<_> = devices.iter().map(|&d| snapshot::simulate::replay(snap, d)).collect();
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, &serde_json::json!({ "devices": agreements }))?;
        writeln!(out)?;
        return Ok(());
    }
    if agreements.is_empty() {
        writeln!(out, "{}: no trace to replay (the snapshot was recorded without history)", file.display())?;
    }
    for a in &agreements {
        let share =
            |n: u64, of: u64| if of == 0 { "-".to_string() } else { format!("{:.2}%", 100.0 * n as f64 / of as f64) };
        writeln!(out, "device {}", a.device)?;
        writeln!(
            out,
            "  allocations placed as recorded: {} of {} ({})",
            a.placed_as_recorded,
            a.allocations,
            share(a.placed_as_recorded, a.allocations)
        )?;
        writeln!(out, "  segment events matched:         {} of {}", a.segment_events_matched, a.segment_events)?;
        writeln!(
            out,
            "  reserved, largest difference:   {}",
            snapshot::stats::format_size(i128::from(a.reserved_max_abs_diff_bytes))
        )?;
        if a.not_simulated > 0 {
            writeln!(out, "  not simulated: {} expandable-segment map/unmap entries", a.not_simulated)?;
        }
        match &a.first_disagreement {
            None => writeln!(out, "  every decision as recorded")?,
            Some(d) => {
                let stack = snap.trace(a.device as usize).frames(d.entry as usize);
                let site = snapshot::sites::site_name(snap, stack);
                writeln!(out, "  first disagreement: entry {}: {} ({site})", d.entry, d.why)?;
            }
        }
    }
    Ok(())
}
