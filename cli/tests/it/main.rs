#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Runs the real `memscape` binary on every corpus file and compares with the figures
//! PyTorch's own code computed (`shared/corpus/expected/`).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod check;
mod convert;
mod predict;
mod profiler;
mod ranks;
mod slice;

fn memscape(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memscape")).args(args).output().unwrap()
}

fn stats_json(path: &std::path::Path) -> Value {
    let out = memscape(&["stats", "--json", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[track_caller]
fn eq(file: &str, what: &str, ours: &Value, expected: &Value) {
    assert_eq!(ours, expected, "{file}: {what}");
}

#[test]
fn stats_json_equals_pytorch_figures_for_every_corpus_file() {
    let mut devices_checked = 0;
    for path in testkit::paths() {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let exp = testkit::expected(&name);
        let ours = stats_json(&path);
        let segsum = &exp["segsum"];
        for k in ["segments", "total_reserved", "total_allocated", "free_internal", "free_external"] {
            eq(&name, k, &ours[k], &segsum[k]);
        }
        let our_devices: Vec<&Value> = ours["devices"].as_array().unwrap().iter().collect();
        let mv = &exp["memoryviz"];
        if mv["annotate_snapshot"]["ok"] == Value::Bool(true) {
            let listed: Vec<u64> = mv["device_list"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
            let ours_listed: Vec<u64> = our_devices.iter().map(|d| d["device"].as_u64().unwrap()).collect();
            assert_eq!(ours_listed, listed, "{name}: device list");
        } else {
            // PyTorch's viewer cannot open it (legacy segment list); we still show its segments.
            let with_segments: Vec<u64> =
                exp["reserved"]["per_device"].as_object().unwrap().keys().map(|k| k.parse().unwrap()).collect();
            let ours_listed: Vec<u64> = our_devices.iter().map(|d| d["device"].as_u64().unwrap()).collect();
            assert_eq!(ours_listed, with_segments, "{name}: devices with segments");
        }
        let map_unmap = exp["raw_device_traces"].as_object().is_some_and(|t| {
            t.values().any(|d| d["actions"].get("segment_map").is_some() || d["actions"].get("segment_unmap").is_some())
        });
        for d in our_devices {
            let dev = d["device"].as_u64().unwrap().to_string();
            let reserved = exp["reserved"]["per_device"].get(&dev).cloned().unwrap_or(Value::from(0));
            eq(&name, "reserved_bytes", &d["reserved_bytes"], &reserved);
            eq(&name, "segment_timeline.final_bytes", &d["segment_timeline"]["final_bytes"], &reserved);
            let entries = exp["raw_device_traces"].get(&dev).map_or(Value::from(0), |t| t["entries"].clone());
            eq(&name, "trace_entries", &d["trace_entries"], &entries);
            let Some(viz) = mv["devices"].get(&dev) else { continue };
            devices_checked += 1;
            let pairs = [
                ("elements", "elements"),
                ("peak_bytes", "max_at_time_peak"),
                ("final_bytes", "final_live_bytes"),
                ("initially_allocated", "initially_allocated"),
                ("unmatched_frees", "unmatched_frees"),
                ("snapshot_only", "snapshot_only_elements"),
            ];
            for (ours_k, exp_k) in pairs {
                let what = format!("device {dev} timeline.{ours_k}");
                eq(&name, &what, &d["timeline"][ours_k], &viz["active_memory_timeline"][exp_k]);
                if !map_unmap {
                    let what = format!("device {dev} segment_timeline.{ours_k}");
                    eq(&name, &what, &d["segment_timeline"][ours_k], &viz["active_cached_segment_timeline"][exp_k]);
                }
            }
        }
    }
    assert!(devices_checked >= testkit::if_full(18, 8), "only {devices_checked} devices were compared");
}

#[test]
fn html_export_gives_the_same_figures_as_its_pickle() {
    let Some(html) = testkit::file_or_skip("pt25-cs336-bf16-forward.html") else { return };
    let Some(pickle) = testkit::file_or_skip("pt25-cs336-bf16-forward.pickle") else { return };
    let a = stats_json(&html);
    let b = stats_json(&pickle);
    assert_eq!(a, b);
}

#[test]
fn bad_input_exits_2_with_a_one_line_error_naming_the_file() {
    let Some(bytes) = testkit::read_or_skip("pt24-linear-tiny.pkl") else { return };
    let dir = std::env::temp_dir().join(format!("memscape-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let truncated = dir.join("truncated.pickle");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let empty = dir.join("empty.pickle");
    std::fs::write(&empty, b"").unwrap();
    for (path, needle) in [(&truncated, "at byte"), (&empty, "empty")] {
        let out = memscape(&["stats", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(path.file_name().unwrap().to_str().unwrap()) && err.contains(needle), "{err}");
    }
    let out = memscape(&["stats", dir.join("missing.pickle").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}

/// `-` reads the snapshot from standard input (what the Python package does with bytes and
/// dicts): the same figures as from the file, and errors name `<stdin>`.
#[test]
fn stats_reads_standard_input() {
    use std::io::Write as _;
    use std::process::Stdio;
    let stdin_stats = |bytes: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_memscape"))
            .args(["stats", "--json", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(bytes).unwrap();
        child.wait_with_output().unwrap()
    };
    for name in ["pt24-linear-tiny.pkl", "pt25-cs336-bf16-forward.html", "pt21-llama-cppframes-multistream.pickle"] {
        let Some(path) = testkit::file_or_skip(name) else { continue };
        let out = stdin_stats(&std::fs::read(&path).unwrap());
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let ours: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(ours, stats_json(&path), "{name}");
    }
    let Some(bytes) = testkit::read_or_skip("pt24-linear-tiny.pkl") else { return };
    let out = stdin_stats(&bytes[..bytes.len() / 2]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("memscape: <stdin>: ") && err.contains("at byte"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn synth_writes_a_snapshot_that_stats_reads() {
    let dir = std::env::temp_dir().join(format!("memscape-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["s.pickle", "s.pickle.gz"] {
        let out = dir.join(name);
        let r = memscape(&["synth", "--entries", "5000", "--devices", "2", "--oom", "-o", out.to_str().unwrap()]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let s = stats_json(&out);
        let devs = s["devices"].as_array().unwrap();
        assert_eq!(devs.len(), 2);
        let entries: u64 = devs.iter().map(|d| d["trace_entries"].as_u64().unwrap()).sum();
        assert!(entries >= 5000, "{entries}");
        assert!(s["total_reserved"].as_u64().unwrap() >= s["total_allocated"].as_u64().unwrap());
    }
}

#[test]
fn capture_without_a_driver_says_so_and_fails() {
    if capture::driver_present() {
        eprintln!("skipped: this machine has a CUDA driver");
        return;
    }
    let out = memscape(&["capture", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("NVIDIA GPU") && err.contains("libcuda"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// The bundled example's training step, as the text says how it was found: in words, as the
/// page's category view says it (it once printed the enum's name, "OptimizerSteps").
#[test]
fn stats_says_how_iterations_were_found_in_words() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cs336-fullstep.pickle");
    let out = memscape(&["stats", file.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("  iterations: 1 (1 complete; one per optimizer step)\n"), "{text}");
}

/// A snapshot `memscape capture` wrote on an H100: stats names the device, in text and JSON,
/// with what the driver counted for the process, and reads without warnings.
#[test]
fn stats_names_the_device_of_a_captured_snapshot() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../capture/tests/data/h100/ours.pickle");
    let out = memscape(&["stats", file.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("device 0 (NVIDIA H100 80GB HBM3, 79.6GiB, 3.5GiB held by the process): 114 trace entries"),
        "{text}"
    );
    let json = stats_json(&file);
    let gpu = &json["devices"][0]["gpu"];
    assert_eq!(gpu["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(gpu["total_bytes"], 85_520_809_984u64);
    assert_eq!(gpu["process_used_bytes"], 3_760_193_536u64);
}

/// `merge` of PyTorch's snapshot and the capture of the same step (recorded on the H100):
/// `stats` then counts what PyTorch could not see as outside its allocator, and refuses to
/// write over an input.
#[test]
fn merge_then_stats_shows_memory_outside_pytorchs_allocator() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../capture/tests/data/h100");
    let (torch, ours) = (data.join("torch.pickle.gz"), data.join("ours.pickle"));
    let merged = std::env::temp_dir().join(format!("memscape-merge-{}.pickle", std::process::id()));
    let out = memscape(&["merge", torch.to_str().unwrap(), ours.to_str().unwrap(), "-o", merged.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("outside PyTorch's allocator added (192.3MiB)"));
    let json = stats_json(&merged);
    assert_eq!(json["devices"][0]["outside_allocator_bytes"], 201_590_784u64);
    assert_eq!(json["total_reserved"], stats_json(&ours)["total_reserved"]);
    assert_eq!(stats_json(&torch)["devices"][0]["outside_allocator_bytes"], 0);
    let text = String::from_utf8(memscape(&["stats", merged.to_str().unwrap()]).stdout).unwrap();
    assert!(text.contains("outside PyTorch's allocator (from a driver capture): 192.3MiB"), "{text}");
    let refused =
        memscape(&["merge", torch.to_str().unwrap(), merged.to_str().unwrap(), "-o", merged.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("would overwrite an input"));
    std::fs::remove_file(&merged).unwrap();
}

/// `synth --truth`, `stats --json` categories and leaks, `diff --json`, `--rules`: the planted
/// answers come out of the real binary.
#[test]
fn planted_truths_through_the_command_line() {
    let dir = std::env::temp_dir().join(format!("memscape-cli-planted-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let base = ["synth", "--entries", "8000", "--layers", "4", "--seed", "5", "--leak", "2M"];
    let out = memscape(&[&base[..], &["-o", &p("a.pickle"), "--truth", &p("a.json")]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = memscape(&[&base[..], &["--extra-activation", "8M", "-o", &p("b.pickle")]].concat());
    assert!(out.status.success());
    let truth: Value = serde_json::from_slice(&std::fs::read(p("a.json")).unwrap()).unwrap();

    let s = stats_json(std::path::Path::new(&p("a.pickle")));
    let c = &s["categories"][0];
    assert_eq!(c["peak_bytes"], truth["peak_bytes"]);
    for row in c["at_peak"].as_array().unwrap() {
        let key = row["category"].as_str().unwrap();
        assert_eq!(row["bytes"], truth["at_peak"][key], "{key}");
    }
    assert_eq!(c["leaks"][0]["site"], "train.py:318:train_step");
    assert_eq!(c["leaks"][0]["bytes_per_iteration"], 2 << 20);
    assert_eq!(
        c["iterations"].as_array().unwrap().iter().filter(|i| i["complete"] == true).count() as u64,
        truth["iterations"].as_u64().unwrap()
    );

    let out = memscape(&["diff", "--json", "--align", "time", &p("a.pickle"), &p("b.pickle")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["align"], "time");
    assert_eq!(d["sites"][0]["site"], "model.py:230:Head.forward");
    assert_eq!(d["sites"][0]["b"].as_u64().unwrap() - d["sites"][0]["a"].as_u64().unwrap(), 8 << 20);
    let text = String::from_utf8(memscape(&["diff", &p("a.pickle"), &p("b.pickle")]).stdout).unwrap();
    assert!(text.contains("8.0MiB  0.0B -> 8.0MiB  model.py:230:Head.forward"), "{text}");

    // A rule moves the leak to `input`; a broken rules file is refused with its name.
    std::fs::write(p("rules.json"), r#"{"rules":[{"pattern":"train\\.py:318","category":"input"}]}"#).unwrap();
    let out = memscape(&["stats", "--json", "--rules", &p("rules.json"), &p("a.pickle")]);
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let input = s["categories"][0]["at_peak"].as_array().unwrap().iter().find(|r| r["category"] == "input").unwrap()
        ["bytes"]
        .as_u64()
        .unwrap();
    assert!(input > 0 && input % (2 << 20) == 0, "{input}");
    std::fs::write(p("bad.json"), r#"{"rules":[{"pattern":"(","category":"input"}]}"#).unwrap();
    let out = memscape(&["stats", "--rules", &p("bad.json"), &p("a.pickle")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.json: rule 1"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `memscape doctor`: the corpus's out-of-memory file against PyTorch's own figures, planted
/// errors of both kinds, `--json` equal to the core's report, `--device`.
#[test]
fn doctor_reads_verdicts_and_figures() {
    let Some(oom_file) = testkit::file_or_skip("pt20-flexgen-opt-oom-history.pickle") else { return };
    let out = memscape(&["doctor", "--json", oom_file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["ooms"], Value::Array(Vec::new()));
    let end = &r["at_end"];
    assert_eq!(end["verdict"], "exhausted", "{}", end["why"]);
    // `_memory_viz.py stats` on the same file: reserved, and the free blocks' bytes.
    let exp = testkit::expected("pt20-flexgen-opt-oom-history.pickle");
    eq("oom file", "reserved", &end["figures"]["reserved_bytes"], &exp["segsum"]["total_reserved"]);
    eq("oom file", "cached free", &end["figures"]["cached_free_bytes"], &exp["segsum"]["free_external"]);
    eq("oom file", "allocated", &end["figures"]["allocated_bytes"], &exp["segsum"]["total_allocated"]);
    let text = String::from_utf8(memscape(&["doctor", oom_file.to_str().unwrap()]).stdout).unwrap();
    assert!(
        text.contains("no oom event in the trace; at its end: 11.0GiB reserved, 4.3MiB of it free in the cache"),
        "{text}"
    );
    assert!(text.contains("if it was dumped at an out-of-memory error: exhausted: live memory fills"), "{text}");

    let dir = std::env::temp_dir().join(format!("memscape-cli-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let made = memscape(&["synth", "--entries", "6000", "--fragmentation-oom", "--oom", "-o", &p("f.pickle")]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let out = memscape(&["doctor", "--json", &p("f.pickle")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let verdicts: Vec<&str> = r["ooms"].as_array().unwrap().iter().map(|o| o["verdict"].as_str().unwrap()).collect();
    assert_eq!(verdicts, ["exhausted", "fragmentation"]);
    let frag = &r["ooms"][1];
    for k in [
        "device",
        "entry",
        "requested_bytes",
        "device_free_bytes",
        "reserved_bytes",
        "allocated_bytes",
        "cached_free_bytes",
        "largest_free_block_bytes",
        "verdict",
        "holders",
        "advice",
    ] {
        assert!(frag.get(k).is_some(), "{k}");
    }
    assert!(frag["holders"][0]["site"].is_string() && frag["holders"][0]["bytes"].is_u64());
    assert!(frag["advice"][0]["setting"].is_string() && frag["advice"][0]["predicted_effect_bytes"].is_u64());
    let u = |v: &Value| v.as_u64().unwrap();
    assert!(u(&frag["cached_free_bytes"]) >= u(&frag["requested_bytes"]));
    assert!(u(&frag["largest_free_block_bytes"]) < u(&frag["requested_bytes"]));
    assert!(r["what_if"].as_array().unwrap().iter().all(|w| w["change"].is_string() && w["assumption"].is_string()));
    // The command prints the core's report as it is.
    let snap = snapshot::read(&std::fs::read(p("f.pickle")).unwrap()).unwrap().snapshot;
    let core = snapshot::doctor::doctor(&snap, 0, &snapshot::categories::Compiled::default());
    assert_eq!(r, serde_json::to_value(&core).unwrap());
    let text = String::from_utf8(memscape(&["doctor", &p("f.pickle")]).stdout).unwrap();
    assert!(text.contains("EXHAUSTED") && text.contains("FRAGMENTATION"), "{text}");
    // Where in the step, in words (the page's words too), not the enum's name.
    for (o, line) in r["ooms"].as_array().unwrap().iter().zip(text.lines().filter(|l| l.starts_with("OOM at entry"))) {
        let phase: snapshot::categories::Phase = serde_json::from_value(o["phase"].clone()).unwrap();
        assert!(line.contains(&format!("(step {}, {phase}): ", o["step"])), "{line}");
        assert!(line.contains(" in ") || line.contains("outside"), "{line}");
    }
    assert!(text.contains("advice [expandable_segments:True]"), "{text}");
    // The pools in words, as the JSON names them (not the enum's names).
    for o in r["ooms"].as_array().unwrap() {
        let requested = format!("({} pool, stream {};", o["pool"].as_str().unwrap(), o["stream"]);
        assert!(text.contains(&requested), "{requested} in {text}");
        for f in o["free_by_pool"].as_array().unwrap() {
            let pool = format!("    {} pool, stream {}", f["pool"].as_str().unwrap(), f["stream"]);
            assert!(text.lines().any(|l| l.starts_with(&pool)), "{pool} in {text}");
        }
    }

    // Two devices, each with its error: --device picks one.
    let made = memscape(&["synth", "--entries", "6000", "--devices", "2", "--oom", "-o", &p("two.pickle")]);
    assert!(made.status.success());
    let r: Value =
        serde_json::from_slice(&memscape(&["doctor", "--json", "--device", "1", &p("two.pickle")]).stdout).unwrap();
    assert_eq!(r["device"], 1);
    assert_eq!(r["ooms"][0]["device"], 1);
    let text = String::from_utf8(memscape(&["doctor", &p("two.pickle")]).stdout).unwrap();
    assert!(text.contains("other devices too: 1"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_device_the_file_lacks_exits_2_naming_the_devices_it_has_in_every_command() {
    let example = testkit::example("cs336-fullstep.pickle");
    let dir = std::env::temp_dir().join(format!("memscape-cli-device-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("one-gpu.pickle");
    std::fs::write(&file, example).unwrap();
    let f = file.to_str().unwrap();
    let profile = dir.join("one-gpu.profile");
    let made = memscape(&["profile", f, "-o", profile.to_str().unwrap()]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let p = profile.to_str().unwrap();
    let never = dir.join("x.profile");
    let x = never.to_str().unwrap();
    let runs: [&[&str]; 7] = [
        &["replay", f, "--device", "7"],
        &["check", f, "--device", "7", "--max-peak", "1G"],
        &["check", p, "--device", "7", "--max-peak", "1G"],
        &["doctor", f, "--device", "7"],
        &["diff", f, f, "--device", "7"],
        &["profile", f, "--device", "7", "-o", x],
        &["doctor", "--json", f, "--device", "7"],
    ];
    for args in runs {
        let out = memscape(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("no device 7") && err.contains("device 0"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed a result");
    }
    assert!(!never.exists(), "no profile written");
    // The device the file has still works.
    assert!(memscape(&["doctor", f, "--device", "0"]).status.success());
}

/// `memscape replay --json`: the simulator's agreement with the recording, per device, in the
/// shape the issue names; on this example every allocation is placed as recorded.
#[test]
fn replay_prints_the_simulators_agreement_per_device() {
    let example = testkit::example("cs336-fullstep.pickle");
    let dir = std::env::temp_dir().join(format!("memscape-cli-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("run.pickle");
    std::fs::write(&file, example).unwrap();
    let out = memscape(&["replay", "--json", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    let d = &devices[0];
    assert_eq!(d["device"], 0);
    let n = d["allocations"].as_u64().unwrap();
    assert!(n > 1000, "{d}");
    assert_eq!(d["placed_as_recorded"].as_u64(), Some(n), "{d}");
    assert_eq!(d["segment_events_matched"], d["segment_events"], "{d}");
    assert_eq!(d["reserved_max_abs_diff_bytes"], 0, "{d}");
    assert!(d["first_disagreement"].is_null(), "{d}");
    let text = memscape(&["replay", file.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("allocations placed as recorded: {n} of {n} (100.00%)")), "{text}");
    assert!(text.contains("every decision as recorded"), "{text}");
}
