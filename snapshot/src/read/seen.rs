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
//! then the reader forgets everything here ([`SeenLists::clear`]).

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

    /// Remembers a body's stack; returns the bytes it took (0 when full or already known).
    pub(crate) fn insert(&mut self, hash: u64, body: &[u8], stack: StackId) -> u64 {
        if self.bytes.len() + body.len() > MAX_BYTES || self.get(hash, body).is_some() {
            return 0;
        }
        let (at, len) = (self.bytes.len() as u32, body.len() as u32);
        self.bytes.extend_from_slice(body);
        let bytes = &self.bytes;
        self.table.insert_unique(hash, (at, len, stack), |&(a, l, _)| {
            FxBuildHasher.hash_one(&bytes[a as usize..(a + l) as usize])
        });
        body.len() as u64 + 16
    }

    /// Forgets every body: a memo slot changed, so a body may now name other frames.
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.table.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_found_by_its_bytes_until_cleared() {
        let mut seen = SeenLists::default();
        let a: &[u8] = b"h\x01h\x02j\x00\x01\x00\x00";
        let b: &[u8] = b"h\x01h\x02";
        assert_eq!(seen.get(SeenLists::hash(a), a), None);
        assert!(seen.insert(SeenLists::hash(a), a, StackId(7)) > 0);
        assert_eq!(seen.insert(SeenLists::hash(a), a, StackId(8)), 0, "known already");
        seen.insert(SeenLists::hash(b), b, StackId(3));
        assert_eq!(seen.get(SeenLists::hash(a), a), Some(StackId(7)));
        assert_eq!(seen.get(SeenLists::hash(b), b), Some(StackId(3)));
        // A prefix of a known body is another body.
        let c = &a[..2];
        assert_eq!(seen.get(SeenLists::hash(c), c), None);
        seen.clear();
        assert_eq!(seen.get(SeenLists::hash(a), a), None);
    }
}

#[cfg(test)]
mod read_tests {
    /// A pickle written by hand, as Python's pickler writes a snapshot, with memo slots
    /// counted as it goes.
    struct P {
        b: Vec<u8>,
        memo: u8,
    }

    impl P {
        fn op(&mut self, o: &[u8]) -> &mut Self {
            self.b.extend_from_slice(o);
            self
        }
        fn memoize(&mut self) -> u8 {
            self.b.push(0x94);
            self.memo += 1;
            self.memo - 1
        }
        fn str(&mut self, s: &str) -> u8 {
            self.b.push(0x8c);
            self.b.push(s.len() as u8);
            self.b.extend_from_slice(s.as_bytes());
            self.memoize()
        }
        fn get(&mut self, i: u8) -> &mut Self {
            self.op(&[b'h', i])
        }
        fn frame(&mut self, keys: [u8; 3], name: &str) -> u8 {
            self.op(b"}");
            let d = self.memoize();
            self.op(b"(").get(keys[0]);
            self.str(name);
            self.get(keys[1]);
            self.str("f.py");
            self.get(keys[2]).op(&[b'K', 1]).op(b"u");
            d
        }
    }

    /// The same list body, read again after a PUT rewrote one of the memo slots it refers
    /// to, names the new frame: the bodies remembered by `SeenLists` are forgotten.
    #[test]
    fn a_list_body_after_its_frame_slot_is_rewritten_names_the_new_frame() {
        let mut p = P { b: vec![0x80, 4], memo: 0 };
        // First, at the top level, the keys and three frame dicts, each popped again.
        let keep = |p: &mut P, f: &dyn Fn(&mut P) -> u8| {
            let i = f(p);
            p.op(b"0");
            i
        };
        let [action, alloc, addr, size, stream, frames, segments, traces] =
            ["action", "alloc", "addr", "size", "stream", "frames", "segments", "device_traces"]
                .map(|k| keep(&mut p, &|p| p.str(k)));
        let fk =
            [keep(&mut p, &|p| p.str("name")), keep(&mut p, &|p| p.str("filename")), keep(&mut p, &|p| p.str("line"))];
        let [a, b, c] = ["outer", "inner", "replaced"].map(|n| keep(&mut p, &|p| p.frame(fk, n)));
        // A list of them, read by the general path, makes them interned frames.
        p.op(b"]");
        p.memoize();
        p.op(b"(").get(a).get(b).get(c).op(b"e").op(b"0");
        // The root: {"segments": [], "device_traces": [[entry, entry, (rewrite), entry]]}.
        p.op(b"}");
        p.memoize();
        p.op(b"(").get(segments).op(b"]");
        p.memoize();
        p.get(traces).op(b"]");
        p.memoize();
        p.op(b"(").op(b"]");
        p.memoize();
        p.op(b"(");
        let entry = |p: &mut P| {
            p.op(b"}");
            p.memoize();
            p.op(b"(").get(action).get(alloc).get(addr).op(&[b'K', 16]).get(size).op(&[b'K', 64]);
            p.get(stream).op(&[b'K', 0]).get(frames).op(b"]");
            p.memoize();
            p.op(b"(").get(a).get(b).op(b"e").op(b"u");
        };
        entry(&mut p);
        entry(&mut p);
        // Slot `b` now holds another frame: the same body names another stack.
        p.get(c).op(&[b'q', b]).op(b"0");
        entry(&mut p);
        p.op(b"e").op(b"e").op(b"u").op(b".");

        let snap = crate::read(&p.b).expect("the pickle reads").snapshot;
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
