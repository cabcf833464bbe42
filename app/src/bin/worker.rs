//! The Web Worker: reads files as a stream and runs the engine, so the page never waits on
//! parsing or layout. The page starts one worker per file, so each file has wasm32's whole
//! 4 GiB and a file that exhausts it takes no other file down. Messages in are `ToWorker`s,
//! out `FromWorker`s, both in the envelope of `wire.rs` (a file, a run's files or a view's
//! pixels beside the message). A load is cancelled by terminating the worker. The page's
//! early worker (`index.html`) also reads the bundled example by itself, as load
//! [`EARLY_ID`]: its boot script leaves the example's name and bytes to come in
//! `memscapeExample`.
//!
//! Between requests the worker does the engine's background analyses (categories,
//! allocator-state checkpoints) in slices of a few milliseconds. Each slice is a task of its
//! own (a message to itself through a `MessageChannel`), so a request that arrives during one
//! is answered before the next: a hover waits at most one slice, never a whole-file analysis.
//! They start a moment after a file's load reply ([`QUIET_MS`]), while the page draws the file.
//! A spare worker, idle before it is given a file, warms up the same way
//! ([`engine::warm`]), and drops the warm-up when the file comes.

#[path = "../js_error.rs"]
mod js_error;
#[path = "../wire.rs"]
mod wire;

use std::cell::{Cell, OnceCell, RefCell};
use std::rc::Rc;

use engine::protocol::{
    DocId, FirstView, FromWorker, LoadEvent, ReadWindow, Request, Response, ToWorker, EARLY_ID, WINDOW_ENTRIES,
};
use engine::ranks::RankLoad;
use engine::warm::Warmup;
use engine::{Engine, Loading};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{DedicatedWorkerGlobalScope, MessageEvent};

/// The slices a run's snapshot is read in (a file opened in a tab is read as a stream).
const SLICE: u64 = 4 << 20;

/// Background work per slice, ms: about what a request may wait behind (the clock is read
/// between batches of `UNITS`, so a slice can run over by one batch).
const WORK_MS: f64 = 3.0;
/// Units of background work between two looks at the clock (an entry, element or step
/// each: about 0.1 to 0.5 ms of wasm for the generated files).
const UNITS: usize = 512;
/// How long the background analyses wait after a file's load reply, ms: the page builds the
/// file's tab and draws its first picture meanwhile, and on two cores the analyses took the
/// CPU from it and from V8's compiles of its code. A request that needs one of them
/// finishes it at once, quiet or not.
const QUIET_MS: f64 = 100.0;

struct Worker {
    scope: DedicatedWorkerGlobalScope,
    engine: RefCell<Engine>,
    /// Background slices are this channel's messages.
    tick: web_sys::MessageChannel,
    /// A slice is already in line.
    ticking: Cell<bool>,
    /// A spare worker's warm-up, in the background slices until a file comes.
    warm: RefCell<Option<Warmup>>,
    /// The first view the page asked for ahead ([`ToWorker::Ahead`]) while the file was read.
    ahead: RefCell<Option<(u32, u32, FirstView)>>,
    /// The file this worker read, and the device its tab shows first: what an `Ahead` is
    /// drawn for.
    loaded: Cell<Option<(DocId, u32)>>,
    /// No background work before then (this worker's clock): see [`QUIET_MS`].
    quiet_until: Cell<f64>,
    /// Calls [`Worker::on_tick`]: the `tick` channel's listener, and the timer's callback for
    /// the slice that waits out the quiet.
    on_tick: OnceCell<js_sys::Function>,
}

impl Worker {
    /// Posts a message; a view's pixels go beside it (transferred), not through postcard
    /// (`ViewModel::pixels` is not serialised).
    fn send(&self, msg: &FromWorker) {
        let pixels: Option<JsValue> = match msg {
            FromWorker::Reply { response: Response::View(v), .. } if !v.pixels.is_empty() => {
                Some(js_sys::Uint8Array::from(v.pixels.as_slice()).into())
            }
            _ => None,
        };
        if let Some(e) = wire::seal(msg, pixels.as_ref()) {
            let _ = self.scope.post_message_with_transfer(&e.value, &e.transfer);
        }
    }

    fn now(&self) -> f64 {
        self.scope.performance().map_or_else(js_sys::Date::now, |p| p.now())
    }

    async fn load(self: Rc<Self>, id: u32, blob: web_sys::Blob, name: String, window: Option<ReadWindow>) {
        let total = blob.size() as u64;
        // A file too large to read whole opens as a window of its last entries.
        let window = window.or_else(|| Loading::too_large_whole(total).then_some(ReadWindow::Last(WINDOW_ENTRIES)));
        let mut loading = match window {
            Some(w) => Loading::window(&name, total, self.now(), w),
            None => Loading::new(&name, total, self.now()),
        };
        // The file as a stream: each piece is parsed as soon as the browser has it, while the
        // browser reads the next (reading whole slices first and then parsing them left the
        // parser waiting on every read: a third of a small file's load; asking for the next
        // piece only after parsing one left it waiting on each piece's read).
        let mut pieces = Pieces::new(&blob);
        let mut piece = Vec::new();
        let mut at = 0u64;
        let mut last_progress = 0.0;
        let mut read_ms = 0.0;
        let mut asked = pieces.ask();
        loop {
            let waited = self.now();
            let read = pieces.take(asked).await;
            read_ms += self.now() - waited;
            let chunk = match read {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => {
                    let why = js_error::js_error(&e);
                    let event =
                        LoadEvent::Failed(format!("{name}: the browser could not read the file at byte {at}: {why}"));
                    self.send(&FromWorker::Load { id, event });
                    return;
                }
            };
            piece.resize(chunk.length() as usize, 0);
            chunk.copy_to(&mut piece);
            // Copied out: the browser may read the next piece into the same buffer now.
            asked = pieces.ask();
            if let Err(e) = loading.feed(&piece) {
                pieces.cancel();
                let event = if loading.window_would_open() { LoadEvent::TooLargeWhole } else { LoadEvent::Failed(e) };
                self.send(&FromWorker::Load { id, event });
                return;
            }
            at += piece.len() as u64;
            let now = self.now();
            if now - last_progress > 50.0 {
                last_progress = now;
                self.send(&FromWorker::Load { id, event: LoadEvent::Progress { bytes: at, total } });
            }
        }
        self.send(&FromWorker::Load { id, event: LoadEvent::Progress { bytes: at, total } });
        let this = self.clone();
        let result = self.engine.borrow_mut().finish(id, loading, &|| this.now());
        let loaded = result.as_ref().ok().map(|info| (info.doc, info.first_device()));
        let event = match result {
            Ok(mut info) => {
                info.heap_bytes = wasm_memory_bytes();
                info.read_ms = read_ms;
                LoadEvent::Loaded(info)
            }
            Err(e) => LoadEvent::Failed(e),
        };
        self.send(&FromWorker::Load { id, event });
        // Right after the reply: the page builds the tab while this draws its first view.
        self.loaded.set(loaded);
        self.quiet_until.set(self.now() + QUIET_MS);
        if let (Some(_), Some((asked, load, first))) = (loaded, self.ahead.take()) {
            self.ahead(asked, load, first);
        }
    }

    /// The first view of load `load`, asked for ahead as request `id`: drawn if that file is
    /// read, kept until it is if none is yet (the last one asked for), ignored by a worker
    /// that read another file.
    fn ahead(&self, id: u32, load: u32, first: FirstView) {
        match self.loaded.get() {
            Some((doc, device)) if doc == load => self.answer(id, Request::View(first.query(doc, device))),
            Some(_) => {}
            None => {
                self.ahead.replace(Some((id, load, first)));
            }
        }
    }

    /// Answers request `id`, then goes on with the background work.
    fn answer(&self, id: u32, request: Request) {
        let response = self.engine.borrow_mut().handle(request);
        self.send(&FromWorker::Reply { id, response });
        self.pump();
    }

    /// Profiles a batch of a run's files for the page's pool ([`ToWorker::Ranks`]), one after
    /// another: each read (in slices when a snapshot), reduced to its
    /// [`RankProfile`](engine::ranks::RankProfile), and nothing of it kept, so the worker reads
    /// the next file with the same memory. One answer for the batch.
    async fn ranks(self: Rc<Self>, id: u32, files: js_sys::Array, names: Vec<String>) {
        let mut out = Vec::with_capacity(names.len());
        for (k, name) in names.into_iter().enumerate() {
            out.push(match files.get(k as u32).dyn_into::<web_sys::Blob>() {
                Ok(blob) => self.read_rank(blob, &name).await.and_then(RankLoad::finish),
                Err(_) => Err(format!("{name}: not given to the worker")),
            });
        }
        self.send(&FromWorker::Reply { id, response: Response::Ranks(out) });
    }

    /// Reads a rank's file into a [`RankLoad`]: a profile whole, a snapshot in slices.
    async fn read_rank(&self, blob: web_sys::Blob, name: &str) -> Result<RankLoad, String> {
        let unread = |e: String, at: u64| format!("{name}: the browser could not read the file at byte {at}: {e}");
        if engine::ranks::is_profile_name(name) {
            // A profile (a few hundred KB) in one read, without asking its size (which costs
            // a look at the disk).
            let bytes = wasm_bindgen_futures::JsFuture::from(blob.array_buffer())
                .await
                .map_err(|e| unread(js_error::js_error(&e), 0))?;
            let bytes = js_sys::Uint8Array::new(&bytes).to_vec();
            let mut load = RankLoad::new(name, bytes.len() as u64);
            load.feed(&bytes)?;
            return Ok(load);
        }
        let total = blob.size() as u64;
        let mut load = RankLoad::new(name, total);
        let blob = gloo_file::Blob::from(blob);
        let mut at = 0u64;
        while at < total {
            let end = (at + SLICE).min(total);
            let bytes =
                gloo_file::futures::read_as_bytes(&blob.slice(at, end)).await.map_err(|e| unread(e.to_string(), at))?;
            load.feed(&bytes)?;
            at = end;
        }
        Ok(load)
    }

    /// One slice of background work, then the next in line behind whatever arrived.
    fn on_tick(&self) {
        // In the quiet after a load the slice waits for its end, still in line (so nothing
        // else is put in line meanwhile); requests are answered as they come.
        let quiet = self.quiet_until.get() - self.now();
        if let Some(later) = self.on_tick.get().filter(|_| quiet > 0.0) {
            let waits = self.scope.set_timeout_with_callback_and_timeout_and_arguments_0(later, quiet.ceil() as i32);
            if waits.is_ok() {
                return;
            }
        }
        self.ticking.set(false);
        let deadline = self.now() + WORK_MS;
        if let Some(mut warm) = self.warm.take() {
            let mut more = true;
            while more && self.now() < deadline {
                // Its messages encoded as a file's would be, and dropped (a view's pixels
                // are posted as they are: no code of theirs to warm up).
                more = warm.step(&mut |m| drop(postcard::to_allocvec(m)));
            }
            if more {
                self.warm.replace(Some(warm));
            }
        } else {
            while self.engine.borrow_mut().work(UNITS) && self.now() < deadline {}
        }
        self.pump();
    }

    /// Tells the page what the engine finished since it last said, then puts the next slice
    /// of background work in line.
    fn pump(&self) {
        let finished = self.engine.borrow_mut().take_finished();
        for (doc, device, what) in finished {
            self.send(&FromWorker::Analysed { doc, device, what });
        }
        if self.ticking.get() || !(self.engine.borrow().has_work() || self.warm.borrow().is_some()) {
            return;
        }
        // Should the message not go, the next request tries again.
        self.ticking.set(self.tick.port2().post_message(&JsValue::NULL).is_ok());
    }

    fn on_message(self: &Rc<Self>, data: JsValue) {
        let (msg, with) = match wire::open::<ToWorker>(&data) {
            Ok(m) => m,
            Err(e) => {
                web_sys::console::error_1(&format!("worker: {e}").into());
                return;
            }
        };
        match msg {
            ToWorker::Request { id, request } => self.answer(id, request),
            ToWorker::Ahead { id, load, first } => self.ahead(id, load, first),
            ToWorker::Warm => {
                if self.engine.borrow().is_empty() {
                    self.warm.replace(Some(Warmup::new()));
                    self.pump();
                }
            }
            ToWorker::Open { id, name, window } => {
                // A file: the warm-up has done what it could.
                self.warm.take();
                match with.dyn_into::<web_sys::Blob>() {
                    Ok(blob) => wasm_bindgen_futures::spawn_local(self.clone().load(id, blob, name, window)),
                    Err(_) => {
                        let event = LoadEvent::Failed(format!("{name}: the page gave the worker no file to read"));
                        self.send(&FromWorker::Load { id, event });
                    }
                }
            }
            ToWorker::Ranks { id, names } => {
                self.warm.take();
                let files = with.dyn_into::<js_sys::Array>().unwrap_or_default();
                wasm_bindgen_futures::spawn_local(self.clone().ranks(id, files, names));
            }
        }
    }

    /// The bundled example, for the page's early worker: its boot script leaves the name and
    /// a promise of the bytes (`null` if they could not be fetched) in `memscapeExample`.
    fn read_example(self: &Rc<Self>) {
        let example = js_sys::Reflect::get(&self.scope, &JsValue::from_str("memscapeExample"));
        let Some(example) = example.ok().filter(JsValue::is_object) else { return };
        let field = |key: &str| js_sys::Reflect::get(&example, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED);
        let name = field("name").as_string().unwrap_or_else(|| "example".into());
        let Ok(bytes) = field("bytes").dyn_into::<js_sys::Promise>() else { return };
        let me = self.clone();
        wasm_bindgen_futures::spawn_local(async move {
            let blob = wasm_bindgen_futures::JsFuture::from(bytes).await.ok().and_then(|b| b.dyn_into().ok());
            if let Some(blob) = blob {
                me.warm.take();
                me.load(EARLY_ID, blob, name, None).await;
            }
        });
    }
}

/// A file's bytes as the browser reads them. Into one buffer used again for every piece
/// where the browser can (a byte stream's "BYOB" reader): in Chromium that read 88 MB in
/// 116 to 133 ms, against 185 to 431 ms for the default reader, which makes a new buffer per
/// piece. Else through the default reader.
enum Pieces {
    Own(web_sys::ReadableStreamByobReader, Option<js_sys::ArrayBuffer>),
    Given(web_sys::ReadableStreamDefaultReader),
}

/// The buffer the browser reads into, bytes.
const PIECE: u32 = 1 << 20;

impl Pieces {
    fn new(blob: &web_sys::Blob) -> Pieces {
        let stream = blob.stream();
        match web_sys::ReadableStreamByobReader::new(&stream) {
            Ok(r) => Pieces::Own(r, Some(js_sys::ArrayBuffer::new(PIECE))),
            Err(_) => Pieces::Given(stream.get_reader().unchecked_into()),
        }
    }

    /// Asks the browser for the next piece (`None` once the stream has ended). Ask again only
    /// after [`Pieces::take`] has given the last piece and it has been copied out: a byte
    /// stream's reader reads into the one buffer the last piece lies in.
    fn ask(&mut self) -> Option<js_sys::Promise> {
        match self {
            Pieces::Own(r, buf) => {
                // Without its buffer the stream has ended (a second ask before a take would
                // read as the end, too: the loop never does that).
                debug_assert!(buf.is_some(), "a piece asked for twice without a take");
                let b = buf.take()?;
                let view = js_sys::Uint8Array::new_with_byte_offset_and_length(&b, 0, b.byte_length());
                Some(r.read_with_array_buffer_view(&view))
            }
            Pieces::Given(r) => Some(r.read()),
        }
    }

    /// The piece a read asked for, `None` at the end.
    async fn take(&mut self, asked: Option<js_sys::Promise>) -> Result<Option<js_sys::Uint8Array>, JsValue> {
        let Some(read) = asked else { return Ok(None) };
        let result: web_sys::ReadableStreamReadResult =
            wasm_bindgen_futures::JsFuture::from(read).await?.unchecked_into();
        if result.get_done() == Some(true) {
            return Ok(None);
        }
        let Ok(piece) = result.get_value().dyn_into::<js_sys::Uint8Array>() else {
            return Err(JsValue::from_str("the browser gave a piece that is not bytes"));
        };
        if let Pieces::Own(_, buf) = self {
            // The buffer comes back (moved) under the piece; the next read fills it again.
            *buf = Some(piece.buffer());
        }
        Ok(Some(piece))
    }

    fn cancel(&self) {
        let _ = match self {
            Pieces::Own(r, _) => r.cancel(),
            Pieces::Given(r) => r.cancel(),
        };
    }
}

/// The size of this worker's wasm memory.
fn wasm_memory_bytes() -> u64 {
    #[cfg(target_arch = "wasm32")]
    {
        core::arch::wasm32::memory_size(0) as u64 * 65536
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        0
    }
}

fn main() {
    // A panic ends this worker (wasm has no unwinding): log it, and tell the page why, so
    // it can say so on the file's tab instead of waiting for an answer that never comes.
    std::panic::set_hook(Box::new(|info| {
        console_error_panic_hook::hook(info);
        let scope: DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
        let words = info.payload_as_str().unwrap_or("a panic").to_string();
        if let Some(e) = wire::seal(&FromWorker::Crashed(words), None) {
            let _ = scope.post_message_with_transfer(&e.value, &e.transfer);
        }
    }));
    let scope: DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    let Ok(tick) = web_sys::MessageChannel::new() else {
        web_sys::console::error_1(&"worker: no MessageChannel".into());
        return;
    };
    let worker = Rc::new(Worker {
        scope: scope.clone(),
        engine: RefCell::new(Engine::new()),
        tick,
        ticking: Cell::new(false),
        warm: RefCell::new(None),
        ahead: RefCell::new(None),
        loaded: Cell::new(None),
        quiet_until: Cell::new(0.0),
        on_tick: OnceCell::new(),
    });
    let w = worker.clone();
    let ontick = Closure::<dyn Fn()>::new(move || w.on_tick());
    let ontick: js_sys::Function = ontick.into_js_value().unchecked_into();
    worker.tick.port1().set_onmessage(Some(&ontick));
    let _ = worker.on_tick.set(ontick);
    let w = worker.clone();
    let onmessage = Closure::<dyn Fn(MessageEvent)>::new(move |m: MessageEvent| w.on_message(m.data()));
    scope.set_onmessage(Some(onmessage.as_ref().unchecked_ref()));
    onmessage.forget();
    worker.send(&FromWorker::Ready);
    worker.read_example();
}
