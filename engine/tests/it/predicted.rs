//! A file `memscape predict` made (testdata/predict) says so in its load, through postcard as
//! the worker sends it to the page, which shows it as a warning; a recording says nothing of
//! the kind.

use std::path::Path;

use engine::Engine;

use super::open;

/// Through postcard, as the worker sends it.
fn wire<T: serde::Serialize + serde::de::DeserializeOwned>(v: &T) -> T {
    postcard::from_bytes(&postcard::to_allocvec(v).unwrap()).unwrap()
}

#[test]
fn a_predicted_file_says_what_it_predicts_and_a_recording_does_not() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/predict/mlp.pickle");
    let bytes = std::fs::read(path).unwrap();
    let mut e = Engine::default();
    let info = wire(&open(&mut e, "mlp.pickle", &bytes, 4096).unwrap());
    let p = info.summary.prediction.as_ref().expect("the load says it was predicted");
    assert_eq!(p.gpu, "NVIDIA H100 80GB HBM3");
    assert!(!p.torch.is_empty());
    assert!(p.command.iter().any(|c| c.ends_with("mlp.py")), "{:?}", p.command);
    assert_eq!(p.incomplete, None, "the program ran to its end");
    assert!(!p.assumptions.is_empty());
    assert!(p.describe().contains("NVIDIA H100 80GB HBM3"));
    assert!(info.summary.profiler.is_none());
    assert!(info.default_device.is_some(), "it opens on its GPU like a recording");

    // Recordings: the example, and the corpus's recordings at hand.
    let mut recordings = vec![("cs336-fullstep.pickle".to_string(), testkit::example("cs336-fullstep.pickle"))];
    for name in ["pt25-cs336-fullstep-annotations.pickle", "pt21-llama-cppframes-multistream.pickle"] {
        if let Some(b) = testkit::read_or_skip(name) {
            recordings.push((name.to_string(), b));
        }
    }
    for (name, bytes) in recordings {
        let info = wire(&open(&mut e, &name, &bytes, 1 << 20).unwrap());
        assert_eq!(info.summary.prediction, None, "{name} was recorded");
    }
}
