//! A whole run, one file per rank: the profile file format (a [`Profile`] (the diff's) written as a
//! file of its own, so that each rank can be summarized where its snapshot was written), the
//! rank a file name gives ([`rank_from_name`]), and the overview of many ranks with the
//! outliers and the call site that makes each one's difference ([`summarize`]).
//!
//! The outlier rule: with `m` the median of the ranks' peaks (the mean of the two middle ones
//! for an even count) and `MAD` the median of `|peak - m|`, a rank is an outlier when its
//! peak is above `m + max(5% of m, 3 × 1.4826 × MAD)`. `1.4826 × MAD` estimates the standard
//! deviation of normally spread peaks without being moved by the outliers themselves, so the
//! rule is "three standard deviations above the median"; the 5% floor keeps ranks that differ
//! by noise alone (peaks equal to within a few percent, MAD near 0) from being named, and a
//! run split in two (half the ranks high, as pipeline stages can be) has a MAD as large as
//! the split, so neither half is. Fewer than three ranks have no median to stand out from: no
//! outliers. Each outlier is compared with the median rank (the lower middle one by peak), and
//! its top site is the call site alive at the peak that grew most from that rank to it.

use std::fmt;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize, Serializer};

use crate::categories::{Category, N};
use crate::diff::Profile;

/// The first word of a profile file.
pub const PROFILE_MAGIC: &str = "memscape-profile";
/// The version of the profile format this crate writes and reads.
pub const PROFILE_VERSION: u32 = 1;
/// The outlier rule's floor: a share of the median peak.
pub const MIN_EXCESS_SHARE: f64 = 0.05;
/// The outlier rule's multiple of the robust standard deviation (1.4826 × MAD).
pub const SIGMAS: f64 = 3.0;
/// MAD × this estimates the standard deviation of normally spread values.
const MAD_TO_SIGMA: f64 = 1.4826;

/// A profile file: a header line `memscape-profile 1`, then one JSON object of this shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileFile {
    /// The name of the snapshot it was made from (as given to `memscape profile`).
    pub source: String,
    /// What wrote it: `memscape X.Y.Z`.
    pub written_by: String,
    /// The profile of the snapshot's device.
    pub profile: Profile,
}

/// Why bytes are not a profile this version reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProfileError {
    /// It does not start with [`PROFILE_MAGIC`].
    NotAProfile,
    /// A profile of another version of the format.
    Version(String),
    /// The header is right and the JSON is not.
    Invalid(String),
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::NotAProfile => write!(f, "not a memscape profile (it does not start with `{PROFILE_MAGIC}`)"),
            ProfileError::Version(v) => {
                write!(f, "a memscape profile of format version {v}; this memscape reads version {PROFILE_VERSION}")
            }
            ProfileError::Invalid(e) => write!(f, "a damaged memscape profile: {e}"),
        }
    }
}

impl std::error::Error for ProfileError {}

impl ProfileFile {
    /// A profile of `source`, written by this version.
    pub fn new(source: &str, profile: Profile) -> ProfileFile {
        ProfileFile {
            source: source.to_string(),
            written_by: concat!("memscape ", env!("CARGO_PKG_VERSION")).to_string(),
            profile,
        }
    }

    /// The file's bytes: the header line, then the JSON, then a newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("{PROFILE_MAGIC} {PROFILE_VERSION}\n").into_bytes();
        // A derived Serialize of plain data into a Vec cannot fail.
        if serde_json::to_writer(&mut out, self).is_ok() {
            out.push(b'\n');
        }
        out
    }

    /// Reads a profile file; anything else is refused with what it is not.
    pub fn from_bytes(bytes: &[u8]) -> Result<ProfileFile, ProfileError> {
        if !is_profile(bytes) {
            return Err(ProfileError::NotAProfile);
        }
        let line_end = bytes.iter().position(|&b| b == b'\n').unwrap_or(bytes.len());
        let header = String::from_utf8_lossy(&bytes[..line_end]);
        let version = header[PROFILE_MAGIC.len()..].trim();
        if version != PROFILE_VERSION.to_string() {
            let shown: String = version.chars().take(20).collect();
            return Err(ProfileError::Version(if shown.is_empty() { "(none)".into() } else { shown }));
        }
        serde_json::from_slice(bytes.get(line_end..).unwrap_or_default())
            .map_err(|e| ProfileError::Invalid(e.to_string()))
    }
}

/// The file names a folder of a run stands for: snapshots as PyTorch writes them, and
/// profiles. JSON and HTML snapshots are read only when named one by one (a folder of
/// Composer's output holds the same rank as a pickle and as HTML pages).
pub const RUN_SUFFIXES: [&str; 9] = [
    ".pickle",
    ".pkl",
    ".pickle.gz",
    ".pkl.gz",
    ".pickle.zst",
    ".pkl.zst",
    ".profile",
    // `torch.profiler`'s `tensorboard_trace_handler`: `worker_name.<time>.pt.trace.json[.gz]`.
    ".pt.trace.json",
    ".pt.trace.json.gz",
];

/// Whether a file in a folder is one of the run's ([`RUN_SUFFIXES`], in any case).
pub fn is_run_file(name: &str) -> bool {
    let b = name.as_bytes();
    RUN_SUFFIXES.iter().any(|s| b.len() >= s.len() && b[b.len() - s.len()..].eq_ignore_ascii_case(s.as_bytes()))
}

/// Of a folder's run files, those that a profile beside them stands for (`X.profile` beside
/// `X`): they need not be read. `names` are the files' paths; returns a flag per name.
pub fn stood_for_by_profiles(names: &[&str]) -> Vec<bool> {
    let profiled: std::collections::HashSet<&str> = names.iter().filter_map(|n| n.strip_suffix(".profile")).collect();
    names.iter().map(|n| profiled.contains(n)).collect()
}

/// Whether bytes start as a profile file does (any version).
pub fn is_profile(bytes: &[u8]) -> bool {
    bytes.starts_with(PROFILE_MAGIC.as_bytes())
        && matches!(bytes.get(PROFILE_MAGIC.len()), Some(b' ' | b'\n' | b'\r') | None)
}

/// The rank a file's path names, if any. Looked for, in order:
/// 1. in the file name, `rank` followed by digits, directly or after one of `_ - . =`
///    (`rank3`, `rank_3`, `RANK-3`, `oom_rank-3_snapshot.pickle`), not after `local`
///    (`local_rank1` is a rank within a node); the last such in the name;
/// 2. digits at the end of the file name's stem (known extensions removed: `.pickle`,
///    `.pkl`, `.pt`, `.json`, `.html`, `.profile`, `.gz`, `.zst`), after `_`, `-` or `.`
///    (`snapshot_3.pickle`, `mem-12.pickle.gz`), at most six of them, unless the word before
///    them counts something else (`step`, `iter`, `iteration`, `epoch`, `batch`, `pid`);
/// 3. rule 1 on the folder holding the file (`rank3/snapshot.pickle`).
///
/// Frameworks' own names: torchtitan `iteration_10/rank3_memory_snapshot.pickle`, Composer
/// `rank3.12.memory_snapshot.pickle` and `rank3.oom_snapshot.pickle`, Megatron-LM
/// `oom_rank-3_snapshot.pickle`, verl `snapshot_rank3_pid4242.pickle`, `memscape capture`
/// `run.rank3.pickle`. A device number (`gpu3`, `cuda3`) is not a rank.
pub fn rank_from_name(path: &str) -> Option<u32> {
    let mut parts = path.rsplit(['/', '\\']).filter(|p| !p.is_empty());
    let name = parts.next()?;
    keyword_rank(name).or_else(|| trailing_rank(name)).or_else(|| parts.next().and_then(keyword_rank))
}

/// Rule 1 of [`rank_from_name`]. (No allocation: it runs once per rank of a thousand.)
fn keyword_rank(name: &str) -> Option<u32> {
    let b = name.as_bytes();
    let mut found = None;
    for at in 0..b.len().saturating_sub(3) {
        if !b[at..at + 4].eq_ignore_ascii_case(b"rank") {
            continue;
        }
        let before = &b[..at];
        if before.last().is_some_and(u8::is_ascii_alphabetic) {
            continue;
        }
        let trimmed = before.len() - before.iter().rev().take_while(|c| matches!(c, b'_' | b'-' | b'.')).count();
        if before[..trimmed].len() >= 5 && before[trimmed - 5..trimmed].eq_ignore_ascii_case(b"local") {
            continue;
        }
        let mut k = at + 4;
        if matches!(b.get(k), Some(b'_' | b'-' | b'.' | b'=')) {
            k += 1;
        }
        if let Some(r) = digits_at(&b[k..], 9) {
            found = Some(r);
        }
    }
    found
}

/// Rule 2 of [`rank_from_name`].
fn trailing_rank(name: &str) -> Option<u32> {
    const EXTENSIONS: [&[u8]; 8] = [b".gz", b".zst", b".pickle", b".pkl", b".pt", b".json", b".html", b".profile"];
    let ends_with = |s: &[u8], e: &[u8]| s.len() >= e.len() && s[s.len() - e.len()..].eq_ignore_ascii_case(e);
    let mut stem = name.as_bytes();
    while let Some(e) = EXTENSIONS.iter().find(|e| ends_with(stem, e)) {
        stem = &stem[..stem.len() - e.len()];
    }
    let start = stem.len() - stem.iter().rev().take_while(|c| c.is_ascii_digit()).count();
    let digits = &stem[start..];
    if digits.is_empty() || digits.len() > 6 {
        return None;
    }
    let before = stem[..start].strip_suffix(b"_").or_else(|| stem[..start].strip_suffix(b"-"));
    let before = before.or_else(|| stem[..start].strip_suffix(b"."))?;
    let word = &before[before.len() - before.iter().rev().take_while(|c| c.is_ascii_alphabetic()).count()..];
    if [&b"step"[..], b"iter", b"iteration", b"epoch", b"batch", b"pid"].iter().any(|w| word.eq_ignore_ascii_case(w)) {
        return None;
    }
    digits_at(digits, 6)
}

/// The number the bytes start with (at most `most` digits), if they start with a digit.
fn digits_at(text: &[u8], most: usize) -> Option<u32> {
    let n = text.iter().take_while(|c| c.is_ascii_digit()).count();
    if n == 0 || n > most {
        return None;
    }
    text[..n].iter().try_fold(0u32, |acc, &d| acc.checked_mul(10)?.checked_add(u32::from(d - b'0')))
}

/// One rank's file and its profile, as [`summarize`] takes them.
#[derive(Clone, Debug)]
pub struct RankInput {
    /// The file as given (a snapshot or a profile).
    pub file: String,
    /// For a profile file: the snapshot it was made from.
    pub source: Option<String>,
    /// From the file's name, else its source's ([`rank_from_name`]).
    pub rank: Option<u32>,
    /// The profile of the rank's device.
    pub profile: Profile,
}

impl RankInput {
    /// A rank's file, its rank the one it says (a profiler trace's), else read from its name
    /// (or its source's).
    pub fn new(file: String, source: Option<String>, profile: Profile) -> RankInput {
        let named = || rank_from_name(&file).or_else(|| source.as_deref().and_then(rank_from_name));
        let rank = profile.rank.or_else(named);
        RankInput { file, source, rank, profile }
    }
}

/// One rank of the overview.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RankRow {
    /// The file as given.
    pub file: String,
    /// For a profile file: the snapshot it was made from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// From the file's name (or else its source's): see [`rank_from_name`].
    pub rank: Option<u32>,
    /// The device profiled.
    pub device: u32,
    /// The highest bytes allocated at once.
    pub peak_bytes: u64,
    /// Bytes reserved (in segments) in the final snapshot.
    pub reserved_bytes: u64,
    /// Bytes per category at the peak, in [`Category::ALL`] order.
    #[serde(rename = "categories", serialize_with = "by_category_key")]
    pub at_peak: [u64; N],
}

/// A rank whose peak is well above the others'.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Outlier {
    /// The file as given.
    pub file: String,
    /// Its rank, if the name says.
    pub rank: Option<u32>,
    /// Its peak.
    pub peak_bytes: u64,
    /// Its peak minus the median peak.
    pub excess_bytes: u64,
    /// The call site alive at the peak that grew most from the median rank to this one.
    pub top_site: Option<String>,
    /// How many bytes more that site holds here than in the median rank.
    pub top_site_bytes: u64,
}

/// The overview of a run's ranks.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ranks {
    /// Sorted by rank (files without one last, by name).
    pub ranks: Vec<RankRow>,
    /// The median peak (none with fewer than three ranks, as the three below).
    pub median_peak_bytes: Option<u64>,
    /// The median absolute deviation of the peaks from the median.
    pub mad_bytes: Option<u64>,
    /// Peaks above this are outliers.
    pub threshold_bytes: Option<u64>,
    /// The rank the outliers are compared with: the lower middle one by peak.
    pub median_rank: Option<RankRef>,
    /// Largest excess first.
    pub outliers: Vec<Outlier>,
}

impl Ranks {
    /// The overview in a line, as `memscape ranks` and the page's Ranks view say it: the
    /// median, its deviation and the outliers' threshold.
    pub fn headline(&self) -> String {
        use crate::units::format_size as size;
        match (self.median_peak_bytes, self.mad_bytes, self.threshold_bytes) {
            (Some(m), Some(mad), Some(t)) => format!(
                "{} ranks: median peak {} (median deviation {}); outliers peak above {}",
                self.ranks.len(),
                size(m.into()),
                size(mad.into()),
                size(t.into())
            ),
            _ => format!("{} ranks: fewer than three, so no outliers", self.ranks.len()),
        }
    }
}

/// A rank named in the overview.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RankRef {
    /// The file as given.
    pub file: String,
    /// Its rank, if the name says.
    pub rank: Option<u32>,
    /// Its peak.
    pub peak_bytes: u64,
}

fn by_category_key<S: Serializer>(at_peak: &[u64; N], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(Category::ALL.iter().map(|c| (c.key(), at_peak[c.index()])))
}

/// The median of values (sorted here; the mean of the two middle ones for an even count):
/// `None` when empty.
fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some(v[n / 2 - 1] / 2 + v[n / 2] / 2 + (v[n / 2 - 1] % 2 + v[n / 2] % 2) / 2),
    }
}

/// The peak above which a rank is an outlier, given the median and the MAD: see the module's
/// doc.
pub fn outlier_threshold(median_bytes: u64, mad_bytes: u64) -> u64 {
    let floor = median_bytes as f64 * MIN_EXCESS_SHARE;
    let spread = SIGMAS * MAD_TO_SIGMA * mad_bytes as f64;
    median_bytes.saturating_add(floor.max(spread).ceil() as u64)
}

/// The overview of a run: a row per rank, the median rank, and the outliers with the call
/// site that makes each one's difference (the largest growth among the call sites alive at
/// the peak, from the median rank's profile to the outlier's). O(r log r) in ranks, plus
/// O(s) in the call sites of each outlier.
pub fn summarize(inputs: &[RankInput]) -> Ranks {
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    let ranks_unsorted: Vec<Option<u32>> = inputs.iter().map(|i| i.rank).collect();
    order.sort_by(|&x, &y| {
        let key = |k: usize| (ranks_unsorted[k].is_none(), ranks_unsorted[k], &inputs[k].file);
        key(x).cmp(&key(y))
    });
    let ranks: Vec<RankRow> = order
        .iter()
        .map(|&k| {
            let (i, p) = (&inputs[k], &inputs[k].profile);
            RankRow {
                file: i.file.clone(),
                source: i.source.clone(),
                rank: ranks_unsorted[k],
                device: p.device,
                peak_bytes: p.peak_bytes,
                reserved_bytes: p.reserved_bytes,
                at_peak: p.at_peak,
            }
        })
        .collect();
    let mut out = Ranks {
        ranks,
        median_peak_bytes: None,
        mad_bytes: None,
        threshold_bytes: None,
        median_rank: None,
        outliers: Vec::new(),
    };
    if inputs.len() < 3 {
        return out;
    }
    let peaks: Vec<u64> = inputs.iter().map(|i| i.profile.peak_bytes).collect();
    let Some(m) = median(peaks.clone()) else { return out };
    let mad = median(peaks.iter().map(|p| p.abs_diff(m)).collect()).unwrap_or(0);
    let threshold = outlier_threshold(m, mad);
    // The median rank: the lower middle by peak (ties in the order of the rows).
    let mut by_peak = order.clone();
    by_peak.sort_by_key(|&k| peaks[k]);
    let mid = by_peak[(by_peak.len() - 1) / 2];
    // The median rank's bytes by call site, once for every outlier.
    let base: FxHashMap<&str, u64> = inputs[mid].profile.sites.iter().map(|s| (s.site.as_str(), s.bytes)).collect();
    for &k in order.iter().filter(|&&k| peaks[k] > threshold) {
        // The largest growth (the first by name among equals); a site only in the median rank
        // shrank.
        let top = inputs[k]
            .profile
            .sites
            .iter()
            .map(|s| (s.bytes.saturating_sub(base.get(s.site.as_str()).copied().unwrap_or(0)), &s.site))
            .filter(|&(grew, _)| grew > 0)
            .max_by(|x, y| x.0.cmp(&y.0).then_with(|| y.1.cmp(x.1)));
        out.outliers.push(Outlier {
            file: inputs[k].file.clone(),
            rank: ranks_unsorted[k],
            peak_bytes: peaks[k],
            excess_bytes: peaks[k] - m,
            top_site_bytes: top.map_or(0, |t| t.0),
            top_site: top.map(|t| t.1.clone()),
        });
    }
    out.outliers.sort_by(|x, y| y.excess_bytes.cmp(&x.excess_bytes).then_with(|| x.file.cmp(&y.file)));
    out.median_peak_bytes = Some(m);
    out.mad_bytes = Some(mad);
    out.threshold_bytes = Some(threshold);
    out.median_rank =
        Some(RankRef { file: inputs[mid].file.clone(), rank: ranks_unsorted[mid], peak_bytes: peaks[mid] });
    out
}
