//! Frames lists already read, recognised by their bytes.
//!
//! PyTorch converts each trace entry's stack to a new Python list of shared frame dicts, so
//! the pickle writes a new list for every entry, and the same stack again and again as the
//! same run of memo references (`BINGET`/`LONG_BINGET` of the same frame dicts). Resolving
//! those references one by one is a random load into a memo of tens of millions of slots
//! per frame, then a hash of the frame ids to find the stack: most of the reader's time on a
//! snapshot. A run of bytes seen before names the same stack as long as the memo slots it
//! refers to still hold the same frames, so the list is found by hashing its bytes instead
//! (sequential, in cache). The memo only changes under a slot when a PUT rewrites one, and
//! then the reader forgets everything here and remembers no more ([`SeenLists::stop`]).

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use std::hash::BuildHasher as _;

use crate::model::StackId;

/// Most bytes of list bodies kept; past this, new bodies are not remembered (the lists are
/// still read, the slow way).
const MAX_BYTES: usize = 32 << 20;

/// The bodies of frames lists read so far, each with its stack.
#[derive(Default)]
pub(crate) struct SeenLists {
    bytes: Vec<u8>,
    /// (where the body starts in `bytes`, its length, its stack).
    table: HashTable<(u32, u32, StackId)>,
    /// Bytes charged to the reader for all this.
    charged: u64,
    /// Set for good once a memo slot was rewritten (see [`SeenLists::stop`]).
    stopped: bool,
}

impl SeenLists {
    /// The hash a body is looked up and remembered by.
    #[inline]
    pub(crate) fn hash(body: &[u8]) -> u64 {
        FxBuildHasher.hash_one(body)
    }

    fn body(&self, at: u32, len: u32) -> &[u8] {
        &self.bytes[at as usize..(at + len) as usize]
    }

    /// The stack of a body seen before.
    #[inline]
    pub(crate) fn get(&self, hash: u64, body: &[u8]) -> Option<StackId> {
        self.table.find(hash, |&(at, len, _)| self.body(at, len) == body).map(|&(_, _, s)| s)
    }

    /// Remembers the stack of a body that [`SeenLists::get`] did not find; returns the bytes
    /// it took (0 when full or stopped).
    pub(crate) fn insert(&mut self, hash: u64, body: &[u8], stack: StackId) -> u64 {
        if self.stopped || self.bytes.len() + body.len() > MAX_BYTES {
            return 0;
        }
        let (at, len) = (self.bytes.len() as u32, body.len() as u32);
        self.bytes.extend_from_slice(body);
        let bytes = &self.bytes;
        self.table.insert_unique(hash, (at, len, stack), |&(a, l, _)| {
            FxBuildHasher.hash_one(&bytes[a as usize..(a + l) as usize])
        });
        let took = body.len() as u64 + 16;
        self.charged += took;
        took
    }

    /// Forgets every body and remembers no more: a memo slot changed, so a body may now name
    /// other frames. Python's pickler never rewrites a slot, so this is for odd or hostile
    /// writers, and stopping for good (rather than starting again) keeps each rewrite O(1):
    /// clearing a large table at every one made such input quadratic. Returns the bytes
    /// charged, now freed.
    pub(crate) fn stop(&mut self) -> u64 {
        if self.stopped {
            return 0;
        }
        let freed = self.charged;
        *self = SeenLists { stopped: true, ..SeenLists::default() };
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_found_by_its_bytes_until_stopped() {
        let mut seen = SeenLists::default();
        let a: &[u8] = b"h\x01h\x02j\x00\x01\x00\x00";
        let b: &[u8] = b"h\x01h\x02";
        assert_eq!(seen.get(SeenLists::hash(a), a), None);
        assert!(seen.insert(SeenLists::hash(a), a, StackId(7)) > 0);
        seen.insert(SeenLists::hash(b), b, StackId(3));
        assert_eq!(seen.get(SeenLists::hash(a), a), Some(StackId(7)));
        assert_eq!(seen.get(SeenLists::hash(b), b), Some(StackId(3)));
        // A prefix of a known body is another body.
        let c = &a[..2];
        assert_eq!(seen.get(SeenLists::hash(c), c), None);
        let charged = (a.len() + 16 + b.len() + 16) as u64;
        assert_eq!(seen.stop(), charged, "what was charged is given back");
        assert_eq!(seen.get(SeenLists::hash(a), a), None);
        assert_eq!(seen.insert(SeenLists::hash(a), a, StackId(7)), 0, "nothing is remembered after");
        assert_eq!(seen.get(SeenLists::hash(a), a), None);
        assert_eq!(seen.stop(), 0);
    }
}

#[cfg(test)]
mod read_tests {
    use testkit::pickle::Pickle;

    /// The same list body, read again after a PUT rewrote one of the memo slots it refers
    /// to, names the new frame: the bodies remembered by `SeenLists` are forgotten.
    #[test]
    fn a_list_body_after_its_frame_slot_is_rewritten_names_the_new_frame() {
        let mut p = Pickle::default();
        let k = p.keys();
        let [a, b, c] = ["outer", "inner", "replaced"].map(|n| p.frame(&k, n, "f.py", 1));
        p.intern_frames(&[a, b, c]);
        p.begin_trace(&k);
        p.alloc(&k, 16, 64, &[a, b]);
        p.alloc(&k, 32, 64, &[a, b]);
        // Slot `b` now holds another frame: the same body names another stack.
        p.get(c).put(b).op(b"0");
        p.alloc(&k, 48, 64, &[a, b]);
        let bytes = p.end_trace();

        let snap = crate::read(&bytes).expect("the pickle reads").snapshot;
        let trace = &snap.device_traces.as_ref().expect("traces")[0];
        assert_eq!(trace.len(), 3);
        let names = |i: usize| -> Vec<String> {
            let s = trace.frames(i).expect("frames");
            snap.stacks.get(s).iter().map(|&f| snap.strings.get(snap.frames[f.0 as usize].name).to_string()).collect()
        };
        assert_eq!(names(0), ["outer", "inner"]);
        assert_eq!(names(1), ["outer", "inner"]);
        assert_eq!(names(2), ["outer", "replaced"]);
    }
}
