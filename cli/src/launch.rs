//! `memscape capture`: runs a CUDA program under the recorder (the `capture` crate's injection
//! library), optionally with PyTorch's own recording merged in, and summarizes what each of its
//! processes wrote.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use capture::env as vars;

use crate::html::{viewer, write_offline};
use crate::input::{load, Input};
use crate::stats::gpu_text;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Where to write the snapshot.
    #[arg(long, default_value = "memscape-capture.pickle")]
    out: PathBuf,
    /// Events kept per device; older ones are dropped, what they allocated stays visible.
    #[arg(long, default_value_t = capture::env::DEFAULT_MAX_ENTRIES)]
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
}

/// Runs the program; its exit code is memscape's.
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Args { out, max_entries, every, html, torch, stacks, command } = args;
    let torch = torch.then_some(capture::torch::Settings { max_entries, stacks });
    capture(&out, max_entries, every, html, torch, &command)
}

/// Finds the injection library: `MEMSCAPE_CAPTURE_LIB`, else next to this executable (a
/// cargo build), else in `../lib/memscape/` from it (where the wheel installs it: `bin/` and
/// `lib/` of the same environment).
fn injection_library() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(vars::CAPTURE_LIB) {
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
        .env(vars::CUDA_INJECTION, &lib)
        .env(vars::CAPTURE_OUT, &abs_out)
        .env(vars::CAPTURE_RUN, std::process::id().to_string())
        .env(vars::CAPTURE_MAX_ENTRIES, max_entries.to_string());
    if let Some(s) = every {
        cmd.env(vars::CAPTURE_EVERY, s.to_string());
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
    writeln!(o, "alive at exit, by call site:")?;
    for (site, bytes) in capture::sites::bytes_by_call_site(snap).iter().take(8) {
        writeln!(o, "  {:>10}  {site}", fs((*bytes).into()))?;
    }
    Ok(())
}
