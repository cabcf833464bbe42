//! Expandable segments (`expandable_segments:True`): one address space per stream and pool,
//! as large as the device and an eighth, whose pages (2 MiB in the small pool, 20 MiB in the
//! large) are mapped as requests need them and unmapped when the cache is emptied.
//! `find_expandable_block`, `try_allocate_expandable_block`, `map_block` and `unmap_block` of
//! `CUDACachingAllocator.cpp`, and the address space of `ExpandableSegment`.

use super::{Block, Event, Pool, Segment, Simulator};
use crate::allocator::{LARGE_BUFFER, SMALL_BUFFER};

/// The address space of an expandable segment where no device size is known.
const UNBOUNDED: u64 = 1 << 40;

impl Simulator {
    /// The page of an expandable segment of the small pool or the large one.
    fn page(small: bool) -> u64 {
        if small {
            SMALL_BUFFER
        } else {
            LARGE_BUFFER
        }
    }

    /// `try_allocate_expandable_block`: maps pages until a free block of at least `size`
    /// bytes is there, in the lowest address space of the stream with room, or a new one. The
    /// free block's address; `None` where the limit refuses a page.
    pub(super) fn grow_expandable(
        &mut self,
        pool: Pool,
        stream: i64,
        size: u64,
        place: &mut impl FnMut(u64) -> u64,
    ) -> Option<u64> {
        let mut c = match self.find_expandable(pool, stream, size) {
            Some(c) => c,
            None => self.new_expandable(pool, stream, place)?,
        };
        let b = *self.blocks.get(&c)?;
        if !b.mapped {
            c = self.map(c, b.size.min(size))?;
        }
        loop {
            let b = *self.blocks.get(&c)?;
            if b.size >= size {
                return Some(c);
            }
            let next = c.saturating_add(b.size);
            let n = *self.blocks.get(&next).filter(|n| !n.allocated && !n.mapped && n.segment == b.segment)?;
            c = self.map(next, (size - b.size).min(n.size))?;
        }
    }

    /// `find_expandable_block`: the lowest unmapped space of the pool and stream (with the free
    /// block just before it) that holds `size` bytes, free and unmapped together.
    fn find_expandable(&self, pool: Pool, stream: i64, size: u64) -> Option<u64> {
        for &(_, _, u) in self.unmapped.range((pool, stream, 0)..).take_while(|k| k.0 == pool && k.1 == stream) {
            let ub = self.blocks.get(&u)?;
            let mut c = u;
            if let Some((&pa, p)) = self.blocks.range(..u).next_back() {
                if !p.allocated && p.mapped && p.segment == ub.segment && pa.saturating_add(p.size) == u {
                    c = pa;
                }
            }
            let mut room = 0u64;
            let mut at = c;
            while room < size {
                match self.blocks.get(&at).filter(|b| !b.allocated && b.segment == ub.segment) {
                    Some(b) => {
                        room = room.saturating_add(b.size);
                        at = at.saturating_add(b.size);
                    }
                    None => break,
                }
            }
            if room >= size {
                return Some(c);
            }
        }
        None
    }

    /// A new address space for the pool and stream, all unmapped: its address.
    fn new_expandable(&mut self, pool: Pool, stream: i64, place: &mut impl FnMut(u64) -> u64) -> Option<u64> {
        let page = Self::page(pool.1);
        let space =
            self.policy.capacity.map_or(UNBOUNDED, |c| c.saturating_add(c / 8)).div_ceil(page).saturating_mul(page);
        let mut a = place(space);
        self.end_address_space_at(a);
        // A recording's next segment bounds this one's address space.
        let space = self.segments.range(a.saturating_add(1)..).next().map_or(space, |(&n, _)| space.min(n - a));
        if self.overlaps(a, space) {
            a = self.segments.iter().next_back().map_or(0, |(&a, s)| a.saturating_add(s.size));
        }
        if self.overlaps(a, space) {
            return None;
        }
        self.segments.insert(a, Segment { size: space, stream, pool, expandable: true });
        self.put_free(a, Block { size: space, segment: a, allocated: false, mapped: false, born: 0 });
        Some(a)
    }

    /// Adds `size` mapped bytes at `address`, all free, of an expandable segment of `stream`
    /// and `pool` (a recording's state before its first entry lists each mapped range as a
    /// segment): inside the unmapped space of the address space before it, or as the start of
    /// a new one. False where neither fits.
    pub fn add_expandable(
        &mut self,
        address: u64,
        size: u64,
        stream: i64,
        pool: (Option<crate::model::PoolId>, bool),
    ) -> bool {
        let pool = (pool.0.filter(|p| *p != (0, 0)), pool.1);
        let inside = self.blocks.range(..=address).next_back().map(|(&ua, &ub)| (ua, ub)).filter(|(ua, ub)| {
            !ub.mapped
                && !ub.allocated
                && ua.saturating_add(ub.size) >= address.saturating_add(size)
                && self.segments.get(&ub.segment).is_some_and(|s| s.expandable && s.stream == stream && s.pool == pool)
        });
        let (ua, ub) = match inside {
            Some(found) => found,
            None => {
                let mut at = |_| address;
                if self.new_expandable(pool, stream, &mut at) != Some(address) {
                    return false;
                }
                (address, self.blocks[&address])
            }
        };
        self.take_free(ua);
        if address > ua {
            self.put_free(ua, Block { size: address - ua, ..ub });
        }
        let end = ua.saturating_add(ub.size);
        let after = end.saturating_sub(address.saturating_add(size));
        if after > 0 {
            self.put_free(address.saturating_add(size), Block { size: after, ..ub });
        }
        let piece = Block { size, mapped: true, ..ub };
        let (start, total) = self.merged(address, piece);
        self.put_free(start, Block { size: total, ..piece });
        self.reserved = self.reserved.saturating_add(size);
        true
    }

    /// Where a recording starts an address space at `a`, inside the unmapped end of another,
    /// that other one ends at `a` (a recording does not say how large each one is).
    fn end_address_space_at(&mut self, a: u64) {
        let Some((&sa, s)) = self.segments.range(..=a).next_back() else { return };
        if !s.expandable || a >= sa.saturating_add(s.size) || a == sa {
            return;
        }
        let end = sa.saturating_add(s.size);
        let Some((&ua, &ub)) = self.blocks.range(..=a).next_back() else { return };
        if ub.mapped || ub.allocated || ub.segment != sa || ua.saturating_add(ub.size) != end {
            return;
        }
        self.take_free(ua);
        if a > ua {
            self.put_free(ua, Block { size: a - ua, ..ub });
        }
        if let Some(s) = self.segments.get_mut(&sa) {
            s.size = a - sa;
        }
    }

    /// `map_block`: maps the pages of the unmapped block at `at` that hold its first `size`
    /// bytes, and merges them with the free blocks around them. The merged block's address;
    /// `None` where the limit refuses them.
    fn map(&mut self, at: u64, size: u64) -> Option<u64> {
        let b = *self.blocks.get(&at).filter(|b| !b.allocated && !b.mapped)?;
        let small = self.segments.get(&b.segment)?.pool.1;
        let mapped = size.max(1).div_ceil(Self::page(small)).saturating_mul(Self::page(small)).min(b.size);
        if self.policy.capacity.is_some_and(|c| self.reserved.saturating_add(mapped) > c) {
            return None;
        }
        self.take_free(at);
        if mapped < b.size {
            self.put_free(at.saturating_add(mapped), Block { size: b.size - mapped, ..b });
        }
        let piece = Block { size: mapped, mapped: true, ..b };
        let (start, total) = self.merged(at, piece);
        self.put_free(start, Block { size: total, ..piece });
        self.reserved = self.reserved.saturating_add(mapped);
        self.events.push(Event::SegmentMap { address: at, size: mapped });
        Some(start)
    }

    /// `unmap_block`: unmaps the whole pages inside the free block at `address` of an
    /// expandable segment. False when none is.
    pub(super) fn unmap_block(&mut self, address: u64) -> bool {
        let Some(b) = self.blocks.get(&address).copied().filter(|b| !b.allocated && b.mapped) else { return false };
        let Some(s) = self.segments.get(&b.segment).filter(|s| s.expandable) else { return false };
        let page = Self::page(s.pool.1);
        let offset = address - b.segment;
        let begin = offset.div_ceil(page).saturating_mul(page);
        let end = offset.saturating_add(b.size) / page * page;
        if end <= begin {
            return false;
        }
        let unmapped = self.unmap_range(b.segment + begin, end - begin);
        if unmapped {
            self.events.push(Event::SegmentUnmap { address: b.segment + begin, size: end - begin });
        }
        unmapped
    }

    /// Unmaps `size` bytes at `address`, inside a free mapped block of an expandable segment
    /// (a recording's `segment_unmap`); an address space left all unmapped is released. False
    /// when no such block holds them.
    pub fn unmap_range(&mut self, address: u64, size: u64) -> bool {
        let Some((&start, &b)) = self.blocks.range(..=address).next_back() else { return false };
        let end = address.saturating_add(size);
        if b.allocated || !b.mapped || size == 0 || end > start.saturating_add(b.size) {
            return false;
        }
        if !self.segments.get(&b.segment).is_some_and(|s| s.expandable) {
            return false;
        }
        self.take_free(start);
        if address > start {
            self.put_free(start, Block { size: address - start, ..b });
        }
        let after = start.saturating_add(b.size) - end;
        if after > 0 {
            self.put_free(end, Block { size: after, ..b });
        }
        let hole = Block { size, mapped: false, ..b };
        let (s, total) = self.merged(address, hole);
        self.put_free(s, Block { size: total, ..hole });
        self.reserved = self.reserved.saturating_sub(size);
        let whole = self.segments.get(&b.segment).is_some_and(|g| g.size == total && s == b.segment);
        if whole {
            self.release(b.segment);
        }
        true
    }
}
