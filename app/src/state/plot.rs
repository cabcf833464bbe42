//! What the timeline and its minimap show (the worker's view models), the x axis, and the
//! timings the benchmark reads (`window.memscapeTimings`).

use engine::protocol::{DocId, ViewModel};
use leptos::prelude::*;

#[derive(Clone, Copy)]
pub(crate) struct Plot {
    pub(crate) view: RwSignal<Option<ViewModel>>,
    pub(crate) overview: RwSignal<Option<ViewModel>>,
    /// Wall-clock time on the x axis (where the device recorded it).
    pub(crate) time_axis: RwSignal<bool>,
    /// When the view request whose answer is being drawn left (0 once drawn).
    pub(crate) view_sent: StoredValue<f64>,
    /// The file that still waits for its first picture, with the time its load began.
    pub(crate) first_draw: StoredValue<Option<(DocId, f64)>>,
}

impl Plot {
    pub(crate) fn new() -> Plot {
        Plot {
            view: RwSignal::new(None),
            overview: RwSignal::new(None),
            time_axis: RwSignal::new(false),
            view_sent: StoredValue::new(0.0),
            first_draw: StoredValue::new(None),
        }
    }
}
