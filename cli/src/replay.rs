//! `memscape replay`: a recording replayed through the simulated caching allocator
//! (`snapshot::simulate`), decision by decision: how many allocations it places where PyTorch
//! did, which segments it makes and frees when PyTorch did, and the first decision it makes
//! otherwise, with that entry's call site. With `--alloc-conf`, the trace run under other
//! allocator settings instead (`snapshot::doctor::tuning`): the peak reserved and the errors.

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
    /// Run the trace under these allocator settings, as PYTORCH_CUDA_ALLOC_CONF writes them
    /// (e.g. expandable_segments:True), against the file's own, instead of checking it.
    #[arg(long, value_name = "CONF")]
    alloc_conf: Option<String>,
    /// The device's memory for --alloc-conf, e.g. 80G (default: what the process could reach
    /// at its first out-of-memory error, else the device's memory where the file says it).
    #[arg(long, value_name = "SIZE", value_parser = crate::parse::parse_size)]
    device_memory: Option<u64>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let Args { file, json, device, alloc_conf, device_memory } = args;
    let loaded = load(&file)?;
    for w in &loaded.warnings {
        eprintln!("memscape: {}: warning: {w}", file.display());
    }
    let snap = &loaded.snapshot;
    let devices = match device {
        Some(_) => vec![snap.pick_device(device).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?],
        None => snap.devices().into_iter().filter(|&d| !snap.trace(d).is_empty()).collect(),
    };
    let mut out = std::io::stdout().lock();
    if let Some(conf) = alloc_conf {
        let mut tuned = Vec::new();
        for &d in &devices {
            let capacity = device_memory.or_else(|| snapshot::doctor::tuning::capacity(snap, d));
            let t = snapshot::doctor::tuning::tune(snap, d, capacity, &[conf.as_str()])
                .map_err(|e| anyhow::anyhow!("--alloc-conf: {e}"))?;
            tuned.extend(t.into_iter().map(|t| (d, t)));
        }
        if json {
            let devices: Vec<_> = tuned.iter().map(|(d, t)| serde_json::json!({"device": d, "what_if": t})).collect();
            serde_json::to_writer(&mut out, &serde_json::json!({ "devices": devices }))?;
            writeln!(out)?;
        } else {
            for (d, t) in &tuned {
                writeln!(out, "device {d}: {}", t.sentence)?;
            }
        }
        return Ok(());
    }
    let agreements: Vec<_> = devices.iter().map(|&d| snapshot::simulate::replay(snap, d)).collect();
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
