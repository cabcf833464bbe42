//! What the allocator gives back to the device: `release_cached_blocks` (`empty_cache`, and the
//! last retry before an out-of-memory error), `release_available_cached_blocks` (oversize
//! blocks, under `max_split_size`) and `garbage_collect_cached_blocks` (the oldest whole free
//! blocks of the large pool, past `garbage_collection_threshold` of the memory limit).

use super::{Event, FreeKey, Pool, Simulator};

impl Simulator {
    /// Returns the whole free segment at `address` to the device (`release_block`). False where
    /// the block there is not a whole free segment of its own.
    fn release_whole(&mut self, address: u64) -> bool {
        let Some(b) = self.blocks.get(&address).filter(|b| !b.allocated && b.mapped) else { return false };
        let Some(s) = self.segments.get(&address).filter(|s| !s.expandable && s.size == b.size) else { return false };
        let size = s.size;
        self.release(address);
        self.events.push(Event::SegmentFree { address, size });
        true
    }

    /// The free blocks of `pool`, in the order of its set (stream, size, address).
    fn free_of(&self, pool: Pool) -> Vec<FreeKey> {
        self.free.range((pool, i64::MIN, 0, 0)..).take_while(|k| k.0 == pool).copied().collect()
    }

    /// `release_cached_blocks` (`torch.cuda.empty_cache()`): every whole free segment of the
    /// default pools goes back to the device, large pool first, and every whole free page of an
    /// expandable segment is unmapped.
    pub fn empty_cache(&mut self) {
        for small in [false, true] {
            let mut unmap = Vec::new();
            for k in self.free_of((None, small)) {
                if self.expandable_at(k.3) {
                    unmap.push(k.3);
                } else {
                    self.release_whole(k.3);
                }
            }
            for a in unmap {
                self.unmap_block(a);
            }
        }
    }

    /// The last retry's release: [`Simulator::empty_cache`].
    pub(super) fn release_cached(&mut self) {
        self.empty_cache();
    }

    /// `release_available_cached_blocks`: with `max_split_size`, the smallest oversize free
    /// block of the pool and stream that holds the request, or else oversize blocks from the
    /// largest down until as many bytes are freed. True when it freed enough.
    pub(super) fn release_available(&mut self, pool: Pool, stream: i64, size: u64) -> bool {
        let Some(m) = self.policy.max_split else { return false };
        let wanted = size.max(m);
        let first = self.free.range((pool, stream, wanted, 0)..).next().copied();
        if let Some(k) = first.filter(|k| k.0 == pool && k.1 == stream && !self.expandable_at(k.3)) {
            return self.release_whole(k.3);
        }
        let below: Vec<FreeKey> = self
            .free
            .range(..(pool, stream, wanted, 0))
            .rev()
            .take_while(|k| k.0 == pool && k.1 == stream && k.2 >= m)
            .copied()
            .collect();
        let mut freed = 0u64;
        for k in below {
            if freed >= wanted {
                break;
            }
            if !self.expandable_at(k.3) && self.release_whole(k.3) {
                freed = freed.saturating_add(k.2);
            }
        }
        freed >= wanted
    }

    /// `garbage_collect_cached_blocks`: past the threshold of the memory limit, the whole free
    /// blocks of the default large pool at least as old as their average go back to the
    /// device (age: free-block searches since each became free), rounds until the excess is
    /// freed or none is left.
    pub(super) fn collect_garbage(&mut self) {
        let Some(cap) = self.policy.capacity else { return };
        if self.policy.gc_threshold <= 0.0 {
            return;
        }
        let threshold = (self.policy.gc_threshold * cap as f64) as u64;
        if self.reserved <= threshold {
            return;
        }
        let target = self.reserved - threshold;
        let mut candidates: Vec<(u64, u64, u64)> = self
            .free_of((None, false))
            .into_iter()
            .filter(|k| self.segments.get(&k.3).is_some_and(|s| !s.expandable && s.size == k.2))
            .map(|k| (k.3, k.2, self.searches.saturating_sub(self.blocks.get(&k.3).map_or(0, |b| b.born))))
            .collect();
        let mut total_age: f64 = candidates.iter().map(|c| c.2 as f64).sum();
        let mut reclaimed = 0u64;
        let mut freed = true;
        while reclaimed < target && freed && !candidates.is_empty() {
            let average = total_age / candidates.len() as f64;
            freed = false;
            let mut kept = Vec::with_capacity(candidates.len());
            for c in candidates {
                if c.2 as f64 >= average && self.release_whole(c.0) {
                    freed = true;
                    reclaimed = reclaimed.saturating_add(c.1);
                    total_age -= c.2 as f64;
                } else {
                    kept.push(c);
                }
            }
            candidates = kept;
        }
    }
}
