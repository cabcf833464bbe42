//! How a message between the page and a worker travels, on both sides (the worker's binary
//! includes this file): a JS object `{ msg, with }`. `msg` is the postcard bytes of a
//! [`ToWorker`](engine::protocol::ToWorker) or [`FromWorker`](engine::protocol::FromWorker),
//! whose variant says what the message is; `with` is the one JS value postcard cannot carry,
//! present when the variant names one: the file to open (`ToWorker::Open`), a run's files
//! (`ToWorker::Ranks`), a view's pixels (a `FromWorker::Reply` of a `Response::View`).
//! Nothing is told apart by its position or by a file's name.

use serde::de::DeserializeOwned;
use serde::Serialize;
use wasm_bindgen::{JsCast, JsValue};

const MSG: &str = "msg";
const WITH: &str = "with";

/// A message ready to post: the object, and the buffers that move with it instead of being
/// copied (its bytes, and the pixels it carries).
pub struct Envelope {
    pub value: JsValue,
    pub transfer: js_sys::Array,
}

/// Packs `msg` with the value it names, if any. A `Uint8Array` that comes with it is
/// transferred: the sender must not use it again.
pub fn seal<T: Serialize>(msg: &T, with: Option<&JsValue>) -> Option<Envelope> {
    let bytes = postcard::to_allocvec(msg).ok()?;
    let bytes = js_sys::Uint8Array::from(bytes.as_slice());
    let value = js_sys::Object::new();
    js_sys::Reflect::set(&value, &JsValue::from_str(MSG), &bytes).ok()?;
    let transfer = js_sys::Array::of1(&bytes.buffer());
    if let Some(with) = with {
        js_sys::Reflect::set(&value, &JsValue::from_str(WITH), with).ok()?;
        if let Some(pixels) = with.dyn_ref::<js_sys::Uint8Array>() {
            transfer.push(&pixels.buffer());
        }
    }
    Some(Envelope { value: value.into(), transfer })
}

/// Unpacks a message: it, and the value that came with it (`undefined` when none did).
pub fn open<T: DeserializeOwned>(data: &JsValue) -> Result<(T, JsValue), String> {
    let field = |key: &str| js_sys::Reflect::get(data, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED);
    let bytes = field(MSG).dyn_into::<js_sys::Uint8Array>().map_err(|_| "not a memscape message".to_string())?;
    let msg = postcard::from_bytes(&bytes.to_vec()).map_err(|e| format!("an unreadable message: {e}"))?;
    Ok((msg, field(WITH)))
}
