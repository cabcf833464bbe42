//! `cargo run --release -p bench -- open FILE...`: what the viewer's worker does to open a
//! file, natively, phase by phase: reading in the worker's 4 MiB slices, the rest of the
//! load (`Engine::finish`: the summary and the default device's layout), the first view the
//! page asks for (the plot's size in the benchmark's browser window), the minimap's totals
//! and the first rows of the event list. Medians of 5, each on a fresh engine: the native
//! baseline of `e2e/bench-open.mjs`, which times the same steps in the browser.

use std::path::Path;
use std::time::Instant;

use anyhow::Context as _;
use engine::protocol::{Kind, PaletteVm, Request, Response, ViewQuery};
use engine::{Engine, Loading};

/// The plot of the benchmark's 1400 x 1000 window: its columns and pixel rows.
const COLUMNS: u32 = 1188;
const ROWS: u32 = 300;

/// Runs the benchmark.
pub fn main(args: &[String]) -> anyhow::Result<()> {
    anyhow::ensure!(!args.is_empty(), "open takes the snapshots to open");
    println!(
        "{:<42} {:>6} {:>8} {:>8} {:>10} {:>8} {:>8} {:>8}",
        "file", "MB", "read", "finish", "first view", "minimap", "events", "MB/s"
    );
    for path in args {
        let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
        let mut runs: Vec<[f64; 5]> = (0..5).map(|_| phases(&bytes)).collect::<anyhow::Result<_>>()?;
        let mut m = [0.0; 5];
        for (i, slot) in m.iter_mut().enumerate() {
            runs.sort_by(|a, b| a[i].total_cmp(&b[i]));
            *slot = runs[runs.len() / 2][i];
        }
        let name = Path::new(path).file_name().map_or(path.clone(), |n| n.to_string_lossy().into_owned());
        let mb = bytes.len() as f64 / 1e6;
        println!(
            "{name:<42} {mb:>6.1} {:>6.1}ms {:>6.1}ms {:>8.1}ms {:>6.1}ms {:>6.1}ms {:>8.0}",
            m[0],
            m[1],
            m[2],
            m[3],
            m[4],
            mb / (m[0] / 1000.0)
        );
    }
    Ok(())
}

/// The view the page asks of document 1's `device` for the benchmark's plot: the window
/// `start..end` (0..0: the whole trace), from the baseline; or the minimap's totals.
pub fn plot_query(device: u32, start: f64, end: f64, totals_only: bool) -> ViewQuery {
    ViewQuery {
        doc: 1,
        device,
        kind: Kind::Blocks,
        start,
        end,
        columns: COLUMNS,
        rows: if totals_only { 1 } else { ROWS },
        y: None,
        baseline: !totals_only,
        totals_only,
        pinned: None,
        palette: PaletteVm::default(),
    }
}

/// One fresh open: [read, finish, first view, minimap, events] in ms.
fn phases(bytes: &[u8]) -> anyhow::Result<[f64; 5]> {
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
    let mut e = Engine::new();
    let t = Instant::now();
    let mut l = Loading::new("bench.pickle", bytes.len() as u64, 0.0);
    bytes.chunks(4 << 20).try_for_each(|c| l.feed(c)).map_err(anyhow::Error::msg)?;
    let read = ms(t);
    let t = Instant::now();
    let info = e.finish(1, l, &|| 0.0).map_err(anyhow::Error::msg)?;
    let finish = ms(t);
    let device = info.default_device.unwrap_or(0);
    let view = |totals_only: bool| Request::View(plot_query(device, 0.0, 0.0, totals_only));
    let mut timed = |r: Request| {
        let t = Instant::now();
        let resp = e.handle(r);
        let spent = ms(t);
        match resp {
            Response::Error(why) => Err(anyhow::anyhow!(why)),
            _ => Ok(spent),
        }
    };
    let first = timed(view(false))?;
    let minimap = timed(view(true))?;
    let events = timed(Request::Events { doc: 1, device, first: 0, count: 15 })?;
    Ok([read, finish, first, minimap, events])
}
