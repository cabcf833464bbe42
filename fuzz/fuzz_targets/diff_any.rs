#![no_main]
//! Any bytes read as a snapshot, or else as two (a big-endian u16 length, the first file, the
//! second): the diff and the budget check of each device against itself, against the file's
//! other devices and against the second file's.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (a, b) = match snapshot::read(data) {
        Ok(a) => (a, None),
        Err(_) => {
            let [hi, lo, rest @ ..] = data else { return };
            let k = (usize::from(*hi) << 8 | usize::from(*lo)).min(rest.len());
            let Ok(a) = snapshot::read(&rest[..k]) else { return };
            (a, snapshot::read(&rest[k..]).ok())
        }
    };
    let seed = data.len() as u8;
    let mine = snapshot_fuzz::profiles(&a.snapshot);
    let theirs = b.map_or_else(Vec::new, |b| snapshot_fuzz::profiles(&b.snapshot));
    for p in &mine {
        for q in mine.iter().chain(&theirs) {
            snapshot_fuzz::compare(p, q, seed);
        }
    }
});
