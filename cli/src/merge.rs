//! `memscape merge`: PyTorch's snapshot and a driver capture of the same process as one.

use std::path::PathBuf;

use anyhow::{bail, Context as _};

use crate::input::load;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// PyTorch's snapshot (`torch.cuda.memory._dump_snapshot`).
    torch: PathBuf,
    /// The driver capture of the same process (`memscape capture`).
    capture: PathBuf,
    /// Where the merged snapshot goes (a pickle).
    #[arg(short, long)]
    output: PathBuf,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let Args { torch, capture, output } = args;
    for input in [&torch, &capture] {
        if std::path::absolute(input)? == std::path::absolute(&output)? {
            bail!("{}: the merged snapshot would overwrite an input; name another file with -o", output.display());
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
