//! A whole run: ranks from file names, the profile file format, and the outliers among
//! generated ranks (one with a planted extra activation).

use snapshot::categories::{analyze, Category, Compiled};
use snapshot::diff::{profile, Profile, SiteBytes};
use snapshot::ranks::{
    outlier_threshold, rank_from_name, summarize, ProfileError, ProfileFile, RankInput, PROFILE_VERSION,
};
use snapshot::synth::{generate, Options, EXTRA_SITE};
use snapshot::timeline::{Timeline, TimelineKind};

/// A rank of a small training loop: the seed varies the run, `extra` plants an activation.
fn rank_profile(seed: u64, extra: u64) -> Profile {
    let opts = Options {
        target_entries: 6_000,
        layers: 4,
        hidden: 1024,
        tokens: 16384,
        seed,
        extra_activation_bytes: extra,
        ..Default::default()
    };
    let snap = snapshot::read(&snapshot::write::to_pickle_bytes(&generate(&opts))).unwrap().snapshot;
    let tl = Timeline::build(&snap, 0, TimelineKind::Blocks);
    let cats = analyze(&snap, &tl, &Compiled::default());
    profile(&snap, &tl, &cats)
}

fn input(file: &str, profile: Profile) -> RankInput {
    RankInput::new(file.into(), None, profile)
}

#[track_caller]
fn check_rank(name: &str, expected: Option<u32>) {
    assert_eq!(rank_from_name(name), expected, "{name}");
}

#[test]
fn ranks_from_the_names_frameworks_write() {
    // The word `rank`, with or without a separator, in any case.
    check_rank("rank3.pickle", Some(3));
    check_rank("rank_3.pickle", Some(3));
    check_rank("rank-3.pickle", Some(3));
    check_rank("RANK=12.pkl", Some(12));
    check_rank("/runs/job/snap.Rank7.pickle.gz", Some(7));
    // torchtitan, Composer, Megatron-LM, verl, memscape capture.
    check_rank("memory_snapshot/iteration_10/rank5_memory_snapshot.pickle", Some(5));
    check_rank("iteration_2_exit/rank0_memory_snapshot.pickle", Some(0));
    check_rank("torch_traces/rank3.12.memory_snapshot.pickle", Some(3));
    check_rank("rank3.oom_snapshot.pickle", Some(3));
    check_rank("rank3.oom_trace_plot.html", Some(3));
    check_rank("oom_rank-6_snapshot.pickle", Some(6));
    check_rank("actor_rank2_pid41712.pickle", Some(2));
    check_rank("memory_snapshot_rank0_step6.pkl", Some(0));
    check_rank("run.rank15.pickle", Some(15));
    // A number at the end of the stem.
    check_rank("snapshot_3.pickle", Some(3));
    check_rank("mem-12.pickle.zst", Some(12));
    check_rank("trace.4.json", Some(4));
    check_rank("snap_3.pickle.profile", Some(3));
    // The folder, when the file does not say.
    check_rank("run/rank_4/snapshot.pickle", Some(4));
    check_rank("run/rank_4/snapshot_2.pickle", Some(2));
    // Not ranks: no number, counters of something else, devices, pids, local ranks, words.
    check_rank("snapshot.pickle", None);
    check_rank("snapshot_step_100.pickle", None);
    check_rank("snap-iter-3.pickle", None);
    check_rank("epoch_2.pickle", None);
    check_rank("run.pid4242.pickle", None);
    check_rank("memory_snapshot_gpu3_label.pickle", None);
    check_rank("snap_local_rank1.pickle", None);
    check_rank("rank5_local_rank1.pickle", Some(5));
    check_rank("frank3.pickle", None);
    check_rank("ranking.pickle", None);
    check_rank("snapshot_1754338790.pickle", None);
    check_rank("rank99999999999.pickle", None);
    check_rank("", None);
    check_rank("/", None);
    check_rank("ranké3.pickle", None);
}

#[test]
fn a_profile_file_reads_back_equal_and_other_files_are_refused() {
    let p = rank_profile(1, 0);
    let file = ProfileFile::new("run/rank3.pickle", p.clone());
    let bytes = file.to_bytes();
    assert!(bytes.starts_with(format!("memscape-profile {PROFILE_VERSION}\n").as_bytes()));
    let back = ProfileFile::from_bytes(&bytes).unwrap();
    assert_eq!(back, file);
    assert_eq!(back.profile, p);
    assert!(back.written_by.starts_with("memscape "));
    // What `ranks` needs is in it.
    assert!(p.peak_bytes > 0 && p.reserved_bytes >= p.peak_bytes);
    assert_eq!(p.at_peak.iter().sum::<u64>(), p.peak_bytes);
    assert!(!p.sites.is_empty());

    let pickle = snapshot::write::to_pickle_bytes(&generate(&Options { target_entries: 200, ..Default::default() }));
    assert_eq!(ProfileFile::from_bytes(&pickle), Err(ProfileError::NotAProfile));
    assert_eq!(ProfileFile::from_bytes(b""), Err(ProfileError::NotAProfile));
    assert_eq!(ProfileFile::from_bytes(b"memscape-profiles 1\n{}"), Err(ProfileError::NotAProfile));
    let future = [b"memscape-profile 2\n".as_slice(), &bytes[19..]].concat();
    let e = ProfileFile::from_bytes(&future).unwrap_err();
    assert_eq!(e, ProfileError::Version("2".into()));
    assert!(e.to_string().contains("version 2; this memscape reads version 1"), "{e}");
    let cut = &bytes[..bytes.len() / 2];
    let e = ProfileFile::from_bytes(cut).unwrap_err();
    assert!(matches!(e, ProfileError::Invalid(_)), "{e:?}");
    assert!(e.to_string().starts_with("a damaged memscape profile: "), "{e}");
    assert!(ProfileFile::from_bytes(b"memscape-profile\n").is_err());

    // A profile written before the category for memory outside PyTorch's allocator came (8
    // figures) reads with 0 there; one with more figures than categories is damaged.
    let mut json: serde_json::Value = serde_json::from_slice(&bytes[19..]).unwrap();
    let at_peak = json["profile"]["at_peak"].as_array_mut().unwrap();
    assert_eq!(at_peak.pop(), Some(0.into()));
    let older = [b"memscape-profile 1\n".as_slice(), &serde_json::to_vec(&json).unwrap()].concat();
    assert_eq!(ProfileFile::from_bytes(&older).unwrap().profile, p);
    let at_peak = json["profile"]["at_peak"].as_array_mut().unwrap();
    at_peak.extend([0.into(), 0.into()]);
    let wider = [b"memscape-profile 1\n".as_slice(), &serde_json::to_vec(&json).unwrap()].concat();
    assert!(matches!(ProfileFile::from_bytes(&wider), Err(ProfileError::Invalid(_))));
}

#[test]
fn the_outlier_rule_is_three_robust_deviations_or_five_percent_above_the_median() {
    // No spread: the 5% floor.
    assert_eq!(outlier_threshold(1000, 0), 1050);
    // 3 x 1.4826 x 100 = 444.78, rounded up.
    assert_eq!(outlier_threshold(1000, 100), 1445);
    assert_eq!(outlier_threshold(0, 0), 0);
    assert_eq!(outlier_threshold(u64::MAX, 0), u64::MAX);

    let base = rank_profile(1, 0);
    let with = |peak: u64, extra_site: Option<(&str, u64)>| {
        let mut p = base.clone();
        p.peak_bytes = peak;
        if let Some((site, bytes)) = extra_site {
            p.sites.push(SiteBytes { site: site.into(), bytes, count: 1 });
        }
        p
    };
    let gib = 1u64 << 30;
    // Peaks within 5% of each other: none stands out.
    let close: Vec<RankInput> =
        (0..8).map(|k| input(&format!("rank{k}.pickle"), with(10 * gib + k * gib / 50, None))).collect();
    let r = summarize(&close);
    assert!(r.outliers.is_empty(), "{:?}", r.outliers);
    // The median of 8 is the mean of the 4th and 5th; the median rank the 4th.
    assert_eq!(r.median_peak_bytes, Some(10 * gib + (3 * gib / 50 + 4 * gib / 50) / 2));
    let m = r.median_rank.unwrap();
    assert_eq!((m.rank, m.peak_bytes), (Some(3), 10 * gib + 3 * gib / 50));
    // Two ranks well above: both, largest excess first, each with its own site.
    let mut two = close.clone();
    two[2].profile = with(12 * gib, Some(("a.py:1:f", 2 * gib)));
    two[6].profile = with(13 * gib, Some(("b.py:2:g", 3 * gib)));
    let r = summarize(&two);
    let got: Vec<(Option<u32>, Option<&str>, u64)> =
        r.outliers.iter().map(|o| (o.rank, o.top_site.as_deref(), o.top_site_bytes)).collect();
    assert_eq!(got, [(Some(6), Some("b.py:2:g"), 3 * gib), (Some(2), Some("a.py:1:f"), 2 * gib)]);
    let m = r.median_peak_bytes.unwrap();
    assert_eq!(r.outliers[0].excess_bytes, 13 * gib - m);
    assert_eq!(r.threshold_bytes, Some(outlier_threshold(m, r.mad_bytes.unwrap())));
    // Just above the threshold is an outlier, at it is not. (The highest rank moving by a byte
    // moves neither the median nor the MAD.)
    let mut edge = close.clone();
    edge[0].profile = with(20 * gib, None);
    let t = summarize(&edge).threshold_bytes.unwrap();
    for (peak, named) in [(t, 0), (t + 1, 1)] {
        edge[0].profile = with(peak, None);
        assert_eq!(summarize(&edge).outliers.len(), named, "peak {peak}, threshold {t}");
    }
    // Half the ranks high (a pipeline's first stages, say): the spread is the run's, no outlier.
    let halves: Vec<RankInput> = (0..8)
        .map(|k| input(&format!("rank{k}.pickle"), with(if k < 4 { 20 * gib } else { 10 * gib }, None)))
        .collect();
    assert!(summarize(&halves).outliers.is_empty());
    // Fewer than three ranks: nothing to stand out from.
    let pair = [input("rank0.pickle", with(gib, None)), input("rank1.pickle", with(9 * gib, None))];
    let r = summarize(&pair);
    assert!(r.outliers.is_empty() && r.median_rank.is_none() && r.threshold_bytes.is_none());
    assert_eq!(r.ranks.len(), 2);
    assert_eq!(r.headline(), "2 ranks: fewer than three, so no outliers");
    let m = summarize(&close).median_peak_bytes.unwrap();
    assert!(summarize(&close)
        .headline()
        .starts_with(&format!("8 ranks: median peak {} (median deviation ", snapshot::stats::format_size(m.into()))));
    assert!(summarize(&[]).ranks.is_empty());
}

#[test]
fn rows_are_sorted_by_rank_and_carry_the_profile_figures() {
    let p = rank_profile(2, 0);
    let inputs = [
        input("b/snapshot.pickle", p.clone()),
        input("rank10.pickle", p.clone()),
        input("rank2.pickle", p.clone()),
        RankInput::new("x.profile".into(), Some("rank_7.pickle".into()), p.clone()),
        input("a/snapshot.pickle", p.clone()),
    ];
    let r = summarize(&inputs);
    let order: Vec<(&str, Option<u32>)> = r.ranks.iter().map(|row| (row.file.as_str(), row.rank)).collect();
    assert_eq!(
        order,
        [
            ("rank2.pickle", Some(2)),
            ("x.profile", Some(7)),
            ("rank10.pickle", Some(10)),
            ("a/snapshot.pickle", None),
            ("b/snapshot.pickle", None)
        ]
    );
    let row = &r.ranks[0];
    assert_eq!(
        (row.device, row.peak_bytes, row.reserved_bytes, row.at_peak),
        (0, p.peak_bytes, p.reserved_bytes, p.at_peak)
    );
    let json = serde_json::to_value(row).unwrap();
    assert_eq!(json["categories"]["activation"], p.at_peak[Category::Activation.index()]);
    assert_eq!(json["categories"].as_object().unwrap().len(), Category::ALL.len());
    assert!(json.get("source").is_none());
    assert_eq!(serde_json::to_value(&r.ranks[1]).unwrap()["source"], "rank_7.pickle");
}

/// The acceptance test of issue 18 in the core: six ranks of different seeds, one with an
/// extra activation; exactly that rank is the outlier, and its top site is the planted one.
#[test]
fn a_planted_extra_activation_makes_its_rank_the_only_outlier() {
    let extra = 256 << 20;
    let inputs: Vec<RankInput> = (0..6u64)
        .map(|r| input(&format!("run/rank{r}.pickle"), rank_profile(10 + r, if r == 4 { extra } else { 0 })))
        .collect();
    let peaks: Vec<u64> = inputs.iter().map(|i| i.profile.peak_bytes).collect();
    let r = summarize(&inputs);
    assert_eq!(r.outliers.len(), 1, "peaks {peaks:?}, threshold {:?}: {:?}", r.threshold_bytes, r.outliers);
    let o = &r.outliers[0];
    assert_eq!((o.rank, o.file.as_str()), (Some(4), "run/rank4.pickle"));
    assert_eq!(o.top_site.as_deref(), Some(EXTRA_SITE));
    assert_eq!(o.top_site_bytes, extra);
    assert_eq!(o.excess_bytes, o.peak_bytes - r.median_peak_bytes.unwrap());
    assert!(o.excess_bytes > extra / 2, "{} above the median", o.excess_bytes);
    assert_ne!(r.median_rank.as_ref().unwrap().rank, Some(4));
}
