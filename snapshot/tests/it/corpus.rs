use snapshot::state::{merged_events, StateIndex};
use snapshot::timeline::{LodQuery, Timeline, TimelineKind};
use snapshot::{read, write, Limits, Loader};

use crate::Rng;

fn read_in_chunks(bytes: &[u8], mut size: impl FnMut() -> usize) -> snapshot::Loaded {
    let mut l = Loader::new(Limits::default());
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = size().clamp(1, rest.len());
        l.feed(&rest[..n]).unwrap();
        rest = &rest[n..];
    }
    assert_eq!(l.bytes_consumed(), bytes.len() as u64);
    l.finish().unwrap()
}

/// Also the differential test of the reader's trace-entry fast path: fed one byte at a time,
/// the VM almost never holds a whole entry, so it reads everything opcode by opcode.
#[test]
fn whole_buffer_one_byte_chunks_and_random_chunks_give_the_same_model() {
    let mut rng = Rng(7);
    let synth = snapshot::synth::generate(&snapshot::synth::Options {
        target_entries: 20_000,
        devices: 2,
        oom: true,
        ..Default::default()
    });
    let mut files = testkit::files();
    files.push(("synth (2 devices, oom)".into(), write::to_pickle_bytes(&synth)));
    for (name, bytes) in files {
        let whole = write::to_pickle_bytes(&read(&bytes).unwrap().snapshot);
        let random = read_in_chunks(&bytes, || rng.below(70_000) as usize + 1);
        assert!(write::to_pickle_bytes(&random.snapshot) == whole, "{name}: random chunks differ");
        let ones = read_in_chunks(&bytes, || 1);
        assert!(write::to_pickle_bytes(&ones.snapshot) == whole, "{name}: 1-byte chunks differ");
    }
}

#[test]
fn writer_output_reads_back_to_the_same_model() {
    for (name, bytes) in testkit::files() {
        let first = write::to_pickle_bytes(&read(&bytes).unwrap().snapshot);
        let again = write::to_pickle_bytes(&read(&first).unwrap().snapshot);
        assert!(first == again, "{name}: {} then {} bytes", first.len(), again.len());
    }
}

/// What the viewer's statistics say a file was, in words (not the enum's debug form, which
/// the page once showed: "Pickle(Some(4))").
#[test]
fn each_format_is_named_in_words() {
    // Protocols 0 and 1 have no PROTO opcode: the reader cannot tell them apart.
    assert_eq!(snapshot::Format::Pickle(None).to_string(), "pickle, protocol 0 or 1");
    assert_eq!(snapshot::Format::Json.to_string(), "JSON");
    let named = |bytes: &[u8]| read(bytes).unwrap().format.to_string();
    let Some(fullstep) = testkit::read_or_skip("pt25-cs336-fullstep-annotations.pickle") else { return };
    assert_eq!(named(&fullstep), "pickle, protocol 4");
    let Some(html) = testkit::read_or_skip("pt25-cs336-bf16-forward.html") else { return };
    assert_eq!(named(&html), "pickle, protocol 4, inside a PyTorch HTML page");
    let Some(tiny) = testkit::read_or_skip("pt24-linear-tiny.pkl") else { return };
    let gz = {
        use std::io::Write as _;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&tiny).unwrap();
        enc.finish().unwrap()
    };
    assert_eq!(named(&gz), "pickle, protocol 4, gzip-compressed");
    let zst = ruzstd::encoding::compress_to_vec(&tiny[..], ruzstd::encoding::CompressionLevel::Fastest);
    assert_eq!(named(&zst), "pickle, protocol 4, zstd-compressed");
}

#[test]
fn gzip_input_gives_the_same_model() {
    use std::io::Write as _;
    for (name, bytes) in testkit::files().into_iter().filter(|(n, _)| n.ends_with(".pickle")).take(6) {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&bytes).unwrap();
        let gz = enc.finish().unwrap();
        let a = read_in_chunks(&gz, || 4093);
        assert!(matches!(a.format, snapshot::Format::Gzip(_)), "{name}");
        assert_eq!(
            write::to_pickle_bytes(&a.snapshot),
            write::to_pickle_bytes(&read(&bytes).unwrap().snapshot),
            "{name}"
        );
    }
}

#[test]
fn zstd_input_gives_the_same_model() {
    for (name, bytes) in testkit::files().into_iter().filter(|(n, _)| n.ends_with(".pickle")).take(4) {
        let zst = ruzstd::encoding::compress_to_vec(&bytes[..], ruzstd::encoding::CompressionLevel::Fastest);
        let a = read_in_chunks(&zst, || 10_007);
        assert!(matches!(a.format, snapshot::Format::Zstd(_)), "{name}");
        let b = read(&bytes).unwrap();
        assert!(write::to_pickle_bytes(&a.snapshot) == write::to_pickle_bytes(&b.snapshot), "{name}");
    }
}

/// The "Allocator State History" figures: reserved and allocated after sampled events.
#[test]
fn allocator_state_after_any_event_equals_pytorch_state_history() {
    let mut checked = 0;
    for (name, bytes) in testkit::files() {
        let exp = testkit::expected(&name);
        let Some(devices) = exp["memoryviz"]["devices"].as_object() else { continue };
        let snap = read(&bytes).unwrap().snapshot;
        for (dev, d) in devices {
            let dev: usize = dev.parse().unwrap();
            let h = &d["allocator_state_history"];
            let index = StateIndex::build(&snap, dev);
            let events = merged_events(snap.trace(dev));
            assert_eq!(events.len() as u64, h["events_after_elision"].as_u64().unwrap(), "{name}");
            let mut samples: Vec<&serde_json::Value> = h["samples"].as_array().unwrap().iter().collect();
            samples.push(&h["on_load"]);
            for s in samples {
                let idx = s["idx"].as_u64().unwrap() as usize;
                let entry = events.get(idx).map(|&e| e as usize);
                let st = index.state_after(&snap, entry);
                assert_eq!(st.reserved_bytes, s["reserved"].as_u64().unwrap(), "{name} dev {dev} idx {idx}");
                assert_eq!(st.allocated_bytes, s["allocated"].as_u64().unwrap(), "{name} dev {dev} idx {idx}");
                let blocks: u64 = st.segments.iter().flat_map(|s| &s.blocks).map(|b| b.requested_size).sum();
                assert_eq!(blocks + st.orphan_blocks.iter().map(|b| b.requested_size).sum::<u64>(), st.allocated_bytes);
                checked += 1;
            }
            // Peaks over every event, from the per-entry totals.
            let totals = snapshot::state::totals(&snap, dev);
            if !events.is_empty() {
                let per_event: Vec<(u64, u64)> = events.iter().map(|&e| totals[e as usize]).collect();
                let all = &h["all_events"];
                let max_r = per_event.iter().map(|t| t.0).max().unwrap();
                let max_a = per_event.iter().map(|t| t.1).max().unwrap();
                assert_eq!(max_r, all["peak_reserved"]["reserved"].as_u64().unwrap(), "{name}");
                assert_eq!(max_a, all["peak_allocated"]["allocated"].as_u64().unwrap(), "{name}");
            }
        }
    }
    assert!(checked > testkit::if_full(50, 30), "{checked}");
}

#[test]
fn the_bytes_no_step_changes_lie_under_every_windows_baseline() {
    // What a file's first view guesses its baseline from: never above a window's stable
    // bytes (every element drawn on its own, so no blend straddles the line), nor above the
    // lowest total.
    let mut above_zero = 0;
    for (name, bytes) in testkit::files() {
        let snap = read(&bytes).unwrap().snapshot;
        for d in snap.devices() {
            for kind in [TimelineKind::Blocks, TimelineKind::Segments] {
                let t = Timeline::build(&snap, d, kind);
                let n = f64::from(t.n_steps());
                let lasting = t.lasting_bytes();
                assert!(t.totals().iter().all(|&x| x >= lasting), "{name} device {d} {kind:?}");
                for (a, b) in [(0.0, n), (0.0, n / 2.0), (n / 3.0, n), (n * 0.4, n * 0.45)] {
                    let lod = t.lod(&LodQuery { start: a, end: b, columns: 700, min_bytes: 1 });
                    assert!(lod.stable_bytes >= lasting, "{name} device {d} {kind:?} {a}..{b}");
                }
                above_zero += usize::from(lasting > 0);
            }
        }
    }
    assert!(above_zero > 10, "{above_zero} timelines with lasting bytes");
}

#[test]
fn level_of_detail_bands_stack_every_live_element_in_order() {
    use snapshot::timeline::colour;
    for (name, bytes) in testkit::files() {
        let snap = read(&bytes).unwrap().snapshot;
        for d in snap.devices() {
            let t = Timeline::build(&snap, d, TimelineKind::Blocks);
            let n = f64::from(t.n_steps());
            let peak = t.peak_bytes();
            let min_bytes = (peak / 400).max(1);
            let lod = t.lod(&LodQuery { start: 0.0, end: n, columns: 1500, min_bytes });
            assert_eq!(lod.columns.len(), 1500);
            let col_max = lod.columns.iter().map(|c| c.total_bytes).max().unwrap();
            assert_eq!(col_max, *t.totals().iter().max().unwrap(), "{name}: the peak column is drawn");
            assert!(lod.bands.iter().all(|b| b.first_column <= b.last_column && b.size_bytes > 0));
            let els = t.elements();
            // Every 29th column and the peak's (each check lists the step's live elements).
            let peak_col = lod.columns.iter().position(|c| c.total_bytes == col_max).unwrap();
            let checked = lod.columns.iter().enumerate().filter(|(ci, _)| ci % 29 == 0 || *ci == peak_col);
            for (ci, c) in checked {
                let bands = Timeline::bands_in_column(&lod, ci as u32);
                let drawn: u64 = bands.iter().map(|b| b.size_bytes).sum();
                assert_eq!(drawn, c.drawn_bytes, "{name} column {ci}");
                assert_eq!(drawn, c.total_bytes, "{name} step {}: nothing is left to summarize", c.step);
                assert_eq!(c.summarized_bytes, 0);
                // Every element alive at the sampled step, in stacking order: the large ones
                // as bands of their own, each run of small ones as one blend of their
                // colours weighted by bytes; no gaps.
                let mut expect: Vec<(Option<u32>, u64, u32)> = Vec::new();
                let mut run = (0u64, [0u128; 3]);
                let flush = |run: &mut (u64, [u128; 3]), expect: &mut Vec<(Option<u32>, u64, u32)>| {
                    if run.0 > 0 {
                        let b = u128::from(run.0);
                        let ch = |k: usize| ((run.1[k] + b / 2) / b) as u32;
                        expect.push((None, run.0, ch(0) << 16 | ch(1) << 8 | ch(2)));
                    }
                    *run = (0, [0; 3]);
                };
                for id in t.live_at(c.step, 1) {
                    let e = &els[id as usize];
                    let rgb = colour(e.order);
                    if e.size >= min_bytes {
                        flush(&mut run, &mut expect);
                        expect.push((Some(id), e.size, rgb));
                    } else {
                        run.0 += e.size;
                        for (k, sh) in [16, 8, 0].into_iter().enumerate() {
                            run.1[k] += u128::from(e.size) * u128::from((rgb >> sh) & 255);
                        }
                    }
                }
                flush(&mut run, &mut expect);
                let got: Vec<(Option<u32>, u64, u32)> =
                    bands.iter().map(|b| (b.element, b.size_bytes, b.rgb)).collect();
                assert_eq!(got, expect, "{name} column {ci}");
                let mut off = 0;
                for b in &bands {
                    assert_eq!(b.offset_bytes, off);
                    if let Some(e) = b.element {
                        assert_eq!(t.element_at(c.step, off), Some(e));
                        assert_eq!(t.element_at(c.step, off + b.size_bytes - 1), Some(e));
                    }
                    off += b.size_bytes;
                }
                assert_eq!(t.element_at(c.step, off), None, "{name}: nothing above the top");
            }
            // What lies below `stable_bytes` is the same in every column.
            assert!(lod.stable_bytes <= lod.columns.iter().map(|c| c.total_bytes).min().unwrap());
            for b in lod.bands.iter().filter(|b| b.offset_bytes + b.size_bytes <= lod.stable_bytes) {
                assert_eq!((b.first_column, b.last_column), (0, 1499), "{name}: {b:?} below {}", lod.stable_bytes);
            }
            // Zoomed in beyond one step per pixel, every column shows a real step.
            let zoom = t.lod(&LodQuery { start: 0.0, end: n.min(10.0), columns: 100, min_bytes });
            assert!(zoom.columns.iter().all(|c| f64::from(c.step) < n));
        }
    }
}

/// serde-pickle is correct where the pickle shares no containers: use it as an independent
/// oracle there (on real snapshots it fails with "recursive structure", which is why the
/// reader is our own).
#[test]
fn serde_pickle_agrees_where_it_can_read_the_file() {
    use serde_pickle::{DeOptions, HashableValue as H, Value as V};
    fn get<'a>(d: &'a V, k: &str) -> Option<&'a V> {
        match d {
            V::Dict(m) => m.get(&H::String(k.into())),
            _ => None,
        }
    }
    fn int(v: Option<&V>) -> u64 {
        match v {
            Some(V::I64(i)) => *i as u64,
            Some(V::Int(b)) => b.to_string().parse().unwrap(),
            _ => 0,
        }
    }
    let mut read_ok = 0;
    let mut refused = 0;
    for (name, bytes) in testkit::files().into_iter().filter(|(n, _)| !n.ends_with(".html")) {
        // Plain serde-pickle refuses files whose frame dicts and lists are shared...
        if serde_pickle::value_from_slice(&bytes, DeOptions::new()).is_err() {
            refused += 1;
        }
        // ...and with this option it reads them but replaces shared objects by None, so
        // only figures that do not depend on frames are compared.
        let Ok(v) = serde_pickle::value_from_slice(&bytes, DeOptions::new().replace_recursive_structures()) else {
            continue;
        };
        let segs = match &v {
            V::List(l) => l.clone(),
            d => match get(d, "segments") {
                Some(V::List(l)) => l.clone(),
                _ => vec![],
            },
        };
        let reserved: u64 = segs.iter().map(|s| int(get(s, "total_size"))).sum();
        let n_entries: Vec<usize> = match get(&v, "device_traces") {
            Some(V::List(ds)) => ds.iter().map(|d| if let V::List(e) = d { e.len() } else { 0 }).collect(),
            _ => vec![],
        };
        let ours = read(&bytes).unwrap().snapshot;
        let s = snapshot::stats::summary(&ours);
        assert_eq!(s.total_reserved, reserved, "{name}");
        assert_eq!(s.segments as usize, segs.len(), "{name}");
        let our_entries: Vec<usize> = (0..ours.n_trace_lists()).map(|d| ours.trace(d).len()).collect();
        assert_eq!(our_entries, n_entries, "{name}");
        read_ok += 1;
    }
    assert!(read_ok >= 3, "serde-pickle read only {read_ok} files");
    assert!(
        refused >= testkit::if_full(10, 5),
        "serde-pickle refused only {refused} files: has it learnt shared objects?"
    );
    eprintln!(
        "serde-pickle compared on {read_ok} corpus files; {refused} refused without replace_recursive_structures"
    );
}

#[test]
fn generated_snapshots_survive_read_and_write_byte_for_byte() {
    for (devices, oom) in [(1, false), (3, true)] {
        let opts = snapshot::synth::Options { target_entries: 30_000, devices, oom, seed: 42, ..Default::default() };
        let snap = snapshot::synth::generate(&opts);
        let bytes = write::to_pickle_bytes(&snap);
        let back = read(&bytes).unwrap();
        assert!(back.warnings.is_empty(), "{:?}", back.warnings);
        let again = write::to_pickle_bytes(&back.snapshot);
        assert!(again == bytes, "{devices} devices: {} bytes written back, {} generated", again.len(), bytes.len());
        let s = snapshot::stats::summary(&back.snapshot);
        assert_eq!(s.devices.len(), devices);
        let t = back.snapshot.trace(0);
        assert_eq!((0..t.len()).any(|i| t.action(i) == snapshot::Action::Oom), oom);
        // Frees pending on another stream are in the final state.
        let pending = back
            .snapshot
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == snapshot::BlockState::ActivePendingFree)
            .count();
        assert_eq!(pending, devices);
    }
}
