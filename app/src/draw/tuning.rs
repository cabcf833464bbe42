//! The doctor's allocator what-if chart: reserved bytes over the trace as the recording had
//! them and as the simulation of one allocator setting has them, the device's capacity
//! dashed across, the recorded out-of-memory errors marked, and the first request the
//! simulation could not hold dotted in the simulation's colour.

use web_sys::HtmlCanvasElement;

use super::*;

/// The recording's curve (drawn wide, under the simulated one, so both show where they meet).
pub const RECORDED: &str = "#3b6ea5";
/// The simulated curve of the setting picked.
pub const SIMULATED: &str = "#e0663a";

/// What the chart draws, in data units.
pub struct Tuning<'a> {
    /// Reserved bytes as recorded: the highest in each of `recorded.len()` equal runs of entries.
    pub recorded: &'a [u64],
    /// The same under the simulated setting (as many runs).
    pub simulated: &'a [u64],
    /// The device's bytes the simulation ran on.
    pub capacity_bytes: Option<u64>,
    /// Entries of the trace the runs split (`None`: unknown, the axis counts runs instead).
    pub entries: Option<u64>,
    /// The trace entries of the recorded out-of-memory errors.
    pub oom_entries: &'a [u32],
    /// The entry of the first request the simulation could not hold.
    pub first_failed_entry: Option<u32>,
}

/// Draws `t` on `canvas`: a byte axis from 0, the trace's events along the bottom.
pub fn tuning(canvas: &HtmlCanvasElement, t: &Tuning, th: &Theme) {
    let Some((ctx, w, h)) = prepare(canvas) else { return };
    ctx.set_fill_style_str(&th.bg);
    ctx.fill_rect(0.0, 0.0, w, h);
    let bottom = h - BOTTOM;
    let plot_h = bottom - CHART_TOP;
    let top = t.recorded.iter().chain(t.simulated).copied().chain(t.capacity_bytes).max().unwrap_or(0).max(1);
    let y_max = top as f64 * engine::HEADROOM;
    let y = |b: f64| bottom - b / y_max * plot_h;
    y_grid(&ctx, w, top, y_max, &y, th);
    let points = t.recorded.len().max(t.simulated.len()).max(1);
    let n = t.entries.filter(|&n| n > 0).map_or(points as f64, |n| n as f64);
    let area = Area { w, h };
    // Run `k` of `points` covers the entries from `k * n / points` up to the next run's.
    let x_of_run = |k: usize| area.x(k as f64 / points as f64 * n, (0.0, n));
    if t.entries.is_some() {
        for &e in t.oom_entries {
            let x = area.x(f64::from(e) + 0.5, (0.0, n));
            vline(&ctx, x, CHART_TOP, bottom, &th.accent);
        }
    }
    if let Some(e) = t.first_failed_entry.filter(|_| t.entries.is_some()) {
        let x = area.x(f64::from(e) + 0.5, (0.0, n)).round() + 0.5;
        let _ = ctx.set_line_dash(&js_sys::Array::of2(&3.0.into(), &3.0.into()));
        ctx.set_stroke_style_str(SIMULATED);
        ctx.set_line_width(1.5);
        ctx.begin_path();
        ctx.move_to(x, CHART_TOP);
        ctx.line_to(x, bottom);
        ctx.stroke();
        ctx.set_line_width(1.0);
        let _ = ctx.set_line_dash(&js_sys::Array::new());
    }
    if let Some(c) = t.capacity_bytes {
        dashed_hline(&ctx, y(c as f64).round() + 0.5, LEFT, w - RIGHT, &th.fg);
    }
    steps(&ctx, t.recorded, &x_of_run, &y, RECORDED, 4.0);
    steps(&ctx, t.simulated, &x_of_run, &y, SIMULATED, 1.75);
    let label = |x: f64| if t.entries.is_some() { format!("{}", x as u64) } else { String::new() };
    x_labels(&ctx, w, bottom, 0.0, n, th, &label);
}

/// `values` as a step line: each run's highest bytes held flat across the run.
fn steps(ctx: &Ctx, values: &[u64], x_of_run: &dyn Fn(usize) -> f64, y: &dyn Fn(f64) -> f64, colour: &str, width: f64) {
    if values.is_empty() {
        return;
    }
    ctx.set_stroke_style_str(colour);
    ctx.set_line_width(width);
    ctx.set_line_join("round");
    ctx.begin_path();
    for (k, &v) in values.iter().enumerate() {
        let yy = y(v as f64);
        if k == 0 {
            ctx.move_to(x_of_run(0), yy);
        } else {
            ctx.line_to(x_of_run(k), yy);
        }
        ctx.line_to(x_of_run(k + 1), yy);
    }
    ctx.stroke();
    ctx.set_line_width(1.0);
    ctx.set_line_join("miter");
}
