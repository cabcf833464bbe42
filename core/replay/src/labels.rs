//! Labels put on live allocations after the fact: `torch.cuda.memory._annotate_memory`
//! (2.14+) writes a trace entry of action `annotate` at the allocation's address, its text in
//! `user_metadata`. As PyTorch's viewer does, each one belongs to the allocation alive at
//! that address when it was written.

use rustc_hash::FxHashMap;

use crate::model::{Action, Snapshot};
use crate::timeline::{Element, Origin};

/// Who an `annotate` entry labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Owner {
    /// The allocation made at this trace entry.
    Alloc(u32),
    /// An allocation at this address made before the trace (freed later, or alive at the end).
    Before(u64),
}

/// The `annotate` entries of one device's trace by the allocation they label.
#[derive(Clone, Debug, Default)]
pub struct Labels {
    /// (owner, annotate entry), sorted.
    of: Vec<(Owner, u32)>,
}

impl Labels {
    /// Reads `device`'s trace: one scan of its actions, and a replay of its allocations only
    /// when it has an `annotate` entry (most traces have none).
    pub fn new(snap: &Snapshot, device: usize) -> Labels {
        let t = snap.trace(device);
        if !t.has_action(Action::Annotate) {
            return Labels::default();
        }
        let mut live: FxHashMap<u64, u32> = FxHashMap::default();
        let mut of = Vec::new();
        for i in 0..t.len() {
            let addr = t.addr(i);
            match t.action(i) {
                Action::Alloc => {
                    live.insert(addr, i as u32);
                }
                a if a.ends_allocation() => {
                    live.remove(&addr);
                }
                Action::Annotate => {
                    let owner = live.get(&addr).map_or(Owner::Before(addr), |&a| Owner::Alloc(a));
                    of.push((owner, i as u32));
                }
                _ => {}
            }
        }
        of.sort_unstable();
        Labels { of }
    }

    /// Whether the trace labels anything.
    pub fn is_empty(&self) -> bool {
        self.of.is_empty()
    }

    /// The trace entries that label `e`, oldest first: O(log n + its labels).
    pub fn entries_of(&self, e: &Element) -> Vec<u32> {
        let owner = match (e.origin, e.alloc_entry) {
            (Origin::Traced, Some(a)) => Owner::Alloc(a),
            (Origin::Traced, None) => return Vec::new(),
            _ => Owner::Before(e.addr),
        };
        let from = self.of.partition_point(|&(o, _)| o < owner);
        self.of[from..]
            .iter()
            .take_while(|&&(o, _)| o == owner)
            .map(|&(_, entry)| entry)
            .filter(|&entry| e.origin != Origin::UnmatchedFree || e.free_entry.is_none_or(|f| entry < f))
            .collect()
    }

    /// The texts that label `e` (each entry's `user_metadata`), oldest first.
    pub fn of(&self, snap: &Snapshot, device: usize, e: &Element) -> Vec<String> {
        let t = snap.trace(device);
        self.entries_of(e)
            .into_iter()
            .filter_map(|i| t.user_metadata(i as usize))
            .map(|s| snap.str(s).to_string())
            .filter(|s| !s.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Entry, Trace};
    use crate::timeline::{Timeline, TimelineKind};

    #[test]
    fn a_label_belongs_to_the_allocation_alive_by_the_one_pairing_rule() {
        let mut snap = Snapshot::default();
        let mut t = Trace::default();
        let label = |snap: &mut Snapshot, text: &str| {
            let mut e = Entry::new(Action::Annotate, 0x100, 0, 0);
            e.user_metadata = Some(snap.strings.intern(text));
            e
        };
        let first = label(&mut snap, "weights");
        let pending = label(&mut snap, "while its free waits on a stream");
        let after = label(&mut snap, "after it went back to the cache");
        for e in [
            Entry::new(Action::Alloc, 0x100, 64, 0),
            first,
            Entry::new(Action::FreeRequested, 0x100, 64, 0),
            pending,
            Entry::new(Action::FreeCompleted, 0x100, 64, 0),
            after,
        ] {
            t.push(&e);
        }
        snap.device_traces = Some(vec![t]);
        let tl = Timeline::build(&snap, 0, TimelineKind::Blocks);
        let labels = Labels::new(&snap, 0);
        // The allocation lives until `free_completed`, as the timeline pairs it.
        let e = &tl.elements()[0];
        assert_eq!(e.free_entry, Some(4));
        assert_eq!(labels.of(&snap, 0, e), vec!["weights", "while its free waits on a stream"]);
    }
}
