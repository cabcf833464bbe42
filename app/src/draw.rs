//! Pixels: the timeline, the minimap and the allocator map drawn from view models with
//! Canvas2D. Axes are drawn here too: their ticks are powers of two, which charting
//! libraries (plotters picks decimal ticks) do not offer.

use engine::protocol::{StateView, ViewModel};
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

/// Sizes the canvas to its CSS box at the device's pixel ratio; returns the context and the
/// CSS size.
pub fn prepare(canvas: &HtmlCanvasElement) -> Option<(Ctx, f64, f64)> {
    let dpr = web_sys::window().map_or(1.0, |w| w.device_pixel_ratio()).max(1.0);
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

/// What the timeline shows besides the view model.
pub struct Overlay {
    pub start: f64,
    pub end: f64,
    pub event_step: Option<u32>,
    pub time_axis: bool,
}

pub fn timeline(canvas: &HtmlCanvasElement, vm: &ViewModel, o: &Overlay, th: &Theme) {
    let Some((ctx, w, h)) = prepare(canvas) else { return };
    ctx.set_fill_style_str(&th.bg);
    ctx.fill_rect(0.0, 0.0, w, h);
    let plot_h = h - TOP - BOTTOM;
    let bottom = h - BOTTOM;
    let y_max = vm.y_max.max(1) as f64 * engine::HEADROOM;
    let y = |bytes: f64| bottom - bytes / y_max * plot_h;
    let cols = vm.columns.len().max(1) as f64;
    let col_w = (w - LEFT - RIGHT) / cols;
    let x_of_step = |s: f64| LEFT + (s - o.start) / (o.end - o.start) * (w - LEFT - RIGHT);

    y_grid(&ctx, w, vm.y_max, y_max, &y, th);

    // The bands, summaries, search hits and pin, rasterized by the engine.
    let (n_cols, n_rows) = (vm.columns.len() as u32, (vm.pixels.len() / 4 / vm.columns.len().max(1)) as u32);
    if n_cols > 0 && n_rows > 0 {
        if let Some(img) = image(&vm.pixels, n_cols, n_rows) {
            let _ = ctx.draw_image_with_html_canvas_element_and_dw_and_dh(&img, LEFT, TOP, w - LEFT - RIGHT, plot_h);
        }
    }
    let legend = vm.columns.iter().any(|c| c.allocated.is_some());
    if legend {
        ctx.set_stroke_style_str(&th.fg);
        ctx.set_line_width(1.5);
        ctx.begin_path();
        for (c, col) in vm.columns.iter().enumerate() {
            let Some(a) = col.allocated else { continue };
            let (xx, yy) = (LEFT + (c as f64 + 0.5) * col_w, y(a as f64));
            if c == 0 {
                ctx.move_to(xx, yy);
            } else {
                ctx.line_to(xx, yy);
            }
        }
        ctx.stroke();
        ctx.set_line_width(1.0);
        ctx.set_fill_style_str(&th.fg);
        ctx.set_text_align("right");
        let _ = ctx.fill_text("line: allocated", w - RIGHT - 4.0, TOP + 8.0);
    }

    // Peak marker.
    let px = x_of_step(f64::from(vm.peak_step) + 0.5);
    if (LEFT..=w - RIGHT).contains(&px) {
        ctx.set_stroke_style_str(&th.accent);
        let _ = ctx.set_line_dash(&js_sys::Array::of2(&4.into(), &3.into()));
        ctx.begin_path();
        ctx.move_to(px, TOP);
        ctx.line_to(px, bottom);
        ctx.stroke();
        let _ = ctx.set_line_dash(&js_sys::Array::new());
        ctx.set_fill_style_str(&th.accent);
        let right = px > w - 140.0;
        ctx.set_text_align(if right { "right" } else { "left" });
        // Near the right edge the label goes under the line's legend, not over it.
        let _ = ctx.fill_text(
            &format!("peak {}", format_size(i128::from(vm.peak_bytes))),
            px + if right { -4.0 } else { 4.0 },
            TOP + if right && legend { 20.0 } else { 8.0 },
        );
    }
    if let Some(s) = o.event_step {
        let ex = x_of_step(f64::from(s) + 0.5);
        if (LEFT..=w - RIGHT).contains(&ex) {
            ctx.set_stroke_style_str(&th.fg);
            ctx.begin_path();
            ctx.move_to(ex, TOP);
            ctx.line_to(ex, bottom);
            ctx.stroke();
        }
    }

    // Lanes: OOMs on top, then record_function spans.
    ctx.set_text_align("left");
    ctx.set_fill_style_str(&th.fg);
    let _ = ctx.fill_text("OOM", 4.0, LANE / 2.0 + 2.0);
    let _ = ctx.fill_text("spans", 4.0, LANE * 1.5 + 2.0);
    for &s in &vm.ooms {
        let x = x_of_step(f64::from(s) + 0.5);
        if (LEFT..=w - RIGHT).contains(&x) {
            ctx.set_fill_style_str(&th.accent);
            ctx.begin_path();
            ctx.move_to(x, LANE);
            ctx.line_to(x - 5.0, 2.0);
            ctx.line_to(x + 5.0, 2.0);
            ctx.fill();
        }
    }
    for sp in &vm.spans {
        let row = sp.depth.min(SPAN_ROWS - 1);
        let (x0, x1) = (x_of_step(sp.start).max(LEFT), x_of_step(sp.end).min(w - RIGHT));
        if x1 < LEFT || x0 > w - RIGHT {
            continue;
        }
        let yy = LANE * (1 + row) as f64 + 1.0;
        let unmatched = sp.unmatched_end || sp.unmatched_start;
        ctx.set_fill_style_str(&css(engine::colour(hash(&sp.name))));
        ctx.set_global_alpha(if unmatched { 0.45 } else { 0.85 });
        ctx.fill_rect(x0, yy, (x1 - x0).max(1.0), LANE - 2.0);
        ctx.set_global_alpha(1.0);
        if unmatched {
            ctx.set_stroke_style_str(&th.accent);
            let _ = ctx.set_line_dash(&js_sys::Array::of2(&3.into(), &2.into()));
            ctx.stroke_rect(x0, yy, (x1 - x0).max(1.0), LANE - 2.0);
            let _ = ctx.set_line_dash(&js_sys::Array::new());
        }
        if x1 - x0 > 30.0 {
            ctx.save();
            ctx.begin_path();
            ctx.rect(x0, yy, x1 - x0, LANE - 2.0);
            ctx.clip();
            ctx.set_fill_style_str(&th.fg);
            let label = if sp.unmatched_end { format!("{} (END without START)", sp.name) } else { sp.name.clone() };
            let _ = ctx.fill_text(&label, x0 + 3.0, yy + LANE / 2.0 - 1.0);
            ctx.restore();
        }
    }

    // X axis.
    ctx.set_fill_style_str(&th.fg);
    ctx.set_text_align("center");
    ctx.set_text_baseline("top");
    let span = o.end - o.start;
    let st = count_step(span, ((w - LEFT - RIGHT) / 110.0).max(2.0));
    let t0 = vm.columns.iter().find_map(|c| c.time_us);
    let mut s = (o.start / st).ceil() * st;
    while s < o.end {
        let x = x_of_step(s);
        let label = if o.time_axis {
            let c = (((s - o.start) / span) * cols).floor().clamp(0.0, cols - 1.0) as usize;
            match (vm.columns.get(c).and_then(|c| c.time_us), t0) {
                (Some(t), Some(t0)) => time_label(t - t0),
                _ => String::new(),
            }
        } else {
            format!("{}", s as u64)
        };
        let _ = ctx.fill_text(&label, x, bottom + 5.0);
        s += st;
    }
}

pub fn hash(s: &str) -> u32 {
    s.bytes().fold(2_166_136_261u32, |h, b| (h ^ u32::from(b)).wrapping_mul(16_777_619))
}

pub fn minimap(canvas: &HtmlCanvasElement, vm: &ViewModel, start: f64, end: f64, th: &Theme) {
    let Some((ctx, w, h)) = prepare(canvas) else { return };
    ctx.set_fill_style_str(&th.bg);
    ctx.fill_rect(0.0, 0.0, w, h);
    let cols = vm.columns.len().max(1) as f64;
    let cw = (w - LEFT - RIGHT) / cols;
    let y_max = vm.y_max.max(1) as f64;
    ctx.set_fill_style_str(&th.muted);
    for (c, col) in vm.columns.iter().enumerate() {
        let hh = col.total as f64 / y_max * (h - 4.0);
        ctx.fill_rect(LEFT + c as f64 * cw, h - hh, cw + 0.3, hh);
    }
    let n = f64::from(vm.n_steps.max(1));
    let (x0, x1) = (LEFT + start / n * (w - LEFT - RIGHT), LEFT + end / n * (w - LEFT - RIGHT));
    ctx.set_fill_style_str(&th.accent);
    ctx.set_global_alpha(0.18);
    ctx.fill_rect(x0, 0.0, (x1 - x0).max(2.0), h);
    ctx.set_global_alpha(1.0);
    ctx.set_stroke_style_str(&th.accent);
    ctx.stroke_rect(x0 + 0.5, 0.5, (x1 - x0).max(2.0) - 1.0, h - 1.0);
    ctx.set_fill_style_str(&th.fg);
    ctx.set_font("11px system-ui, sans-serif");
    ctx.set_text_align("right");
    ctx.set_text_baseline("middle");
    let _ = ctx.fill_text("overview", LEFT - 6.0, h / 2.0);
}

/// The allocator after an event: all segments in address order laid end to end as one
/// strip of memory, wrapped into rows; blocks in colour, pending frees hatched in the
/// accent colour, free space in grey, segment starts as thin marks.
/// An empty allocator map, while its state is not known yet (no other file's picture).
pub fn clear(canvas: &HtmlCanvasElement, th: &Theme) {
    let Some((ctx, w, h)) = prepare(canvas) else { return };
    ctx.set_fill_style_str(&th.bg);
    ctx.fill_rect(0.0, 0.0, w, h);
}

pub fn state_map(canvas: &HtmlCanvasElement, st: &StateView, th: &Theme) {
    let Some((ctx, w, h)) = prepare(canvas) else { return };
    ctx.set_fill_style_str(&th.bg);
    ctx.fill_rect(0.0, 0.0, w, h);
    let total: u64 = st.segments.iter().map(|s| s.size).sum();
    if total == 0 {
        ctx.set_fill_style_str(&th.fg);
        ctx.set_font("12px system-ui, sans-serif");
        let _ = ctx.fill_text("no segments reserved at this event", 10.0, 20.0);
        return;
    }
    let rows = 24.0;
    let row_h = h / rows;
    let per_row = (total as f64 / rows).max(1.0);
    let draw = |ctx: &Ctx, from: u64, len: u64, colour: &str| {
        let (a, end) = (from as f64, (from + len) as f64);
        let first = (a / per_row).floor() as u32;
        let last = ((end / per_row).ceil() as u32).max(first + 1);
        ctx.set_fill_style_str(colour);
        for row in first..last.min(rows as u32) {
            let r0 = f64::from(row) * per_row;
            let x0 = (a.max(r0) - r0) / per_row * w;
            let x1 = (end.min(r0 + per_row) - r0) / per_row * w;
            if x1 > x0 {
                ctx.fill_rect(x0, f64::from(row) * row_h + 1.0, (x1 - x0).max(0.6), row_h - 2.0);
            }
        }
    };
    let mut at = 0u64;
    for s in &st.segments {
        draw(&ctx, at, s.size, &th.grid);
        for b in &s.blocks {
            let c = if b.pending_free { th.accent.clone() } else { css(b.rgb) };
            draw(&ctx, at + b.offset, b.size, &c);
        }
        // A one-pixel gap where a segment starts.
        let row = (at as f64 / per_row).floor();
        let x = (at as f64 - row * per_row) / per_row * w;
        ctx.set_fill_style_str(&th.bg);
        ctx.fill_rect(x, row * row_h, 1.0, row_h);
        at += s.size;
    }
}

/// Plot geometry of the category and diff charts.
pub const CHART_TOP: f64 = 10.0;

/// Grid lines and byte labels up to `y_max`, ticks spaced for a highest value of `top`.
fn y_grid(ctx: &Ctx, w: f64, top: u64, y_max: f64, y: &dyn Fn(f64) -> f64, th: &Theme) {
    ctx.set_font("11px system-ui, sans-serif");
    ctx.set_text_baseline("middle");
    ctx.set_text_align("right");
    let step = byte_step(top.max(1)).max(1);
    // Ticks by count, so that no total near u64::MAX (a hostile file) can wrap the sum.
    let ticks = (y_max / step as f64).floor().clamp(0.0, 1000.0) as u64;
    for k in 0..=ticks {
        let t = k.saturating_mul(step);
        let yy = y(t as f64).round() + 0.5;
        ctx.set_stroke_style_str(&th.grid);
        ctx.begin_path();
        ctx.move_to(LEFT, yy);
        ctx.line_to(w - RIGHT, yy);
        ctx.stroke();
        ctx.set_fill_style_str(&th.fg);
        let _ = ctx.fill_text(&format_size(i128::from(t)), LEFT - 6.0, yy);
    }
}

fn x_labels(ctx: &Ctx, w: f64, bottom: f64, lo: f64, hi: f64, th: &Theme, label: &dyn Fn(f64) -> String) {
    ctx.set_fill_style_str(&th.fg);
    ctx.set_text_align("center");
    ctx.set_text_baseline("top");
    let st = count_step(hi - lo, 8.0);
    let mut s = (lo / st).ceil() * st;
    while s <= hi {
        let x = LEFT + (s - lo) / (hi - lo).max(1e-9) * (w - LEFT - RIGHT);
        let _ = ctx.fill_text(&label(s), x, bottom + 5.0);
        s += st;
    }
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

/// Bytes by category over time as stacked areas (one bar per pixel column), hidden
/// categories left out; the peak and the selected step marked.
pub fn categories(
    canvas: &HtmlCanvasElement,
    vm: &engine::protocol::CategoriesVm,
    hidden: &[bool; 8],
    selected: Option<u32>,
    th: &Theme,
) {
    let Some((ctx, w, h)) = prepare(canvas) else { return };
    ctx.set_fill_style_str(&th.bg);
    ctx.fill_rect(0.0, 0.0, w, h);
    let bottom = h - BOTTOM;
    let plot_h = bottom - CHART_TOP;
    let y_max = vm.report.peak_bytes.max(1) as f64 * engine::HEADROOM;
    let y = |b: f64| bottom - b / y_max * plot_h;
    y_grid(&ctx, w, vm.report.peak_bytes, y_max, &y, th);
    let cw = (w - LEFT - RIGHT) / vm.columns.len().max(1) as f64;
    for (c, (step, bytes)) in vm.columns.iter().enumerate() {
        if *step == u32::MAX {
            continue;
        }
        let mut acc = 0.0;
        for (k, &b) in bytes.iter().enumerate() {
            if hidden[k] || b == 0 {
                continue;
            }
            ctx.set_fill_style_str(&css(vm.colours[k]));
            let (y0, y1) = (y(acc), y(acc + b as f64));
            ctx.fill_rect(LEFT + c as f64 * cw, y1, cw + 0.4, y0 - y1);
            acc += b as f64;
        }
    }
    let x_of = |s: f64| LEFT + (s + 0.5 - vm.start) / (vm.end - vm.start).max(1e-9) * (w - LEFT - RIGHT);
    let peak = f64::from(vm.report.peak_step);
    if peak >= vm.start && peak < vm.end {
        vline(&ctx, x_of(peak), CHART_TOP, bottom, &th.accent);
    }
    if let Some(s) = selected {
        vline(&ctx, x_of(f64::from(s)), CHART_TOP, bottom, &th.fg);
    }
    x_labels(&ctx, w, bottom, vm.start, vm.end, th, &|s| format!("{}", s as u64));
}

/// Two totals on one axis: A and B as lines, the difference shaded (B above A in the accent
/// colour, below in green); under them a strip of B - A on its own scale, so that a
/// difference too small for the totals' axis still shows.
pub fn diff(canvas: &HtmlCanvasElement, d: &engine::protocol::Diff, th: &Theme) {
    let Some((ctx, w, h)) = prepare(canvas) else { return };
    ctx.set_fill_style_str(&th.bg);
    ctx.fill_rect(0.0, 0.0, w, h);
    let bottom = h - BOTTOM;
    let strip = ((bottom - CHART_TOP) * 0.25).round();
    let totals_bottom = bottom - strip - 8.0;
    let plot_h = totals_bottom - CHART_TOP;
    let top = d.curve.iter().flat_map(|p| [p.a, p.b]).flatten().max().unwrap_or(1).max(1);
    let y_max = top as f64 * engine::HEADROOM;
    let y = |b: f64| totals_bottom - b / y_max * plot_h;
    y_grid(&ctx, w, top, y_max, &y, th);
    let (lo, hi) = match (d.curve.first(), d.curve.last()) {
        (Some(a), Some(b)) if b.x > a.x => (a.x, b.x),
        _ => return,
    };
    let x_of = |x: f64| LEFT + (x - lo) / (hi - lo) * (w - LEFT - RIGHT);
    let cw = (w - LEFT - RIGHT) / d.curve.len().max(1) as f64;
    let colour = |more: bool| if more { th.accent.clone() } else { "#2e9a5b".to_string() };
    for p in &d.curve {
        let (Some(a), Some(b)) = (p.a, p.b) else { continue };
        if a == b {
            continue;
        }
        ctx.set_fill_style_str(&colour(b > a));
        ctx.set_global_alpha(0.35);
        let (ya, yb) = (y(a as f64), y(b as f64));
        ctx.fill_rect(x_of(p.x), ya.min(yb), cw + 0.4, (ya - yb).abs());
        ctx.set_global_alpha(1.0);
    }
    for (line, pick) in [("#3b6ea5", 0), ("#e0663a", 1)] {
        ctx.set_stroke_style_str(line);
        ctx.set_line_width(1.5);
        ctx.begin_path();
        let mut started = false;
        for p in &d.curve {
            let Some(v) = (if pick == 0 { p.a } else { p.b }) else {
                started = false;
                continue;
            };
            let (xx, yy) = (x_of(p.x) + cw / 2.0, y(v as f64));
            if started {
                ctx.line_to(xx, yy);
            } else {
                ctx.move_to(xx, yy);
                started = true;
            }
        }
        ctx.stroke();
    }
    ctx.set_line_width(1.0);

    // B - A on its own symmetric scale.
    let deltas: Vec<(f64, i128)> = d.curve.iter().filter_map(|p| Some((p.x, p.delta?))).collect();
    // The scale follows most buckets (the 80th percentile of the changes), not the few
    // where the runs' peaks fall apart; those are clipped at the strip's edge.
    let mut sizes: Vec<u128> = deltas.iter().map(|(_, v)| v.unsigned_abs()).filter(|&v| v > 0).collect();
    sizes.sort_unstable();
    let span = sizes.get(sizes.len() * 4 / 5).or(sizes.last()).copied().unwrap_or(1).max(1) as f64;
    let mid = bottom - strip / 2.0;
    ctx.set_stroke_style_str(&th.grid);
    ctx.begin_path();
    ctx.move_to(LEFT, mid.round() + 0.5);
    ctx.line_to(w - RIGHT, mid.round() + 0.5);
    ctx.stroke();
    for &(x, v) in &deltas {
        if v == 0 {
            continue;
        }
        ctx.set_fill_style_str(&colour(v > 0));
        let hh = (v as f64 / span).clamp(-1.0, 1.0) * (strip / 2.0);
        ctx.fill_rect(x_of(x), mid - hh.max(0.0), cw + 0.4, hh.abs().max(1.0));
    }
    ctx.set_fill_style_str(&th.fg);
    ctx.set_font("11px system-ui, sans-serif");
    ctx.set_text_align("right");
    ctx.set_text_baseline("middle");
    let _ = ctx.fill_text("B − A", LEFT - 6.0, mid);
    let _ = ctx.fill_text(&format!("+{}", format_size(span as i128)), LEFT - 6.0, bottom - strip + 6.0);
    let _ = ctx.fill_text(&format!("−{}", format_size(span as i128)), LEFT - 6.0, bottom - 6.0);

    let fmt = |x: f64| -> String {
        if d.align == engine::protocol::Align::Time {
            time_label(x as i64)
        } else if d.align == engine::protocol::Align::Iteration || d.align == engine::protocol::Align::Annotation {
            format!("{x:.0}")
        } else {
            format!("{}", x as u64)
        }
    };
    x_labels(&ctx, w, bottom, lo, hi, th, &fmt);
}
