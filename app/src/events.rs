//! The event list: every trace event of the device, of any length (a page of rows is asked
//! for as it scrolls), with the keyboard. Selecting an event shows the allocator after it.

use engine::protocol::{Request, Response};
use leptos::prelude::*;
use leptos::task::spawn_local;
use snapshot::stats::format_size;

use crate::client::worker;
use crate::state::{Docs, Events};

const ROW: f64 = 20.0;
const LIST_H: f64 = 260.0;
/// The tallest scroll area browsers draw reliably; longer lists scroll proportionally.
const MAX_SPACER: f64 = 8_000_000.0;

/// Asks for the page of rows on screen whenever the file, device or first row changes.
fn ask_pages(docs: Docs, events: Events) {
    let device_key = Memo::new(move |_| docs.tab().map(|t| (t.info.doc, t.device)));
    Effect::new(move |_| {
        let Some((doc, device)) = device_key.get() else { return };
        let first = events.first.get();
        let count = (LIST_H / ROW) as u32 + 2;
        spawn_local(async move {
            let r = worker().ask(Request::Events { doc, device, first, count }).await;
            if let Response::Events(p) = r {
                events.page.set(Some(p));
            }
        });
    });
}

#[component]
pub(crate) fn EventList() -> impl IntoView {
    let (docs, events) = (expect_context::<Docs>(), expect_context::<Events>());
    ask_pages(docs, events);
    let scroller = NodeRef::<leptos::html::Div>::new();
    let total = move || events.page.with(|p| p.as_ref().map_or(0, |p| p.total));
    let spacer = move || (f64::from(total()) * ROW).min(MAX_SPACER);
    let visible = (LIST_H / ROW).floor() as u32;
    // Scroll position <-> first row, linear even when the list is taller than a browser allows.
    let first_of = move |top: f64| -> u32 {
        let range = (spacer() - LIST_H).max(1.0);
        let rows = f64::from(total().saturating_sub(visible));
        ((top / range).clamp(0.0, 1.0) * rows).round() as u32
    };
    let top_of = move |first: u32| -> f64 {
        let rows = f64::from(total().saturating_sub(visible)).max(1.0);
        f64::from(first) / rows * (spacer() - LIST_H).max(0.0)
    };
    let select = move |entry: u32| {
        docs.edit(|t| t.event = Some(entry));
        let first = events.first.get_untracked();
        if entry < first || entry >= first + visible {
            let f = entry.saturating_sub(visible / 2);
            if let Some(el) = scroller.get_untracked() {
                el.set_scroll_top(top_of(f) as i32);
            }
            events.first.set(f.min(total().saturating_sub(visible)));
        }
    };
    let on_key = move |e: web_sys::KeyboardEvent| {
        let cur = docs.tab_untracked().and_then(|t| t.event);
        let n = total();
        if n == 0 {
            return;
        }
        let next = match (e.key().as_str(), cur) {
            ("ArrowDown", None) => 0,
            ("ArrowDown", Some(c)) => (c + 1).min(n - 1),
            ("ArrowUp", Some(c)) => c.saturating_sub(1),
            ("PageDown", c) => (c.unwrap_or(0) + visible).min(n - 1),
            ("PageUp", c) => c.unwrap_or(0).saturating_sub(visible),
            _ => return,
        };
        e.prevent_default();
        select(next);
    };
    view! {
        <section id="events-panel">
            <h2>{move || format!("Events ({})", total())}</h2>
            <div id="events" tabindex="0" node_ref=scroller on:keydown=on_key
                on:scroll=move |_| {
                    if let Some(el) = scroller.get_untracked() {
                        events.first.set(first_of(f64::from(el.scroll_top())));
                    }
                }>
                <div class="spacer-rows" style=move || format!("height:{}px", spacer())>
                    <div class="rows" style=move || {
                        let top = scroller.get().map_or(0, |el| { events.first.track(); el.scroll_top() });
                        format!("transform:translateY({top}px)")
                    }>
                        {move || events.page.get().map(|p| p.rows.into_iter().map(|r| {
                            let entry = r.entry;
                            let sel = move || docs.tab().and_then(|t| t.event) == Some(entry);
                            view! {
                                <div class="row" class:selected=sel data-entry=entry.to_string() on:click=move |_| select(entry)>
                                    <span class="idx">{entry.to_string()}</span>
                                    <span class="act">{r.action.clone()}</span>
                                    <span class="addr">{format!("0x{:x}", r.addr)}</span>
                                    <span class="sz">{format_size(i128::from(r.size))}</span>
                                    <span class="frame">{r.frame.clone()}</span>
                                </div>
                            }
                        }).collect_view())}
                    </div>
                </div>
            </div>
        </section>
    }
}
