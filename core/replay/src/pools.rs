//! Private pools (CUDA graphs, `torch.cuda.MemPool`, symmetric memory) over time: what each
//! reserves and holds, and allocated memory counted with them, as PyTorch's viewer's
//! "Allocated Memory (incl. Private Pools)" counts it: each private pool, per (pool, stream),
//! is an envelope as tall as the larger of its live and its reserved bytes, that never
//! shrinks; the default pool's allocations count as themselves. docs/pools.md says where
//! and why these figures differ from PyTorch's.
//!
//! Where the file says better than the final segments, it is believed: an allocation's pool
//! is its trace entry's `pool_id` (else the segment that held its address when it was made:
//! the latest `segment_alloc`/`segment_map` there with a pool, else the final segment); a
//! segment event's pool is its own `pool_id`, else the same; a pool that reserves memory
//! has an envelope even with no allocation in sight.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::model::{Action, PoolId, Snapshot};
use crate::timeline::{Element, Inside, Origin, Timeline, TimelineKind};

/// One private pool on one stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrivatePool {
    /// `segment_pool_id` / `pool_id`.
    pub pool_id: PoolId,
    /// The stream of its segments and allocations.
    pub stream: i64,
    /// The most it reserved at once.
    pub reserved_peak_bytes: u64,
    /// What it reserved at the end (its final segments).
    pub final_reserved_bytes: u64,
    /// The most its allocations held at once.
    pub live_peak_bytes: u64,
}

/// Allocated memory with every private pool counted as its envelope.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InclPools {
    /// The highest total (the state before the first step included).
    pub peak_bytes: u64,
    /// The total after the last step.
    pub final_bytes: u64,
}

/// The private pools of one device and the totals with them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pools {
    /// Each (pool, stream), by pool id then stream.
    pub pools: Vec<PrivatePool>,
    /// Bytes with pools as envelopes before the first step.
    pub initial_total: u64,
    /// ... and after each step of the blocks timeline.
    pub totals: Vec<u64>,
    /// ... and at the end: after segment events that follow the last step.
    pub end_total: u64,
    /// Each element of the blocks timeline: the index in `pools` of its private pool.
    pub element_pool: Vec<Option<u32>>,
    /// Each pool's envelope before the first step, `pools`' order.
    pub initial_envelopes: Vec<u64>,
    /// Each growth of an envelope: (step, index in `pools`, bytes), by step; a step of the
    /// timeline's length is a growth after its last step.
    pub growth: Vec<(u32, u32, u64)>,
}

impl Pools {
    /// Peak and final bytes.
    pub fn incl(&self) -> InclPools {
        InclPools {
            peak_bytes: self.totals.iter().copied().fold(self.initial_total.max(self.end_total), u64::max),
            final_bytes: self.end_total,
        }
    }
}

/// Entry `i`'s pool: its `pool_id`, or a `segment_pool_id` (the key PyTorch's viewer reads
/// on trace entries).
fn entry_pool(snap: &Snapshot, t: &crate::Trace, i: usize) -> Option<PoolId> {
    t.pool_id(i).or_else(|| {
        let (_, v) = t.extras(i).iter().find(|(k, _)| snap.str(*k) == "segment_pool_id")?;
        match v {
            crate::Value::Tuple(x) | crate::Value::List(x) => match x.as_slice() {
                [crate::Value::Int(a), crate::Value::Int(b)] => {
                    Some((u64::try_from(*a).ok()?, u64::try_from(*b).ok()?))
                }
                _ => None,
            },
            _ => None,
        }
    })
}

fn is_private(p: Option<PoolId>) -> bool {
    p.is_some_and(|p| p != (0, 0))
}

/// Whether `device` has a private pool: a segment's, or a trace entry's (no scan of the
/// trace: its pools are a short list, and entries with other keys are few).
pub fn has_private(snap: &Snapshot, device: usize) -> bool {
    let t = snap.trace(device);
    t.pool_ids().iter().any(|&p| is_private(Some(p)))
        || snap.segments.iter().any(|s| s.device == device as i64 && is_private(s.segment_pool_id))
        || t.all_extras().any(|(i, _)| is_private(entry_pool(snap, t, i)))
}

/// Where segments were, with their pools: the final segments, and the trace's segment
/// events that name a pool. A lookup takes the range starting at the greatest start at or
/// below the address, the latest made at or before the entry asked about.
struct Ranges {
    /// (start, entry made (u32::MAX: the final segments, known at any time), end, pool).
    by_start: Vec<(u64, u32, u64, Option<PoolId>)>,
}

impl Ranges {
    fn new(snap: &Snapshot, device: usize) -> Ranges {
        let t = snap.trace(device);
        let mut by_start: Vec<(u64, u32, u64, Option<PoolId>)> = snap
            .segments
            .iter()
            .filter(|s| s.device == device as i64)
            .map(|s| (s.address, u32::MAX, s.address.saturating_add(s.total_size), s.segment_pool_id))
            .collect();
        for i in 0..t.len() {
            let pool = entry_pool(snap, t, i);
            if matches!(t.action(i), Action::SegmentAlloc | Action::SegmentMap) && pool.is_some() {
                let a = t.addr(i);
                by_start.push((a, i as u32, a.saturating_add(t.size(i)), pool));
            }
        }
        by_start.sort_unstable_by_key(|r| (r.0, r.1));
        Ranges { by_start }
    }

    /// The pool of `addr` at trace entry `entry`.
    fn pool_at(&self, addr: u64, entry: u32) -> Option<PoolId> {
        let upto = self.by_start.partition_point(|r| r.0 <= addr);
        let start = self.by_start[..upto].last()?.0;
        let from = self.by_start[..upto].partition_point(|r| r.0 < start);
        let same = &self.by_start[from..upto];
        // The latest recorded event at or before the entry, else the final segment.
        let traced = same.iter().rev().find(|r| r.1 != u32::MAX && r.1 <= entry && addr < r.2);
        traced.or_else(|| same.iter().find(|r| r.1 == u32::MAX && addr < r.2)).and_then(|r| r.3)
    }
}

/// What moves a pool's figures at a step.
enum Change {
    Reserved(usize, i128),
    Live(usize, i128),
}

/// The private pools of `tl`'s device (a blocks timeline) over its steps. O((entries +
/// elements) log n).
pub fn pools(snap: &Snapshot, tl: &Timeline) -> Pools {
    debug_assert_eq!(tl.kind(), TimelineKind::Blocks);
    let device = tl.device();
    let t = snap.trace(device);
    let ranges = Ranges::new(snap, device);
    let mut keys: FxHashMap<(PoolId, i64), usize> = FxHashMap::default();
    let mut order: Vec<(PoolId, i64)> = Vec::new();
    let mut key = |p: PoolId, stream: i64| -> usize {
        *keys.entry((p, stream)).or_insert_with(|| {
            order.push((p, stream));
            order.len() - 1
        })
    };
    let n = tl.n_steps() as usize;
    // Changes at each step (index n: after the last step); the state before the first.
    let mut at: Vec<Vec<Change>> = Vec::new();
    at.resize_with(n + 1, Vec::new);
    let (mut initial_live, mut initial_other): (Vec<i128>, u64) = (Vec::new(), 0);
    let mut final_reserved: FxHashMap<usize, i128> = FxHashMap::default();
    for s in snap.segments.iter().filter(|s| s.device == device as i64 && is_private(s.segment_pool_id)) {
        let k = key(s.segment_pool_id.unwrap_or_default(), s.stream);
        *final_reserved.entry(k).or_default() += i128::from(s.total_size);
    }
    // Segment events: reserved bytes move at the step of the next allocation or free.
    let mut net: FxHashMap<usize, i128> = FxHashMap::default();
    for i in 0..t.len() {
        let sign = match t.action(i) {
            Action::SegmentAlloc | Action::SegmentMap => 1,
            Action::SegmentFree | Action::SegmentUnmap => -1,
            _ => continue,
        };
        let pool = entry_pool(snap, t, i).or_else(|| ranges.pool_at(t.addr(i), i as u32));
        if !is_private(pool) {
            continue;
        }
        let k = key(pool.unwrap_or_default(), t.stream(i));
        let d = sign * i128::from(t.size(i));
        *net.entry(k).or_default() += d;
        at[tl.step_of_entry(i as u32) as usize].push(Change::Reserved(k, d));
    }
    // Allocations: their pool, and their bytes at their start and end.
    let els = tl.elements();
    let mut other_delta = vec![0i128; n + 1];
    let mut element_pool: Vec<Option<u32>> = Vec::with_capacity(els.len());
    for e in els {
        let entry = e.alloc_entry.or(e.free_entry);
        let (pool, stream) = match entry.map(|i| i as usize).filter(|&i| i < t.len()) {
            Some(i) => (entry_pool(snap, t, i).or_else(|| ranges.pool_at(e.addr, i as u32)), t.stream(i)),
            None => {
                let seg = e.segment.and_then(|s| snap.segments.get(s as usize));
                (ranges.pool_at(e.addr, u32::MAX), seg.map_or(0, |s| s.stream))
            }
        };
        let size = i128::from(e.size);
        let before = e.origin != Origin::Traced;
        element_pool.push(None);
        if is_private(pool) {
            let k = key(pool.unwrap_or_default(), stream);
            if let Some(last) = element_pool.last_mut() {
                *last = Some(k as u32);
            }
            if before {
                if initial_live.len() <= k {
                    initial_live.resize(k + 1, 0);
                }
                initial_live[k] += size;
            } else {
                at[e.start as usize].push(Change::Live(k, size));
            }
            if (e.end as usize) < n {
                at[e.end as usize].push(Change::Live(k, -size));
            }
        } else {
            if before {
                initial_other = initial_other.saturating_add(e.size);
            } else {
                other_delta[e.start as usize] += size;
            }
            if (e.end as usize) < n {
                other_delta[e.end as usize] -= size;
            }
        }
    }
    let m = order.len();
    initial_live.resize(m, 0);
    // Reserved before the trace: the final segments less what the trace added.
    let mut reserved: Vec<i128> =
        (0..m).map(|k| final_reserved.get(&k).copied().unwrap_or(0) - net.get(&k).copied().unwrap_or(0)).collect();
    let mut live = initial_live;
    let mut env: Vec<u64> = (0..m).map(|k| clamp(live[k].max(reserved[k]))).collect();
    let mut reserved_peak: Vec<u64> = reserved.iter().map(|&r| clamp(r)).collect();
    let mut live_peak: Vec<u64> = live.iter().map(|&l| clamp(l)).collect();
    let mut other = i128::from(initial_other);
    let mut env_sum = env.iter().copied().fold(0, u64::saturating_add);
    let initial_total = clamp(other).saturating_add(env_sum);
    let mut totals = Vec::with_capacity(n);
    let initial_envelopes = env.clone();
    let mut growth: Vec<(u32, u32, u64)> = Vec::new();
    for (step, changes) in at.iter().enumerate() {
        for c in changes {
            let k = match *c {
                Change::Reserved(k, d) => {
                    reserved[k] += d;
                    reserved_peak[k] = reserved_peak[k].max(clamp(reserved[k]));
                    k
                }
                Change::Live(k, d) => {
                    live[k] += d;
                    live_peak[k] = live_peak[k].max(clamp(live[k]));
                    k
                }
            };
            let grown = clamp(live[k].max(reserved[k]));
            if grown > env[k] {
                env_sum = env_sum.saturating_add(grown - env[k]);
                growth.push((step as u32, k as u32, grown - env[k]));
                env[k] = grown;
            }
        }
        if step == n {
            break;
        }
        other += other_delta[step];
        totals.push(clamp(other).saturating_add(env_sum));
    }
    let end_total = clamp(other).saturating_add(env_sum);
    let mut pools: Vec<PrivatePool> = order
        .iter()
        .enumerate()
        .map(|(k, &(pool_id, stream))| PrivatePool {
            pool_id,
            stream,
            reserved_peak_bytes: reserved_peak[k],
            final_reserved_bytes: clamp(final_reserved.get(&k).copied().unwrap_or(0)),
            live_peak_bytes: live_peak[k],
        })
        .collect();
    // By pool id then stream; `rank[k]` is where key `k` went.
    let mut idx: Vec<usize> = (0..m).collect();
    idx.sort_by_key(|&k| (pools[k].pool_id, pools[k].stream));
    let mut rank = vec![0u32; m];
    for (r, &k) in idx.iter().enumerate() {
        rank[k] = r as u32;
    }
    pools = idx.iter().map(|&k| pools[k].clone()).collect();
    let initial_envelopes = idx.iter().map(|&k| initial_envelopes[k]).collect();
    for p in element_pool.iter_mut().flatten() {
        *p = rank[*p as usize];
    }
    for g in &mut growth {
        g.1 = rank[g.1 as usize];
    }
    Pools { pools, initial_total, totals, end_total, element_pool, initial_envelopes, growth }
}

/// The envelope view's layout ([`envelopes`]).
#[derive(Debug)]
pub struct Envelopes {
    /// The timeline PyTorch's "Allocated Memory (incl. Private Pools)" draws.
    pub timeline: Timeline,
    /// The pool of each envelope element (the last elements), in element order.
    pub pieces: Vec<(PoolId, i64)>,
    /// The pools' blocks, drawn inside their envelopes.
    pub inside: Inside,
}

/// The timeline PyTorch's "Allocated Memory (incl. Private Pools)" draws: the blocks
/// timeline `base`'s elements (same ids) with a private pool's allocations at 0 bytes, and
/// each pool's envelope as elements of their own after them: one before the first step, on
/// top of what was alive then, and one per growth, as tall as the whole envelope, replacing
/// the one before and entering on top of the stack, as PyTorch's does. So a pool's envelope
/// is one element at every step, and [`Inside::paint`] draws its allocations inside it. Its
/// totals are [`Pools::totals`] (a growth after the last step is not drawn). Also the pool
/// of each envelope element, in element order.
pub fn envelope_timeline(snap: &Snapshot, base: &Timeline) -> (Timeline, Vec<(PoolId, i64)>) {
    let e = envelopes(snap, base);
    (e.timeline, e.pieces)
}

/// [`envelope_timeline`] and the pools' blocks to draw inside the envelopes. O((entries +
/// elements) log n).
pub fn envelopes(snap: &Snapshot, base: &Timeline) -> Envelopes {
    let p = pools(snap, base);
    let n = base.n_steps();
    let keys: Vec<(PoolId, i64)> = p.pools.iter().map(|pool| (pool.pool_id, pool.stream)).collect();
    let mut elements: Vec<Element> = base.elements().to_vec();
    for (e, k) in elements.iter_mut().zip(&p.element_pool) {
        if k.is_some() {
            e.size = 0;
        }
    }
    // The base's stacking order: those alive before the first step, bottom first, then the rest.
    let mut by_order: Vec<u32> = (0..elements.len() as u32).collect();
    by_order.sort_unstable_by_key(|&i| elements[i as usize].order);
    let m = base.n_initial();
    let first_envelope = elements.len() as u32;
    // Each pool's envelope element now, and its bytes.
    let mut now: Vec<Option<u32>> = vec![None; keys.len()];
    let mut bytes = p.initial_envelopes.clone();
    let mut envelope_pool: Vec<u32> = Vec::new();
    let mut piece = |elements: &mut Vec<Element>, k: u32, size: u64, start: u32, origin: Origin| {
        envelope_pool.push(k);
        elements.push(Element {
            addr: 0,
            size,
            start,
            end: n,
            origin,
            alloc_entry: None,
            free_entry: None,
            stack: None,
            segment: None,
            order: 0,
        });
        elements.len() as u32 - 1
    };
    let mut initial: Vec<u32> = Vec::new();
    for (k, &size) in p.initial_envelopes.iter().enumerate() {
        if size > 0 {
            let id = piece(&mut elements, k as u32, size, 0, Origin::Snapshot);
            now[k] = Some(id);
            initial.push(id);
        }
    }
    initial.extend(by_order[..m].iter().rev());
    // A growth ends the pool's envelope and starts a taller one on top; growths of one pool
    // at one step are one.
    let mut grow = |elements: &mut Vec<Element>, allocs: &mut Vec<u32>, (step, k, by): (u32, u32, u64)| {
        let pool = k as usize;
        bytes[pool] = bytes[pool].saturating_add(by);
        match now[pool] {
            Some(id) if elements[id as usize].start == step && elements[id as usize].origin == Origin::Traced => {
                elements[id as usize].size = bytes[pool];
                return;
            }
            Some(id) => elements[id as usize].end = step,
            None => {}
        }
        let id = piece(elements, k, bytes[pool], step, Origin::Traced);
        now[pool] = Some(id);
        allocs.push(id);
    };
    let mut allocs: Vec<u32> = Vec::with_capacity(by_order.len() - m + p.growth.len());
    let mut growth = p.growth.iter().filter(|g| g.0 < n).peekable();
    for &id in &by_order[m..] {
        let start = elements[id as usize].start;
        while let Some(&&g) = growth.peek().filter(|g| g.0 < start) {
            grow(&mut elements, &mut allocs, g);
            growth.next();
        }
        allocs.push(id);
    }
    for &g in growth {
        grow(&mut elements, &mut allocs, g);
    }
    let pieces = envelope_pool.iter().map(|&k| keys[k as usize]).collect();
    let inside = Inside::new(base.elements(), &p.element_pool, keys, first_envelope, envelope_pool);
    let timeline = base.relaid(TimelineKind::PoolEnvelopes, elements, initial, base.n_unmatched_frees(), allocs);
    Envelopes { timeline, pieces, inside }
}

fn clamp(x: i128) -> u64 {
    u64::try_from(x.max(0)).unwrap_or(u64::MAX)
}
