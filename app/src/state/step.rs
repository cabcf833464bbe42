//! The step chosen for the flame graph: a click on the category chart, or on the timeline
//! of allocated memory. It belongs to the file and device it was chosen in; none means the
//! peak.

use engine::protocol::{DocId, Kind};
use leptos::prelude::*;

use super::Docs;

#[derive(Clone, Copy)]
pub(crate) struct Chosen(RwSignal<Option<(DocId, u32, u32)>>);

impl Chosen {
    pub(crate) fn new() -> Chosen {
        Chosen(RwSignal::new(None))
    }

    /// Chooses the step under a click (fractional, of the tab shown's timeline): only the
    /// allocated-memory timelines (with or without private pools) count steps as the flame
    /// graph does.
    pub(crate) fn pick(self, docs: Docs, step: f64) {
        let Some(t) = docs.tab_untracked() else { return };
        if t.kind != Kind::Segments && step >= 0.0 {
            self.0.set(Some((t.info.doc, t.device, step.floor().min(f64::from(t.n_steps.saturating_sub(1))) as u32)));
        }
    }

    /// Chooses a step of the blocks timeline of the tab shown.
    pub(crate) fn set(self, docs: Docs, step: u32) {
        if let Some(t) = docs.tab_untracked() {
            self.0.set(Some((t.info.doc, t.device, step)));
        }
    }

    /// Back to the peak.
    pub(crate) fn clear(self) {
        self.0.set(None);
    }

    /// The step chosen in the file and device shown (tracked); `None`: the peak.
    pub(crate) fn get(self, docs: Docs) -> Option<u32> {
        let t = docs.tab()?;
        self.0.get().filter(|c| c.0 == t.info.doc && c.1 == t.device).map(|c| c.2)
    }
}
