//! Pixels: every canvas of the page drawn from view models with Canvas2D, a module per
//! view (`timeline`, `allocator`, `charts`, `tuning`); here what they share: the theme, sizing a canvas
//! at the device's pixel ratio, colours, and axes. Axis ticks are powers of two, which
//! charting libraries (plotters picks decimal ticks) do not offer.

mod allocator;
mod area;
mod charts;
mod flame;
mod timeline;
mod tuning;

pub use allocator::state_map;
pub use area::Area;
pub use charts::{categories, diff};
pub use flame::{flame, layout as flame_layout, rows as flame_rows, Placed, ROW as FLAME_ROW};
pub use timeline::{minimap, timeline, Overlay};
pub use tuning::{tuning, Tuning, RECORDED, SIMULATED};

use snapshot::stats::format_size;
use wasm_bindgen::JsCast;
use web_sys::{CanvasRenderingContext2d as Ctx, HtmlCanvasElement};

/// Plot geometry of the timeline canvas, CSS pixels.
pub const LEFT: f64 = 76.0;
pub const RIGHT: f64 = 14.0;
pub const LANE: f64 = 13.0;
pub const SPAN_ROWS: u32 = 3;
pub const TOP: f64 = LANE * (1 + SPAN_ROWS) as f64 + 8.0;
pub const BOTTOM: f64 = 24.0;
/// The font of the plots' labels and axes (the one [`warm`] draws in first).
pub const FONT: &str = "11px system-ui, sans-serif";

/// Colours of the current theme, read from the page's CSS variables.
pub struct Theme {
    pub bg: String,
    pub fg: String,
    pub grid: String,
    pub muted: String,
    pub accent: String,
}

impl Theme {
    pub fn read() -> Theme {
        let get = |name: &str, fallback: &str| -> String {
            web_sys::window()
                .and_then(|w| {
                    let el = w.document()?.document_element()?;
                    w.get_computed_style(&el).ok().flatten()
                })
                .and_then(|s| s.get_property_value(name).ok())
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| fallback.to_string())
        };
        Theme {
            bg: get("--bg", "#ffffff"),
            fg: get("--fg", "#1d1f23"),
            grid: get("--grid", "#e3e5e8"),
            muted: get("--muted", "#9aa0a6"),
            accent: get("--accent", "#d3372c"),
        }
    }
}

/// Device pixels per CSS pixel (at least 1).
pub fn pixel_ratio() -> f64 {
    web_sys::window().map_or(1.0, |w| w.device_pixel_ratio()).max(1.0)
}

/// An empty canvas: the allocator map while its state is not known yet, the timeline and the
/// minimap while no file is shown (no other file's picture).
pub fn clear(canvas: &HtmlCanvasElement, th: &Theme) {
    let Some((ctx, w, h)) = prepare(canvas) else { return };
    ctx.set_fill_style_str(&th.bg);
    ctx.fill_rect(0.0, 0.0, w, h);
}

/// Sizes the canvas to its CSS box at the device's pixel ratio; returns the context and the
/// CSS size.
pub fn prepare(canvas: &HtmlCanvasElement) -> Option<(Ctx, f64, f64)> {
    let dpr = pixel_ratio();
    let (w, h) = (f64::from(canvas.client_width()), f64::from(canvas.client_height()));
    if w <= 0.0 || h <= 0.0 {
        return None;
    }
    let (pw, ph) = ((w * dpr).round() as u32, (h * dpr).round() as u32);
    if canvas.width() != pw || canvas.height() != ph {
        canvas.set_width(pw);
        canvas.set_height(ph);
    }
    let ctx: Ctx = canvas.get_context("2d").ok()??.dyn_into().ok()?;
    let _ = ctx.set_transform(dpr, 0.0, 0.0, dpr, 0.0, 0.0);
    Some((ctx, w, h))
}

/// The first text and the first image a page draws on a canvas cost it a few ms (its font
/// looked up, the scratch canvas made, their code compiled); done once the page is idle, a
/// file's first picture does not wait for them.
pub fn warm() {
    let canvas: Option<HtmlCanvasElement> =
        web_sys::window().and_then(|w| w.document()).and_then(|d| d.create_element("canvas").ok()?.dyn_into().ok());
    let ctx: Option<Ctx> = canvas.and_then(|c| c.get_context("2d").ok()??.dyn_into().ok());
    if let Some(ctx) = ctx {
        ctx.set_font(FONT);
        let _ = ctx.fill_text(&tick_label(3 << 29, 1 << 29), 0.0, 8.0);
    }
    let _ = image(&[0; 16], 2, 2);
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Option<HtmlCanvasElement>> = const { std::cell::RefCell::new(None) };
}

/// The pixels on an off-screen canvas, ready to be drawn (scaled, composited) onto another.
fn image(rgba: &[u8], w: u32, h: u32) -> Option<HtmlCanvasElement> {
    let data = web_sys::ImageData::new_with_u8_clamped_array_and_sh(wasm_bindgen::Clamped(rgba), w, h).ok()?;
    SCRATCH.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = web_sys::window()?.document()?.create_element("canvas").ok()?.dyn_into().ok();
        }
        let canvas = c.as_ref()?;
        if canvas.width() != w || canvas.height() != h {
            canvas.set_width(w);
            canvas.set_height(h);
        }
        let ctx: Ctx = canvas.get_context("2d").ok()??.dyn_into().ok()?;
        ctx.put_image_data(&data, 0.0, 0.0).ok()?;
        Some(canvas.clone())
    })
}

/// `#rrggbb` to 0xRRGGBB.
pub fn rgb_of(css: &str) -> Option<u32> {
    let hex = css.trim().strip_prefix('#')?;
    (hex.len() == 6).then(|| u32::from_str_radix(hex, 16).ok()).flatten()
}

pub fn css(rgb: u32) -> String {
    format!("#{rgb:06x}")
}

/// Tick step for a byte axis: a power of two giving at most about six ticks.
pub fn byte_step(max: u64) -> u64 {
    let target = (max / 5).max(1);
    target.next_power_of_two()
}

/// Tick step for a count axis: 1, 2 or 5 times a power of ten.
pub fn count_step(span: f64, ticks: f64) -> f64 {
    let raw = (span / ticks).max(1.0);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

pub fn time_label(us: i64) -> String {
    let a = us.abs();
    if a >= 10_000_000 {
        format!("{:.1} s", us as f64 / 1e6)
    } else if a >= 10_000 {
        format!("{:.1} ms", us as f64 / 1e3)
    } else {
        format!("{us} µs")
    }
}

pub fn hash(s: &str) -> u32 {
    s.bytes().fold(2_166_136_261u32, |h, b| (h ^ u32::from(b)).wrapping_mul(16_777_619))
}

/// Plot geometry of the category and diff charts.
pub const CHART_TOP: f64 = 10.0;

/// Grid lines and byte labels up to `y_max`, ticks spaced for a highest value of `top`.
fn y_grid(ctx: &Ctx, w: f64, top: u64, y_max: f64, y: &dyn Fn(f64) -> f64, th: &Theme) {
    grid_lines(ctx, w, 0.0, y_max, byte_step(top.max(1)).max(1), y, th);
}

/// Grid lines and byte labels from `lo` to `hi` bytes (a zoomed or based memory axis).
fn y_grid_range(ctx: &Ctx, w: f64, lo: f64, hi: f64, y: &dyn Fn(f64) -> f64, th: &Theme) {
    grid_lines(ctx, w, lo, hi, byte_step(((hi - lo) / 1.04) as u64).max(1), y, th);
}

/// Grid lines and labels at the multiples of `step` from `lo` to `hi`.
fn grid_lines(ctx: &Ctx, w: f64, lo: f64, hi: f64, step: u64, y: &dyn Fn(f64) -> f64, th: &Theme) {
    ctx.set_font(FONT);
    ctx.set_text_baseline("middle");
    ctx.set_text_align("right");
    // Ticks by count, so that no total near u64::MAX (a hostile file) can wrap the sum.
    let first = (lo / step as f64).ceil().max(0.0) as u64;
    let ticks = ((hi - lo) / step as f64).floor().clamp(0.0, 1000.0) as u64;
    for k in first..=first.saturating_add(ticks) {
        let t = k.saturating_mul(step);
        if t as f64 > hi {
            break;
        }
        let yy = y(t as f64).round() + 0.5;
        ctx.set_stroke_style_str(&th.grid);
        ctx.begin_path();
        ctx.move_to(LEFT, yy);
        ctx.line_to(w - RIGHT, yy);
        ctx.stroke();
        ctx.set_fill_style_str(&th.fg);
        let _ = ctx.fill_text(&tick_label(t, step), LEFT - 6.0, yy);
    }
}

/// A byte tick's label with as many decimals as ticks `step` apart need to differ (a zoomed
/// axis at 19 GiB with a tick every 128 MiB reads 19.00, 19.13, 19.25 GiB).
pub fn tick_label(t: u64, step: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let k = (0..units.len()).rev().find(|&k| t as f64 >= 1024f64.powi(k as i32)).unwrap_or(0);
    let unit = 1024f64.powi(k as i32);
    let decimals = if k == 0 { 0 } else { (unit / step.max(1) as f64).log10().ceil().clamp(1.0, 4.0) as usize };
    format!("{:.*}{}", decimals, t as f64 / unit, units[k])
}

fn x_labels(ctx: &Ctx, w: f64, bottom: f64, lo: f64, hi: f64, th: &Theme, label: &dyn Fn(f64) -> String) {
    ctx.set_fill_style_str(&th.fg);
    ctx.set_text_align("center");
    ctx.set_text_baseline("top");
    let st = count_step(hi - lo, 8.0);
    let mut s = (lo / st).ceil() * st;
    while s <= hi {
        let x = Area { w, h: 0.0 }.x(s, (lo, hi));
        let _ = ctx.fill_text(&label(s), x, bottom + 5.0);
        s += st;
    }
}

/// A dashed line across the plot at height `y` (a budget, a device's capacity).
fn dashed_hline(ctx: &Ctx, y: f64, left: f64, right: f64, colour: &str) {
    let _ = ctx.set_line_dash(&js_sys::Array::of2(&6.0.into(), &4.0.into()));
    ctx.set_stroke_style_str(colour);
    ctx.begin_path();
    ctx.move_to(left, y);
    ctx.line_to(right, y);
    ctx.stroke();
    let _ = ctx.set_line_dash(&js_sys::Array::new());
}

fn vline(ctx: &Ctx, x: f64, top: f64, bottom: f64, colour: &str) {
    ctx.set_stroke_style_str(colour);
    ctx.set_line_width(1.5);
    ctx.begin_path();
    ctx.move_to(x.round() + 0.5, top);
    ctx.line_to(x.round() + 0.5, bottom);
    ctx.stroke();
    ctx.set_line_width(1.0);
}
