//! Where a plot lies on its canvas, and the one mapping between its data and CSS pixels:
//! what draws a plot and what reads the pointer on it both use this, so a hover finds what
//! was drawn under it.

use web_sys::HtmlCanvasElement;

use super::{BOTTOM, LEFT, RIGHT, TOP};

/// A canvas of `w` x `h` CSS pixels; its plot is inside the margins ([`LEFT`], [`RIGHT`],
/// [`TOP`], [`BOTTOM`]).
#[derive(Clone, Copy, Debug)]
pub struct Area {
    pub w: f64,
    pub h: f64,
}

/// An axis: the values at the plot's two edges (left and right, or bottom and top).
pub type Span = (f64, f64);

impl Area {
    /// The area of a canvas as it is laid out now.
    pub fn of(c: &HtmlCanvasElement) -> Area {
        Area { w: f64::from(c.client_width()), h: f64::from(c.client_height()) }
    }

    /// The plot's width.
    pub fn width(self) -> f64 {
        self.w - LEFT - RIGHT
    }

    /// The plot's height.
    pub fn height(self) -> f64 {
        self.h - TOP - BOTTOM
    }

    /// The plot's bottom edge.
    pub fn bottom(self) -> f64 {
        self.h - BOTTOM
    }

    /// The x of value `v` on an x axis `span`.
    pub fn x(self, v: f64, (lo, hi): Span) -> f64 {
        LEFT + (v - lo) / (hi - lo).max(1e-9) * self.width()
    }

    /// The value at `x` on an x axis `span`.
    pub fn x_value(self, x: f64, (lo, hi): Span) -> f64 {
        lo + (x - LEFT) / self.width() * (hi - lo)
    }

    /// The y of value `v` on a y axis `span`.
    pub fn y(self, v: f64, (lo, hi): Span) -> f64 {
        self.bottom() - (v - lo) / (hi - lo).max(1e-9) * self.height()
    }

    /// The value at `y` on a y axis `span`.
    pub fn y_value(self, y: f64, (lo, hi): Span) -> f64 {
        lo + (self.bottom() - y) / self.height() * (hi - lo)
    }

    /// The width of each of `n` columns across the plot.
    pub fn column_width(self, n: usize) -> f64 {
        self.width() / n.max(1) as f64
    }

    /// The column under `x`, of `n` across the plot.
    pub fn column_at(self, x: f64, n: usize) -> Option<usize> {
        let c = ((x - LEFT) / self.column_width(n)).floor();
        (c >= 0.0 && c < n as f64).then_some(c as usize)
    }
}
