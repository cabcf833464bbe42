//! `memscape doctor`: why a run ran out of memory, its peak's headroom and what-if budgets,
//! as text or JSON (`snapshot::doctor` computes them).

use std::io::Write as _;
use std::path::PathBuf;

use crate::input::{load, read_rules};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// A snapshot in any form `stats` reads (with --verify, none: the program after --).
    #[arg(required_unless_present = "verify")]
    file: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Device (default: the first with an out-of-memory error, else the one with the most events).
    #[arg(long)]
    device: Option<usize>,
    /// Category rules, as for `stats`.
    #[arg(long)]
    rules: Option<PathBuf>,
    /// Execute the what-ifs: run the program after -- under `memscape predict` as it is and
    /// with each change the doctor proposes that can be made from outside it (checkpointing,
    /// bf16 activations, SGD with momentum, zero_grad before the forward pass), and print
    /// each change's peak by the doctor's arithmetic beside its peak by execution.
    #[arg(long, conflicts_with_all = ["file", "device"])]
    verify: bool,
    /// With --verify: the GPU to predict for, as for `memscape predict`.
    #[arg(long, requires = "verify")]
    gpu: Option<String>,
    /// With --verify: the program, after `--`.
    #[arg(last = true, requires = "verify")]
    command: Vec<std::ffi::OsString>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let Args { file, json, device, rules, verify, gpu, command } = args;
    let rules = read_rules(rules.as_deref())?;
    if verify {
        return crate::verify::run(
            &crate::predict::Launch { gpu, gpu_memory: None, command, quiet: true },
            &rules,
            json,
        );
    }
    let Some(file) = file else { anyhow::bail!("name a snapshot, or --verify -- COMMAND") };
    let loaded = load(&file)?;
    for w in &loaded.warnings {
        eprintln!("memscape: {}: warning: {w}", file.display());
    }
    let snap = &loaded.snapshot;
    let with_oom = snap.devices_with_oom();
    let d = snap.pick_device(device).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let report = snapshot::doctor::doctor(snap, d, &rules);
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_doctor(&mut out, &report)?;
        let others: Vec<String> = with_oom.iter().filter(|&&o| o != d).map(|o| o.to_string()).collect();
        if !others.is_empty() {
            writeln!(out, "\nout-of-memory errors on other devices too: {} (--device N)", others.join(", "))?;
        }
    }
    Ok(())
}

fn print_doctor(out: &mut impl std::io::Write, r: &snapshot::doctor::Report) -> std::io::Result<()> {
    use snapshot::stats::format_size as fs;
    let opt = |b: Option<u64>| b.map_or("not recorded".to_string(), |b| fs(b.into()));
    let holders = |out: &mut dyn std::io::Write, h: &[snapshot::doctor::Holder]| -> std::io::Result<()> {
        for h in h {
            writeln!(out, "    {:>12}  {} ({} blocks)", fs(h.bytes.into()), h.site, h.count)?;
        }
        Ok(())
    };
    let cats = |out: &mut dyn std::io::Write, c: &[snapshot::categories::CategoryBytes]| -> std::io::Result<()> {
        let line: Vec<String> = c
            .iter()
            .filter(|c| c.bytes > 0)
            .map(|c| format!("{} {}", c.category.label(), fs(c.bytes.into())))
            .collect();
        writeln!(out, "  by category: {}", if line.is_empty() { "nothing live".into() } else { line.join(", ") })
    };
    writeln!(out, "device {}: {} out-of-memory error(s)", r.device, r.ooms.len())?;
    let st = &r.settings;
    writeln!(
        out,
        "allocator settings: {}expandable_segments {}, max_split_size {}{}",
        if st.recorded { "" } else { "(not recorded) " },
        st.expandable_segments.map_or("unknown".into(), |e| e.to_string()),
        st.max_split_size_bytes.map_or("unlimited".into(), |m| fs(m.into())),
        st.conf.as_ref().filter(|c| !c.is_empty()).map_or(String::new(), |c| format!(", PYTORCH_CUDA_ALLOC_CONF={c}"))
    )?;
    for o in &r.ooms {
        writeln!(
            out,
            "\nOOM at entry {} (step {}, {}): {}",
            o.entry,
            o.step,
            o.phase,
            o.verdict.label().to_uppercase()
        )?;
        writeln!(out, "  {}", o.why)?;
        writeln!(
            out,
            "  requested        {:>12} ({} pool, stream {}; a new segment would be {})",
            fs(o.requested_bytes.into()),
            o.pool.label(),
            o.stream,
            fs(o.segment_bytes_needed.into())
        )?;
        writeln!(out, "  device free      {:>12}", opt(o.device_free_bytes))?;
        writeln!(out, "  reserved         {:>12}", fs(o.reserved_bytes.into()))?;
        writeln!(
            out,
            "  allocated        {:>12} (live blocks {})",
            fs(o.allocated_bytes.into()),
            fs(o.live_block_bytes.into())
        )?;
        writeln!(out, "  free in cache    {:>12}", fs(o.cached_free_bytes.into()))?;
        writeln!(
            out,
            "  largest free block {:>10} usable by the request ({} in any pool)",
            fs(o.largest_free_block_bytes.into()),
            fs(o.largest_free_block_any_bytes.into())
        )?;
        for p in &o.free_by_pool {
            writeln!(
                out,
                "    {}, stream {}{}: {} segments, {} reserved, {} free in {} blocks, largest {}",
                p.name(),
                p.stream,
                if p.expandable { " (expandable)" } else { "" },
                p.segments,
                fs(p.reserved_bytes.into()),
                fs(p.free_bytes.into()),
                p.free_blocks,
                fs(p.largest_free_block_bytes.into())
            )?;
        }
        cats(out, &o.categories)?;
        writeln!(out, "  held by:")?;
        holders(out, &o.holders)?;
        for a in &o.advice {
            writeln!(
                out,
                "  advice [{}]: {} (predicted effect {})",
                a.setting,
                a.text,
                fs(a.predicted_effect_bytes.into())
            )?;
        }
    }
    if let Some(e) = &r.at_end {
        writeln!(out, "\nno oom event in the trace; at its end: {}", e.state)?;
        writeln!(
            out,
            "  if it was dumped at an out-of-memory error: {}: {}",
            e.verdict.map_or("undecided", |v| v.label()),
            e.why
        )?;
        let f = &e.figures;
        writeln!(
            out,
            "  reserved {}, allocated {} (live blocks {}), free in cache {} in {} blocks, largest free block {}",
            fs(f.reserved_bytes.into()),
            fs(f.allocated_bytes.into()),
            fs(f.live_block_bytes.into()),
            fs(f.cached_free_bytes.into()),
            f.free_blocks,
            fs(f.largest_free_block_any_bytes.into())
        )?;
        writeln!(out, "  held by:")?;
        holders(out, &e.holders)?;
    }
    let p = &r.peak;
    writeln!(
        out,
        "\npeak: {} live at step {} ({} reserved)",
        fs(p.peak_bytes.into()),
        p.step,
        fs(p.reserved_bytes.into())
    )?;
    match (p.capacity_bytes, p.headroom_bytes) {
        (Some(c), Some(h)) => writeln!(
            out,
            "  headroom {} of {} ({})",
            fs(h.into()),
            fs(c.into()),
            p.capacity_source.as_deref().unwrap_or("")
        )?,
        _ => writeln!(out, "  headroom unknown: the file does not say the device's capacity")?,
    }
    cats(out, &p.categories)?;
    writeln!(out, "  held by:")?;
    holders(out, &p.holders)?;
    writeln!(
        out,
        "\nwhat if (peak {}):",
        fs(r.what_if.first().map_or(p.peak_bytes, |w| w.baseline_peak_bytes).into())
    )?;
    for w in &r.what_if {
        let delta = i128::from(w.predicted_peak_bytes) - i128::from(w.baseline_peak_bytes);
        if w.applies {
            writeln!(out, "  {:>12} ({:>10})  {}", fs(w.predicted_peak_bytes.into()), fs(delta), w.change)?;
            writeln!(out, "      assumes: {}", w.assumption)?;
        } else {
            writeln!(out, "  {:>12} {:>12}  {}: {}", "-", "", w.change, w.assumption)?;
        }
    }
    if !r.allocator_what_if.is_empty() {
        let cap = r.allocator_what_if[0].capacity_bytes.map_or("no limit".into(), |c| fs(c.into()));
        writeln!(
            out,
            "
allocator settings, simulated on this trace (device of {cap}):"
        )?;
        for t in &r.allocator_what_if {
            writeln!(out, "  {}", t.sentence)?;
        }
    }
    Ok(())
}
