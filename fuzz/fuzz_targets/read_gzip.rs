#![no_main]
//! The input, gzip-compressed: the streamed gzip layer over the VM must agree with the plain read.
use std::io::Write as _;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).unwrap();
    let gz = enc.finish().unwrap();
    let plain = snapshot::read(data);
    let zipped = snapshot::read(&gz);
    if let (Ok(a), Ok(b)) = (&plain, &zipped) {
        assert!(snapshot::write::to_pickle_bytes(&a.snapshot) == snapshot::write::to_pickle_bytes(&b.snapshot));
        snapshot_fuzz::exercise(b);
    }
    if data.first() == Some(&0x80) {
        assert_eq!(plain.is_ok(), zipped.is_ok(), "gzip changed whether a pickle reads");
    }
});
