//! The layers of a run's forward passes, as the checkpointing prediction needs them: which
//! activations belong to one layer, and so which is each layer's first.
//!
//! A layer's activations are told apart by their call site (the first frame of the user's
//! code). Real models run every layer through the same code (one `Block` class in an
//! `nn.ModuleList`), so a site of the layers' code makes activations once per layer in each
//! iteration: its sequence of activations, by size, repeats. The number of repeats most sites
//! of an iteration make is its number of layers; a site making that many marks where each
//! layer starts (its repeats' first activations), and every repeated activation of a site
//! making at least as many belongs to the layer it starts in. Of the first sites making that
//! many, the one whose layers are most alike in bytes marks them; when even its largest layer
//! holds over [`MAX_IMBALANCE`] times the median layer's bytes (compiled code whose small
//! tensors repeat as often as the layers, in one burst), the iteration is grouped by site.
//! Activations of a site that does not repeat (each layer with lines of its own, the
//! embedding, the head) are one group per site and iteration.
//!
//! Cost: a sort of the activations, then for each position at most [`MAX_PERIOD`] candidate
//! periods, each scanned while it repeats, and the grouping once per candidate marker (at most
//! [`MAX_MARKERS`]): O(a log a + a × (MAX_PERIOD + MAX_MARKERS)) for a activations.

use rustc_hash::FxHashMap;

use crate::model::FrameId;

/// The longest sequence of activations one site makes in one layer that is looked for.
const MAX_PERIOD: usize = 64;

/// An activation: its iteration, call site, start step, element id and bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Act {
    pub iteration: u32,
    pub site: Option<FrameId>,
    pub start: u32,
    pub id: u32,
    pub size: u64,
}

/// A group of activations that checkpointing keeps one of: a layer of an iteration, or a
/// site's activations in an iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Group {
    Layer(u32, u32),
    Site(u32, Option<FrameId>),
}

/// The activations checkpointing keeps (each group's first, by start) and the most bytes one
/// group holds besides its first (what recomputing one layer makes again).
pub(super) fn first_of_each_layer(mut acts: Vec<Act>) -> (Vec<u32>, u64) {
    acts.sort_unstable_by_key(|a| (a.iteration, a.site, a.start, a.id));
    let mut group_of: Vec<Group> = Vec::with_capacity(acts.len());
    let mut i = 0;
    while i < acts.len() {
        let it = acts[i].iteration;
        let end = i + acts[i..].partition_point(|a| a.iteration == it);
        assign_iteration(&acts[i..end], &mut group_of);
        i = end;
    }
    // Per group: the first (start, id, bytes) and the bytes of all.
    let mut groups: FxHashMap<Group, ((u32, u32, u64), u64)> = FxHashMap::default();
    for (a, g) in acts.iter().zip(&group_of) {
        let e = groups.entry(*g).or_insert(((a.start, a.id, a.size), 0));
        if (a.start, a.id) < (e.0 .0, e.0 .1) {
            e.0 = (a.start, a.id, a.size);
        }
        e.1 = e.1.saturating_add(a.size);
    }
    let mut layer_max = 0;
    let mut firsts = Vec::with_capacity(groups.len());
    for &((_, first, first_bytes), total) in groups.values() {
        layer_max = layer_max.max(total.saturating_sub(first_bytes));
        firsts.push(first);
    }
    (firsts, layer_max)
}

/// A site's range in an iteration's activations and its repeats (start, period, count) there.
type SiteReps = (usize, usize, Vec<(usize, usize, usize)>);

/// How many layers may differ in bytes: a layering whose largest layer holds more than this
/// many times the median layer's bytes is taken to be wrong (a burst of small tensors repeating
/// as often as the layers, in compiled code) and the iteration is grouped by site instead.
const MAX_IMBALANCE: f64 = 4.0;

/// The site candidates for marking where layers start that are tried, the earliest first.
const MAX_MARKERS: usize = 8;

/// The groups of one iteration's activations (sorted by site, then start), appended to `out`.
fn assign_iteration(acts: &[Act], out: &mut Vec<Group>) {
    let mut sites: Vec<SiteReps> = Vec::new();
    let mut i = 0;
    while i < acts.len() {
        let site = acts[i].site;
        let end = i + acts[i..].partition_point(|a| a.site == site);
        let tokens: Vec<u16> = acts[i..end].iter().map(|a| size_class(a.size)).collect();
        sites.push((i, end, repeats(&tokens)));
        i = end;
    }
    // The layers: the number of repeats most sites make (ties: the larger). A site making that
    // many marks where each layer starts; the sites making at least as many are the layers'
    // code (a site running twice in a layer repeats more, a head making two tensors alike
    // fewer). Of the first sites making that many, the one whose layers are most alike in
    // bytes marks them.
    let mut tally: FxHashMap<usize, usize> = FxHashMap::default();
    for s in sites.iter().filter(|s| !s.2.is_empty()) {
        *tally.entry(count(&s.2)).or_default() += 1;
    }
    let layers = tally.iter().max_by_key(|&(&n, &sites)| (sites, n)).map_or(0, |(&n, _)| n);
    let mut markers: Vec<&SiteReps> = sites.iter().filter(|s| layers > 0 && count(&s.2) == layers).collect();
    markers.sort_unstable_by_key(|s| acts[s.0].start);
    let mut best: Option<(f64, Vec<Group>)> = None;
    for (from, _, reps) in markers.into_iter().take(MAX_MARKERS) {
        let starts: Vec<u32> =
            reps.iter().flat_map(|&(s, p, n)| (0..n).map(move |k| acts[from + s + k * p].start)).collect();
        let groups = groups_of(acts, &sites, layers, &starts);
        let imbalance = imbalance(acts, &groups, starts.len());
        if best.as_ref().is_none_or(|b| imbalance < b.0) {
            best = Some((imbalance, groups));
        }
    }
    match best {
        Some((imbalance, groups)) if imbalance <= MAX_IMBALANCE => out.extend(groups),
        _ => out.extend(acts.iter().map(|a| Group::Site(a.iteration, a.site))),
    }
}

/// The number of repeats of a site.
fn count(reps: &[(usize, usize, usize)]) -> usize {
    reps.iter().map(|r| r.2).sum()
}

/// Each activation's group when layers start at `starts`: the layer it starts in for the
/// repeats of a site making at least `layers` of them, its site otherwise.
fn groups_of(acts: &[Act], sites: &[SiteReps], layers: usize, starts: &[u32]) -> Vec<Group> {
    let mut out = Vec::with_capacity(acts.len());
    for (from, end, reps) in sites {
        let reps: &[_] = if count(reps) >= layers { reps } else { &[] };
        let mut covered = reps.iter().map(|&(s, p, n)| (from + s)..(from + s + p * n)).peekable();
        for (j, a) in acts.iter().enumerate().take(*end).skip(*from) {
            while covered.peek().is_some_and(|r| r.end <= j) {
                covered.next();
            }
            let group = if covered.peek().is_some_and(|r| r.contains(&j)) {
                let layer = starts.partition_point(|&s| s <= a.start).saturating_sub(1);
                Group::Layer(a.iteration, layer as u32)
            } else {
                Group::Site(a.iteration, a.site)
            };
            out.push(group);
        }
    }
    out
}

/// The largest layer's bytes over the median layer's (infinite when the median is 0).
fn imbalance(acts: &[Act], groups: &[Group], layers: usize) -> f64 {
    let mut bytes = vec![0u64; layers];
    for (a, g) in acts.iter().zip(groups) {
        if let Group::Layer(_, l) = g {
            bytes[*l as usize] = bytes[*l as usize].saturating_add(a.size);
        }
    }
    bytes.sort_unstable();
    let (median, max) = (bytes[layers / 2], bytes[layers - 1]);
    if median == 0 {
        f64::INFINITY
    } else {
        max as f64 / median as f64
    }
}

/// A size to an eighth of an octave: the same tensor shape in every layer gives the same
/// class, a few bytes of padding or alignment do not change it.
fn size_class(size: u64) -> u16 {
    if size == 0 {
        return 0;
    }
    let bits = 63 - size.leading_zeros();
    let frac = if bits >= 3 { (size >> (bits - 3)) & 7 } else { (size << (3 - bits)) & 7 };
    (bits as u16 + 1) * 8 + frac as u16
}

/// The repeats in a sequence, greedily from the left: (start, period, count) for each stretch
/// that is the same `period` tokens `count` (at least 2) times, the stretch covering the most
/// tokens at each start (the shorter period on a tie).
fn repeats(tokens: &[u16]) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let mut best = (0, 0);
        for p in 1..=MAX_PERIOD.min((tokens.len() - i) / 2) {
            if tokens[i + p] != tokens[i] {
                continue;
            }
            // The stretch from i with period p is p + m tokens long.
            let m = tokens[i + p..].iter().zip(&tokens[i..]).take_while(|(a, b)| a == b).count();
            let covered = (p + m) / p * p;
            if covered >= 2 * p && covered > best.0 {
                best = (covered, p);
            }
        }
        if best.0 > 0 {
            out.push((i, best.1, best.0 / best.1));
            i += best.0;
        } else {
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_found_after_a_prefix_and_before_a_suffix() {
        // An embedding (1), four layers of [a, b, b, c], a head (9, 9).
        let t = [1, 2, 3, 3, 4, 2, 3, 3, 4, 2, 3, 3, 4, 2, 3, 3, 4, 9, 9];
        assert_eq!(repeats(&t), vec![(1, 4, 4), (17, 1, 2)]);
        assert_eq!(repeats(&[5, 6, 7]), vec![]);
        // Two stages of two blocks each, the stages' sizes differing.
        assert_eq!(repeats(&[1, 1, 2, 1, 1, 2, 3, 3, 4, 3, 3, 4]), vec![(0, 3, 2), (6, 3, 2)]);
    }

    #[test]
    fn size_classes_tell_shapes_apart_but_not_padding() {
        assert_eq!(size_class(64 << 20), size_class((64 << 20) + 32 * 1024));
        assert_ne!(size_class(64 << 20), size_class(128 << 20));
        assert_ne!(size_class(64 << 20), size_class(80 << 20));
        assert!(size_class(1) > size_class(0));
    }

    /// Activations (site, bytes) one step apart, ids from 1.
    fn acts(list: &[(u32, u64)]) -> Vec<Act> {
        let at = |i: usize| i as u32 + 1;
        list.iter()
            .enumerate()
            .map(|(i, &(s, size))| Act { iteration: 0, site: Some(FrameId(s)), start: at(i), id: at(i), size })
            .collect()
    }

    fn firsts(list: &[(u32, u64)]) -> Vec<u32> {
        let mut f = first_of_each_layer(acts(list)).0;
        f.sort_unstable();
        f
    }

    #[test]
    fn a_burst_repeating_as_often_as_the_layers_does_not_mark_them() {
        // Three small tensors at once (compiled code's), then three layers of two activations.
        let burst = [(9, 8), (9, 8), (9, 8)];
        let layers = [(1, 1000), (1, 2000), (1, 1000), (1, 2000), (1, 1000), (1, 2000)];
        assert_eq!(firsts(&[&burst[..], &layers].concat()), vec![1, 6, 8]);
        // Where only bursts make as many repeats as the layers, the layering is refused: each
        // site is a group of its own.
        let four = [(1, 1000), (1, 2000), (1, 1000), (1, 2000), (1, 1000), (1, 2000), (1, 1000), (1, 2000)];
        assert_eq!(firsts(&[&burst[..], &[(8, 16), (8, 16), (8, 16)], &four].concat()), vec![1, 4, 7]);
    }

    #[test]
    fn layers_sharing_code_are_told_apart_and_keep_their_first() {
        let site = |n| Some(FrameId(n));
        let mut acts = Vec::new();
        let mut t = 0;
        let mut push = |s, size, acts: &mut Vec<Act>| {
            t += 1;
            acts.push(Act { iteration: 0, site: site(s), start: t, id: t, size });
        };
        push(0, 100, &mut acts); // embedding
        for _ in 0..3 {
            push(1, 1000, &mut acts); // ln1's output, then its statistics
            push(1, 10, &mut acts);
            push(2, 3000, &mut acts); // attention at another line
            push(1, 1000, &mut acts); // a line the layer runs twice
            push(4, 20, &mut acts); // a helper called twice in each layer
            push(4, 20, &mut acts);
        }
        push(3, 50, &mut acts); // the head: two alike, but not a layer each
        push(3, 50, &mut acts);
        let (mut firsts, layer_max) = first_of_each_layer(acts);
        firsts.sort_unstable();
        // The embedding, each layer's first (ln1's output), the head's first.
        assert_eq!(firsts, vec![1, 2, 8, 14, 20]);
        assert_eq!(layer_max, 10 + 3000 + 1000 + 2 * 20);
    }
}
