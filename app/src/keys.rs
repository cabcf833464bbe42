//! The page's keyboard shortcuts and the help that lists them (`?`).

use leptos::ev;
use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::state::{Plot, Selection, Window};

/// Whether the help is shown.
#[derive(Clone, Copy)]
pub(crate) struct Help(pub(crate) RwSignal<bool>);

impl Help {
    pub(crate) fn toggle(self) {
        self.0.update(|h| *h = !*h);
    }
}

/// W/S zoom, A/D pan, R/F zoom the memory axis, X resets it, `?` help, Esc closes the help
/// and unpins; not while typing.
pub(crate) fn listen(window: Window, selection: Selection, plot: Plot, help: Help) {
    let zoom_y = move |factor: f64| {
        if let Some((shown, natural)) = plot.memory_ranges() {
            window.zoom_y(factor, None, shown, natural);
        }
    };
    let on_key = window_event_listener(ev::keydown, move |e: web_sys::KeyboardEvent| {
        let target = e.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok());
        let tag = target.as_ref().map(|el| el.tag_name().to_lowercase()).unwrap_or_default();
        // A focused checkbox or button takes no text: the keys still move the view.
        let kind = target.and_then(|el| el.get_attribute("type")).unwrap_or_default();
        let typing = match tag.as_str() {
            "select" | "textarea" => true,
            "input" => !matches!(kind.as_str(), "checkbox" | "radio" | "button"),
            _ => false,
        };
        if typing {
            return;
        }
        let w = window.width();
        match e.key().as_str() {
            "w" | "W" => window.zoom(0.8, None),
            "s" | "S" => window.zoom(1.25, None),
            "a" | "A" => window.pan(-w * 0.1),
            "d" | "D" => window.pan(w * 0.1),
            "r" | "R" => zoom_y(0.5),
            "f" | "F" => zoom_y(2.0),
            "x" | "X" => window.reset_y(),
            "?" => help.toggle(),
            "Escape" => {
                help.0.set(false);
                selection.pinned.set(None);
            }
            _ => return,
        }
        e.prevent_default();
    });
    let _ = on_key;
}

#[component]
pub(crate) fn HelpBox() -> impl IntoView {
    let help = expect_context::<Help>();
    view! {
        <Show when=move || help.0.get()>
            <div id="help" on:click=move |_| help.0.set(false)>
                <div class="help-box">
                    <h2>"Keyboard and mouse"</h2>
                    <table>
                        <tr><td>"W / S"</td><td>"zoom in / out"</td></tr>
                        <tr><td>"A / D"</td><td>"pan left / right"</td></tr>
                        <tr><td>"wheel, pinch"</td><td>"zoom around the pointer"</td></tr>
                        <tr><td>"R / F"</td><td>"zoom the memory axis in / out"</td></tr>
                        <tr><td>"alt + wheel"</td><td>"zoom the memory axis around the pointer"</td></tr>
                        <tr><td>"drag on the memory axis"</td><td>"show those bytes (a click there, or X, shows all)"</td></tr>
                        <tr><td>"drag"</td><td>"pan"</td></tr>
                        <tr><td>"click"</td><td>"pin an allocation's details (Esc unpins)"</td></tr>
                        <tr><td>"overview drag"</td><td>"select the window"</td></tr>
                        <tr><td>"↑ / ↓ in the event list"</td><td>"previous / next event"</td></tr>
                        <tr><td>"?"</td><td>"this help"</td></tr>
                    </table>
                </div>
            </div>
        </Show>
    }
}
