//! The timeline (bands, lanes of OOMs and annotations, axes) and its minimap.

use engine::protocol::{OutlineVm, ViewModel};
use web_sys::HtmlCanvasElement;

use super::*;

/// What the timeline shows besides the view model.
pub struct Overlay<'a> {
    pub start: f64,
    pub end: f64,
    pub event_step: Option<u32>,
    pub time_axis: bool,
    /// Where the allocation under the pointer is drawn.
    pub outline: &'a [OutlineVm],
    /// A drag on the memory axis: from and to (CSS y).
    pub y_pick: Option<(f64, f64)>,
}

pub fn timeline(canvas: &HtmlCanvasElement, vm: &ViewModel, o: &Overlay, th: &Theme) {
    let Some((ctx, w, h)) = prepare(canvas) else { return };
    ctx.set_fill_style_str(&th.bg);
    ctx.fill_rect(0.0, 0.0, w, h);
    let area = Area { w, h };
    let (plot_h, bottom) = (area.height(), area.bottom());
    let (lo, top) = (vm.y_lo as f64, vm.y_top.max(vm.y_lo + 1) as f64);
    let y = |bytes: f64| area.y(bytes, (lo, top));
    let cols = vm.columns.len().max(1) as f64;
    let col_w = area.column_width(vm.columns.len());
    let x_of_step = |s: f64| area.x(s, (o.start, o.end));

    y_grid_range(&ctx, w, lo, top, &y, th);

    // The bands, blends, search hits and pin, rasterized by the engine at the device's
    // pixels: copied, not resampled.
    let (n_cols, n_rows) = (vm.columns.len() as u32, (vm.pixels.len() / 4 / vm.columns.len().max(1)) as u32);
    if n_cols > 0 && n_rows > 0 {
        if let Some(img) = image(&vm.pixels, n_cols, n_rows) {
            ctx.set_image_smoothing_enabled(false);
            let _ = ctx.draw_image_with_html_canvas_element_and_dw_and_dh(&img, LEFT, TOP, area.width(), plot_h);
            ctx.set_image_smoothing_enabled(true);
        }
    }
    // The allocation under the pointer, outlined where it is drawn.
    if !o.outline.is_empty() {
        ctx.save();
        ctx.begin_path();
        ctx.rect(LEFT, TOP, area.width(), plot_h);
        ctx.clip();
        ctx.set_line_width(1.5);
        for b in o.outline {
            let (x0, x1) = (LEFT + f64::from(b.first) * col_w, LEFT + f64::from(b.last + 1) * col_w);
            let (y0, y1) = (y((b.offset + b.size) as f64), y(b.offset as f64));
            let hgt = (y1 - y0).max(1.0);
            ctx.set_stroke_style_str(&th.bg);
            ctx.stroke_rect(x0 - 1.0, y0 - 1.0, x1 - x0 + 2.0, hgt + 2.0);
            ctx.set_stroke_style_str(&th.fg);
            ctx.stroke_rect(x0, y0, x1 - x0, hgt);
        }
        ctx.restore();
        ctx.set_line_width(1.0);
    }
    // A memory range being picked on the axis.
    if let Some((a, b)) = o.y_pick {
        let (a, b) = (a.min(b).max(TOP), a.max(b).min(bottom));
        ctx.set_fill_style_str(&th.accent);
        ctx.set_global_alpha(0.15);
        ctx.fill_rect(LEFT, a, area.width(), b - a);
        ctx.set_global_alpha(1.0);
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
    // The OOM marks, one path (a trace can hold an error at every step).
    ctx.set_fill_style_str(&th.accent);
    ctx.begin_path();
    for &s in &vm.ooms {
        let x = x_of_step(f64::from(s) + 0.5);
        if (LEFT..=w - RIGHT).contains(&x) {
            ctx.move_to(x, LANE);
            ctx.line_to(x - 5.0, 2.0);
            ctx.line_to(x + 5.0, 2.0);
            ctx.close_path();
        }
    }
    ctx.fill();
    // A zoomed-out lane holds thousands of spans narrower than a pixel (14,000 in a view of
    // a 1 GB file, each a colour set and a rect: most of a frame): of those, one per pixel
    // column of a row is drawn, and the colour is set only when it changes.
    let mut last_px = [f64::NEG_INFINITY; SPAN_ROWS as usize];
    let mut style = (u32::MAX, f64::NAN);
    for sp in &vm.spans {
        let row = sp.depth.min(SPAN_ROWS - 1);
        let (x0, x1) = (x_of_step(sp.start).max(LEFT), x_of_step(sp.end).min(w - RIGHT));
        if x1 < LEFT || x0 > w - RIGHT {
            continue;
        }
        let unmatched = sp.unmatched_end || sp.unmatched_start;
        let width = (x1 - x0).max(1.0);
        let last = &mut last_px[row as usize];
        if !unmatched && x1 - x0 < 1.0 && x0.floor() <= *last {
            continue;
        }
        *last = (x0 + width).floor() - 1.0;
        let yy = LANE * (1 + row) as f64 + 1.0;
        let colour = (engine::colour(hash(&sp.name)), if unmatched { 0.45 } else { 0.85 });
        if colour.0 != style.0 {
            ctx.set_fill_style_str(&css(colour.0));
        }
        if colour.1 != style.1 {
            ctx.set_global_alpha(colour.1);
        }
        style = colour;
        ctx.fill_rect(x0, yy, width, LANE - 2.0);
        if unmatched {
            ctx.set_global_alpha(1.0);
            style.1 = 1.0;
            ctx.set_stroke_style_str(&th.accent);
            let _ = ctx.set_line_dash(&js_sys::Array::of2(&3.into(), &2.into()));
            ctx.stroke_rect(x0, yy, width, LANE - 2.0);
            let _ = ctx.set_line_dash(&js_sys::Array::new());
        }
        if x1 - x0 > 30.0 {
            ctx.save();
            ctx.set_global_alpha(1.0);
            ctx.begin_path();
            ctx.rect(x0, yy, x1 - x0, LANE - 2.0);
            ctx.clip();
            ctx.set_fill_style_str(&th.fg);
            let label = if sp.unmatched_end { format!("{} (END without START)", sp.name) } else { sp.name.clone() };
            let _ = ctx.fill_text(&label, x0 + 3.0, yy + LANE / 2.0 - 1.0);
            ctx.restore();
        }
    }
    ctx.set_global_alpha(1.0);

    // X axis.
    ctx.set_fill_style_str(&th.fg);
    ctx.set_text_align("center");
    ctx.set_text_baseline("top");
    let span = o.end - o.start;
    let st = count_step(span, (area.width() / 110.0).max(2.0));
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

/// The whole trace's totals, with the window shown: its steps and (`y`, bytes) its memory
/// range.
pub fn minimap(canvas: &HtmlCanvasElement, vm: &ViewModel, start: f64, end: f64, y: (f64, f64), th: &Theme) {
    let Some((ctx, w, h)) = prepare(canvas) else { return };
    ctx.set_fill_style_str(&th.bg);
    ctx.fill_rect(0.0, 0.0, w, h);
    let area = Area { w, h };
    let cw = area.column_width(vm.columns.len());
    let y_max = vm.y_max.max(1) as f64;
    // The columns as one path: the minimap is drawn again at every move of the window.
    ctx.set_fill_style_str(&th.muted);
    ctx.begin_path();
    for (c, col) in vm.columns.iter().enumerate() {
        let hh = col.total as f64 / y_max * (h - 4.0);
        ctx.rect(LEFT + c as f64 * cw, h - hh, cw + 0.3, hh);
    }
    ctx.fill();
    let n = f64::from(vm.n_steps.max(1));
    let (x0, x1) = (area.x(start, (0.0, n)), area.x(end, (0.0, n)));
    let y_of = |bytes: f64| (h - bytes / y_max * (h - 4.0)).clamp(0.0, h);
    let (y0, y1) = (y_of(y.1), y_of(y.0));
    ctx.set_fill_style_str(&th.accent);
    ctx.set_global_alpha(0.18);
    ctx.fill_rect(x0, y0, (x1 - x0).max(2.0), (y1 - y0).max(2.0));
    ctx.set_global_alpha(1.0);
    ctx.set_stroke_style_str(&th.accent);
    ctx.stroke_rect(x0 + 0.5, y0 + 0.5, (x1 - x0).max(2.0) - 1.0, (y1 - y0).max(2.0) - 1.0);
    ctx.set_fill_style_str(&th.fg);
    ctx.set_font(super::FONT);
    ctx.set_text_align("right");
    ctx.set_text_baseline("middle");
    let _ = ctx.fill_text("overview", LEFT - 6.0, h / 2.0);
}
