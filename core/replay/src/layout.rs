//! The allocator's figures at one moment, from an [`AllocatorState`]: free blocks per pool and
//! stream (expandable segments as contiguous mapped ranges), bytes free inside the cache, the
//! largest free block, and the size PyTorch's caching allocator would have asked the device for.
//!
//! The state knows live blocks only; a free block is a gap between live blocks. Blocks replayed
//! from the trace carry their requested size, not the rounded size the allocator gave them, so
//! each live block is rounded as the allocator rounds (512 bytes) and a gap after it too small
//! to be a block of its own (under 512 bytes in the small pool, at most 1 MiB in the large pool,
//! which never splits off a remainder that small) is counted as part of it.

use serde::{Deserialize, Serialize};

use crate::allocator::{is_small, round_size, LARGE_BUFFER, MIN_BLOCK, SMALL_BUFFER, SMALL_SIZE};
use crate::model::PoolId;
use crate::state::AllocatorState;

use crate::settings::Settings;

/// A sum that stops at `u64::MAX` (hostile files can hold sizes that overflow).
pub fn sum(v: impl Iterator<Item = u64>) -> u64 {
    v.fold(0, u64::saturating_add)
}

/// Which pool a segment or a request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    /// Requests up to 1 MiB, in 2 MiB segments.
    Small,
    /// Larger requests.
    Large,
    /// A private pool (CUDA graphs, `MemPool`).
    Private,
}

impl PoolKind {
    /// The name for people, as in "the large pool" (the JSON's name too).
    pub fn label(self) -> &'static str {
        match self {
            PoolKind::Small => "small",
            PoolKind::Large => "large",
            PoolKind::Private => "private",
        }
    }
}

/// The pool a request of `size` bytes is served from (`pool`: the oom entry's `pool_id`).
pub fn request_pool(size: u64, pool: Option<PoolId>) -> (PoolKind, Option<PoolId>) {
    match pool {
        Some(p) if p != (0, 0) => (PoolKind::Private, Some(p)),
        _ if is_small(size) => (PoolKind::Small, None),
        _ => (PoolKind::Large, None),
    }
}

/// Free memory of one pool on one stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolFree {
    /// Small, large or private.
    pub pool: PoolKind,
    /// The private pool's id.
    pub private_pool: Option<(u64, u64)>,
    /// Stream handle.
    pub stream: i64,
    /// Segments (for expandable segments: contiguous mapped ranges).
    pub segments: u32,
    /// Bytes they reserve.
    pub reserved_bytes: u64,
    /// Free blocks in them.
    pub free_blocks: u32,
    /// Bytes free in them.
    pub free_bytes: u64,
    /// The largest free block.
    pub largest_free_block_bytes: u64,
    /// True when its segments are expandable.
    pub expandable: bool,
}

impl PoolFree {
    /// The pool in words: `large pool`, `small pool`, `private pool (1, 2)`.
    pub fn name(&self) -> String {
        match self.private_pool {
            Some((a, b)) => format!("private pool ({a}, {b})"),
            None => format!("{} pool", self.pool.label()),
        }
    }
}

/// A pool on a stream: kind, private pool id, stream.
type PoolKey = (PoolKind, Option<PoolId>, i64);

/// One free block (a gap between live blocks; in expandable segments it may run across
/// adjacent mapped ranges).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    /// Index in [`Layout::segments`] of the segment it starts in.
    pub segment: usize,
    /// Its start address.
    pub address: u64,
    /// Its bytes.
    pub size: u64,
}

/// One segment as the doctor sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentLayout {
    /// Start address.
    pub address: u64,
    /// Bytes reserved.
    pub size: u64,
    /// Stream.
    pub stream: i64,
    /// Pool.
    pub pool: PoolKind,
    /// Private pool id.
    pub private_pool: Option<PoolId>,
    /// Expandable.
    pub expandable: bool,
    /// Live blocks: (rounded bytes, requested bytes).
    pub blocks: Vec<(u64, u64)>,
}

/// The segments and free blocks of one state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Segments in address order.
    pub segments: Vec<SegmentLayout>,
    /// Free blocks in address order.
    pub gaps: Vec<Gap>,
}

/// The headline figures of one state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Σ segment sizes.
    pub reserved_bytes: u64,
    /// Σ requested bytes of live blocks (pending frees count as allocated).
    pub allocated_bytes: u64,
    /// Σ rounded bytes of live blocks.
    pub live_block_bytes: u64,
    /// Live blocks.
    pub live_blocks: u32,
    /// Bytes free inside the cache (reserved, in no live block).
    pub cached_free_bytes: u64,
    /// Free blocks.
    pub free_blocks: u32,
    /// The largest free block of any pool and stream.
    pub largest_free_block_any_bytes: u64,
    /// Per pool and stream.
    pub pools: Vec<PoolFree>,
}

/// The layout of a state: live blocks rounded, free blocks found (see the module's notes).
pub fn layout(state: &AllocatorState, settings: &Settings) -> Layout {
    let mut out = Layout::default();
    // An open gap at the end of the previous expandable range: (index in gaps, end address, stream).
    let mut open: Option<(usize, u64, i64)> = None;
    for seg in &state.segments {
        let pool = match seg.pool {
            Some(p) if p != (0, 0) => PoolKind::Private,
            _ if seg.size == SMALL_BUFFER && !seg.expandable => PoolKind::Small,
            _ => PoolKind::Large,
        };
        let (private_pool, end) = (seg.pool.filter(|&p| p != (0, 0)), seg.address.saturating_add(seg.size));
        let index = out.segments.len();
        let mut blocks = Vec::with_capacity(seg.blocks.len());
        let mut cursor = seg.address;
        let continues = open.filter(|&(_, e, s)| seg.expandable && e == seg.address && s == seg.stream);
        open = None;
        for (k, b) in seg.blocks.iter().enumerate() {
            let start = b.address.max(cursor);
            if start > cursor {
                push_gap(&mut out.gaps, continues.filter(|_| cursor == seg.address), index, cursor, start - cursor);
            }
            let next = seg.blocks.get(k + 1).map_or(end, |n| n.address).max(start);
            let rounded = b.size.max(round_size(b.requested_size));
            // PyTorch's should_split: the small pool, and any pool under expandable segments,
            // split off a remainder of at least kMinBlockSize.
            let slack_limit = match pool {
                PoolKind::Small => MIN_BLOCK,
                _ if seg.expandable => MIN_BLOCK,
                _ if settings.max_split_size_bytes.is_some_and(|m| rounded >= m) => LARGE_BUFFER + 1,
                _ => SMALL_SIZE + 1,
            };
            let mut block_end = start.saturating_add(rounded).min(next);
            if next - block_end < slack_limit {
                block_end = next;
            }
            blocks.push((block_end - start, b.requested_size));
            cursor = block_end;
        }
        if end > cursor {
            let k = push_gap(&mut out.gaps, continues.filter(|_| cursor == seg.address), index, cursor, end - cursor);
            if seg.expandable {
                open = Some((k, end, seg.stream));
            }
        }
        out.segments.push(SegmentLayout {
            address: seg.address,
            size: seg.size,
            stream: seg.stream,
            pool,
            private_pool,
            expandable: seg.expandable,
            blocks,
        });
    }
    out
}

/// Adds a free block, or extends the open one it continues; returns its index.
fn push_gap(
    gaps: &mut Vec<Gap>,
    continues: Option<(usize, u64, i64)>,
    segment: usize,
    address: u64,
    size: u64,
) -> usize {
    if let Some((k, _, _)) = continues {
        if let Some(g) = gaps.get_mut(k) {
            g.size = g.size.saturating_add(size);
            return k;
        }
    }
    gaps.push(Gap { segment, address, size });
    gaps.len() - 1
}

/// Whether the caching allocator would hand a free block of `block` bytes to a request of
/// `requested` (rounded) bytes, by its `max_split_size` rules (`get_free_block`): an
/// oversize block (at least `max_split`) never serves a smaller request, and serves a large
/// one only if less than `kLargeBuffer` (20 MiB) would be left over. Without the setting,
/// any block may.
pub fn may_serve(block: u64, requested: u64, max_split: Option<u64>) -> bool {
    match max_split {
        None => true,
        Some(m) if requested < m => block < m,
        Some(_) => block < requested.saturating_add(LARGE_BUFFER),
    }
}

impl Layout {
    /// The figures of this layout (`allocated_bytes` is the state's own).
    pub fn figures(&self, state: &AllocatorState) -> Figures {
        let mut pools: Vec<PoolFree> = Vec::new();
        let key = |s: &SegmentLayout| -> PoolKey { (s.pool, s.private_pool, s.stream) };
        // Pools are few in real files (two per stream, plus private pools), but a hostile file
        // can give every segment its own stream: found through a map, not a search.
        let mut index: rustc_hash::FxHashMap<PoolKey, usize> = rustc_hash::FxHashMap::default();
        let mut find = |pools: &mut Vec<PoolFree>, s: &SegmentLayout| -> usize {
            *index.entry(key(s)).or_insert_with(|| {
                pools.push(PoolFree {
                    pool: s.pool,
                    private_pool: s.private_pool,
                    stream: s.stream,
                    segments: 0,
                    reserved_bytes: 0,
                    free_blocks: 0,
                    free_bytes: 0,
                    largest_free_block_bytes: 0,
                    expandable: false,
                });
                pools.len() - 1
            })
        };
        // Segments of one pool come in runs: remember the last one.
        let mut last: Option<(PoolKey, usize)> = None;
        let mut pool_of = Vec::with_capacity(self.segments.len());
        for s in &self.segments {
            let k = match last {
                Some((kk, k)) if kk == key(s) => k,
                _ => find(&mut pools, s),
            };
            last = Some((key(s), k));
            pool_of.push(k);
            let p = &mut pools[k];
            p.segments += 1;
            p.reserved_bytes = p.reserved_bytes.saturating_add(s.size);
            p.expandable |= s.expandable;
        }
        for g in &self.gaps {
            let p = &mut pools[pool_of[g.segment]];
            p.free_blocks += 1;
            p.free_bytes = p.free_bytes.saturating_add(g.size);
            p.largest_free_block_bytes = p.largest_free_block_bytes.max(g.size);
        }
        pools.sort_by_key(|p| (p.stream, p.pool, p.private_pool));
        Figures {
            reserved_bytes: sum(self.segments.iter().map(|s| s.size)),
            allocated_bytes: state.allocated_bytes,
            live_block_bytes: sum(self.segments.iter().flat_map(|s| &s.blocks).map(|b| b.0)),
            live_blocks: self.segments.iter().map(|s| s.blocks.len() as u32).sum(),
            cached_free_bytes: sum(self.gaps.iter().map(|g| g.size)),
            free_blocks: self.gaps.len() as u32,
            largest_free_block_any_bytes: self.gaps.iter().map(|g| g.size).max().unwrap_or(0),
            pools,
        }
    }

    /// Free blocks a request in `pool` on `stream` could use.
    pub fn gaps_for(&self, pool: (PoolKind, Option<PoolId>), stream: i64) -> impl Iterator<Item = &Gap> + '_ {
        self.gaps.iter().filter(move |g| {
            let s = &self.segments[g.segment];
            (s.pool, s.private_pool) == pool && s.stream == stream
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversize_blocks_serve_as_get_free_block_allows() {
        let m = 512 << 20;
        // No setting: every block.
        assert!(may_serve(4 << 30, 2 << 20, None));
        // A small request never gets an oversize block, however free.
        assert!(!may_serve(m, 2 << 20, Some(m)));
        assert!(may_serve(m - 1, 2 << 20, Some(m)));
        // A large request gets one only with less than 20 MiB left over.
        assert!(may_serve((600 << 20) + LARGE_BUFFER - 1, 600 << 20, Some(m)));
        assert!(!may_serve((600 << 20) + LARGE_BUFFER, 600 << 20, Some(m)));
    }

    /// A pool's name for people is the one its JSON carries.
    #[test]
    fn pools_are_named_as_their_json_names_them() {
        for pool in [PoolKind::Small, PoolKind::Large, PoolKind::Private] {
            assert_eq!(serde_json::to_value(pool).unwrap(), pool.label());
        }
        // A private pool is named by its id: each of a run's CUDA graphs has its own.
        let named = |pool, private_pool| {
            PoolFree {
                pool,
                private_pool,
                stream: 0,
                segments: 1,
                reserved_bytes: 0,
                free_blocks: 0,
                free_bytes: 0,
                largest_free_block_bytes: 0,
                expandable: false,
            }
            .name()
        };
        assert_eq!(named(PoolKind::Large, None), "large pool");
        assert_eq!(named(PoolKind::Private, Some((1, 2))), "private pool (1, 2)");
    }
}
