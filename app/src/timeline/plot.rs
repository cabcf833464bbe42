//! The timeline canvas and its pointer: hover shows an allocation's details (and outlines
//! it), a click pins it, a drag pans, the wheel zooms around the pointer (pans with shift or
//! sideways; zooms the memory axis with alt), a drag on the memory axis zooms to the bytes it
//! covers (a click there resets), and a click on an OOM's mark in the top lane opens the
//! doctor at that OOM.

use engine::protocol::{Request, Response};
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::client::worker;
use crate::doctor::Doctor;
use crate::dom::{canvas_by_id, now, record};
use crate::draw::{self, Area};
use crate::state::{Docs, Plot as Shown, Selection, Window};

/// The bytes at y (CSS pixels) of the timeline canvas, and half a pixel row in bytes.
fn bytes_at(shown: Shown, y: f64) -> Option<(f64, u64)> {
    let area = Area::of(&canvas_by_id("timeline")?);
    shown.view.with_untracked(|v| {
        let v = v.as_ref()?;
        let (lo, top) = (v.y_lo as f64, v.y_top.max(v.y_lo + 1) as f64);
        Some((area.y_value(y, (lo, top)), ((top - lo) / area.height() / 2.0) as u64))
    })
}

/// Hit tests run in the worker, one at a time: a move while one is out is remembered and
/// asked next, so the worker never queues stale positions.
#[derive(Clone, Copy)]
struct Hits {
    busy: StoredValue<bool>,
    next: StoredValue<Option<(f64, f64, bool)>>,
    docs: Docs,
    shown: Shown,
    selection: Selection,
}

impl Hits {
    /// What is at (x, y) of the canvas: hovered, or pinned when `pin`.
    fn ask(self, x: f64, y: f64, pin: bool) {
        if self.busy.get_value() && !pin {
            self.next.set_value(Some((x, y, pin)));
            return;
        }
        let Some(c) = canvas_by_id("timeline") else { return };
        let Some(t) = self.docs.tab_untracked() else { return };
        let area = Area::of(&c);
        let (bytes, slack) = bytes_at(self.shown, y).unwrap_or((-1.0, 0));
        let found = self.shown.view.with_untracked(|v| {
            let v = v.as_ref()?;
            let col = area.column_at(x, v.columns.len()).filter(|_| bytes >= 0.0 && y <= area.bottom())?;
            Some((v.columns.get(col)?.step, bytes as u64))
        });
        let sel = self.selection;
        let Some((step, bytes)) = found else {
            if pin {
                sel.pinned.set(None);
            } else if sel.hover.with_untracked(Option::is_some) {
                sel.hover.set(None);
                self.shown.outline.set(Vec::new());
            }
            return;
        };
        self.busy.set_value(true);
        spawn_local(async move {
            let t0 = now();
            let r = worker()
                .ask(Request::Hit { doc: t.info.doc, device: t.device, kind: t.kind, step, bytes, slack })
                .await;
            self.busy.set_value(false);
            if let Response::Hit(d, outline) = r {
                record("details", now() - t0);
                if !pin && self.shown.outline.with_untracked(|o| *o != outline) {
                    self.shown.outline.set(outline);
                }
                if pin {
                    sel.pinned.set(d);
                } else if sel.hover.with_untracked(|h| h.as_ref().map(|x| x.element)) != d.as_ref().map(|x| x.element) {
                    sel.hover.set(d);
                }
            }
            if let Some((x, y, pin)) = self.next.get_value() {
                self.next.set_value(None);
                self.ask(x, y, pin);
            }
        });
    }
}

/// The step under x (CSS pixels) of the timeline canvas.
fn step_at(docs: Docs, x: f64) -> Option<f64> {
    let area = Area::of(&canvas_by_id("timeline")?);
    let t = docs.tab_untracked()?;
    Some(area.x_value(x, (t.start, t.end)))
}

/// The trace entry of the OOM whose mark (in the top lane) is nearest x, within 6 pixels.
fn oom_at(shown: Shown, x: f64) -> Option<u32> {
    let area = Area::of(&canvas_by_id("timeline")?);
    shown.view.with_untracked(|v| {
        let v = v.as_ref()?;
        let x_of = |s: u32| area.x(f64::from(s) + 0.5, (v.start, v.end));
        let near = v.ooms.iter().zip(&v.oom_entries).map(|(&s, &e)| (e, (x_of(s) - x).abs())).filter(|p| p.1 <= 6.0);
        near.min_by(|a, b| a.1.total_cmp(&b.1)).map(|p| p.0)
    })
}

#[component]
pub(super) fn Plot() -> impl IntoView {
    let (docs, shown, selection, window) = (
        expect_context::<Docs>(),
        expect_context::<Shown>(),
        expect_context::<Selection>(),
        expect_context::<Window>(),
    );
    let doctor = expect_context::<Doctor>();
    let chosen = expect_context::<crate::state::Chosen>();
    let hits = Hits { busy: StoredValue::new(false), next: StoredValue::new(None), docs, shown, selection };
    // Where a press began: x, the window then, and whether it has moved (a drag, not a click).
    let drag = StoredValue::new(None::<(f64, f64, f64, bool)>);
    // A press on the memory axis: the y it began at and where the pointer is now.
    let y_drag = StoredValue::new(None::<(f64, f64)>);
    let on_move = move |e: web_sys::MouseEvent| {
        let (x, y) = (f64::from(e.offset_x()), f64::from(e.offset_y()));
        if let Some((y0, _)) = y_drag.get_value() {
            y_drag.set_value(Some((y0, y)));
            shown.y_pick.set(Some((y0, y)));
            return;
        }
        if let Some((x0, a, b, moved)) = drag.get_value() {
            if (x - x0).abs() > 3.0 || moved {
                drag.set_value(Some((x0, a, b, true)));
                let w = canvas_by_id("timeline").map_or(800.0 - draw::LEFT - draw::RIGHT, |c| Area::of(&c).width());
                let dx = (x - x0) / w * (b - a);
                let n = docs.tab_untracked().map_or(1.0, |t| f64::from(t.n_steps));
                window.slide_to((a - dx).clamp(0.0, (n - (b - a)).max(0.0)), b - a);
                return;
            }
        }
        hits.ask(x, y, false);
    };
    let on_down = move |e: web_sys::MouseEvent| {
        let (x, y) = (f64::from(e.offset_x()), f64::from(e.offset_y()));
        if x < draw::LEFT && y > draw::TOP {
            y_drag.set_value(Some((y, y)));
            return;
        }
        if let Some(t) = docs.tab_untracked() {
            drag.set_value(Some((f64::from(e.offset_x()), t.start, t.end, false)));
        }
    };
    let on_up = move |e: web_sys::MouseEvent| {
        if let Some((y0, y1)) = y_drag.get_value() {
            y_drag.set_value(None);
            shown.y_pick.set(None);
            match (bytes_at(shown, y0), bytes_at(shown, y1)) {
                (Some(a), Some(b)) if (y1 - y0).abs() > 3.0 => window.set_y(a.0, b.0),
                _ => window.reset_y(),
            }
            return;
        }
        let moved = drag.get_value().is_some_and(|d| d.3);
        drag.set_value(None);
        if moved {
            return;
        }
        let (x, y) = (f64::from(e.offset_x()), f64::from(e.offset_y()));
        if y <= draw::LANE {
            if let Some(entry) = oom_at(shown, x) {
                doctor.open(Some(entry));
            }
            return;
        }
        hits.ask(x, y, true);
        if let Some(s) = step_at(docs, x) {
            chosen.pick(docs, s);
        }
    };
    let on_wheel = move |e: web_sys::WheelEvent| {
        e.prevent_default();
        let anchor = step_at(docs, f64::from(e.offset_x()));
        let dy = e.delta_y();
        if e.alt_key() {
            let factor = (dy / 300.0).exp().clamp(0.25, 4.0);
            let at = bytes_at(shown, f64::from(e.offset_y())).map(|b| b.0);
            if let Some((range, natural)) = shown.memory_ranges() {
                window.zoom_y(factor, at, range, natural);
            }
        } else if e.shift_key() || e.delta_x().abs() > dy.abs() {
            let d = if e.delta_x().abs() > dy.abs() { e.delta_x() } else { dy };
            window.pan(window.width() * d / 1000.0);
        } else {
            window.zoom((dy / 300.0).exp().clamp(0.25, 4.0), anchor);
        }
    };
    view! {
        <canvas id="timeline" data-peak-step=move || shown.view.with(|v| v.as_ref().map(|v| v.peak_step.to_string()))
            data-peak-bytes=move || shown.view.with(|v| v.as_ref().map(|v| v.peak_bytes.to_string()))
            on:mousemove=on_move on:mousedown=on_down on:mouseup=on_up
            on:mouseleave=move |_| {
                drag.set_value(None);
                y_drag.set_value(None);
                shown.y_pick.set(None);
                selection.hover.set(None);
                shown.outline.set(Vec::new());
            } on:wheel=on_wheel></canvas>
    }
}
