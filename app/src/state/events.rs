//! The event list: the page of rows on screen and the first row's index.

use engine::protocol::EventPage;
use leptos::prelude::*;

#[derive(Clone, Copy)]
pub(crate) struct Events {
    pub(crate) page: RwSignal<Option<EventPage>>,
    pub(crate) first: RwSignal<u32>,
}

impl Events {
    pub(crate) fn new() -> Events {
        Events { page: RwSignal::new(None), first: RwSignal::new(0) }
    }
}
