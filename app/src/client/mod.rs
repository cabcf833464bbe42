//! The page's side of the workers: one worker per file, so each file has wasm32's whole
//! 4 GiB and one that exhausts it (or any other crash) takes no other file down. Messages
//! travel in `wire.rs`'s envelope; requests come back as futures, loads report progress
//! through a callback.
//!
//! A spare worker, its wasm compiled and started, waits for the next file: one is started
//! with the page (unless the first worker reads the bundled example: then once that is read)
//! and another a moment after each load ends, so that opening a file never waits for a worker
//! to start. The page's first worker is started before this code runs, by the inline script
//! of `index.html` ([`Early`]), and reads the bundled example while this code is still being
//! compiled.

mod conn;
mod early;
mod ranks;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};

pub use engine::protocol::EARLY_ID;
use engine::protocol::{DocId, Finished, FirstView, LoadEvent, ReadWindow, Request, Response, ToWorker, ViewQuery};
use futures_channel::oneshot;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::js_error::js_error;
pub use conn::stopped;
use conn::Conn;
use early::Early;
pub use ranks::rank_workers;
use ranks::RankPool;

type LoadHandler = Rc<dyn Fn(u32, LoadEvent)>;
/// Who hear that a file's background analysis of a device finished.
type AnalysedHandler = Rc<RefCell<Vec<Rc<dyn Fn(DocId, u32, Finished)>>>>;

thread_local! {
    static CLIENT: RefCell<Option<Client>> = const { RefCell::new(None) };
}

/// Starts the workers' side and keeps it for [`worker`].
pub fn install() -> Result<(), JsValue> {
    let c = start()?;
    let early = Early::find();
    // The first file's worker starts with the page: the one started early, unless it reads
    // the bundled example (the next spare then comes once that is loaded).
    let reading = early.as_ref().is_some_and(Early::reads_example);
    c.0.example.replace(early.as_ref().and_then(Early::example));
    c.0.early.replace(early);
    if !reading {
        c.keep_spare();
    }
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
    /// A started worker that holds no file yet: the next file's.
    spare: RefCell<Option<Rc<Conn>>>,
    /// The worker started by the page's inline script, until it is taken over: by the
    /// bundled example's load, else as the spare.
    early: RefCell<Option<Early>>,
    /// The bundled example's bytes as that worker fetches them ([`Early::example`]).
    example: RefCell<Option<js_sys::Promise>>,
    /// Views asked for ahead of the page (the first view of a file just loaded, while its
    /// tab is being built), one per file at most: the query, and where its answer arrives.
    prefetched: RefCell<HashMap<DocId, (ViewQuery, oneshot::Receiver<Response>)>>,
    /// First views asked for while their files are read ([`Client::ahead`]), by load: the
    /// request's id, the view, and where its answer arrives. Prefetched once the file is
    /// loaded.
    ahead: RefCell<HashMap<u32, Ahead>>,
    /// The first view asked of the early worker before it was taken over: the request's id
    /// and where its answer goes, for the connection that takes it over.
    early_ahead: RefCell<Option<(u32, oneshot::Sender<Response>)>>,
}

/// A first view asked for ahead: the request's id, the view, and where its answer arrives.
type Ahead = (u32, FirstView, oneshot::Receiver<Response>);

/// How long after a load ends the next spare worker starts (ms): the new file's first
/// views and draws go first.
const SPARE_MS: i32 = 300;

/// Prepares the workers' boot script. Their code is built by Trunk next to the page
/// (`worker.js` and `worker_bg.wasm`); a tiny boot script from a `blob:` URL loads it, so the
/// same code works when the page is served from any path.
/// In an offline page (see the `offline` crate) the boot script holds the worker's code and
/// its wasm (base64) itself: the page has nothing to load them from. Wasm that fails to start
/// is thrown again outside its promise, as the worker's error event ([`Conn::died`]), instead
/// of leaving the file waiting.
fn start() -> Result<Client, JsValue> {
    const FAILED: &str = ".catch(e => setTimeout(() => { throw e; }));";
    let boot = match (crate::save::embedded(offline::WORKER_JS), crate::save::embedded_text(offline::WORKER_WASM)) {
        (Some(js), Some(wasm)) => format!(
            "{}\nwasm_bindgen({{ module_or_path: Uint8Array.from(atob('{}'), c => c.charCodeAt(0)) }}){FAILED}",
            String::from_utf8_lossy(&js),
            wasm.trim()
        ),
        _ => {
            let doc = web_sys::window().ok_or("no window")?.document().ok_or("no document")?;
            let base = doc.base_uri()?.unwrap_or_default();
            let base = base.rsplit_once('/').map_or(base.clone(), |(b, _)| format!("{b}/"));
            // The wasm is asked for while the code loads (`importScripts` is synchronous), as
            // in the page's early worker (`index.html`).
            format!(
                "const wasmAsked = fetch('{base}worker_bg.wasm'); wasmAsked.catch(() => {{}});\n\
                 importScripts('{base}worker.js'); wasm_bindgen({{ module_or_path: wasmAsked }}){FAILED}"
            )
        }
    };
    let parts = js_sys::Array::of1(&JsValue::from_str(&boot));
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type("text/javascript");
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &opts)?;
    let boot = web_sys::Url::create_object_url_with_blob(&blob)?;
    Ok(Client(Rc::new(Pool {
        boot,
        next: Cell::new(EARLY_ID + 1),
        docs: RefCell::new(HashMap::new()),
        loading: RefCell::new(HashMap::new()),
        analysed: Rc::new(RefCell::new(Vec::new())),
        ranks: RefCell::new(RankPool::default()),
        spare: RefCell::new(None),
        early: RefCell::new(None),
        example: RefCell::new(None),
        early_ahead: RefCell::new(None),
        prefetched: RefCell::new(HashMap::new()),
        ahead: RefCell::new(HashMap::new()),
    })))
}

impl Pool {
    fn id(&self) -> u32 {
        let id = self.next.get();
        self.next.set(id + 1);
        id
    }

    /// At the end of a load, its first view asked for ahead becomes the prefetched view (the
    /// page asks for it as it builds the tab: [`Client::prefetch`] then waits for this
    /// answer instead of asking again); a load that failed drops it.
    fn ahead_ended(&self, id: u32, event: &LoadEvent) {
        let ahead = self.ahead.borrow_mut().remove(&id);
        if let (Some((_, first, rx)), LoadEvent::Loaded(info)) = (ahead, event) {
            self.prefetched.borrow_mut().insert(info.doc, (first.query(info.doc, info.first_device()), rx));
        }
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

    /// The spare worker, if it is still alive.
    fn take_spare(&self) -> Option<Rc<Conn>> {
        self.spare.take().filter(|c| c.dead.borrow().is_none())
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
            self.0.prefetched.borrow_mut().remove(&doc);
            conn.worker.terminate();
            return Response::Done;
        }
        if let Some(why) = conn.dead.borrow().clone() {
            return Response::Error(why);
        }
        if let Request::View(q) = &request {
            let ahead = self.0.prefetched.borrow().get(&doc).is_some_and(|(p, _)| p == q);
            if let Some((_, rx)) = ahead.then(|| self.0.prefetched.borrow_mut().remove(&doc)).flatten() {
                crate::dom::record("view-ahead", crate::dom::now());
                return rx.await.unwrap_or_else(|_| Response::Error("the worker stopped".into()));
            }
        }
        self.sent(&conn, request).await.unwrap_or_else(|_| Response::Error("the worker stopped".into()))
    }

    /// Sends a request to a worker; the answer arrives on the receiver.
    fn sent(&self, conn: &Conn, request: Request) -> oneshot::Receiver<Response> {
        let id = self.0.id();
        let (tx, rx) = oneshot::channel();
        conn.pending.borrow_mut().insert(id, tx);
        conn.send(&ToWorker::Request { id, request });
        rx
    }

    /// Asks for a view before the page does (the first view of a file just loaded, while its
    /// tab is built): the page's own request for the same query gets this answer, without
    /// asking again. A newer prefetch of the file replaces an unused one.
    pub fn prefetch(&self, q: ViewQuery) {
        if self.0.prefetched.borrow().get(&q.doc).is_some_and(|(p, _)| *p == q) {
            // Asked for ahead, while the file was read ([`Client::ahead`]).
            crate::dom::record("ahead-used", crate::dom::now());
            return;
        }
        let Some(conn) = self.0.docs.borrow().get(&q.doc).cloned() else { return };
        let rx = self.sent(&conn, Request::View(q.clone()));
        self.0.prefetched.borrow_mut().insert(q.doc, (q, rx));
    }

    /// Asks the worker reading load `load` for the file's first view as soon as the file is
    /// read, so that it draws it while the page is busy (building the tab, or the page
    /// itself) instead of waiting for the page to ask; once the file is loaded, the answer
    /// is the prefetched view for the query the page will make ([`FirstView::query`]).
    ///
    /// The bundled example's first view can be asked for before its bytes have come
    /// (`EARLY_ID`, the early worker reads them by itself): as soon as the page is laid out.
    pub fn ahead(&self, load: u32, first: FirstView) {
        let before = self.0.ahead.borrow().get(&load).map(|(id, asked, _)| (*id, *asked == first));
        if let Some((_, true)) = before {
            return;
        }
        let id = self.0.id();
        let (tx, rx) = oneshot::channel();
        let msg = ToWorker::Ahead { id, load, first: first.clone() };
        let early = self.0.early.borrow();
        if let Some(conn) = self.0.loading.borrow().get(&load) {
            // A view asked for before (the plot has changed since) is nobody's now: the
            // worker may never answer it (it keeps the last one asked for).
            if let Some((old, _)) = before {
                conn.pending.borrow_mut().remove(&old);
            }
            conn.pending.borrow_mut().insert(id, tx);
            conn.send(&msg);
        } else if let Some(e) = early.as_ref().filter(|e| load == EARLY_ID && e.reads_example()) {
            e.send(&msg);
            self.0.early_ahead.replace(Some((id, tx)));
        } else {
            return;
        }
        crate::dom::record("ahead-asked-at", crate::dom::now());
        self.0.ahead.borrow_mut().insert(load, (id, first, rx));
    }

    /// Drops the prefetched view of `doc`, whose tab opened behind another: nobody will ask
    /// for it soon, and its pixels need not be held.
    pub fn forget_prefetched(&self, doc: DocId) {
        self.0.prefetched.borrow_mut().remove(&doc);
    }

    /// Starts a spare worker, unless one is there or a file is loading (each load's end
    /// calls this again, a moment later).
    pub fn keep_spare(&self) {
        if self.0.spare.borrow().as_ref().is_some_and(|c| c.dead.borrow().is_none())
            || !self.0.loading.borrow().is_empty()
        {
            return;
        }
        let Ok(blob) = web_sys::Blob::new() else { return };
        // The early worker, unless it reads the bundled example.
        let early = self.0.early.borrow_mut().take_if(|e| !e.reads_example());
        let adopted = early.as_ref().and_then(|e| e.conn("file", &blob, &self.0.analysed));
        if let (Some(c), Some(early)) = (&adopted, early) {
            // A first view asked of it ahead is for the example, which never came.
            self.0.early_ahead.take();
            self.0.ahead.borrow_mut().remove(&EARLY_ID);
            early.hand_over(c);
        }
        let started = match adopted {
            Some(c) => Ok(c),
            None => Conn::spawn(&self.0.boot, "file", &blob, &self.0.analysed),
        };
        if let Ok(c) = started {
            // Idle until a file comes, it warms up (`engine::warm`): the file then meets
            // optimised code, not the baseline code a fresh worker starts on.
            c.send(&ToWorker::Warm);
            self.0.spare.replace(Some(c));
        }
    }

    /// The bundled example's bytes as the early worker fetched them: a promise of a `Blob`,
    /// or of `null` if they could not be fetched. `None` if none were asked for.
    pub fn early_example(&self) -> Option<js_sys::Promise> {
        self.0.example.borrow().clone()
    }

    /// Why the early worker stopped, if it did before it was taken over (its wasm did not
    /// start, say). Read from the script's record, which outlives the takeover (the worker
    /// may have stopped before this code started, and become the spare at once).
    pub fn early_failure(&self) -> Option<String> {
        Early::find().and_then(|e| e.get("error").as_string())
    }

    /// [`Client::keep_spare`] in a moment.
    fn keep_spare_later(&self) {
        let me = self.clone();
        let later = Closure::once_into_js(move || me.keep_spare());
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(later.unchecked_ref(), SPARE_MS);
        }
    }

    /// Opens a file (or any blob) in a new worker, whole or a `window` of it; `on_event`
    /// hears progress and the end, with the load's id, which is also the file's id once
    /// loaded. Returns that id, for [`Client::cancel`].
    pub fn open(
        &self,
        blob: &web_sys::Blob,
        name: &str,
        window: Option<ReadWindow>,
        on_event: impl Fn(u32, LoadEvent) + 'static,
    ) -> u32 {
        let id = self.0.id();
        let pool: Weak<Pool> = Rc::downgrade(&self.0);
        let handler: LoadHandler = Rc::new(move |id, event: LoadEvent| {
            if !matches!(event, LoadEvent::Progress { .. }) {
                if let Some(pool) = pool.upgrade() {
                    pool.ahead_ended(id, &event);
                    pool.load_ended(id, &event);
                    Client(pool).keep_spare_later();
                }
            }
            on_event(id, event);
        });
        let example = |e: &mut Early| e.reads_example() && js_sys::Object::is(&e.get("blob"), blob);
        let early = self.0.early.borrow_mut().take_if(example);
        if let Some(early) = early {
            // The bundled example, which the early worker reads as `EARLY_ID` by itself.
            if let Some(conn) = early.conn(name, blob, &self.0.analysed) {
                if let Some((id, tx)) = self.0.early_ahead.take() {
                    conn.pending.borrow_mut().insert(id, tx);
                }
                conn.load.replace(Some((EARLY_ID, handler)));
                self.0.loading.borrow_mut().insert(EARLY_ID, conn.clone());
                early.hand_over(&conn);
                return EARLY_ID;
            }
        }
        let conn = match self.0.take_spare() {
            Some(c) => {
                // Not ready yet, its queue holds only the warm-up: no time for it now.
                c.queue.borrow_mut().clear();
                c.name.replace(name.to_string());
                c.blob.replace(blob.clone());
                c
            }
            None => match Conn::spawn(&self.0.boot, name, blob, &self.0.analysed) {
                Ok(c) => c,
                Err(e) => {
                    handler(
                        id,
                        LoadEvent::Failed(format!("{name}: the browser could not start a worker: {}", js_error(&e))),
                    );
                    return id;
                }
            },
        };
        conn.load.replace(Some((id, handler)));
        self.0.loading.borrow_mut().insert(id, conn.clone());
        conn.send_with(&ToWorker::Open { id, name: name.to_string(), window }, blob);
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
        self.0.docs.borrow().get(&doc).map(|c| c.blob.borrow().clone())
    }

    /// Stops a load at once: its worker is terminated.
    pub fn cancel(&self, id: u32) {
        let conn = self.0.loading.borrow().get(&id).cloned();
        if let Some((id, h)) = conn.and_then(|c| c.stop("cancelled")) {
            h(id, LoadEvent::Cancelled);
        }
    }
}
