//! Opening files: each is read by a worker of its own, with a progress bar, and becomes a
//! tab (with the view a link saved, if it names the file). At start the page opens the
//! snapshot an offline page carries, else the bundled example.

use std::cell::Cell;
use std::rc::Rc;

use engine::protocol::{DocId, LoadEvent, ReadWindow, Request, Response};
use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;

use crate::client::{worker, EARLY_ID};
use crate::dom::{now, record};
use crate::state::{Messages, Nav, Plot, Selection, Tab};
use crate::url::Restore;

/// What a file with no name is called.
const UNNAMED: &str = "unnamed file";

/// The example opened at start, copied next to the page by Trunk.
pub(crate) const EXAMPLE: &str = "cs336-fullstep.pickle";

/// A file being read.
#[derive(Clone, Debug)]
pub(crate) struct Load {
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) bytes: u64,
    pub(crate) total: u64,
    pub(crate) started: f64,
    /// Its progress bar is on screen: from [`ROW_MS`] after the file was chosen.
    pub(crate) shown: bool,
}

/// How long a load goes without a progress bar. Most files open in less: a bar that came
/// and went only flickered, each change a frame to paint while the worker parsed (with the
/// bar in the page's flow, a third of a small file's load on a two-core machine).
const ROW_MS: u64 = 250;

/// Opens files; holds the loads under way.
#[derive(Clone, Copy)]
pub(crate) struct Opener {
    pub(crate) loads: RwSignal<Vec<Load>>,
    nav: Nav,
    messages: Messages,
    restore: Restore,
    selection: Selection,
    plot: Plot,
}

impl Opener {
    pub(crate) fn new(nav: Nav, messages: Messages, restore: Restore, selection: Selection, plot: Plot) -> Opener {
        Opener { loads: RwSignal::new(Vec::new()), nav, messages, restore, selection, plot }
    }

    /// Whether a file is being read (tracked): its worker said how far it got. (Not from the
    /// moment it is chosen: until its worker has the file, this thread hands it over, and
    /// showing the views first would keep the worker waiting.)
    pub(crate) fn loading(self) -> bool {
        self.loads.with(|l| l.iter().any(|l| l.bytes > 0))
    }

    /// Opens a file or blob (whole, or the window `?last=N` in the address asks for); on
    /// failure the error is shown and what was open stays open.
    pub(crate) fn open(self, blob: web_sys::Blob, name: String) {
        self.open_as(blob, name, true, crate::dom::window_param(), None, None);
    }

    /// Opens a window of a file in a tab of its own.
    pub(crate) fn open_window(self, blob: web_sys::Blob, name: String, window: ReadWindow) {
        self.open_as(blob, name, true, Some(window), None, None);
    }

    /// Opens a file as [`Opener::open`] does, then calls `then` with its tab once it is open.
    pub(crate) fn open_then(self, blob: web_sys::Blob, name: String, then: impl Fn(DocId) + 'static) {
        self.open_as(blob, name, true, crate::dom::window_param(), Some(Rc::new(then)), None);
    }

    /// Opens a file; one that is not `wanted` (the bundled example) only comes to the front
    /// if no other file was opened meanwhile. `why`: why a window is read though its size
    /// did not ask for one (a compressed file read again), for the notice.
    fn open_as(
        self,
        blob: web_sys::Blob,
        name: String,
        wanted: bool,
        window: Option<ReadWindow>,
        then: Option<Rc<dyn Fn(DocId)>>,
        why: Option<&'static str>,
    ) {
        // A file with no name (a drop from another program can give one) still needs a word
        // on its tab and in its messages.
        let name = if name.is_empty() { UNNAMED.to_string() } else { name };
        let total = blob.size() as u64;
        let started = now();
        let shown = name.clone();
        let ahead = self.ahead(name.clone(), wanted);
        let on_progress = ahead.clone();
        let again = (blob.clone(), name.clone(), then.clone());
        let id = worker().open(&blob, &name, window, move |id, ev| match ev {
            LoadEvent::Progress { bytes, .. } => {
                self.loads.update(|l| {
                    if let Some(l) = l.iter_mut().find(|l| l.id == id) {
                        l.bytes = bytes;
                    }
                });
                // A file opened as the page starts (an offline page's) is chosen before the
                // plot is in the page: it has its size once the page is built.
                let ahead = on_progress.clone();
                spawn_local(async move { ahead(id) });
            }
            LoadEvent::Loaded(info) => {
                record("load", now() - started);
                record("loaded-at", now());
                record("parse-worker", info.parse_ms);
                record("layout-worker", info.layout_ms);
                record("read-worker", info.read_ms);
                record("wasm-memory-worker", info.heap_bytes as f64);
                self.plot.first_draw.set_value(Some((info.doc, started)));
                if let Some(w) = &info.summary.window {
                    let why = match why {
                        Some(why) => why,
                        None if engine::Loading::too_large_whole(info.bytes) => {
                            " (the file is over what a tab reads whole)"
                        }
                        None => "",
                    };
                    self.messages.notice.set(Some(format!(
                        "Showing a window{why}: {}. Memory alive when it starts is drawn from its first step.",
                        w.describe()
                    )));
                }
                let doc = info.doc;
                self.add_tab(Tab::new(info), wanted);
                // After the tab: the views shown for the load stay shown.
                self.loads.update(|l| l.retain(|l| l.id != id));
                if let Some(then) = &then {
                    then(doc);
                }
            }
            LoadEvent::Failed(msg) => {
                self.loads.update(|l| l.retain(|l| l.id != id));
                self.messages.error(msg);
            }
            LoadEvent::TooLargeWhole => {
                // Its pickle passed the limit as it decompressed: its last events instead, in
                // a fresh worker (the failed one is ended, with what it held).
                self.loads.update(|l| l.retain(|l| l.id != id));
                let (blob, name, then) = again.clone();
                let last = Some(ReadWindow::Last(engine::protocol::WINDOW_ENTRIES));
                let why = " (its pickle, decompressed, is over what a tab reads whole)";
                self.open_as(blob, name, wanted, last, then, Some(why));
            }
            LoadEvent::Cancelled => {
                self.loads.update(|l| l.retain(|l| l.id != id));
                self.messages.status(format!("Cancelled loading {shown}"));
            }
        });
        ahead(id);
        self.loads.update(|l| l.push(Load { id, name, bytes: 0, total, started, shown: false }));
        let loads = self.loads;
        set_timeout(
            move || {
                // A load that ended meanwhile is gone: nothing to show, nobody to wake.
                if loads.try_with_untracked(|l| l.iter().any(|l| l.id == id)) == Some(true) {
                    loads.update(|l| l.iter_mut().filter(|l| l.id == id).for_each(|l| l.shown = true));
                }
            },
            std::time::Duration::from_millis(ROW_MS),
        );
    }

    /// Asks load `id`'s worker for the file's first view as soon as the file is read, once,
    /// where the plot is shown and the tab will open on that view (it comes to the front,
    /// and no link's view waits for the file): the worker draws it while the page is busy.
    fn ahead(self, name: String, wanted: bool) -> Rc<dyn Fn(u32)> {
        let asked = Cell::new(false);
        Rc::new(move |id| {
            if asked.get() || !self.nav.comes_to_front(wanted) || self.restore.names(&name) {
                return;
            }
            if let Some(first) = crate::timeline::first_view(self.plot.baseline.get_untracked()) {
                asked.set(true);
                worker().ahead(id, first);
            }
        })
    }

    fn add_tab(self, mut tab: Tab, focus: bool) {
        let pin = self.restore.apply(&mut tab, self.messages);
        // The plot is laid out (the views are, from the start): its first view is computed
        // while the tab is built.
        match (self.nav.comes_to_front(focus) && pin.is_none())
            .then(|| crate::timeline::first_query(&tab, self.plot.baseline.get_untracked()))
            .flatten()
        {
            Some(q) => worker().prefetch(q),
            // Not drawn now: a first view drawn ahead is not kept for it.
            None => worker().forget_prefetched(tab.info.doc),
        }
        let (doc, device, kind) = (tab.info.doc, tab.device, tab.kind);
        self.nav.add(tab, focus);
        if let Some(element) = pin {
            let pinned = self.selection.pinned;
            spawn_local(async move {
                if let Response::Details(d) = worker().ask(Request::Details { doc, device, kind, element }).await {
                    pinned.set(Some(d));
                }
            });
        }
    }

    /// The snapshot an offline page carries, else the bundled example (unless the page was
    /// opened with `?empty`).
    pub(crate) fn open_at_start(self) {
        if let Some(bytes) = crate::save::embedded(offline::SNAPSHOT) {
            let name = web_sys::window()
                .and_then(|w| w.document())
                .and_then(|d| d.get_element_by_id(offline::SNAPSHOT))
                .and_then(|e| e.get_attribute("data-name"))
                .unwrap_or_else(|| "snapshot".into());
            let parts = js_sys::Array::of1(&js_sys::Uint8Array::from(bytes.as_slice()));
            if let Ok(b) = web_sys::Blob::new_with_u8_array_sequence(&parts) {
                self.open(b, name);
            }
            return;
        }
        let search = web_sys::window().and_then(|w| w.location().search().ok()).unwrap_or_default();
        if search.contains("empty") {
            return;
        }
        // Fetched and read by the worker that the page's script started as the page was
        // parsed (`client::Early`), which sends its bytes; else asked for now, before the
        // page is built.
        if let Some(asked) = worker().early_example() {
            let ahead = self.ahead(EXAMPLE.to_string(), false);
            spawn_local(async move {
                // The page is built and laid out by now, and the bytes may not have come: the
                // worker is asked for the example's first view at once, not once they have.
                ahead(EARLY_ID);
                match wasm_bindgen_futures::JsFuture::from(asked).await {
                    Ok(b) if b.is_instance_of::<web_sys::Blob>() => {
                        record("example-fetched-at", now());
                        self.open_as(b.unchecked_into(), EXAMPLE.to_string(), false, None, None, None);
                    }
                    // Not fetched: the worker meant for it waits for the next file. Unless it
                    // stopped first (then the example was not fetched either): the page says
                    // why, as it would of a file whose worker stopped.
                    _ => {
                        if let Some(why) = worker().early_failure() {
                            self.messages.error(crate::client::stopped(EXAMPLE, &why));
                        }
                        worker().keep_spare();
                    }
                }
            });
            return;
        }
        let Some(w) = web_sys::window() else { return };
        let asked = w.fetch_with_str(EXAMPLE);
        spawn_local(async move {
            let Ok(resp) = wasm_bindgen_futures::JsFuture::from(asked).await else { return };
            let Ok(resp) = resp.dyn_into::<web_sys::Response>() else { return };
            if !resp.ok() {
                return;
            }
            let Ok(p) = resp.blob() else { return };
            if let Ok(b) = wasm_bindgen_futures::JsFuture::from(p).await {
                record("example-fetched-at", now());
                self.open_as(b.unchecked_into(), EXAMPLE.to_string(), false, None, None, None);
            }
        });
    }
}
