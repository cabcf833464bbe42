//! Bad input never panics or hangs: it gives an error that says what and where.

use std::io::Write;

use snapshot::{read, ErrorKind, Limits, Loader, ReadError};

use crate::Rng;

#[track_caller]
fn fails(bytes: &[u8], kind: ErrorKind) -> ReadError {
    match read(bytes) {
        Ok(_) => panic!("expected a {kind:?} error, got a snapshot"),
        Err(e) => {
            assert_eq!(e.kind, kind, "{e}");
            assert!(!e.to_string().is_empty());
            e
        }
    }
}

fn pickle(body: &[u8]) -> Vec<u8> {
    let mut v = vec![0x80, 4];
    v.extend_from_slice(body);
    v
}

#[test]
fn every_truncation_of_small_corpus_files_is_an_error_with_an_offset() {
    for (name, stride) in [
        ("pt21-gpt2-cuda1-nohistory.pickle", 1),
        ("pt24-linear-tiny.pkl", 3),
        ("pt25plus-expandable-2gpu-tiny-nohistory.pickle", 1),
    ] {
        let Some(bytes) = testkit::read_or_skip(name) else { continue };
        for cut in (0..bytes.len() - 1).step_by(stride) {
            let e = read(&bytes[..cut]).expect_err(name);
            assert!(matches!(e.kind, ErrorKind::Truncated | ErrorKind::NotASnapshot), "{name} cut at {cut}: {e}");
            if cut > 0 {
                assert_eq!(e.offset, Some(cut as u64), "{name} cut at {cut}: {e}");
            }
        }
    }
}

#[test]
fn random_mutations_never_panic_and_errors_say_where() {
    let mut rng = Rng(0x5eed);
    for name in ["pt24-linear-tiny.pkl", "pt21-gpt2-cuda1-nohistory.pickle", "pt25-cs336-bf16-forward.html"] {
        let Some(orig) = testkit::read_or_skip(name) else { continue };
        for round in 0..600 {
            let mut b = orig.clone();
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(b.len() as u64) as usize;
                b[i] = rng.next_u64() as u8;
            }
            if round % 5 == 0 {
                let i = rng.below(b.len() as u64) as usize;
                b.truncate(i.max(1));
            }
            if let Err(e) = read(&b) {
                assert!(e.offset.is_some() || e.path.is_some(), "{name} round {round}: {e}");
            }
        }
    }
}

#[test]
fn empty_and_foreign_files_are_not_snapshots() {
    assert!(fails(b"", ErrorKind::NotASnapshot).to_string().contains("empty"));
    assert!(fails(b"  \n\t", ErrorKind::NotASnapshot).to_string().contains("whitespace"));
    assert!(fails(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", ErrorKind::NotASnapshot).to_string().contains("PNG"));
    assert!(fails(b"PK\x03\x04\x14\0\0\0", ErrorKind::NotASnapshot).to_string().contains("zip"));
    fails(b"hello world", ErrorKind::NotASnapshot);
    fails(b"<html><body>nothing here</body></html>", ErrorKind::NotASnapshot);
    fails(b"\x28\xb5\x2f\xfd\0\0", ErrorKind::Malformed);
    // Valid JSON or pickles that are not snapshots.
    fails(b"{\"a\": 1}", ErrorKind::Schema);
    fails(b"[1, 2, 3]", ErrorKind::Schema);
    fails(b"{\"segments\": [1]", ErrorKind::Malformed);
    fails(&pickle(b"K\x05."), ErrorKind::Schema);
    let e = fails(b"\x1f\x8b\x08\0\0\0\0\0\0\xff\x01\x02", ErrorKind::Malformed);
    assert!(e.to_string().contains("gzip"), "{e}");
}

#[test]
fn code_opcodes_are_refused_before_anything_runs() {
    // The classic `os.system('echo pwned')` gadget, protocols 0 and 4.
    let p0 = b"cos\nsystem\n(S'echo pwned'\ntR.";
    let e = fails(p0, ErrorKind::Code);
    assert_eq!(e.offset, Some(0));
    assert!(e.to_string().contains("GLOBAL"), "{e}");
    let p4 = pickle(b"\x8c\x02os\x94\x8c\x06system\x94\x93\x94\x8c\x0becho pwned\x94\x85\x94R\x94.");
    let e = fails(&p4, ErrorKind::Code);
    assert!(e.to_string().contains("STACK_GLOBAL"), "{e}");
    assert_eq!(e.offset, Some(16));
    for (op, name) in [(b'R', "REDUCE"), (b'b', "BUILD"), (0x81, "NEWOBJ"), (b'Q', "BINPERSID"), (0x82, "EXT1")] {
        let e = fails(&pickle(&[b'}', op, b'.']), ErrorKind::Code);
        assert!(e.to_string().contains(name), "{e}");
        assert_eq!(e.offset, Some(3));
    }
}

#[test]
fn absurd_lengths_are_refused_without_allocating() {
    let mut huge = pickle(&[0x8d]);
    huge.extend_from_slice(&(1u64 << 60).to_le_bytes());
    huge.extend_from_slice(b"abc");
    let e = fails(&huge, ErrorKind::TooLarge);
    assert_eq!(e.offset, Some(2));
    // A length that is in bounds but longer than the file is a truncation.
    let mut short = pickle(b"X");
    short.extend_from_slice(&1000u32.to_le_bytes());
    short.extend_from_slice(b"abc");
    fails(&short, ErrorKind::Truncated);
    let mut long4 = pickle(&[0x8b]);
    long4.extend_from_slice(&i32::MAX.to_le_bytes());
    fails(&long4, ErrorKind::Unsupported);
    // Memo references to nowhere.
    fails(&pickle(b"j\xff\xff\xff\x7f."), ErrorKind::Malformed);
    fails(&pickle(b"h\x09."), ErrorKind::Malformed);
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn read_with(bytes: &[u8], limits: Limits, size_hint: bool) -> Result<snapshot::Loaded, ReadError> {
    let mut l = Loader::new(limits);
    if size_hint {
        l.set_size_hint(bytes.len() as u64);
    }
    for chunk in bytes.chunks(1 << 16) {
        l.feed(chunk)?;
    }
    l.finish()
}

#[test]
fn a_pickle_over_the_size_limit_is_refused_before_reading_or_as_it_decompresses() {
    let Some(bytes) = testkit::read_or_skip("pt24-linear-tiny.pkl") else { return };
    let limits = Limits { max_pickle_bytes: 1000, ..Limits::default() };
    // Its size is known: refused on the first chunk, saying how big it is and the limit.
    let mut l = Loader::new(limits);
    l.set_size_hint(bytes.len() as u64);
    let e = l.feed(&bytes[..64]).expect_err("refused at once");
    assert_eq!(e.kind, ErrorKind::TooLarge);
    let gib = |b: usize| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
    assert!(e.to_string().contains(&gib(bytes.len())) && e.to_string().contains(&gib(1000)), "{e}");
    // Compressed: refused once the decompressed stream passes the limit.
    let e = read_with(&gzip(&bytes), limits, true).expect_err("refused while decompressing");
    assert_eq!(e.kind, ErrorKind::TooLarge, "{e}");
    assert!(e.to_string().contains("decompressed") && e.to_string().contains("gzip payload"), "{e}");
    // Under the limit it reads.
    read_with(&bytes, Limits { max_pickle_bytes: bytes.len() as u64, ..Limits::default() }, true).unwrap();
}

#[test]
fn bombs_stop_at_the_limits_with_an_offset() {
    // 20 million pushes after one MARK (a gzip bomb's payload: 40 MB from 40 kB): the
    // stack's bound stops it, long before memory runs out.
    let mut pushes = pickle(b"](");
    pushes.extend(std::iter::repeat_n(*b"K\x00", 20_000_000).flatten());
    pushes.extend_from_slice(b"e.");
    let packed = gzip(&pushes);
    assert!(packed.len() < pushes.len() / 100);
    let e = read(&packed).expect_err("stack bomb");
    assert_eq!(e.kind, ErrorKind::TooLarge, "{e}");
    assert!(e.to_string().contains("pickle stack") && e.offset.is_some(), "{e}");
    // One APPEND at a time (no batch ever charges more than one item): the memory limit
    // still holds, checked between opcodes.
    let mut appends = pickle(b"]");
    appends.extend(std::iter::repeat_n(*b"K\x00a", 200_000).flatten());
    appends.push(b'.');
    let limits = Limits { max_memory_bytes: 1 << 20, ..Limits::default() };
    let e = read_with(&appends, limits, false).expect_err("append bomb");
    assert_eq!(e.kind, ErrorKind::TooLarge, "{e}");
    assert!(e.to_string().contains("limit 1 MiB"), "{e}");
    // A root list of many non-dicts fails on its first item, not by reserving room for all.
    let mut ints = pickle(b"]");
    for _ in 0..1000 {
        ints.push(b'(');
        ints.extend(std::iter::repeat_n(*b"K\x00", 1000).flatten());
        ints.push(b'e');
    }
    ints.push(b'.');
    let e = fails(&ints, ErrorKind::Schema);
    assert!(e.to_string().contains("[0]"), "{e}");
}

#[test]
fn deep_nesting_and_self_reference_are_errors_not_crashes() {
    // A list nested a million deep as the root.
    let n = 1_000_000;
    let mut deep = pickle(&vec![b']'; n]);
    deep.extend(std::iter::repeat_n(b'a', n - 1));
    deep.push(b'.');
    fails(&deep, ErrorKind::Schema);
    // The same under an unknown key, where values are kept: refused beyond the depth limit.
    let mut under_key = pickle(b"}(\x8c\x08segments]\x8c\x05extra");
    under_key.extend(std::iter::repeat_n(b']', 10_000));
    under_key.extend(std::iter::repeat_n(b'a', 9_999));
    under_key.extend_from_slice(b"u.");
    let e = fails(&under_key, ErrorKind::Schema);
    assert!(e.to_string().contains("extra"), "{e}");
    // A list that contains itself.
    let cyclic = pickle(b"}(\x8c\x08segments]\x8c\x05extra]\x94h\x00au.");
    fails(&cyclic, ErrorKind::Schema);
    // Exponential sharing ("billion laughs"): each level holds the previous one twice.
    let mut laughs = pickle(b"}(\x8c\x08segments]\x8c\x05extraK\x01");
    for _ in 0..64 {
        laughs.extend_from_slice(b"2\x86");
    }
    laughs.extend_from_slice(b"u.");
    fails(&laughs, ErrorKind::Schema);
    // Unbalanced marks and stack underflow.
    fails(&pickle(b"(."), ErrorKind::Malformed);
    fails(&pickle(b"a."), ErrorKind::Malformed);
    fails(&pickle(b"u."), ErrorKind::Malformed);
    fails(&pickle(b"]K\x01s."), ErrorKind::Malformed);
}

#[test]
fn schema_errors_name_the_entry_and_key() {
    let e = fails(
        &pickle(b"}(\x8c\x08segments]\x8c\rdevice_traces](](}(\x8c\x06action\x8c\x05alloc\x8c\x04size\x8c\x03bigueeu."),
        ErrorKind::Schema,
    );
    assert_eq!(e.path.as_deref(), Some("device_traces[0][0]"), "{e}");
    assert!(e.to_string().contains("`size`: expected an int, found str"), "{e}");
    assert!(e.offset.is_some(), "{e}");
    let e = fails(&pickle(b"}(\x8c\x08segments](}(\x8c\x07addressK\x01ueu."), ErrorKind::Schema);
    assert_eq!(e.path.as_deref(), Some("segments[0]"));
    assert!(e.to_string().contains("total_size"), "{e}");
}

#[test]
fn unknown_keys_and_actions_from_newer_versions_are_kept_with_a_warning() {
    let body = b"}(\x8c\x08segments]\x8c\x0cfuture_thingK\x07\x8c\rdevice_traces](](}(\x8c\x06action\x8c\x0bteleport_it\x8c\x04addrK\x10\x8c\x04sizeK\x20\x8c\x05shinyK\x01ueeu.";
    let loaded = read(&pickle(body)).unwrap();
    let w: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
    assert!(w.iter().any(|m| m.contains("future_thing")), "{w:?}");
    assert!(w.iter().any(|m| m.contains("shiny")), "{w:?}");
    assert!(w.iter().any(|m| m.contains("teleport_it")), "{w:?}");
    let t = loaded.snapshot.trace(0);
    assert_eq!(t.len(), 1);
    assert_eq!(t.size(0), 32);
    // And they survive a round trip through the writer.
    let again = read(&snapshot::write::to_pickle_bytes(&loaded.snapshot)).unwrap();
    assert_eq!(again.warnings, loaded.warnings);
}

#[test]
fn protocol_2_and_0_forms_are_read() {
    // Protocol 2 as the TorchScript pickler writes it: BINPUT memo, DICT/LIST/TUPLE with marks.
    let p2 = b"\x80\x02(X\x08\x00\x00\x00segments(lq\x00X\r\x00\x00\x00device_traces(((X\x06\x00\x00\x00actionq\x01X\x05\x00\x00\x00allocX\x04\x00\x00\x00addrK\x10X\x04\x00\x00\x00sizeM\x00\x01X\x06\x00\x00\x00streamK\x00d(h\x01X\x04\x00\x00\x00freeX\x04\x00\x00\x00addrK\x10X\x04\x00\x00\x00sizeM\x00\x01X\x06\x00\x00\x00streamK\x00dllX\x12\x00\x00\x00allocator_settings}d.";
    let l = read(p2).unwrap();
    assert_eq!(l.format, snapshot::Format::Pickle(Some(2)));
    let t = l.snapshot.trace(0);
    assert_eq!((t.len(), t.size(0), t.action(1)), (2, 256, snapshot::Action::Free));
    // Protocol 0: text opcodes.
    let p0 = b"(dp0\nVsegments\np1\n(lp2\nsVdevice_traces\np3\n(lp4\ns.";
    let l = read(p0).unwrap();
    assert_eq!(l.snapshot.n_trace_lists(), 0);
}

/// Inputs the fuzzer found (`fuzz/regressions/`): each must read, and our own pickle of it must
/// read back to a fixpoint.
#[test]
fn fuzz_regressions_read_and_round_trip() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.display().to_string();
        let Ok(loaded) = read(&std::fs::read(&path).unwrap()) else { continue };
        let once = snapshot::write::to_pickle_bytes(&loaded.snapshot);
        let back = read(&once).unwrap_or_else(|e| panic!("{name}: our own pickle does not read back: {e}"));
        let twice = snapshot::write::to_pickle_bytes(&back.snapshot);
        let again = read(&twice).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(snapshot::write::to_pickle_bytes(&again.snapshot) == twice, "{name}: no fixpoint");
        n += 1;
    }
    assert!(n >= 2, "{n} regression inputs read");
}

#[test]
fn a_flood_of_leading_whitespace_stops_after_one_mebibyte() {
    // The format is chosen from the first bytes after any whitespace (JSON may start with
    // some); a gzip of nothing but spaces used to be buffered and searched again at every
    // 32 KiB it decompressed to.
    let spaces = vec![b' '; 64 << 20];
    let e = read_with(&gzip(&spaces), Limits::default(), true).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotASnapshot, "{e}");
    assert!(e.to_string().contains("1 MiB of whitespace"), "{e}");
    assert!(e.offset.unwrap_or(0) <= 2 << 20, "stopped early: {e}");
    // Some whitespace before a JSON snapshot is fine.
    let json = [b"\n\n   ".as_slice(), br#"{"segments": [], "device_traces": []}"#].concat();
    assert!(read(&json).is_ok());
}

/// A `TooLarge` error says which limit it hit: the viewer sends a user to the command line
/// only for a snapshot that is simply big, never for a hostile shape.
#[test]
fn a_too_large_error_says_whether_the_snapshot_is_big_or_hostile() {
    use snapshot::Bound;
    let Some(bytes) = testkit::read_or_skip("pt24-linear-tiny.pkl") else { return };
    // Big: over the size limit, known up front or found while decompressing; over the memory limit.
    let mut l = Loader::new(Limits { max_pickle_bytes: 1000, ..Limits::default() });
    l.set_size_hint(bytes.len() as u64);
    assert_eq!(l.feed(&bytes).expect_err("too big").bound, Some(Bound::Size));
    let e = read_with(&gzip(&bytes), Limits { max_pickle_bytes: 1000, ..Limits::default() }, true).unwrap_err();
    assert_eq!((e.kind, e.bound), (ErrorKind::TooLarge, Some(Bound::Size)), "{e}");
    let e = read_with(&bytes, Limits { max_memory_bytes: 1 << 10, ..Limits::default() }, false).unwrap_err();
    assert_eq!((e.kind, e.bound), (ErrorKind::TooLarge, Some(Bound::Size)), "{e}");
    // Hostile: a length no snapshot has.
    let mut huge = pickle(&[0x8d]);
    huge.extend_from_slice(&(1u64 << 60).to_le_bytes());
    let e = fails(&huge, ErrorKind::TooLarge);
    assert_eq!(e.bound, Some(Bound::Shape), "{e}");
    // Other kinds have no bound.
    assert_eq!(fails(&pickle(b"j\xff\xff\xff\x7f."), ErrorKind::Malformed).bound, None);
}

#[test]
fn a_container_inside_another_is_refused_saying_where() {
    // A zstd frame (one raw block) whose payload is a zstd frame's magic number: the fuzzer's
    // `read_windowed` found this error without a place.
    let zstd_in_zstd = [0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x04, 0x21, 0x00, 0x00, 0x28, 0xb5, 0x2f, 0xfd];
    let gzip_in_gzip = gzip(&gzip(b"(dp0\n."));
    for (what, bytes) in [("zstd inside another container", zstd_in_zstd.to_vec()), ("gzip inside gzip", gzip_in_gzip)]
    {
        let windowed = Limits { keep_last_entries: Some(5), ..Limits::default() };
        for e in [read(&bytes).unwrap_err(), read_with(&bytes, windowed, true).unwrap_err()] {
            assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
            assert_eq!(e.offset, Some(0), "{e}");
            assert!(e.to_string().contains(what) && e.to_string().contains("payload"), "{e}");
        }
    }
}
