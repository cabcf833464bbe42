//! The charts of the other views: bytes by category over time, and two runs compared.

use web_sys::HtmlCanvasElement;

use super::*;

/// Bytes by category over time as stacked areas (one bar per pixel column), hidden
/// categories left out; the peak and the selected step marked; `lines` (a label and bytes
/// each: the doctor's predicted peaks) dashed across the plot, the axis stretched to show them.
pub fn categories(
    canvas: &HtmlCanvasElement,
    vm: &engine::protocol::CategoriesVm,
    hidden: &[bool; snapshot::categories::N],
    selected: Option<u32>,
    lines: &[(String, u64)],
    th: &Theme,
) {
    let Some((ctx, w, h)) = prepare(canvas) else { return };
    ctx.set_fill_style_str(&th.bg);
    ctx.fill_rect(0.0, 0.0, w, h);
    let bottom = h - BOTTOM;
    let plot_h = bottom - CHART_TOP;
    let top = lines.iter().map(|l| l.1).fold(vm.report.peak_bytes, u64::max);
    let y_max = top.max(1) as f64 * engine::HEADROOM;
    let y = |b: f64| bottom - b / y_max * plot_h;
    y_grid(&ctx, w, top, y_max, &y, th);
    let area = Area { w, h };
    let cw = area.column_width(vm.columns.len());
    for (c, (step, bytes)) in vm.columns.iter().enumerate() {
        if *step == u32::MAX {
            continue;
        }
        let mut acc = 0.0;
        for k in snapshot::categories::Category::STACKED.map(|c| c.index()) {
            let b = bytes[k];
            if hidden[k] || b == 0 {
                continue;
            }
            ctx.set_fill_style_str(&css(vm.colours[k]));
            let (y0, y1) = (y(acc), y(acc + b as f64));
            ctx.fill_rect(LEFT + c as f64 * cw, y1, cw + 0.4, y0 - y1);
            acc += b as f64;
        }
    }
    let x_of = |s: f64| area.x(s + 0.5, (vm.start, vm.end));
    let peak = f64::from(vm.report.peak_step);
    if peak >= vm.start && peak < vm.end {
        vline(&ctx, x_of(peak), CHART_TOP, bottom, &th.accent);
    }
    if let Some(s) = selected {
        vline(&ctx, x_of(f64::from(s)), CHART_TOP, bottom, &th.fg);
    }
    ctx.set_text_align("right");
    for (label, bytes) in lines {
        let yy = y(*bytes as f64).round() + 0.5;
        dashed_hline(&ctx, yy, LEFT, w - RIGHT, &th.fg);
        ctx.set_fill_style_str(&th.fg);
        // Above the line, or below it where the plot's top would cut the text.
        let ty = if yy - 4.0 < CHART_TOP + 10.0 { yy + 13.0 } else { yy - 4.0 };
        let _ = ctx.fill_text(&format!("{label}: {}", format_size(i128::from(*bytes))), w - RIGHT - 4.0, ty);
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
    let area = Area { w, h };
    let x_of = |x: f64| area.x(x, (lo, hi));
    let cw = area.column_width(d.curve.len());
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
    ctx.set_font(super::FONT);
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
