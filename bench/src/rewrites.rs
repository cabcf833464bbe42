//! A snapshot pickle from a writer that rewrites memo slots, for the scaling check.
//!
//! Python's pickler never stores into a memo slot twice, and the reader's fast path relies on
//! that to find a frames list it has seen before by its bytes (`core/format/src/read/seen.rs`).
//! A rewrite makes the reader stop doing so; this file makes sure that costs the same
//! whatever was remembered before: the first half of its entries have frames lists all
//! different, and each entry of the second half follows a rewrite.

use testkit::pickle::Pickle;

/// Frame dicts the entries' frames lists are made of (two each: `FRAMES²` different lists).
const FRAMES: u32 = 1024;

/// The pickle, with `entries` trace entries.
pub fn pickle(entries: usize) -> Vec<u8> {
    let mut p = Pickle::default();
    let k = p.keys();
    let frames: Vec<u32> = (0..FRAMES).map(|i| p.frame(&k, &format!("f{i}"), "f.py", i as u16)).collect();
    p.intern_frames(&frames);
    p.begin_trace(&k);
    let n = frames.len();
    for i in 0..entries {
        if i % 1000 == 0 && i > 0 {
            p.op(b"e(");
        }
        if i >= entries / 2 {
            // The slot of a frame, stored again (with the same frame).
            let f = frames[i % n];
            p.get(f).put(f).op(b"0");
        }
        p.alloc(&k, i as u32, 64, &[frames[i % n], frames[(i / n) % n]]);
    }
    p.end_trace()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_pickle_reads_as_its_entries_with_their_stacks() {
        let n = 3000;
        let snap = snapshot::read(&super::pickle(n)).expect("it reads").snapshot;
        let t = snap.trace(0);
        assert_eq!(t.len(), n);
        for i in [0, 1, 1023, 1024, 1500, 2999] {
            let s = t.frames(i).expect("a stack");
            let names: Vec<&str> =
                snap.stacks.get(s).iter().map(|&f| snap.strings.get(snap.frames[f.0 as usize].name)).collect();
            assert_eq!(names, [format!("f{}", i % 1024), format!("f{}", (i / 1024) % 1024)], "entry {i}");
            assert_eq!(t.entry(i).addr, Some(i as u64));
        }
    }
}
