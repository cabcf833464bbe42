//! The allocator state after the selected event (or before the first), and which files and
//! devices have their state checkpoints made (the worker undoes the whole trace once, in the
//! background; the state before the first event is asked for only after that).

use engine::protocol::{DocId, Finished, StateView};
use leptos::prelude::*;

use crate::client::worker;

#[derive(Clone, Copy)]
pub(crate) struct Allocator {
    pub(crate) state: RwSignal<Option<StateView>>,
    ready: RwSignal<Vec<(DocId, u32)>>,
}

impl Allocator {
    pub(crate) fn new() -> Allocator {
        let a = Allocator { state: RwSignal::new(None), ready: RwSignal::new(Vec::new()) };
        worker().on_analysed(move |doc, device, what| {
            if what == Finished::AllocatorState {
                a.ready.update(|r| r.push((doc, device)));
            }
        });
        a
    }

    /// Whether the state checkpoints of a file's device are made (tracked).
    pub(crate) fn ready(self, doc: DocId, device: u32) -> bool {
        self.ready.with(|r| r.contains(&(doc, device)))
    }

    /// A closed file's checkpoints are gone with its worker.
    pub(crate) fn forget(self, doc: DocId) {
        self.ready.update(|r| r.retain(|k| k.0 != doc));
    }
}
