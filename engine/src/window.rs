//! The timeline window's arithmetic: zoom, pan and a chosen range along a trace's steps. A
//! window stays inside the trace and at least [`MIN_STEPS`] wide (the whole trace, if it is
//! shorter). The page moves its tabs' windows with these (`app/src/state/window.rs`), and
//! `bench pan` replays the browser benchmark's keys with the same ones.

/// The narrowest window, in steps.
pub const MIN_STEPS: f64 = 4.0;

/// The window `start..end` of a trace of `n` steps zoomed by `factor` (below 1 zooms in)
/// around step `anchor`, which keeps its place on screen (without one, the window's
/// middle). An empty window zooms from the whole trace.
pub fn zoomed(start: f64, end: f64, n: f64, factor: f64, anchor: Option<f64>) -> (f64, f64) {
    let (a, b) = if end > start { (start, end) } else { (0.0, n) };
    let at = anchor.unwrap_or((a + b) / 2.0);
    let width = ((b - a) * factor).clamp(MIN_STEPS.min(n), n);
    let frac = if b > a { (at - a) / (b - a) } else { 0.5 };
    let s = (at - width * frac).clamp(0.0, n - width);
    (s, s + width)
}

/// The window `start..end` moved by `by` steps, its width kept, stopped at either end of the
/// trace. An empty window stays as it is.
pub fn panned(start: f64, end: f64, n: f64, by: f64) -> (f64, f64) {
    let width = end - start;
    if width <= 0.0 {
        return (start, end);
    }
    let s = (start + by).clamp(0.0, (n - width).max(0.0));
    (s, s + width)
}

/// The window from step `a` to step `b` (either order), cut to the trace and widened to
/// [`MIN_STEPS`] from its start (from its end, at the trace's end).
pub fn spanning(a: f64, b: f64, n: f64) -> (f64, f64) {
    let (a, b) = (a.min(b).clamp(0.0, n), a.max(b).clamp(0.0, n));
    let width = (b - a).max(MIN_STEPS.min(n));
    let a = a.min(n - width).max(0.0);
    (a, a + width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zooming_keeps_the_anchor_where_it_was_on_screen() {
        // Step 300 is a quarter of the way into 200..600; zoomed in by half, it still is.
        let (s, e) = zoomed(200.0, 600.0, 1000.0, 0.5, Some(300.0));
        assert_eq!((s, e), (250.0, 450.0));
        assert_eq!((300.0 - s) / (e - s), 0.25);
        // Without an anchor, the middle stays the middle.
        assert_eq!(zoomed(200.0, 600.0, 1000.0, 0.5, None), (300.0, 500.0));
    }

    #[test]
    fn a_zoom_stays_inside_the_trace_and_at_least_four_steps_wide() {
        // Zoomed out past the trace: the whole trace.
        assert_eq!(zoomed(100.0, 900.0, 1000.0, 4.0, None), (0.0, 1000.0));
        // Zoomed out near an end: the window slides back inside.
        assert_eq!(zoomed(0.0, 100.0, 1000.0, 2.0, Some(0.0)), (0.0, 200.0));
        assert_eq!(zoomed(900.0, 1000.0, 1000.0, 2.0, Some(1000.0)), (800.0, 1000.0));
        // Zoomed in as far as it goes: four steps around the anchor.
        assert_eq!(zoomed(10.0, 20.0, 1000.0, 0.001, Some(15.0)), (13.0, 17.0));
        // A trace of fewer than four steps is shown whole.
        assert_eq!(zoomed(0.0, 3.0, 3.0, 0.5, None), (0.0, 3.0));
    }

    #[test]
    fn an_empty_window_zooms_from_the_whole_trace() {
        assert_eq!(zoomed(0.0, 0.0, 800.0, 0.5, None), (200.0, 600.0));
    }

    #[test]
    fn a_pan_keeps_the_width_and_stops_at_the_ends() {
        assert_eq!(panned(100.0, 300.0, 1000.0, 50.0), (150.0, 350.0));
        assert_eq!(panned(100.0, 300.0, 1000.0, -500.0), (0.0, 200.0));
        assert_eq!(panned(700.0, 900.0, 1000.0, 500.0), (800.0, 1000.0));
        // Nothing to move: a window not known yet stays empty.
        assert_eq!(panned(0.0, 0.0, 1000.0, 50.0), (0.0, 0.0));
    }

    #[test]
    fn a_chosen_range_is_ordered_cut_to_the_trace_and_four_steps_wide() {
        assert_eq!(spanning(600.0, 200.0, 1000.0), (200.0, 600.0));
        assert_eq!(spanning(-50.0, 1200.0, 1000.0), (0.0, 1000.0));
        assert_eq!(spanning(500.0, 501.0, 1000.0), (500.0, 504.0));
        // At the trace's end the four steps reach back from it.
        assert_eq!(spanning(999.0, 1000.0, 1000.0), (996.0, 1000.0));
    }
}
