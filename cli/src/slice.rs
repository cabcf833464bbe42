//! `memscape slice`: a window of a recording written as a smaller snapshot in PyTorch's own
//! format, which PyTorch's viewer and memscape both open (`snapshot::slice`).

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::bail;
use snapshot::slice::Window;

use crate::input::{limits, load, load_with};
use crate::write::write_whole;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("window").required(true).args(["last", "entries", "time", "annotation"])))]
pub(crate) struct Args {
    /// The snapshot to cut (pickle, .pickle.gz, JSON or a _memory_viz.py HTML page).
    file: PathBuf,
    /// Where the window goes (a pickle, protocol 4).
    #[arg(short, long)]
    output: PathBuf,
    /// Keep each device's last N trace entries.
    #[arg(long, value_name = "N")]
    last: Option<usize>,
    /// Keep the entries A..B by index (A inclusive, B exclusive; either may be left out).
    #[arg(long, value_name = "A..B")]
    entries: Option<String>,
    /// Keep the entries whose time_us (microseconds, as the file writes them) lies in T0..T1,
    /// both inclusive; either may be left out.
    #[arg(long, value_name = "T0..T1")]
    time: Option<String>,
    /// Keep the entries between the first START of this annotation and the END after it.
    #[arg(long, value_name = "NAME")]
    annotation: Option<String>,
    /// The device to keep (the others keep neither entries nor segments). Default: every device.
    #[arg(long, value_name = "D")]
    device: Option<usize>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let window = window(&args)?;
    let Args { file, output, device, .. } = args;
    if std::path::absolute(&file)? == std::path::absolute(&output)? {
        bail!("{}: the slice would overwrite its input; name another file with -o", output.display());
    }
    // A window of entries is read as such: memory follows it, not the file.
    let loaded = match window {
        Window::Last(n) => load_with(&file, snapshot::Limits { keep_last_entries: Some(n as u64), ..limits() })?,
        Window::Entries { start, end } => {
            let range = (start as u64, end.map_or(u64::MAX, |e| e as u64));
            load_with(&file, snapshot::Limits { keep_entries: Some(range), ..limits() })?
        }
        _ => load(&file)?,
    };
    let snap = &loaded.snapshot;
    let shown = file.display().to_string();
    let devices = snapshot::slice::devices(snap, device).map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    let source = file.file_name().map_or(shown.clone(), |n| n.to_string_lossy().into_owned());
    let (cut, what) =
        snapshot::slice::slice(snap, &window, &devices, &source).map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    if what.ranges.iter().all(|r| r.start == r.end) {
        let sizes: Vec<String> =
            what.ranges.iter().map(|r| format!("device {} has {} entries", r.device, r.of)).collect();
        bail!("{shown}: {window} keeps no entry ({})", sizes.join(", "));
    }
    write_whole(&output, &cut)?;
    let mut err = std::io::stderr().lock();
    for r in &what.ranges {
        writeln!(err, "device {}: entries {}..{} of {} ({} kept)", r.device, r.start, r.end, r.of, r.end - r.start)?;
    }
    if what.orphan_blocks > 0 {
        writeln!(
            err,
            "warning: {} blocks alive at the window's end lie in no segment the trace shows; left out",
            what.orphan_blocks
        )?;
    }
    if what.dropped_host {
        writeln!(err, "note: pinned host memory is not kept in a slice")?;
    }
    println!("{}: {} of {shown}", output.display(), window);
    Ok(())
}

fn window(args: &Args) -> anyhow::Result<Window> {
    if let Some(n) = args.last {
        return Ok(Window::Last(n));
    }
    if let Some(s) = &args.entries {
        let (start, end) = bounds::<usize>(s, "--entries")?;
        return Ok(Window::Entries { start: start.unwrap_or(0), end });
    }
    if let Some(s) = &args.time {
        let (from, to) = bounds::<i64>(s, "--time")?;
        return Ok(Window::Time { from, to });
    }
    match &args.annotation {
        Some(name) => Ok(Window::Annotation(name.clone())),
        None => bail!("choose a window: --last, --entries, --time or --annotation"),
    }
}

/// `A..B`, `A..` or `..B`.
fn bounds<T: std::str::FromStr>(s: &str, flag: &str) -> anyhow::Result<(Option<T>, Option<T>)> {
    let Some((a, b)) = s.split_once("..") else { bail!("{flag} {s:?}: expected A..B (either end may be left out)") };
    let one = |x: &str| -> anyhow::Result<Option<T>> {
        let x = x.trim();
        if x.is_empty() {
            return Ok(None);
        }
        x.parse().map(Some).map_err(|_| anyhow::anyhow!("{flag} {s:?}: {x:?} is not a whole number"))
    };
    Ok((one(a)?, one(b)?))
}
