#![no_main]
//! Any bytes read as a snapshot, then cut into windows (the last entries, ranges, a time
//! span, an annotation's span) on each device and on all: each slice analysed, written and
//! read back.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(loaded) = snapshot::read(data) {
        snapshot_fuzz::slices(&loaded.snapshot, data.len() as u8);
    }
});
