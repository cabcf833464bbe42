//! `memscape check`, the CI gate, on generated runs: a planted activation growth of 5% fails a
//! 2% growth budget and is named first; a run passes against itself; the JUnit report parses
//! and the GitHub annotations are one line each; bad input exits 2.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::memscape;

/// A generated run, and the same run with an extra activation of `share` of its peak at
/// `model.py:230:Head.forward` (the generator's planted call site).
fn runs(dir: &Path, share: f64) -> (PathBuf, PathBuf) {
    let (base, grown) = (dir.join("base.pickle"), dir.join("grown.pickle"));
    let synth = ["synth", "--entries", "12000", "--layers", "6", "--seed", "5", "-o"];
    assert!(memscape(&[&synth[..], &[base.to_str().unwrap()]].concat()).status.success());
    let peak = super::stats_json(&base)["categories"][0]["peak_bytes"].as_u64().unwrap();
    let extra = ((peak as f64 * share) as u64).to_string();
    let args = [&synth[..7], &["--extra-activation", &extra, "-o", grown.to_str().unwrap()]].concat();
    assert!(memscape(&args).status.success());
    (base, grown)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("memscape-check-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_planted_five_percent_growth_fails_a_two_percent_budget_and_is_named_first() {
    let dir = tmp("growth");
    let (base, grown) = runs(&dir, 0.05);
    let (b, g) = (base.to_str().unwrap(), grown.to_str().unwrap());
    let out = memscape(&["check", g, "--baseline", b, "--max-growth", "2", "--format", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let o: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(o["passed"], false);
    let growth = o["budgets"][0]["measured"].as_f64().unwrap();
    assert!((growth - 5.0).abs() < 0.1, "measured growth {growth}%");
    assert_eq!(o["grown"][0]["site"], snapshot::synth::EXTRA_SITE);
    // Within 6% it holds; against itself it holds at 0%.
    assert_eq!(memscape(&["check", g, "--baseline", b, "--max-growth", "6%"]).status.code(), Some(0));
    let same = memscape(&["check", b, "--baseline", b, "--max-growth", "0", "--format", "json"]);
    assert_eq!(same.status.code(), Some(0));
    let o: Value = serde_json::from_slice(&same.stdout).unwrap();
    assert_eq!(o["grown"].as_array().unwrap().len(), 0, "nothing grew");

    // A profile of the baseline checks as the baseline itself does.
    let profile = dir.join("base.profile");
    assert!(memscape(&["profile", b, "-o", profile.to_str().unwrap()]).status.success());
    let via = memscape(&["check", g, "--baseline", profile.to_str().unwrap(), "--max-growth", "2", "--format", "json"]);
    assert_eq!(serde_json::from_slice::<Value>(&via.stdout).unwrap()["budgets"], o_budgets(g, b));

    // GitHub annotations: one line each, the failure an ::error naming the site.
    let gh = memscape(&["check", g, "--baseline", b, "--max-growth", "2", "--max-peak", "1T", "--format", "github"]);
    let text = String::from_utf8(gh.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("::error file=") && lines[0].contains("title=memscape max-growth::"), "{text}");
    assert!(lines[0].contains(snapshot::synth::EXTRA_SITE));
    assert!(lines[1].starts_with("::notice ") && lines[1].contains("1 of 2 memory budgets hold"), "{text}");

    // The JUnit report parses, with a failure for the growth and a success for the peak.
    let junit = dir.join("junit.xml");
    let args =
        ["check", g, "--baseline", b, "--max-growth", "2", "--max-peak", "1T", "--junit", junit.to_str().unwrap()];
    assert_eq!(memscape(&args).status.code(), Some(1));
    let report = quick_junit::Report::deserialize_from_str(&std::fs::read_to_string(&junit).unwrap()).unwrap();
    let suite = &report.test_suites[0];
    assert_eq!(suite.test_cases.len(), 2);
    let failed: Vec<&str> = suite
        .test_cases
        .iter()
        .filter(|c| !matches!(c.status, quick_junit::TestCaseStatus::Success { .. }))
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(failed, ["max-growth"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn o_budgets(g: &str, b: &str) -> Value {
    let out = memscape(&["check", g, "--baseline", b, "--max-growth", "2", "--format", "json"]);
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["budgets"].clone()
}

#[test]
fn category_and_peak_budgets_hold_or_fail_by_the_stats_figures() {
    let dir = tmp("budgets");
    let (base, _) = runs(&dir, 0.0);
    let b = base.to_str().unwrap();
    let stats = super::stats_json(&base);
    let at_peak = |k: &str| {
        stats["categories"][0]["at_peak"].as_array().unwrap().iter().find(|c| c["category"] == k).unwrap()["bytes"]
            .as_u64()
            .unwrap()
    };
    let peak = stats["categories"][0]["peak_bytes"].as_u64().unwrap();
    let state = at_peak("optimizer_state");
    let check = |args: &[&str]| memscape(&[&["check", b][..], args].concat()).status.code();
    assert_eq!(check(&["--max-peak", &peak.to_string()]), Some(0));
    assert_eq!(check(&["--max-peak", &(peak - 1).to_string()]), Some(1));
    assert_eq!(check(&["--max", &format!("optimizer_state={state}")]), Some(0));
    assert_eq!(check(&["--max", &format!("optimizer_state={}", state - 1), "--max-peak", "1T"]), Some(1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_exits_2_with_a_message() {
    let dir = tmp("bad");
    let missing = dir.join("missing.pickle");
    let out = memscape(&["check", missing.to_str().unwrap(), "--max-peak", "1G"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.pickle: cannot open"));
    let hostile = dir.join("hostile.pickle");
    std::fs::write(&hostile, b"\x80\x04cos\nsystem\n(S'echo pwned'\ntR.").unwrap();
    let out = memscape(&["check", hostile.to_str().unwrap(), "--max-peak", "1G"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let (base, _) = runs(&dir, 0.0);
    let b = base.to_str().unwrap();
    for args in [&["--max-growth", "2"][..], &[], &["--max", "weights=1G"], &["--max-growth", "-1"]] {
        let out = memscape(&[&["check", b][..], args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
