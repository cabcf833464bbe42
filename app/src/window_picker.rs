//! The window picker: while the tab shown is a window of a file (one too large to read
//! whole, or opened with `?last=N`), which events it holds of how many, and another window of
//! the same file (its last N events, or a range) opened in a tab of its own.

use engine::protocol::ReadWindow;
use leptos::prelude::*;

use crate::client::worker;
use crate::dom::value_by_id;
use crate::open::Opener;
use crate::state::{Docs, Messages};

/// "A window of FILE: events A..B of N" and a form for another one.
#[component]
pub(crate) fn WindowPicker() -> impl IntoView {
    let docs = expect_context::<Docs>();
    let opener = expect_context::<Opener>();
    let messages = expect_context::<Messages>();
    // Only a windowed read (a file cut by `memscape slice` and read whole names the file it
    // was cut from, whose entries this tab does not hold).
    let window = move || {
        docs.tab()
            .filter(|t| t.info.read_window.is_some())
            .and_then(|t| t.info.summary.window.clone().map(|w| (t.info.doc, w)))
    };
    let open = move |_| {
        let Some((doc, w)) = window() else { return };
        let Some(blob) = worker().blob(doc) else { return };
        let number = |id: &str| value_by_id(id).trim().replace(['_', ','], "").parse::<u64>().ok();
        let read = if value_by_id("window-kind") == "last" {
            number("window-last").filter(|&n| n > 0).map(ReadWindow::Last)
        } else {
            number("window-from").map(|a| ReadWindow::Entries(a, number("window-to").unwrap_or(u64::MAX)))
        };
        match read {
            Some(ReadWindow::Entries(a, b)) if b <= a => {
                messages.error(format!("{}: events {a} to {b}: the end must come after the start", w.source));
            }
            Some(read) => opener.open_window(blob, w.source.clone(), read),
            None => messages.error(format!("{}: a window needs a number of events", w.source)),
        }
    };
    view! {
        <Show when=move || window().is_some()>
            <div id="window-picker" role="group" aria-label="Window of the file">
                <span id="window-held">{move || window().map(|(_, w)| format!("A window of {}", w.describe()))}</span>
                " · another window: "
                <select id="window-kind" aria-label="Which events">
                    <option value="last">"the last"</option>
                    <option value="range">"events from"</option>
                </select>
                <input id="window-last" type="text" inputmode="numeric" size="10" aria-label="How many events" value="1000000"/>
                <input id="window-from" type="text" inputmode="numeric" size="10" aria-label="First event" placeholder="from"/>
                <input id="window-to" type="text" inputmode="numeric" size="10" aria-label="End event (not included)" placeholder="to"/>
                <button id="window-open" on:click=open>"Open window"</button>
            </div>
        </Show>
    }
}
