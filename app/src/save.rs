//! *Save offline HTML*: the app's own assets and the open file's bytes, made into one page by
//! the `offline` crate, and downloaded. In an offline page the assets are read back from the
//! page itself, so an offline page can save another.

use offline::Assets;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::js_error::js_error;

fn document() -> Result<web_sys::Document, String> {
    web_sys::window().and_then(|w| w.document()).ok_or_else(|| "no document".to_string())
}

/// The base64 text of an embedded part of an offline page, when this is one.
pub fn embedded_text(id: &str) -> Option<String> {
    document().ok()?.get_element_by_id(id)?.text_content()
}

/// The decoded bytes of an embedded part.
pub fn embedded(id: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(embedded_text(id)?.trim()).ok()
}

async fn fetch(name: &str) -> Result<Vec<u8>, String> {
    let w = web_sys::window().ok_or("no window")?;
    let unfetched = |why: String| format!("the browser could not fetch {name} ({why})");
    let resp = JsFuture::from(w.fetch_with_str(name)).await.map_err(|e| unfetched(js_error(&e)))?;
    let resp: web_sys::Response = resp.dyn_into().map_err(|_| unfetched("not a response".into()))?;
    if !resp.ok() {
        return Err(unfetched(format!("HTTP {}", resp.status())));
    }
    let body = resp.array_buffer().map_err(|e| unfetched(js_error(&e)))?;
    let buf = JsFuture::from(body).await.map_err(|e| unfetched(js_error(&e)))?;
    Ok(js_sys::Uint8Array::new(&buf).to_vec())
}

/// The app's assets: from this page when it is an offline page, else from the server that
/// served it (its own origin, which the page's policy allows).
pub async fn assets() -> Result<Assets, String> {
    if let (Some(app_js), Some(app_wasm), Some(worker_js), Some(worker_wasm)) = (
        embedded(offline::APP_JS),
        embedded(offline::APP_WASM),
        embedded(offline::WORKER_JS),
        embedded(offline::WORKER_WASM),
    ) {
        let css = document()?.query_selector("style").ok().flatten().and_then(|s| s.text_content()).unwrap_or_default();
        return Ok(Assets { css, app_js, app_wasm, worker_js, worker_wasm });
    }
    let html = document()?.document_element().ok_or("no root element")?.outer_html();
    let names = offline::asset_names(&html)?;
    let css = String::from_utf8(fetch(&names.css).await?).map_err(|_| "the stylesheet is not UTF-8")?;
    Ok(Assets {
        css,
        app_js: fetch(&names.app_js).await?,
        app_wasm: fetch(&names.app_wasm).await?,
        worker_js: fetch(&names.worker_js).await?,
        worker_wasm: fetch(&names.worker_wasm).await?,
    })
}

/// Builds the offline page for `name` (its bytes in `blob`) and downloads it as `NAME.html`.
pub async fn save(name: String, blob: web_sys::Blob) -> Result<(), String> {
    let assets = assets().await?;
    let bytes = gloo_file::futures::read_as_bytes(&gloo_file::Blob::from(blob))
        .await
        .map_err(|e| format!("{name}: the browser could not read the file again: {e}"))?;
    let html = offline::page(&assets, &name, &bytes);
    download(&format!("{name}.html"), "text/html", html)
}

/// Hands `text` to the browser as a download named `name`.
pub fn download(name: &str, mime: &str, text: String) -> Result<(), String> {
    let parts = js_sys::Array::of1(&js_sys::JsString::from(text));
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type(mime);
    let failed = |e: JsValue| format!("the browser could not make the download {name} ({})", js_error(&e));
    let out = web_sys::Blob::new_with_str_sequence_and_options(&parts, &opts).map_err(failed)?;
    let url = web_sys::Url::create_object_url_with_blob(&out).map_err(failed)?;
    let a: web_sys::HtmlAnchorElement = document()?.create_element("a").map_err(failed)?.unchecked_into();
    a.set_href(&url);
    a.set_download(name);
    a.click();
    Ok(())
}
