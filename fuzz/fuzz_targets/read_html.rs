#![no_main]
//! The input as the payload of a `_memory_viz.py` HTML page (base64, 1 to 3 NUL pad bytes).
use base64::Engine as _;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut payload = data.to_vec();
    payload.extend(std::iter::repeat_n(0u8, 3 - data.len() % 3));
    let b64 = base64::engine::general_purpose::STANDARD.encode(&payload);
    let page = format!(
        "\n<!DOCTYPE html>\n<html>\n<body>\n<script type=\"module\">\nconst local_files = [{{\"name\": \"snapshot.pickle\", \"base64\": \"{b64}\"}}]\nadd_local_files(local_files, 'Active Memory Timeline')\n</script>\n</body>\n"
    );
    if let Ok(loaded) = snapshot::read(page.as_bytes()) {
        snapshot_fuzz::exercise(&loaded);
        if data.first() == Some(&0x80) {
            let plain = snapshot::read(data).expect("the page read, so its pickle must");
            assert!(snapshot::write::to_pickle_bytes(&plain.snapshot) == snapshot::write::to_pickle_bytes(&loaded.snapshot));
        }
    }
});
