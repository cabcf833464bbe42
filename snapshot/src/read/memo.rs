//! The pickle's memo, held in chunks of fixed capacity. A snapshot memoizes every trace
//! entry and almost every string and frames list: a 0.9 GB file has tens of millions of
//! slots. As one vector they took 537 MB at the end of the read and, while it doubled, the
//! old 268 MB beside the new: the largest thing the reader held, and in a Web Worker wasm
//! memory never shrinks, so that moment set the tab's memory. In chunks, growing never
//! copies and never holds two copies; a lookup is one more load, from a table small enough
//! to stay in cache. Tried and dropped (each about a quarter slower to read, natively or in
//! V8): slots packed into 8 bytes (decoding them), and chunks as filled fixed-size arrays.

use super::vm::PVal;

/// Slots a chunk holds (16 bytes each: 256 KiB).
const CHUNK_BITS: u32 = 14;
const CHUNK: usize = 1 << CHUNK_BITS;

/// Memo slots in order of their index: every chunk but the last is full.
#[derive(Default)]
pub(crate) struct Memo {
    chunks: Vec<Vec<PVal>>,
    len: usize,
}

impl Memo {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn get(&self, idx: usize) -> Option<PVal> {
        self.chunks.get(idx >> CHUNK_BITS).and_then(|c| c.get(idx & (CHUNK - 1))).copied()
    }

    #[inline]
    pub(crate) fn push(&mut self, v: PVal) {
        match self.chunks.last_mut() {
            Some(c) if c.len() < CHUNK => c.push(v),
            _ => self.push_to_new_chunk(v),
        }
        self.len += 1;
    }

    #[cold]
    #[inline(never)]
    fn push_to_new_chunk(&mut self, v: PVal) {
        let mut c = Vec::with_capacity(CHUNK);
        c.push(v);
        self.chunks.push(c);
    }

    /// Stores `v` in an existing slot; an index at or past the end is ignored.
    pub(crate) fn set(&mut self, idx: usize, v: PVal) {
        if let Some(slot) = self.chunks.get_mut(idx >> CHUNK_BITS).and_then(|c| c.get_mut(idx & (CHUNK - 1))) {
            *slot = v;
        }
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
}
