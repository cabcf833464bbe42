//! The flame graph: an icicle of the nodes under the focused one (outermost frame on top,
//! each node as wide as its share of the focused one), labelled where a label fits.

use engine::protocol::FlameVm;
use web_sys::HtmlCanvasElement;

use super::*;

/// Height of a row, CSS pixels.
pub const ROW: f64 = 18.0;

/// A node drawn: its index in the view model and its box (CSS pixels).
#[derive(Clone, Copy, Debug)]
pub struct Placed {
    pub node: u32,
    pub x: f64,
    pub y: f64,
    pub w: f64,
}

/// Where the focused node and the nodes under it go on a canvas `width` wide, leaving out
/// those under a third of a pixel. Its descendants follow it in the view model's pre-order,
/// up to the first node no deeper than it.
pub fn layout(vm: &FlameVm, focus: u32, width: f64) -> Vec<Placed> {
    let Some(f) = vm.nodes.get(focus as usize) else { return Vec::new() };
    let scale = width / f.weight.max(1) as f64;
    let under = vm.nodes[focus as usize + 1..].iter().take_while(|n| n.depth > f.depth);
    std::iter::once((focus, f))
        .chain(under.enumerate().map(|(k, n)| (focus + 1 + k as u32, n)))
        .map(|(k, n)| Placed {
            node: k,
            x: n.offset.saturating_sub(f.offset) as f64 * scale,
            y: f64::from(n.depth - f.depth) * ROW,
            w: n.weight as f64 * scale,
        })
        .filter(|p| p.w >= 0.33)
        .collect()
}

/// The rows the focused node needs.
pub fn rows(placed: &[Placed]) -> u32 {
    placed.iter().map(|p| (p.y / ROW) as u32 + 1).max().unwrap_or(1)
}

/// Draws `placed`: each node in its colour (faded when a search is on and it does not
/// match, outlined in the accent colour when it does), the hovered one outlined, `root` as
/// the focused node's label.
pub fn flame(canvas: &HtmlCanvasElement, vm: &FlameVm, placed: &[Placed], hover: Option<u32>, root: &str, th: &Theme) {
    let Some((ctx, w, h)) = prepare(canvas) else { return };
    ctx.set_fill_style_str(&th.bg);
    ctx.fill_rect(0.0, 0.0, w, h);
    ctx.set_font(super::FONT);
    ctx.set_text_baseline("middle");
    ctx.set_text_align("left");
    let searching = vm.hits > 0;
    for (k, p) in placed.iter().enumerate() {
        let Some(n) = vm.nodes.get(p.node as usize) else { continue };
        ctx.set_global_alpha(if searching && !n.hit { 0.28 } else { 1.0 });
        ctx.set_fill_style_str(&css(n.rgb));
        let bw = (p.w - 1.0).max(0.5);
        ctx.fill_rect(p.x, p.y, bw, ROW - 1.0);
        ctx.set_global_alpha(1.0);
        if searching && n.hit {
            ctx.set_stroke_style_str(&th.accent);
            ctx.set_line_width(2.0);
            ctx.stroke_rect(p.x + 1.0, p.y + 1.0, (bw - 2.0).max(0.5), ROW - 3.0);
            ctx.set_line_width(1.0);
        }
        if hover == Some(p.node) {
            ctx.set_stroke_style_str(&th.fg);
            ctx.set_line_width(1.5);
            ctx.stroke_rect(p.x + 0.75, p.y + 0.75, (bw - 1.5).max(0.5), ROW - 2.5);
            ctx.set_line_width(1.0);
        }
        let text = if k == 0 {
            root.to_string()
        } else if n.file.is_empty() {
            n.name.clone()
        } else {
            format!("{}  {}:{}", n.name, short_file(&n.file), n.line)
        };
        if let Some(t) = fit(&text, p.w - 8.0) {
            ctx.set_fill_style_str("#1d1f23");
            let _ = ctx.fill_text(&t, p.x + 4.0, p.y + ROW / 2.0);
        }
    }
}

/// The file's last two path components.
fn short_file(file: &str) -> &str {
    let mut cut = file.len();
    for _ in 0..2 {
        match file[..cut].rfind(['/', '\\']) {
            Some(k) => cut = k,
            None => return file,
        }
    }
    &file[cut + 1..]
}

/// `text` cut to `room` pixels (about 6 pixels a character at 11 px), with an ellipsis;
/// nothing when not even three characters fit.
fn fit(text: &str, room: f64) -> Option<String> {
    let chars = (room / 6.2).floor() as usize;
    let n = text.chars().count();
    if n <= chars {
        Some(text.to_string())
    } else if chars >= 4 {
        Some(text.chars().take(chars - 1).chain(std::iter::once('…')).collect())
    } else {
        None
    }
}
