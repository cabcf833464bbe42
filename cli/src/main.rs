//! `memscape`: statistics, synthetic snapshots and (later) diffs and offline HTML from the
//! command line. Argument parsing lives here; everything else is `snapshot`.

use std::fs::File;
use std::io::{BufWriter, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};
mod ranks;

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
        /// A snapshot: pickle, .pickle.gz, JSON or a _memory_viz.py HTML page (`-`: standard input).
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Category rules (the JSON the viewer exports), tried before the built-in ones.
        #[arg(long)]
        rules: Option<PathBuf>,
    },
    /// Compare two runs: peaks, categories at each peak, call sites alive at the peak,
    /// allocations made in one and not the other, segments only in one.
    Diff {
        /// The first run (A).
        a: PathBuf,
        /// The second run (B).
        b: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// How the two totals are put on one axis: iteration, annotation, event or time.
        #[arg(long, default_value = "iteration", value_parser = parse_align)]
        align: snapshot::diff::Align,
        /// Key call sites by the whole stack instead of the first frame of your own code.
        #[arg(long)]
        whole_stack: bool,
        /// Device (default: the one with the most events, in each file).
        #[arg(long)]
        device: Option<usize>,
        /// Category rules, as for `stats`.
        #[arg(long)]
        rules: Option<PathBuf>,
    },
    /// Why did it run out of memory: for every out-of-memory error, the allocator's figures just
    /// before it, a verdict (exhausted, fragmentation, other limit), who holds the memory and
    /// advice with predicted effects; the headroom at the peak; what-if budgets.
    Doctor {
        /// A snapshot in any form `stats` reads.
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Device (default: the first with an out-of-memory error, else the one with the most events).
        #[arg(long)]
        device: Option<usize>,
        /// Category rules, as for `stats`.
        #[arg(long)]
        rules: Option<PathBuf>,
    },
    /// Write the compact profile of a snapshot (what `diff` and `ranks` compare: peak,
    /// reserved, categories and call sites at the peak, a totals curve) as a file of its own:
    /// run it where each rank's snapshot is written, then `memscape ranks` on the profiles.
    Profile {
        /// A snapshot in any form `stats` reads.
        file: PathBuf,
        /// The profile file to write (`FILE.profile`, by convention).
        #[arg(short, long)]
        output: PathBuf,
        /// Device (default: the one with the most events).
        #[arg(long)]
        device: Option<usize>,
        /// Category rules, as for `stats`.
        #[arg(long)]
        rules: Option<PathBuf>,
    },
    /// The ranks of a run side by side (rank, device, peak, reserved, categories at the peak)
    /// and the outliers: ranks whose peak is well above the median, with the call site that
    /// makes the difference. Files are snapshots or profiles, mixed; a folder stands for its
    /// snapshots and profiles.
    Ranks {
        /// Snapshots, profiles or folders of them.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Category rules, as for `stats` (for snapshots; a profile has its categories).
        #[arg(long)]
        rules: Option<PathBuf>,
    },
    /// Write one self-contained HTML file with the viewer and this snapshot: it opens from
    /// disk, offline, with no network at all (the replacement for `_memory_viz.py trace_plot`).
    Html {
        /// A snapshot in any form `stats` reads, including the HTML pages of `_memory_viz.py`
        /// (`-`: standard input).
        file: PathBuf,
        /// The HTML file to write (`-`: standard output).
        #[arg(short, long)]
        output: PathBuf,
        /// The name the viewer shows for the snapshot (default: the file's name).
        #[arg(long)]
        name: Option<String>,
    },
    /// One snapshot from PyTorch's own and a `memscape capture` of the same process: PyTorch's
    /// segments with their Python frames, plus every driver allocation outside them (NCCL,
    /// cuBLAS workspaces, CuPy...) marked as outside PyTorch's allocator.
    Merge {
        /// PyTorch's snapshot (`torch.cuda.memory._dump_snapshot`).
        torch: PathBuf,
        /// The driver capture of the same process (`memscape capture`).
        capture: PathBuf,
        /// Where the merged snapshot goes (a pickle).
        #[arg(short, long)]
        output: PathBuf,
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
        /// End with an out-of-memory error caused by fragmentation (free bytes enough, no
        /// free block large enough, the device full).
        #[arg(long)]
        fragmentation_oom: bool,
        /// Plant a leak: keep a tensor of this size every iteration (e.g. 8M).
        #[arg(long, value_parser = parse_size)]
        leak: Option<u64>,
        /// Plant an extra activation of this size in every iteration (e.g. 24M).
        #[arg(long, value_parser = parse_size)]
        extra_activation: Option<u64>,
        /// The optimizer whose state the first step makes: adamw, adam, sgd-momentum, sgd,
        /// adam8bit, adafactor.
        #[arg(long, default_value = "adamw", value_parser = parse_optimizer)]
        optimizer: snapshot::synth::OptimizerKind,
        /// Training steps before the recording starts: parameters and optimizer state are then
        /// blocks of the final snapshot without frames, as in a recording started mid-training.
        #[arg(long, default_value_t = 0)]
        warmup_steps: usize,
        /// Leave out torch.optim's record_function annotations.
        #[arg(long)]
        no_annotations: bool,
        /// End the recording after its first forward pass.
        #[arg(long)]
        end_in_forward: bool,
        /// Also write what was planted (bytes per category at the peak, the leak's and the
        /// extra activation's call sites) as JSON to this file.
        #[arg(long)]
        truth: Option<PathBuf>,
        /// Output file (`.gz` is gzip-compressed).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Run a CUDA program and record every device allocation it makes (needs an NVIDIA GPU).
    Capture {
        /// Where to write the snapshot.
        #[arg(long, default_value = "memscape-capture.pickle")]
        out: PathBuf,
        /// Events kept per device; older ones are dropped, what they allocated stays visible.
        #[arg(long, default_value_t = 1_000_000)]
        max_entries: usize,
        /// Also write the snapshot every this many seconds.
        #[arg(long)]
        every: Option<f64>,
        /// Also write the offline HTML page (`OUT.html`) once the program ends.
        #[arg(long)]
        html: bool,
        /// Also turn on PyTorch's own memory recording in every Python process that uses CUDA
        /// through torch (no change to its code), and merge it into that process's snapshot:
        /// PyTorch's blocks with their Python frames, every other driver allocation outside its
        /// allocator. `--max-entries` is PyTorch's too.
        #[arg(long)]
        torch: bool,
        /// With --torch: the stacks PyTorch records (`python`, or `all` for C++ frames too).
        #[arg(long, default_value = "python", value_parser = ["python", "all"], requires = "torch")]
        stacks: String,
        /// The program and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

fn parse_optimizer(s: &str) -> Result<snapshot::synth::OptimizerKind, String> {
    use snapshot::synth::OptimizerKind;
    OptimizerKind::ALL.into_iter().find(|k| k.key() == s).ok_or_else(|| {
        let keys: Vec<&str> = OptimizerKind::ALL.iter().map(|k| k.key()).collect();
        format!("not an optimizer: {s:?} (one of {})", keys.join(", "))
    })
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

fn parse_align(s: &str) -> Result<snapshot::diff::Align, String> {
    snapshot::diff::Align::parse(s)
        .ok_or_else(|| format!("unknown alignment {s:?} (iteration, annotation, event or time)"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Capture { out, max_entries, every, html, torch, stacks, command } = &cli.command {
        let torch = torch.then(|| capture::torch::Settings { max_entries: *max_entries, stacks: stacks.clone() });
        return match capture(out, *max_entries, *every, *html, torch, command) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("memscape: {e:#}");
                ExitCode::from(2)
            }
        };
    }
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

include!(concat!(env!("OUT_DIR"), "/app_assets.rs"));

/// The viewer embedded at build time, or why there is none.
fn viewer() -> anyhow::Result<offline::Assets> {
    app_assets().context(
        "this memscape was built without the viewer: run `scripts/site` (or `trunk build --release`, then build memscape again)",
    )
}

/// Writes the offline page of `input` (already read as `loaded`; `bytes` when it came from
/// standard input) to `output` (`-`: standard output). The viewer calls it `name`, by default
/// the file's name.
fn write_offline(
    assets: &offline::Assets,
    input: &Input,
    loaded: &snapshot::Loaded,
    name: Option<&str>,
    output: &Path,
) -> anyhow::Result<()> {
    let bytes = match (&loaded.format, input) {
        // A page made by `_memory_viz.py`: embed the snapshot it holds, as a pickle.
        (snapshot::Format::Html(_), _) => snapshot::write::to_pickle_bytes(&loaded.snapshot),
        (_, Input::Stdin(bytes)) => bytes.clone(),
        (_, Input::File(file)) => std::fs::read(file).with_context(|| format!("{}: cannot read", file.display()))?,
    };
    let name = match (name, input) {
        (Some(n), _) => n.to_string(),
        (None, Input::File(file)) => file.file_name().map_or("snapshot".into(), |n| n.to_string_lossy().into_owned()),
        (None, Input::Stdin(_)) => "snapshot".into(),
    };
    let name = name.strip_suffix(".html").unwrap_or(&name).to_string();
    let html = offline::page(assets, &name, &bytes);
    if output == Path::new(STDIO) {
        let mut out = std::io::stdout().lock();
        out.write_all(html.as_bytes())?;
        return Ok(out.flush()?);
    }
    std::fs::write(output, &html).with_context(|| format!("{}: cannot write", output.display()))?;
    println!("wrote {} ({} bytes): open it in a browser, no network needed", output.display(), html.len());
    Ok(())
}

/// The file name that means standard input (or output).
const STDIO: &str = "-";

/// A snapshot to read: a file (read in chunks as it is parsed), or standard input (read
/// whole first: `memscape html` embeds the very bytes).
enum Input {
    File(PathBuf),
    Stdin(Vec<u8>),
}

impl Input {
    /// `-` reads standard input now.
    fn new(path: &Path) -> anyhow::Result<Input> {
        if path != Path::new(STDIO) {
            return Ok(Input::File(path.to_path_buf()));
        }
        let mut bytes = Vec::new();
        std::io::stdin().lock().read_to_end(&mut bytes).context("<stdin>: cannot read")?;
        Ok(Input::Stdin(bytes))
    }

    fn load(&self) -> anyhow::Result<snapshot::Loaded> {
        match self {
            Input::File(path) => load(path),
            Input::Stdin(bytes) => {
                let mut loader = snapshot::Loader::new(limits());
                loader.set_size_hint(bytes.len() as u64);
                loader.feed(bytes).map_err(|e| anyhow::anyhow!("<stdin>: {e}"))?;
                loader.finish().map_err(|e| anyhow::anyhow!("<stdin>: {e}"))
            }
        }
    }

    /// What messages call it.
    fn shown(&self) -> String {
        match self {
            Input::File(path) => path.display().to_string(),
            Input::Stdin(_) => "<stdin>".into(),
        }
    }
}

/// Reads a snapshot file in chunks through the incremental reader.
fn load(path: &Path) -> anyhow::Result<snapshot::Loaded> {
    let mut f = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut loader = snapshot::Loader::new(limits());
    if let Ok(m) = f.metadata() {
        loader.set_size_hint(m.len());
    }
    // The disk is read on a second thread, 4 MiB ahead of the parser: reading and parsing
    // overlap, and the buffers go back and forth instead of being allocated each time.
    let (full_tx, full) = std::sync::mpsc::sync_channel::<std::io::Result<(Vec<u8>, usize)>>(2);
    let (empty, empty_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    for _ in 0..3 {
        let _ = empty.send(vec![0u8; 4 << 20]);
    }
    let reader = std::thread::spawn(move || {
        while let Ok(mut buf) = empty_rx.recv() {
            let read = f.read(&mut buf);
            let done = !matches!(read, Ok(n) if n > 0);
            if full_tx.send(read.map(|n| (buf, n))).is_err() || done {
                return;
            }
        }
    });
    let mut failed = None;
    for chunk in full {
        let (buf, n) = chunk.with_context(|| format!("{}: cannot read", path.display()))?;
        if n == 0 {
            break;
        }
        if let Err(e) = loader.feed(&buf[..n]) {
            failed = Some(e);
            break;
        }
        // The reader may have finished already (it has read the end): then nobody needs it.
        let _ = empty.send(buf);
    }
    drop(empty);
    let _ = reader.join();
    if let Some(e) = failed {
        bail!("{}: {e}", path.display());
    }
    loader.finish().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The reader's limits on this machine: its working memory at most half the RAM (the
/// model and analyses need about as much again), so a hostile file fails with a message
/// instead of swapping the machine to a halt or being killed.
fn limits() -> snapshot::Limits {
    let mut limits = snapshot::Limits::default();
    let ram = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let kb = m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().strip_suffix("kB")?;
        kb.trim().parse::<u64>().ok()
    });
    if let Some(kb) = ram {
        limits.max_memory_bytes = limits.max_memory_bytes.min(kb * 1024 / 2);
    }
    limits
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Stats { file, json, rules } => {
            let rules = read_rules(rules.as_deref())?;
            let input = Input::new(&file)?;
            let loaded = input.load()?;
            for w in &loaded.warnings {
                eprintln!("memscape: {}: warning: {w}", input.shown());
            }
            let snap = &loaded.snapshot;
            let mut categories = Vec::new();
            let summary = snapshot::stats::summary_with(snap, |tl| {
                let cats = snapshot::categories::analyze(snap, &tl, &rules);
                categories.push(cats.report(&tl, rules.rules()));
            });
            let mut out = std::io::stdout().lock();
            if json {
                #[derive(serde::Serialize)]
                struct Stats<'a> {
                    #[serde(flatten)]
                    summary: &'a snapshot::stats::Summary,
                    categories: &'a [snapshot::categories::Report],
                }
                serde_json::to_writer(&mut out, &Stats { summary: &summary, categories: &categories })?;
                writeln!(out)?;
            } else {
                print_stats(&mut out, &summary)?;
                for r in &categories {
                    print_categories(&mut out, r)?;
                }
            }
            Ok(())
        }
        Command::Diff { a, b, json, align, whole_stack, device, rules } => {
            let rules = read_rules(rules.as_deref())?;
            let (pa, pb) = (ranks::snapshot_profile(&a, device, &rules)?, ranks::snapshot_profile(&b, device, &rules)?);
            let by = if whole_stack { snapshot::diff::SiteMode::Stack } else { snapshot::diff::SiteMode::Frame };
            let d = snapshot::diff::diff(&pa, &pb, align, by);
            let mut out = std::io::stdout().lock();
            if json {
                serde_json::to_writer(&mut out, &d)?;
                writeln!(out)?;
            } else {
                print_diff(&mut out, &d, &a, &b)?;
            }
            Ok(())
        }
        Command::Doctor { file, json, device, rules } => {
            let rules = read_rules(rules.as_deref())?;
            let loaded = load(&file)?;
            for w in &loaded.warnings {
                eprintln!("memscape: {}: warning: {w}", file.display());
            }
            let snap = &loaded.snapshot;
            let with_oom = snap.devices_with_oom();
            let d = device.or_else(|| snap.default_device()).unwrap_or(0);
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
        Command::Profile { file, output, device, rules } => {
            ranks::profile_command(&file, &output, device, &read_rules(rules.as_deref())?)
        }
        Command::Ranks { files, json, rules } => ranks::ranks_command(&files, json, &read_rules(rules.as_deref())?),
        Command::Html { file, output, name } => {
            let assets = viewer()?;
            let input = Input::new(&file)?;
            let loaded = input.load()?;
            write_offline(&assets, &input, &loaded, name.as_deref(), &output)
        }
        Command::Merge { torch, capture, output } => {
            for input in [&torch, &capture] {
                if std::path::absolute(input)? == std::path::absolute(&output)? {
                    bail!(
                        "{}: the merged snapshot would overwrite an input; name another file with -o",
                        output.display()
                    );
                }
            }
            let (t, c) = (load(&torch)?, load(&capture)?);
            let (merged, what) = snapshot::merge::merge_capture(&t.snapshot, &c.snapshot);
            let bytes = snapshot::write::to_pickle_bytes(&merged);
            std::fs::write(&output, bytes).with_context(|| format!("{}: cannot write", output.display()))?;
            let outside: u64 = what.outside.iter().map(|o| o.2).sum();
            println!(
                "{}: PyTorch's {} segments, {} driver allocations inside them left out, {} outside PyTorch's allocator added ({}), {} of their events in the trace",
                output.display(),
                t.snapshot.segments.len(),
                what.inside,
                what.outside.len(),
                snapshot::stats::format_size(outside.into()),
                what.events
            );
            Ok(())
        }
        Command::Synth {
            size,
            entries,
            devices,
            layers,
            seed,
            oom,
            fragmentation_oom,
            leak,
            extra_activation,
            optimizer,
            warmup_steps,
            no_annotations,
            end_in_forward,
            truth,
            output,
        } => {
            let mut opts = match (size, entries) {
                (Some(b), _) => snapshot::synth::Options::for_bytes(b),
                (None, Some(n)) => snapshot::synth::Options { target_entries: n, ..Default::default() },
                (None, None) => snapshot::synth::Options::default(),
            };
            opts.devices = devices;
            opts.layers = layers;
            opts.seed = seed;
            opts.oom = oom;
            opts.fragmentation_oom = fragmentation_oom;
            opts.leak_bytes = leak.unwrap_or(0);
            opts.extra_activation_bytes = extra_activation.unwrap_or(0);
            opts.optimizer = optimizer;
            opts.warmup_steps = warmup_steps;
            opts.annotations = !no_annotations;
            opts.end_in_forward = end_in_forward;
            let (snap, planted) = snapshot::synth::generate_with_truth(&opts);
            if let Some(path) = truth {
                use snapshot::categories::Category;
                let at_peak: serde_json::Map<String, serde_json::Value> =
                    Category::ALL.iter().map(|c| (c.key().to_string(), planted.at_peak[c.index()].into())).collect();
                let json = serde_json::json!({
                    "peak_bytes": planted.peak_bytes,
                    "at_peak": at_peak,
                    "iterations": planted.iterations,
                    "leak": (opts.leak_bytes > 0).then(|| serde_json::json!({"site": snapshot::synth::LEAK_SITE, "bytes_per_iteration": opts.leak_bytes})),
                    "extra_activation": (opts.extra_activation_bytes > 0).then(|| serde_json::json!({"site": snapshot::synth::EXTRA_SITE, "bytes": opts.extra_activation_bytes})),
                });
                std::fs::write(&path, serde_json::to_string_pretty(&json)?)
                    .with_context(|| format!("{}: cannot write", path.display()))?;
            }
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
        // Handled in main: it returns the program's own exit code.
        Command::Capture { .. } => Ok(()),
    }
}

/// Finds the injection library: `MEMSCAPE_CAPTURE_LIB`, else next to this executable (a
/// cargo build), else in `../lib/memscape/` from it (where the wheel installs it: `bin/` and
/// `lib/` of the same environment).
fn injection_library() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("MEMSCAPE_CAPTURE_LIB") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let beside = exe.with_file_name("libmemscape_capture.so");
    let installed = exe.parent().and_then(Path::parent).map(|p| p.join("lib/memscape/libmemscape_capture.so"));
    match [Some(beside.clone()), installed].into_iter().flatten().find(|p| p.exists()) {
        Some(lib) => Ok(lib),
        None => bail!(
            "the injection library {} is missing: build it with `cargo build --release -p capture` (or set MEMSCAPE_CAPTURE_LIB)",
            beside.display()
        ),
    }
}

/// The first frame outside the CUDA driver, CUPTI and the recorder: where the program asked.
fn call_site(snap: &snapshot::Snapshot, stack: Option<snapshot::StackId>) -> String {
    let site =
        stack.and_then(|st| snap.stack(st).find(|f| !capture::is_plumbing(snap.str(f.name), snap.str(f.filename))));
    site.map_or_else(|| "<no stack>".into(), |f| format!("{} ({}:{})", snap.str(f.name), snap.str(f.filename), f.line))
}

fn capture(
    out: &Path,
    max_entries: usize,
    every: Option<f64>,
    html: bool,
    torch: Option<capture::torch::Settings>,
    command: &[String],
) -> anyhow::Result<ExitCode> {
    if !capture::driver_present() {
        bail!("capture needs an NVIDIA GPU: the CUDA driver (libcuda.so.1) cannot be loaded on this machine");
    }
    let assets = if html { Some(viewer()?) } else { None };
    let lib = injection_library()?;
    // CUPTI is loaded by name inside the program; when it is not on the library path here,
    // look in the CUDA toolkit and hand its directory to the program.
    let cupti_dir = if capture::cupti_present() {
        None
    } else {
        Some(capture::find_cupti_dir().context(
            "CUPTI (libcupti.so) cannot be found: install the CUDA toolkit and add the directory holding \
             libcupti.so (or libcupti.so.12) to LD_LIBRARY_PATH",
        )?)
    };
    let (prog, args) = command.split_first().context("no command given after --")?;
    let abs_out = std::path::absolute(out)?;
    // The run's claim on --out and its list of written files: ours, from an earlier run if
    // they are still there (never a snapshot).
    let (claim, list) = (capture::output::claim_path(&abs_out), capture::output::list_path(&abs_out));
    for f in [&claim, &list] {
        let _ = std::fs::remove_file(f);
    }
    // PyTorch's dumps and the hook that writes them, in a folder of the run's beside --out.
    let torch_dir = capture::output::torch_dir(&abs_out);
    let _ = std::fs::remove_dir_all(&torch_dir);
    let mut cmd = std::process::Command::new(prog);
    if let Some(settings) = &torch {
        let env = capture::torch::prepare(&torch_dir, settings, std::env::var_os("PYTHONPATH").as_deref())
            .with_context(|| format!("{}: cannot write PyTorch's hook", torch_dir.display()))?;
        cmd.envs(env);
    }
    cmd.args(args)
        .env("CUDA_INJECTION64_PATH", &lib)
        .env("MEMSCAPE_CAPTURE_OUT", &abs_out)
        .env("MEMSCAPE_CAPTURE_RUN", std::process::id().to_string())
        .env("MEMSCAPE_CAPTURE_MAX_ENTRIES", max_entries.to_string());
    if let Some(s) = every {
        cmd.env("MEMSCAPE_CAPTURE_EVERY", s.to_string());
    }
    if let Some(dir) = cupti_dir {
        let mut paths = vec![dir];
        paths.extend(std::env::var_os("LD_LIBRARY_PATH").iter().flat_map(std::env::split_paths));
        cmd.env("LD_LIBRARY_PATH", std::env::join_paths(paths)?);
    }
    let status = cmd.status().with_context(|| format!("cannot run {prog}"))?;
    let written = capture::output::read_list(&list);
    for f in [&claim, &list] {
        let _ = std::fs::remove_file(f);
    }
    let written = written.with_context(|| format!("cannot read the list of written snapshots {}", list.display()))?;
    if written.is_empty() {
        bail!("{prog} wrote no snapshot to {} (did it use CUDA?)", abs_out.display());
    }
    let mut o = std::io::stdout().lock();
    if written.len() > 1 {
        writeln!(o, "{} processes wrote a snapshot each:", written.len())?;
    }
    for w in &written {
        let merged = torch.as_ref().map(|_| capture::torch::merge_into(w, &torch_dir));
        summarize_capture(&mut o, w, assets.as_ref())?;
        match merged {
            None => {}
            Some(Ok(Some(m))) => {
                let outside: u64 = m.outside.iter().map(|o| o.2).sum();
                writeln!(
                    o,
                    "merged with PyTorch's recording: {} driver allocations outside its allocator ({}), {} of their events",
                    m.outside.len(),
                    snapshot::stats::format_size(outside.into()),
                    m.events
                )?;
            }
            Some(Ok(None)) => {
                writeln!(o, "no PyTorch recording from this process (it did not use CUDA through torch)")?
            }
            Some(Err(e)) => writeln!(o, "not merged with PyTorch's recording: {e}")?,
        }
    }
    if torch.is_some() {
        // Dumps no capture took (a process the driver capture missed) stay for the user.
        let left = std::fs::read_dir(&torch_dir)
            .map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".pickle")).count())
            .unwrap_or(0);
        if left == 0 {
            let _ = std::fs::remove_dir_all(&torch_dir);
        } else {
            writeln!(o, "{left} PyTorch snapshots no capture took are in {}", torch_dir.display())?;
        }
    }
    Ok(ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8))
}

/// What `memscape capture` prints of one process's snapshot: its file, process and rank;
/// each device's peak and memory alive at exit; the call sites holding the most at exit.
/// With the viewer's assets, the offline page beside it too.
fn summarize_capture(
    o: &mut impl std::io::Write,
    w: &capture::output::Written,
    assets: Option<&offline::Assets>,
) -> anyhow::Result<()> {
    let loaded = load(&w.path)?;
    if let Some(assets) = assets {
        let mut page = w.path.clone().into_os_string();
        page.push(".html");
        write_offline(assets, &Input::File(w.path.clone()), &loaded, None, Path::new(&page))?;
    }
    let snap = &loaded.snapshot;
    let s = snapshot::stats::summary(snap);
    use snapshot::stats::format_size as fs;
    let rank = w.rank.map(|r| format!(", rank {r}")).unwrap_or_default();
    writeln!(o, "snapshot: {} (process {}{rank})", w.path.display(), w.pid)?;
    for d in &s.devices {
        let (peak, alive) = (d.segment_timeline.peak_bytes, d.reserved_bytes);
        writeln!(
            o,
            "device {}{}: peak {}, {} alive at exit, {} events",
            d.device,
            gpu_text(d),
            fs(peak.into()),
            fs(alive.into()),
            d.trace_entries
        )?;
    }
    let mut sites: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for seg in &snap.segments {
        *sites.entry(call_site(snap, seg.frames)).or_default() += seg.total_size;
    }
    let mut sites: Vec<(String, u64)> = sites.into_iter().collect();
    sites.sort_by_key(|s| std::cmp::Reverse(s.1));
    writeln!(o, "alive at exit, by call site:")?;
    for (site, bytes) in sites.iter().take(8) {
        writeln!(o, "  {:>10}  {site}", fs((*bytes).into()))?;
    }
    Ok(())
}

/// Reads a rules file (or none).
fn read_rules(path: Option<&Path>) -> anyhow::Result<snapshot::categories::Compiled> {
    let Some(path) = path else { return Ok(Default::default()) };
    let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
    snapshot::categories::Rules::from_json(&text)
        .and_then(|r| r.compile())
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
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
        writeln!(out, "\nno oom event in the trace; the final state, read as a snapshot dumped at an error:")?;
        writeln!(out, "  {}: {}", e.verdict.map_or("undecided", |v| v.label()), e.why)?;
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
    Ok(())
}

fn print_diff(out: &mut impl std::io::Write, d: &snapshot::diff::Diff, a: &Path, b: &Path) -> std::io::Result<()> {
    use snapshot::stats::format_size as fs;
    let delta = |x: u64, y: u64| fs(i128::from(y) - i128::from(x));
    writeln!(out, "A: {}\nB: {}", a.display(), b.display())?;
    writeln!(out, "peak: {} -> {} ({})", fs(d.peak.0.into()), fs(d.peak.1.into()), delta(d.peak.0, d.peak.1))?;
    writeln!(
        out,
        "reserved: {} -> {} ({})",
        fs(d.reserved.0.into()),
        fs(d.reserved.1.into()),
        delta(d.reserved.0, d.reserved.1)
    )?;
    writeln!(out, "at each peak, by category:")?;
    for (c, x, y) in d.categories.iter().filter(|c| c.1 + c.2 > 0) {
        writeln!(out, "  {:>16}  {:>12} -> {:>12} ({})", c.label(), fs((*x).into()), fs((*y).into()), delta(*x, *y))?;
    }
    writeln!(out, "alive at the peak, by call site (largest change first):")?;
    for s in d.sites.iter().take(15) {
        writeln!(
            out,
            "  {:>12}  {} -> {}  {}",
            fs(s.delta()),
            fs(s.a.into()),
            fs(s.b.into()),
            s.site.replace('\n', " <- ")
        )?;
    }
    writeln!(out, "allocations made a different number of times:")?;
    for r in d.allocs.iter().take(15) {
        writeln!(out, "  {} x {} -> {}  {}", fs(r.size.into()), r.count_a, r.count_b, r.site)?;
    }
    writeln!(out, "segments only in A: {}, only in B: {}", d.segments_only_a.len(), d.segments_only_b.len())?;
    for (tag, list) in [("A", &d.segments_only_a), ("B", &d.segments_only_b)] {
        for s in list.iter().take(10) {
            writeln!(out, "  only {tag}: {:#x} {} ({})", s.address, fs(s.size.into()), s.site)?;
        }
    }
    if let Some(n) = &d.align_note {
        writeln!(out, "({n})")?;
    }
    Ok(())
}

/// " (name, total memory, what the process held)" when the snapshot names the device.
fn gpu_text(d: &snapshot::stats::DeviceSummary) -> String {
    use snapshot::stats::format_size as fs;
    let Some(g) = &d.gpu else { return String::new() };
    let used = g.process_used_bytes.map(|u| format!(", {} held by the process", fs(u.into()))).unwrap_or_default();
    format!(" ({}, {}{used})", g.name, fs(g.total_bytes.into()))
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
    for d in s.devices.iter().chain(s.host.as_deref()) {
        let name = if d.device == snapshot::host::HOST_DEVICE {
            "host (pinned memory)".to_string()
        } else {
            format!("device {}", d.device)
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
