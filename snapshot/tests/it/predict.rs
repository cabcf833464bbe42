//! The predictor (`snapshot::predict`): allocations placed as PyTorch's caching allocator
//! places them, the figures a program asks for, the trace kept while recording, PyTorch's
//! out-of-memory error under a limit, and a snapshot that every analysis reads back as a
//! prediction.

use snapshot::predict::{PredictionInfo, Predictor};
use snapshot::Action;

const MIB: u64 = 1 << 20;

fn predictor(limit: Option<u64>) -> Predictor {
    let info = PredictionInfo {
        gpu: "NVIDIA A100-SXM4-80GB".into(),
        memory_bytes: limit.unwrap_or(80 << 30),
        limited: limit.is_some(),
        torch: "2.15.0".into(),
        command: vec!["train.py".into()],
        ..Default::default()
    };
    let mut p = Predictor::new(info, "").unwrap();
    p.frame("train.py", 12, "main");
    p.frame("model.py", 40, "forward");
    p.stack(&[]).unwrap();
    p.stack(&[1, 0]).unwrap();
    p.stack(&[0]).unwrap();
    p
}

/// Sizes round to 512 bytes; small requests share a 2 MiB segment, a 5 MiB one gets a 20 MiB
/// segment, and a freed block is reused without asking the device again.
#[test]
fn allocations_are_placed_as_the_caching_allocator_places_them() {
    let mut p = predictor(None);
    p.alloc(1, 1000, 0, 1, 10).unwrap();
    p.alloc(2, 3000, 0, 1, 11).unwrap();
    let f = p.figures();
    assert_eq!((f.allocated, f.requested, f.reserved), (1024 + 3072, 4000, 2 * MIB));
    p.alloc(3, 5 * MIB, 0, 1, 12).unwrap();
    assert_eq!(p.figures().reserved, 22 * MIB);
    p.free(3, Some(2), 13).unwrap();
    p.alloc(4, 4 * MIB, 0, 1, 14).unwrap();
    let f = p.figures();
    assert_eq!(f.reserved, 22 * MIB, "the 20 MiB segment's free block serves the next large request");
    assert_eq!(f.peak_allocated, 1024 + 3072 + 5 * MIB);
    assert_eq!((f.allocations, f.segments_allocated, f.segments_freed), (4, 2, 0));
    p.reset_peak();
    assert_eq!(p.figures().peak_allocated, p.figures().allocated);
    p.empty_cache(15);
    assert_eq!(p.figures().reserved, 22 * MIB, "no segment is wholly free");
    p.free(4, None, 16).unwrap();
    p.empty_cache(17);
    assert_eq!(p.figures().reserved, 2 * MIB);
    assert_eq!(p.figures().segments_freed, 1);
}

/// Only what happens while recording is in the trace; blocks allocated before keep no
/// frames, as PyTorch's do; frees carry the stack where they happened; the trace keeps its
/// last `max_entries`.
#[test]
fn the_trace_holds_what_happened_while_recording() {
    let mut p = predictor(None);
    p.alloc(1, 4096, 0, 1, 1).unwrap();
    p.history(true, 1000);
    p.alloc(2, 8192, 0, 1, 2).unwrap();
    p.free(2, Some(2), 3).unwrap();
    p.annotate("START", "Optimizer.step#AdamW.step", 4);
    p.free(1, Some(2), 5).unwrap();
    let snap = p.snapshot();
    let t = snap.trace(0);
    let actions: Vec<Action> = (0..t.len()).map(|i| t.action(i)).collect();
    use Action::*;
    assert_eq!(actions, [Alloc, FreeRequested, FreeCompleted, FreeRequested, FreeCompleted]);
    let names = |i: usize| snap.stack(t.frames(i).unwrap()).map(|f| snap.str(f.name).to_string()).collect::<Vec<_>>();
    assert_eq!(names(0), ["forward", "main"]);
    assert_eq!(names(1), ["main"], "a free carries where it happened");
    assert_eq!(t.time_us(0), Some(2));
    let anns = snap.external_annotations.as_ref().unwrap();
    assert_eq!(anns.len(), 1);
    assert_eq!(snap.str(anns[0].name), "Optimizer.step#AdamW.step");
    p.history(false, 0);
    p.alloc(3, 512, 0, 1, 6).unwrap();
    let snap = p.snapshot();
    assert!(snap.trace(0).is_empty(), "stopping forgets what was recorded, as PyTorch does");
    assert!(snap.external_annotations.as_ref().unwrap().is_empty());
    let live: Vec<_> = snap.segments.iter().flat_map(|s| &s.blocks).filter(|b| b.requested_size != Some(0)).collect();
    assert_eq!(live.len(), 1);
    assert!(snap.stack(live[0].frames.unwrap()).next().is_none(), "allocated while not recording: no frames");

    let mut p = predictor(None);
    p.history(true, 3);
    for i in 0..4 {
        p.alloc(i, 512, 0, 1, i as i64).unwrap();
    }
    let snap = p.snapshot();
    assert_eq!(snap.trace(0).len(), 3, "the ring buffer keeps the last max_entries");
    assert_eq!(snap.trace(0).time_us(0), Some(1));
}

/// Past the limit (less the CUDA context), the allocation fails with PyTorch's message and
/// the trace ends with an `oom` entry saying what the device had free.
#[test]
fn past_the_memory_limit_an_allocation_fails_as_pytorch_fails() {
    let mut p = predictor(Some(1 << 30));
    p.history(true, 1000);
    p.alloc(1, 300 * MIB, 0, 1, 1).unwrap();
    let err = p.alloc(2, 400 * MIB, 0, 1, 2).unwrap_err();
    assert!(
        err.starts_with("CUDA out of memory. Tried to allocate 400.00 MiB. GPU 0 has a total capacity of 1.00 GiB"),
        "{err}"
    );
    assert!(err.contains("of which 212.00 MiB is free"), "{err}");
    let f = p.figures();
    assert_eq!((f.ooms, f.allocated), (1, 300 * MIB));
    let snap = p.snapshot();
    let t = snap.trace(0);
    let last = t.len() - 1;
    assert_eq!(t.action(last), Action::Oom);
    assert_eq!(t.device_free(last), Some(212 * MIB));
    let tl = snapshot::timeline::Timeline::build(&snap, 0, snapshot::timeline::TimelineKind::Blocks);
    let cats = snapshot::categories::analyze(&snap, &tl, &Default::default());
    let index = snapshot::state::StateIndex::build(&snap, 0);
    let report = snapshot::doctor::diagnose(&snap, &tl, &cats, &index);
    assert_eq!(report.ooms.len(), 1, "the doctor explains the predicted error");
    assert_eq!(report.ooms[0].requested_bytes, 400 * MIB);
}

/// `set_per_process_memory_fraction`: a limit from then on, at that share of the GPU.
#[test]
fn a_memory_fraction_limits_what_may_be_reserved() {
    let mut p = predictor(None);
    p.alloc(1, 30 << 30, 0, 1, 1).unwrap();
    assert!(!p.limited());
    p.set_fraction(0.5).unwrap();
    assert!(p.limited());
    let err = p.alloc(2, 20 << 30, 0, 1, 2).unwrap_err();
    assert!(err.starts_with("CUDA out of memory. Tried to allocate 20.00 GiB."), "{err}");
    p.alloc(3, 5 << 30, 0, 1, 3).unwrap();
    assert!(p.set_fraction(1.5).is_err());
}

/// The snapshot reads back, through PyTorch's pickle format, as a prediction with the same
/// figures: the peak the program was told is the recorded timeline's.
#[test]
fn a_prediction_reads_back_as_a_prediction() {
    let mut p = predictor(None);
    p.history(true, 1000);
    p.alloc(1, 10 * MIB, 0, 1, 1).unwrap();
    p.alloc(2, 30 * MIB, 0, 1, 2).unwrap();
    p.free(1, Some(2), 3).unwrap();
    p.incomplete("UnsupportedOperatorException at train.py:12: aten.nonzero.default");
    let bytes = snapshot::write::to_pickle_bytes(&p.snapshot());
    let back = snapshot::read(&bytes).unwrap();
    assert!(back.warnings.is_empty(), "{:?}", back.warnings);
    let info = back.snapshot.prediction_info().unwrap();
    assert_eq!(info.gpu, "NVIDIA A100-SXM4-80GB");
    assert_eq!(info.incomplete.as_deref(), Some("UnsupportedOperatorException at train.py:12: aten.nonzero.default"));
    assert!(info.assumptions.iter().any(|a| a.contains("CUDA context")));
    assert!(info.describe().contains("INCOMPLETE"));
    let s = snapshot::stats::summary(&back.snapshot);
    assert_eq!(s.prediction.as_ref(), Some(&info));
    assert_eq!(s.devices[0].timeline.peak_bytes, 40 * MIB);
    assert_eq!(s.total_reserved, p.figures().reserved);
    assert!(snapshot::read(&snapshot::write::to_pickle_bytes(&snapshot::synth::generate(&Default::default())))
        .unwrap()
        .snapshot
        .prediction_info()
        .is_none());
}

/// Bad messages are refused with a reason, never a panic: a stack naming a frame never sent,
/// an allocation naming a stack never sent, an id allocated twice.
#[test]
fn messages_that_name_what_was_never_sent_are_refused() {
    let mut p = predictor(None);
    assert!(p.stack(&[7]).unwrap_err().contains("frame 7"));
    assert!(p.alloc(1, 512, 0, 99, 0).unwrap_err().contains("stack 99"));
    p.alloc(1, 512, 0, 1, 0).unwrap();
    assert!(p.alloc(1, 512, 0, 1, 0).unwrap_err().contains("already alive"));
    p.free(42, None, 0).unwrap();
    assert!(Predictor::new(PredictionInfo::default(), "max_split_size_mb:x").is_err());
}
