//! The page's side of the workers: one worker per file, so each file has wasm32's whole
//! 4 GiB and one that exhausts it (or any other crash) takes no other file down. Requests go
//! out as postcard bytes and come back as futures; loads report progress through a callback.
//!
//! A spare worker, its wasm compiled and started, waits for the next file: one is started
//! with the page (unless the first worker reads the bundled example: then once that is read)
//! and another a moment after each load ends, so that opening a file never waits for a worker
//! to start. The page's first worker is started before this code runs, by the inline script
//! of `index.html` ([`Early`]), and reads the bundled example while this code is still being
//! compiled.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};

use engine::protocol::{DocId, Finished, FirstView, FromWorker, LoadEvent, Request, Response, ToWorker, ViewQuery};
use futures_channel::oneshot;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{ErrorEvent, MessageEvent, Worker};

use crate::js_error::js_error;

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

/// The load id `index.html`'s script gives the bundled example; the pool's own ids start
/// after it.
pub const EARLY_ID: u32 = 1;

/// The worker that `index.html`'s inline script starts as the page is parsed
/// (`window.memscapeEarly`), before this code has loaded and compiled. The worker fetches the
/// bundled example and reads it as load [`EARLY_ID`] by itself (this thread is busy starting
/// the page meanwhile), and sends the page the example's bytes; the script keeps the
/// worker's other messages until the page takes the worker over. An offline page has none.
struct Early(js_sys::Object);

impl Early {
    fn find() -> Option<Early> {
        let early = js_sys::Reflect::get(&web_sys::window()?.into(), &JsValue::from_str("memscapeEarly")).ok()?;
        early.is_object().then(|| Early(early.unchecked_into()))
    }

    fn get(&self, key: &str) -> JsValue {
        js_sys::Reflect::get(&self.0, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
    }

    /// The example's bytes to come: a promise of a `Blob`, or of `null` if they could not be
    /// fetched (or the worker did not start). `None`: not asked for (`?empty`).
    fn example(&self) -> Option<js_sys::Promise> {
        self.get("example").dyn_into().ok()
    }

    /// Whether the worker reads (or will read) the example: it was asked for, and it has not
    /// been found missing.
    fn reads_example(&self) -> bool {
        self.example().is_some() && !(self.get("fetched").is_truthy() && self.get("blob").is_null())
    }

    /// Sends the worker a message before it is taken over (its script holds it until the
    /// worker's code listens).
    fn send(&self, msg: &ToWorker) {
        if let (Ok(worker), Some(bytes)) = (self.get("worker").dyn_into::<Worker>(), encoded(msg)) {
            let _ = worker.post_message(&bytes);
        }
    }

    /// A connection to the worker, not yet its listener ([`Conn::take_over`]).
    fn conn(&self, name: &str, blob: &web_sys::Blob, analysed: &AnalysedHandler) -> Option<Rc<Conn>> {
        let worker = self.get("worker").dyn_into::<Worker>().ok()?;
        Some(Conn::new(worker, name, blob, analysed, self.get("at").as_f64().unwrap_or(0.0)))
    }
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

/// Workers reused across a run's files, at most [`rank_workers`]. A worker reads one large
/// file at a time, or up to [`RANK_DEPTH`] small ones (profiles, tiny snapshots) at once, so
/// that the messages' round trips overlap the reading; files wait their turn in `waiting`
/// (first come, first served).
#[derive(Default)]
struct RankPool {
    workers: Vec<Rc<Conn>>,
    waiting: std::collections::VecDeque<(u64, oneshot::Sender<Rc<Conn>>)>,
    /// How many times the pool was started ahead of a run ([`Client::warm_rank_workers`]).
    warmed: u32,
}

/// Workers started ahead of a run that no run used end after this long (ms).
const WARM_MS: i32 = 60_000;

/// Files up to this size are small: a worker may hold several at once.
const RANK_SMALL: u64 = 4 << 20;
/// Small files a worker holds at once.
const RANK_DEPTH: u32 = 8;

/// How many workers profile a run: one per core the browser reports, at least 1, and at most
/// 8 (each may take a snapshot's whole model while it reads it).
pub fn rank_workers() -> usize {
    let cores = web_sys::window().map_or(1.0, |w| w.navigator().hardware_concurrency());
    (cores as usize).clamp(1, 8)
}

/// One worker and what the page waits on from it.
struct Conn {
    worker: Worker,
    /// The file's name (set when a spare is given its file).
    name: RefCell<String>,
    ready: Cell<bool>,
    queue: RefCell<Vec<JsValue>>,
    pending: RefCell<HashMap<u32, oneshot::Sender<Response>>>,
    load: RefCell<Option<(u32, LoadHandler)>>,
    /// The file it was given (for *Save offline HTML*).
    blob: RefCell<web_sys::Blob>,
    /// Why the worker stopped, once it has.
    dead: RefCell<Option<String>>,
    /// A pool worker's files in hand, and whether one is large.
    in_flight: Cell<u32>,
    /// The run whose files a pool worker was given (0: none).
    run: Cell<u32>,
    large: Cell<bool>,
    analysed: AnalysedHandler,
    /// When it was started (ms since the page started).
    spawned: f64,
}

/// What the page says of file `name` whose worker stopped, `why`.
pub fn stopped(name: &str, why: &str) -> String {
    let why = if why.is_empty() { "it stopped" } else { why };
    format!(
        "{name}: the viewer's worker for this file stopped ({why}). A browser tab gives it at most 4 GiB of memory; \
         the command-line `memscape stats {name}` reads snapshots of any size."
    )
}

/// A message to a worker as it travels: postcard bytes.
fn encoded(msg: &ToWorker) -> Option<JsValue> {
    postcard::to_allocvec(msg).ok().map(|bytes| js_sys::Uint8Array::from(bytes.as_slice()).into())
}

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

impl Conn {
    fn spawn(boot: &str, name: &str, blob: &web_sys::Blob, analysed: &AnalysedHandler) -> Result<Rc<Conn>, JsValue> {
        let conn = Conn::new(Worker::new(boot)?, name, blob, analysed, crate::dom::now());
        conn.listen();
        Ok(conn)
    }

    /// A connection to `worker`, started at `spawned`, that does not listen to it yet.
    fn new(worker: Worker, name: &str, blob: &web_sys::Blob, analysed: &AnalysedHandler, spawned: f64) -> Rc<Conn> {
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
            run: Cell::new(0),
            large: Cell::new(false),
            analysed: analysed.clone(),
            spawned,
        })
    }

    /// Becomes the early worker's listener, in a task of its own (after the caller's, which
    /// may still be setting up the load that the messages report on): first the messages it
    /// sent before, then the next ones as they come.
    fn take_over(self: &Rc<Self>, early: Early) {
        let conn = self.clone();
        wasm_bindgen_futures::spawn_local(async move {
            conn.listen();
            let held: js_sys::Array = early.get("messages").dyn_into().unwrap_or_default();
            for m in held.iter() {
                conn.receive(m);
            }
            if let Some(why) = early.get("error").as_string() {
                conn.died(&why);
            }
            // The script's hold on the worker, its messages and the example's bytes goes (a
            // closed tab's file is not kept by it).
            for key in ["worker", "messages", "blob"] {
                let _ = js_sys::Reflect::set(&early.0, &JsValue::from_str(key), &JsValue::NULL);
            }
        });
    }

    /// Hears the worker's messages and its end.
    fn listen(self: &Rc<Self>) {
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

    /// Sends a message as postcard bytes.
    fn send(&self, msg: &ToWorker) {
        if let Some(bytes) = encoded(msg) {
            self.post(bytes);
        }
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
                crate::dom::record("worker-ready", crate::dom::now() - self.spawned);
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
        let msg = stopped(&self.name.borrow(), why);
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
            c.take_over(early);
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

    /// Opens a file (or any blob) in a new worker; `on_event` hears progress and the end,
    /// with the load's id, which is also the file's id once loaded. Returns that id, for
    /// [`Client::cancel`].
    pub fn open(&self, blob: &web_sys::Blob, name: &str, on_event: impl Fn(u32, LoadEvent) + 'static) -> u32 {
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
                conn.take_over(early);
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
        self.0.docs.borrow().get(&doc).map(|c| c.blob.borrow().clone())
    }

    /// Profiles file `index` of run `run` (its id and its files, the same array for every
    /// file of the run) in the pool, waiting for room in a worker: answers `Response::Rank`, or
    /// `Response::Error` naming the file and why.
    pub async fn rank(&self, run: (u32, &js_sys::Array), index: u32, name: &str) -> Response {
        // A profile is small (a few hundred KB); a `File`'s size costs a look at the disk.
        let size = if name.to_ascii_lowercase().ends_with(".profile") {
            0
        } else {
            run.1.get(index).dyn_into::<web_sys::Blob>().map_or(0, |b| b.size() as u64)
        };
        let conn = match self.pooled(size) {
            Ok(Some(c)) => c,
            Ok(None) => {
                let (tx, rx) = oneshot::channel();
                self.0.ranks.borrow_mut().waiting.push_back((size, tx));
                match rx.await {
                    Ok(c) => c,
                    Err(_) => return Response::Error(format!("{name}: no worker to read it")),
                }
            }
            Err(e) => {
                return Response::Error(format!("{name}: the browser could not start a worker: {}", js_error(&e)))
            }
        };
        if conn.run.get() != run.0 {
            // The run's files go to a worker once, in one message: a message per `File` costs
            // the page about 2 ms each (most of the time of 1,000 profiles), one of them all
            // about as much as one.
            conn.post(js_sys::Array::of3(&JsValue::from(run.0), run.1, &JsValue::from_str("run")).into());
            conn.run.set(run.0);
        }
        let id = self.0.id();
        let (tx, rx) = oneshot::channel();
        conn.pending.borrow_mut().insert(id, tx);
        let msg = js_sys::Array::of4(
            &JsValue::from(id),
            &JsValue::from(index),
            &JsValue::from_str(name),
            &JsValue::from_str("rank"),
        );
        conn.post(msg.into());
        let mut r = rx.await.unwrap_or_else(|_| Response::Error("the worker stopped".into()));
        if let Some(why) = conn.dead.borrow().clone() {
            // The worker may have held other files: this answer names this one.
            r = Response::Error(format!(
                "{name}: the worker reading it stopped ({why}); the command-line `memscape ranks` reads files of any size"
            ));
        }
        self.release(&conn, size);
        r
    }

    /// Room for a file of `size` bytes in the pool: an idle worker, else a new one while fewer
    /// than [`rank_workers`] live, else (a small file) the least busy worker holding only small
    /// files; `None`: no room now. The worker counts the file as in hand.
    fn pooled(&self, size: u64) -> Result<Option<Rc<Conn>>, JsValue> {
        let mut pool = self.0.ranks.borrow_mut();
        pool.workers.retain(|c| c.dead.borrow().is_none());
        let small = size <= RANK_SMALL;
        let idle = pool.workers.iter().find(|c| c.in_flight.get() == 0).cloned();
        let conn = match idle {
            Some(c) => c,
            None if pool.workers.len() < rank_workers() => {
                let blob = web_sys::Blob::new()?;
                let c = Conn::spawn(&self.0.boot, "a rank's file", &blob, &self.0.analysed)?;
                pool.workers.push(c.clone());
                c
            }
            None if small => {
                let shared = pool
                    .workers
                    .iter()
                    .filter(|c| !c.large.get() && c.in_flight.get() < RANK_DEPTH)
                    .min_by_key(|c| c.in_flight.get())
                    .cloned();
                let Some(c) = shared else { return Ok(None) };
                c
            }
            None => return Ok(None),
        };
        conn.in_flight.set(conn.in_flight.get() + 1);
        conn.large.set(conn.large.get() || !small);
        Ok(Some(conn))
    }

    /// A file is done: its room goes to the files waiting, in their order.
    fn release(&self, conn: &Conn, size: u64) {
        conn.in_flight.set(conn.in_flight.get().saturating_sub(1));
        if size > RANK_SMALL {
            conn.large.set(false);
        }
        loop {
            let Some(size) = self.0.ranks.borrow().waiting.front().map(|w| w.0) else { return };
            let Ok(Some(c)) = self.pooled(size) else { return };
            let Some((_, next)) = self.0.ranks.borrow_mut().waiting.pop_front() else { return };
            if let Err(c) = next.send(c) {
                // That file was given up: its room goes back.
                c.in_flight.set(c.in_flight.get().saturating_sub(1));
                if size > RANK_SMALL {
                    c.large.set(false);
                }
            }
        }
    }

    /// Starts the pool's workers before a run's files are chosen (the user is picking a
    /// folder, or dragging something over the page), so that no file waits for a worker to
    /// start and compile its wasm. Unused, they end after [`WARM_MS`].
    pub fn warm_rank_workers(&self) {
        {
            let mut pool = self.0.ranks.borrow_mut();
            pool.workers.retain(|c| c.dead.borrow().is_none());
            while pool.workers.len() < rank_workers() {
                let Ok(blob) = web_sys::Blob::new() else { return };
                let Ok(c) = Conn::spawn(&self.0.boot, "a rank's file", &blob, &self.0.analysed) else { return };
                pool.workers.push(c);
            }
            pool.warmed += 1;
        }
        let (me, warmed) = (self.clone(), self.0.ranks.borrow().warmed);
        let end = Closure::once_into_js(move || {
            let pool = me.0.ranks.borrow();
            // Ended only if no run has been given to the pool and nothing warmed it since.
            let unused =
                pool.warmed == warmed && pool.workers.iter().all(|c| c.in_flight.get() == 0 && c.run.get() == 0);
            drop(pool);
            if unused {
                me.end_idle_rank_workers();
            }
        });
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(end.unchecked_ref(), WARM_MS);
        }
    }

    /// Ends the pool's idle workers (a run is read: their memory goes back).
    pub fn end_idle_rank_workers(&self) {
        let mut pool = self.0.ranks.borrow_mut();
        let (idle, busy): (Vec<Rc<Conn>>, Vec<Rc<Conn>>) =
            std::mem::take(&mut pool.workers).into_iter().partition(|c| c.in_flight.get() == 0);
        pool.workers = busy;
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
