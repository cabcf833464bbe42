//! Going to another tab, device or memory kind. What belonged to the old place (hover, pin,
//! search answer, picture, allocator state, list position) is reset in the same turn as the
//! move, so that the views ask once, for the new place only.

use engine::protocol::{DocId, Kind, Request};
use leptos::prelude::*;
use leptos::task::spawn_local;

use super::{Allocator, Docs, Events, Plot, Search, Selection, Tab};
use crate::client::worker;

#[derive(Clone, Copy)]
pub(crate) struct Nav {
    pub(super) docs: Docs,
    pub(super) selection: Selection,
    pub(super) search: Search,
    pub(super) plot: Plot,
    pub(super) events: Events,
    pub(super) allocator: Allocator,
}

impl Nav {
    /// Adds a tab for a file just opened; shows it when `focus` or when nothing is shown.
    pub(crate) fn add(self, tab: Tab, focus: bool) {
        let doc = tab.info.doc;
        let front = self.comes_to_front(focus);
        self.docs.push(tab);
        if front {
            self.select(doc);
        }
    }

    /// Whether a tab added now would be shown: when `focus`, or when nothing is shown.
    pub(crate) fn comes_to_front(self, focus: bool) -> bool {
        focus || self.docs.tab_untracked().is_none()
    }

    pub(crate) fn select(self, doc: DocId) {
        self.leave();
        self.docs.show(Some(doc));
    }

    /// Forgets what belonged to the tab shown.
    fn leave(self) {
        self.selection.clear();
        self.search.clear();
        self.plot.view.set(None);
        self.allocator.state.set(None);
        self.events.first.set(0);
    }

    /// Closes a file (its worker ends); the last tab is shown if it was the one shown.
    pub(crate) fn close(self, doc: DocId) {
        spawn_local(async move {
            worker().ask(Request::Close { doc }).await;
        });
        self.allocator.forget(doc);
        match self.docs.remove(doc) {
            Some(Some(next)) => self.select(next),
            // The views stay in the page, hidden: nothing of this file may be there when the
            // next one's are shown.
            Some(None) => {
                self.leave();
                self.plot.overview.set(None);
                self.docs.show(None);
            }
            None => {}
        }
    }

    /// Shows another device of the file: the whole trace, no event selected.
    pub(crate) fn device(self, device: u32) {
        self.selection.clear();
        self.search.clear();
        self.events.first.set(0);
        self.docs.edit(|t| {
            t.device = device;
            t.start = 0.0;
            t.end = 0.0;
            t.y = None;
            t.event = None;
        });
    }

    /// Shows allocated (blocks) or reserved (segments) memory: the whole trace.
    pub(crate) fn kind(self, kind: Kind) {
        self.selection.clear();
        self.search.clear();
        self.docs.edit(|t| {
            t.kind = kind;
            t.start = 0.0;
            t.end = 0.0;
            t.y = None;
        });
    }
}
