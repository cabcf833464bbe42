//! The page: makes every concern's state, provides it as context, opens the first file,
//! listens to the window, and lays the views out.

use leptos::ev;
use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::allocator::AllocatorPanel;
use crate::categories::{CategoryView, Cats, Theirs};
use crate::compare::{Compare, CompareView};
use crate::details::DetailsPanel;
use crate::doctor::{Doctor, DoctorView, OomBanner};
use crate::dom::{dropped_entries, files_with_paths, read_entries};
use crate::events::EventList;
use crate::flame::{FlameView, Flames};
use crate::history::HistoryBanner;
use crate::keys::{self, Help, HelpBox};
use crate::modes::{Mode, ModeSwitch, Shown};
use crate::open::{Opener, EXAMPLE};
use crate::ranks::RanksView;
use crate::rules::UserRules;
use crate::run::Run;
use crate::state::{self, Docs, Messages, Nav, Plot, Redraw, Selection, Window};
use crate::stats::StatsPanel;
use crate::tabs::{Banners, Header, Loads};
use crate::timeline::Timeline;
use crate::url::{self, Restore};
use crate::window_picker::WindowPicker;

#[component]
pub(crate) fn App() -> impl IntoView {
    state::provide();
    let (docs, messages, redraw) = (expect_context::<Docs>(), expect_context::<Messages>(), expect_context::<Redraw>());
    let (selection, window) = (expect_context::<Selection>(), expect_context::<Window>());
    let restore = Restore::read(EXAMPLE, messages);
    let opener = Opener::new(expect_context::<Nav>(), messages, restore, selection, expect_context::<Plot>());
    let shown = Shown::new();
    let rules = UserRules::new(docs, messages);
    let help = Help(RwSignal::new(false));
    provide_context(opener);
    provide_context(shown);
    provide_context(rules);
    provide_context(help);
    provide_context(Doctor::new(docs, shown, rules, messages, redraw));
    provide_context(Cats::new(docs, shown, rules, redraw, expect_context()));
    provide_context(Theirs::new(docs, shown, rules, messages));
    provide_context(Compare::new(docs, messages, redraw));
    provide_context(Flames::new(docs, shown, messages, redraw));
    let run = Run::new(opener, docs, messages, shown, redraw);
    provide_context(run);
    url::follow(docs, selection);
    keys::listen(window, selection, expect_context(), help);
    listen_to_window(redraw);
    opener.open_at_start();

    // A drop of a folder (read through) or of three files or more is a run; one or two files
    // open as tabs.
    // Three files or more dragged over the page will be a run: its workers start while the
    // user aims (one or two open as tabs, whose own workers should not share the cores).
    let on_drag_enter = |e: web_sys::DragEvent| {
        if e.data_transfer().is_some_and(|dt| dt.items().length() >= 3) {
            crate::client::worker().warm_rank_workers();
        }
    };
    // No file open nor loading, and no run: only the invitation to drop files is shown.
    let idle = move || no_file(docs, opener) && run.total.get() == 0 && !shown.is(Mode::Ranks);
    let on_drop = move |e: web_sys::DragEvent| {
        e.prevent_default();
        let Some(dt) = e.data_transfer() else { return };
        match dropped_entries(&dt) {
            Some(entries) => spawn_local(async move {
                let (files, folder) = read_entries(entries).await;
                run.open(files, folder);
            }),
            None => run.open(files_with_paths(dt.files()), false),
        }
    };
    view! {
        <div class="app" on:dragover=|e: web_sys::DragEvent| e.prevent_default() on:dragenter=on_drag_enter on:drop=on_drop>
            <Header/>
            <Loads/>
            <Banners/>
            <Show when=idle>
                <div class="empty">"Drop PyTorch memory snapshots anywhere on this page, or use Open files…; a whole run (a folder, or three files or more) opens as Ranks"</div>
            </Show>
            // Laid out from the start, hidden until a file is open or loading: the first file
            // is then read without the page laying its views out meanwhile (on a two-core
            // machine that slowed the read by a third), and its first view is asked for as
            // soon as it is chosen (the plot has its size).
            <div class="views" class:idle=idle>
                <Views/>
            </div>
            <HelpBox/>
            <div id="status">{move || messages.status.get()}</div>
        </div>
    }
}

/// Every canvas is drawn again when the window is resized, the system switches between
/// light and dark, or the device pixel ratio changes (the window moved to another screen,
/// or the page was zoomed).
fn listen_to_window(redraw: Redraw) {
    let on_resize = window_event_listener(ev::resize, move |_| redraw.bump());
    let _ = on_resize;
    if let Some(mq) = web_sys::window().and_then(|w| w.match_media("(prefers-color-scheme: dark)").ok().flatten()) {
        let on_theme = Closure::<dyn Fn()>::new(move || redraw.bump());
        mq.set_onchange(Some(on_theme.as_ref().unchecked_ref()));
        on_theme.forget();
    }
    watch_pixel_ratio(redraw);
    // Not every change fires the media query (Chromium's emulation of another screen does
    // not): a look once a second catches the rest.
    let ratio = StoredValue::new(crate::draw::pixel_ratio());
    let poll = Closure::<dyn Fn()>::new(move || {
        let now = crate::draw::pixel_ratio();
        if now != ratio.get_value() {
            ratio.set_value(now);
            redraw.bump();
        }
    });
    if let Some(w) = web_sys::window() {
        let _ = w.set_interval_with_callback_and_timeout_and_arguments_0(poll.as_ref().unchecked_ref(), 1000);
    }
    poll.forget();
}

/// Redraws once the pixel ratio leaves its current value, then watches the new one (a media
/// query matches one ratio only).
fn watch_pixel_ratio(redraw: Redraw) {
    let query = format!("(resolution: {}dppx)", crate::draw::pixel_ratio());
    let Some(mq) = web_sys::window().and_then(|w| w.match_media(&query).ok().flatten()) else { return };
    let on_change = Closure::once_into_js(move || {
        redraw.bump();
        watch_pixel_ratio(redraw);
    });
    mq.set_onchange(Some(on_change.unchecked_ref()));
}

/// No file is shown nor loading (tracked).
fn no_file(docs: Docs, opener: Opener) -> bool {
    docs.active().is_none() && !opener.loading()
}

/// The mode switch and the view it shows. The timeline view stays in the page when hidden
/// (its canvases keep their pictures); the others are made when shown.
#[component]
fn Views() -> impl IntoView {
    let (shown, docs, opener) = (expect_context::<Shown>(), expect_context::<Docs>(), expect_context::<Opener>());
    view! {
        <ModeSwitch/>
        <Show when=move || shown.is(Mode::Ranks)>
            <RanksView/>
        </Show>
        // A run is open, and no file of it: the way to one.
        <Show when=move || no_file(docs, opener) && !shown.is(Mode::Ranks)>
            <p class="hint" id="no-tab">"No file is open: click a rank in Ranks to open it."</p>
        </Show>
        // Laid out with no file too (hidden, and empty): see `App`.
        <div class="views" class:idle=move || no_file(docs, opener)>
            <FileViews/>
        </div>
    }
}

/// The views of the open file.
#[component]
fn FileViews() -> impl IntoView {
    let shown = expect_context::<Shown>();
    let plot = expect_context::<Plot>();
    let docs = expect_context::<Docs>();
    // The host's pinned memory has no categories and no doctor: they stay per GPU.
    let host = move || docs.tab().is_some_and(|t| t.device == engine::protocol::HOST);
    view! {
        <OomBanner/>
        <HistoryBanner/>
        <WindowPicker/>
        <Show when=move || host() && (shown.is(Mode::Doctor) || shown.is(Mode::Categories))>
            <p class="hint" id="per-gpu">"Categories and the doctor are per GPU: pick a cuda device above. The host's pinned memory has the timeline, its statistics, events, allocator state and flame graph."</p>
        </Show>
        <Show when=move || shown.is(Mode::Doctor) && !host()>
            <DoctorView/>
        </Show>
        <Show when=move || shown.is(Mode::Categories) && !host()>
            <CategoryView/>
        </Show>
        <Show when=move || shown.is(Mode::Flame)>
            <FlameView/>
        </Show>
        <Show when=move || shown.is(Mode::Compare)>
            <CompareView/>
        </Show>
        <div id="timeline-view" style:display=move || if shown.is(Mode::Timeline) { "" } else { "none" }>
            <Timeline/>
            // Made once a timeline has been on screen: making them, and answering their first
            // requests, came before the cold page's first picture, on the thread that draws it
            // (about 30 ms, measured with the cold-page probe; git log -p docs/benchmarks.md). Until
            // a file is open they are hidden.
            <Show when=move || plot.painted.get()>
                <div class="panels">
                    <DetailsPanel/>
                    <StatsPanel/>
                </div>
                <div class="panels">
                    <EventList/>
                    <AllocatorPanel/>
                </div>
            </Show>
        </div>
    }
}
