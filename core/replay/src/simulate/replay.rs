//! A recording replayed through the simulator decision by decision (`memscape replay`): does
//! it place each allocation where the real allocator did, and make (or map) each segment when
//! it did?
//!
//! The replay starts from the allocator state before the first entry ([`StateIndex`]), laid
//! out as the allocator rounds blocks ([`crate::layout`]), and is forced back onto the
//! recording after every disagreement (the recorded placement is applied), so each decision is
//! judged from the state the real allocator was in. The recording's own `segment_free` and
//! `segment_unmap` entries are taken as `empty_cache` calls, which the trace does not record
//! otherwise. A file with expandable segments is replayed with them (its `segment_map` entries
//! compared as new segments are); the pages mapped before the recording are taken as segments
//! of their own, which later growth does not extend.

use serde::{Deserialize, Serialize};

use super::{Policy, Simulator};
use crate::allocator::{round_size, LARGE_BUFFER, MIN_BLOCK, SMALL_SIZE};
use crate::layout::layout;
use crate::model::{Action, Snapshot};
use crate::settings::settings;
use crate::state::StateIndex;

/// The first decision the simulator made otherwise than the recording.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disagreement {
    /// The trace entry.
    pub entry: u32,
    /// What differed, in words.
    pub why: String,
}

/// How one device's recording agrees with the simulator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agreement {
    /// The device.
    pub device: u32,
    /// `alloc` entries replayed.
    pub allocations: u64,
    /// Of them, placed where the recording has them.
    pub placed_as_recorded: u64,
    /// `segment_alloc` and `segment_free` entries of the recording, and segments the simulator
    /// made where the recording made none.
    pub segment_events: u64,
    /// Of them, made (or freed) by the simulator at the same entry with the same size.
    pub segment_events_matched: u64,
    /// The largest difference between the simulated and the recorded reserved bytes after an
    /// entry.
    pub reserved_max_abs_diff_bytes: u64,
    /// Entries the simulator does not model (none since expandable segments are simulated;
    /// kept for readers of the JSON).
    pub not_simulated: u64,
    /// The first disagreement.
    pub first_disagreement: Option<Disagreement>,
}

/// Puts the allocator state before `device`'s first entry into `sim` as the recording has it,
/// laid out as the allocator rounds blocks. Its reserved bytes.
pub(super) fn start(snap: &Snapshot, device: usize, sim: &mut Simulator) -> u64 {
    let t = snap.trace(device);
    let set = settings(snap, device);
    let start = StateIndex::build(snap, device).state_after(snap, None);
    let laid = layout(&start, &set);
    for (s, l) in start.segments.iter().zip(&laid.segments) {
        if s.expandable && sim.policy.expandable {
            // Large-pool pages are 20 MiB and its blocks over 1 MiB.
            let small =
                s.blocks.iter().all(|b| b.size <= SMALL_SIZE) && (s.size % LARGE_BUFFER != 0 || !s.blocks.is_empty());
            sim.add_expandable(s.address, s.size, s.stream, (s.pool, small));
        } else {
            sim.add_segment(s.address, s.size, s.stream, s.pool);
        }
        for (b, &(size, _)) in s.blocks.iter().zip(&l.blocks) {
            sim.force(b.address, size.max(MIN_BLOCK));
        }
    }
    // A large-pool block is over 1 MiB: an allocation recorded less than that past the start of
    // a free block of the state before the recording shows that the live block before it kept
    // the remainder when it was cut. The first allocation in each such free block says so.
    let mut seen = rustc_hash::FxHashSet::default();
    for i in 0..t.len() {
        if t.action(i) != Action::Alloc {
            continue;
        }
        let addr = t.addr(i);
        let Some((start, b)) = sim.blocks.range(..=addr).next_back().map(|(&s, &b)| (s, b)) else { continue };
        if b.allocated || addr >= start.saturating_add(b.size) || !seen.insert(start) {
            continue;
        }
        let large = !sim.segments.get(&b.segment).is_some_and(|s| s.pool.1);
        if large && addr > start && Simulator::too_small((None, false), addr - start) {
            if let Some((pa, _)) = sim.allocated_before(start, b.segment) {
                sim.extend(pa, addr - start);
            }
        }
    }
    start.reserved_bytes
}

/// Replays `device`'s trace through the simulator.
pub fn replay(snap: &Snapshot, device: usize) -> Agreement {
    let t = snap.trace(device);
    let set = settings(snap, device);
    let mut policy = Policy::of(&set);
    policy.expandable |= (0..t.len()).any(|i| t.action(i) == Action::SegmentMap);
    let expandable = policy.expandable;
    let mut sim = Simulator::with_policy(policy);
    let start = start(snap, device, &mut sim);
    // The recording's reserved bytes, followed forward from the state before its first entry.
    let mut recorded = start;
    let mut a = Agreement {
        device: device as u32,
        allocations: 0,
        placed_as_recorded: 0,
        segment_events: 0,
        segment_events_matched: 0,
        reserved_max_abs_diff_bytes: 0,
        not_simulated: 0,
        first_disagreement: None,
    };
    let differ = |a: &mut Agreement, i: usize, why: String| {
        a.first_disagreement.get_or_insert(Disagreement { entry: i as u32, why });
    };
    // The recording's segment_alloc just before an alloc: the segment made for it.
    let mut announced: Option<(usize, u64, u64)> = None;
    for i in 0..t.len() {
        let (addr, size, stream, pool) = (t.addr(i), t.size(i), t.stream(i), t.pool_id(i));
        match t.action(i) {
            Action::SegmentMap if announced.is_some_and(|(_, sa, ss)| sa.saturating_add(ss) == addr) => {
                // One growth mapped in pieces: one segment event.
                announced = announced.map(|(k, sa, ss)| (k, sa, ss.saturating_add(size)));
            }
            Action::SegmentAlloc | Action::SegmentMap => {
                a.segment_events += 1;
                if let Some((k, sa, ss)) = announced.replace((i, addr, size)) {
                    // Two in a row: the first served no allocation.
                    differ(&mut a, k, format!("the recording made a segment of {ss} bytes the simulator did not need"));
                    if !expandable {
                        sim.add_segment(sa, ss, t.stream(k), t.pool_id(k));
                    }
                }
            }
            Action::Alloc => {
                a.allocations += 1;
                let seg = announced.take();
                // A segment where the recording has none goes where no segment is.
                let nowhere = u64::MAX - (1 << 50) + (i as u64 % (1 << 20)) * (1 << 28);
                let p = sim
                    .malloc(size, stream, pool, |_| seg.map_or(nowhere, |(_, sa, _)| sa))
                    .unwrap_or(super::Placement { address: u64::MAX, size: round_size(size), new_segment: None });
                sim.events.clear();
                // Where the simulator's placement is undone, the recording's is applied.
                let mut undone = false;
                match (seg, p.new_segment) {
                    (Some((_, _, ss)), Some(s)) if s == ss => a.segment_events_matched += 1,
                    (Some((k, _, ss)), s) if expandable => {
                        let made = s.unwrap_or(0);
                        differ(&mut a, k, format!("the simulator mapped {made} bytes, the recording {ss}"));
                    }
                    (None, Some(s)) if expandable => {
                        a.segment_events += 1;
                        differ(&mut a, i, format!("the simulator mapped {s} bytes where the recording mapped none"));
                    }
                    (Some((k, sa, ss)), Some(s)) => {
                        differ(&mut a, k, format!("the simulator made a segment of {s} bytes, the recording {ss}"));
                        sim.release(sa);
                        sim.add_segment(sa, ss, stream, pool);
                        undone = true;
                    }
                    (Some((k, sa, ss)), None) => {
                        differ(
                            &mut a,
                            k,
                            format!(
                                "the recording made a segment of {ss} bytes where the simulator reused a free block"
                            ),
                        );
                        sim.free(p.address);
                        sim.add_segment(sa, ss, stream, pool);
                        undone = true;
                    }
                    (None, Some(s)) => {
                        a.segment_events += 1;
                        differ(
                            &mut a,
                            i,
                            format!(
                                "the simulator made a segment of {s} bytes where the recording reused a free block"
                            ),
                        );
                        sim.release(p.address);
                        undone = true;
                    }
                    (None, None) => {}
                }
                if p.address == addr {
                    a.placed_as_recorded += 1;
                } else {
                    differ(&mut a, i, format!("placed at {:#x}, recorded at {addr:#x}", p.address));
                    if !undone {
                        sim.free(p.address);
                    }
                }
                if undone || p.address != addr {
                    sim.force(addr, round_size(size));
                }
            }
            act if act.ends_allocation() => {
                sim.free(addr);
            }
            Action::SegmentFree => {
                a.segment_events += 1;
                if sim.is_free_segment(addr) {
                    a.segment_events_matched += 1;
                } else {
                    differ(
                        &mut a,
                        i,
                        format!("the recording freed the segment at {addr:#x}, which the simulator still uses"),
                    );
                }
                sim.release(addr);
            }
            Action::SegmentUnmap => {
                a.segment_events += 1;
                if sim.unmap_range(addr, size) {
                    a.segment_events_matched += 1;
                } else {
                    differ(
                        &mut a,
                        i,
                        format!("the recording unmapped {size} bytes at {addr:#x}, which the simulator still uses"),
                    );
                }
            }
            _ => {}
        }
        recorded = match t.action(i) {
            Action::SegmentAlloc | Action::SegmentMap => recorded.saturating_add(size),
            Action::SegmentFree | Action::SegmentUnmap => recorded.saturating_sub(size),
            _ => recorded,
        };
        let pending = announced.map_or(0, |(_, _, ss)| ss);
        let d = sim.reserved().saturating_add(pending).abs_diff(recorded);
        a.reserved_max_abs_diff_bytes = a.reserved_max_abs_diff_bytes.max(d);
    }
    a
}
