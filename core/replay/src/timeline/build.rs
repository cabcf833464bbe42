//! Which timeline a kind names: paired from the trace (blocks, segments), or the blocks
//! timeline with each private pool as its envelope ([`crate::pools`]).

use crate::model::Snapshot;
use crate::pools::envelope_timeline;

use super::{Timeline, TimelineKind};

impl Timeline {
    /// Lays out the timeline of `device`: its elements paired from the trace (`pairing`), then
    /// stacked and summed (`finish`).
    pub fn build(snap: &Snapshot, device: usize, kind: TimelineKind) -> Timeline {
        let paired = match kind {
            TimelineKind::Blocks => super::pairing::blocks(snap, device),
            TimelineKind::Segments => super::pairing::segments(snap, device),
            TimelineKind::PoolEnvelopes => {
                return envelope_timeline(snap, &Self::build(snap, device, TimelineKind::Blocks)).0
            }
        };
        let super::pairing::Paired { elements, initial, n_unmatched, allocs, step_entry } = paired;
        Self::finish(kind, device, elements, initial, n_unmatched, allocs, step_entry)
    }
}
