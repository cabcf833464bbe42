//! Trace entries packed into the rows of their list, and what a windowed read drops of them
//! and forgets from the memo, so that memory follows the window.

use super::Vm;
use crate::model::{Action, Entry, Trace};
use crate::read::limits::Limits;
use crate::read::pval::{Obj, PVal};

impl Vm {
    /// A windowed read: the new frames lists of an allocation's events are remembered by its
    /// address and forgotten from the memo when its free completes (PyTorch's pickles refer to
    /// them again from that allocation's later events: `free_completed` reuses
    /// `free_requested`'s list), so the memo holds the lists of live allocations, not of every
    /// event. (A block in the segments, written first, and a `segment_alloc` lend their lists
    /// to later entries; those are kept.)
    pub(super) fn forget_freed_frames(&mut self, e: &Entry, slot: Option<usize>) {
        let Some(addr) = e.addr else { return };
        match e.action {
            Action::Alloc | Action::FreeRequested => {
                if let Some(s) = slot {
                    // The alloc's list first, the free_requested's second (no allocation per
                    // entry: this runs for every event of a windowed read).
                    let slots = self.frames_slots.entry(addr).or_insert([u64::MAX; 2]);
                    slots[usize::from(e.action == Action::FreeRequested)] = s as u64;
                }
            }
            a if a.ends_allocation() => {
                for s in self.frames_slots.remove(&addr).unwrap_or([u64::MAX; 2]) {
                    if s != u64::MAX {
                        self.memo.forget_stack(s as usize);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Appends a trace entry to the rows of list `l` (a `Row` marker too when the list also holds
/// other items). The first row reserves room for the rest of the input: entries take 50 to
/// 200 bytes, so this avoids growing (and copying) the columns a dozen times. What all lists
/// reserve together stays within one row per 64 bytes of the input (`reserved` counts it), so
/// a file with a trace per device does not reserve the rest of the file once per device.
///
/// A windowed read of the last entries keeps at most an eighth more than the window and then
/// drops the oldest rows, so each row is moved about eight times and memory stays at the
/// window; one of a range keeps the rows inside it and gives those after it to the trace's
/// tail. Returns how many rows it did not keep (for the memory count).
pub(super) fn push_row(
    l: &mut Obj,
    e: &Entry,
    size_hint: Option<u64>,
    reserved: &mut u64,
    off: u64,
    limits: Limits,
) -> u64 {
    let window = limits.keep_last_entries.map(|n| n.saturating_add((n / 8).max(1 << 16)));
    let range = limits.keep_entries.filter(|_| l.items.is_empty());
    let rows = l.rows.get_or_insert_with(|| {
        let left = size_hint.map_or(0, |h| (h / 64).saturating_sub(*reserved));
        let most = window.or(range.map(|(a, b)| b.saturating_sub(a))).unwrap_or(u64::MAX);
        let reserve = size_hint.map_or(0, |h| h.saturating_sub(off) / 64).min(left).min(most);
        *reserved += reserve;
        Box::new(Trace::with_capacity(reserve as usize))
    });
    if let Some((start, end)) = range {
        let at = rows.dropped() + rows.len() as u64 + rows.tail_len();
        if at < start {
            rows.skip_front();
            rows.follow(e);
            return 1;
        }
        if at >= end {
            // Kept in the tail, it still counts against the memory limit.
            let kept = rows.push_tail(e);
            rows.follow(e);
            return u64::from(!kept);
        }
        rows.follow(e);
    }
    let mut dropped = 0;
    if let (Some(n), Some(most)) = (limits.keep_last_entries, window) {
        if rows.len() as u64 >= most && l.items.is_empty() {
            dropped = (rows.len() as u64 + 1).saturating_sub(n);
            rows.drop_front(dropped as usize);
        }
    }
    let row = rows.len() as u32;
    rows.push(e);
    if !l.items.is_empty() {
        l.items.push(PVal::Row(row));
    }
    dropped
}
