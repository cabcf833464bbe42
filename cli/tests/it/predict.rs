//! `memscape predict`: the server the program's Python talks to (one JSON message a line),
//! driven here as that Python drives it; and the command's refusals. The whole path, a real
//! PyTorch program under prediction, is `python/tests/test_predict.py` (it needs torch).

use std::io::Write as _;
use std::process::{Command, Stdio};

use super::memscape;

/// What `memscape predict --serve` answers to `lines`, and its exit status.
fn serve(info: &str, lines: &[String]) -> (String, std::process::ExitStatus) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_memscape"))
        .args(["predict", "--serve", info])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    (String::from_utf8(out.stdout).unwrap(), out.status)
}

/// A forward pass as the program's side sends it: frames, stacks, allocations and frees,
/// the figures asked for, a snapshot dumped where the program asked.
#[test]
fn the_server_places_allocations_answers_and_writes_the_snapshot_asked_for() {
    let dir = std::env::temp_dir().join(format!("memscape-predict-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("predicted.pickle");
    let info =
        r#"{"gpu":"NVIDIA H100 80GB HBM3","memory":85520809984,"limit":false,"torch":"2.15.0","command":["train.py"]}"#;
    let mib = 1u64 << 20;
    let mut lines = vec![
        r#"{"frame":["train.py",12,"main"]}"#.to_string(),
        r#"{"frame":["model.py",40,"forward"]}"#.to_string(),
        r#"{"stack":[0]}"#.to_string(),
        r#"{"stack":[1,0]}"#.to_string(),
        r#"{"history":true,"max_entries":1000}"#.to_string(),
        r#"{"annotation":"START","name":"forward","t":5}"#.to_string(),
    ];
    for i in 1..=4 {
        lines.push(format!(r#"{{"alloc":{i},"size":{},"stream":0,"stack":1,"t":{}}}"#, i * 8 * mib, 10 + i));
    }
    lines.push(r#"{"free":2,"stack":0,"t":20}"#.to_string());
    lines.push(r#"{"query":1}"#.to_string());
    lines.push(r#"{"assume":"a test"}"#.to_string());
    lines.push(format!(r#"{{"dump":{:?}}}"#, out.to_str().unwrap()));
    lines.push(r#"{"end":1}"#.to_string());
    let (answers, status) = serve(info, &lines);
    assert!(status.success());
    let answers: Vec<serde_json::Value> = answers.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(answers.len(), 2, "the query and the dump are answered, nothing else: {answers:?}");
    assert_eq!(answers[0]["allocated"], (8 + 24 + 32) * mib);
    assert_eq!(answers[0]["peak_allocated"], (8 + 16 + 24 + 32) * mib);
    assert_eq!(answers[0]["allocations"], 4);
    assert_eq!(answers[1]["ok"], 1);

    let stats = memscape(&["stats", out.to_str().unwrap()]);
    let text = String::from_utf8(stats.stdout).unwrap();
    assert!(stats.status.success(), "{text}");
    assert!(text.starts_with("PREDICTION: predicted by memscape on a CPU, not recorded"), "{text}");
    assert!(text.contains("NVIDIA H100 80GB HBM3") && text.contains("assumed: a test"), "{text}");
    assert!(text.contains("peak 80.0MiB"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Under `limit`, each allocation is answered; past the memory, with PyTorch's message.
#[test]
fn under_a_limit_each_allocation_is_answered_and_the_last_refused() {
    let info = r#"{"gpu":"NVIDIA L4","memory":1073741824,"limit":true,"torch":"2.15.0","command":[]}"#;
    let lines = [
        r#"{"stack":[]}"#.to_string(),
        r#"{"alloc":1,"size":104857600,"stream":0,"stack":0,"t":1}"#.to_string(),
        r#"{"alloc":2,"size":524288000,"stream":0,"stack":0,"t":2}"#.to_string(),
        r#"{"end":1}"#.to_string(),
    ];
    let (answers, status) = serve(info, &lines);
    assert!(status.success());
    let answers: Vec<serde_json::Value> = answers.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(answers[0]["ok"], 1);
    let oom = answers[1]["oom"].as_str().unwrap();
    assert!(oom.starts_with("CUDA out of memory. Tried to allocate 500.00 MiB."), "{oom}");
}

/// A message that names what was never sent is answered with an error naming it; the server
/// goes on.
#[test]
fn a_bad_message_is_answered_with_an_error_and_the_server_goes_on() {
    let info = r#"{"gpu":"x","memory":1,"limit":false,"torch":"","command":[]}"#;
    let lines = [
        r#"{"alloc":1,"size":512,"stream":0,"stack":3,"t":1}"#.to_string(),
        r#"{"query":1}"#.to_string(),
        r#"{"end":1}"#.to_string(),
    ];
    let (answers, status) = serve(info, &lines);
    assert!(status.success());
    let answers: Vec<serde_json::Value> = answers.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(answers[0]["error"].as_str().unwrap().contains("stack 3 was never sent"), "{answers:?}");
    assert_eq!(answers[1]["allocations"], 0);
}

/// No program, or an output that exists: a clear refusal, nothing run or written.
#[test]
fn predict_refuses_no_program_and_an_existing_output() {
    let out = memscape(&["predict"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("name the program to predict after --"));
    let file = std::env::temp_dir().join(format!("memscape-predict-exists-{}.pickle", std::process::id()));
    std::fs::write(&file, b"keep me").unwrap();
    let out = memscape(&["predict", "--out", file.to_str().unwrap(), "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
    std::fs::remove_file(&file).ok();
}

/// `doctor --verify` needs the program; plain `doctor` needs a file.
#[test]
fn doctor_verify_needs_a_program_and_doctor_a_file() {
    let out = memscape(&["doctor", "--verify"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("name the program to predict after --"));
    let out = memscape(&["doctor"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("<FILE>"), "{}", String::from_utf8_lossy(&out.stderr));
}
