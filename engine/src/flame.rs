//! The flame graph's view model: the core's tree ([`snapshot::flame`]) pruned to what can be
//! drawn, each node named, coloured as the timeline colours its heaviest element, and
//! flagged when its frame matches the search.

use snapshot::flame::{self, At, FlameQuery, NodeKind};
use snapshot::frames::frame_text;
use snapshot::search::{frame_matcher, Query};
use snapshot::timeline::Timeline;
use snapshot::Snapshot;

use crate::colour;
use crate::protocol::{FlameLineVm, FlameNodeVm, FlameVm};

/// Nodes lighter than `1 / MIN_SHARE` of the root are left out (their weight stays in their
/// parent's, shown as its `pruned` share), so that a message holds at most `MIN_SHARE` nodes
/// per row.
pub const MIN_SHARE: u64 = 2000;

/// Lines of code sent, heaviest first.
pub const LINES: usize = 200;

/// The flame graph of `tl` (a blocks timeline): at `step`, or the peak; with `window`
/// (steps, fractional), bytes × steps alive inside it instead.
pub(crate) fn view(
    snap: &Snapshot,
    tl: &Timeline,
    step: Option<u32>,
    window: Option<(f64, f64)>,
    all_frames: bool,
    query: Option<&Query>,
) -> Result<FlameVm, String> {
    let n = tl.n_steps();
    let at = match (window, step) {
        (Some((a, b)), _) if b > a => {
            let lo = a.floor().clamp(0.0, f64::from(n.saturating_sub(1))) as u32;
            At::Window(lo, b.ceil().clamp(f64::from(lo + 1), f64::from(n)) as u32)
        }
        // An empty window (a tab not yet laid out) is the whole trace.
        (Some(_), _) => At::Window(0, n),
        (None, Some(s)) => At::Step(s),
        (None, None) => flame::peak(tl),
    };
    let f = flame::flame(snap, tl, &FlameQuery { at, all_frames, min_share: MIN_SHARE, lines: LINES });
    let matches = match query {
        Some(q) => frame_matcher(q)?,
        None => None,
    };
    let els = tl.elements();
    let rgb = |id: u32| els.get(id as usize).map_or(0, |e| colour(e.order));
    let nodes: Vec<FlameNodeVm> = f
        .nodes
        .iter()
        .map(|n| {
            let frame = match n.kind {
                NodeKind::Frame(id) | NodeKind::FreedAt(id) => snap.frames.get(id.0 as usize),
                _ => None,
            };
            let name = match (n.kind, frame) {
                (NodeKind::Root, _) => "all".to_string(),
                (NodeKind::NoStack, _) => "(no stack recorded)".to_string(),
                (NodeKind::NoFrames, _) => "(no frames)".to_string(),
                (NodeKind::BeforeRecording, _) => "(allocated before recording)".to_string(),
                (NodeKind::Op(o), _) => o.text(snap),
                (NodeKind::Frame(_), Some(fr)) => snap.str(fr.name).to_string(),
                (NodeKind::FreedAt(_), Some(fr)) => format!("freed at {}", snap.str(fr.name)),
                (NodeKind::Frame(_) | NodeKind::FreedAt(_), None) => "?".to_string(),
            };
            let hit = match (n.kind, matches.as_ref()) {
                (NodeKind::Frame(_), Some(m)) => frame.is_some_and(|fr| m(&frame_text(snap, fr))),
                (NodeKind::Op(o), Some(m)) => {
                    let frames = [o.node, o.op].into_iter().flatten().filter_map(|id| snap.frames.get(id.0 as usize));
                    m(&name) || frames.into_iter().any(|fr| m(&frame_text(snap, fr)))
                }
                _ => false,
            };
            FlameNodeVm {
                parent: n.parent,
                depth: n.depth,
                name,
                file: frame.map(|fr| snap.str(fr.filename).to_string()).unwrap_or_default(),
                line: frame.map_or(0, |fr| fr.line),
                weight: n.weight,
                self_weight: n.self_weight,
                pruned: n.pruned,
                offset: n.offset,
                count: n.count,
                rgb: rgb(n.largest),
                hit,
            }
        })
        .collect();
    let as_step = |at: At| match at {
        At::Step(s) => Some(s),
        At::Before | At::Window(..) => None,
    };
    Ok(FlameVm {
        n_steps: n,
        step: as_step(f.at),
        window: match f.at {
            At::Window(lo, hi) => Some((lo, hi)),
            _ => None,
        },
        peak_step: as_step(flame::peak(tl)),
        peak_bytes: tl.peak_bytes(),
        total: f.total(),
        hits: nodes.iter().filter(|n| n.hit).count() as u32,
        nodes,
        lines: f
            .lines
            .iter()
            .map(|l| FlameLineVm { site: l.site.clone(), weight: l.weight, count: l.count, rgb: rgb(l.largest) })
            .collect(),
        n_lines: f.n_lines as u32,
    })
}
