//! Which view the main area shows (timeline, categories, flame graph, comparison, doctor,
//! a run's ranks)
//! and the switch.

use leptos::prelude::*;

use crate::state::Redraw;

/// What the main area shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Timeline,
    Categories,
    Flame,
    Compare,
    Doctor,
    /// A whole run, a row per rank (`ranks.rs`).
    Ranks,
}

/// The view shown.
#[derive(Clone, Copy)]
pub(crate) struct Shown(RwSignal<Mode>);

impl Shown {
    pub(crate) fn new() -> Shown {
        Shown(RwSignal::new(Mode::Timeline))
    }

    /// Whether `m` is shown (tracked).
    pub(crate) fn is(self, m: Mode) -> bool {
        self.0.get() == m
    }

    /// Shows `m`; its canvases are drawn at their new size.
    pub(crate) fn show(self, m: Mode, redraw: Redraw) {
        self.0.set(m);
        redraw.bump();
    }
}

#[component]
pub(crate) fn ModeSwitch() -> impl IntoView {
    let (shown, redraw) = (expect_context::<Shown>(), expect_context::<Redraw>());
    let button = move |m: Mode, id: &'static str, label: &'static str| {
        view! {
            <button id=id class:active=move || shown.is(m) on:click=move |_| shown.show(m, redraw)>{label}</button>
        }
    };
    view! {
        <nav id="modes">
            {button(Mode::Timeline, "mode-timeline", "Timeline")}
            {button(Mode::Categories, "mode-categories", "Categories")}
            {button(Mode::Flame, "mode-flame", "Flame graph")}
            {button(Mode::Compare, "mode-compare", "Compare files")}
            {button(Mode::Doctor, "mode-doctor", "Doctor")}
            {button(Mode::Ranks, "mode-ranks", "Ranks")}
        </nav>
    }
}
