//! What every view needs from the browser: the clock, the timings the benchmark reads,
//! canvases by id, files from an input or a drop (folders read through), and the page's
//! localStorage.

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// Milliseconds since the page started.
pub(crate) fn now() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

/// Appends `[what, value]` to `window.memscapeTimings`, which the benchmark reads.
pub(crate) fn record(what: &str, value: f64) {
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

/// `?last=N` in the page's address: open files as a window of each trace's last N entries.
pub(crate) fn window_param() -> Option<engine::protocol::ReadWindow> {
    let search = web_sys::window()?.location().search().ok()?;
    let last = search.trim_start_matches('?').split('&').find_map(|kv| kv.strip_prefix("last=")?.parse().ok());
    last.filter(|&n| n > 0).map(engine::protocol::ReadWindow::Last)
}

pub(crate) fn canvas_by_id(id: &str) -> Option<web_sys::HtmlCanvasElement> {
    web_sys::window()?.document()?.get_element_by_id(id)?.dyn_into().ok()
}

/// The value of an `<input>` or `<select>` by id ("" when there is none).
pub(crate) fn value_by_id(id: &str) -> String {
    let Some(el) = web_sys::window().and_then(|w| w.document()).and_then(|d| d.get_element_by_id(id)) else {
        return String::new();
    };
    if let Some(i) = el.dyn_ref::<web_sys::HtmlInputElement>() {
        return i.value();
    }
    el.dyn_ref::<web_sys::HtmlSelectElement>().map(|s| s.value()).unwrap_or_default()
}

/// Sets the value of an `<input>` by id.
pub(crate) fn set_value_by_id(id: &str, value: &str) {
    let el = web_sys::window().and_then(|w| w.document()).and_then(|d| d.get_element_by_id(id));
    if let Some(i) = el.as_ref().and_then(|el| el.dyn_ref::<web_sys::HtmlInputElement>()) {
        i.set_value(value);
    }
}

pub(crate) fn files_of(list: Option<web_sys::FileList>) -> Vec<web_sys::File> {
    let Some(list) = list else { return Vec::new() };
    (0..list.length()).filter_map(|i| list.get(i)).collect()
}

/// Files with their paths: in a folder (`webkitRelativePath`, `run/rank3.pickle`), else the
/// name.
pub(crate) fn files_with_paths(list: Option<web_sys::FileList>) -> Vec<(web_sys::File, String)> {
    files_of(list)
        .into_iter()
        .map(|f| {
            let rel =
                js_sys::Reflect::get(&f, &JsValue::from_str("webkitRelativePath")).ok().and_then(|v| v.as_string());
            let path = rel.filter(|p| !p.is_empty()).unwrap_or_else(|| f.name());
            (f, path)
        })
        .collect()
}

/// What a drop holds, taken during the drop event (the browser forgets it after): its
/// entries (files and folders), or `None` where the browser gives no entries.
pub(crate) fn dropped_entries(dt: &web_sys::DataTransfer) -> Option<Vec<web_sys::FileSystemEntry>> {
    let items = dt.items();
    let entries: Vec<web_sys::FileSystemEntry> = (0..items.length())
        .filter_map(|i| items.get(i))
        .filter_map(|it| it.webkit_get_as_entry().ok().flatten())
        .collect();
    (!entries.is_empty()).then_some(entries)
}

/// The files under dropped entries, folders read through (breadth first), with their paths
/// from the drop (`run/rank3.pickle`); and whether any entry was a folder. A folder or file
/// the browser cannot read is left out.
pub(crate) async fn read_entries(entries: Vec<web_sys::FileSystemEntry>) -> (Vec<(web_sys::File, String)>, bool) {
    let folder = entries.iter().any(|e| e.is_directory());
    let mut todo: std::collections::VecDeque<web_sys::FileSystemEntry> = entries.into();
    let mut files = Vec::new();
    while let Some(e) = todo.pop_front() {
        if let Some(dir) = e.dyn_ref::<web_sys::FileSystemDirectoryEntry>().filter(|_| e.is_directory()) {
            let reader = dir.create_reader();
            // `readEntries` answers in batches (100 in Chromium) until an empty one.
            loop {
                let batch = callback_promise(|ok, err| {
                    let _ = reader.read_entries_with_callback_and_callback(ok, err);
                })
                .await;
                let Some(batch) = batch.and_then(|b| b.dyn_into::<js_sys::Array>().ok()) else { break };
                if batch.length() == 0 {
                    break;
                }
                todo.extend(batch.iter().map(|x| x.unchecked_into::<web_sys::FileSystemEntry>()));
            }
        } else if let Some(f) = e.dyn_ref::<web_sys::FileSystemFileEntry>().filter(|_| e.is_file()) {
            let file = callback_promise(|ok, err| f.file_with_callback_and_callback(ok, err)).await;
            if let Some(file) = file.and_then(|x| x.dyn_into::<web_sys::File>().ok()) {
                let path = e.full_path();
                let path = path.trim_start_matches('/');
                files.push((file, if path.is_empty() { e.name() } else { path.to_string() }));
            }
        }
    }
    (files, folder)
}

/// The value a callback-style API gives its success callback (`None` on its error callback).
async fn callback_promise(call: impl FnOnce(&js_sys::Function, &js_sys::Function)) -> Option<JsValue> {
    let mut call = Some(call);
    let p = js_sys::Promise::new(&mut |ok, err| {
        if let Some(c) = call.take() {
            c(&ok, &err);
        }
    });
    wasm_bindgen_futures::JsFuture::from(p).await.ok()
}

/// Runs `f` in a task after the browser has shown its next frame: what was drawn before this
/// call is on screen by then.
pub(crate) fn after_paint(f: impl FnOnce() + 'static) {
    leptos::prelude::request_animation_frame(move || leptos::prelude::set_timeout(f, std::time::Duration::ZERO));
}

/// Runs `f` once the page is idle, and at the latest after `ms` (a browser without idle
/// callbacks: after `ms`).
pub(crate) fn when_idle(ms: u32, f: impl FnOnce() + 'static) {
    let Some(w) = web_sys::window() else { return };
    let f = Closure::once_into_js(f);
    let opts = web_sys::IdleRequestOptions::new();
    opts.set_timeout(ms);
    if w.request_idle_callback_with_options(f.unchecked_ref(), &opts).is_err() {
        let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(f.unchecked_ref(), ms as i32);
    }
}

pub(crate) fn storage() -> Option<web_sys::Storage> {
    web_sys::window()?.local_storage().ok().flatten()
}
