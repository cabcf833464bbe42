//! What a JavaScript error says, in words. Shared by the page and the worker (which includes
//! this file by its path: linking the page's library into the worker made it 24 KB larger).

use wasm_bindgen::{JsCast, JsValue};

/// What a JavaScript error says, in words: an `Error`'s message (a `DOMException` is an
/// `Error`; its name when it has no message), a thrown string as it is, anything else as JSON
/// writes it. Never the bindings' debug form (`JsValue(TypeError: … at …)`, with the stack).
pub fn js_error(e: &JsValue) -> String {
    if let Some(err) = e.dyn_ref::<js_sys::Error>() {
        let message = String::from(err.message());
        return if message.is_empty() { String::from(err.name()) } else { message };
    }
    if let Some(text) = e.as_string() {
        return text;
    }
    js_sys::JSON::stringify(e).ok().and_then(|s| s.as_string()).unwrap_or_else(|| "an unknown error".into())
}
