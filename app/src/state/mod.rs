//! The page's state, one `Copy` struct of signals per concern, each provided as context by
//! [`provide`] and read by the views with `expect_context`. State modules import no view
//! module; views import state and never each other's signals.
//!
//! - `docs`: the open files (tabs) and where the user is in each: device, memory kind,
//!   window (`window` moves it) and selected event.
//! - `selection`: the allocation under the pointer and the pinned one.
//! - `search`: the answer of the last search and the match shown.
//! - `plot`: what the timeline and its minimap show, and the timings the benchmark reads.
//! - `events`, `allocator`: the event list's page and the allocator state after an event.
//! - `messages`: errors, notices and the status line.
//! - `predicted`: the doctor's predicted peaks the user ticked, drawn on the category chart.
//! - `step`: the step chosen for the flame graph (a click on the category chart or the
//!   timeline).
//! - `nav`: moving to another tab, device or memory kind, which resets what belonged to the
//!   old place in one go (so that no view asks for a picture of a place it just left).

mod allocator;
mod docs;
mod events;
mod messages;
mod nav;
mod plot;
mod predicted;
mod search;
mod selection;
mod step;
mod window;

pub(crate) use allocator::Allocator;
pub(crate) use docs::{Docs, Tab};
pub(crate) use events::Events;
pub(crate) use messages::Messages;
pub(crate) use nav::Nav;
pub(crate) use plot::Plot;
pub(crate) use predicted::{Line, Predicted};
pub(crate) use search::Search;
pub(crate) use selection::Selection;
pub(crate) use step::Chosen;
pub(crate) use window::Window;

use leptos::prelude::*;

/// Bumped when what every canvas is drawn into changed (the window resized, the theme, a
/// view shown or a search's highlights): every canvas that tracks it draws again.
#[derive(Clone, Copy)]
pub(crate) struct Redraw(RwSignal<u32>);

impl Redraw {
    pub(crate) fn bump(self) {
        self.0.update(|x| *x += 1);
    }
    /// Subscribes the running effect; returns the count (part of a view's key).
    pub(crate) fn track(self) -> u32 {
        self.0.get()
    }
}

/// Makes every concern's state and provides it to the page.
pub(crate) fn provide() {
    let docs = Docs::new();
    let selection = Selection::new(docs);
    let search = Search::new();
    let plot = Plot::new();
    let events = Events::new();
    let allocator = Allocator::new();
    provide_context(docs);
    provide_context(Window::new(docs));
    provide_context(selection);
    provide_context(search);
    provide_context(plot);
    provide_context(events);
    provide_context(allocator);
    provide_context(Messages::new());
    provide_context(Predicted::new());
    provide_context(Chosen::new());
    provide_context(Redraw(RwSignal::new(0)));
    provide_context(Nav { docs, selection, search, plot, events, allocator });
}
