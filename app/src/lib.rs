//! The memscape page: tabs of open files, the timeline with its minimap, details, search,
//! statistics, the event list and the allocator map, categories, the flame graph, the
//! comparison of files, and a whole run's ranks. It only handles input and pixels: every figure, layout and colour comes from the
//! engine in each file's worker (`client`), and `draw` turns the view models into pixels.
//!
//! Layers, each importing only those above it: `js_error` (also the worker's), `client`, `dom`, `text`, `draw`, `save`;
//! `state` (a struct of signals per concern, provided as context); `url`, `open`, `keys`,
//! `modes`, `rules`, `run`; the views (`tabs`, `search`, `timeline`, `details`, `stats`, `events`,
//! `allocator`, `categories`, `flame`, `compare`, `doctor`, `ranks`; one may embed another's component, as the toolbar
//! does the search bar, never its signals); `app`, which makes the state and lays the views
//! out. No two modules import each other.

mod allocator;
mod app;
mod categories;
mod client;
mod compare;
mod details;
mod doctor;
mod dom;
mod draw;
mod events;
mod flame;
mod history;
mod js_error;
mod keys;
mod modes;
mod open;
mod ranks;
mod rules;
mod run;
mod save;
mod search;
mod state;
mod stats;
mod tabs;
mod text;
mod timeline;
mod url;
mod window_picker;
mod wire;

/// Starts the workers' side and mounts the page.
pub fn main() {
    console_error_panic_hook::set_once();
    dom::record("app-start-at", dom::now());
    if let Err(e) = client::install() {
        web_sys::console::error_2(&"memscape: could not start the worker".into(), &e);
        return;
    }
    leptos::mount::mount_to_body(app::App);
    dom::when_idle(1000, draw::warm);
}
