//! Allocator what-ifs: a recording's requests and frees, in order, run through the simulator
//! under other settings (`expandable_segments`, `max_split_size_mb`,
//! `roundup_power2_divisions`, `garbage_collection_threshold`, the device's size), free to
//! decide every placement itself. What it says is a simulation of this trace: the program's
//! own requests do not change with the settings, and where the simulator runs out of memory
//! the request is counted and skipped (the program would have stopped there).
//!
//! The state before the recording is laid out as recorded when the settings are the file's
//! own; under other settings its live blocks are allocated again, in address order. Under the
//! file's own rules a recording's `segment_free` (or `segment_unmap`) returns that segment;
//! under others, one that starts a run of them is an `empty_cache` call of the program; its new segments go where the recording put them where
//! it made one at the same entry, so that a run under the file's own settings is the
//! recording again.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::{Policy, Simulator};
use crate::model::{Action, Snapshot};
use crate::state::{AllocatorState, StateIndex};

/// One request the simulator could not hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOom {
    /// The trace entry.
    pub entry: u32,
    /// The bytes asked for (rounded).
    pub requested_bytes: u64,
    /// The limit less what was reserved, after the cache was released.
    pub device_free_bytes: u64,
}

/// A recording run through the simulator under a policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// The settings it ran under.
    pub policy: Policy,
    /// The highest reserved bytes, after an entry or before the first.
    pub peak_reserved_bytes: u64,
    /// The entry after which it was first reached (`None`: before the first entry).
    pub peak_entry: Option<u32>,
    /// Reserved bytes after the last entry.
    pub final_reserved_bytes: u64,
    /// The recording's own highest reserved bytes, followed forward the same way.
    pub recorded_peak_reserved_bytes: u64,
    /// Requests the simulator could not hold (at most [`MAX_OOMS`] listed).
    pub ooms: Vec<RunOom>,
    /// How many there were.
    pub oom_count: u64,
    /// The recording's `oom` entries.
    pub recorded_ooms: u64,
    /// Of the recording's `oom` entries, those the simulator could serve.
    pub recorded_ooms_avoided: u64,
    /// The highest simulated reserved bytes in each of [`CURVE_POINTS`] equal runs of entries
    /// (fewer for a shorter trace; the first run counts the state before the recording).
    pub curve: Vec<u64>,
    /// The recording's own highest reserved bytes in the same runs.
    pub recorded_curve: Vec<u64>,
}

/// How many points a [`Run`]'s curves have at most.
pub const CURVE_POINTS: usize = 240;

impl Run {
    /// Counts a request of entry `i` the simulator could not hold (and lists the first ones).
    fn failed(&mut self, i: usize, e: super::OutOfMemory) {
        self.oom_count += 1;
        if self.ooms.len() < MAX_OOMS {
            self.ooms.push(RunOom {
                entry: i as u32,
                requested_bytes: e.requested_bytes,
                device_free_bytes: e.device_free_bytes,
            });
        }
    }
}

/// The most simulated out-of-memory requests a [`Run`] lists.
pub const MAX_OOMS: usize = 100;

/// Runs `device`'s trace through the simulator under `policy`, from the state before the
/// recording as recorded when `policy` decides as the file's settings do.
pub fn run(snap: &Snapshot, device: usize, policy: &Policy) -> Run {
    let own = Policy::of(&crate::settings::settings(snap, device));
    if same_rules(policy, &own) {
        run_from(snap, device, policy, None)
    } else {
        run_fresh(snap, device, policy)
    }
}

/// Runs `device`'s trace through the simulator under `policy`, the live blocks of the state
/// before the recording allocated again whatever the policy: runs under two policies compared
/// like with like.
pub fn run_fresh(snap: &Snapshot, device: usize, policy: &Policy) -> Run {
    let start = StateIndex::build(snap, device).state_after(snap, None);
    run_fresh_from(snap, device, policy, &start)
}

/// [`run_fresh`] from `start`, the state before `device`'s first entry (built once for runs
/// under several policies).
pub fn run_fresh_from(snap: &Snapshot, device: usize, policy: &Policy, start: &AllocatorState) -> Run {
    run_from(snap, device, policy, Some(start))
}

/// A run from the state before the recording as recorded (`fresh`: `None`), or from that
/// state's live blocks allocated again.
fn run_from(snap: &Snapshot, device: usize, policy: &Policy, fresh: Option<&AllocatorState>) -> Run {
    let t = snap.trace(device);
    let same = fresh.is_none();
    let mut sim = Simulator::with_policy(policy.clone());
    let mut moved: FxHashMap<u64, u64> = FxHashMap::default();
    let recorded_start = match fresh {
        None => super::replay::start(snap, device, &mut sim),
        Some(start) => fresh_start(start, &mut sim, &mut moved),
    };
    sim.events.clear();
    let mut r = Run {
        policy: policy.clone(),
        peak_reserved_bytes: sim.reserved(),
        peak_entry: None,
        final_reserved_bytes: sim.reserved(),
        recorded_peak_reserved_bytes: recorded_start,
        ooms: Vec::new(),
        oom_count: 0,
        recorded_ooms: 0,
        recorded_ooms_avoided: 0,
        curve: Vec::new(),
        recorded_curve: Vec::new(),
    };
    let points = t.len().clamp(1, CURVE_POINTS);
    r.curve = vec![sim.reserved(); points];
    r.recorded_curve = vec![recorded_start; points];
    let mut recorded = recorded_start;
    // Where the recording put a segment it made just before an allocation.
    let mut announced: Option<(u64, u64)> = None;
    // Elsewhere, new segments go above every address a recording uses (2^48), one after
    // another.
    let mut next = 1u64 << 48;
    let mut fresh = move |size: u64| {
        let a = next;
        next = next.saturating_add(size.div_ceil(2 << 20).saturating_mul(2 << 20));
        a
    };
    for i in 0..t.len() {
        let action = t.action(i);
        let (addr, size, stream, pool) = (t.addr(i), t.size(i), t.stream(i), t.pool_id(i));
        match action {
            Action::SegmentAlloc | Action::SegmentMap => {
                let (_, n) = announced.get_or_insert((addr, 0));
                *n = n.saturating_add(size);
            }
            // Under the file's own rules the recording's segments are the simulator's: each is
            // returned as recorded.
            Action::SegmentFree if same && sim.is_free_segment(addr) => {
                sim.release(addr);
            }
            Action::SegmentFree if same => {}
            Action::SegmentUnmap if same => {
                sim.unmap_range(addr, size);
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                let burst = i > 0 && matches!(t.action(i - 1), Action::SegmentFree | Action::SegmentUnmap);
                if !burst {
                    sim.empty_cache();
                }
            }
            Action::Alloc => {
                let at = announced.take().filter(|_| same).map(|(a, _)| a);
                match sim.malloc(size, stream, pool, |n| at.unwrap_or_else(|| fresh(n))) {
                    Ok(p) => {
                        if p.address != addr {
                            moved.insert(addr, p.address);
                        } else {
                            moved.remove(&addr);
                        }
                    }
                    Err(e) => {
                        r.failed(i, e);
                        // Its frees find nothing.
                        moved.insert(addr, u64::MAX);
                    }
                }
            }
            Action::Oom => {
                r.recorded_ooms += 1;
                match sim.malloc(size, stream, pool, &mut fresh) {
                    Ok(p) => {
                        r.recorded_ooms_avoided += 1;
                        sim.free(p.address);
                    }
                    Err(e) => {
                        r.failed(i, e);
                    }
                }
            }
            a if a.ends_allocation() => {
                let at = moved.remove(&addr).unwrap_or(addr);
                sim.free(at);
            }
            _ => {}
        }
        sim.events.clear();
        recorded = match action {
            Action::SegmentAlloc | Action::SegmentMap => recorded.saturating_add(size),
            Action::SegmentFree | Action::SegmentUnmap => recorded.saturating_sub(size),
            _ => recorded,
        };
        r.recorded_peak_reserved_bytes = r.recorded_peak_reserved_bytes.max(recorded);
        // A segment the recording made for the next allocation counts from its own entry.
        let now = sim.reserved().saturating_add(announced.filter(|_| same).map_or(0, |(_, n)| n));
        let b = (i as u128 * points as u128 / t.len() as u128) as usize;
        r.curve[b] = r.curve[b].max(now);
        r.recorded_curve[b] = r.recorded_curve[b].max(recorded);
        if i + 1 < t.len() {
            // What a run of entries starts from: the state after the last one before it.
            let next = ((i + 1) as u128 * points as u128 / t.len() as u128) as usize;
            if next != b {
                r.curve[next] = now;
                r.recorded_curve[next] = recorded;
            }
        }
        if now > r.peak_reserved_bytes {
            r.peak_reserved_bytes = now;
            r.peak_entry = Some(i as u32);
        }
    }
    r.final_reserved_bytes = sim.reserved();
    r
}

/// Whether two policies decide placements alike (the memory limit aside).
fn same_rules(a: &Policy, b: &Policy) -> bool {
    a.max_split == b.max_split && a.divisions == b.divisions && a.expandable == b.expandable
}

/// Allocates the live blocks of the state before `device`'s first entry again, in address
/// order, under the simulator's policy; `moved` maps their recorded addresses to the new ones.
/// The recorded reserved bytes of that state.
fn fresh_start(start: &AllocatorState, sim: &mut Simulator, moved: &mut FxHashMap<u64, u64>) -> u64 {
    let mut next = 1u64 << 47;
    for s in &start.segments {
        for b in &s.blocks {
            let requested = if b.requested_size > 0 { b.requested_size } else { b.size };
            let place = |size: u64| {
                let a = next;
                next = next.saturating_add(size.div_ceil(2 << 20).saturating_mul(2 << 20));
                a
            };
            match sim.malloc(requested, s.stream, s.pool, place) {
                Ok(p) => moved.insert(b.address, p.address),
                Err(_) => moved.insert(b.address, u64::MAX),
            };
        }
    }
    start.reserved_bytes
}
