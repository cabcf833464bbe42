#![no_main]
//! The input fed in chunks whose sizes the fuzzer picks: same result as the whole buffer.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&seed, body)) = data.split_first() else { return };
    let whole = snapshot::read(body);
    let mut l = snapshot::Loader::new(snapshot::Limits::default());
    let chunked = snapshot_fuzz::feed_chunked(&mut l, body, seed).and_then(|()| l.finish());
    match (&whole, &chunked) {
        (Ok(a), Ok(b)) => {
            assert!(snapshot::write::to_pickle_bytes(&a.snapshot) == snapshot::write::to_pickle_bytes(&b.snapshot))
        }
        (Err(_), Err(_)) => {}
        _ => panic!("whole: {:?}, chunked: {:?}", whole.as_ref().err(), chunked.as_ref().err()),
    }
});
