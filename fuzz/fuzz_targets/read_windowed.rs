#![no_main]
//! The input read as a window (each trace's last 1 to 16 entries, as the page reads a file too
//! large to hold), fed in chunks whose sizes the fuzzer picks: no panic, an error says where,
//! each trace keeps at most its window, and when the whole input reads too, the window's
//! entries are the whole read's last ones.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&seed, body)) = data.split_first() else { return };
    let n = u64::from(seed % 16) + 1;
    let mut l = snapshot::Loader::new(snapshot::Limits { keep_last_entries: Some(n), ..Default::default() });
    l.set_size_hint(body.len() as u64);
    let windowed = match snapshot_fuzz::feed_chunked(&mut l, body, seed).and_then(|()| l.finish()) {
        Ok(w) => w,
        Err(e) => {
            assert!(e.offset.is_some() || e.path.is_some() || e.kind == snapshot::ErrorKind::NotASnapshot, "{e}");
            return;
        }
    };
    let w = &windowed.snapshot;
    for d in 0..w.n_trace_lists() {
        assert!(w.trace(d).len() as u64 <= n, "device {d} keeps {} entries of a window of {n}", w.trace(d).len());
    }
    if let Ok(whole) = snapshot::read(body) {
        let s = &whole.snapshot;
        assert_eq!(s.n_trace_lists(), w.n_trace_lists());
        for d in 0..s.n_trace_lists() {
            let (a, b) = (s.trace(d), w.trace(d));
            let from = a.len().saturating_sub(n as usize);
            assert_eq!(b.len(), a.len() - from, "device {d}");
            for i in 0..b.len() {
                assert_eq!(a.entry(from + i), b.entry(i), "device {d}, entry {}", from + i);
            }
        }
    }
    snapshot_fuzz::exercise(&windowed);
});
