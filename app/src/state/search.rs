//! The answer of the last search (its matches, highlighted by the worker in every view of
//! the file) and which match is shown.

use engine::protocol::SearchResult;
use leptos::prelude::*;

#[derive(Clone, Copy)]
pub(crate) struct Search {
    pub(crate) result: RwSignal<Option<SearchResult>>,
    pub(crate) pos: RwSignal<usize>,
}

impl Search {
    pub(crate) fn new() -> Search {
        Search { result: RwSignal::new(None), pos: RwSignal::new(0) }
    }

    pub(crate) fn clear(self) {
        self.result.set(None);
    }
}
