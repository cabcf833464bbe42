//! The timeline view: its toolbar, the plot with its lanes (OOMs, annotations) and input
//! handlers, the minimap below it. The pictures come from the worker as view models
//! (`ask`), and `paint` draws them.

mod ask;
pub(crate) use ask::{first_query, first_view};
mod minimap;
mod plot;
mod toolbar;

use leptos::prelude::*;

use crate::dom::canvas_by_id;
use crate::draw;
use crate::state::Docs;

/// The toolbar, the plot and the minimap.
#[component]
pub(crate) fn Timeline() -> impl IntoView {
    let docs = expect_context::<Docs>();
    ask::views();
    ask::minimap();
    ask::paint();
    view! {
        <toolbar::Toolbar/>
        <Show when=move || docs.tab().is_some_and(|t| t.info.devices.is_empty())>
            <div id="no-devices" class="empty">"Nothing was recorded in this file: no device has trace events or segments."</div>
        </Show>
        <div class="plot">
            <plot::Plot/>
            <minimap::Minimap/>
        </div>
    }
}

/// The plot's width in device pixel columns (the canvas less its axes).
fn plot_columns() -> u32 {
    let css = canvas_by_id("timeline").map_or(800.0, |c| draw::Area::of(&c).width().max(10.0));
    (css * draw::pixel_ratio()).round() as u32
}

/// The plot's height in device pixel rows.
fn plot_rows() -> u32 {
    let css = canvas_by_id("timeline").map_or(300.0, |c| draw::Area::of(&c).height().max(1.0));
    (css * draw::pixel_ratio()).round() as u32
}
