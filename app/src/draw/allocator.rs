//! The allocator map: the state after an event, every segment and block.

use engine::protocol::StateView;
use web_sys::HtmlCanvasElement;

use super::*;

/// The allocator after an event: all segments in address order laid end to end as one
/// strip of memory, wrapped into rows; blocks in colour, pending frees hatched in the
/// accent colour, free space in grey, segment starts as thin marks.
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
