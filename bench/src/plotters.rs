//! `cargo run --release -p bench -- plotters FILE...`: the viewer's own raster
//! (`engine::raster::raster`, what the worker runs for every view) against `plotters` drawing
//! the same bands as filled rectangles into an in-memory RGB buffer of the same size
//! (`BitMapBackend::with_buffer`), natively, medians of 21 each.
//!
//! The bands are the first view the page asks for (the benchmark's 1188 x 300 plot, as in
//! `open.rs`), taken from the engine's answer, so both draw exactly what the viewer draws;
//! the raster is checked to give the answer's pixels. Plotters gets the most favourable
//! set-up: a coordinate system whose pixels are the plot's columns and rows exactly, no axes,
//! no labels, one `draw_series` of rectangles plus the grey of the bytes no band accounts for.
//!
//! Not like for like, and said in the output: plotters has no sub-pixel coverage. It maps
//! both edges of a rectangle to whole pixels, so a band thinner than a pixel row is dropped
//! (both edges in one row) or painted a whole row (an edge crosses a row boundary), and the
//! last rectangle painted on a row wins it; the raster adds each band to the rows it covers
//! in proportion to its area. The table counts the rectangles and what became of the thin
//! ones, and how many pixels the two images differ in.

use std::path::Path;
use std::time::Instant;

use ::plotters::backend::BitMapBackend;
use ::plotters::coord::types::RangedCoordf64;
use ::plotters::coord::Shift;
use ::plotters::prelude::*;
use anyhow::{anyhow, Context as _};
use engine::protocol::{Request, Response, ViewModel};
use engine::raster::{self, Palette, Rows};
use engine::{Engine, Loading};

const RUNS: usize = 21;

/// Runs the benchmark.
pub fn main(args: &[String]) -> anyhow::Result<()> {
    anyhow::ensure!(!args.is_empty(), "plotters takes the snapshots to draw");
    let mut notes = Vec::new();
    println!(
        "{:<40} {:>7} {:>6} {:>12} {:>11} {:>6} {:>7} {:>8} {:>7} {:>7} {:>9}",
        "file",
        "bands",
        "size",
        "memscape ms",
        "plotters ms",
        "ratio",
        "rects",
        "<1 row",
        "dropped",
        "widened",
        "px differ"
    );
    for path in args {
        let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
        let vm = first_view(&bytes)?;
        let (w, h) = (vm.columns.len() as u32, (vm.pixels.len() / 4 / vm.columns.len().max(1)) as u32);
        let rows = Rows { count: h, lo: vm.y_lo as f64, top: vm.y_top as f64 };
        let pal = Palette::default();
        let ours = raster::raster(&vm.bands, &vm.columns, rows, false, None, &pal);
        anyhow::ensure!(ours.rgba == vm.pixels, "{path}: the raster differs from the view's pixels");

        let (mut t_ours, mut t_plotters) = (Vec::new(), Vec::new());
        let mut theirs = Vec::new();
        for _ in 0..RUNS {
            let t = Instant::now();
            std::hint::black_box(raster::raster(&vm.bands, &vm.columns, rows, false, None, &pal));
            t_ours.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            theirs = draw_plotters(&vm, w, h, pal.summarized)?;
            std::hint::black_box(&theirs);
            t_plotters.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let (ours_ms, plotters_ms) = (crate::median(t_ours), crate::median(t_plotters));
        let c = census(&vm, w, h)?;
        let differ = differing_pixels(&ours.rgba, &theirs);
        let name = Path::new(path).file_name().map_or(path.clone(), |n| n.to_string_lossy().into_owned());
        println!(
            "{name:<40} {:>7} {:>6} {ours_ms:>12.2} {plotters_ms:>11.2} {:>5.1}x {:>7} {:>8} {:>7} {:>7} {:>8.1}%",
            vm.bands.len(),
            format!("{w}x{h}"),
            plotters_ms / ours_ms,
            c.rects,
            c.thin,
            c.dropped,
            c.widened,
            100.0 * differ as f64 / f64::from(w * h)
        );
        notes.push(format!(
            "{name}: {} of {} bands are thinner than a pixel row; plotters drops {} ({:.1}% of the bands' area) \
             and paints {} as whole rows ({:.1}x their area); the raster blends them all by area",
            c.thin,
            vm.bands.len(),
            c.dropped,
            100.0 * c.dropped_area / c.band_area.max(f64::MIN_POSITIVE),
            c.widened,
            c.widened_px / c.widened_area.max(f64::MIN_POSITIVE),
        ));
    }
    println!();
    println!(
        "median of {RUNS} runs each, this machine, one thread; ratio = plotters / memscape. rects: rectangles \
         given to plotters (the bands and the grey of unaccounted bytes); <1 row: bands thinner than a pixel row; \
         px differ: pixels whose colour differs by more than 2/255 in a channel (the raster composited on white)"
    );
    for n in notes {
        println!("{n}");
    }
    Ok(())
}

/// The first view of the file's default device, as the page asks it (see `open.rs`).
fn first_view(bytes: &[u8]) -> anyhow::Result<ViewModel> {
    let mut e = Engine::new();
    let mut l = Loading::new("bench.pickle", bytes.len() as u64, 0.0);
    bytes.chunks(4 << 20).try_for_each(|c| l.feed(c)).map_err(anyhow::Error::msg)?;
    let info = e.finish(1, l, &|| 0.0).map_err(anyhow::Error::msg)?;
    let q = crate::open::plot_query(info.default_device.unwrap_or(0), 0.0, 0.0, false);
    match e.handle(Request::View(q)) {
        Response::View(vm) => Ok(vm),
        Response::Error(why) => Err(anyhow!(why)),
        _ => Err(anyhow!("the view request got another answer")),
    }
}

/// The plot's area with a coordinate system whose pixels are the columns and the byte rows
/// (column k is pixel k; bytes `y_lo..y_top` are pixel rows `h..0`).
type Plot<'a> = DrawingArea<BitMapBackend<'a>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

fn plot<'a>(root: &DrawingArea<BitMapBackend<'a>, Shift>, vm: &ViewModel, w: u32, h: u32) -> Plot<'a> {
    root.apply_coord_spec(Cartesian2d::<RangedCoordf64, RangedCoordf64>::new(
        0.0..f64::from(w),
        vm.y_lo as f64..vm.y_top as f64,
        (0..w as i32, h as i32..0),
    ))
}

fn colour(rgb: u32) -> RGBColor {
    RGBColor((rgb >> 16) as u8, (rgb >> 8) as u8, rgb as u8)
}

/// Plotters drawing the view into a fresh RGB buffer: every band a filled rectangle, then
/// the grey of the bytes no band accounts for, as the raster does.
fn draw_plotters(vm: &ViewModel, w: u32, h: u32, summarized: u32) -> anyhow::Result<Vec<u8>> {
    let mut buf = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let area = plot(&root, vm, w, h);
        for r in rectangles(vm, summarized) {
            area.draw(&r).map_err(|e| anyhow!("{e}"))?;
        }
        root.present().map_err(|e| anyhow!("{e}"))?;
    }
    Ok(buf)
}

/// The rectangles plotters is given: (columns, bytes) corners and colour.
fn rectangles(vm: &ViewModel, summarized: u32) -> impl Iterator<Item = Rectangle<(f64, f64)>> + '_ {
    let bands = vm.bands.iter().map(|b| {
        let (x0, x1) = (f64::from(b.first_column), f64::from(b.last_column) + 1.0);
        let (y0, y1) = (b.offset_bytes as f64, b.offset_bytes as f64 + b.size_bytes as f64);
        Rectangle::new([(x0, y1), (x1, y0)], colour(b.rgb).filled())
    });
    let grey = vm.columns.iter().enumerate().filter(|(_, c)| c.total > c.drawn).map(move |(k, c)| {
        Rectangle::new([(k as f64, c.total as f64), (k as f64 + 1.0, c.drawn as f64)], colour(summarized).filled())
    });
    bands.chain(grey)
}

/// What became of the bands in plotters' hands.
#[derive(Default)]
struct Census {
    rects: usize,
    /// Bands in the plot thinner than a pixel row.
    thin: usize,
    /// Of those, painted on no row at all / on a whole row or more.
    dropped: usize,
    widened: usize,
    /// Pixel areas (pixel rows x columns) inside the plot: of all bands, of the dropped ones,
    /// of the widened ones as they are and as plotters paints them.
    band_area: f64,
    dropped_area: f64,
    widened_area: f64,
    widened_px: f64,
}

/// Maps every band's edges with plotters' own coordinate translation (`map_coordinate`),
/// clipped to the plot as its bitmap backend clips, and counts.
fn census(vm: &ViewModel, w: u32, h: u32) -> anyhow::Result<Census> {
    let mut buf = vec![0u8; (w * h * 3) as usize];
    let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
    let area = plot(&root, vm, w, h);
    let mut c = Census { rects: rectangles(vm, 0).count(), ..Census::default() };
    let scale = f64::from(h) / (vm.y_top as f64 - vm.y_lo as f64).max(1.0);
    for b in vm.bands.iter() {
        let (lo, hi) = (b.offset_bytes as f64, b.offset_bytes as f64 + b.size_bytes as f64);
        // Exact height in pixel rows, inside the plot.
        let exact = ((hi.min(vm.y_top as f64) - lo.max(vm.y_lo as f64)) * scale).max(0.0);
        if exact <= 0.0 {
            continue;
        }
        let cols = f64::from(b.last_column.min(w - 1) - b.first_column + 1);
        // Plotters' pixel rows (from the top), clipped as `fill_rect_fast` clips.
        let top = area.map_coordinate(&(0.0, hi)).1.clamp(0, h as i32);
        let bottom = area.map_coordinate(&(0.0, lo)).1.clamp(0, h as i32);
        let painted = f64::from((bottom - top).max(0));
        c.band_area += exact * cols;
        if exact < 1.0 {
            c.thin += 1;
            if painted == 0.0 {
                c.dropped += 1;
                c.dropped_area += exact * cols;
            } else {
                c.widened += 1;
                c.widened_area += exact * cols;
                c.widened_px += painted * cols;
            }
        }
    }
    Ok(c)
}

/// Pixels whose colours differ by more than 2 in a channel: the raster's RGBA composited on
/// white (what plotters' white background gives where nothing is drawn) against plotters' RGB.
fn differing_pixels(rgba: &[u8], rgb: &[u8]) -> usize {
    rgba.chunks_exact(4)
        .zip(rgb.chunks_exact(3))
        .filter(|(a, b)| {
            let alpha = f32::from(a[3]) / 255.0;
            (0..3).any(|k| {
                let over_white = f32::from(a[k]) * alpha + 255.0 * (1.0 - alpha);
                (over_white - f32::from(b[k])).abs() > 2.0
            })
        })
        .count()
}
