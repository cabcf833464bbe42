//! The page's side of the workers: one worker per file, so each file has wasm32's whole
//! 4 GiB and one that exhausts it (or any other crash) takes no other file down. Requests go
//! out as postcard bytes and come back as futures; loads report progress through a callback.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};

use engine::protocol::{DocId, Finished, FromWorker, LoadEvent, Request, Response, ToWorker};
use futures_channel::oneshot;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{ErrorEvent, MessageEvent, Worker};

type LoadHandler = Rc<dyn Fn(u32, LoadEvent)>;
/// Who hear that a file's background analysis of a device finished.
type AnalysedHandler = Rc<RefCell<Vec<Rc<dyn Fn(DocId, u32, Finished)>>>>;

thread_local! {
    static CLIENT: RefCell<Option<Client>> = const { RefCell::new(None) };
}

/// Starts the workers' side and keeps it for [`worker`].
pub fn install() -> Result<(), JsValue> {
    let c = start()?;
    CLIENT.with(|x| *x.borrow_mut() = Some(c));
    Ok(())
}

/// The page's handle on the workers.
// `main` mounts the page only after `install` succeeded, so every caller finds it.
#[allow(clippy::expect_used)]
pub fn worker() -> Client {
    CLIENT.with(|c| c.borrow().clone()).expect("workers installed in main")
}

/// A handle on the workers (cheap to clone).
#[derive(Clone)]
pub struct Client(Rc<Pool>);

struct Pool {
    /// The boot script's `blob:` URL, shared by all workers.
    boot: String,
    next: Cell<u32>,
    /// Workers by the file they hold (a file's id is its load's id).
    docs: RefCell<HashMap<DocId, Rc<Conn>>>,
    /// Workers still loading, by load id.
    loading: RefCell<HashMap<u32, Rc<Conn>>>,
    analysed: AnalysedHandler,
    /// The workers that profile a run's files, one file at a time each.
    ranks: RefCell<RankPool>,
}

/// Workers reused across a run's files: at most `cap`, each profiling one file at a time and
/// keeping nothing of it; files wait their turn in `waiting`.
#[derive(Default)]
struct RankPool {
    idle: Vec<Rc<Conn>>,
    /// Workers started and not dead (idle or busy).
    live: usize,
    waiting: std::collections::VecDeque<oneshot::Sender<Rc<Conn>>>,
}

/// How many workers profile a run: one per core the browser reports, at least 1, and at most
/// 8 (each may take a snapshot's whole model while it reads it).
pub fn rank_workers() -> usize {
    let cores = web_sys::window().map_or(1.0, |w| w.navigator().hardware_concurrency());
    (cores as usize).clamp(1, 8)
}

/// One worker and what the page waits on from it.
struct Conn {
    worker: Worker,
    /// The file it holds (a pool's worker: the file it profiles now).
    name: RefCell<String>,
    ready: Cell<bool>,
    queue: RefCell<Vec<JsValue>>,
    pending: RefCell<HashMap<u32, oneshot::Sender<Response>>>,
    load: RefCell<Option<(u32, LoadHandler)>>,
    /// The file it was given (for *Save offline HTML*).
    blob: web_sys::Blob,
    /// Why the worker stopped, once it has.
    dead: RefCell<Option<String>>,
    analysed: AnalysedHandler,
}

/// Prepares the workers' boot script. Their code is built by Trunk next to the page
/// (`worker.js` and `worker_bg.wasm`); a tiny boot script from a `blob:` URL loads it, so the
/// same code works when the page is served from any path.
/// In an offline page (see the `offline` crate) the boot script holds the worker's code and
/// its wasm (base64) itself: the page has nothing to load them from.
fn start() -> Result<Client, JsValue> {
    let boot = match (crate::save::embedded(offline::WORKER_JS), crate::save::embedded_text(offline::WORKER_WASM)) {
        (Some(js), Some(wasm)) => format!(
            "{}\nwasm_bindgen({{ module_or_path: Uint8Array.from(atob('{}'), c => c.charCodeAt(0)) }});",
            String::from_utf8_lossy(&js),
            wasm.trim()
        ),
        _ => {
            let doc = web_sys::window().ok_or("no window")?.document().ok_or("no document")?;
            let base = doc.base_uri()?.unwrap_or_default();
            let base = base.rsplit_once('/').map_or(base.clone(), |(b, _)| format!("{b}/"));
            format!("importScripts('{base}worker.js'); wasm_bindgen({{ module_or_path: '{base}worker_bg.wasm' }});")
        }
    };
    let parts = js_sys::Array::of1(&JsValue::from_str(&boot));
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type("text/javascript");
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &opts)?;
    let boot = web_sys::Url::create_object_url_with_blob(&blob)?;
    Ok(Client(Rc::new(Pool {
        boot,
        next: Cell::new(1),
        docs: RefCell::new(HashMap::new()),
        loading: RefCell::new(HashMap::new()),
        analysed: Rc::new(RefCell::new(Vec::new())),
        ranks: RefCell::new(RankPool::default()),
    })))
}

impl Conn {
    fn spawn(boot: &str, name: &str, blob: &web_sys::Blob, analysed: &AnalysedHandler) -> Result<Rc<Conn>, JsValue> {
        let conn = Rc::new(Conn {
            worker: Worker::new(boot)?,
            name: RefCell::new(name.to_string()),
            ready: Cell::new(false),
            queue: RefCell::new(Vec::new()),
            pending: RefCell::new(HashMap::new()),
            load: RefCell::new(None),
            blob: blob.clone(),
            dead: RefCell::new(None),
            analysed: analysed.clone(),
        });
        let weak = Rc::downgrade(&conn);
        let onmessage = Closure::<dyn Fn(MessageEvent)>::new(move |m: MessageEvent| {
            if let Some(conn) = weak.upgrade() {
                conn.receive(m.data());
            }
        });
        conn.worker.set_onmessage(Some(onmessage.as_ref().unchecked_ref()));
        onmessage.forget();
        let weak = Rc::downgrade(&conn);
        let onerror = Closure::<dyn Fn(ErrorEvent)>::new(move |e: ErrorEvent| {
            e.prevent_default();
            if let Some(conn) = weak.upgrade() {
                conn.died(&e.message());
            }
        });
        conn.worker.set_onerror(Some(onerror.as_ref().unchecked_ref()));
        onerror.forget();
        Ok(conn)
    }

    fn post(&self, v: JsValue) {
        if self.dead.borrow().is_some() {
            return;
        }
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
    fn died(&self, why: &str) {
        if self.dead.borrow().is_some() {
            return;
        }
        let why = if why.is_empty() { "it stopped" } else { why };
        let name = self.name.borrow().clone();
        let msg = format!(
            "{}: the viewer's worker for this file stopped ({why}). A browser tab gives it at most 4 GiB of memory; \
             the command-line `memscape stats {}` reads snapshots of any size.",
            name, name
        );
        if let Some((id, h)) = self.stop(&msg) {
            h(id, LoadEvent::Failed(msg));
        }
    }

    /// Ends the worker for good: requests waiting on it get `why` as their error; returns the
    /// handler of a load still running, for the caller to tell how it ended.
    fn stop(&self, why: &str) -> Option<(u32, LoadHandler)> {
        self.dead.replace(Some(why.to_string()));
        self.worker.terminate();
        for (_, tx) in self.pending.borrow_mut().drain() {
            let _ = tx.send(Response::Error(why.to_string()));
        }
        self.load.take()
    }
}

impl Pool {
    fn id(&self) -> u32 {
        let id = self.next.get();
        self.next.set(id + 1);
        id
    }

    /// Bookkeeping at the end of a load: a loaded file keeps its worker; otherwise it goes.
    fn load_ended(&self, id: u32, event: &LoadEvent) {
        let Some(conn) = self.loading.borrow_mut().remove(&id) else { return };
        match event {
            LoadEvent::Loaded(info) => {
                self.docs.borrow_mut().insert(info.doc, conn);
            }
            _ => conn.worker.terminate(),
        }
    }
}

impl Client {
    /// Sends a request to the worker holding its file and waits for the answer.
    pub async fn ask(&self, request: Request) -> Response {
        let doc = request.doc();
        let Some(conn) = self.0.docs.borrow().get(&doc).cloned() else {
            return Response::Error("that file is not open".into());
        };
        if let Request::Close { .. } = request {
            self.0.docs.borrow_mut().remove(&doc);
            conn.worker.terminate();
            return Response::Done;
        }
        if let Some(why) = conn.dead.borrow().clone() {
            return Response::Error(why);
        }
        let id = self.0.id();
        let (tx, rx) = oneshot::channel();
        conn.pending.borrow_mut().insert(id, tx);
        if let Ok(bytes) = postcard::to_allocvec(&ToWorker::Request { id, request }) {
            conn.post(js_sys::Uint8Array::from(bytes.as_slice()).into());
        }
        rx.await.unwrap_or_else(|_| Response::Error("the worker stopped".into()))
    }

    /// Opens a file (or any blob) in a new worker; `on_event` hears progress and the end,
    /// with the load's id, which is also the file's id once loaded. Returns that id, for
    /// [`Client::cancel`].
    pub fn open(&self, blob: &web_sys::Blob, name: &str, on_event: impl Fn(u32, LoadEvent) + 'static) -> u32 {
        let id = self.0.id();
        let pool: Weak<Pool> = Rc::downgrade(&self.0);
        let handler: LoadHandler = Rc::new(move |id, event: LoadEvent| {
            if !matches!(event, LoadEvent::Progress { .. }) {
                if let Some(pool) = pool.upgrade() {
                    pool.load_ended(id, &event);
                }
            }
            on_event(id, event);
        });
        let conn = match Conn::spawn(&self.0.boot, name, blob, &self.0.analysed) {
            Ok(c) => c,
            Err(e) => {
                handler(id, LoadEvent::Failed(format!("{name}: the browser could not start a worker: {e:?}")));
                return id;
            }
        };
        conn.load.replace(Some((id, handler)));
        self.0.loading.borrow_mut().insert(id, conn.clone());
        let msg = js_sys::Array::of3(&JsValue::from(id), blob, &JsValue::from_str(name));
        conn.post(msg.into());
        id
    }

    /// Calls `f(doc, device, what)` whenever a worker finishes a whole-file analysis of a
    /// device (answers that depend on it come at once from then on). Every view that waits
    /// on one adds its own listener.
    pub fn on_analysed(&self, f: impl Fn(DocId, u32, Finished) + 'static) {
        self.0.analysed.borrow_mut().push(Rc::new(f));
    }

    /// The file an open document was read from.
    pub fn blob(&self, doc: DocId) -> Option<web_sys::Blob> {
        self.0.docs.borrow().get(&doc).map(|c| c.blob.clone())
    }

    /// Profiles one rank's file in the pool's next free worker (waiting for one): answers
    /// `Response::Rank`, or `Response::Error` naming the file and why.
    pub async fn rank(&self, blob: &web_sys::Blob, name: &str) -> Response {
        let conn = match self.pooled() {
            Ok(Some(c)) => c,
            Ok(None) => {
                let (tx, rx) = oneshot::channel();
                self.0.ranks.borrow_mut().waiting.push_back(tx);
                match rx.await {
                    Ok(c) => c,
                    Err(_) => return Response::Error(format!("{name}: no worker to read it")),
                }
            }
            Err(e) => return Response::Error(format!("{name}: the browser could not start a worker: {e:?}")),
        };
        conn.name.replace(name.to_string());
        let id = self.0.id();
        let (tx, rx) = oneshot::channel();
        conn.pending.borrow_mut().insert(id, tx);
        let msg = js_sys::Array::of4(&JsValue::from(id), blob, &JsValue::from_str(name), &JsValue::from_str("rank"));
        conn.post(msg.into());
        let r = rx.await.unwrap_or_else(|_| Response::Error(format!("{name}: the worker stopped")));
        self.release(conn);
        r
    }

    /// An idle pool worker, or a new one while fewer than [`rank_workers`] live; `None`: all
    /// are busy.
    fn pooled(&self) -> Result<Option<Rc<Conn>>, JsValue> {
        let mut pool = self.0.ranks.borrow_mut();
        if let Some(c) = pool.idle.pop() {
            return Ok(Some(c));
        }
        if pool.live >= rank_workers() {
            return Ok(None);
        }
        let blob = web_sys::Blob::new()?;
        let c = Conn::spawn(&self.0.boot, "a rank's file", &blob, &self.0.analysed)?;
        pool.live += 1;
        Ok(Some(c))
    }

    /// A pool worker done with its file goes to the next file waiting, else waits idle; a
    /// dead one (it crashed on its file) is replaced for the next file waiting.
    fn release(&self, conn: Rc<Conn>) {
        let mut conn = Some(conn);
        if conn.as_ref().is_some_and(|c| c.dead.borrow().is_some()) {
            self.0.ranks.borrow_mut().live -= 1;
            conn = None;
        }
        loop {
            let Some(next) = self.0.ranks.borrow_mut().waiting.pop_front() else { break };
            let c = match conn.take() {
                Some(c) => c,
                None => match self.pooled() {
                    Ok(Some(c)) => c,
                    _ => {
                        self.0.ranks.borrow_mut().waiting.push_front(next);
                        return;
                    }
                },
            };
            match next.send(c) {
                Ok(()) => return,
                // That file was given up: the next one takes the worker.
                Err(c) => conn = Some(c),
            }
        }
        if let Some(c) = conn {
            self.0.ranks.borrow_mut().idle.push(c);
        }
    }

    /// Ends the pool's idle workers (a run is read: their memory goes back).
    pub fn end_idle_rank_workers(&self) {
        let mut pool = self.0.ranks.borrow_mut();
        let idle = std::mem::take(&mut pool.idle);
        pool.live -= idle.len();
        for c in idle {
            c.worker.terminate();
        }
    }

    /// Stops a load at once: its worker is terminated.
    pub fn cancel(&self, id: u32) {
        let conn = self.0.loading.borrow().get(&id).cloned();
        if let Some((id, h)) = conn.and_then(|c| c.stop("cancelled")) {
            h(id, LoadEvent::Cancelled);
        }
    }
}
