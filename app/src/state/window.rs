//! The timeline window of the tab shown: zoom, pan, a chosen range, an allocation in view.
//! Every move keeps the window inside the trace and at least four steps wide.

use super::Docs;

/// Moves the shown tab's window.
#[derive(Clone, Copy)]
pub(crate) struct Window {
    docs: Docs,
}

impl Window {
    pub(crate) fn new(docs: Docs) -> Window {
        Window { docs }
    }

    /// The window's width in steps (0 before the first view).
    pub(crate) fn width(self) -> f64 {
        self.docs.tab_untracked().map_or(0.0, |t| t.end - t.start)
    }

    /// Zooms by `factor` (below 1 zooms in) around the step `anchor` (else the middle).
    pub(crate) fn zoom(self, factor: f64, anchor: Option<f64>) {
        self.docs.edit(|t| {
            let n = f64::from(t.n_steps.max(1));
            let (a, b) = if t.end > t.start { (t.start, t.end) } else { (0.0, n) };
            let at = anchor.unwrap_or((a + b) / 2.0);
            let width = ((b - a) * factor).clamp(4.0_f64.min(n), n);
            let frac = if b > a { (at - a) / (b - a) } else { 0.5 };
            let mut s = at - width * frac;
            s = s.clamp(0.0, n - width);
            t.start = s;
            t.end = s + width;
        });
    }

    /// Moves the window by `by_steps`, its width kept.
    pub(crate) fn pan(self, by_steps: f64) {
        self.docs.edit(|t| {
            let n = f64::from(t.n_steps.max(1));
            let w = t.end - t.start;
            if w <= 0.0 {
                return;
            }
            let s = (t.start + by_steps).clamp(0.0, (n - w).max(0.0));
            t.start = s;
            t.end = s + w;
        });
    }

    /// Shows steps `a` to `b` (either order).
    pub(crate) fn set(self, a: f64, b: f64) {
        self.docs.edit(|t| {
            let n = f64::from(t.n_steps.max(1));
            let (a, b) = (a.min(b).clamp(0.0, n), a.max(b).clamp(0.0, n));
            let w = (b - a).max(4.0_f64.min(n));
            let a = a.min(n - w).max(0.0);
            t.start = a;
            t.end = a + w;
        });
    }

    /// Starts the window at `start` with the width it has (a drag).
    pub(crate) fn slide_to(self, start: f64, width: f64) {
        self.docs.edit(|t| {
            t.start = start;
            t.end = start + width;
        });
    }

    /// The whole trace.
    pub(crate) fn whole(self) {
        self.docs.edit(|t| {
            t.start = 0.0;
            t.end = f64::from(t.n_steps);
        });
    }

    /// An allocation's lifetime with as much again on each side.
    pub(crate) fn focus(self, start: u32, end: u32) {
        let span = f64::from(end.saturating_sub(start).max(1));
        self.set(f64::from(start) - span, f64::from(end) + span);
    }
}
