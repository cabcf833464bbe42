#![no_main]
//! Any bytes read as a snapshot, then the doctor (every OOM, the peak, the end, what-if) and
//! flame graphs at the peak, before the recording, at a step and over windows.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(loaded) = snapshot::read(data) {
        snapshot_fuzz::doctor(&loaded.snapshot, data.len() as u8);
    }
});
