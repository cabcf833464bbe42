//! What changed between two runs. Each snapshot is first reduced to a [`Profile`] (small,
//! serializable: the viewer computes it in the worker holding the file and sends it to the
//! worker holding the other), then [`diff`] compares two profiles: peaks, categories at each
//! peak, call sites alive at the peak, allocations in one run and not the other, segments
//! only in one, and both totals on one aligned axis.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::categories::{Categories, Category, N};
use crate::frames::stack_lines;
use crate::model::{BlockState, Snapshot};
pub use crate::sites::site_name;
use crate::sites::Charge;
use crate::timeline::{Origin, Timeline};

/// Points of a profile's totals curve (the highest total of each bucket of steps).
pub const CURVE: usize = 2000;

/// Bytes of one call site (or whole stack) alive at the peak.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteBytes {
    pub site: String,
    pub bytes: u64,
    pub count: u32,
}

/// A segment of the final snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentKey {
    pub address: u64,
    pub size: u64,
    pub stream: i64,
    /// The call site of its largest active block (or of the segment), if known.
    pub site: String,
}

/// One sample of the totals curve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    pub step: u32,
    pub time_us: Option<i64>,
    pub total: u64,
}

/// One run, reduced to what a diff compares.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    pub device: u32,
    pub n_steps: u32,
    pub peak_bytes: u64,
    pub peak_step: u32,
    /// Reserved bytes of the device in the final snapshot.
    pub reserved_bytes: u64,
    /// Bytes per category at the peak (in [`Category::ALL`] order). Read from profiles
    /// written before a category was added (new ones come last) with 0 for the new ones.
    /// Written as a list (not a fixed-size tuple), so that formats that are not
    /// self-describing (postcard, between the page's workers) read it back the same way.
    #[serde(serialize_with = "category_list", deserialize_with = "category_bytes")]
    pub at_peak: [u64; N],
    /// Alive at the peak by call site (first non-library frame), largest first.
    pub sites: Vec<SiteBytes>,
    /// Alive at the peak by whole stack (filtered lines joined by newlines), largest first.
    pub stacks: Vec<SiteBytes>,
    /// Allocations of the trace by (call site, requested bytes): how many.
    pub allocs: Vec<(String, u64, u32)>,
    pub segments: Vec<SegmentKey>,
    pub curve: Vec<Point>,
    /// First step of each iteration.
    pub iterations: Vec<u32>,
    /// `record_function` STARTs: name and step.
    pub annotations: Vec<(String, u32)>,
    /// The rank the file says it is (a profiler trace's `distributedInfo`); files name theirs
    /// otherwise ([`crate::ranks::rank_from_name`]). Absent from profiles written before it.
    #[serde(default)]
    pub rank: Option<u32>,
}

/// Bytes per category as a list.
fn category_list<S: serde::Serializer>(b: &[u64; N], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(b.iter())
}

/// Bytes per category, from a list of at most [`N`] (fewer: an older memscape's categories,
/// the ones added since at 0).
fn category_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[u64; N], D::Error> {
    let v: Vec<u64> = Vec::deserialize(d)?;
    if v.len() > N {
        return Err(serde::de::Error::invalid_length(v.len(), &"at most one figure per category"));
    }
    let mut out = [0; N];
    out[..v.len()].copy_from_slice(&v);
    Ok(out)
}

/// Call sites by charge, each named once.
#[derive(Default)]
struct Sites {
    of_charge: FxHashMap<Charge, u32>,
    ids: FxHashMap<String, u32>,
    names: Vec<String>,
}

impl Sites {
    fn id(&mut self, snap: &Snapshot, charge: Charge) -> u32 {
        if let Some(&k) = self.of_charge.get(&charge) {
            return k;
        }
        let name = charge.site(snap);
        let k = self.named(&name);
        self.of_charge.insert(charge, k);
        k
    }

    fn named(&mut self, name: &str) -> u32 {
        if let Some(&k) = self.ids.get(name) {
            return k;
        }
        self.names.push(name.to_string());
        let k = (self.names.len() - 1) as u32;
        self.ids.insert(name.to_string(), k);
        k
    }
}

fn group(rows: FxHashMap<String, (u64, u32)>) -> Vec<SiteBytes> {
    let mut v: Vec<SiteBytes> =
        rows.into_iter().map(|(site, (bytes, count))| SiteBytes { site, bytes, count }).collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    v
}

/// Reduces one device of a snapshot (its blocks timeline `tl` and categories `cats`).
/// A call site (or a whole stack, a line per frame) with each file named by its path inside
/// its project rather than on the machine that ran it: after `site-packages/`, or else its
/// last two parts (`cs336_basics/model.py:39:forward`). Two runs of the same code from
/// different folders, or a prediction and the recording it predicts, then name their call
/// sites alike.
pub fn portable_site(site: &str) -> String {
    site.lines().map(portable_line).collect::<Vec<_>>().join("\n")
}

fn portable_line(line: &str) -> String {
    line.split(' ').map(portable_token).collect::<Vec<_>>().join(" ")
}

/// `path:line:name` with the path made portable; anything else as it is.
fn portable_token(token: &str) -> String {
    let mut parts = token.rsplitn(3, ':');
    let (Some(name), Some(line), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
        return token.to_string();
    };
    if line.is_empty() || !line.bytes().all(|b| b.is_ascii_digit()) || !(path.contains('/') || path.contains('\\')) {
        return token.to_string();
    }
    let path = path.replace('\\', "/");
    let short = match path.rfind("site-packages/") {
        Some(i) => &path[i + "site-packages/".len()..],
        None => {
            let cut = path.rmatch_indices('/').nth(1).map_or(0, |(i, _)| i + 1);
            &path[cut..]
        }
    };
    format!("{short}:{line}:{name}")
}

impl Profile {
    /// This profile with its call sites made portable ([`portable_site`]), merging those that
    /// then name the same site.
    pub fn portable(mut self) -> Profile {
        let merge = |rows: Vec<SiteBytes>| {
            let mut by: FxHashMap<String, (u64, u32)> = FxHashMap::default();
            for r in rows {
                let e = by.entry(portable_site(&r.site)).or_default();
                e.0 += r.bytes;
                e.1 += r.count;
            }
            group(by)
        };
        self.sites = merge(std::mem::take(&mut self.sites));
        self.stacks = merge(std::mem::take(&mut self.stacks));
        let mut allocs: FxHashMap<(String, u64), u32> = FxHashMap::default();
        for (site, bytes, n) in std::mem::take(&mut self.allocs) {
            *allocs.entry((portable_site(&site), bytes)).or_default() += n;
        }
        let mut allocs: Vec<(String, u64, u32)> = allocs.into_iter().map(|((s, b), n)| (s, b, n)).collect();
        allocs.sort();
        self.allocs = allocs;
        self
    }
}

pub fn profile(snap: &Snapshot, tl: &Timeline, cats: &Categories) -> Profile {
    let device = tl.device();
    let trace = snap.trace(device);
    let els = tl.elements();
    let mut names = Sites::default();
    let mut sites: FxHashMap<String, (u64, u32)> = FxHashMap::default();
    let mut stacks: FxHashMap<String, (u64, u32)> = FxHashMap::default();
    let mut stack_text: FxHashMap<Charge, String> = FxHashMap::default();
    let peak_step = tl.peak_step();
    if tl.n_steps() > 0 || !els.is_empty() {
        for id in tl.live_at(peak_step, 0) {
            let e = &els[id as usize];
            let charge = Charge::of(snap, tl.device(), e);
            let site = names.id(snap, charge);
            let s = sites.entry(names.names[site as usize].clone()).or_default();
            s.0 = s.0.saturating_add(e.size);
            s.1 += 1;
            let key = stack_text.entry(charge).or_insert_with(|| match charge {
                Charge::Stack(st) => stack_lines(snap, st, true).join("\n"),
                _ => charge.site(snap),
            });
            let s = stacks.entry(key.clone()).or_default();
            s.0 = s.0.saturating_add(e.size);
            s.1 += 1;
        }
    }
    let mut allocs: FxHashMap<(u32, u64), u32> = FxHashMap::default();
    for e in els.iter().filter(|e| e.origin == Origin::Traced) {
        *allocs.entry((names.id(snap, Charge::of(snap, tl.device(), e)), e.size)).or_default() += 1;
    }
    let mut allocs: Vec<(String, u64, u32)> =
        allocs.into_iter().map(|((s, b), n)| (names.names[s as usize].clone(), b, n)).collect();
    allocs.sort();
    let segments = snap
        .segments
        .iter()
        .filter(|s| s.device == device as i64)
        .map(|s| {
            let largest = s
                .blocks
                .iter()
                .filter(|b| b.state != BlockState::Inactive)
                .max_by_key(|b| b.size)
                .and_then(|b| b.stack())
                .or(s.frames);
            SegmentKey {
                address: s.address,
                size: s.total_size,
                stream: s.stream,
                site: {
                    let k = names.id(snap, largest.map_or(Charge::NoStack, Charge::Stack));
                    names.names[k as usize].clone()
                },
            }
        })
        .collect();
    let n = tl.n_steps();
    let buckets = (n as usize).clamp(1, CURVE);
    let curve = (0..buckets)
        .filter_map(|k| {
            let lo = (k as u64 * u64::from(n) / buckets as u64) as u32;
            let hi = ((k as u64 + 1) * u64::from(n) / buckets as u64) as u32;
            (hi > lo).then(|| {
                let step = tl.argmax_in(lo, hi);
                Point {
                    step,
                    time_us: tl.step_entry(step).and_then(|e| trace.time_us(e as usize)),
                    total: tl.totals()[step as usize],
                }
            })
        })
        .collect();
    let times: Vec<i64> =
        (0..n).map(|s| tl.step_entry(s).and_then(|e| trace.time_us(e as usize)).unwrap_or(i64::MIN)).collect();
    let annotations = if trace.has_time() {
        snap.external_annotations
            .iter()
            .flatten()
            .filter(|a| a.on_device(device) && snap.str(a.stage) == "START")
            .map(|a| (snap.str(a.name).to_string(), times.partition_point(|&x| x < a.time_us) as u32))
            .collect()
    } else {
        Vec::new()
    };
    Profile {
        device: device as u32,
        n_steps: n,
        peak_bytes: tl.peak_bytes(),
        peak_step,
        reserved_bytes: (snap.segments.iter().filter(|s| s.device == device as i64))
            .map(|s| s.total_size)
            .fold(0, u64::saturating_add),
        at_peak: cats.at_peak,
        sites: group(sites),
        stacks: group(stacks),
        allocs,
        segments,
        curve,
        iterations: cats.iterations.iter().map(|it| it.start).collect(),
        annotations,
        rank: snap.profiler_info().and_then(|p| u32::try_from(p.rank?).ok()),
    }
}

/// How the two runs are put on one x axis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Align {
    /// Iteration k of A over iteration k of B (fraction within the iteration).
    #[default]
    Iteration,
    /// The k-th START of each annotation name in A over the same in B.
    Annotation,
    /// Event index (timeline step).
    Event,
    /// Microseconds since each trace's first event.
    Time,
}

impl Align {
    /// All, in menu order.
    pub const ALL: [Align; 4] = [Align::Iteration, Align::Annotation, Align::Event, Align::Time];

    /// The JSON / command-line name.
    pub fn key(self) -> &'static str {
        match self {
            Align::Iteration => "iteration",
            Align::Annotation => "annotation",
            Align::Event => "event",
            Align::Time => "time",
        }
    }

    /// Reads a key.
    pub fn parse(s: &str) -> Option<Align> {
        Align::ALL.into_iter().find(|a| a.key() == s)
    }
}

/// How call sites are keyed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteMode {
    /// The first frame of the user's own code.
    #[default]
    Frame,
    /// The whole (filtered) stack.
    Stack,
}

/// A call site alive at the peaks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteDelta {
    pub site: String,
    pub a: u64,
    pub b: u64,
    pub count_a: u32,
    pub count_b: u32,
}

impl SiteDelta {
    /// `b - a`.
    pub fn delta(&self) -> i128 {
        i128::from(self.b) - i128::from(self.a)
    }
}

/// Allocations of one (call site, size) made a different number of times.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocDelta {
    pub site: String,
    pub size: u64,
    pub count_a: u32,
    pub count_b: u32,
}

/// One x of the aligned curves.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Aligned {
    pub x: f64,
    pub a: Option<u64>,
    pub b: Option<u64>,
    /// B - A of the highest totals in this bucket and its two neighbours: the two runs' peaks
    /// rarely fall in the same bucket, and a plain difference of the buckets would show that
    /// shift as spikes.
    pub delta: Option<i128>,
}

/// What changed from A to B.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    pub align: Align,
    /// The alignment asked for was not possible (no time, no iterations, no shared
    /// annotation): this one was used instead, and why.
    pub align_note: Option<String>,
    pub sites_by: SiteMode,
    pub peak: (u64, u64),
    pub reserved: (u64, u64),
    /// Per category at each peak: (category, A, B).
    pub categories: Vec<(Category, u64, u64)>,
    /// Alive at the peaks, largest change first (only those that changed).
    pub sites: Vec<SiteDelta>,
    /// Allocations made a different number of times, largest bytes first.
    pub allocs: Vec<AllocDelta>,
    pub segments_only_a: Vec<SegmentKey>,
    pub segments_only_b: Vec<SegmentKey>,
    /// Both totals on one axis.
    pub curve: Vec<Aligned>,
    /// What x means.
    pub x_label: String,
}

/// Rows kept in each table.
pub const ROWS: usize = 200;

/// Piecewise-linear map through anchor pairs (sorted by the first coordinate).
fn through(anchors: &[(f64, f64)], x: f64) -> f64 {
    match anchors.partition_point(|a| a.0 <= x) {
        0 => anchors.first().map_or(x, |a| x - a.0 + a.1),
        k if k == anchors.len() => {
            let a = anchors[k - 1];
            x - a.0 + a.1
        }
        k => {
            let (p, q) = (anchors[k - 1], anchors[k]);
            if q.0 > p.0 {
                p.1 + (x - p.0) * (q.1 - p.1) / (q.0 - p.0)
            } else {
                p.1
            }
        }
    }
}

/// x of each curve point of `p` under an alignment, or why it is not possible.
fn xs(p: &Profile, align: Align, other: &Profile) -> Result<Vec<f64>, String> {
    match align {
        Align::Event => Ok(p.curve.iter().map(|c| f64::from(c.step)).collect()),
        Align::Time => {
            let t0 = p.curve.iter().find_map(|c| c.time_us);
            match t0 {
                Some(t0) if p.curve.iter().all(|c| c.time_us.is_some()) => {
                    Ok(p.curve.iter().map(|c| (c.time_us.unwrap_or(t0) - t0) as f64).collect())
                }
                _ => Err("a trace has no time_us".into()),
            }
        }
        Align::Iteration => {
            if p.iterations.len() < 2 && other.iterations.len() < 2 {
                return Err("no iterations were found".into());
            }
            let mut anchors: Vec<(f64, f64)> =
                p.iterations.iter().enumerate().map(|(k, &s)| (f64::from(s), k as f64)).collect();
            anchors.push((f64::from(p.n_steps), p.iterations.len() as f64));
            Ok(p.curve.iter().map(|c| through(&anchors, f64::from(c.step))).collect())
        }
        Align::Annotation => {
            let anchors = shared_annotations(p, other);
            if anchors.is_empty() {
                return Err("the two runs share no annotation".into());
            }
            let mut pairs: Vec<(f64, f64)> = anchors.iter().map(|&(mine, k)| (f64::from(mine), k as f64)).collect();
            pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
            Ok(p.curve.iter().map(|c| through(&pairs, f64::from(c.step))).collect())
        }
    }
}

/// Steps of the annotation STARTs that both runs have (name and occurrence), each with its
/// rank among the shared ones, which is the common x.
fn shared_annotations(p: &Profile, other: &Profile) -> Vec<(u32, usize)> {
    let keys = |q: &Profile| -> FxHashMap<(String, usize), u32> {
        let mut seen: FxHashMap<&str, usize> = FxHashMap::default();
        q.annotations
            .iter()
            .map(|(name, step)| {
                let k = seen.entry(name).or_default();
                *k += 1;
                ((name.clone(), *k), *step)
            })
            .collect()
    };
    let (mine, theirs) = (keys(p), keys(other));
    let mut shared: Vec<((String, usize), u32)> = mine.into_iter().filter(|(k, _)| theirs.contains_key(k)).collect();
    shared.sort_by_key(|(k, s)| (*s, k.clone()));
    shared.into_iter().enumerate().map(|(rank, (_, s))| (s, rank)).collect()
}

fn resample(points: &[(f64, u64)], lo: f64, hi: f64, k: usize) -> Vec<Option<u64>> {
    let mut out = vec![None; k];
    let w = (hi - lo) / k as f64;
    for &(x, v) in points {
        let j = if w > 0.0 { (((x - lo) / w) as usize).min(k - 1) } else { 0 };
        out[j] = Some(out[j].map_or(v, |o: u64| o.max(v)));
    }
    let last_x = points.iter().map(|p| p.0).fold(f64::MIN, f64::max);
    let mut carry = None;
    for (j, o) in out.iter_mut().enumerate() {
        if o.is_some() {
            carry = *o;
        } else if lo + w * j as f64 <= last_x {
            *o = carry;
        }
    }
    out
}

/// Compares two runs.
pub fn diff(a: &Profile, b: &Profile, align: Align, sites_by: SiteMode) -> Diff {
    // Alignment, falling back to event index.
    let (mut used, mut note) = (align, None);
    let (xa, xb) = match (xs(a, align, b), xs(b, align, a)) {
        (Ok(xa), Ok(xb)) => (xa, xb),
        (Err(e), _) | (_, Err(e)) => {
            note = Some(format!("aligned by event index: {e}"));
            used = Align::Event;
            (xs(a, Align::Event, b).unwrap_or_default(), xs(b, Align::Event, a).unwrap_or_default())
        }
    };
    let pa: Vec<(f64, u64)> = xa.iter().zip(&a.curve).map(|(&x, c)| (x, c.total)).collect();
    let pb: Vec<(f64, u64)> = xb.iter().zip(&b.curve).map(|(&x, c)| (x, c.total)).collect();
    let lo = pa.iter().chain(&pb).map(|p| p.0).fold(f64::INFINITY, f64::min);
    let hi = pa.iter().chain(&pb).map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let curve = if lo.is_finite() && hi.is_finite() {
        let k = CURVE / 2;
        let hi = if hi > lo { hi } else { lo + 1.0 };
        let (ra, rb) = (resample(&pa, lo, hi, k), resample(&pb, lo, hi, k));
        let near = |r: &[Option<u64>], j: usize| -> Option<u64> {
            r[j]?;
            r[j.saturating_sub(1)..(j + 2).min(k)].iter().flatten().copied().max()
        };
        (0..k)
            .map(|j| Aligned {
                x: lo + (hi - lo) * j as f64 / k as f64,
                a: ra[j],
                b: rb[j],
                delta: near(&ra, j).zip(near(&rb, j)).map(|(a, b)| i128::from(b) - i128::from(a)),
            })
            .collect()
    } else {
        Vec::new()
    };

    // Call sites alive at the peaks.
    let (ta, tb) = match sites_by {
        SiteMode::Frame => (&a.sites, &b.sites),
        SiteMode::Stack => (&a.stacks, &b.stacks),
    };
    let mut rows: FxHashMap<&str, SiteDelta> = FxHashMap::default();
    for (t, is_a) in [(ta, true), (tb, false)] {
        for s in t {
            let r = rows.entry(&s.site).or_insert_with(|| SiteDelta {
                site: s.site.clone(),
                a: 0,
                b: 0,
                count_a: 0,
                count_b: 0,
            });
            if is_a {
                (r.a, r.count_a) = (s.bytes, s.count);
            } else {
                (r.b, r.count_b) = (s.bytes, s.count);
            }
        }
    }
    let mut sites: Vec<SiteDelta> = rows.into_values().filter(|r| r.a != r.b).collect();
    sites.sort_by(|x, y| y.delta().abs().cmp(&x.delta().abs()).then_with(|| x.site.cmp(&y.site)));
    sites.truncate(ROWS);

    // Allocations made a different number of times.
    let mut counts: FxHashMap<(&str, u64), (u32, u32)> = FxHashMap::default();
    for (s, size, n) in &a.allocs {
        counts.entry((s, *size)).or_default().0 = *n;
    }
    for (s, size, n) in &b.allocs {
        counts.entry((s, *size)).or_default().1 = *n;
    }
    let mut allocs: Vec<AllocDelta> = counts
        .into_iter()
        .filter(|(_, (x, y))| x != y)
        .map(|((site, size), (count_a, count_b))| AllocDelta { site: site.to_string(), size, count_a, count_b })
        .collect();
    let weight = |d: &AllocDelta| u128::from(d.size) * u128::from(d.count_a.abs_diff(d.count_b));
    allocs.sort_by(|x, y| weight(y).cmp(&weight(x)).then_with(|| x.site.cmp(&y.site)).then(x.size.cmp(&y.size)));
    allocs.truncate(ROWS);

    // Segments: the same address and size first, then any of the same size.
    let (only_a, only_b) = unmatched_segments(&a.segments, &b.segments);

    Diff {
        align: used,
        align_note: note,
        sites_by,
        peak: (a.peak_bytes, b.peak_bytes),
        reserved: (a.reserved_bytes, b.reserved_bytes),
        categories: Category::ALL.iter().map(|c| (*c, a.at_peak[c.index()], b.at_peak[c.index()])).collect(),
        sites,
        allocs,
        segments_only_a: only_a,
        segments_only_b: only_b,
        curve,
        x_label: match used {
            Align::Iteration => "iteration".into(),
            Align::Annotation => "shared annotation".into(),
            Align::Event => "event".into(),
            Align::Time => "µs since the first event".into(),
        },
    }
}

fn unmatched_segments(a: &[SegmentKey], b: &[SegmentKey]) -> (Vec<SegmentKey>, Vec<SegmentKey>) {
    let mut used_b = vec![false; b.len()];
    let mut exact: FxHashMap<(u64, u64), Vec<usize>> = FxHashMap::default();
    let mut by_size: FxHashMap<u64, Vec<usize>> = FxHashMap::default();
    for (j, s) in b.iter().enumerate().rev() {
        exact.entry((s.address, s.size)).or_default().push(j);
        by_size.entry(s.size).or_default().push(j);
    }
    let mut left = Vec::new();
    for s in a {
        if let Some(j) = exact.get_mut(&(s.address, s.size)).and_then(|v| v.pop()) {
            used_b[j] = true;
        } else {
            left.push(s);
        }
    }
    let mut only_a = Vec::new();
    for s in left {
        let pool = by_size.entry(s.size).or_default();
        while pool.last().is_some_and(|&j| used_b[j]) {
            pool.pop();
        }
        match pool.pop() {
            Some(j) => used_b[j] = true,
            None => only_a.push(s.clone()),
        }
    }
    let only_b = b.iter().zip(&used_b).filter(|(_, &u)| !u).map(|(s, _)| s.clone()).collect();
    (only_a, only_b)
}

#[cfg(test)]
mod tests {
    /// Paths become their place in the project; anything that is not `path:line:name` stays.
    #[test]
    fn portable_sites_name_files_by_their_place_in_the_project() {
        let p = super::portable_site;
        assert_eq!(p("/home/lin/a2/cs336-basics/cs336_basics/model.py:39:forward"), "cs336_basics/model.py:39:forward");
        assert_eq!(p(r"D:\Dev\a2\cs336_basics\model.py:54:forward"), "cs336_basics/model.py:54:forward");
        assert_eq!(
            p("/x/.venv/lib/python3.12/site-packages/torch/nn/modules/module.py:1790:_call_impl"),
            "torch/nn/modules/module.py:1790:_call_impl"
        );
        assert_eq!(
            p("allocated before recording; freed at /home/u/p/optimizer.py:73:step"),
            "allocated before recording; freed at p/optimizer.py:73:step"
        );
        assert_eq!(p("backward: DivBackward0, aten::div_Tensor"), "backward: DivBackward0, aten::div_Tensor");
        assert_eq!(p("train.py:12:main"), "train.py:12:main");
        assert_eq!(p("a/b/c.py:1:f\n/d/e/f.py:2:g"), "b/c.py:1:f\ne/f.py:2:g");
    }
}
