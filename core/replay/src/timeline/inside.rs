//! What the envelope view ([`TimelineKind::PoolEnvelopes`]) draws inside each private pool's
//! envelope: the pool's own allocations, stacked as they are among themselves, in shades of
//! the pool's own hue, with the bytes the pool reserves beyond them in a pale tint above.
//!
//! The level-of-detail sweep puts every element that enters on top of the stack, so it cannot
//! place a block inside an envelope lower down. The envelope timeline keeps the pools' blocks at
//! 0 bytes, and [`Inside::paint`] is a second pass over its answer: each envelope drawn on its
//! own is replaced by the sweep of a timeline of its pool's blocks alone, at the same sampled
//! steps, shifted up by where the envelope lies. Only the envelope view pays for it, and only
//! for the pools it draws; every other view's sweep is the same.

use std::sync::OnceLock;

use crate::model::PoolId;

use super::{round, Band, Element, Lod, LodQuery, Origin, Timeline, TimelineKind};

/// The private pools' blocks of an envelope timeline, by pool, for [`Inside::paint`] and
/// [`Inside::element_near`].
#[derive(Debug, Default)]
pub struct Inside {
    /// Each pool, as [`crate::pools::Pools::pools`] orders them: (pool, stream).
    pools: Vec<(PoolId, i64)>,
    /// The first envelope element of the envelope timeline: every element from there on is one.
    first_envelope: u32,
    /// The pool (index into `pools`) of each envelope element.
    envelope_pool: Vec<u32>,
    /// Pool `k`'s blocks are `ids[starts[k]..starts[k + 1]]` (element ids, in element order),
    /// with their own bytes (the envelope timeline holds them at 0) in `sizes`.
    starts: Vec<u32>,
    ids: Vec<u32>,
    sizes: Vec<u64>,
    /// Each element's place in `ids` (`u32::MAX`: not a pool's block).
    slot: Vec<u32>,
    /// Each pool's blocks laid out alone, made when the pool is first drawn or hovered.
    local: Vec<OnceLock<Local>>,
}

/// One pool's blocks as a timeline of their own, over the steps where they change.
#[derive(Debug)]
struct Local {
    timeline: Timeline,
    /// The envelope timeline's step where each of its steps begins (the first is 0).
    steps: Vec<u32>,
}

impl Local {
    /// Lays out `ids` (elements of `env` with their own `sizes`) alone: a step wherever one
    /// of them starts or ends, stacked in the order they have in `env`. O(m log m) for m of them.
    fn new(env: &Timeline, ids: &[u32], sizes: &[u64]) -> Local {
        let els = env.elements();
        let n = env.n_steps();
        let mut steps: Vec<u32> = Vec::with_capacity(2 * ids.len() + 1);
        steps.push(0);
        for &id in ids {
            let e = &els[id as usize];
            steps.push(e.start.min(n));
            if e.end < n {
                steps.push(e.end);
            }
        }
        steps.sort_unstable();
        steps.dedup();
        let at = |s: u32| steps.partition_point(|&t| t < s) as u32;
        let end = steps.len() as u32;
        let elements: Vec<Element> = ids
            .iter()
            .zip(sizes)
            .map(|(&id, &size)| {
                let e = &els[id as usize];
                Element { size, start: at(e.start), end: if e.end < n { at(e.end) } else { end }, ..e.clone() }
            })
            .collect();
        // Stacked as in `env`: those alive before the first step (the first on top), then the rest.
        let (mut initial, mut allocs): (Vec<u32>, Vec<u32>) =
            (0..elements.len() as u32).partition(|&i| elements[i as usize].origin != Origin::Traced);
        initial.sort_unstable_by_key(|&i| std::cmp::Reverse(elements[i as usize].order));
        allocs.sort_unstable_by_key(|&i| elements[i as usize].order);
        let n_unmatched = elements.iter().filter(|e| e.origin == Origin::UnmatchedFree).count();
        let step_entry = steps.iter().map(|&s| env.step_entry(s).unwrap_or(0)).collect();
        let timeline =
            Timeline::finish(TimelineKind::Blocks, env.device(), elements, initial, n_unmatched, allocs, step_entry);
        Local { timeline, steps }
    }

    /// Its step showing the envelope timeline's `step`.
    fn step_of(&self, step: u32) -> u32 {
        self.steps.partition_point(|&s| s <= step).saturating_sub(1) as u32
    }
}

impl Inside {
    /// `elements` are the blocks timeline's (their own bytes), `element_pool` the pool of
    /// each ([`crate::pools::Pools::element_pool`]), `pools` every pool; the envelope timeline
    /// has the same elements first, then from `first_envelope` on an envelope each, of the
    /// pools `envelope_pool`. O(elements).
    pub fn new(
        elements: &[Element],
        element_pool: &[Option<u32>],
        pools: Vec<(PoolId, i64)>,
        first_envelope: u32,
        envelope_pool: Vec<u32>,
    ) -> Inside {
        let mut starts = vec![0u32; pools.len() + 1];
        for &k in element_pool.iter().flatten() {
            starts[k as usize + 1] += 1;
        }
        for k in 0..pools.len() {
            starts[k + 1] += starts[k];
        }
        let mut next = starts.clone();
        let n_blocks = starts[pools.len()] as usize;
        let (mut ids, mut sizes, mut slot) =
            (vec![0u32; n_blocks], vec![0u64; n_blocks], vec![u32::MAX; elements.len()]);
        for (id, (e, k)) in elements.iter().zip(element_pool).enumerate() {
            if let Some(k) = *k {
                let at = next[k as usize];
                next[k as usize] += 1;
                (ids[at as usize], sizes[at as usize], slot[id]) = (id as u32, e.size, at);
            }
        }
        let local = (0..pools.len()).map(|_| OnceLock::new()).collect();
        Inside { pools, first_envelope, envelope_pool, starts, ids, sizes, slot, local }
    }

    /// The pools, in the order their indexes count.
    pub fn pools(&self) -> &[(PoolId, i64)] {
        &self.pools
    }

    /// The pool (index) of envelope element `id`.
    pub fn envelope_of(&self, id: u32) -> Option<u32> {
        id.checked_sub(self.first_envelope).and_then(|k| self.envelope_pool.get(k as usize)).copied()
    }

    /// The pool (index) of element `id` and its own bytes, when it is a pool's block.
    pub fn block(&self, id: u32) -> Option<(u32, u64)> {
        let at = *self.slot.get(id as usize).filter(|&&s| s != u32::MAX)?;
        let k = self.starts.partition_point(|&s| s <= at) - 1;
        Some((k as u32, self.sizes[at as usize]))
    }

    /// Pool `k`'s blocks laid out alone, made the first time (`None`: it has none).
    fn local(&self, k: u32, env: &Timeline) -> Option<(&Local, &[u32])> {
        let (a, b) = (self.starts[k as usize] as usize, self.starts[k as usize + 1] as usize);
        (a < b).then(|| {
            let local = self.local[k as usize].get_or_init(|| Local::new(env, &self.ids[a..b], &self.sizes[a..b]));
            (local, &self.ids[a..b])
        })
    }

    /// Draws each pool's blocks inside its envelope in `lod`, the answer of the envelope
    /// timeline `env` to `q` (`hits`: its search matches, by element): every band of an
    /// envelope drawn on its own becomes its pool's blocks, at the same sampled steps, from
    /// the envelope's bottom up, and above them the rest of the envelope. An envelope too
    /// thin to be drawn alone stays in its blend. Lowers `lod.stable_bytes` to the lowest
    /// block that moves. O(the pools' sweeps + bands) for the pools drawn; a pool's layout is
    /// made the first time it is drawn (O(m log m) for its m blocks). `env` is the envelope
    /// timeline these blocks were filed from.
    pub fn paint(&self, env: &Timeline, q: &LodQuery, lod: &mut Lod, hits: Option<&[bool]>) {
        if q.min_bytes == u64::MAX || self.envelope_pool.is_empty() {
            return;
        }
        let mut envelopes: Vec<(u32, Band)> = Vec::new();
        lod.bands.retain(|b| match b.element.and_then(|id| self.envelope_of(id)) {
            Some(k) => {
                envelopes.push((k, *b));
                false
            }
            None => true,
        });
        // By pool, then column: one envelope of a pool is alive at each step, so its bands
        // take turns over the columns.
        envelopes.sort_by_key(|(k, b)| (*k, b.first_column));
        for group in envelopes.chunk_by(|a, b| a.0 == b.0) {
            let bands: Vec<Band> = group.iter().map(|g| g.1).collect();
            self.paint_pool(group[0].0, &bands, env, q, lod, hits);
        }
    }

    /// [`Inside::paint`] for pool `k`, whose envelope is drawn as `envelopes` (by column).
    fn paint_pool(
        &self,
        k: u32,
        envelopes: &[Band],
        env: &Timeline,
        q: &LodQuery,
        lod: &mut Lod,
        hits: Option<&[bool]>,
    ) {
        let tint = envelope_colour(k);
        let rest = |e: &Band, first: u32, last: u32, top: u64| Band {
            element: e.element,
            first_column: first,
            last_column: last,
            offset_bytes: e.offset_bytes.saturating_add(top),
            size_bytes: e.size_bytes - top,
            rgb: tint,
            hit_bytes: if e.hit_bytes > 0 { e.size_bytes - top } else { 0 },
        };
        let Some((local, ids)) = self.local(k, env) else {
            // No block in sight: the envelope is all reserved bytes.
            lod.bands.extend(envelopes.iter().map(|e| rest(e, e.first_column, e.last_column, 0)));
            return;
        };
        // The pool's blocks at the envelope view's sampled steps, where its envelope is drawn.
        let cols = lod.columns.len();
        let mut shown: Vec<Option<u32>> = vec![None; cols];
        for e in envelopes {
            let run = (e.first_column as usize).min(cols)..(e.last_column as usize + 1).min(cols);
            for (at, col) in shown[run.clone()].iter_mut().zip(&lod.columns[run]) {
                *at = Some(local.step_of(col.step));
            }
        }
        let hit = |i: u32| hits.is_some_and(|h| h.get(ids[i as usize] as usize).copied().unwrap_or(false));
        let inner = local.timeline.sweep(q, |c, _, _| shown.get(c as usize).copied().flatten(), hit);
        let span = (envelopes[0].first_column, envelopes[envelopes.len() - 1].last_column);
        let whole = span.1 - span.0 + 1 == envelopes.iter().map(|e| e.last_column - e.first_column + 1).sum::<u32>();
        let lowest = envelopes.iter().map(|e| e.offset_bytes).min().unwrap_or(0);
        let els = local.timeline.elements();
        let shades: [u32; SHADES as usize] = std::array::from_fn(|i| shade(k, i as u32));
        lod.bands.reserve(inner.bands.len() + envelopes.len());
        for b in &inner.bands {
            // Bands that do not span every column the envelope is drawn in move.
            if !whole || (b.first_column, b.last_column) != span {
                lod.stable_bytes = lod.stable_bytes.min(lowest.saturating_add(b.offset_bytes));
            }
            let rgb = b.element.map_or(blend_colour(k), |i| shades[shade_of(els[i as usize].order) as usize]);
            let from = envelopes.partition_point(|e| e.last_column < b.first_column);
            for e in envelopes[from..].iter().take_while(|e| e.first_column <= b.last_column) {
                lod.bands.push(Band {
                    element: b.element.map(|i| ids[i as usize]),
                    first_column: b.first_column.max(e.first_column),
                    last_column: b.last_column.min(e.last_column),
                    offset_bytes: e.offset_bytes.saturating_add(b.offset_bytes),
                    size_bytes: b.size_bytes,
                    rgb,
                    hit_bytes: b.hit_bytes,
                });
            }
        }
        // Above the blocks, the rest of the envelope, a band per run of columns where the
        // blocks' top stays.
        let top = |c: u32| inner.columns.get(c as usize).map_or(0, |col| col.drawn_bytes);
        for e in envelopes {
            let mut c = e.first_column;
            while c <= e.last_column {
                let t = top(c).min(e.size_bytes);
                let mut last = c;
                while last < e.last_column && top(last + 1).min(e.size_bytes) == t {
                    last += 1;
                }
                if t < e.size_bytes {
                    lod.bands.push(rest(e, c, last, t));
                }
                c = last + 1;
            }
        }
    }

    /// The element at `bytes` after `step` of the envelope timeline `env`, as
    /// [`Timeline::element_near`] finds it, with a pool's block inside its envelope found as
    /// the envelope view draws it. O(k log n) for k elements alive.
    pub fn element_near(&self, env: &Timeline, step: u32, bytes: u64, slack: u64) -> Option<u32> {
        let id = env.element_near(step, bytes, slack)?;
        let Some((local, ids)) = self.envelope_of(id).and_then(|k| self.local(k, env)) else { return Some(id) };
        let bottom = offset_at(env, step, id);
        let (at, inner) = (local.step_of(step), bytes.saturating_sub(bottom));
        let live = local.timeline.totals().get(at as usize).copied().unwrap_or(0);
        if inner >= live {
            return Some(id);
        }
        local.timeline.element_near(at, inner, slack).map(|i| ids[i as usize]).or(Some(id))
    }
}

/// Bytes below element `id` after `step`: those of every element alive then, lower in the stack.
fn offset_at(tl: &Timeline, step: u32, id: u32) -> u64 {
    let order = tl.elements()[id as usize].order;
    (tl.live_at(step, 1).into_iter())
        .map(|i| &tl.elements()[i as usize])
        .take_while(|e| e.order < order)
        .fold(0u64, |sum, e| sum.saturating_add(e.size))
}

/// Pool `k`'s hue (0 to 6): golden-angle steps from an azure, one family per pool.
fn family(k: u32) -> f64 {
    (0.58 + f64::from(k) * 0.618_033_988_749_895).fract() * 6.0
}

/// How many shades a pool's blocks take: [`Inside::paint`] works them out once per pool
/// and picks one per band, where a colour worked out per band cost as much as the sweep.
const SHADES: u32 = 16;

/// The shade of a seed: golden-ratio hashing, so that neighbours in the stack differ.
fn shade_of(seed: u32) -> u32 {
    seed.wrapping_mul(0x9e37_79b9) >> (32 - SHADES.trailing_zeros())
}

/// Shade `i` of pool `k`'s blocks, from deep to light: deeper and more saturated than the
/// default pool's colours ([`super::colour`]); a block's is `shade(k, shade_of(its order))`.
fn shade(k: u32, i: u32) -> u32 {
    hsl(family(k), 0.7, 0.26 + 0.2 * (f64::from(i) + 0.5) / f64::from(SHADES))
}

/// A blend of pool `k`'s blocks too thin to draw alone: the middle of its shades.
fn blend_colour(k: u32) -> u32 {
    hsl(family(k), 0.7, 0.36)
}

/// The bytes pool `k` reserves beyond what its blocks hold: a pale tint of its hue.
fn envelope_colour(k: u32) -> u32 {
    hsl(family(k), 0.45, 0.86)
}

/// RGB of hue `h` (0 to 6), saturation `s` and lightness `l`, as [`super::colour`] works
/// it out (no float remainder or `round` library call in wasm).
fn hsl(h: f64, s: f64, l: f64) -> u32 {
    super::hsl_with(h, s, l, |h| h - 2.0 * (h * 0.5).floor(), round)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hue (0 to 6), saturation and lightness of an RGB colour.
    fn hsl_of(rgb: u32) -> (f64, f64, f64) {
        let [r, g, b] = [rgb >> 16, rgb >> 8, rgb].map(|c| f64::from(c & 255) / 255.0);
        let (max, min) = (r.max(g).max(b), r.min(g).min(b));
        let (l, d) = ((max + min) / 2.0, max - min);
        let s = if d == 0.0 { 0.0 } else { d / (1.0 - (2.0 * l - 1.0).abs()) };
        let h = if d == 0.0 {
            0.0
        } else if max == r {
            ((g - b) / d).rem_euclid(6.0)
        } else if max == g {
            (b - r) / d + 2.0
        } else {
            (r - g) / d + 4.0
        };
        (h, s, l)
    }

    #[test]
    fn a_pools_blocks_are_shades_of_its_own_hue_deeper_than_the_default_pools_colours() {
        for k in 0..8 {
            let hue = family(k);
            for i in 0..SHADES {
                let (h, s, l) = hsl_of(shade(k, i));
                assert!((h - hue).abs() < 0.05 && s > 0.6 && l < 0.47, "pool {k}, shade {i}: {h} {s} {l}");
            }
            let (h, _, l) = hsl_of(envelope_colour(k));
            assert!((h - hue).abs() < 0.1 && l > 0.8, "pool {k}'s tint");
            // Each pool's hue is its own: at least a twelfth of the circle from the others'.
            for j in 0..k {
                let d = (family(j) - hue).abs();
                assert!(d.min(6.0 - d) > 0.5, "pools {j} and {k}");
            }
        }
        // The default pool's colours are lighter and less saturated than any pool's blocks.
        for seed in 0..4096 {
            let (_, s, l) = hsl_of(super::super::colour(seed));
            assert!(l > 0.55 && s < 0.6, "seed {seed}: {s} {l}");
        }
        // Neighbours in a pool's stack take different shades.
        assert!((0..4096).all(|order| shade_of(order) != shade_of(order + 1)));
    }
}
