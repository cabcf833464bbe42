//! What the timeline and its minimap show (the worker's view models), the x axis, and the
//! timings the benchmark reads (`window.memscapeTimings`).

use engine::protocol::{DocId, OutlineVm, ViewModel};
use leptos::prelude::*;

#[derive(Clone, Copy)]
pub(crate) struct Plot {
    pub(crate) view: RwSignal<Option<ViewModel>>,
    pub(crate) overview: RwSignal<Option<ViewModel>>,
    /// Wall-clock time on the x axis (where the device recorded it).
    pub(crate) time_axis: RwSignal<bool>,
    /// The memory axis starts at what stays alive through the window (where that is at
    /// least a tenth of the peak).
    pub(crate) baseline: RwSignal<bool>,
    /// Where the allocation under the pointer is drawn (outlined in place).
    pub(crate) outline: RwSignal<Vec<OutlineVm>>,
    /// A drag on the memory axis in progress: where it began and where it is (CSS y).
    pub(crate) y_pick: RwSignal<Option<(f64, f64)>>,
    /// When the view request whose answer is being drawn left (0 once drawn).
    pub(crate) view_sent: StoredValue<f64>,
    /// When the window moved whose preview is being drawn (0 once drawn).
    pub(crate) preview_sent: StoredValue<f64>,
    /// The file that still waits for its first picture, with the time its load began.
    pub(crate) first_draw: StoredValue<Option<(DocId, f64)>>,
    /// A timeline has been on screen (a frame has passed since the first one was drawn): what
    /// the panels under it wait for ([`crate::app`]).
    pub(crate) painted: RwSignal<bool>,
}

impl Plot {
    /// The memory range on screen and the one unzoomed (from zero or the baseline).
    pub(crate) fn memory_ranges(self) -> Option<((u64, u64), (u64, u64))> {
        let baseline = self.baseline.get_untracked();
        self.view.with_untracked(|v| {
            v.as_ref().map(|v| ((v.y_lo, v.y_top), engine::natural_axis(v.y_max, v.stable_bytes, baseline)))
        })
    }

    pub(crate) fn new() -> Plot {
        Plot {
            view: RwSignal::new(None),
            overview: RwSignal::new(None),
            time_axis: RwSignal::new(false),
            baseline: RwSignal::new(true),
            outline: RwSignal::new(Vec::new()),
            y_pick: RwSignal::new(None),
            view_sent: StoredValue::new(0.0),
            preview_sent: StoredValue::new(0.0),
            first_draw: StoredValue::new(None),
            painted: RwSignal::new(false),
        }
    }
}
