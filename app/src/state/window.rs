//! The timeline window of the tab shown: zoom, pan, a chosen range, an allocation in view;
//! and the memory (y) axis: zoom and reset. Every move keeps the window inside the trace and
//! at least four steps wide (`engine::window`'s arithmetic), and the memory range at least a
//! thousand bytes tall.

use engine::window;
use leptos::prelude::*;

use super::{Docs, Tab};
use crate::dom::now;

/// The thinnest memory range the axis shows, bytes.
const MIN_Y_SPAN: f64 = 1000.0;

/// The steps of `t`'s trace, as the window's arithmetic takes them (at least one).
fn steps(t: &Tab) -> f64 {
    f64::from(t.n_steps.max(1))
}

/// Moves the shown tab's window.
#[derive(Clone, Copy)]
pub(crate) struct Window {
    docs: Docs,
    /// When the user last moved the window along the steps (0 once taken): the start of the
    /// time to the moved picture on screen.
    moved: StoredValue<f64>,
}

impl Window {
    pub(crate) fn new(docs: Docs) -> Window {
        Window { docs, moved: StoredValue::new(0.0) }
    }

    /// When the window was last moved by the user, if not taken since.
    pub(crate) fn take_moved(self) -> Option<f64> {
        self.moved.try_update_value(std::mem::take).filter(|&t| t > 0.0)
    }

    /// Changes the shown tab's window, noting when it moved.
    fn edit(self, f: impl FnOnce(&mut super::Tab)) {
        let moved = self.moved;
        self.docs.edit(|t| {
            let was = (t.start, t.end);
            f(t);
            if (t.start, t.end) != was {
                moved.set_value(now());
            }
        });
    }

    /// The window's width in steps (0 before the first view).
    pub(crate) fn width(self) -> f64 {
        self.docs.tab_untracked().map_or(0.0, |t| t.end - t.start)
    }

    /// Zooms by `factor` (below 1 zooms in) around the step `anchor` (else the middle).
    pub(crate) fn zoom(self, factor: f64, anchor: Option<f64>) {
        self.edit(|t| (t.start, t.end) = window::zoomed(t.start, t.end, steps(t), factor, anchor));
    }

    /// Moves the window by `by_steps`, its width kept.
    pub(crate) fn pan(self, by_steps: f64) {
        self.edit(|t| (t.start, t.end) = window::panned(t.start, t.end, steps(t), by_steps));
    }

    /// Shows steps `a` to `b` (either order).
    pub(crate) fn set(self, a: f64, b: f64) {
        self.edit(|t| (t.start, t.end) = window::spanning(a, b, steps(t)));
    }

    /// Starts the window at `start` with the width it has (a drag).
    pub(crate) fn slide_to(self, start: f64, width: f64) {
        self.edit(|t| {
            t.start = start;
            t.end = start + width;
        });
    }

    /// The whole trace.
    pub(crate) fn whole(self) {
        self.edit(|t| {
            t.start = 0.0;
            t.end = f64::from(t.n_steps);
        });
    }

    /// Shows bytes `lo` to `hi` (either order) on the memory axis.
    pub(crate) fn set_y(self, lo: f64, hi: f64) {
        let (lo, hi) = (lo.min(hi).max(0.0), lo.max(hi).max(0.0));
        let hi = hi.max(lo + MIN_Y_SPAN);
        self.docs.edit(|t| t.y = Some((lo as u64, hi as u64)));
    }

    /// Zooms the memory axis by `factor` (below 1 zooms in) around `anchor` bytes (else the
    /// middle); `shown` is the range on screen now, `natural` the range unzoomed (from zero
    /// or the baseline). Zooming out as far as that resets.
    ///
    /// The zoom starts from the range last asked for, not from the picture: keys pressed
    /// faster than views arrive each act on the one before (the picture may still show a
    /// range already left). Unzoomed, the picture's lower start is kept (search matches
    /// under the baseline lower it).
    pub(crate) fn zoom_y(self, factor: f64, anchor: Option<f64>, shown: (u64, u64), natural: (u64, u64)) {
        let asked = self.docs.tab_untracked().and_then(|t| t.y);
        let (lo, hi) = match asked {
            Some((lo, hi)) => (lo as f64, hi as f64),
            None => (shown.0.min(natural.0) as f64, natural.1 as f64),
        };
        let at = anchor.unwrap_or((lo + hi) / 2.0);
        let span = ((hi - lo) * factor).max(MIN_Y_SPAN);
        if span >= (natural.1 - natural.0) as f64 * 0.999 {
            self.reset_y();
            return;
        }
        let frac = if hi > lo { (at - lo) / (hi - lo) } else { 0.5 };
        let lo = (at - span * frac).clamp(natural.0 as f64, (natural.1 as f64 - span).max(natural.0 as f64));
        self.set_y(lo, lo + span);
    }

    /// The memory axis from zero (or the baseline) to the peak again.
    pub(crate) fn reset_y(self) {
        if self.docs.tab_untracked().is_some_and(|t| t.y.is_some()) {
            self.docs.edit(|t| t.y = None);
        }
    }

    /// An allocation's lifetime with as much again on each side.
    pub(crate) fn focus(self, start: u32, end: u32) {
        let span = f64::from(end.saturating_sub(start).max(1));
        self.set(f64::from(start) - span, f64::from(end) + span);
    }
}
