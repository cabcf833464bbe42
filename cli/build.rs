//! Embeds the viewer built by Trunk (`dist/`, or `$MEMSCAPE_DIST`) for `memscape html`. Without
//! a build there, `memscape html` says how to make one; everything else works the same.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=MEMSCAPE_DIST");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let dist = std::env::var("MEMSCAPE_DIST").map(PathBuf::from).unwrap_or_else(|_| manifest.join("../dist"));
    let index = dist.join("index.html");
    // A missing file makes cargo rerun this script every build, which is what we want until
    // the app is built; then the files themselves are watched.
    println!("cargo:rerun-if-changed={}", index.display());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("app_assets.rs");
    let code = match std::fs::read_to_string(&index).ok().and_then(|html| offline::asset_names(&html).ok()) {
        Some(n) => {
            let files = [&n.css, &n.app_js, &n.app_wasm, &n.worker_js, &n.worker_wasm].map(|f| dist.join(f));
            for f in &files {
                println!("cargo:rerun-if-changed={}", f.display());
            }
            let [css, app_js, app_wasm, worker_js, worker_wasm] =
                files.map(|f| format!("{:?}", f.display().to_string()));
            format!(
                "/// The viewer as built into `dist/` when this binary was compiled.\n\
                 pub fn app_assets() -> Option<offline::Assets> {{\n\
                 Some(offline::Assets {{ css: include_str!({css}).to_string(), app_js: include_bytes!({app_js}).to_vec(), \
                 app_wasm: include_bytes!({app_wasm}).to_vec(), worker_js: include_bytes!({worker_js}).to_vec(), \
                 worker_wasm: include_bytes!({worker_wasm}).to_vec() }})\n}}\n"
            )
        }
        None => "/// No viewer was built into `dist/` when this binary was compiled.\n\
                 pub fn app_assets() -> Option<offline::Assets> { None }\n"
            .to_string(),
    };
    if let Err(e) = std::fs::write(&out, code) {
        panic!("cannot write {}: {e}", out.display());
    }
}
