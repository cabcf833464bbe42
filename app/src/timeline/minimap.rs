//! The minimap under the plot: the whole trace's totals with the window on them. Drag to
//! choose a window; a click centres the window there.

use leptos::prelude::*;

use crate::dom::canvas_by_id;
use crate::draw;
use crate::state::{Docs, Window};

#[component]
pub(super) fn Minimap() -> impl IntoView {
    let (docs, window) = (expect_context::<Docs>(), expect_context::<Window>());
    // Where a drag began, and whether it has moved.
    let brush = StoredValue::new(None::<(f64, bool)>);
    let step = move |x: f64| -> Option<f64> {
        let area = draw::Area::of(&canvas_by_id("minimap")?);
        let n = f64::from(docs.tab_untracked()?.n_steps);
        Some(area.x_value(x, (0.0, n)).clamp(0.0, n))
    };
    view! {
        <canvas id="minimap"
            on:mousedown=move |e: web_sys::MouseEvent| { if let Some(a) = step(f64::from(e.offset_x())) { brush.set_value(Some((a, false))); } }
            on:mousemove=move |e: web_sys::MouseEvent| {
                if let (Some((a, _)), Some(b)) = (brush.get_value(), step(f64::from(e.offset_x()))) {
                    brush.set_value(Some((a, true)));
                    window.set(a, b);
                }
            }
            on:mouseup=move |e: web_sys::MouseEvent| {
                if let (Some((a, moved)), Some(b)) = (brush.get_value(), step(f64::from(e.offset_x()))) {
                    if moved {
                        window.set(a, b);
                    } else {
                        let w = window.width();
                        window.set(b - w / 2.0, b + w / 2.0);
                    }
                }
                brush.set_value(None);
            }
            on:mouseleave=move |_| brush.set_value(None)></canvas>
    }
}
