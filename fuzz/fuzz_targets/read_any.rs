#![no_main]
//! Any bytes: format detection, the pickle VM, JSON, HTML, zstd; then the analyses.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match snapshot::read(data) {
        Ok(loaded) => snapshot_fuzz::exercise(&loaded),
        Err(e) => assert!(e.offset.is_some() || e.path.is_some() || e.kind == snapshot::ErrorKind::NotASnapshot, "{e}"),
    }
});
