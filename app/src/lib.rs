//! The memscape page: tabs of open files, the timeline with its minimap, details, search,
//! statistics, the event list and the allocator map. It only handles input and pixels:
//! every figure, layout and colour comes from the engine in the worker (`client`), and
//! `draw` turns the view models into pixels.

mod client;
mod draw;
mod insight;
mod save;

use std::cell::RefCell;

use engine::protocol::*;
use leptos::ev;
use leptos::prelude::*;
use leptos::task::spawn_local;
use snapshot::stats::format_size;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use client::Client;

thread_local! {
    static CLIENT: RefCell<Option<Client>> = const { RefCell::new(None) };
}

// `main` mounts the page only after the worker started, so every caller finds it.
#[allow(clippy::expect_used)]
fn worker() -> Client {
    CLIENT.with(|c| c.borrow().clone()).expect("worker started in main")
}

/// The example opened at start, copied next to the page by Trunk.
const EXAMPLE: &str = "cs336-fullstep.pickle";
const ROW: f64 = 20.0;
const LIST_H: f64 = 260.0;
const MAX_SPACER: f64 = 8_000_000.0;

/// One open file and where the user is in it.
#[derive(Clone, Debug)]
struct Tab {
    info: DocInfo,
    device: u32,
    kind: Kind,
    start: f64,
    end: f64,
    n_steps: u32,
    event: Option<u32>,
}

#[derive(Clone, Debug)]
struct LoadUi {
    id: u32,
    name: String,
    bytes: u64,
    total: u64,
    started: f64,
}

/// Everything the page shows, as signals (all `Copy`).
#[derive(Clone, Copy)]
struct S {
    tabs: RwSignal<Vec<Tab>>,
    active: RwSignal<Option<DocId>>,
    loads: RwSignal<Vec<LoadUi>>,
    error: RwSignal<Option<String>>,
    notice: RwSignal<Option<String>>,
    view: RwSignal<Option<ViewModel>>,
    overview: RwSignal<Option<ViewModel>>,
    hover: RwSignal<Option<Details>>,
    pinned: RwSignal<Option<Details>>,
    all_frames: RwSignal<bool>,
    search: RwSignal<Option<SearchResult>>,
    search_pos: RwSignal<usize>,
    events: RwSignal<Option<EventPage>>,
    list_first: RwSignal<u32>,
    state: RwSignal<Option<StateView>>,
    /// Files and devices whose allocator-state checkpoints the worker has made.
    state_ready: RwSignal<Vec<(DocId, u32)>>,
    time_axis: RwSignal<bool>,
    help: RwSignal<bool>,
    size: RwSignal<u32>,
    status: RwSignal<String>,
    /// View state from the URL hash, applied when its file is opened.
    restore: RwSignal<Option<Vec<(String, String)>>>,
    /// When the view request whose answer is being drawn left (0 once drawn), and which file
    /// still waits for its first picture (with the time its load began): for the timings the
    /// benchmark reads.
    view_sent: StoredValue<f64>,
    first_draw: StoredValue<Option<(DocId, f64)>>,
}

fn now() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

impl S {
    fn tab(&self) -> Option<Tab> {
        let id = self.active.get()?;
        self.tabs.with(|t| t.iter().find(|t| t.info.doc == id).cloned())
    }
    fn tab_untracked(&self) -> Option<Tab> {
        let id = self.active.get_untracked()?;
        self.tabs.with_untracked(|t| t.iter().find(|t| t.info.doc == id).cloned())
    }
    fn edit(&self, f: impl FnOnce(&mut Tab)) {
        let Some(id) = self.active.get_untracked() else { return };
        self.tabs.update(|t| {
            if let Some(t) = t.iter_mut().find(|t| t.info.doc == id) {
                f(t);
            }
        });
    }

    /// Opens a file or blob in the worker, with a progress bar; on failure the error is
    /// shown and what was open stays as it was.
    fn open(self, blob: web_sys::Blob, name: String) {
        self.open_as(blob, name, true);
    }

    /// Opens a file; one that is not `wanted` (the bundled example) only shows when it
    /// finishes if no other file was opened meanwhile.
    fn open_as(self, blob: web_sys::Blob, name: String, wanted: bool) {
        let total = blob.size() as u64;
        let started = now();
        let s = self;
        let shown = name.clone();
        let id = worker().open(&blob, &name, move |id, ev| match ev {
            LoadEvent::Progress { bytes, .. } => s.loads.update(|l| {
                if let Some(l) = l.iter_mut().find(|l| l.id == id) {
                    l.bytes = bytes;
                }
            }),
            LoadEvent::Loaded(info) => {
                s.loads.update(|l| l.retain(|l| l.id != id));
                record("load", now() - started);
                record("parse-worker", info.parse_ms);
                record("layout-worker", info.layout_ms);
                record("wasm-memory-worker", info.heap_bytes as f64);
                s.first_draw.set_value(Some((info.doc, started)));
                s.add_tab(info, wanted);
            }
            LoadEvent::Failed(msg) => {
                s.loads.update(|l| l.retain(|l| l.id != id));
                s.error.set(Some(msg));
            }
            LoadEvent::Cancelled => {
                s.loads.update(|l| l.retain(|l| l.id != id));
                s.status.set(format!("Cancelled loading {shown}"));
            }
        });
        self.loads.update(|l| l.push(LoadUi { id, name, bytes: 0, total, started }));
    }

    fn add_tab(self, info: DocInfo, focus: bool) {
        let device = info.default_device.unwrap_or(0);
        let mut tab = Tab { info, device, kind: Kind::Blocks, start: 0.0, end: 0.0, n_steps: 0, event: None };
        let mut pin = None;
        if let Some(h) = self.restore.get_untracked() {
            let get = |k: &str| h.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
            if get("file").as_deref() == Some(tab.info.name.as_str()) {
                self.restore.set(None);
                if let Some(d) = get("device").and_then(|d| d.parse().ok()) {
                    if tab.info.devices.iter().any(|x| x.device == d) {
                        tab.device = d;
                    }
                }
                if get("kind").as_deref() == Some("segments") {
                    tab.kind = Kind::Segments;
                }
                if let (Some(a), Some(b)) =
                    (get("start").and_then(|v| v.parse().ok()), get("end").and_then(|v| v.parse().ok()))
                {
                    tab.start = a;
                    tab.end = b;
                }
                tab.event = get("event").and_then(|v| v.parse().ok());
                pin = get("pin").and_then(|v| v.parse::<u32>().ok());
                self.notice.set(None);
            }
        }
        let doc = tab.info.doc;
        let (device, kind) = (tab.device, tab.kind);
        self.tabs.update(|t| t.push(tab));
        if focus || self.active.get_untracked().is_none() {
            self.select_tab(doc);
        }
        if let Some(el) = pin {
            spawn_local(async move {
                if let Response::Details(d) = worker().ask(Request::Details { doc, device, kind, element: el }).await {
                    self.pinned.set(Some(d));
                }
            });
        }
    }

    fn select_tab(self, doc: DocId) {
        self.hover.set(None);
        self.pinned.set(None);
        self.search.set(None);
        self.view.set(None);
        self.state.set(None);
        self.list_first.set(0);
        self.active.set(Some(doc));
    }

    fn close_tab(self, doc: DocId) {
        spawn_local(async move {
            worker().ask(Request::Close { doc }).await;
        });
        self.tabs.update(|t| t.retain(|t| t.info.doc != doc));
        self.state_ready.update(|r| r.retain(|k| k.0 != doc));
        if self.active.get_untracked() == Some(doc) {
            let next = self.tabs.with_untracked(|t| t.last().map(|t| t.info.doc));
            match next {
                Some(d) => self.select_tab(d),
                None => self.active.set(None),
            }
        }
    }

    /// Zooms by `factor` (below 1 zooms in) around the step `anchor`.
    fn zoom(self, factor: f64, anchor: Option<f64>) {
        self.edit(|t| {
            let n = f64::from(t.n_steps.max(1));
            let (a, b) = if t.end > t.start { (t.start, t.end) } else { (0.0, n) };
            let at = anchor.unwrap_or((a + b) / 2.0);
            let width = ((b - a) * factor).clamp(4.0_f64.min(n), n);
            let frac = if b > a { (at - a) / (b - a) } else { 0.5 };
            let mut s = at - width * frac;
            s = s.clamp(0.0, n - width);
            t.start = s;
            t.end = s + width;
        });
    }

    fn pan(self, by_steps: f64) {
        self.edit(|t| {
            let n = f64::from(t.n_steps.max(1));
            let w = t.end - t.start;
            if w <= 0.0 {
                return;
            }
            let s = (t.start + by_steps).clamp(0.0, (n - w).max(0.0));
            t.start = s;
            t.end = s + w;
        });
    }

    fn set_window(self, a: f64, b: f64) {
        self.edit(|t| {
            let n = f64::from(t.n_steps.max(1));
            let (a, b) = (a.min(b).clamp(0.0, n), a.max(b).clamp(0.0, n));
            let w = (b - a).max(4.0_f64.min(n));
            let a = a.min(n - w).max(0.0);
            t.start = a;
            t.end = a + w;
        });
    }

    fn focus_element(self, start: u32, end: u32) {
        let span = f64::from(end.saturating_sub(start).max(1));
        self.set_window(f64::from(start) - span, f64::from(end) + span);
    }
}

/// Everything a timeline view depends on: the file, device, kind, window (bits) and pinned
/// element; the plot's columns, rows and redraw count; the theme's colours.
#[derive(Clone, Copy, PartialEq)]
struct ViewKey {
    window: (DocId, u32, Kind, u64, u64, Option<u32>),
    pixels: (u32, u32, u32),
    palette: (u32, u32, u32),
}

/// Appends `[what, value]` to `window.memscapeTimings`, which the benchmark reads.
fn record(what: &str, value: f64) {
    let Some(w) = web_sys::window() else { return };
    let key = JsValue::from_str("memscapeTimings");
    let arr = match js_sys::Reflect::get(&w, &key).ok().and_then(|v| v.dyn_into::<js_sys::Array>().ok()) {
        Some(a) => a,
        None => {
            let a = js_sys::Array::new();
            let _ = js_sys::Reflect::set(&w, &key, &a);
            a
        }
    };
    arr.push(&js_sys::Array::of2(&JsValue::from_str(what), &JsValue::from_f64(value)));
}

fn canvas_by_id(id: &str) -> Option<web_sys::HtmlCanvasElement> {
    web_sys::window()?.document()?.get_element_by_id(id)?.dyn_into().ok()
}

fn plot_columns() -> u32 {
    canvas_by_id("timeline").map_or(800, |c| (f64::from(c.client_width()) - draw::LEFT - draw::RIGHT).max(10.0) as u32)
}

fn bytes_text(b: u64) -> String {
    format!("{} ({b} bytes)", format_size(i128::from(b)))
}

fn read_hash() -> Option<Vec<(String, String)>> {
    let h = web_sys::window()?.location().hash().ok()?;
    let h = h.trim_start_matches('#');
    if h.is_empty() {
        return None;
    }
    Some(
        h.split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| {
                let v = js_sys::decode_uri_component(v).ok().and_then(|v| v.as_string()).unwrap_or_default();
                (k.to_string(), v)
            })
            .collect(),
    )
}

fn write_hash(pairs: &[(&str, String)]) {
    let h: Vec<String> =
        pairs.iter().map(|(k, v)| format!("{k}={}", String::from(js_sys::encode_uri_component(v)))).collect();
    let url = format!("#{}", h.join("&"));
    if let Some(w) = web_sys::window() {
        if w.location().hash().ok().as_deref() != Some(url.as_str()) {
            if let Ok(hist) = w.history() {
                let _ = hist.replace_state_with_url(&JsValue::NULL, "", Some(&url));
            }
        }
    }
}

fn files_of(list: Option<web_sys::FileList>) -> Vec<web_sys::File> {
    let Some(list) = list else { return Vec::new() };
    (0..list.length()).filter_map(|i| list.get(i)).collect()
}

/// Starts the worker and mounts the page.
pub fn main() {
    console_error_panic_hook::set_once();
    match client::start() {
        Ok(c) => CLIENT.with(|x| *x.borrow_mut() = Some(c)),
        Err(e) => {
            web_sys::console::error_2(&"memscape: could not start the worker".into(), &e);
            return;
        }
    }
    leptos::mount::mount_to_body(App);
}

#[component]
fn App() -> impl IntoView {
    let s = S {
        tabs: RwSignal::new(Vec::new()),
        active: RwSignal::new(None),
        loads: RwSignal::new(Vec::new()),
        error: RwSignal::new(None),
        notice: RwSignal::new(None),
        view: RwSignal::new(None),
        overview: RwSignal::new(None),
        hover: RwSignal::new(None),
        pinned: RwSignal::new(None),
        all_frames: RwSignal::new(false),
        search: RwSignal::new(None),
        search_pos: RwSignal::new(0),
        events: RwSignal::new(None),
        list_first: RwSignal::new(0),
        state: RwSignal::new(None),
        state_ready: RwSignal::new(Vec::new()),
        time_axis: RwSignal::new(false),
        help: RwSignal::new(false),
        size: RwSignal::new(0),
        status: RwSignal::new(String::new()),
        restore: RwSignal::new(read_hash()),
        view_sent: StoredValue::new(0.0),
        first_draw: StoredValue::new(None),
    };
    let i = insight::I::new(s);
    // A hovered or pinned allocation gets its category (again: the rules may have changed) as
    // soon as the worker has the categories; the allocator before the first event is asked
    // for once its checkpoints are made.
    worker().on_analysed(move |doc, device, what| {
        if what == Finished::AllocatorState {
            s.state_ready.update(|r| r.push((doc, device)));
            return;
        }
        let Some(t) = s.tab_untracked() else { return };
        if t.info.doc != doc || t.device != device {
            return;
        }
        for shown in [s.hover, s.pinned] {
            let waiting =
                shown.with_untracked(|d| d.as_ref().filter(|d| d.kind == Kind::Blocks).map(|d| (d.element, d.kind)));
            let Some((element, kind)) = waiting else { continue };
            spawn_local(async move {
                if let Response::Details(d) = worker().ask(Request::Details { doc, device, kind, element }).await {
                    if shown.with_untracked(|x| x.as_ref().map(|x| x.element)) == Some(element) {
                        shown.set(Some(d));
                    }
                }
            });
        }
    });
    if let Some(f) = s.restore.get_untracked().and_then(|h| h.into_iter().find(|(k, _)| k == "file").map(|(_, v)| v)) {
        if f != EXAMPLE {
            s.notice.set(Some(format!("Open {f} again to restore the view saved in this link.")));
        }
    }
    // The bundled example, unless the page was opened with ?empty.
    let search_str = web_sys::window().and_then(|w| w.location().search().ok()).unwrap_or_default();
    let embedded = save::embedded(offline::SNAPSHOT);
    if let Some(bytes) = embedded {
        // An offline page: open the snapshot it carries.
        let name = web_sys::window()
            .and_then(|w| w.document())
            .and_then(|d| d.get_element_by_id(offline::SNAPSHOT))
            .and_then(|e| e.get_attribute("data-name"))
            .unwrap_or_else(|| "snapshot".into());
        let parts = js_sys::Array::of1(&js_sys::Uint8Array::from(bytes.as_slice()));
        if let Ok(b) = web_sys::Blob::new_with_u8_array_sequence(&parts) {
            s.open(b, name);
        }
    } else if !search_str.contains("empty") {
        spawn_local(async move {
            let Some(w) = web_sys::window() else { return };
            let Ok(resp) = wasm_bindgen_futures::JsFuture::from(w.fetch_with_str(EXAMPLE)).await else { return };
            let Ok(resp) = resp.dyn_into::<web_sys::Response>() else { return };
            if !resp.ok() {
                return;
            }
            let Ok(p) = resp.blob() else { return };
            if let Ok(b) = wasm_bindgen_futures::JsFuture::from(p).await {
                s.open_as(b.unchecked_into(), EXAMPLE.to_string(), false);
            }
        });
    }

    // Fetch the view whenever the window, device or size changes; the newest answer wins.
    let seq = StoredValue::new(0u32);
    // The key whose request waited one frame for the plot to exist.
    let deferred = StoredValue::new(None);
    // What the last answer showed. A first view asks for "the whole trace" and learns its
    // window from the answer; asking again for that window would only draw the same picture,
    // while the first hover waited behind it.
    let answered = StoredValue::new(None::<ViewKey>);
    let view_key = Memo::new(move |_| {
        let pinned = s.pinned.with(|p| p.as_ref().map(|d| d.element));
        s.tab().map(|t| (t.info.doc, t.device, t.kind, t.start.to_bits(), t.end.to_bits(), pinned))
    });
    Effect::new(move |_| {
        let Some(key) = view_key.get() else { return };
        let Some(t) = s.tab_untracked() else { return };
        let size = s.size.get();
        // A tab that was just added has no plot yet to measure: ask once it is laid out (next
        // frame), instead of asking for a default size now and for the real one just after,
        // while the first hover would wait behind the second.
        if canvas_by_id("timeline").is_none() && deferred.get_value() != Some(key) {
            deferred.set_value(Some(key));
            request_animation_frame(move || s.size.update(|x| *x += 1));
            return;
        }
        let th = draw::Theme::read();
        let dflt = PaletteVm::default();
        let palette = PaletteVm {
            summarized: draw::rgb_of(&th.muted).unwrap_or(dflt.summarized),
            hit: draw::rgb_of(&th.accent).unwrap_or(dflt.hit),
            pinned: draw::rgb_of(&th.fg).unwrap_or(dflt.pinned),
        };
        let cols = plot_columns();
        let rows =
            canvas_by_id("timeline").map_or(300, |c| (f64::from(c.client_height()) - draw::TOP - draw::BOTTOM) as u32);
        let asked = move |start: f64, end: f64| ViewKey {
            window: (key.0, key.1, key.2, start.to_bits(), end.to_bits(), key.5),
            pixels: (cols, rows, size),
            palette: (palette.summarized, palette.hit, palette.pinned),
        };
        if answered.get_value() == Some(asked(t.start, t.end)) && s.view.with_untracked(Option::is_some) {
            return;
        }
        seq.update_value(|x| *x += 1);
        let my = seq.get_value();
        let q = ViewQuery {
            doc: t.info.doc,
            device: t.device,
            kind: t.kind,
            start: t.start,
            end: t.end,
            columns: cols,
            rows,
            totals_only: false,
            pinned: key.5,
            palette,
        };
        let sent = now();
        spawn_local(async move {
            let r = worker().ask(Request::View(q)).await;
            if seq.get_value() != my {
                return;
            }
            if let Response::View(v) = r {
                answered.set_value(Some(asked(v.start, v.end)));
                if t.end <= t.start || t.n_steps != v.n_steps {
                    let (a, b, n) = (v.start, v.end, v.n_steps);
                    s.edit(|t| {
                        t.n_steps = n;
                        if t.end <= t.start || t.end > f64::from(n) {
                            t.start = a;
                            t.end = b;
                        }
                    });
                }
                // The frame is timed when this answer is drawn, not at a redraw of the old one.
                s.view_sent.set_value(sent);
                s.view.set(Some(v));
            }
        });
    });
    // The minimap: totals over the whole trace.
    let lane_key = Memo::new(move |_| s.tab().map(|t| (t.info.doc, t.device, t.kind)));
    Effect::new(move |_| {
        let Some(key) = lane_key.get() else { return };
        s.size.track();
        let cols = plot_columns();
        spawn_local(async move {
            let q = ViewQuery {
                doc: key.0,
                device: key.1,
                kind: key.2,
                start: 0.0,
                end: 0.0,
                columns: cols,
                rows: 1,
                totals_only: true,
                pinned: None,
                palette: PaletteVm::default(),
            };
            if let Response::View(v) = worker().ask(Request::View(q)).await {
                s.overview.set(Some(v));
            }
        });
    });
    // Pixels.
    Effect::new(move |_| {
        let t = s.tab();
        let event_step = s.state.with(|st| st.as_ref().and_then(|st| st.step));
        let time_axis = s.time_axis.get();
        let th = draw::Theme::read();
        s.view.with(|v| {
            let (Some(v), Some(t), Some(c)) = (v, t.as_ref(), canvas_by_id("timeline")) else { return };
            let o = draw::Overlay {
                start: v.start,
                end: v.end,
                event_step,
                time_axis: time_axis && t.info.devices.iter().any(|d| d.device == t.device && d.has_time),
            };
            draw::timeline(&c, v, &o, &th);
            let sent = s.view_sent.get_value();
            if sent > 0.0 {
                s.view_sent.set_value(0.0);
                record("frame", now() - sent);
            }
            if let Some((doc, started)) = s.first_draw.get_value() {
                if doc == t.info.doc {
                    s.first_draw.set_value(None);
                    record("first-draw", now() - started);
                }
            }
        });
        s.overview.with(|v| {
            let (Some(v), Some(c)) = (v, canvas_by_id("minimap")) else { return };
            let (a, b) = t.as_ref().map_or((0.0, 0.0), |t| (t.start, t.end));
            draw::minimap(&c, v, a, b, &th);
        });
    });
    // The event list page and the allocator state.
    let device_key = Memo::new(move |_| s.tab().map(|t| (t.info.doc, t.device)));
    Effect::new(move |_| {
        let Some((doc, device)) = device_key.get() else { return };
        let first = s.list_first.get();
        let count = (LIST_H / ROW) as u32 + 2;
        spawn_local(async move {
            let r = worker().ask(Request::Events { doc, device, first, count }).await;
            if let Response::Events(p) = r {
                s.events.set(Some(p));
            }
        });
    });
    let event_key = Memo::new(move |_| s.tab().map(|t| (t.info.doc, t.device, t.event)));
    // Before the first event is the whole trace undone: that waits for the background (a
    // selected event is asked for at once).
    let state_ready = Memo::new(move |_| {
        let key = event_key.get().map(|(doc, device, _)| (doc, device));
        key.is_some_and(|k| s.state_ready.with(|r| r.contains(&k)))
    });
    Effect::new(move |_| {
        let Some((doc, device, entry)) = event_key.get() else { return };
        if entry.is_none() && !state_ready.get() {
            if s.state.with_untracked(Option::is_some) {
                s.state.set(None);
            }
            return;
        }
        spawn_local(async move {
            let t0 = now();
            if let Response::State(st) = worker().ask(Request::State { doc, device, entry }).await {
                s.state.set(Some(st));
                record("state", now() - t0);
            }
        });
    });
    Effect::new(move |_| {
        let th = draw::Theme::read();
        s.size.track();
        s.state.with(|st| {
            let Some(c) = canvas_by_id("state-map") else { return };
            match st {
                Some(st) => draw::state_map(&c, st, &th),
                None => draw::clear(&c, &th),
            }
        });
    });
    // The URL hash follows the view.
    Effect::new(move |_| {
        let Some(t) = s.tab() else { return };
        let pin = s.pinned.with(|p| p.as_ref().map(|d| d.element));
        let mut pairs = vec![
            ("file", t.info.name.clone()),
            ("device", t.device.to_string()),
            ("kind", if t.kind == Kind::Segments { "segments" } else { "blocks" }.to_string()),
            ("start", format!("{:.2}", t.start)),
            ("end", format!("{:.2}", t.end)),
        ];
        if let Some(e) = t.event {
            pairs.push(("event", e.to_string()));
        }
        if let Some(p) = pin {
            pairs.push(("pin", p.to_string()));
        }
        write_hash(&pairs);
    });

    let on_resize = window_event_listener(ev::resize, move |_| s.size.update(|x| *x += 1));
    let _ = on_resize;
    // Redraw in the new colours when the system switches between light and dark.
    if let Some(mq) = web_sys::window().and_then(|w| w.match_media("(prefers-color-scheme: dark)").ok().flatten()) {
        let on_theme = Closure::<dyn Fn()>::new(move || s.size.update(|x| *x += 1));
        mq.set_onchange(Some(on_theme.as_ref().unchecked_ref()));
        on_theme.forget();
    }
    let on_key = window_event_listener(ev::keydown, move |e: web_sys::KeyboardEvent| {
        let tag = e
            .target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
            .map(|el| el.tag_name().to_lowercase())
            .unwrap_or_default();
        if matches!(tag.as_str(), "input" | "select" | "textarea") {
            return;
        }
        let w = s.tab_untracked().map_or(0.0, |t| t.end - t.start);
        match e.key().as_str() {
            "w" | "W" => s.zoom(0.8, None),
            "s" | "S" => s.zoom(1.25, None),
            "a" | "A" => s.pan(-w * 0.1),
            "d" | "D" => s.pan(w * 0.1),
            "?" => s.help.update(|h| *h = !*h),
            "Escape" => {
                s.help.set(false);
                s.pinned.set(None);
            }
            _ => return,
        }
        e.prevent_default();
    });
    let _ = on_key;

    let on_drop = move |e: web_sys::DragEvent| {
        e.prevent_default();
        for f in files_of(e.data_transfer().and_then(|d| d.files())) {
            let name = f.name();
            s.open(f.into(), name);
        }
    };

    view! {
        <div class="app" on:dragover=|e: web_sys::DragEvent| e.prevent_default() on:drop=on_drop>
            <header>
                <h1>"memscape"</h1>
                <label class="button" title="Open snapshots (.pickle, .pkl, .gz, .zst, .json, .html)">
                    "Open files…"
                    <input id="file-input" type="file" multiple=true on:change=move |e| {
                        let input: web_sys::HtmlInputElement = event_target(&e);
                        for f in files_of(input.files()) {
                            let name = f.name();
                            s.open(f.into(), name);
                        }
                        input.set_value("");
                    }/>
                </label>
                <nav id="tabs">
                    <For each=move || s.tabs.get() key=|t| t.info.doc let:t>
                        {
                            let doc = t.info.doc;
                            let name = t.info.name.clone();
                            view! {
                                <span class="tab" class:active=move || s.active.get() == Some(doc)>
                                    <button class="tab-name" on:click=move |_| s.select_tab(doc)>{name}</button>
                                    <button class="tab-close" title="Close" on:click=move |_| s.close_tab(doc)>"×"</button>
                                </span>
                            }
                        }
                    </For>
                </nav>
                <span class="spacer"></span>
                <span class="privacy">"Files never leave this page."</span>
                <button id="help-button" title="Keyboard shortcuts" on:click=move |_| s.help.update(|h| *h = !*h)>"?"</button>
            </header>
            <div id="loads">
                <For each=move || s.loads.get() key=|l| (l.id, l.bytes) let:l>
                    {
                        let pct = if l.total > 0 { l.bytes as f64 / l.total as f64 * 100.0 } else { 0.0 };
                        let elapsed = (now() - l.started) / 1000.0;
                        let left = if l.bytes > 0 && l.bytes < l.total {
                            format!("{:.1} s left", elapsed / l.bytes as f64 * (l.total - l.bytes) as f64)
                        } else {
                            String::new()
                        };
                        let id = l.id;
                        view! {
                            <div class="load">
                                <span class="load-name">{l.name.clone()}</span>
                                <progress max="100" value=format!("{pct:.1}")></progress>
                                <span class="load-figures">
                                    {format!("{} / {} ({pct:.0}%) {left}", format_size(i128::from(l.bytes)), format_size(i128::from(l.total)))}
                                </span>
                                <button class="cancel" on:click=move |_| worker().cancel(id)>"Cancel"</button>
                            </div>
                        }
                    }
                </For>
            </div>
            <Show when=move || s.error.with(Option::is_some)>
                <div id="error" role="alert">
                    <span class="error-text">{move || s.error.get().unwrap_or_default()}</span>
                    <button on:click=move |_| s.error.set(None)>"Dismiss"</button>
                </div>
            </Show>
            <Show when=move || s.notice.with(Option::is_some)>
                <div id="notice">{move || s.notice.get().unwrap_or_default()}</div>
            </Show>
            <Show
                when=move || s.active.get().is_some()
                fallback=|| view! { <div class="empty">"Drop PyTorch memory snapshots anywhere on this page, or use Open files…"</div> }
            >
                <Main s=s i=i/>
            </Show>
            <Show when=move || s.help.get()>
                <div id="help" on:click=move |_| s.help.set(false)>
                    <div class="help-box">
                        <h2>"Keyboard and mouse"</h2>
                        <table>
                            <tr><td>"W / S"</td><td>"zoom in / out"</td></tr>
                            <tr><td>"A / D"</td><td>"pan left / right"</td></tr>
                            <tr><td>"wheel, pinch"</td><td>"zoom around the pointer"</td></tr>
                            <tr><td>"drag"</td><td>"pan"</td></tr>
                            <tr><td>"click"</td><td>"pin an allocation's details (Esc unpins)"</td></tr>
                            <tr><td>"overview drag"</td><td>"select the window"</td></tr>
                            <tr><td>"↑ / ↓ in the event list"</td><td>"previous / next event"</td></tr>
                            <tr><td>"?"</td><td>"this help"</td></tr>
                        </table>
                    </div>
                </div>
            </Show>
            <div id="status">{move || s.status.get()}</div>
        </div>
    }
}

#[component]
fn Main(s: S, i: insight::I) -> impl IntoView {
    let drag = StoredValue::new(None::<(f64, f64, f64, bool)>);
    let brush = StoredValue::new(None::<(f64, bool)>);
    let step_at = move |x: f64| -> Option<f64> {
        let c = canvas_by_id("timeline")?;
        let w = f64::from(c.client_width()) - draw::LEFT - draw::RIGHT;
        let t = s.tab_untracked()?;
        Some(t.start + (x - draw::LEFT) / w * (t.end - t.start))
    };
    // Hit tests run in the worker, one at a time: a move while one is out is remembered
    // and asked next, so the worker never queues stale positions.
    let hit_busy = StoredValue::new(false);
    let hit_next = StoredValue::new(None::<(f64, f64, bool)>);
    fn ask_hit(s: S, busy: StoredValue<bool>, next: StoredValue<Option<(f64, f64, bool)>>, x: f64, y: f64, pin: bool) {
        if busy.get_value() && !pin {
            next.set_value(Some((x, y, pin)));
            return;
        }
        let Some(c) = canvas_by_id("timeline") else { return };
        let Some(t) = s.tab_untracked() else { return };
        let (w, h) = (f64::from(c.client_width()), f64::from(c.client_height()));
        let found = s.view.with_untracked(|v| {
            let v = v.as_ref()?;
            let cols = v.columns.len().max(1) as f64;
            let col = ((x - draw::LEFT) / ((w - draw::LEFT - draw::RIGHT) / cols)).floor();
            let bytes =
                (h - draw::BOTTOM - y) / (h - draw::TOP - draw::BOTTOM) * v.y_max.max(1) as f64 * engine::HEADROOM;
            if col < 0.0 || col >= cols || bytes < 0.0 {
                return None;
            }
            Some((v.columns[col as usize].step, bytes as u64))
        });
        let Some((step, bytes)) = found else {
            if pin {
                s.pinned.set(None);
            } else if s.hover.with_untracked(Option::is_some) {
                s.hover.set(None);
            }
            return;
        };
        let rows = (h - draw::TOP - draw::BOTTOM) as u32;
        busy.set_value(true);
        spawn_local(async move {
            let t0 = now();
            let r =
                worker().ask(Request::Hit { doc: t.info.doc, device: t.device, kind: t.kind, step, bytes, rows }).await;
            busy.set_value(false);
            if let Response::Hit(d) = r {
                record("details", now() - t0);
                if pin {
                    s.pinned.set(d);
                } else if s.hover.with_untracked(|h| h.as_ref().map(|x| x.element)) != d.as_ref().map(|x| x.element) {
                    s.hover.set(d);
                }
            }
            if let Some((x, y, pin)) = next.get_value() {
                next.set_value(None);
                ask_hit(s, busy, next, x, y, pin);
            }
        });
    }
    let details_of = move |el: u32, then: Box<dyn Fn(Details)>| {
        let Some(t) = s.tab_untracked() else { return };
        spawn_local(async move {
            let r =
                worker().ask(Request::Details { doc: t.info.doc, device: t.device, kind: t.kind, element: el }).await;
            if let Response::Details(d) = r {
                then(d);
            }
        });
    };
    let on_move = move |e: web_sys::MouseEvent| {
        let (x, y) = (f64::from(e.offset_x()), f64::from(e.offset_y()));
        if let Some((x0, a, b, moved)) = drag.get_value() {
            if (x - x0).abs() > 3.0 || moved {
                drag.set_value(Some((x0, a, b, true)));
                let c = canvas_by_id("timeline");
                let w = c.map_or(800.0, |c| f64::from(c.client_width())) - draw::LEFT - draw::RIGHT;
                let dx = (x - x0) / w * (b - a);
                let n = s.tab_untracked().map_or(1.0, |t| f64::from(t.n_steps));
                let start = (a - dx).clamp(0.0, (n - (b - a)).max(0.0));
                s.edit(|t| {
                    t.start = start;
                    t.end = start + (b - a);
                });
                return;
            }
        }
        ask_hit(s, hit_busy, hit_next, x, y, false);
    };
    let on_down = move |e: web_sys::MouseEvent| {
        if let Some(t) = s.tab_untracked() {
            drag.set_value(Some((f64::from(e.offset_x()), t.start, t.end, false)));
        }
    };
    let on_up = move |e: web_sys::MouseEvent| {
        let moved = drag.get_value().is_some_and(|d| d.3);
        drag.set_value(None);
        if moved {
            return;
        }
        ask_hit(s, hit_busy, hit_next, f64::from(e.offset_x()), f64::from(e.offset_y()), true);
    };
    let on_wheel = move |e: web_sys::WheelEvent| {
        e.prevent_default();
        let anchor = step_at(f64::from(e.offset_x()));
        let dy = e.delta_y();
        if e.shift_key() || e.delta_x().abs() > dy.abs() {
            let w = s.tab_untracked().map_or(0.0, |t| t.end - t.start);
            let d = if e.delta_x().abs() > dy.abs() { e.delta_x() } else { dy };
            s.pan(w * d / 1000.0);
        } else {
            s.zoom((dy / 300.0).exp().clamp(0.25, 4.0), anchor);
        }
    };
    let mini_step = move |x: f64| -> Option<f64> {
        let c = canvas_by_id("minimap")?;
        let w = f64::from(c.client_width()) - draw::LEFT - draw::RIGHT;
        let n = f64::from(s.tab_untracked()?.n_steps);
        Some(((x - draw::LEFT) / w * n).clamp(0.0, n))
    };
    let device_options = move || {
        s.tab().map(|t| {
            t.info
                .devices
                .iter()
                .map(|d| {
                    let v = d.device.to_string();
                    let sel = d.device == t.device;
                    let gpu = t.info.summary.devices.iter().find(|s| s.device == u64::from(d.device)).and_then(|s| s.gpu.as_ref());
                    let name = gpu.map(|g| format!(" {}", g.name)).unwrap_or_default();
                    view! { <option value=v selected=sel>{format!("cuda:{}{name} ({} events)", d.device, d.entries)}</option> }
                })
                .collect_view()
        })
    };
    let run_search = move || {
        let Some(t) = s.tab_untracked() else { return };
        let doc_el = web_sys::window().and_then(|w| w.document());
        let text = doc_el
            .as_ref()
            .and_then(|d| d.get_element_by_id("search"))
            .and_then(|e| e.dyn_into::<web_sys::HtmlInputElement>().ok())
            .map(|i| i.value())
            .unwrap_or_default();
        let mode = doc_el
            .as_ref()
            .and_then(|d| d.get_element_by_id("search-mode"))
            .and_then(|e| e.dyn_into::<web_sys::HtmlSelectElement>().ok())
            .map(|i| i.value())
            .unwrap_or_default();
        if text.trim().is_empty() {
            s.search.set(None);
            spawn_local(async move {
                worker().ask(Request::ClearSearch { doc: t.info.doc }).await;
                s.size.update(|x| *x += 1);
            });
            return;
        }
        let query = match mode.as_str() {
            "regex" => Query::Regex(text),
            "address" => Query::Address(text),
            _ => Query::Substring(text),
        };
        spawn_local(async move {
            match worker().ask(Request::Search { doc: t.info.doc, device: t.device, kind: t.kind, query }).await {
                Response::Search(r) => {
                    s.search_pos.set(0);
                    if let Some(&(el, a, b)) = r.matches.first() {
                        s.focus_element(a, b);
                        details_of(el, Box::new(move |d| s.pinned.set(Some(d))));
                    }
                    s.search.set(Some(r));
                    s.size.update(|x| *x += 1);
                }
                Response::Error(e) => s.status.set(e),
                _ => {}
            }
        });
    };
    let step_search = move |delta: i64| {
        let Some(r) = s.search.get_untracked() else { return };
        if r.matches.is_empty() {
            return;
        }
        let n = r.matches.len() as i64;
        let pos = (s.search_pos.get_untracked() as i64 + delta).rem_euclid(n) as usize;
        s.search_pos.set(pos);
        let (el, a, b) = r.matches[pos];
        s.focus_element(a, b);
        details_of(el, Box::new(move |d| s.pinned.set(Some(d))));
    };
    let export_png = move |_| {
        let Some(c) = canvas_by_id("timeline") else { return };
        let Ok(url) = c.to_data_url() else { return };
        let Some(doc) = web_sys::window().and_then(|w| w.document()) else { return };
        if let Ok(a) = doc.create_element("a") {
            let a: web_sys::HtmlAnchorElement = a.unchecked_into();
            a.set_href(&url);
            let name = s.tab_untracked().map_or("memscape".into(), |t| t.info.name);
            a.set_download(&format!("{name}.timeline.png"));
            a.click();
        }
    };

    let save_html = move |_| {
        let Some(t) = s.tab_untracked() else { return };
        let Some(blob) = worker().blob(t.info.doc) else { return };
        s.status.set(format!("Making an offline page of {}…", t.info.name));
        spawn_local(async move {
            match save::save(t.info.name.clone(), blob).await {
                Ok(()) => s.status.set(format!("Saved {}.html", t.info.name)),
                Err(e) => s.error.set(Some(format!("{}: could not make the offline page: {e}", t.info.name))),
            }
        });
    };

    let shown = move |m: insight::Mode| move || if i.mode.get() == m { "" } else { "none" };
    view! {
        <insight::Modes s=s i=i/>
        <Show when=move || i.mode.get() == insight::Mode::Categories>
            <insight::CategoryView s=s i=i/>
        </Show>
        <Show when=move || i.mode.get() == insight::Mode::Compare>
            <insight::CompareView s=s i=i/>
        </Show>
        <div id="timeline-view" style:display=shown(insight::Mode::Timeline)>
        <div class="toolbar">
            <label>"Device "
                <select id="device" on:change=move |e| {
                    let v: u32 = event_target_value(&e).parse().unwrap_or(0);
                    s.hover.set(None);
                    s.pinned.set(None);
                    s.search.set(None);
                    s.list_first.set(0);
                    s.edit(|t| { t.device = v; t.start = 0.0; t.end = 0.0; t.event = None; });
                }>{device_options}</select>
            </label>
            <label>"Memory "
                <select id="kind" on:change=move |e| {
                    let k = if event_target_value(&e) == "segments" { Kind::Segments } else { Kind::Blocks };
                    s.hover.set(None);
                    s.pinned.set(None);
                    s.search.set(None);
                    s.edit(|t| { t.kind = k; t.start = 0.0; t.end = 0.0; });
                }>
                    <option value="blocks" selected=move || s.tab().is_some_and(|t| t.kind == Kind::Blocks)>"Allocated (active memory timeline)"</option>
                    <option value="segments" selected=move || s.tab().is_some_and(|t| t.kind == Kind::Segments)>"Reserved (segments) vs allocated"</option>
                </select>
            </label>
            <label>"X axis "
                <select id="xaxis" on:change=move |e| s.time_axis.set(event_target_value(&e) == "time")>
                    <option value="events">"event index"</option>
                    <option value="time" disabled=move || !s.tab().is_some_and(|t| t.info.devices.iter().any(|d| d.device == t.device && d.has_time))>"wall-clock time"</option>
                </select>
            </label>
            <button id="peak" on:click=move |_| {
                if let Some(v) = s.view.get_untracked() {
                    let p = f64::from(v.peak_step);
                    let w = ((v.end - v.start) / 4.0).max(8.0);
                    s.set_window(p - w / 2.0, p + w / 2.0);
                }
            }>"Jump to peak"</button>
            <button id="whole" on:click=move |_| s.edit(|t| { t.start = 0.0; t.end = f64::from(t.n_steps); })>"Whole trace"</button>
            <button id="png" on:click=export_png>"Export PNG"</button>
            <button id="save-html" title="One HTML file with the viewer and this snapshot; opens offline" on:click=save_html>"Save offline HTML"</button>
            <span class="spacer"></span>
            <input id="search" type="search" placeholder="Search frames or address" on:keydown=move |e: web_sys::KeyboardEvent| {
                if e.key() == "Enter" { run_search(); }
            }/>
            <select id="search-mode">
                <option value="text">"text"</option>
                <option value="regex">"regex"</option>
                <option value="address">"address"</option>
            </select>
            <button id="search-go" on:click=move |_| run_search()>"Find"</button>
            <button id="search-prev" on:click=move |_| step_search(-1)>"◀"</button>
            <button id="search-next" on:click=move |_| step_search(1)>"▶"</button>
            <span id="search-count">{move || s.search.with(|r| r.as_ref().map(|r| {
                if r.count == 0 { "no matches".to_string() } else { format!("{} of {} matches", s.search_pos.get() + 1, r.count) }
            }))}</span>
        </div>
        <Show when=move || s.tab().is_some_and(|t| t.info.devices.is_empty())>
            <div id="no-devices" class="empty">"Nothing was recorded in this file: no device has trace events or segments."</div>
        </Show>
        <div class="plot">
            <canvas id="timeline" data-peak-step=move || s.view.with(|v| v.as_ref().map(|v| v.peak_step.to_string()))
                on:mousemove=on_move on:mousedown=on_down on:mouseup=on_up
                on:mouseleave=move |_| { drag.set_value(None); s.hover.set(None); } on:wheel=on_wheel></canvas>
            <canvas id="minimap"
                on:mousedown=move |e: web_sys::MouseEvent| { if let Some(a) = mini_step(f64::from(e.offset_x())) { brush.set_value(Some((a, false))); } }
                on:mousemove=move |e: web_sys::MouseEvent| {
                    if let (Some((a, _)), Some(b)) = (brush.get_value(), mini_step(f64::from(e.offset_x()))) {
                        brush.set_value(Some((a, true)));
                        s.set_window(a, b);
                    }
                }
                on:mouseup=move |e: web_sys::MouseEvent| {
                    if let (Some((a, moved)), Some(b)) = (brush.get_value(), mini_step(f64::from(e.offset_x()))) {
                        if moved { s.set_window(a, b); } else if let Some(t) = s.tab_untracked() {
                            let w = t.end - t.start;
                            s.set_window(b - w / 2.0, b + w / 2.0);
                        }
                    }
                    brush.set_value(None);
                }
                on:mouseleave=move |_| brush.set_value(None)></canvas>
        </div>
        <div class="panels">
            <DetailsPanel s=s/>
            <StatsPanel s=s/>
        </div>
        <div class="panels">
            <EventList s=s/>
            <StatePanel s=s/>
        </div>
        </div>
    }
}

#[component]
fn DetailsPanel(s: S) -> impl IntoView {
    let shown = move || s.pinned.get().or_else(|| s.hover.get());
    let copy = move |_| {
        let Some(d) = s.pinned.get_untracked().or_else(|| s.hover.get_untracked()) else { return };
        let frames = if s.all_frames.get_untracked() { d.all_frames } else { d.frames };
        let text = frames.join("\n");
        if let Some(w) = web_sys::window() {
            let p = w.navigator().clipboard().write_text(&text);
            spawn_local(async move {
                match wasm_bindgen_futures::JsFuture::from(p).await {
                    Ok(_) => s.status.set("Stack copied".into()),
                    Err(_) => s.status.set("The browser refused clipboard access".into()),
                }
            });
        }
    };
    view! {
        <section id="details">
            <h2>{move || if s.pinned.with(Option::is_some) { "Pinned allocation" } else { "Allocation under the pointer" }}</h2>
            {move || match shown() {
                None => view! { <p class="hint">"Hover over the timeline; click to pin."</p> }.into_any(),
                Some(d) => {
                    let frames = if s.all_frames.get() { d.all_frames.clone() } else { d.frames.clone() };
                    let row = |k: &'static str, v: String| view! { <tr data-key=k><th>{k}</th><td>{v}</td></tr> };
                    view! {
                        <table class="kv">
                            {row("address", format!("0x{:x}", d.addr))}
                            {row("size", bytes_text(d.size))}
                            {d.requested.map(|r| row("requested", bytes_text(r)))}
                            {row("stream", d.stream.map_or("?".into(), |x| x.to_string()))}
                            {d.pool.map(|p| row("pool", format!("({}, {})", p.0, p.1)))}
                            {d.time_us.map(|t| row("time", format!("{t} µs")))}
                            {row("total after", bytes_text(d.total_after))}
                            {row("lifetime", format!("steps {} to {}", d.start_step, d.end_step))}
                            {row("origin", d.origin.clone())}
                            {d.compile_context.clone().map(|c| row("compile context", c))}
                            {d.user_metadata.clone().map(|c| row("user metadata", c))}
                            {d.category.clone().map(|c| row("category field", c))}
                            {d.class.clone().map(|(c, why)| row("category", format!("{}: {why}", c.label())))}
                            {d.class_pending.then(|| view! { <tr data-key="category-pending"><th>"category"</th><td>"being worked out for the whole file…"</td></tr> })}
                        </table>
                        <div class="stack-tools">
                            <label><input id="all-frames" type="checkbox" prop:checked=move || s.all_frames.get()
                                on:change=move |e| s.all_frames.set(event_target_checked(&e))/>" show all frames"</label>
                            <button id="copy-stack" on:click=copy>"Copy stack"</button>
                        </div>
                        <pre id="stack">{if frames.is_empty() { "(no stack recorded)".to_string() } else { frames.join("\n") }}</pre>
                    }.into_any()
                }
            }}
        </section>
    }
}

#[component]
fn StatsPanel(s: S) -> impl IntoView {
    view! {
        <section id="stats">
            <h2>"Statistics"</h2>
            {move || s.tab().map(|t| {
                let sum = &t.info.summary;
                let dev = sum.devices.iter().find(|d| d.device == u64::from(t.device)).cloned();
                let text_row = |key: String, label: String, value: String, text: String| {
                    view! { <tr data-key=key data-value=value><th>{label}</th><td>{text}</td></tr> }
                };
                let row = |key: String, label: String, v: u64, bytes: bool| {
                    let text = if bytes { bytes_text(v) } else { v.to_string() };
                    text_row(key, label, v.to_string(), text)
                };
                let mut rows = vec![
                    row("segments".into(), "segments (all devices)".into(), sum.segments, false),
                    row("total_reserved".into(), "reserved".into(), sum.total_reserved, true),
                    row("total_allocated".into(), "allocated".into(), sum.total_allocated, true),
                    row("free_internal".into(), "free inside blocks".into(), sum.free_internal.max(0) as u64, true),
                    row("free_external".into(), "free between blocks".into(), sum.free_external, true),
                ];
                if let Some(d) = dev {
                    // Device name and memory: only in snapshots written by `memscape capture` (NVML).
                    if let Some(g) = &d.gpu {
                        rows.push(text_row("gpu.name".into(), format!("cuda:{} device", d.device), g.name.clone(), g.name.clone()));
                        rows.push(row("gpu.total_bytes".into(), format!("cuda:{} memory", d.device), g.total_bytes, true));
                        if let Some(held) = g.process_used_bytes {
                            rows.push(row("gpu.process_used_bytes".into(), format!("cuda:{} held by the process (driver)", d.device), held, true));
                        }
                    }
                    rows.push(row("trace_entries".into(), format!("cuda:{} events", d.device), d.trace_entries, false));
                    rows.push(row("reserved_bytes".into(), format!("cuda:{} reserved", d.device), d.reserved_bytes, true));
                    for (pre, label, tl) in [("timeline", "allocated", &d.timeline), ("segment_timeline", "reserved", &d.segment_timeline)] {
                        rows.push(row(format!("{pre}.elements"), format!("{label}: elements"), tl.elements, false));
                        rows.push(row(format!("{pre}.peak_bytes"), format!("{label}: peak"), tl.peak_bytes, true));
                        rows.push(row(format!("{pre}.final_bytes"), format!("{label}: at the end"), tl.final_bytes, true));
                        rows.push(row(format!("{pre}.initially_allocated"), format!("{label}: alive before recording"), tl.initially_allocated, false));
                        rows.push(row(format!("{pre}.unmatched_frees"), format!("{label}: frees without alloc"), tl.unmatched_frees, false));
                        rows.push(row(format!("{pre}.snapshot_only"), format!("{label}: only in final snapshot"), tl.snapshot_only, false));
                    }
                }
                view! {
                    <p class="file-line" data-format=t.info.format.clone()>{format!("{} · {} · {}", t.info.name, format_size(i128::from(t.info.bytes)), t.info.format)}</p>
                    <table class="kv" id="stats-table">{rows}</table>
                    {(!t.info.warnings.is_empty()).then(|| view! { <details><summary>{format!("{} warnings", t.info.warnings.len())}</summary><pre>{t.info.warnings.join("\n")}</pre></details> })}
                }
            })}
        </section>
    }
}

#[component]
fn EventList(s: S) -> impl IntoView {
    let scroller = NodeRef::<leptos::html::Div>::new();
    let total = move || s.events.with(|p| p.as_ref().map_or(0, |p| p.total));
    let spacer = move || (f64::from(total()) * ROW).min(MAX_SPACER);
    let visible = (LIST_H / ROW).floor() as u32;
    // Scroll position <-> first row, linear even when the list is taller than a browser allows.
    let first_of = move |top: f64| -> u32 {
        let range = (spacer() - LIST_H).max(1.0);
        let rows = f64::from(total().saturating_sub(visible));
        ((top / range).clamp(0.0, 1.0) * rows).round() as u32
    };
    let top_of = move |first: u32| -> f64 {
        let rows = f64::from(total().saturating_sub(visible)).max(1.0);
        f64::from(first) / rows * (spacer() - LIST_H).max(0.0)
    };
    let select = move |entry: u32| {
        s.edit(|t| t.event = Some(entry));
        let first = s.list_first.get_untracked();
        if entry < first || entry >= first + visible {
            let f = entry.saturating_sub(visible / 2);
            if let Some(el) = scroller.get_untracked() {
                el.set_scroll_top(top_of(f) as i32);
            }
            s.list_first.set(f.min(total().saturating_sub(visible)));
        }
    };
    let on_key = move |e: web_sys::KeyboardEvent| {
        let cur = s.tab_untracked().and_then(|t| t.event);
        let n = total();
        if n == 0 {
            return;
        }
        let next = match (e.key().as_str(), cur) {
            ("ArrowDown", None) => 0,
            ("ArrowDown", Some(c)) => (c + 1).min(n - 1),
            ("ArrowUp", Some(c)) => c.saturating_sub(1),
            ("PageDown", c) => (c.unwrap_or(0) + visible).min(n - 1),
            ("PageUp", c) => c.unwrap_or(0).saturating_sub(visible),
            _ => return,
        };
        e.prevent_default();
        select(next);
    };
    view! {
        <section id="events-panel">
            <h2>{move || format!("Events ({})", total())}</h2>
            <div id="events" tabindex="0" node_ref=scroller on:keydown=on_key
                on:scroll=move |_| {
                    if let Some(el) = scroller.get_untracked() {
                        s.list_first.set(first_of(f64::from(el.scroll_top())));
                    }
                }>
                <div class="spacer-rows" style=move || format!("height:{}px", spacer())>
                    <div class="rows" style=move || {
                        let top = scroller.get().map_or(0, |el| { s.list_first.track(); el.scroll_top() });
                        format!("transform:translateY({top}px)")
                    }>
                        {move || s.events.get().map(|p| p.rows.into_iter().map(|r| {
                            let entry = r.entry;
                            let sel = move || s.tab().and_then(|t| t.event) == Some(entry);
                            view! {
                                <div class="row" class:selected=sel data-entry=entry.to_string() on:click=move |_| select(entry)>
                                    <span class="idx">{entry.to_string()}</span>
                                    <span class="act">{r.action.clone()}</span>
                                    <span class="addr">{format!("0x{:x}", r.addr)}</span>
                                    <span class="sz">{format_size(i128::from(r.size))}</span>
                                    <span class="frame">{r.frame.clone()}</span>
                                </div>
                            }
                        }).collect_view())}
                    </div>
                </div>
            </div>
        </section>
    }
}

#[component]
fn StatePanel(s: S) -> impl IntoView {
    // Before the first event, the worker first undoes the whole trace (in the background).
    let waiting = move || {
        let before_first = s.tab().is_some_and(|t| t.event.is_none());
        if before_first { "Undoing the trace to find the allocator before the first event…" } else { "" }.to_string()
    };
    view! {
        <section id="state">
            <h2>{move || match s.state.with(|st| st.as_ref().map(|st| st.after_entry)) {
                Some(Some(e)) => format!("Allocator after event {e}"),
                _ => "Allocator before the first event".to_string(),
            }}</h2>
            <p id="state-summary">{move || s.state.get().map_or_else(waiting, |st| format!(
                "{} segments · reserved {} · allocated {} · free inside blocks {} · free between blocks {} · {} pending frees · {} private pools{}",
                st.segments.len(),
                format_size(i128::from(st.reserved)),
                format_size(i128::from(st.allocated)),
                format_size(i128::from(st.internal_free)),
                format_size(i128::from(st.external_free)),
                st.pending_frees,
                st.private_pools,
                if st.orphan_blocks > 0 { format!(" · {} blocks of unknown segments", st.orphan_blocks) } else { String::new() },
            ))}</p>
            <canvas id="state-map"></canvas>
            <p class="legend">"Segments in address order, end to end: coloured blocks are allocated, grey is free, red is freed but pending (used by another stream)."</p>
        </section>
    }
}
