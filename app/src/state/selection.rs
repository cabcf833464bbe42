//! The allocation under the pointer and the pinned one. A Blocks allocation's details are
//! asked for again when the worker finishes the categories of its file and device (the
//! first answer may have come before: `class_pending`).

use engine::protocol::{Details, Finished, Kind, Request, Response};
use leptos::prelude::*;
use leptos::task::spawn_local;

use super::Docs;
use crate::client::worker;

#[derive(Clone, Copy)]
pub(crate) struct Selection {
    pub(crate) hover: RwSignal<Option<Details>>,
    pub(crate) pinned: RwSignal<Option<Details>>,
    /// Stacks shown whole, without PyTorch's frame filter.
    pub(crate) all_frames: RwSignal<bool>,
}

impl Selection {
    pub(crate) fn new(docs: Docs) -> Selection {
        let sel =
            Selection { hover: RwSignal::new(None), pinned: RwSignal::new(None), all_frames: RwSignal::new(false) };
        worker().on_analysed(move |doc, device, what| {
            if what != Finished::Categories {
                return;
            }
            let Some(t) = docs.tab_untracked() else { return };
            if t.info.doc != doc || t.device != device {
                return;
            }
            for shown in [sel.hover, sel.pinned] {
                let waiting = shown
                    .with_untracked(|d| d.as_ref().filter(|d| d.kind == Kind::Blocks).map(|d| (d.element, d.kind)));
                let Some((element, kind)) = waiting else { continue };
                spawn_local(async move {
                    if let Response::Details(d) = worker().ask(Request::Details { doc, device, kind, element }).await {
                        if shown.with_untracked(|x| x.as_ref().map(|x| x.element)) == Some(element) {
                            shown.set(Some(d));
                        }
                    }
                });
            }
        });
        sel
    }

    /// The pinned allocation, else the one under the pointer (tracked).
    pub(crate) fn shown(self) -> Option<Details> {
        self.pinned.get().or_else(|| self.hover.get())
    }

    pub(crate) fn shown_untracked(self) -> Option<Details> {
        self.pinned.get_untracked().or_else(|| self.hover.get_untracked())
    }

    /// The pinned element (tracked): part of the timeline's key, which paints it.
    pub(crate) fn pinned_element(self) -> Option<u32> {
        self.pinned.with(|p| p.as_ref().map(|d| d.element))
    }

    pub(crate) fn clear(self) {
        self.hover.set(None);
        self.pinned.set(None);
    }
}
