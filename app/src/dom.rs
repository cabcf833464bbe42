//! What every view needs from the browser: the clock, the timings the benchmark reads,
//! canvases by id, files from an input or a drop, and the page's localStorage.

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// Milliseconds since the page started.
pub(crate) fn now() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

/// Appends `[what, value]` to `window.memscapeTimings`, which the benchmark reads.
pub(crate) fn record(what: &str, value: f64) {
    let Some(w) = web_sys::window() else { return };
    let key = JsValue::from_str("memscapeTimings");
    let arr = match js_sys::Reflect::get(&w, &key).ok().and_then(|v| v.dyn_into::<js_sys::Array>().ok()) {
        Some(a) => a,
        None => {
            let a = js_sys::Array::new();
            let _ = js_sys::Reflect::set(&w, &key, &a);
            a
        }
    };
    arr.push(&js_sys::Array::of2(&JsValue::from_str(what), &JsValue::from_f64(value)));
}

pub(crate) fn canvas_by_id(id: &str) -> Option<web_sys::HtmlCanvasElement> {
    web_sys::window()?.document()?.get_element_by_id(id)?.dyn_into().ok()
}

/// The value of an `<input>` or `<select>` by id ("" when there is none).
pub(crate) fn value_by_id(id: &str) -> String {
    let Some(el) = web_sys::window().and_then(|w| w.document()).and_then(|d| d.get_element_by_id(id)) else {
        return String::new();
    };
    if let Some(i) = el.dyn_ref::<web_sys::HtmlInputElement>() {
        return i.value();
    }
    el.dyn_ref::<web_sys::HtmlSelectElement>().map(|s| s.value()).unwrap_or_default()
}

/// Sets the value of an `<input>` by id.
pub(crate) fn set_value_by_id(id: &str, value: &str) {
    let el = web_sys::window().and_then(|w| w.document()).and_then(|d| d.get_element_by_id(id));
    if let Some(i) = el.as_ref().and_then(|el| el.dyn_ref::<web_sys::HtmlInputElement>()) {
        i.set_value(value);
    }
}

pub(crate) fn files_of(list: Option<web_sys::FileList>) -> Vec<web_sys::File> {
    let Some(list) = list else { return Vec::new() };
    (0..list.length()).filter_map(|i| list.get(i)).collect()
}

pub(crate) fn storage() -> Option<web_sys::Storage> {
    web_sys::window()?.local_storage().ok().flatten()
}
