//! `memscape`: statistics, synthetic snapshots and (later) diffs and offline HTML from the
//! command line. Argument parsing lives here; everything else is `snapshot`.

use std::fs::File;
use std::io::{BufWriter, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "memscape", version, about = "Understand PyTorch GPU memory snapshots")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the statistics of a snapshot (those of `_memory_viz.py stats`, plus per-device timelines).
    Stats {
        /// A snapshot: pickle, .pickle.gz, JSON or a _memory_viz.py HTML page.
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Generate a realistic synthetic snapshot (deterministic for a given seed).
    Synth {
        /// Approximate size of the pickle, e.g. 100M or 1G.
        #[arg(long, value_parser = parse_size, conflicts_with = "entries")]
        size: Option<u64>,
        /// Approximate number of trace entries.
        #[arg(long)]
        entries: Option<usize>,
        /// Number of devices.
        #[arg(long, default_value_t = 1)]
        devices: usize,
        /// Transformer layers of the simulated model.
        #[arg(long, default_value_t = 24)]
        layers: usize,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// End with an out-of-memory event.
        #[arg(long)]
        oom: bool,
        /// Output file (`.gz` is gzip-compressed).
        #[arg(short, long)]
        output: PathBuf,
    },
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = s[i..].to_ascii_uppercase();
            let mult = match unit.trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                _ => return Err(format!("unknown unit in {s:?} (use K, M or G)")),
            };
            (&s[..i], mult)
        }
        None => (s, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("not a size: {s:?}"))?;
    Ok((n * mult as f64) as u64)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) {
                return ExitCode::SUCCESS;
            }
            eprintln!("memscape: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Reads a snapshot file in chunks through the incremental reader.
fn load(path: &Path) -> anyhow::Result<snapshot::Loaded> {
    let mut f = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut loader = snapshot::Loader::new(snapshot::Limits::default());
    if let Ok(m) = f.metadata() {
        loader.set_size_hint(m.len());
    }
    let mut buf = vec![0u8; 4 << 20];
    loop {
        let n = f.read(&mut buf).with_context(|| format!("{}: cannot read", path.display()))?;
        if n == 0 {
            break;
        }
        if let Err(e) = loader.feed(&buf[..n]) {
            bail!("{}: {e}", path.display());
        }
    }
    loader.finish().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Stats { file, json } => {
            let loaded = load(&file)?;
            for w in &loaded.warnings {
                eprintln!("memscape: {}: warning: {w}", file.display());
            }
            let s = snapshot::stats::summary(&loaded.snapshot);
            let mut out = std::io::stdout().lock();
            if json {
                serde_json::to_writer(&mut out, &s)?;
                writeln!(out)?;
            } else {
                print_stats(&mut out, &s)?;
            }
            Ok(())
        }
        Command::Synth { size, entries, devices, layers, seed, oom, output } => {
            let mut opts = match (size, entries) {
                (Some(b), _) => snapshot::synth::Options::for_bytes(b),
                (None, Some(n)) => snapshot::synth::Options { target_entries: n, ..Default::default() },
                (None, None) => snapshot::synth::Options::default(),
            };
            opts.devices = devices;
            opts.layers = layers;
            opts.seed = seed;
            opts.oom = oom;
            let snap = snapshot::synth::generate(&opts);
            let f = File::create(&output).with_context(|| format!("{}: cannot create", output.display()))?;
            let gz = output.extension().is_some_and(|e| e == "gz");
            let r = if gz {
                let mut enc = flate2::write::GzEncoder::new(BufWriter::new(f), flate2::Compression::default());
                snapshot::write::write_pickle(&snap, &mut enc).and_then(|_| enc.finish().map(|_| ()))
            } else {
                snapshot::write::write_pickle(&snap, BufWriter::new(f))
            };
            r.with_context(|| format!("{}: cannot write", output.display()))?;
            let n: usize = snap.device_traces.iter().flatten().map(|t| t.len()).sum();
            let bytes = std::fs::metadata(&output).map(|m| m.len()).unwrap_or(0);
            eprintln!(
                "wrote {} ({bytes} bytes, {n} trace entries, {} segments)",
                output.display(),
                snap.segments.len()
            );
            Ok(())
        }
    }
}

fn print_stats(out: &mut impl std::io::Write, s: &snapshot::stats::Summary) -> std::io::Result<()> {
    use snapshot::stats::format_size as fs;
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
    for d in &s.devices {
        writeln!(
            out,
            "device {}: {} trace entries, {} reserved",
            d.device,
            d.trace_entries,
            fs(d.reserved_bytes.into())
        )?;
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
    }
    Ok(())
}
