//! `memscape html`: one self-contained HTML file with the viewer (embedded at build time) and a
//! snapshot, opened from disk with no network; also written beside each `memscape capture`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::input::{Input, STDIO};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// A snapshot in any form `stats` reads, including the HTML pages of `_memory_viz.py`
    /// (`-`: standard input).
    file: PathBuf,
    /// The HTML file to write (`-`: standard output).
    #[arg(short, long)]
    output: PathBuf,
    /// The name the viewer shows for the snapshot (default: the file's name).
    #[arg(long)]
    name: Option<String>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let Args { file, output, name } = args;
    let assets = viewer()?;
    let input = Input::new(&file)?;
    let loaded = input.load()?;
    write_offline(&assets, &input, &loaded, name.as_deref(), &output)
}

include!(concat!(env!("OUT_DIR"), "/app_assets.rs"));

/// The viewer embedded at build time, or why there is none.
pub(crate) fn viewer() -> anyhow::Result<offline::Assets> {
    app_assets().context(
        "this memscape was built without the viewer: run `scripts/site` (or `trunk build --release`, then build memscape again)",
    )
}

/// Writes the offline page of `input` (already read as `loaded`; `bytes` when it came from
/// standard input) to `output` (`-`: standard output). The viewer calls it `name`, by default
/// the file's name.
pub(crate) fn write_offline(
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
