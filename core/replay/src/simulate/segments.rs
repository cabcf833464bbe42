//! The simulator's segments written as a snapshot's: the generator (`core/synth`) and the
//! predictor (`core/predict`) both place their allocations with [`Simulator`](super::Simulator)
//! and write what it placed with [`to_model`].

use super::SimSegment;
use crate::model::{Block, BlockState, Segment, StackId};
use crate::StrId;

/// What a program knows of the allocation in one allocated block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The bytes asked for.
    pub requested: u64,
    /// The stack it was allocated at (none when it was allocated while not recording).
    pub stack: Option<StackId>,
    /// Freed by the program, but a stream still uses it (`active_pending_free`).
    pub pending_free: bool,
}

/// How [`to_model`] labels what it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Labels {
    /// The device's index.
    pub device: i64,
    /// The interned `segment_type` of a small-pool segment (`small`).
    pub small: StrId,
    /// The interned `segment_type` of a large-pool segment (`large`).
    pub large: StrId,
    /// The stack given to blocks and segments without one.
    pub empty: StackId,
}

/// The snapshot's segments for `segments` ([`Simulator::segments`](super::Simulator::segments)):
/// `holder(address)` says what an allocated block at that address holds (a block the
/// simulator marks allocated but `holder` does not know is written inactive), and
/// `segment_stack(address)` the stack the segment at that address was made for. Linear in
/// the blocks.
pub fn to_model(
    segments: Vec<SimSegment>,
    labels: Labels,
    holder: impl Fn(u64) -> Option<Holder>,
    segment_stack: impl Fn(u64) -> Option<StackId>,
) -> Vec<Segment> {
    segments
        .into_iter()
        .map(|s| {
            let (mut allocated, mut active, mut requested) = (0u64, 0u64, 0u64);
            let blocks: Vec<Block> = s
                .blocks
                .iter()
                .map(|b| {
                    let held = if b.allocated { holder(b.address) } else { None };
                    let state = match held {
                        Some(h) if h.pending_free => BlockState::ActivePendingFree,
                        Some(_) => BlockState::ActiveAllocated,
                        None => BlockState::Inactive,
                    };
                    if let Some(h) = held {
                        active += b.size;
                        requested += h.requested;
                        if !h.pending_free {
                            allocated += b.size;
                        }
                    }
                    Block {
                        address: Some(b.address),
                        size: b.size,
                        requested_size: Some(held.map_or(0, |h| h.requested)),
                        state,
                        frames: Some(held.and_then(|h| h.stack).unwrap_or(labels.empty)),
                        history: None,
                        extras: Vec::new(),
                    }
                })
                .collect();
            Segment {
                device: labels.device,
                address: s.address,
                total_size: s.size,
                allocated_size: Some(allocated),
                active_size: Some(active),
                requested_size: Some(requested),
                stream: s.stream,
                segment_type: Some(if s.small { labels.small } else { labels.large }),
                segment_pool_id: Some((0, 0)),
                is_expandable: Some(s.expandable),
                frames: Some(segment_stack(s.address).unwrap_or(labels.empty)),
                blocks,
                extras: Vec::new(),
            }
        })
        .collect()
}
