#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The offline page holds exactly what it was given and nothing that reaches out.

use base64::Engine as _;
use offline::{page, Assets};

fn assets() -> Assets {
    Assets {
        css: "body { color: red }".into(),
        app_js: b"export default async function init() {}".to_vec(),
        app_wasm: vec![0, 97, 115, 109, 1, 0, 0, 0],
        worker_js: b"let wasm_bindgen = () => {};".to_vec(),
        worker_wasm: vec![0, 97, 115, 109, 1, 0, 0, 0, 255],
    }
}

fn embedded(html: &str, id: &str) -> Vec<u8> {
    let start = html.find(&format!("id=\"{id}\"")).unwrap();
    let body = &html[start..];
    let open = body.find('>').unwrap() + 1;
    let close = body.find("</script>").unwrap();
    base64::engine::general_purpose::STANDARD.decode(&body[open..close]).unwrap()
}

#[test]
fn the_page_embeds_every_asset_and_the_snapshot_and_names_the_file_as_text() {
    let snapshot = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/cs336-fullstep.pickle")).unwrap();
    let name = "<img src=x onerror=alert(1)>.pickle";
    let html = page(&assets(), name, &snapshot);
    let a = assets();
    assert_eq!(embedded(&html, offline::APP_JS), a.app_js);
    assert_eq!(embedded(&html, offline::APP_WASM), a.app_wasm);
    assert_eq!(embedded(&html, offline::WORKER_JS), a.worker_js);
    assert_eq!(embedded(&html, offline::WORKER_WASM), a.worker_wasm);
    let packed = embedded(&html, offline::SNAPSHOT);
    assert!(packed.len() < snapshot.len() / 2, "compressed: {} of {}", packed.len(), snapshot.len());
    let mut back = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&packed[..]), &mut back).unwrap();
    assert_eq!(back, snapshot);
    assert!(!html.contains("<img"), "the name is escaped");
    assert!(html.contains("data-name=\"&lt;img src=x onerror=alert(1)&gt;.pickle\""));
    assert!(html.contains(offline::CSP) && offline::CSP.contains("connect-src 'none'"));
    for reach_out in ["http:", "https:", "//cdn", "src=\""] {
        assert!(!html.contains(reach_out), "{reach_out}");
    }
}

#[test]
fn a_compressed_snapshot_is_embedded_as_it_is() {
    let gz = offline::compress(b"\x80\x04}.");
    assert_eq!(offline::compress(&gz), gz);
    let html = page(&assets(), "a.pickle.gz", &gz);
    assert_eq!(embedded(&html, offline::SNAPSHOT), gz);
}

#[test]
fn asset_names_are_read_from_trunks_index() {
    let index = r#"<link rel="stylesheet" href="./style-1.css" integrity="x"/>
<link rel="modulepreload" href="./app-2.js" crossorigin="anonymous"><link rel="preload" href="./app-2_bg.wasm" as="fetch">"#;
    let n = offline::asset_names(index).unwrap();
    assert_eq!((n.css.as_str(), n.app_js.as_str(), n.app_wasm.as_str()), ("style-1.css", "app-2.js", "app-2_bg.wasm"));
    assert!(offline::asset_names("<html></html>").is_err());
}
