//! The worker started by `index.html` before the page's code, until the page takes it over.

use std::rc::Rc;

use engine::protocol::ToWorker;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::Worker;

use super::conn::Conn;
use super::AnalysedHandler;
use crate::wire;

/// The worker that `index.html`'s inline script starts as the page is parsed
/// (`window.memscapeEarly`), before this code has loaded and compiled. The worker fetches the
/// bundled example and reads it as load [`EARLY_ID`](engine::protocol::EARLY_ID) by itself (this thread is busy starting
/// the page meanwhile), and sends the page the example's bytes; the script keeps the
/// worker's other messages until the page takes the worker over. An offline page has none.
pub(super) struct Early(pub(super) js_sys::Object);

impl Early {
    pub(super) fn find() -> Option<Early> {
        let early = js_sys::Reflect::get(&web_sys::window()?.into(), &JsValue::from_str("memscapeEarly")).ok()?;
        early.is_object().then(|| Early(early.unchecked_into()))
    }

    pub(super) fn get(&self, key: &str) -> JsValue {
        js_sys::Reflect::get(&self.0, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
    }

    /// The example's bytes to come: a promise of a `Blob`, or of `null` if they could not be
    /// fetched (or the worker did not start). `None`: not asked for (`?empty`).
    pub(super) fn example(&self) -> Option<js_sys::Promise> {
        self.get("example").dyn_into().ok()
    }

    /// Whether the worker reads (or will read) the example: it was asked for, and it has not
    /// been found missing.
    pub(super) fn reads_example(&self) -> bool {
        self.example().is_some() && !(self.get("fetched").is_truthy() && self.get("blob").is_null())
    }

    /// Sends the worker a message before it is taken over (its script holds it until the
    /// worker's code listens).
    pub(super) fn send(&self, msg: &ToWorker) {
        if let (Ok(worker), Some(e)) = (self.get("worker").dyn_into::<Worker>(), wire::seal(msg, None)) {
            let _ = worker.post_message_with_transfer(&e.value, &e.transfer);
        }
    }

    /// A connection to the worker, not yet its listener ([`Early::hand_over`]).
    pub(super) fn conn(&self, name: &str, blob: &web_sys::Blob, analysed: &AnalysedHandler) -> Option<Rc<Conn>> {
        let worker = self.get("worker").dyn_into::<Worker>().ok()?;
        Some(Conn::new(worker, name, blob, analysed, self.get("at").as_f64().unwrap_or(0.0)))
    }

    /// Makes `conn` (from [`Early::conn`]) the worker's listener, in a task of its own (after
    /// the caller's, which may still be setting up the load that the messages report on):
    /// first the messages the worker sent before, then the next ones as they come.
    pub(super) fn hand_over(self, conn: &Rc<Conn>) {
        let conn = conn.clone();
        wasm_bindgen_futures::spawn_local(async move {
            conn.listen();
            let held: js_sys::Array = self.get("messages").dyn_into().unwrap_or_default();
            for m in held.iter() {
                conn.receive(m);
            }
            if let Some(why) = self.get("error").as_string() {
                conn.died(&why);
            }
            // The script's hold on the worker, its messages and the example's bytes goes (a
            // closed tab's file is not kept by it).
            for key in ["worker", "messages", "blob"] {
                let _ = js_sys::Reflect::set(&self.0, &JsValue::from_str(key), &JsValue::NULL);
            }
        });
    }
}
