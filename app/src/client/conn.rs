//! One worker and what the page waits on from it: its messages in and out.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use engine::protocol::{FromWorker, LoadEvent, Response, ToWorker};
use futures_channel::oneshot;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{ErrorEvent, MessageEvent, Worker};

use super::{AnalysedHandler, LoadHandler};
use crate::wire::{self, Envelope};

/// One worker and what the page waits on from it.
pub(super) struct Conn {
    pub(super) worker: Worker,
    /// The file's name (set when a spare is given its file).
    pub(super) name: RefCell<String>,
    pub(super) ready: Cell<bool>,
    pub(super) queue: RefCell<Vec<Envelope>>,
    pub(super) pending: RefCell<HashMap<u32, oneshot::Sender<Response>>>,
    pub(super) load: RefCell<Option<(u32, LoadHandler)>>,
    /// The file it was given (for *Save offline HTML*).
    pub(super) blob: RefCell<web_sys::Blob>,
    /// Why the worker stopped, once it has.
    pub(super) dead: RefCell<Option<String>>,
    /// A pool worker's files in hand, and whether one is large.
    pub(super) in_flight: Cell<u32>,
    /// Whether a pool worker has been given a run's files.
    pub(super) ranked: Cell<bool>,
    pub(super) large: Cell<bool>,
    pub(super) analysed: AnalysedHandler,
    /// When it was started (ms since the page started).
    pub(super) spawned: f64,
}

/// What the page says of file `name` whose worker stopped, `why`.
pub fn stopped(name: &str, why: &str) -> String {
    let why = if why.is_empty() { "it stopped" } else { why };
    format!(
        "{name}: the viewer's worker for this file stopped ({why}). A browser tab gives it at most 4 GiB of memory; \
         the command-line `memscape stats {name}` reads snapshots of any size, and `memscape slice {name} -o window.pickle \
         --last 1000000` cuts a window of it that the viewer opens."
    )
}

impl Conn {
    pub(super) fn spawn(
        boot: &str,
        name: &str,
        blob: &web_sys::Blob,
        analysed: &AnalysedHandler,
    ) -> Result<Rc<Conn>, JsValue> {
        let conn = Conn::new(Worker::new(boot)?, name, blob, analysed, crate::dom::now());
        conn.listen();
        Ok(conn)
    }

    /// A connection to `worker`, started at `spawned`, that does not listen to it yet.
    pub(super) fn new(
        worker: Worker,
        name: &str,
        blob: &web_sys::Blob,
        analysed: &AnalysedHandler,
        spawned: f64,
    ) -> Rc<Conn> {
        Rc::new(Conn {
            worker,
            name: RefCell::new(name.to_string()),
            ready: Cell::new(false),
            queue: RefCell::new(Vec::new()),
            pending: RefCell::new(HashMap::new()),
            load: RefCell::new(None),
            blob: RefCell::new(blob.clone()),
            dead: RefCell::new(None),
            in_flight: Cell::new(0),
            ranked: Cell::new(false),
            large: Cell::new(false),
            analysed: analysed.clone(),
            spawned,
        })
    }

    /// Hears the worker's messages and its end.
    pub(super) fn listen(self: &Rc<Self>) {
        let weak = Rc::downgrade(self);
        let onmessage = Closure::<dyn Fn(MessageEvent)>::new(move |m: MessageEvent| {
            if let Some(conn) = weak.upgrade() {
                conn.receive(m.data());
            }
        });
        self.worker.set_onmessage(Some(onmessage.as_ref().unchecked_ref()));
        onmessage.forget();
        let weak = Rc::downgrade(self);
        let onerror = Closure::<dyn Fn(ErrorEvent)>::new(move |e: ErrorEvent| {
            e.prevent_default();
            if let Some(conn) = weak.upgrade() {
                conn.died(&e.message());
            }
        });
        self.worker.set_onerror(Some(onerror.as_ref().unchecked_ref()));
        onerror.forget();
    }

    pub(super) fn send(&self, msg: &ToWorker) {
        self.post(wire::seal(msg, None));
    }

    /// Sends a message with the JS value its variant names (a file, a run's files).
    pub(super) fn send_with(&self, msg: &ToWorker, with: &JsValue) {
        self.post(wire::seal(msg, Some(with)));
    }

    pub(super) fn post(&self, e: Option<Envelope>) {
        let Some(e) = e.filter(|_| self.dead.borrow().is_none()) else { return };
        if self.ready.get() {
            let _ = self.worker.post_message_with_transfer(&e.value, &e.transfer);
        } else {
            self.queue.borrow_mut().push(e);
        }
    }

    pub(super) fn receive(&self, data: JsValue) {
        let (mut msg, with) = match wire::open::<FromWorker>(&data) {
            Ok(m) => m,
            Err(e) => {
                web_sys::console::error_1(&format!("memscape: from the worker, {e}").into());
                return;
            }
        };
        if let (FromWorker::Reply { response: Response::View(v), .. }, Some(p)) =
            (&mut msg, with.dyn_ref::<js_sys::Uint8Array>())
        {
            v.pixels = p.to_vec();
        }
        match msg {
            FromWorker::Ready => {
                self.ready.set(true);
                crate::dom::record("worker-ready", crate::dom::now() - self.spawned);
                for e in self.queue.borrow_mut().drain(..) {
                    let _ = self.worker.post_message_with_transfer(&e.value, &e.transfer);
                }
            }
            FromWorker::Crashed(words) => self.died(&words),
            FromWorker::Analysed { doc, device, what } => {
                let handlers = self.analysed.borrow().clone();
                for h in handlers {
                    h(doc, device, what);
                }
            }
            FromWorker::Reply { id, response } => {
                if let Some(tx) = self.pending.borrow_mut().remove(&id) {
                    let _ = tx.send(response);
                }
            }
            FromWorker::Load { id, event } => {
                let handler = self.load.borrow().as_ref().map(|(_, h)| h.clone());
                if !matches!(event, LoadEvent::Progress { .. }) {
                    self.load.take();
                }
                if let Some(h) = handler {
                    h(id, event);
                }
            }
        }
    }

    /// The worker stopped (a panic, or the browser ended it, e.g. out of memory): everything
    /// waiting on it hears why, and it is terminated for good.
    pub(super) fn died(&self, why: &str) {
        if self.dead.borrow().is_some() {
            return;
        }
        let msg = stopped(&self.name.borrow(), why);
        if let Some((id, h)) = self.stop(&msg) {
            h(id, LoadEvent::Failed(msg));
        }
    }

    /// Ends the worker for good: requests waiting on it get `why` as their error; returns the
    /// handler of a load still running, for the caller to tell how it ended.
    pub(super) fn stop(&self, why: &str) -> Option<(u32, LoadHandler)> {
        self.dead.replace(Some(why.to_string()));
        self.worker.terminate();
        for (_, tx) in self.pending.borrow_mut().drain() {
            let _ = tx.send(Response::Error(why.to_string()));
        }
        self.load.take()
    }
}
