//! The pickle's memo, held in chunks of fixed capacity. A snapshot memoizes every trace
//! entry and almost every string and frames list: a 0.9 GB file has tens of millions of
//! slots. As one vector they took 537 MB at the end of the read and, while it doubled, the
//! old 268 MB beside the new: the largest thing the reader held, and in a Web Worker wasm
//! memory never shrinks, so that moment set the tab's memory. In chunks, growing never
//! copies and never holds two copies; a lookup is one more load, from a table small enough
//! to stay in cache. Tried and dropped (each about a quarter slower to read, natively or in
//! V8): slots packed into 8 bytes (decoding them), and chunks as filled fixed-size arrays.

use super::pval::PVal;
use crate::model::StackId;

/// Slots a chunk holds (16 bytes each: 256 KiB).
const CHUNK_BITS: u32 = 14;
const CHUNK: usize = 1 << CHUNK_BITS;

/// Memo slots in order of their index: every chunk but the last is full.
///
/// A windowed read (`forget_entries`) bounds the memo by what the model keeps rather than by
/// the file: each chunk, once full, forgets the trace entries' own slots (the entry dicts,
/// which nothing can refer to again) and keeps the rest, a frames list's slot as its 4-byte
/// stack id (PyTorch's pickles refer to a frames list again from an allocation's later
/// events, from a segment's block, from a `segment_alloc`'s allocation) until the VM says an
/// allocation's lists are done with (`forget_stack`, when its free completes). A kept slot is
/// then found by rank in a bitmap of the chunk (`Sparse`), an empty dense chunk standing in
/// its place.
#[derive(Default)]
pub(crate) struct Memo {
    chunks: Vec<Vec<PVal>>,
    len: usize,
    forget_entries: bool,
    sparse: Vec<Option<Box<Sparse>>>,
}

/// A full chunk's kept slots: the stacks and the other values, each found by rank.
struct Sparse {
    stacks: Ranked<StackId>,
    others: Ranked<PVal>,
}

/// Bit `i` of `bits` says slot `i` is here, at `kept[before[i / 64] + popcount(bits[i / 64]
/// below bit i % 64)]`.
/// A slot forgotten after it was kept is marked in `dead` and reads as absent; once half of
/// `kept` is dead the chunk is packed again (amortized O(1) a slot).
struct Ranked<T> {
    bits: [u64; CHUNK / 64],
    before: [u16; CHUNK / 64],
    kept: Vec<T>,
    dead: Option<Box<([u64; CHUNK / 64], usize)>>,
}

impl<T: Copy> Ranked<T> {
    fn new() -> Self {
        Ranked { bits: [0; CHUNK / 64], before: [0; CHUNK / 64], kept: Vec::new(), dead: None }
    }

    fn is_dead(&self, off: usize) -> bool {
        self.dead.as_ref().is_some_and(|d| d.0[off / 64] >> (off % 64) & 1 == 1)
    }

    /// Forgets slot `off` (reads as absent from now on).
    fn forget(&mut self, off: usize) {
        if !self.rank(off).1 || self.is_dead(off) {
            return;
        }
        let d = self.dead.get_or_insert_with(|| Box::new(([0; CHUNK / 64], 0)));
        d.0[off / 64] |= 1 << (off % 64);
        d.1 += 1;
        if d.1 * 2 > self.kept.len() {
            self.pack();
        }
    }

    /// Drops the dead slots.
    fn pack(&mut self) {
        let Some(dead) = self.dead.take() else { return };
        let old = std::mem::take(&mut self.kept);
        let mut k = 0;
        for w in 0..CHUNK / 64 {
            let mut word = self.bits[w];
            self.before[w] = self.kept.len() as u16;
            let mut live = word & !dead.0[w];
            while word != 0 {
                let b = word.trailing_zeros();
                if live >> b & 1 == 1 {
                    self.kept.push(old[k]);
                }
                k += 1;
                word &= word - 1;
            }
            live &= self.bits[w];
            self.bits[w] = live;
        }
        self.kept.shrink_to_fit();
    }

    /// Where slot `off` is, or would be.
    fn rank(&self, off: usize) -> (usize, bool) {
        let (w, b) = (off / 64, off % 64);
        let word = self.bits[w];
        (self.before[w] as usize + (word & ((1u64 << b) - 1)).count_ones() as usize, word >> b & 1 == 1)
    }

    fn get(&self, off: usize) -> Option<T> {
        let (k, here) = self.rank(off);
        (here && !self.is_dead(off)).then(|| self.kept[k])
    }

    /// Appends slot `off`, after every slot kept so far (slots in order).
    fn push(&mut self, off: usize, v: T) {
        self.bits[off / 64] |= 1 << (off % 64);
        self.kept.push(v);
    }

    /// Closes word `w`'s count, when the slots before it are all in.
    fn start_word(&mut self, w: usize) {
        self.before[w] = self.kept.len() as u16;
    }
}

impl Memo {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// A memo that forgets the trace entries' slots as its chunks fill (a windowed read).
    pub(crate) fn forgetting_entries() -> Memo {
        Memo { forget_entries: true, ..Memo::default() }
    }

    #[inline]
    pub(crate) fn get(&self, idx: usize) -> Option<PVal> {
        match self.chunks.get(idx >> CHUNK_BITS).and_then(|c| c.get(idx & (CHUNK - 1))) {
            Some(v) => Some(*v),
            None if self.forget_entries => self.sparse_get(idx),
            None => None,
        }
    }

    /// Whether this memo forgets slots (a windowed read).
    pub(crate) fn forgets(&self) -> bool {
        self.forget_entries
    }

    /// Forgets the frames list in slot `idx`, which nothing will refer to again (the list of
    /// an allocation whose free has come: PyTorch refers to it from the allocation's events
    /// only). A later GET of it is an error that says so.
    pub(crate) fn forget_stack(&mut self, idx: usize) {
        let (c, off) = (idx >> CHUNK_BITS, idx & (CHUNK - 1));
        if let Some(slot) = self.chunks.get_mut(c).and_then(|c| c.get_mut(off)) {
            if matches!(slot, PVal::Stack(_)) {
                *slot = PVal::Row(u32::MAX);
            }
        } else if let Some(Some(s)) = self.sparse.get_mut(c) {
            s.stacks.forget(off);
        }
    }

    /// Whether slot `idx` existed and a windowed read forgot it.
    pub(crate) fn forgot(&self, idx: usize) -> bool {
        self.forget_entries && idx < self.len && matches!(self.get(idx), None | Some(PVal::Row(u32::MAX)))
    }

    #[cold]
    fn sparse_get(&self, idx: usize) -> Option<PVal> {
        let s = self.sparse.get(idx >> CHUNK_BITS)?.as_ref()?;
        let off = idx & (CHUNK - 1);
        s.stacks.get(off).map(PVal::Stack).or_else(|| s.others.get(off))
    }

    /// Keeps only the slots of full chunk `c` that a later GET can need; returns the bytes
    /// freed.
    fn forget(&mut self, c: usize) -> u64 {
        let slots = std::mem::take(&mut self.chunks[c]);
        let mut s = Box::new(Sparse { stacks: Ranked::new(), others: Ranked::new() });
        for (i, v) in slots.iter().enumerate() {
            if i % 64 == 0 {
                s.stacks.start_word(i / 64);
                s.others.start_word(i / 64);
            }
            match *v {
                PVal::Row(_) | PVal::Pending(_) => {}
                PVal::Stack(sid) => s.stacks.push(i, sid),
                other => s.others.push(i, other),
            }
        }
        s.stacks.kept.shrink_to_fit();
        s.others.kept.shrink_to_fit();
        let kept = (s.stacks.kept.len() * 4 + s.others.kept.len() * 16) as u64;
        if self.sparse.len() <= c {
            self.sparse.resize_with(c + 1, || None);
        }
        self.sparse[c] = Some(s);
        (CHUNK as u64 * 16).saturating_sub(kept)
    }

    /// Adds the next slot; returns the bytes a windowed read freed by forgetting the slots of
    /// a chunk filled before (0 otherwise).
    #[inline]
    pub(crate) fn push(&mut self, v: PVal) -> u64 {
        self.len += 1;
        match self.chunks.last_mut() {
            Some(c) if c.len() < CHUNK => {
                c.push(v);
                0
            }
            _ => self.push_to_new_chunk(v),
        }
    }

    #[cold]
    #[inline(never)]
    fn push_to_new_chunk(&mut self, v: PVal) -> u64 {
        // The chunk before the last one: the last may still be rewritten (a frames list's
        // slot becomes its stack once the list ends, a few slots later).
        let freed = match self.chunks.len().checked_sub(2) {
            Some(c) if self.forget_entries => self.forget(c),
            _ => 0,
        };
        let mut c = Vec::with_capacity(CHUNK);
        c.push(v);
        self.chunks.push(c);
        freed
    }

    /// Stores `v` in an existing slot; an index at or past the end is ignored.
    pub(crate) fn set(&mut self, idx: usize, v: PVal) {
        if let Some(slot) = self.chunks.get_mut(idx >> CHUNK_BITS).and_then(|c| c.get_mut(idx & (CHUNK - 1))) {
            *slot = v;
        } else if idx < self.len && self.forget_entries {
            self.sparse_set(idx, v);
        }
    }

    /// A slot of a forgetting chunk rewritten (a PUT to an old slot, a list becoming its
    /// stack late): the chunk is made whole again first (forgotten slots stay forgotten), so
    /// a writer that keeps rewriting old slots costs O(chunk) once per chunk, not per write.
    #[cold]
    fn sparse_set(&mut self, idx: usize, v: PVal) {
        let c = idx >> CHUNK_BITS;
        let Some(s) = self.sparse.get_mut(c).and_then(Option::take) else { return };
        let mut dense = vec![PVal::Row(u32::MAX); CHUNK];
        for (off, slot) in dense.iter_mut().enumerate() {
            if let Some(sid) = s.stacks.get(off) {
                *slot = PVal::Stack(sid);
            } else if let Some(other) = s.others.get(off) {
                *slot = other;
            }
        }
        dense[idx & (CHUNK - 1)] = v;
        self.chunks[c] = dense;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: Option<PVal>, b: PVal) -> bool {
        format!("{a:?}") == format!("{:?}", Some(b))
    }

    #[test]
    fn slots_across_chunks_keep_their_values() {
        let mut m = Memo::default();
        let n = 3 * CHUNK + 5;
        for i in 0..n {
            m.push(PVal::Row(i as u32));
        }
        assert_eq!(m.len(), n);
        assert_eq!(m.chunks.len(), 4);
        for i in [0, 1, CHUNK - 1, CHUNK, 2 * CHUNK + 7, n - 1] {
            assert!(same(m.get(i), PVal::Row(i as u32)), "slot {i}: {:?}", m.get(i));
        }
        // The rest of the last chunk is not a slot.
        assert!(m.get(n).is_none());
        assert!(m.get(4 * CHUNK - 1).is_none());
        assert!(m.get(9 * CHUNK).is_none());
        m.set(CHUNK, PVal::Float(2.5));
        assert!(same(m.get(CHUNK), PVal::Float(2.5)));
        assert!(same(m.get(CHUNK + 1), PVal::Row(CHUNK as u32 + 1)));
        m.set(n, PVal::Bool(true));
        assert_eq!(m.len(), n);
        assert!(m.get(n).is_none());
    }

    #[test]
    fn a_forgetting_memo_keeps_all_but_the_entries_own_slots() {
        let mut m = Memo::forgetting_entries();
        let value = |i: usize| match i % 4 {
            0 => PVal::Row(u32::MAX),
            1 => PVal::Stack(StackId(i as u32)),
            2 => PVal::Int(i as i64),
            _ => PVal::Pending(0),
        };
        let n = 4 * CHUNK + 3;
        let mut freed = 0;
        for i in 0..n {
            freed += m.push(value(i));
        }
        // Chunks 0 to 2 forgot their entries' slots (each chunk is, once two more are started);
        // 3 and 4 are whole. A quarter of each are stacks (4 bytes), a quarter other values.
        assert_eq!(freed, 3 * (CHUNK as u64 * 16 - (CHUNK as u64 / 4) * 20));
        for i in (0..n).step_by(7).chain([CHUNK - 1, CHUNK, 2 * CHUNK - 1]) {
            let dead = i < 3 * CHUNK && matches!(i % 4, 0 | 3);
            if dead {
                assert!(m.get(i).is_none() && m.forgot(i), "slot {i}");
            } else {
                assert!(same(m.get(i), value(i)), "slot {i}: {:?}", m.get(i));
            }
        }
        // Rewriting old slots, kept or forgotten, stack or not.
        m.set(5, PVal::Float(1.5));
        m.set(8, PVal::Stack(StackId(99)));
        m.set(CHUNK + 1, PVal::Stack(StackId(7)));
        assert!(same(m.get(5), PVal::Float(1.5)));
        assert!(same(m.get(8), PVal::Stack(StackId(99))));
        assert!(same(m.get(CHUNK + 1), PVal::Stack(StackId(7))));
        assert!(same(m.get(9), value(9)) && same(m.get(6), value(6)) && m.forgot(4));
    }

    #[test]
    fn forgotten_stacks_read_as_forgotten_and_their_chunks_pack() {
        let mut m = Memo::forgetting_entries();
        let n = 3 * CHUNK;
        for i in 0..n {
            m.push(PVal::Stack(StackId(i as u32)));
        }
        // Chunk 0 is sparse, 1 and 2 dense: forget the even slots of 0 and a few of 2.
        for i in (0..CHUNK).step_by(2).chain([1, 2 * CHUNK + 3, 2 * CHUNK + 4]) {
            m.forget_stack(i);
        }
        for i in [0, 1, 2, CHUNK - 2, 2 * CHUNK + 3, 2 * CHUNK + 4] {
            assert!(m.forgot(i), "slot {i}");
        }
        for i in [3, 5, CHUNK - 1, CHUNK, 2 * CHUNK + 5] {
            assert!(same(m.get(i), PVal::Stack(StackId(i as u32))), "slot {i}: {:?}", m.get(i));
        }
        // Over half of chunk 0 forgotten: packed to what is left.
        let s = m.sparse[0].as_ref().unwrap();
        assert!(s.stacks.dead.is_none() && s.stacks.kept.len() == CHUNK / 2 - 1);
    }
}
