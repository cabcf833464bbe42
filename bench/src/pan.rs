//! `cargo run --release -p bench -- pan [--json] FILE...`: the exact views of `e2e/bench.js`'s
//! pan and zoom keys, natively. Each file is opened as the viewer's worker opens it and its
//! background analyses finish; then the keys the benchmark presses (three zooms in, then 40
//! of D, W, A, S in turn: a tenth of the window, a factor of 0.8 or 1.25 about its middle,
//! as `app/src/keys.rs` moves it, with the page's own arithmetic, `engine::window`), each one
//! view of the plot of the benchmark's window, timed in `Engine::handle` alone. The native
//! baseline of the browser's pan/zoom frame (there: the worker's view, its transfer and the
//! page's drawing).

use std::path::Path;
use std::time::Instant;

use anyhow::Context as _;
use engine::protocol::{Request, Response};
use engine::{window, Engine, Loading};

use crate::open::plot_query;

/// Runs the benchmark: a table, or with `--json` (first) a JSON object a line per file
/// (`e2e/bench.js` reads those).
pub fn main(args: &[String]) -> anyhow::Result<()> {
    let json = args.first().is_some_and(|a| a == "--json");
    let paths = &args[usize::from(json)..];
    anyhow::ensure!(!paths.is_empty(), "pan takes the snapshots to open");
    if !json {
        println!("{:<42} {:>6} {:>6} {:>10} {:>8} {:>8}", "file", "MB", "views", "median", "p95", "max");
    }
    for path in paths {
        let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
        let mut ms = views(&bytes)?;
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
        let name = Path::new(path).file_name().map_or(path.clone(), |n| n.to_string_lossy().into_owned());
        let mb = bytes.len() as f64 / 1e6;
        if json {
            let row = serde_json::json!({
                "file": name, "mb": mb, "views": ms.len(),
                "median_ms": at(0.5), "p95_ms": at(0.95), "max_ms": at(1.0),
            });
            println!("{row}");
        } else {
            println!("{name:<42} {mb:>6.1} {:>6} {:>8.1}ms {:>6.1}ms {:>6.1}ms", ms.len(), at(0.5), at(0.95), at(1.0));
        }
    }
    Ok(())
}

/// The keys' views of one file, in ms each.
fn views(bytes: &[u8]) -> anyhow::Result<Vec<f64>> {
    let mut e = Engine::new();
    let mut l = Loading::new("bench.pickle", bytes.len() as u64, 0.0);
    bytes.chunks(4 << 20).try_for_each(|c| l.feed(c)).map_err(anyhow::Error::msg)?;
    let info = e.finish(1, l, &|| 0.0).map_err(anyhow::Error::msg)?;
    let device = info.default_device.unwrap_or(0);
    // The whole trace first, as a tab opens: its answer gives the window's steps.
    let (_, _, n) = timed(&mut e, device, 0.0, 0.0)?;
    while e.work(1 << 16) {}
    // As the page's keys move the window: about its middle, by a tenth of it.
    let zoom = |(a, b): (f64, f64), factor: f64| window::zoomed(a, b, n, factor, None);
    let pan = |(a, b): (f64, f64), by: f64| window::panned(a, b, n, by);
    let mut w = (0.0, n);
    let mut ms = Vec::new();
    for i in 0..43 {
        w = match i {
            0..=2 => zoom(w, 0.8),
            _ => match (i - 3) % 4 {
                0 => pan(w, (w.1 - w.0) * 0.1),
                1 => zoom(w, 0.8),
                2 => pan(w, -(w.1 - w.0) * 0.1),
                _ => zoom(w, 1.25),
            },
        };
        ms.push(timed(&mut e, device, w.0, w.1)?.0);
    }
    Ok(ms)
}

/// One view of the window `start..end` of `device` (0..0: the whole trace): the time
/// `Engine::handle` took, and the window it drew.
fn timed(e: &mut Engine, device: u32, start: f64, end: f64) -> anyhow::Result<(f64, f64, f64)> {
    let t = Instant::now();
    let r = e.handle(Request::View(plot_query(device, start, end, false)));
    let spent = t.elapsed().as_secs_f64() * 1000.0;
    match r {
        Response::View(v) => Ok((spent, v.start, v.end)),
        other => anyhow::bail!("not a view: {other:?}"),
    }
}
