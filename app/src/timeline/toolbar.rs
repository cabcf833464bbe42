//! The timeline's toolbar: device, memory kind, x axis, *Jump to peak*, *Whole trace*, the
//! memory axis (baseline, the range shown, its reset), the exports (a PNG of the plot, an
//! offline page of the file), and the search.

use engine::protocol::Kind;
use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;

use crate::client::worker;
use crate::dom::canvas_by_id;
use crate::search::SearchBar;
use crate::state::{Docs, Messages, Nav, Plot, Window};
use snapshot::stats::format_size;

#[component]
pub(super) fn Toolbar() -> impl IntoView {
    let (docs, nav, plot, window) =
        (expect_context::<Docs>(), expect_context::<Nav>(), expect_context::<Plot>(), expect_context::<Window>());
    let is_kind = move |k: Kind| docs.tab().is_some_and(|t| t.kind == k);
    // Offered for a device with a private pool (CUDA graphs, MemPool).
    let has_pools = move || {
        docs.tab().is_some_and(|t| t.info.device_summary(t.device).is_some_and(|d| !d.private_pools.is_empty()))
    };
    view! {
        <div class="toolbar">
            <label>"Device "
                <select id="device" on:change=move |e| nav.device(event_target_value(&e).parse().unwrap_or(0))>
                    <DeviceOptions/>
                </select>
            </label>
            <label>"Memory "
                <select id="kind" on:change=move |e| {
                    nav.kind(crate::url::kind_of(&event_target_value(&e)));
                }>
                    <option value="blocks" selected=move || is_kind(Kind::Blocks)>"Allocated (active memory timeline)"</option>
                    <Show when=has_pools>
                        <option value="pools" selected=move || is_kind(Kind::PoolEnvelopes)>"Allocated, incl. private pools"</option>
                    </Show>
                    <option value="segments" selected=move || is_kind(Kind::Segments)>"Reserved (segments) vs allocated"</option>
                </select>
            </label>
            <label>"X axis "
                <select id="xaxis" on:change=move |e| plot.time_axis.set(event_target_value(&e) == "time")>
                    <option value="events">"event index"</option>
                    <option value="time" disabled=move || !docs.tab().is_some_and(|t| t.has_time())>"wall-clock time"</option>
                </select>
            </label>
            <button id="peak" on:click=move |_| {
                if let Some(v) = plot.view.get_untracked() {
                    let p = f64::from(v.peak_step);
                    let w = ((v.end - v.start) / 4.0).max(8.0);
                    window.set(p - w / 2.0, p + w / 2.0);
                }
            }>"Jump to peak"</button>
            <button id="whole" on:click=move |_| window.whole()>"Whole trace"</button>
            <MemoryAxis/>
            <Exports/>
            <span class="spacer"></span>
            <SearchBar/>
        </div>
    }
}

/// The memory axis: the baseline toggle, the range shown when it does not start at zero, and
/// a reset when the user zoomed it.
#[component]
fn MemoryAxis() -> impl IntoView {
    let (docs, plot, window) = (expect_context::<Docs>(), expect_context::<Plot>(), expect_context::<Window>());
    let zoomed = move || docs.tab().is_some_and(|t| t.y.is_some());
    let range = move || {
        plot.view.with(|v| {
            v.as_ref().filter(|v| v.y_lo > 0).map(|v| {
                let how = if zoomed() { "memory zoomed" } else { "from the baseline" };
                let size = |b: u64| format_size(i128::from(b));
                format!("memory {} to {} ({how})", size(v.y_lo), size(v.y_top))
            })
        })
    };
    view! {
        <label title="Start the memory axis at what stays alive through the window (parameters, optimizer state), so what moves fills the plot">
            <input type="checkbox" id="baseline" prop:checked=move || plot.baseline.get()
                on:change=move |e| plot.baseline.set(event_target_checked(&e))/>
            " Baseline"
        </label>
        <span id="y-range">{range}</span>
        <Show when=zoomed>
            <button id="reset-y" title="The whole memory axis again (X)" on:click=move |_| window.reset_y()>"Reset memory axis"</button>
        </Show>
    }
}

/// One option per device of the file: its name (when the file says it) and event count.
#[component]
fn DeviceOptions() -> impl IntoView {
    let docs = expect_context::<Docs>();
    move || {
        docs.tab().map(|t| {
            t.info
                .devices
                .iter()
                .map(|d| {
                    let v = d.device.to_string();
                    let sel = d.device == t.device;
                    let gpu = t.info.device_summary(d.device).and_then(|s| s.gpu.as_ref());
                    let name = match gpu {
                        Some(g) => format!(" {}", g.name),
                        None if d.device == engine::protocol::HOST => " (pinned memory)".into(),
                        None => String::new(),
                    };
                    let label = format!("{}{name} ({} events)", crate::text::device_name(&t.info, d.device), d.entries);
                    view! { <option value=v selected=sel>{label}</option> }
                })
                .collect_view()
        })
    }
}

/// *Export PNG* and *Save offline HTML*.
#[component]
fn Exports() -> impl IntoView {
    let (docs, messages) = (expect_context::<Docs>(), expect_context::<Messages>());
    let export_png = move |_| {
        let Some(c) = canvas_by_id("timeline") else { return };
        let Ok(url) = c.to_data_url() else { return };
        let Some(doc) = web_sys::window().and_then(|w| w.document()) else { return };
        if let Ok(a) = doc.create_element("a") {
            let a: web_sys::HtmlAnchorElement = a.unchecked_into();
            a.set_href(&url);
            let name = docs.tab_untracked().map_or("memscape".into(), |t| t.info.name);
            a.set_download(&format!("{name}.timeline.png"));
            a.click();
        }
    };
    let save_html = move |_| {
        let Some(t) = docs.tab_untracked() else { return };
        let Some(blob) = worker().blob(t.info.doc) else { return };
        messages.status(format!("Making an offline page of {}…", t.info.name));
        spawn_local(async move {
            match crate::save::save(t.info.name.clone(), blob).await {
                Ok(()) => messages.status(format!("Saved {}.html", t.info.name)),
                Err(e) => {
                    // The error says what happened: "Making…" would stay, as if it went on.
                    messages.status(String::new());
                    messages.error(format!("{}: could not make the offline page: {e}", t.info.name));
                }
            }
        });
    };
    view! {
        <button id="png" on:click=export_png>"Export PNG"</button>
        <button id="save-html" title="One HTML file with the viewer and this snapshot; opens offline" on:click=save_html>"Save offline HTML"</button>
    }
}
