//! What the page says besides the views: an error (dismissable), a notice, the status line.

use leptos::prelude::*;

#[derive(Clone, Copy)]
pub(crate) struct Messages {
    pub(crate) error: RwSignal<Option<String>>,
    pub(crate) notice: RwSignal<Option<String>>,
    pub(crate) status: RwSignal<String>,
}

impl Messages {
    pub(crate) fn new() -> Messages {
        Messages { error: RwSignal::new(None), notice: RwSignal::new(None), status: RwSignal::new(String::new()) }
    }

    pub(crate) fn error(self, text: String) {
        self.error.set(Some(text));
    }

    pub(crate) fn status(self, text: String) {
        self.status.set(text);
    }
}
