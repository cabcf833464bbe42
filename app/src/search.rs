//! Search: frames (text or regex) or an address. The worker highlights the matches in
//! every view of the file; the first is pinned and brought into view, ◀ ▶ step through them.

use engine::protocol::{Query, Request, Response};
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::client::worker;
use crate::dom::value_by_id;
use crate::state::{Docs, Messages, Redraw, Search, Selection, Window};

/// What a search moves: the window to a match, and the pin onto it.
#[derive(Clone, Copy)]
pub(crate) struct Finder {
    docs: Docs,
    search: Search,
    selection: Selection,
    window: Window,
    messages: Messages,
    redraw: Redraw,
}

impl Finder {
    /// Made where the context is (a component's body), used in its handlers.
    pub(crate) fn new() -> Finder {
        Finder {
            docs: expect_context(),
            search: expect_context(),
            selection: expect_context(),
            window: expect_context(),
            messages: expect_context(),
            redraw: expect_context(),
        }
    }

    fn run(self) {
        let (text, mode) = (value_by_id("search"), value_by_id("search-mode"));
        let query = match mode.as_str() {
            "regex" => Query::Regex(text),
            "address" => Query::Address(text),
            _ => Query::Substring(text),
        };
        self.find(query, true);
    }

    /// Searches the file shown (an empty text clears the search); with `bring`, the first
    /// match is brought into view and pinned.
    pub(crate) fn find(self, query: Query, bring: bool) {
        let Some(t) = self.docs.tab_untracked() else { return };
        if matches!(&query, Query::Substring(x) | Query::Regex(x) | Query::Address(x) if x.trim().is_empty()) {
            self.search.clear();
            spawn_local(async move {
                worker().ask(Request::ClearSearch { doc: t.info.doc }).await;
                self.redraw.bump();
            });
            return;
        }
        self.search.query.set(Some(query.clone()));
        spawn_local(async move {
            match worker().ask(Request::Search { doc: t.info.doc, device: t.device, kind: t.kind, query }).await {
                Response::Search(r) => {
                    self.search.pos.set(0);
                    if let Some(&(el, a, b)) = r.matches.first().filter(|_| bring) {
                        self.show(el, a, b);
                    }
                    self.search.result.set(Some(r));
                    self.redraw.bump();
                }
                Response::Error(e) => self.messages.status(e),
                _ => {}
            }
        });
    }

    fn step(self, delta: i64) {
        let Some(r) = self.search.result.get_untracked() else { return };
        if r.matches.is_empty() {
            return;
        }
        let n = r.matches.len() as i64;
        let pos = (self.search.pos.get_untracked() as i64 + delta).rem_euclid(n) as usize;
        self.search.pos.set(pos);
        let (el, a, b) = r.matches[pos];
        self.show(el, a, b);
    }

    /// Brings element `el` (alive from step `a` to `b`) into view and pins it.
    fn show(self, el: u32, a: u32, b: u32) {
        self.window.focus(a, b);
        let Some(t) = self.docs.tab_untracked() else { return };
        let pinned = self.selection.pinned;
        spawn_local(async move {
            let r =
                worker().ask(Request::Details { doc: t.info.doc, device: t.device, kind: t.kind, element: el }).await;
            if let Response::Details(d) = r {
                pinned.set(Some(d));
            }
        });
    }
}

#[component]
pub(crate) fn SearchBar() -> impl IntoView {
    let search = expect_context::<Search>();
    let f = Finder::new();
    view! {
        <input id="search" type="search" placeholder="Search frames or address" on:keydown=move |e: web_sys::KeyboardEvent| {
            if e.key() == "Enter" { f.run(); }
        }/>
        <select id="search-mode">
            <option value="text">"text"</option>
            <option value="regex">"regex"</option>
            <option value="address">"address"</option>
        </select>
        <button id="search-go" on:click=move |_| f.run()>"Find"</button>
        <button id="search-prev" on:click=move |_| f.step(-1)>"◀"</button>
        <button id="search-next" on:click=move |_| f.step(1)>"▶"</button>
        <span id="search-count">{move || search.result.with(|r| r.as_ref().map(|r| {
            if r.count == 0 { "no matches".to_string() } else { format!("{} of {} matches", search.pos.get() + 1, r.count) }
        }))}</span>
    }
}
