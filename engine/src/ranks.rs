//! A whole run in the viewer, one file per rank. A pool worker reads one rank's file at a
//! time ([`RankLoad`]: a profile file, or a snapshot read and profiled as `memscape ranks`
//! profiles it) and answers a [`RankProfile`]: only what the overview needs (the figures, the
//! call sites alive at the peak for the outliers' top site, the totals curve downsampled), so
//! the page holds a few KB per rank and no model. [`overview`] is
//! `snapshot::ranks::summarize` on those, the rule the command line uses, so the viewer and
//! `memscape ranks` name the same outliers; [`order`] sorts the rows for the view.

use serde::{Deserialize, Serialize};
use snapshot::categories::{Compiled, N};
use snapshot::diff::{Profile, SiteBytes};
use snapshot::ranks::{self, ProfileFile, RankInput, Ranks};
use snapshot::timeline::{Timeline, TimelineKind};

use crate::Loading;

/// Points of a rank's totals curve kept for its small chart.
pub const CURVE_POINTS: usize = 240;

/// One rank's file, reduced to what the overview draws and summarizes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankProfile {
    /// The file as opened (its path in the folder).
    pub file: String,
    /// For a profile file: the snapshot it was made from.
    pub source: Option<String>,
    /// The device profiled (`Snapshot::default_device`, as `memscape ranks`).
    pub device: u32,
    /// The devices the snapshot records (1 for a profile file).
    pub devices: u32,
    /// The highest bytes allocated at once.
    pub peak_bytes: u64,
    /// Bytes reserved in the final snapshot.
    pub reserved_bytes: u64,
    /// Bytes per category at the peak, in `Category::ALL` order.
    pub at_peak: [u64; N],
    /// Alive at the peak by call site (what an outlier's top site is found from).
    pub sites: Vec<SiteBytes>,
    /// The allocated total over time: at most [`CURVE_POINTS`], each the highest of its
    /// stretch of the profile's curve (so the peak is drawn).
    pub curve: Vec<u64>,
    /// The rank the file says it is (a profiler trace's).
    pub rank: Option<u32>,
}

impl RankProfile {
    /// A profile reduced for the overview.
    pub fn new(file: &str, source: Option<String>, devices: u32, p: Profile) -> RankProfile {
        let totals: Vec<u64> = p.curve.iter().map(|pt| pt.total).collect();
        RankProfile {
            file: file.to_string(),
            source,
            device: p.device,
            devices,
            peak_bytes: p.peak_bytes,
            reserved_bytes: p.reserved_bytes,
            at_peak: p.at_peak,
            sites: p.sites,
            curve: downsample_max(&totals, CURVE_POINTS),
            rank: p.rank,
        }
    }

    /// What `summarize` takes: a profile with the overview's figures and sites (the rest of a
    /// profile is not used by it).
    fn input(&self) -> RankInput {
        let p = Profile {
            device: self.device,
            n_steps: 0,
            peak_bytes: self.peak_bytes,
            peak_step: 0,
            reserved_bytes: self.reserved_bytes,
            at_peak: self.at_peak,
            sites: self.sites.clone(),
            stacks: Vec::new(),
            allocs: Vec::new(),
            segments: Vec::new(),
            curve: Vec::new(),
            iterations: Vec::new(),
            annotations: Vec::new(),
            rank: self.rank,
        };
        RankInput::new(self.file.clone(), self.source.clone(), p)
    }
}

/// At most `points` values, each the highest of its stretch of `values` (stretches of equal
/// length, in order). O(n).
pub fn downsample_max(values: &[u64], points: usize) -> Vec<u64> {
    if values.len() <= points || points == 0 {
        return values.to_vec();
    }
    (0..points)
        .map(|k| {
            let (a, b) =
                (k * values.len() / points, ((k + 1) * values.len() / points).max(k * values.len() / points + 1));
            values[a..b].iter().copied().max().unwrap_or(0)
        })
        .collect()
}

/// Bytes enough to tell a profile file (its magic word and the space after it).
const HEAD: usize = ranks::PROFILE_MAGIC.len() + 1;

/// One rank's file being read: a profile file is kept whole (a few hundred KB), a snapshot is
/// fed to the reader slice by slice; which one is decided by the first bytes.
pub enum RankLoad {
    /// Not yet known: the first bytes (fewer than a profile's header).
    Start {
        /// The file.
        name: String,
        /// Its size.
        total: u64,
        /// The bytes so far.
        head: Vec<u8>,
    },
    /// A profile file's bytes so far.
    Profile {
        /// The file.
        name: String,
        /// Its bytes so far.
        bytes: Vec<u8>,
    },
    /// A snapshot.
    Snapshot(Box<Loading>),
}

impl RankLoad {
    /// Starts reading `name` of `total` bytes.
    pub fn new(name: &str, total: u64) -> RankLoad {
        RankLoad::Start { name: name.to_string(), total, head: Vec::new() }
    }

    /// Feeds the next slice (of any size).
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), String> {
        if let RankLoad::Start { head, .. } = self {
            if head.len() + chunk.len() < HEAD {
                head.extend_from_slice(chunk);
                return Ok(());
            }
            if head.is_empty() {
                return self.decide(chunk);
            }
            let mut head = std::mem::take(head);
            head.extend_from_slice(chunk);
            return self.decide(&head);
        }
        self.feed_known(chunk)
    }

    /// Decides what the file is from its first bytes (all of them when it is shorter than
    /// [`HEAD`]) and feeds them.
    fn decide(&mut self, head: &[u8]) -> Result<(), String> {
        let RankLoad::Start { name, total, .. } = self else { return Ok(()) };
        let name = std::mem::take(name);
        let probe = [head, b"\n"].concat();
        *self = if ranks::is_profile(&probe) {
            RankLoad::Profile { name, bytes: Vec::with_capacity((*total).min(1 << 30) as usize) }
        } else {
            RankLoad::Snapshot(Box::new(Loading::new(&name, *total, 0.0)))
        };
        self.feed_known(head)
    }

    fn feed_known(&mut self, chunk: &[u8]) -> Result<(), String> {
        match self {
            RankLoad::Start { .. } => Ok(()),
            RankLoad::Profile { bytes, .. } => {
                bytes.extend_from_slice(chunk);
                Ok(())
            }
            RankLoad::Snapshot(l) => l.feed(chunk),
        }
    }

    /// The rank's profile: a profile file's, or the snapshot's default device profiled with
    /// the built-in category rules (as `memscape ranks` does). The model is dropped here.
    pub fn finish(self) -> Result<RankProfile, String> {
        let mut this = self;
        if let RankLoad::Start { head, name, .. } = &mut this {
            if head.is_empty() {
                return Err(format!("{name}: the file is empty"));
            }
            let head = std::mem::take(head);
            this.decide(&head)?;
        }
        match this {
            RankLoad::Start { name, .. } => Err(format!("{name}: the file is empty")),
            RankLoad::Profile { name, bytes } => {
                let f = ProfileFile::from_bytes(&bytes).map_err(|e| format!("{name}: {e}"))?;
                Ok(RankProfile::new(&name, Some(f.source), 1, f.profile))
            }
            RankLoad::Snapshot(l) => {
                let name = l.name.clone();
                let loaded = l.loader.finish().map_err(|e| crate::loading::failed(&name, &e))?;
                let snap = &loaded.snapshot;
                let devices = snap.devices().len() as u32;
                let d = snap.default_device().unwrap_or(0);
                let tl = Timeline::build(snap, d, TimelineKind::Blocks);
                let cats = snapshot::categories::analyze(snap, &tl, &Compiled::default());
                let p = snapshot::diff::profile(snap, &tl, &cats);
                Ok(RankProfile::new(&name, None, devices.max(1), p))
            }
        }
    }
}

/// The overview of the ranks read so far, with, for each of its rows (sorted by rank), the
/// index of its [`RankProfile`] in `profiles`.
#[derive(Clone, Debug, PartialEq)]
pub struct Overview {
    /// The summary (rows sorted by rank, median, outliers).
    pub ranks: Ranks,
    /// `profiles` index of each row of `ranks.ranks`.
    pub index: Vec<usize>,
    /// Per row: its outlier, if it is one (index into `ranks.outliers`).
    pub outlier: Vec<Option<usize>>,
    /// The highest point of any rank's curve: the shared scale of the small charts.
    pub max_bytes: u64,
}

/// `snapshot::ranks::summarize` on the ranks read (the command line's rule), and each row's
/// profile and outlier. O(r log r) in ranks plus the call sites summarize copies.
pub fn overview(profiles: &[RankProfile]) -> Overview {
    let inputs: Vec<RankInput> = profiles.iter().map(RankProfile::input).collect();
    let ranks = ranks::summarize(&inputs);
    let index = rows_to_inputs(&ranks, profiles);
    let mut outlier = vec![None; ranks.ranks.len()];
    let mut by_file: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (k, row) in ranks.ranks.iter().enumerate() {
        by_file.entry(row.file.as_str()).or_insert(k);
    }
    for (o, out) in ranks.outliers.iter().enumerate() {
        if let Some(&k) = by_file.get(out.file.as_str()) {
            outlier[k] = Some(o);
        }
    }
    let max_bytes =
        profiles.iter().map(|p| p.curve.iter().copied().max().unwrap_or(0).max(p.peak_bytes)).max().unwrap_or(0);
    Overview { ranks, index, outlier, max_bytes }
}

/// For each row of the summary, the profile it came from: rows are matched by file name, a
/// name given twice taking its profiles in order.
fn rows_to_inputs(ranks: &Ranks, profiles: &[RankProfile]) -> Vec<usize> {
    let mut by_file: std::collections::HashMap<&str, Vec<usize>> = std::collections::HashMap::new();
    for (k, p) in profiles.iter().enumerate().rev() {
        by_file.entry(p.file.as_str()).or_default().push(k);
    }
    ranks.ranks.iter().map(|r| by_file.get_mut(r.file.as_str()).and_then(Vec::pop).unwrap_or(0)).collect()
}

/// How the rows are sorted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SortBy {
    /// By rank number (files without one last, by name): the summary's order.
    Rank,
    /// Highest peak first (then by rank).
    Peak,
}

/// The rows of an overview in the order asked: indices into `ranks.ranks`. O(r log r).
pub fn order(ranks: &Ranks, by: SortBy) -> Vec<usize> {
    let mut rows: Vec<usize> = (0..ranks.ranks.len()).collect();
    if by == SortBy::Peak {
        // Stable: equal peaks keep the rank order.
        rows.sort_by(|&a, &b| ranks.ranks[b].peak_bytes.cmp(&ranks.ranks[a].peak_bytes));
    }
    rows
}

/// Which of the files opened as a run are read: in a folder, the run's files
/// (`snapshot::ranks::is_run_file`) that no profile beside them stands for; files chosen one
/// by one are all read. Returns the indices read and those skipped (neither a snapshot nor a
/// profile by name), each in the order given.
pub fn run_files(paths: &[&str], folder: bool) -> (Vec<usize>, Vec<usize>) {
    if !folder {
        return ((0..paths.len()).collect(), Vec::new());
    }
    let stood_for = ranks::stood_for_by_profiles(paths);
    let mut read = Vec::new();
    let mut skipped = Vec::new();
    for (k, p) in paths.iter().enumerate() {
        if !ranks::is_run_file(p) {
            skipped.push(k);
        } else if !stood_for[k] {
            read.push(k);
        }
    }
    (read, skipped)
}

/// Whether a file is a profile by its name (`*.profile`, in any case): small, and read whole.
pub fn is_profile_name(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".profile")
}

/// Files up to this size are small: several go to a worker in one batch, and a worker reads
/// a few batches at once. A larger file goes alone, and its worker reads nothing else meanwhile
/// (it may take a whole model).
pub const SMALL: u64 = 4 << 20;

/// The most files in a batch.
pub const BATCH_FILES: usize = 16;

/// Batches a worker should get at least, so that the last ones end together.
const BATCHES_EACH: usize = 4;

/// A run's files to read (their sizes in bytes; `None`: a profile, whose size is not asked, as
/// that costs the page a look at the disk) in batches for the pool's `workers`, in order, each
/// batch one message to a worker and one back: consecutive small files, at most
/// [`BATCH_FILES`] and [`SMALL`] bytes together, and few enough for each worker to get
/// [`BATCHES_EACH`]; a large file alone. A message costs the page about as much as a profile's
/// figures, so 1,000 profiles are about 60 messages each way, not 1,000. O(files).
pub fn batches(sizes: &[Option<u64>], workers: usize) -> Vec<std::ops::Range<usize>> {
    let small = |s: &Option<u64>| s.is_none_or(|b| b <= SMALL);
    let n_small = sizes.iter().filter(|s| small(s)).count();
    let per = n_small.div_ceil(workers.max(1) * BATCHES_EACH).clamp(1, BATCH_FILES);
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (k, s) in sizes.iter().enumerate() {
        let b = s.unwrap_or(0);
        let full = k - start == per || bytes + b > SMALL;
        if k > start && (!small(s) || full) {
            out.push(start..k);
            (start, bytes) = (k, 0);
        }
        bytes += b;
        if !small(s) {
            out.push(k..k + 1);
            (start, bytes) = (k + 1, 0);
        }
    }
    if start < sizes.len() {
        out.push(start..sizes.len());
    }
    out
}

/// Whether files chosen together open as a run (the Ranks view) rather than as tabs: a folder
/// always, files chosen one by one when there are three or more (one or two are tabs, to
/// look at or compare).
pub fn opens_as_run(files: usize, folder: bool) -> bool {
    folder || files >= 3
}
