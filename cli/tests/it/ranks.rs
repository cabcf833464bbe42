//! `memscape profile` and `memscape ranks` on generated runs: six ranks of different seeds,
//! one with a planted extra activation.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

use super::memscape;

/// The planted activation and its call site (`snapshot::synth::EXTRA_SITE`).
const EXTRA: u64 = 256 << 20;
const EXTRA_SITE: &str = "model.py:230:Head.forward";

/// A folder of six generated ranks, `rank0.pickle` to `rank5.pickle`; rank 4 has the extra
/// activation. Made once for all the tests here, which only read it.
fn run() -> &'static Path {
    static RUN: OnceLock<PathBuf> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("memscape-ranks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for r in 0..6u64 {
            let out = dir.join(format!("rank{r}.pickle"));
            let seed = (10 + r).to_string();
            let mut args = vec!["synth", "--entries", "6000", "--layers", "4", "--seed", &seed];
            let extra = format!("{EXTRA}");
            if r == 4 {
                args.extend(["--extra-activation", &extra]);
            }
            args.extend(["-o", out.to_str().unwrap()]);
            let made = memscape(&args);
            assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        }
        dir
    })
}

/// A fresh folder of this test's own.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memscape-ranks-{}-{name}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn rank_files() -> Vec<PathBuf> {
    (0..6).map(|r| run().join(format!("rank{r}.pickle"))).collect()
}

fn ranks_json(args: &[&str]) -> Value {
    let out = memscape(&[&["ranks", "--json"], args].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The figures of a summary without the file names (which differ between a snapshot and its
/// profile).
fn figures(v: &Value) -> Value {
    let mut v = v.clone();
    for key in ["ranks", "outliers"] {
        for row in v[key].as_array_mut().unwrap() {
            let row = row.as_object_mut().unwrap();
            row.remove("file");
            row.remove("source");
        }
    }
    v.as_object_mut().unwrap().remove("median_rank");
    v
}

#[test]
fn ranks_names_the_planted_outlier_and_its_call_site_in_text_and_json() {
    let files = rank_files();
    let args: Vec<&str> = files.iter().map(|f| s(f)).collect();
    let v = ranks_json(&args);
    let rows = v["ranks"].as_array().unwrap();
    let got: Vec<(u64, u64)> =
        rows.iter().map(|r| (r["rank"].as_u64().unwrap(), r["device"].as_u64().unwrap())).collect();
    assert_eq!(got, (0..6).map(|r| (r, 0)).collect::<Vec<_>>());
    for r in rows {
        let cats: u64 = r["categories"].as_object().unwrap().values().map(|b| b.as_u64().unwrap()).sum();
        assert_eq!(cats, r["peak_bytes"].as_u64().unwrap(), "categories at the peak add up to it");
        assert!(r["reserved_bytes"].as_u64().unwrap() >= r["peak_bytes"].as_u64().unwrap());
    }
    let outliers = v["outliers"].as_array().unwrap();
    assert_eq!(outliers.len(), 1, "{outliers:?}");
    let o = &outliers[0];
    assert_eq!(o["rank"], 4);
    assert_eq!(o["file"], s(&files[4]));
    assert_eq!(o["top_site"], EXTRA_SITE);
    assert_eq!(o["top_site_bytes"], EXTRA);
    assert_eq!(o["peak_bytes"], rows[4]["peak_bytes"]);
    assert_eq!(
        o["excess_bytes"].as_u64().unwrap(),
        o["peak_bytes"].as_u64().unwrap() - v["median_peak_bytes"].as_u64().unwrap()
    );
    let act = |r: &Value| r["categories"]["activation"].as_u64().unwrap();
    assert_eq!(act(&rows[4]) - act(&rows[0]), EXTRA);

    let out = memscape(&[&["ranks"], args.as_slice()].concat());
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("6 ranks: median peak "), "{text}");
    assert!(text.contains("\noutliers:\n  rank 4 ("), "{text}");
    assert!(text.contains(&format!("    top site: {EXTRA_SITE} holds 256.0MiB more than in rank ")), "{text}");
    assert_eq!(text.matches("above the median").count(), 1, "{text}");
    let table: Vec<&str> = text.lines().filter(|l| l.ends_with(".pickle")).collect();
    assert_eq!(table.len(), 6, "{text}");
    assert!(table[4].trim_start().starts_with("4       0 "), "{}", table[4]);
}

#[test]
fn profiles_read_back_as_the_core_computes_them_and_mixed_with_snapshots_give_the_same_figures() {
    let dir = scratch("profiles");
    let files = rank_files();
    let mut profiles = Vec::new();
    for f in &files {
        let out = dir.join(format!("{}.profile", f.file_name().unwrap().to_str().unwrap()));
        let made = memscape(&["profile", s(f), "-o", s(&out)]);
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        assert!(String::from_utf8_lossy(&made.stdout).contains("device 0, peak "));
        profiles.push(out);
    }
    // The file holds the core's profile of the snapshot, and its name.
    let bytes = std::fs::read(&profiles[4]).unwrap();
    assert!(bytes.starts_with(b"memscape-profile 1\n"));
    let file = snapshot::ranks::ProfileFile::from_bytes(&bytes).unwrap();
    assert_eq!(file.source, s(&files[4]));
    let snap = snapshot::read(&std::fs::read(&files[4]).unwrap()).unwrap().snapshot;
    let tl = snapshot::timeline::Timeline::build(&snap, 0, snapshot::timeline::TimelineKind::Blocks);
    let cats = snapshot::categories::analyze(&snap, &tl, &snapshot::categories::Compiled::default());
    assert_eq!(file.profile, snapshot::diff::profile(&snap, &tl, &cats));

    let of = |paths: &[&PathBuf]| ranks_json(&paths.iter().map(|p| s(p)).collect::<Vec<_>>());
    let from_snapshots = of(&files.iter().collect::<Vec<_>>());
    let from_profiles = of(&profiles.iter().collect::<Vec<_>>());
    let mixed = of(&[&profiles[0], &files[1], &profiles[2], &files[3], &profiles[4], &files[5]]);
    assert_eq!(figures(&from_profiles), figures(&from_snapshots));
    assert_eq!(figures(&mixed), figures(&from_snapshots));
    // A profile's row names its snapshot; its rank comes from its own name.
    assert_eq!(mixed["ranks"][2]["file"], s(&profiles[2]));
    assert_eq!(mixed["ranks"][2]["source"], s(&files[2]));
    assert!(mixed["ranks"][1].get("source").is_none());
    assert_eq!(mixed["outliers"][0]["file"], s(&profiles[4]));

    // A profile named with no rank takes it from its snapshot's name.
    let anonymous = dir.join("anonymous.profile");
    std::fs::copy(&profiles[3], &anonymous).unwrap();
    let v = of(&[&anonymous]);
    assert_eq!(v["ranks"][0]["rank"], 3);
}

#[test]
fn a_folder_stands_for_its_snapshots_and_profiles() {
    let files = rank_files();
    let listed = ranks_json(&files.iter().map(|f| s(f)).collect::<Vec<_>>());
    assert_eq!(ranks_json(&[s(run())]), listed);

    // A profile beside its snapshot stands for it; other files are left out.
    let dir = scratch("folder");
    for f in &files {
        std::fs::copy(f, dir.join(f.file_name().unwrap())).unwrap();
    }
    let made = memscape(&["profile", s(&dir.join("rank1.pickle")), "-o", s(&dir.join("rank1.pickle.profile"))]);
    assert!(made.status.success());
    std::fs::write(dir.join("notes.txt"), "not a snapshot").unwrap();
    std::fs::write(dir.join("truth.json"), "{}").unwrap();
    std::fs::create_dir_all(dir.join("rank9")).unwrap();
    let v = ranks_json(&[s(&dir)]);
    let names: Vec<&str> = v["ranks"].as_array().unwrap().iter().map(|r| r["file"].as_str().unwrap()).collect();
    let want: Vec<String> =
        ["rank0.pickle", "rank1.pickle.profile", "rank2.pickle", "rank3.pickle", "rank4.pickle", "rank5.pickle"]
            .iter()
            .map(|n| s(&dir.join(n)).to_string())
            .collect();
    assert_eq!(names, want);
    assert_eq!(figures(&v), figures(&listed));

    // A folder with nothing to read says so.
    let empty = scratch("empty");
    let out = memscape(&["ranks", s(&empty)]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains(s(&empty)) && err.contains("no snapshot or profile in this folder"), "{err}");
}

#[test]
fn a_bad_file_among_the_ranks_fails_with_one_line_naming_it() {
    let dir = scratch("bad");
    let files = rank_files();
    let truncated = dir.join("rank6.pickle");
    let bytes = std::fs::read(&files[0]).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let profile = dir.join("rank7.profile");
    assert!(memscape(&["profile", s(&files[1]), "-o", s(&profile)]).status.success());
    let good = std::fs::read(&profile).unwrap();
    let damaged = dir.join("rank8.profile");
    std::fs::write(&damaged, &good[..good.len() - 100]).unwrap();
    let future = dir.join("rank9.profile");
    std::fs::write(&future, [b"memscape-profile 7\n".as_slice(), &good[19..]].concat()).unwrap();
    let missing = dir.join("rank10.pickle");
    for (bad, needle) in [
        (&truncated, "at byte"),
        (&damaged, "a damaged memscape profile"),
        (&future, "format version 7; this memscape reads version 1"),
        (&missing, "cannot open"),
    ] {
        let out = memscape(&["ranks", s(&files[0]), s(&files[1]), s(bad), s(&files[2])]);
        assert_eq!(out.status.code(), Some(2), "{}", bad.display());
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.starts_with(&format!("memscape: {}: ", bad.display())) && err.contains(needle), "{err}");
    }
    // `profile` of a profile, or of a bad snapshot.
    let out = memscape(&["profile", s(&profile), "-o", s(&dir.join("again.profile"))]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already a memscape profile"));
    let out = memscape(&["profile", s(&truncated), "-o", s(&dir.join("t.profile"))]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("rank6.pickle") && err.contains("at byte"), "{err}");
    assert!(!dir.join("t.profile").exists());
}

/// Two files of one rank are most likely two runs mixed up: said, and both shown.
#[test]
fn a_rank_in_two_files_is_warned_about() {
    let dir = scratch("twice");
    let files = rank_files();
    let copy = dir.join("snapshot_rank2.pickle");
    std::fs::copy(&files[2], &copy).unwrap();
    let out = memscape(&["ranks", s(&files[1]), s(&files[2]), s(&copy)]);
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("warning: rank 2 is in 2 files") && err.contains("snapshot_rank2.pickle"), "{err}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("3 ranks: "), "{text}");
}
