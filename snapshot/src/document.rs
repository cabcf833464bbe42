//! One open file and its analyses, made when first asked for: the viewer's engine
//! (`engine::Engine`, one per page) and the command line's MCP server (one per agent session)
//! both hold their files as a [`Document`].
//!
//! Per device: the blocks timeline, the categories (with their report, made with the
//! document's rules), the allocator-state index and the doctor's report. The whole-file
//! analyses can also be done in slices ([`Document::schedule`], [`Document::work`]), so that a
//! caller with an event loop answers requests between them; a request that needs one finishes
//! it at once, from where the slices got to.
//!
//! The document does no IO: a caller that reads files from a disk gives each document the
//! file's [`Stamp`] and asks [`Document::is_stale`] before using it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::categories::{self, Analysis, Categories, Compiled};
use crate::state::{AllocatorState, StateBuilder, StateIndex};
use crate::timeline::{Timeline, TimelineKind};
use crate::{diff, doctor, Snapshot};

/// A file's size and modification time when it was read: a file written again since (the
/// agent's loop: re-record, ask again) is read again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Its size in bytes.
    pub bytes: u64,
    /// When it was last modified.
    pub modified: std::time::SystemTime,
}

/// A whole-file analysis finished since the caller last asked ([`Document::take_finished`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    /// A device's categories.
    Categories,
    /// A device's allocator-state checkpoints.
    AllocatorState,
}

/// A whole-file analysis under way in slices.
enum Job {
    /// The categories of a device (its blocks timeline is laid out).
    Categories(u32, Box<Analysis>),
    /// The allocator-state checkpoints of a device.
    State(u32, Box<StateBuilder>),
}

impl Job {
    fn device(&self) -> u32 {
        match self {
            Job::Categories(d, _) | Job::State(d, _) => *d,
        }
    }
}

/// One open file and its analyses by device.
pub struct Document {
    snap: Snapshot,
    stamp: Option<Stamp>,
    rules: Compiled,
    /// Categories are made (a GPU's memory); a host's pinned memory has none.
    categorised: bool,
    blocks: HashMap<u32, Arc<Timeline>>,
    /// Categories per device, with their report, made with `rules`.
    cats: HashMap<u32, (Categories, categories::Report)>,
    states: HashMap<u32, StateIndex>,
    /// The doctor's report per device, made with `rules`.
    doctors: HashMap<u32, doctor::Report>,
    /// Whole-file analyses under way, first in line first.
    jobs: VecDeque<Job>,
    finished: Vec<(u32, Finished)>,
}

impl Document {
    /// A document of `snap` whose categories follow `rules`.
    pub fn new(snap: Snapshot, rules: Compiled) -> Document {
        Document {
            snap,
            stamp: None,
            rules,
            categorised: true,
            blocks: HashMap::new(),
            cats: HashMap::new(),
            states: HashMap::new(),
            doctors: HashMap::new(),
            jobs: VecDeque::new(),
            finished: Vec::new(),
        }
    }

    /// A document without categories (a host's pinned memory: categories stay per GPU).
    pub fn uncategorised(snap: Snapshot) -> Document {
        Document { categorised: false, ..Document::new(snap, Compiled::default()) }
    }

    /// The document of a file read from a disk, as `stamp` describes it.
    pub fn with_stamp(mut self, stamp: Option<Stamp>) -> Document {
        self.stamp = stamp;
        self
    }

    /// Whether the file has changed since it was read: its stamp now differs, or one of the
    /// two is unknown (a file system that does not say is read every time).
    pub fn is_stale(&self, now: Option<Stamp>) -> bool {
        now.is_none() || self.stamp != now
    }

    /// Whether categories are made ([`Document::uncategorised`] has none).
    pub fn is_categorised(&self) -> bool {
        self.categorised
    }

    /// The snapshot.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snap
    }

    /// The rules the categories are made with.
    pub fn rules(&self) -> &Compiled {
        &self.rules
    }

    /// Categories by other rules: the analyses made or begun with the old ones start again
    /// (put in line for the devices that had them).
    pub fn set_rules(&mut self, rules: Compiled) {
        self.rules = rules;
        let mut devices: Vec<u32> = self.cats.drain().map(|(d, _)| d).collect();
        self.doctors.clear();
        self.jobs.retain(|j| match j {
            Job::Categories(d, _) => {
                devices.push(*d);
                false
            }
            Job::State(..) => true,
        });
        devices.sort_unstable();
        devices.dedup();
        for d in devices {
            self.schedule(d);
        }
    }

    /// Keeps a blocks timeline already laid out (by the statistics, which lay out every device).
    pub fn keep_blocks(&mut self, tl: Timeline) {
        self.blocks.entry(tl.device() as u32).or_insert_with(|| Arc::new(tl));
    }

    /// The blocks timeline of `device`, laid out now if it is not.
    pub fn blocks(&mut self, device: u32) -> &Arc<Timeline> {
        let snap = &self.snap;
        self.blocks
            .entry(device)
            .or_insert_with(|| Arc::new(Timeline::build(snap, device as usize, TimelineKind::Blocks)))
    }

    /// The blocks timeline of `device` if it is laid out.
    pub fn blocks_made(&self, device: u32) -> Option<&Timeline> {
        self.blocks.get(&device).map(|tl| &**tl)
    }

    /// Puts the analyses of `device` in line, unless they are done or already in line, and
    /// moves them to the front: the device asked about goes first.
    pub fn schedule(&mut self, device: u32) {
        let queued = |jobs: &VecDeque<Job>, cats: bool| {
            jobs.iter().any(|j| j.device() == device && matches!(j, Job::Categories(..)) == cats)
        };
        if self.categorised && !self.cats.contains_key(&device) && !queued(&self.jobs, true) {
            let tl = Arc::clone(self.blocks(device));
            let a = Analysis::new(&self.snap, &tl, &self.rules);
            self.jobs.push_back(Job::Categories(device, Box::new(a)));
        }
        if !self.states.contains_key(&device) && !queued(&self.jobs, false) {
            self.jobs.push_back(Job::State(device, Box::new(StateBuilder::new(&self.snap, device as usize))));
        }
        // Stable: each device's categories stay before its state.
        self.jobs.make_contiguous().sort_by_key(|j| j.device() != device);
    }

    /// Analyses are in line ([`Document::work`]).
    pub fn has_work(&self) -> bool {
        !self.jobs.is_empty()
    }

    /// About `units` units (entries, elements or steps) of the first analysis in line.
    pub fn work(&mut self, units: usize) {
        let Some(job) = self.jobs.front_mut() else { return };
        let done = match job {
            // A job is put in line with its device's blocks timeline laid out, and they stay.
            Job::Categories(device, a) => match self.blocks.get(device) {
                Some(tl) => a.work(&self.snap, tl, units),
                None => true,
            },
            Job::State(_, b) => b.work(&self.snap, units),
        };
        if !done {
            return;
        }
        match self.jobs.pop_front() {
            Some(Job::Categories(device, a)) => self.finish_categories(device, Some(*a)),
            Some(Job::State(device, b)) => self.finish_state(device, *b),
            None => {}
        }
    }

    /// The analyses finished since the last call, in slices or for a request.
    pub fn take_finished(&mut self) -> Vec<(u32, Finished)> {
        std::mem::take(&mut self.finished)
    }

    fn finish_categories(&mut self, device: u32, begun: Option<Analysis>) {
        let tl = Arc::clone(self.blocks(device));
        let cats = begun.unwrap_or_else(|| Analysis::new(&self.snap, &tl, &self.rules)).finish(&self.snap, &tl);
        // The findings are made once with the categories; views only add columns.
        let report = cats.report(&tl, self.rules.rules());
        self.cats.insert(device, (cats, report));
        self.finished.push((device, Finished::Categories));
    }

    fn finish_state(&mut self, device: u32, b: StateBuilder) {
        self.states.insert(device, b.finish(&self.snap));
        self.finished.push((device, Finished::AllocatorState));
    }

    /// The categories of `device` and their report, finishing their analysis now if it is not
    /// done (from where the slices got to).
    pub fn categories(&mut self, device: u32) -> &(Categories, categories::Report) {
        if !self.cats.contains_key(&device) {
            let begun = self.jobs.iter().position(|j| matches!(j, Job::Categories(d, _) if *d == device));
            let begun = begun.and_then(|k| self.jobs.remove(k)).and_then(|j| match j {
                Job::Categories(_, a) => Some(*a),
                Job::State(..) => None,
            });
            self.finish_categories(device, begun);
        }
        &self.cats[&device]
    }

    /// The categories of `device` if they are made.
    pub fn categories_made(&self, device: u32) -> Option<&(Categories, categories::Report)> {
        self.cats.get(&device)
    }

    /// The allocator-state index of `device`, finishing its checkpoints now if needed.
    pub fn state_index(&mut self, device: u32) -> &StateIndex {
        if !self.states.contains_key(&device) {
            let begun = self.jobs.iter().position(|j| matches!(j, Job::State(d, _) if *d == device));
            let builder = match begun.and_then(|k| self.jobs.remove(k)) {
                Some(Job::State(_, b)) => *b,
                _ => StateBuilder::new(&self.snap, device as usize),
            };
            self.finish_state(device, builder);
        }
        &self.states[&device]
    }

    /// The allocator state of `device` after trace entry `entry` (before the first: `None`).
    pub fn state_after(&mut self, device: u32, entry: Option<usize>) -> AllocatorState {
        self.state_index(device);
        self.states[&device].state_after(&self.snap, entry)
    }

    /// The doctor's report of `device` (its categories and allocator state finished now if
    /// needed); made once.
    pub fn doctor(&mut self, device: u32) -> &doctor::Report {
        if !self.doctors.contains_key(&device) {
            self.categories(device);
            self.state_index(device);
            let tl = &self.blocks[&device];
            let r = doctor::diagnose(&self.snap, tl, &self.cats[&device].0, &self.states[&device]);
            self.doctors.insert(device, r);
        }
        &self.doctors[&device]
    }

    /// What `device` holds by category and call site, as a comparison reads it.
    pub fn profile(&mut self, device: u32) -> diff::Profile {
        self.categories(device);
        diff::profile(&self.snap, &self.blocks[&device], &self.cats[&device].0)
    }

    /// PyTorch's categories of this trace's allocations beside memscape's, from the rows of the
    /// raw memory timeline of the same run (`categories::timeline_rows` of that file).
    pub fn beside(&mut self, device: u32, rows: &[categories::Row]) -> categories::Beside {
        self.categories(device);
        categories::beside_rows(&self.snap, &self.blocks[&device], &self.cats[&device].0, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(bytes: u64, secs: u64) -> Option<Stamp> {
        Some(Stamp { bytes, modified: std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs) })
    }

    /// A file is read again when its size or its time changed, or when either is unknown.
    #[test]
    fn a_file_written_again_is_stale() {
        let doc = Document::new(Snapshot::default(), Compiled::default()).with_stamp(stamp(10, 5));
        assert!(!doc.is_stale(stamp(10, 5)));
        assert!(doc.is_stale(stamp(11, 5)));
        assert!(doc.is_stale(stamp(10, 6)));
        assert!(doc.is_stale(None));
        assert!(Document::new(Snapshot::default(), Compiled::default()).is_stale(stamp(10, 5)));
    }
}
