//! The URL's hash keeps the file, device, memory kind, window, memory range, event and pin:
//! it follows the view, and a link's view comes back when its file is opened again.

use engine::protocol::Kind;
use leptos::prelude::*;
use wasm_bindgen::JsValue;

use crate::dom::now;
use crate::state::{Docs, Messages, Selection, Tab};

/// The view a link saved, until its file is opened.
#[derive(Clone, Copy)]
pub(crate) struct Restore(RwSignal<Option<Vec<(String, String)>>>);

impl Restore {
    /// Reads the page's hash; tells the user to open the file again when it names one the
    /// page does not open by itself (`bundled`).
    pub(crate) fn read(bundled: &str, messages: Messages) -> Restore {
        let hash = read_hash();
        if let Some(f) = hash.as_ref().and_then(|h| h.iter().find(|(k, _)| k == "file").map(|(_, v)| v.clone())) {
            if f != bundled {
                messages.notice.set(Some(format!("Open {f} again to restore the view saved in this link.")));
            }
        }
        Restore(RwSignal::new(hash))
    }

    /// Whether a link's view waits for a file of this name (its tab will not open on the
    /// first view).
    pub(crate) fn names(self, file: &str) -> bool {
        self.0.with_untracked(|h| h.as_ref().is_some_and(|h| h.iter().any(|(k, v)| k == "file" && v == file)))
    }

    /// Applies the saved view to a tab of the file it names (once); returns the element to
    /// pin.
    pub(crate) fn apply(self, tab: &mut Tab, messages: Messages) -> Option<u32> {
        let h = self.0.get_untracked()?;
        let get = |k: &str| h.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
        if get("file").as_deref() != Some(tab.info.name.as_str()) {
            return None;
        }
        self.0.set(None);
        if let Some(d) = get("device").and_then(|d| d.parse().ok()) {
            if tab.info.devices.iter().any(|x| x.device == d) {
                tab.device = d;
            }
        }
        if let Some(k) = get("kind") {
            tab.kind = kind_of(&k);
        }
        if let (Some(a), Some(b)) = (get("start").and_then(|v| v.parse().ok()), get("end").and_then(|v| v.parse().ok()))
        {
            tab.start = a;
            tab.end = b;
        }
        tab.event = get("event").and_then(|v| v.parse().ok());
        tab.y = get("y").and_then(|v| {
            let (a, b) = v.split_once('-')?;
            let (a, b) = (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?);
            (b > a).then_some((a, b))
        });
        messages.notice.set(None);
        get("pin").and_then(|v| v.parse::<u32>().ok())
    }
}

/// The least time between two writes of the hash, ms. Chromium ignores a page's history
/// changes past 200 in 10 s, and a wheel zoom moves the window 60 times a second.
const WRITE_GAP_MS: f64 = 60.0;
/// The least time from a change to its write, ms: about a frame, so that the frame showing
/// the change is drawn first. (A timer, not `requestAnimationFrame`, which a hidden page
/// never runs.)
const AFTER_FRAME_MS: f64 = 20.0;

/// Keeps the hash equal to the view shown.
///
/// Written after the frame that shows the change, not while the change is drawn:
/// `history.replaceState` took 0.5 to 16 ms of the page's thread per move in a pan's trace,
/// ahead of the moved picture. Moves in quick succession are written once, the last one,
/// at most every [`WRITE_GAP_MS`]; a change not yet written is written at once when the
/// page is hidden or left.
pub(crate) fn follow(docs: Docs, selection: Selection) {
    // The hash waiting to be written (a write is scheduled while this is set), and when the
    // last one was.
    let pending = StoredValue::new(None::<String>);
    let last = StoredValue::new(f64::NEG_INFINITY);
    let flush = move || {
        if let Some(h) = pending.try_update_value(Option::take).flatten() {
            write_hash(&h);
            last.set_value(now());
        }
    };
    let leaving = window_event_listener_untyped("pagehide", move |_| flush());
    let hidden = window_event_listener_untyped("visibilitychange", move |_| {
        if document().hidden() {
            flush();
        }
    });
    on_cleanup(move || {
        leaving.remove();
        hidden.remove();
    });
    Effect::new(move |_| {
        let Some(t) = docs.tab() else { return };
        let mut pairs = vec![
            ("file", t.info.name.clone()),
            ("device", t.device.to_string()),
            ("kind", kind_name(t.kind).to_string()),
            ("start", format!("{:.2}", t.start)),
            ("end", format!("{:.2}", t.end)),
        ];
        if let Some((a, b)) = t.y {
            pairs.push(("y", format!("{a}-{b}")));
        }
        if let Some(e) = t.event {
            pairs.push(("event", e.to_string()));
        }
        if let Some(p) = selection.pinned_element() {
            pairs.push(("pin", p.to_string()));
        }
        let was_pending = pending.get_value().is_some();
        pending.set_value(Some(hash_of(&pairs)));
        if was_pending {
            return;
        }
        let wait = (last.get_value() + WRITE_GAP_MS - now()).max(AFTER_FRAME_MS);
        set_timeout(flush, std::time::Duration::from_secs_f64(wait / 1000.0));
    });
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

fn hash_of(pairs: &[(&str, String)]) -> String {
    let h: Vec<String> =
        pairs.iter().map(|(k, v)| format!("{k}={}", String::from(js_sys::encode_uri_component(v)))).collect();
    format!("#{}", h.join("&"))
}

fn write_hash(hash: &str) {
    if let Some(w) = web_sys::window() {
        if w.location().hash().ok().as_deref() != Some(hash) {
            if let Ok(hist) = w.history() {
                // With the page's query (`?last=N`): a bare `#...` is resolved against the
                // document's `<base href="./">`, which has none.
                let url = format!("{}{hash}", w.location().search().unwrap_or_default());
                let _ = hist.replace_state_with_url(&JsValue::NULL, "", Some(&url));
            }
        }
    }
}

/// A memory mode as the link and the mode's menu name it.
pub(crate) fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Blocks => "blocks",
        Kind::Segments => "segments",
        Kind::PoolEnvelopes => "pools",
    }
}

/// The memory mode of a name ([`kind_name`]); anything else is allocated memory.
pub(crate) fn kind_of(name: &str) -> Kind {
    match name {
        "segments" => Kind::Segments,
        "pools" => Kind::PoolEnvelopes,
        _ => Kind::Blocks,
    }
}
