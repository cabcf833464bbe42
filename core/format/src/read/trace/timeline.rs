//! The files of `prof.export_memory_timeline(path)` into a [`Snapshot`] whose allocations
//! carry PyTorch's categories (the `category` of each `alloc` entry, which the categories
//! analysis takes as given):
//!
//! - raw (`.raw.json.gz`): rows `[t_ns, action, bytes, category]`, action 1 PREEXISTING
//!   (`t` is -1), 2 CREATE, 3 INCREMENT_VERSION (a row taking the bytes from the tensor's old
//!   category, then one giving them to its new one), 4 DESTROY (negative bytes);
//! - coalesced (`.json`, `.json.gz`): `[times_us, sizes]`, `sizes[i]` a zero then the bytes
//!   of each category at `times_us[i]`.
//!
//! Category indices are PyTorch's `_CATEGORY_TO_INDEX` (`torch/profiler/_memory_profiler.py`).
//! Neither file says which tensor a row is about, so a row that takes bytes away ends the
//! latest allocation of that size and category (raw) or shrinks the category's latest
//! (coalesced): the bytes of every category are PyTorch's at every timestamp.

use rustc_hash::FxHashMap;

use super::event::Int;
use super::ProfilerInfo;
use crate::error::{ErrorKind, ReadError, Warning};
use crate::model::{Action, Entry, Snapshot, Trace};

/// PyTorch's categories in the order of `_CATEGORY_TO_INDEX`, by memscape's names.
const CATEGORIES: [&str; 8] =
    ["parameter", "optimizer_state", "input", "temporary", "activation", "gradient", "autograd_detail", "unknown"];

const BASE: u64 = 0x7e00_0000_0000;

/// A timeline file's top-level elements, collected as they come.
#[derive(Default)]
pub(crate) struct Timeline {
    rows: Vec<[i64; 4]>,
    /// The first element, kept until the second says which form the file is.
    first: Option<Vec<u8>>,
    coalesced: Option<(Vec<i64>, Vec<Vec<i64>>)>,
    elements: u64,
}

fn ints<T: for<'a> serde::Deserialize<'a>>(bytes: &[u8], index: u64, offset: u64) -> Result<T, ReadError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ReadError::new(ErrorKind::Schema, format!("memory timeline element {index}: {e}"))
            .at(offset)
            .path(format!("[{index}]"))
    })
}

fn int(x: Int) -> Result<i64, ReadError> {
    i64::try_from(x.0)
        .map_err(|_| ReadError::new(ErrorKind::Schema, format!("memory timeline: {} is out of range", x.0)))
}

impl Timeline {
    /// One top-level element.
    pub(crate) fn element(&mut self, index: u64, bytes: &[u8], offset: u64) -> Result<(), ReadError> {
        self.elements += 1;
        match index {
            0 => {
                self.first = Some(bytes.to_vec());
                Ok(())
            }
            1 if bytes.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'[')
                && bytes.iter().skip(1).find(|c| !c.is_ascii_whitespace()) == Some(&b'[') =>
            {
                let times: Vec<Int> = ints(&self.first.take().unwrap_or_default(), 0, 0)?;
                let sizes: Vec<Vec<Int>> = ints(bytes, 1, offset)?;
                let times = times.into_iter().map(int).collect::<Result<_, _>>()?;
                let sizes = (sizes.into_iter()).map(|r| r.into_iter().map(int).collect()).collect::<Result<_, _>>()?;
                self.coalesced = Some((times, sizes));
                Ok(())
            }
            2.. if self.coalesced.is_some() => Err(ReadError::new(
                ErrorKind::Schema,
                "a coalesced memory timeline has two elements, times and sizes; this one has more",
            )
            .at(offset)),
            _ => {
                if let Some(first) = self.first.take() {
                    self.row(&first, 0, 0)?;
                }
                self.row(bytes, index, offset)
            }
        }
    }

    fn row(&mut self, bytes: &[u8], index: u64, offset: u64) -> Result<(), ReadError> {
        let r: [Int; 4] = ints(bytes, index, offset)?;
        let r = [int(r[0])?, int(r[1])?, int(r[2])?, int(r[3])?];
        if !(1..=4).contains(&r[1]) || !(0..8).contains(&r[3]) {
            return Err(ReadError::new(
                ErrorKind::Schema,
                format!("memory timeline row {index}: action {} or category {} is not PyTorch's", r[1], r[3]),
            )
            .at(offset));
        }
        self.rows.push(r);
        Ok(())
    }

    /// The model.
    pub(crate) fn finish(mut self) -> Result<(Snapshot, Vec<Warning>, ProfilerInfo), ReadError> {
        if let Some(first) = self.first.take() {
            self.row(&first, 0, 0)?;
        }
        let mut snap = Snapshot::default();
        let cats = CATEGORIES.map(|c| snap.strings.intern(c));
        let mut trace = Trace::default();
        let mut warnings = Vec::new();
        let source = match self.coalesced.take() {
            Some((times, sizes)) => {
                coalesced(&times, &sizes, &cats, &mut trace)?;
                crate::profiler::COALESCED_TIMELINE
            }
            None => {
                let unmatched = raw(&self.rows, &cats, &mut trace);
                if unmatched > 0 {
                    warnings.push(Warning {
                        message: "rows that take bytes away with nothing of that size and category alive were read as memory allocated before the timeline".into(),
                        count: unmatched,
                    });
                }
                crate::profiler::RAW_TIMELINE
            }
        };
        snap.device_traces = Some(vec![trace]);
        let info = ProfilerInfo {
            source: source.into(),
            devices: vec!["memory timeline".into()],
            addresses: false,
            reserved: false,
            rank: None,
            memory_events: trace_len(&snap),
        };
        Ok((snap, warnings, info))
    }
}

fn trace_len(snap: &Snapshot) -> u64 {
    snap.trace(0).len() as u64
}

fn push(trace: &mut Trace, action: Action, addr: u64, size: u64, t_us: i64, category: Option<crate::StrId>) {
    let mut e = Entry::new(action, addr, size, 0);
    e.time_us = Some(t_us);
    e.category = category;
    trace.push(&e);
}

/// Nanoseconds in microseconds as PyTorch's coalesced file has them: `int(t / 1000)`, a
/// float division, so at today's timestamps (1.8e15 µs, where floats are a quarter apart) an
/// event in the last eighth of a microsecond counts in the next one.
fn micros(t_ns: i64) -> i64 {
    let (q, r) = (t_ns.div_euclid(1000), t_ns.rem_euclid(1000));
    (q as f64 + r as f64 / 1000.0) as i64
}

/// Raw rows in order; PREEXISTING rows at the first timestamp, as PyTorch's coalesced file
/// puts them. Returns how many rows took bytes away from nothing alive.
fn raw(rows: &[[i64; 4]], cats: &[crate::StrId; 8], trace: &mut Trace) -> u64 {
    let first = rows.iter().map(|r| r[0]).filter(|&t| t >= 0).min().unwrap_or(0);
    let mut next = BASE;
    let mut live: FxHashMap<(u64, i64), Vec<u64>> = FxHashMap::default();
    let mut unmatched = 0;
    for &[t, _, bytes, cat] in rows {
        let t_us = micros(if t < 0 { first } else { t });
        let size = bytes.unsigned_abs();
        if bytes >= 0 {
            live.entry((size, cat)).or_default().push(next);
            push(trace, Action::Alloc, next, size, t_us, Some(cats[cat as usize]));
            next += size.div_ceil(512).max(1) * 512;
        } else {
            let addr = live.get_mut(&(size, cat)).and_then(Vec::pop).unwrap_or_else(|| {
                unmatched += 1;
                let a = next;
                next += size.div_ceil(512).max(1) * 512;
                a
            });
            push(trace, Action::FreeCompleted, addr, size, t_us, None);
        }
    }
    unmatched
}

/// Per category totals as allocations: a rise allocates the difference, a fall frees the
/// latest pieces (the last one cut in two).
fn coalesced(times: &[i64], sizes: &[Vec<i64>], cats: &[crate::StrId; 8], trace: &mut Trace) -> Result<(), ReadError> {
    if times.len() != sizes.len() || sizes.iter().any(|s| s.len() != CATEGORIES.len() + 1) {
        return Err(ReadError::new(
            ErrorKind::Schema,
            format!("a memory timeline's sizes must be one row of {} per time", CATEGORIES.len() + 1),
        ));
    }
    let mut next = BASE;
    let mut now = [0i64; 8];
    let mut live: [Vec<(u64, u64)>; 8] = Default::default();
    for (&t, row) in times.iter().zip(sizes) {
        for k in 0..CATEGORIES.len() {
            let want = row[k + 1].max(0);
            if want > now[k] {
                let size = (want - now[k]) as u64;
                live[k].push((next, size));
                push(trace, Action::Alloc, next, size, t, Some(cats[k]));
                next += size.div_ceil(512).max(1) * 512;
            } else {
                let mut drop = (now[k] - want) as u64;
                while drop > 0 {
                    let Some((addr, size)) = live[k].pop() else { break };
                    push(trace, Action::FreeCompleted, addr, size, t, None);
                    if size > drop {
                        let keep = size - drop;
                        let a = next;
                        next += keep.div_ceil(512).max(1) * 512;
                        live[k].push((a, keep));
                        push(trace, Action::Alloc, a, keep, t, Some(cats[k]));
                        drop = 0;
                    } else {
                        drop -= size;
                    }
                }
            }
            now[k] = want;
        }
    }
    Ok(())
}
