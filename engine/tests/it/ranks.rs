//! A run in the viewer: six generated ranks (rank 4 with an extra activation), read as the
//! pool workers read them (in slices, snapshots and profile files), give the overview
//! `memscape ranks` gives: the same rows, median and outliers, from a few KB per rank.

use engine::ranks::{self, RankLoad, RankProfile, SortBy};
use snapshot::categories::Compiled;
use snapshot::ranks::{summarize, ProfileFile, RankInput};
use snapshot::synth::{self, Options};
use snapshot::timeline::{Timeline, TimelineKind};

const EXTRA: u64 = 256 << 20;

/// The six ranks as `cli/tests/it/ranks.rs` makes them: pickles of seeds 10 to 15.
fn run() -> Vec<(String, Vec<u8>)> {
    (0..6u64)
        .map(|r| {
            let opts = Options {
                seed: 10 + r,
                target_entries: 6000,
                layers: 4,
                extra_activation_bytes: if r == 4 { EXTRA } else { 0 },
                ..Options::default()
            };
            (format!("run/rank{r}.pickle"), snapshot::write::to_pickle_bytes(&synth::generate(&opts)))
        })
        .collect()
}

/// Reads a file as a pool worker does, in slices.
fn read(name: &str, bytes: &[u8], slice: usize) -> Result<RankProfile, String> {
    let mut l = RankLoad::new(name, bytes.len() as u64);
    for c in bytes.chunks(slice) {
        l.feed(c)?;
    }
    l.finish()
}

/// The full profile, as `memscape ranks` makes it.
fn full_profile(bytes: &[u8]) -> snapshot::diff::Profile {
    let snap = snapshot::read(bytes).unwrap().snapshot;
    let d = snap.default_device().unwrap();
    let tl = Timeline::build(&snap, d, TimelineKind::Blocks);
    let cats = snapshot::categories::analyze(&snap, &tl, &Compiled::default());
    snapshot::diff::profile(&snap, &tl, &cats)
}

#[test]
fn the_overview_of_slim_profiles_is_the_command_lines_summary() {
    let files = run();
    let slim: Vec<RankProfile> = files.iter().map(|(n, b)| read(n, b, 1 << 20).unwrap()).collect();
    let full: Vec<RankInput> = files.iter().map(|(n, b)| RankInput::new(n.clone(), None, full_profile(b))).collect();
    let expected = summarize(&full);
    let o = ranks::overview(&slim);
    assert_eq!(o.ranks, expected);
    assert_eq!(o.ranks.outliers.len(), 1);
    let out = &o.ranks.outliers[0];
    assert_eq!(out.rank, Some(4));
    assert_eq!(out.top_site.as_deref(), Some(synth::EXTRA_SITE));
    // Each row points at its own profile, and only rank 4's row is marked.
    for (k, row) in o.ranks.ranks.iter().enumerate() {
        assert_eq!(slim[o.index[k]].file, row.file);
        assert_eq!(o.outlier[k].is_some(), row.rank == Some(4), "{}", row.file);
    }
    assert_eq!(o.max_bytes, slim.iter().map(|p| p.peak_bytes).max().unwrap());
    // Highest peak first puts rank 4 at the top.
    let by_peak = ranks::order(&o.ranks, SortBy::Peak);
    assert_eq!(o.ranks.ranks[by_peak[0]].rank, Some(4));
    assert!(by_peak.windows(2).all(|w| o.ranks.ranks[w[0]].peak_bytes >= o.ranks.ranks[w[1]].peak_bytes));
    assert_eq!(ranks::order(&o.ranks, SortBy::Rank), (0..6).collect::<Vec<_>>());
}

#[test]
fn a_profile_file_reads_as_its_snapshot_with_its_source() {
    let files = run();
    let (name, bytes) = &files[2];
    let written = ProfileFile::new(name, full_profile(bytes)).to_bytes();
    // Slices smaller than the header, and the whole file at once.
    for slice in [7, written.len()] {
        let p = read("run/rank2.pickle.profile", &written, slice).unwrap();
        let from_snapshot = read(name, bytes, 1 << 20).unwrap();
        assert_eq!(p.source.as_deref(), Some(name.as_str()));
        assert_eq!(
            (p.peak_bytes, p.reserved_bytes, p.at_peak),
            (from_snapshot.peak_bytes, from_snapshot.reserved_bytes, from_snapshot.at_peak)
        );
        assert_eq!(p.sites, from_snapshot.sites);
        assert_eq!(p.curve, from_snapshot.curve);
    }
}

#[test]
fn the_curve_keeps_its_peak_in_a_few_hundred_points() {
    let files = run();
    let p = read(&files[4].0, &files[4].1, 1 << 20).unwrap();
    assert!(p.curve.len() <= ranks::CURVE_POINTS && p.curve.len() > 100, "{}", p.curve.len());
    assert_eq!(p.curve.iter().copied().max(), Some(p.peak_bytes));
    assert_eq!(ranks::downsample_max(&[1, 5, 2, 2, 9, 3, 4], 3), vec![5, 2, 9]);
    assert_eq!(ranks::downsample_max(&[1, 2], 3), vec![1, 2]);
    assert_eq!(ranks::downsample_max(&[], 3), Vec::<u64>::new());
}

#[test]
fn bad_files_say_what_they_are_and_name_the_file() {
    let e = read("run/notes.pickle", b"this is not a pickle", 4).unwrap_err();
    assert!(e.starts_with("run/notes.pickle: "), "{e}");
    let e = read("run/rank9.profile", b"memscape-profile 7\n{}", 4).unwrap_err();
    assert!(e.starts_with("run/rank9.profile: ") && e.contains("version 7"), "{e}");
    let e = read("run/rank9.profile", b"memscape-profile 1\n{\"source\":", 64).unwrap_err();
    assert!(e.contains("damaged"), "{e}");
    let e = read("run/empty.pickle", b"", 4).unwrap_err();
    assert_eq!(e, "run/empty.pickle: the file is empty");
}

#[test]
fn a_folder_reads_its_snapshots_and_profiles_and_skips_the_rest() {
    let paths = [
        "run/rank0.pickle",
        "run/rank0.pickle.profile",
        "run/README.md",
        "run/rank1.PKL.GZ",
        "run/log.txt",
        "run/rank2.json",
    ];
    let (read, skipped) = ranks::run_files(&paths, true);
    // rank0.pickle is stood for by its profile.
    assert_eq!(read, vec![1, 3]);
    assert_eq!(skipped, vec![2, 4, 5]);
    // Files chosen one by one are all read: their contents decide.
    assert_eq!(ranks::run_files(&paths, false), ((0..6).collect(), vec![]));
    assert!(!ranks::opens_as_run(1, false) && !ranks::opens_as_run(2, false));
    assert!(ranks::opens_as_run(3, false) && ranks::opens_as_run(1, true));
}

#[test]
fn fewer_than_three_ranks_have_rows_and_no_outliers() {
    let files = run();
    let slim: Vec<RankProfile> = files[3..5].iter().map(|(n, b)| read(n, b, 1 << 20).unwrap()).collect();
    let o = ranks::overview(&slim);
    assert_eq!(o.ranks.ranks.len(), 2);
    assert!(o.ranks.outliers.is_empty() && o.outlier.iter().all(Option::is_none));
    assert!(ranks::overview(&[]).ranks.ranks.is_empty());
}

#[test]
fn a_run_goes_to_the_workers_in_batches_of_small_files_and_large_files_alone() {
    // 1,000 profiles for 2 workers: batches of 16, in order, every file once.
    let b = ranks::batches(&[None; 1000], 2);
    assert_eq!(b.len(), 63);
    assert!(b.iter().all(|r| r.len() <= ranks::BATCH_FILES));
    assert_eq!(b.iter().flat_map(|r| r.clone()).collect::<Vec<_>>(), (0..1000).collect::<Vec<_>>());
    // Six small files: one each, so that both workers have some.
    assert_eq!(ranks::batches(&[Some(1 << 20); 6], 2), (0..6).map(|k| k..k + 1).collect::<Vec<_>>());
    // A large file alone; small ones together up to SMALL bytes (here 2 files a batch, then 4).
    let mb = |m: u64| Some(m << 20);
    let sizes = [mb(1), None, mb(100), mb(3), mb(2), mb(1), None];
    assert_eq!(ranks::batches(&sizes, 1), vec![0..2, 2..3, 3..4, 4..6, 6..7]);
    let sizes = [mb(1), None, mb(100), mb(3), mb(1), mb(2), None, None, None, None, None, None, None, None];
    assert_eq!(ranks::batches(&sizes, 1), vec![0..2, 2..3, 3..5, 5..9, 9..13, 13..14]);
    assert!(ranks::batches(&[], 2).is_empty());
}
