//! `offline` makes the single self-contained HTML file: the viewer (its CSS, the page's JS and
//! wasm, the worker's JS and wasm) and one snapshot, all inside one page that opens from
//! `file://` and never touches the network. Its Content-Security-Policy forbids every
//! connection; scripts and wasm start from `blob:` URLs and bytes embedded in the page.
//!
//! Pure functions over bytes: the page's *Save offline HTML* button (in wasm) and the
//! `memscape html` command (natively) both call [`page`].

use std::io::Write;

use base64::Engine as _;

/// The app as Trunk builds it into `dist/`.
#[derive(Clone, Debug, Default)]
pub struct Assets {
    /// The stylesheet.
    pub css: String,
    /// The page's wasm-bindgen ES module and its wasm.
    pub app_js: Vec<u8>,
    pub app_wasm: Vec<u8>,
    /// The worker's wasm-bindgen script (no modules) and its wasm.
    pub worker_js: Vec<u8>,
    pub worker_wasm: Vec<u8>,
}

/// Names of the files a Trunk-built `index.html` refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssetNames {
    pub css: String,
    pub app_js: String,
    pub app_wasm: String,
    pub worker_js: String,
    pub worker_wasm: String,
}

/// Finds the asset files in `dist/index.html` as Trunk writes it.
pub fn asset_names(index_html: &str) -> Result<AssetNames, String> {
    let attr_after = |marker: &str, attr: &str| -> Result<String, String> {
        let at = index_html.find(marker).ok_or_else(|| format!("index.html has no {marker}"))?;
        let rest = &index_html[at..];
        let start =
            rest.find(&format!("{attr}=\"")).ok_or_else(|| format!("no {attr} after {marker}"))? + attr.len() + 2;
        let len = rest[start..].find('"').ok_or("unterminated attribute")?;
        Ok(rest[start..start + len].trim_start_matches("./").trim_start_matches('/').to_string())
    };
    Ok(AssetNames {
        css: attr_after("rel=\"stylesheet\"", "href")?,
        app_js: attr_after("rel=\"modulepreload\"", "href")?,
        app_wasm: attr_after("rel=\"preload\"", "href")?,
        worker_js: "worker.js".into(),
        worker_wasm: "worker_bg.wasm".into(),
    })
}

/// The offline page's policy: no connection of any kind; scripts only inline or from `blob:`.
pub const CSP: &str = "default-src 'none'; script-src 'unsafe-inline' 'wasm-unsafe-eval' blob:; worker-src blob:; \
style-src 'unsafe-inline'; img-src data: blob:; connect-src 'none'; form-action 'none'; base-uri 'none'";

/// Ids of the embedded parts (the app reads them: `client/mod.rs`, `lib.rs`).
pub const APP_JS: &str = "memscape-app-js";
pub const APP_WASM: &str = "memscape-app-wasm";
pub const WORKER_JS: &str = "memscape-worker-js";
pub const WORKER_WASM: &str = "memscape-worker-wasm";
pub const SNAPSHOT: &str = "memscape-snapshot";

/// The snapshot as embedded: gzip and zstd stay as they are, anything else is gzipped
/// (the reader recognises all of them by content).
pub fn compress(snapshot: &[u8]) -> Vec<u8> {
    let compressed = snapshot.starts_with(&[0x1f, 0x8b]) || snapshot.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]);
    if compressed {
        return snapshot.to_vec();
    }
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(snapshot);
    enc.finish().unwrap_or_default()
}

/// Escapes text for an HTML attribute or element (file names are data).
pub fn escape(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '&' => "&amp;".into(),
            '<' => "&lt;".into(),
            '>' => "&gt;".into(),
            '"' => "&quot;".into(),
            '\'' => "&#39;".into(),
            c => c.to_string(),
        })
        .collect()
}

fn blob(id: &str, bytes: &[u8], extra: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    format!("<script type=\"application/octet-stream\" id=\"{id}\"{extra}>{b64}</script>\n")
}

/// The single HTML file: the app and the snapshot `name` (its bytes as read from disk).
pub fn page(assets: &Assets, name: &str, snapshot: &[u8]) -> String {
    let mut out = String::with_capacity(snapshot.len() + 4 * (assets.app_wasm.len() + assets.worker_wasm.len()));
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\" />\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\" />\n");
    out.push_str("<meta name=\"color-scheme\" content=\"light dark\" />\n");
    out.push_str(&format!("<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\" />\n"));
    out.push_str(&format!("<title>{} - memscape</title>\n<link rel=\"icon\" href=\"data:,\" />\n", escape(name)));
    out.push_str("<meta name=\"generator\" content=\"memscape offline page\" />\n");
    out.push_str(&format!("<style>\n{}\n</style>\n", assets.css.replace("</style", "<\\/style")));
    out.push_str(&blob(APP_JS, &assets.app_js, ""));
    out.push_str(&blob(APP_WASM, &assets.app_wasm, ""));
    out.push_str(&blob(WORKER_JS, &assets.worker_js, ""));
    out.push_str(&blob(WORKER_WASM, &assets.worker_wasm, ""));
    out.push_str(&blob(SNAPSHOT, &compress(snapshot), &format!(" data-name=\"{}\"", escape(name))));
    out.push_str(&format!(
        r#"<script type="module">
const bytes = id => Uint8Array.from(atob(document.getElementById(id).textContent), c => c.charCodeAt(0));
const app = URL.createObjectURL(new Blob([bytes('{APP_JS}')], {{ type: 'text/javascript' }}));
const init = (await import(app)).default;
await init({{ module_or_path: bytes('{APP_WASM}') }});
</script>
</head>
<body></body>
</html>
"#
    ));
    out
}
