//! The answer of the last search (its matches, highlighted by the worker in every view of
//! the file), what it looked for, and which match is shown.

use engine::protocol::{Query, SearchResult};
use leptos::prelude::*;

#[derive(Clone, Copy)]
pub(crate) struct Search {
    pub(crate) result: RwSignal<Option<SearchResult>>,
    pub(crate) pos: RwSignal<usize>,
    /// What was searched for (the flame graph flags the frames it matches).
    pub(crate) query: RwSignal<Option<Query>>,
}

impl Search {
    pub(crate) fn new() -> Search {
        Search { result: RwSignal::new(None), pos: RwSignal::new(0), query: RwSignal::new(None) }
    }

    pub(crate) fn clear(self) {
        self.result.set(None);
        self.query.set(None);
    }
}
