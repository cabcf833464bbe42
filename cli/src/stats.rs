//! `memscape stats`: the statistics of a snapshot (those of `_memory_viz.py stats`, plus
//! per-device timelines, host memory, pools, history) and its categories, as text or JSON.

use std::io::Write as _;
use std::path::PathBuf;

use crate::input::{read_rules, Input};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// A snapshot: pickle, .pickle.gz, JSON, a _memory_viz.py HTML page, a torch.profiler
    /// trace or memory timeline (`-`: standard input).
    file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Category rules (the JSON the viewer exports), tried before the built-in ones.
    #[arg(long)]
    rules: Option<PathBuf>,
    /// For a torch.profiler trace: the raw memory timeline of the same run
    /// (`prof.export_memory_timeline("x.raw.json.gz")`), whose categories (PyTorch's) are shown
    /// beside memscape's on the same allocations at each device's peak.
    #[arg(long, value_name = "RAW_TIMELINE")]
    pytorch_categories: Option<PathBuf>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let Args { file, json, rules, pytorch_categories } = args;
    let rules = read_rules(rules.as_deref())?;
    let timeline = match &pytorch_categories {
        Some(p) => {
            let t = Input::new(p)?;
            let loaded = t.load()?;
            if loaded.snapshot.profiler_info().is_none_or(|i| !i.source.contains("memory timeline (raw)")) {
                anyhow::bail!("{}: not a raw memory timeline (`export_memory_timeline(\"x.raw.json.gz\")`)", t.shown());
            }
            Some(loaded.snapshot)
        }
        None => None,
    };
    let input = Input::new(&file)?;
    let loaded = input.load()?;
    for w in &loaded.warnings {
        eprintln!("memscape: {}: warning: {w}", input.shown());
    }
    let snap = &loaded.snapshot;
    let mut categories = Vec::new();
    let mut beside = Vec::new();
    let summary = snapshot::stats::summary_with(snap, |tl| {
        let cats = snapshot::categories::analyze(snap, &tl, &rules);
        categories.push(cats.report(&tl, rules.rules()));
        if let Some(t) = &timeline {
            beside.push((tl.device(), snapshot::categories::beside(snap, &tl, &cats, t)));
        }
    });
    let mut out = std::io::stdout().lock();
    if json {
        #[derive(serde::Serialize)]
        struct Stats<'a> {
            #[serde(flatten)]
            summary: &'a snapshot::stats::Summary,
            categories: &'a [snapshot::categories::Report],
            /// With `--pytorch-categories`: per device, PyTorch's categories beside memscape's.
            #[serde(skip_serializing_if = "<[_]>::is_empty")]
            pytorch_categories: &'a [(usize, snapshot::categories::Beside)],
        }
        let stats = Stats { summary: &summary, categories: &categories, pytorch_categories: &beside };
        serde_json::to_writer(&mut out, &stats)?;
        writeln!(out)?;
    } else {
        print_stats(&mut out, &summary)?;
        for r in &categories {
            print_categories(&mut out, r)?;
        }
        for (device, b) in &beside {
            print_beside(&mut out, *device, b)?;
        }
    }
    Ok(())
}

/// PyTorch's categories beside memscape's at a device's peak.
fn print_beside(out: &mut impl std::io::Write, device: usize, b: &snapshot::categories::Beside) -> std::io::Result<()> {
    use snapshot::stats::format_size as fs;
    let (same, all) = b.agreement();
    let share = if all > 0 { same as f64 * 100.0 / all as f64 } else { 100.0 };
    writeln!(
        out,
        "device {device}: PyTorch's categories beside memscape's at the peak ({} at step {}; {} of {} allocations found in the timeline; they agree on {} = {share:.0}%):",
        fs(all.into()),
        b.peak_step,
        b.matched,
        b.allocations,
        fs(same.into()),
    )?;
    writeln!(out, "  {:>12}  {:<18}  PyTorch's", "bytes", "memscape's")?;
    for (ours, theirs, bytes) in &b.at_peak {
        let theirs_text = theirs.map_or("(not in the timeline)", |c| c.label());
        let mark = if Some(*ours) == *theirs { "" } else { "   <- differ" };
        writeln!(out, "  {:>12}  {:<18}  {theirs_text}{mark}", fs((*bytes).into()), ours.label())?;
    }
    Ok(())
}

fn print_categories(out: &mut impl std::io::Write, r: &snapshot::categories::Report) -> std::io::Result<()> {
    use snapshot::stats::format_size as fs;
    writeln!(
        out,
        "device {}: at the peak ({} at step {}), by category:",
        r.device,
        fs(r.peak_bytes.into()),
        r.peak_step
    )?;
    for c in r.at_peak.iter().filter(|c| c.bytes > 0) {
        writeln!(out, "  {:>12}  {}", fs(c.bytes.into()), c.category.label())?;
    }
    let b = &r.budget;
    let persistent = if b.persistent > 0 {
        format!(" + persistent before recording {}", fs(b.persistent.into()))
    } else {
        String::new()
    };
    writeln!(
        out,
        "  budget: parameters {} + optimizer state {}{persistent} + max(gradients + intermediates {}, activations {}) = {} (measured peak {})",
        fs(b.parameters.into()),
        fs(b.optimizer_state.into()),
        fs(b.gradients_and_intermediates.into()),
        fs(b.activations.into()),
        fs(b.total.into()),
        fs(b.peak.into())
    )?;
    if let Some(i) = &r.inference {
        writeln!(out, "  before the recording: {}", i.summary)?;
    }
    let complete = r.iterations.iter().filter(|i| i.complete).count();
    writeln!(out, "  iterations: {} ({complete} complete; {})", r.iterations.len(), r.iteration_source)?;
    for (k, it) in r.iterations.iter().enumerate().take(20) {
        writeln!(
            out,
            "    #{k}: steps {}..{}, peak {}{}",
            it.start,
            it.end,
            fs(it.peak_bytes.into()),
            if it.complete { "" } else { " (cut)" }
        )?;
    }
    for l in &r.leaks {
        writeln!(
            out,
            "  leak suspect: {} grows {} per iteration ({} allocations alive)",
            l.site,
            fs(l.bytes_per_iteration.into()),
            l.count
        )?;
        for line in l.stack.iter().take(6) {
            writeln!(out, "      {line}")?;
        }
    }
    Ok(())
}

/// " (name, total memory, what the process held)" when the snapshot names the device.
pub(crate) fn gpu_text(d: &snapshot::stats::DeviceSummary) -> String {
    use snapshot::stats::format_size as fs;
    let Some(g) = &d.gpu else { return String::new() };
    let used = g.process_used_bytes.map(|u| format!(", {} held by the process", fs(u.into()))).unwrap_or_default();
    format!(" ({}, {}{used})", g.name, fs(g.total_bytes.into()))
}

fn print_stats(out: &mut impl std::io::Write, s: &snapshot::stats::Summary) -> std::io::Result<()> {
    use snapshot::stats::format_size as fs;
    if let Some(w) = &s.window {
        writeln!(out, "window: {}", w.describe())?;
    }
    if let Some(p) = &s.profiler {
        writeln!(out, "opened from: {}", p.describe())?;
    }
    if let Some(p) = &s.prediction {
        writeln!(out, "PREDICTION: {}", p.describe())?;
        for a in &p.assumptions {
            writeln!(out, "  assumed: {a}")?;
        }
    }
    writeln!(out, "segments: {}", s.segments)?;
    writeln!(out, "total_reserved: {}", fs(s.total_reserved.into()))?;
    writeln!(out, "total_allocated: {}", fs(s.total_allocated.into()))?;
    let free = i128::from(s.free_external) + i128::from(s.free_internal);
    writeln!(
        out,
        "total_free: {} ({} internal + {} external)",
        fs(free),
        fs(s.free_internal.into()),
        fs(s.free_external.into())
    )?;
    for d in s.devices.iter().chain(s.host.as_deref()) {
        let name = if d.device == snapshot::host::HOST_DEVICE {
            "host (pinned memory)".to_string()
        } else {
            // A profiler file names its devices (`cpu`, `cuda:0`).
            let named = s.profiler.as_ref().and_then(|p| p.devices.get(usize::try_from(d.device).ok()?));
            named.map_or(format!("device {}", d.device), |n| format!("device {} ({n})", d.device))
        };
        writeln!(
            out,
            "{name}{}: {} trace entries, {} reserved",
            gpu_text(d),
            d.trace_entries,
            fs(d.reserved_bytes.into())
        )?;
        if d.history_overflowed == Some(true) {
            let kept = d.history_max_entries.map_or("its last".to_string(), |n| format!("the last {n}"));
            writeln!(out, "  history: the ring buffer overflowed; the trace keeps {kept} events")?;
        }
        if d.outside_allocator_bytes > 0 {
            writeln!(
                out,
                "  outside PyTorch's allocator (from a driver capture): {}",
                fs(d.outside_allocator_bytes.into())
            )?;
        }
        for (name, t) in [("allocations", &d.timeline), ("segments", &d.segment_timeline)] {
            writeln!(
                out,
                "  {name}: {} elements ({} alive before the trace), peak {}, final {}",
                t.elements,
                t.initially_allocated,
                fs(t.peak_bytes.into()),
                fs(t.final_bytes.into())
            )?;
        }
        if !d.private_pools.is_empty() {
            let incl = &d.timeline_incl_private_pools;
            writeln!(
                out,
                "  allocations incl. private pools: peak {}, final {}",
                fs(incl.peak_bytes.into()),
                fs(incl.final_bytes.into())
            )?;
            for p in &d.private_pools {
                writeln!(
                    out,
                    "    pool ({}, {}) stream {}: reserved peak {}, final {}; allocations at most {}",
                    p.pool_id.0,
                    p.pool_id.1,
                    p.stream,
                    fs(p.reserved_peak_bytes.into()),
                    fs(p.final_reserved_bytes.into()),
                    fs(p.live_peak_bytes.into())
                )?;
            }
        }
    }
    Ok(())
}
