//! The page's side of the worker: requests go out as postcard bytes and come back as
//! futures; loads report progress through a callback.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use engine::protocol::{FromWorker, LoadEvent, Request, Response, ToWorker};
use futures_channel::oneshot;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{MessageEvent, Worker};

type LoadHandler = Box<dyn Fn(u32, LoadEvent)>;

/// A handle on the worker (cheap to clone).
#[derive(Clone)]
pub struct Client(Rc<Inner>);

struct Inner {
    worker: Worker,
    ready: Cell<bool>,
    queue: RefCell<Vec<JsValue>>,
    next: Cell<u32>,
    pending: RefCell<HashMap<u32, oneshot::Sender<Response>>>,
    loads: RefCell<HashMap<u32, LoadHandler>>,
}

/// Starts the worker. Its script is built by Trunk next to the page (`worker.js` and
/// `worker_bg.wasm`); a tiny boot script from a `blob:` URL loads it, so the same code works
/// when the page is served from any path.
pub fn start() -> Result<Client, JsValue> {
    let base = web_sys::window().ok_or("no window")?.document().ok_or("no document")?.base_uri()?.unwrap_or_default();
    let base = base.rsplit_once('/').map_or(base.clone(), |(b, _)| format!("{b}/"));
    let boot = format!("importScripts('{base}worker.js'); wasm_bindgen({{ module_or_path: '{base}worker_bg.wasm' }});");
    let parts = js_sys::Array::of1(&JsValue::from_str(&boot));
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type("text/javascript");
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &opts)?;
    let url = web_sys::Url::create_object_url_with_blob(&blob)?;
    let worker = Worker::new(&url)?;
    let inner = Rc::new(Inner {
        worker,
        ready: Cell::new(false),
        queue: RefCell::new(Vec::new()),
        next: Cell::new(1),
        pending: RefCell::new(HashMap::new()),
        loads: RefCell::new(HashMap::new()),
    });
    let weak = Rc::downgrade(&inner);
    let onmessage = Closure::<dyn Fn(MessageEvent)>::new(move |m: MessageEvent| {
        if let Some(inner) = weak.upgrade() {
            inner.receive(m.data());
        }
    });
    inner.worker.set_onmessage(Some(onmessage.as_ref().unchecked_ref()));
    onmessage.forget();
    Ok(Client(inner))
}

impl Inner {
    fn post(&self, v: JsValue) {
        if self.ready.get() {
            let _ = self.worker.post_message(&v);
        } else {
            self.queue.borrow_mut().push(v);
        }
    }

    fn receive(&self, data: JsValue) {
        let (data, pixels) = match data.dyn_ref::<js_sys::Array>() {
            Some(a) => (a.get(0), Some(js_sys::Uint8Array::new(&a.get(1)).to_vec())),
            None => (data, None),
        };
        let bytes = js_sys::Uint8Array::new(&data).to_vec();
        let Ok(mut msg) = postcard::from_bytes::<FromWorker>(&bytes) else {
            web_sys::console::error_1(&"memscape: unreadable message from the worker".into());
            return;
        };
        if let (FromWorker::Reply { response: Response::View(v), .. }, Some(p)) = (&mut msg, pixels) {
            v.pixels = p;
        }
        match msg {
            FromWorker::Ready => {
                self.ready.set(true);
                for v in self.queue.borrow_mut().drain(..) {
                    let _ = self.worker.post_message(&v);
                }
            }
            FromWorker::Reply { id, response } => {
                if let Some(tx) = self.pending.borrow_mut().remove(&id) {
                    let _ = tx.send(response);
                }
            }
            FromWorker::Load { id, event } => {
                let done = !matches!(event, LoadEvent::Progress { .. });
                let handler = if done { self.loads.borrow_mut().remove(&id) } else { None };
                match handler {
                    Some(h) => h(id, event),
                    None => {
                        if let Some(h) = self.loads.borrow().get(&id) {
                            h(id, event);
                        }
                    }
                }
            }
        }
    }

    fn id(&self) -> u32 {
        let id = self.next.get();
        self.next.set(id + 1);
        id
    }
}

impl Client {
    /// Sends a request and waits for its answer.
    pub async fn ask(&self, request: Request) -> Response {
        let id = self.0.id();
        let (tx, rx) = oneshot::channel();
        self.0.pending.borrow_mut().insert(id, tx);
        self.send(&ToWorker::Request { id, request });
        rx.await.unwrap_or_else(|_| Response::Error("the worker stopped".into()))
    }

    fn send(&self, msg: &ToWorker) {
        if let Ok(bytes) = postcard::to_allocvec(msg) {
            self.0.post(js_sys::Uint8Array::from(bytes.as_slice()).into());
        }
    }

    /// Opens a file (or any blob) in the worker; `on_event` hears progress and the end,
    /// with the load's id. Returns that id, for [`Client::cancel`].
    pub fn open(&self, blob: &web_sys::Blob, name: &str, on_event: impl Fn(u32, LoadEvent) + 'static) -> u32 {
        let id = self.0.id();
        self.0.loads.borrow_mut().insert(id, Box::new(on_event));
        let msg = js_sys::Array::of3(&JsValue::from(id), blob, &JsValue::from_str(name));
        self.0.post(msg.into());
        id
    }

    /// Stops a load at its next slice.
    pub fn cancel(&self, id: u32) {
        self.send(&ToWorker::Cancel { id });
    }
}
