//! `memscape convert`: any file the reader takes (a snapshot as JSON, gzip, zstd or a
//! `_memory_viz.py` HTML page, ...) written as a snapshot in PyTorch's own pickle format, which
//! `_memory_viz.py` and PyTorch's viewer open (`snapshot::write`).

use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::input::Input;
use crate::write::write_whole;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The file to convert: anything `stats` reads (pickle, .pickle.gz, zstd, JSON or a
    /// _memory_viz.py HTML page; `-`: standard input).
    file: PathBuf,
    /// Where the snapshot goes (a pickle, protocol 4).
    #[arg(short, long)]
    output: PathBuf,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let Args { file, output } = args;
    if file != Path::new(crate::input::STDIO) && std::path::absolute(&file)? == std::path::absolute(&output)? {
        bail!("{}: the conversion would overwrite its input; name another file with -o", output.display());
    }
    let input = Input::new(&file)?;
    let loaded = input.load()?;
    let shown = input.shown();
    for w in &loaded.warnings {
        eprintln!("memscape: {shown}: warning: {w}");
    }
    let snap = &loaded.snapshot;
    let bytes = write_whole(&output, snap)?;
    let count = |n: usize| if n == 1 { "1 entry".to_string() } else { format!("{n} entries") };
    let mut entries: Vec<String> =
        snap.devices().into_iter().map(|d| format!("device {d}: {}", count(snap.trace(d).len()))).collect();
    if let Some(host) = snap.host_traces.as_ref().filter(|t| !t.is_empty()) {
        entries.push(format!("host: {}", count(host.len())));
    }
    if entries.is_empty() {
        entries.push("no device has entries or segments".into());
    }
    println!(
        "{}: {shown} ({}) as a pickle, {} ({bytes} bytes); {}",
        output.display(),
        loaded.format,
        snapshot::stats::format_size(bytes.into()),
        entries.join(", ")
    );
    Ok(())
}
