//! Asking the worker for the timeline's and the minimap's pictures whenever the window,
//! device, memory kind, pin, size or theme changes (the newest answer wins), and painting
//! them.

use engine::protocol::{DocId, FirstView, Kind, PaletteVm, Request, Response, ViewQuery};
use leptos::prelude::*;
use leptos::task::spawn_local;

use super::{plot_columns, plot_rows};
use crate::client::worker;
use crate::dom::{after_paint, canvas_by_id, now, record};
use crate::draw;
use crate::state::{Allocator, Docs, Plot, Redraw, Selection, Tab, Window};

/// Everything a timeline view depends on: the file, device, kind and pinned element; the
/// window (bits); the memory range and baseline; the plot's columns, rows and redraw count;
/// the theme's colours.
#[derive(Clone, Copy, PartialEq)]
struct ViewKey {
    lane: (DocId, u32, Kind, Option<u32>),
    window: (u64, u64),
    memory: (Option<(u64, u64)>, bool),
    pixels: (u32, u32, u32),
    palette: (u32, u32, u32),
}

/// The theme's colours for what the worker paints: summaries, search hits, the pin.
fn palette() -> PaletteVm {
    let th = draw::Theme::read();
    let dflt = PaletteVm::default();
    PaletteVm {
        summarized: draw::rgb_of(&th.muted).unwrap_or(dflt.summarized),
        hit: draw::rgb_of(&th.accent).unwrap_or(dflt.hit),
        pinned: draw::rgb_of(&th.fg).unwrap_or(dflt.pinned),
    }
}

/// Whether the plot is laid out with a width: it is from the start, hidden while no file is
/// open (a file's first view is asked for at that width); another mode hides it with none.
fn plot_shown() -> bool {
    canvas_by_id("timeline").is_some_and(|c| c.client_width() > 0)
}

/// The first view of a file not read yet, as far as the page knows it (its plot and
/// colours), where the plot is shown: asked for while the file is read
/// ([`Client::ahead`](crate::client::Client::ahead)). Once the file is read, its query is
/// [`first_query`]'s for the new tab unless the plot changed size meanwhile.
pub(crate) fn first_view(baseline: bool) -> Option<FirstView> {
    if !plot_shown() {
        return None;
    }
    Some(FirstView { columns: plot_columns(), rows: plot_rows(), baseline, palette: palette() })
}

/// The first view the timeline will ask for when `tab` opens, where the plot is shown (laid
/// out, from the start, and not in another mode) and so has its size: asked for ahead
/// ([`Client::prefetch`](crate::client::Client::prefetch)) while the tab is being built.
pub(crate) fn first_query(tab: &Tab, baseline: bool) -> Option<ViewQuery> {
    // A new tab's is [`first_view`]'s query, unless a link's view moved it.
    let q = first_view(baseline)?.query(tab.info.doc, tab.device);
    Some(ViewQuery { kind: tab.kind, start: tab.start, end: tab.end, y: tab.y, ..q })
}

/// The timeline's view model.
pub(super) fn views() {
    let (docs, plot, selection, redraw, window) = (
        expect_context::<Docs>(),
        expect_context::<Plot>(),
        expect_context::<Selection>(),
        expect_context::<Redraw>(),
        expect_context::<Window>(),
    );
    let seq = StoredValue::new(0u32);
    // The key whose request waited one frame for the plot to exist.
    let deferred = StoredValue::new(None);
    // What the last answer showed. A first view asks for "the whole trace" and learns its
    // window from the answer; asking again for that window would only draw the same picture,
    // while the first hover waited behind it.
    let answered = StoredValue::new(None::<ViewKey>);
    let view_key = Memo::new(move |_| {
        let pinned = selection.pinned_element();
        docs.tab().map(|t| (t.info.doc, t.device, t.kind, t.start.to_bits(), t.end.to_bits(), pinned, t.y))
    });
    Effect::new(move |_| {
        let Some(key) = view_key.get() else { return };
        // Taken at every run: a move's time belongs to the picture it asked for.
        let moved = window.take_moved();
        let Some(t) = docs.tab_untracked() else { return };
        let size = redraw.track();
        // The plot is laid out from the start; should a tab come before it is (the page being
        // built), ask once it is (next frame), instead of asking for a default size now and for
        // the real one just after, while the first hover would wait behind the second.
        if canvas_by_id("timeline").is_none() && deferred.get_value() != Some(key) {
            deferred.set_value(Some(key));
            request_animation_frame(move || redraw.bump());
            return;
        }
        let palette = palette();
        let (cols, rows) = (plot_columns(), plot_rows());
        let baseline = plot.baseline.get();
        let asked = move |start: f64, end: f64| ViewKey {
            lane: (key.0, key.1, key.2, key.5),
            window: (start.to_bits(), end.to_bits()),
            memory: (key.6, baseline),
            pixels: (cols, rows, size),
            palette: (palette.summarized, palette.hit, palette.pinned),
        };
        if answered.get_value() == Some(asked(t.start, t.end)) && plot.view.with_untracked(Option::is_some) {
            return;
        }
        // Only the window moved: the last picture, shifted and stretched, at once
        // (`engine::preview`), while the worker draws the exact one.
        if answered.get_value().is_some_and(|a| a == ViewKey { window: a.window, ..asked(t.start, t.end) }) {
            if let Some(p) =
                plot.view.with_untracked(|v| v.as_ref().and_then(|v| engine::preview::preview(v, t.start, t.end)))
            {
                // Timed from the move (the key, wheel or drag), not from here: the effects
                // that ran before this one kept the picture waiting too.
                plot.preview_sent.set_value(moved.unwrap_or_else(now));
                plot.view.set(Some(p));
            }
        }
        seq.update_value(|x| *x += 1);
        let my = seq.get_value();
        let q = ViewQuery {
            doc: t.info.doc,
            device: t.device,
            kind: t.kind,
            start: t.start,
            end: t.end,
            columns: cols,
            rows,
            y: key.6,
            baseline,
            totals_only: false,
            pinned: key.5,
            palette,
        };
        let sent = now();
        spawn_local(async move {
            let r = worker().ask(Request::View(q)).await;
            if seq.get_value() != my {
                return;
            }
            if let Response::View(v) = r {
                answered.set_value(Some(asked(v.start, v.end)));
                if t.end <= t.start || t.n_steps != v.n_steps {
                    let (a, b, n) = (v.start, v.end, v.n_steps);
                    docs.edit(|t| {
                        t.n_steps = n;
                        if t.end <= t.start || t.end > f64::from(n) {
                            t.start = a;
                            t.end = b;
                        }
                    });
                }
                // The frame is timed when this answer is drawn, not at a redraw of the old one.
                plot.view_sent.set_value(sent);
                // The outline was of the old picture.
                plot.outline.set(Vec::new());
                plot.view.set(Some(v));
            }
        });
    });
}

/// The minimap's: totals over the whole trace.
pub(super) fn minimap() {
    let (docs, plot, redraw) = (expect_context::<Docs>(), expect_context::<Plot>(), expect_context::<Redraw>());
    let lane_key = Memo::new(move |_| docs.tab().map(|t| (t.info.doc, t.device, t.kind)));
    Effect::new(move |_| {
        let Some(key) = lane_key.get() else { return };
        redraw.track();
        let cols = plot_columns();
        spawn_local(async move {
            let q = ViewQuery {
                doc: key.0,
                device: key.1,
                kind: key.2,
                start: 0.0,
                end: 0.0,
                columns: cols,
                rows: 1,
                y: None,
                baseline: false,
                totals_only: true,
                pinned: None,
                palette: PaletteVm::default(),
            };
            if let Response::View(v) = worker().ask(Request::View(q)).await {
                plot.overview.set(Some(v));
            }
        });
    });
}

/// Draws both pictures, with the selected event's step marked; times the frame.
pub(super) fn paint() {
    let (docs, plot, allocator) = (expect_context::<Docs>(), expect_context::<Plot>(), expect_context::<Allocator>());
    // The timeline is drawn again for a new picture or overlay, not for each move of the
    // window: a move's picture comes from `views` (its preview), and drawing the old one
    // first only kept that preview waiting.
    let lane = Memo::new(move |_| docs.tab().map(|t| (t.info.doc, t.has_time())));
    Effect::new(move |_| {
        let lane = lane.get();
        let event_step = allocator.state.with(|st| st.as_ref().and_then(|st| st.step));
        let time_axis = plot.time_axis.get();
        let th = draw::Theme::read();
        plot.view.with(|v| {
            let Some(c) = canvas_by_id("timeline") else { return };
            let Some((doc, has_time)) = lane else {
                // No file is shown (the last one was closed): its picture goes, or the next
                // file's views would show it while that file loads.
                draw::clear(&c, &th);
                return;
            };
            let Some(v) = v else { return };
            plot.outline.with(|outline| {
                let o = draw::Overlay {
                    start: v.start,
                    end: v.end,
                    event_step,
                    time_axis: time_axis && has_time,
                    outline,
                    y_pick: plot.y_pick.get(),
                };
                draw::timeline(&c, v, &o, &th);
            });
            if !plot.painted.get_untracked() {
                // Set again by a second draw before that frame: `Show` compares, nothing redraws.
                after_paint(move || plot.painted.set(true));
            }
            let sent = plot.view_sent.get_value();
            if sent > 0.0 {
                plot.view_sent.set_value(0.0);
                record("frame", now() - sent);
            }
            let moved = plot.preview_sent.get_value();
            if moved > 0.0 {
                plot.preview_sent.set_value(0.0);
                record("preview", now() - moved);
            }
            if let Some((first, started)) = plot.first_draw.get_value() {
                if first == doc {
                    plot.first_draw.set_value(None);
                    let at = now();
                    record("first-draw", at - started);
                    // Since the page started: the cold page's figure, and the bench's end mark.
                    record("first-draw-at", at);
                }
            }
        });
    });
    // The minimap, with the window's box on it: follows every move, and the memory range of
    // the picture (not each picture: a move's preview keeps the range).
    let window = Memo::new(move |_| docs.tab().map(|t| (t.start, t.end)));
    let y = Memo::new(move |_| plot.view.with(|v| v.as_ref().map(|v| (v.y_lo as f64, v.y_top as f64))));
    Effect::new(move |_| {
        let (window, y) = (window.get(), y.get());
        let th = draw::Theme::read();
        plot.overview.with(|v| {
            let Some(c) = canvas_by_id("minimap") else { return };
            // As the timeline: nothing of a closed file stays.
            let Some((a, b)) = window else { return draw::clear(&c, &th) };
            let Some(v) = v else { return };
            draw::minimap(&c, v, a, b, y.unwrap_or((0.0, v.y_max as f64 * engine::HEADROOM)), &th);
        });
    });
}
