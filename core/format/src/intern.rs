//! String interning: every distinct string of a snapshot is stored once.

use std::hash::BuildHasher as _;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

/// Index of an interned string in [`Strings`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct StrId(pub u32);

/// An append-only table of distinct strings, stored back to back in one buffer.
#[derive(Clone, Default)]
pub struct Strings {
    data: String,
    spans: Vec<(u32, u32)>,
    table: HashTable<u32>,
}

impl std::fmt::Debug for Strings {
    #[inline]
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Strings({} strings, {} bytes)", self.spans.len(), self.data.len())
    }
}

impl Strings {
    /// Returns the id of `s`, adding it if it is new.
    pub fn intern(&mut self, s: &str) -> StrId {
        let hash = FxBuildHasher.hash_one(s);
        let Self { data, spans, table } = self;
        let found = table.find(hash, |&id| {
            let (start, len) = spans[id as usize];
            &data[start as usize..(start + len) as usize] == s
        });
        if let Some(&id) = found {
            return StrId(id);
        }
        // Spans are u32: the table holds at most 4 GiB of text, far beyond what fits in wasm32.
        let id = spans.len() as u32;
        spans.push((data.len() as u32, s.len() as u32));
        data.push_str(s);
        table.insert_unique(hash, id, |&id| {
            let (start, len) = spans[id as usize];
            FxBuildHasher.hash_one(&data[start as usize..(start + len) as usize])
        });
        StrId(id)
    }

    /// The id of `s`, if the table holds it. O(|s|).
    pub fn find(&self, s: &str) -> Option<StrId> {
        let hash = FxBuildHasher.hash_one(s);
        self.table
            .find(hash, |&id| {
                let (start, len) = self.spans[id as usize];
                &self.data[start as usize..(start + len) as usize] == s
            })
            .map(|&id| StrId(id))
    }

    /// The string with this id; the empty string for an id this table never gave out.
    #[inline]
    pub fn get(&self, id: StrId) -> &str {
        match self.spans.get(id.0 as usize) {
            Some(&(start, len)) => &self.data[start as usize..(start + len) as usize],
            None => "",
        }
    }

    /// Number of distinct strings.
    #[inline]
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True when no string was interned.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Approximate heap bytes used.
    #[inline]
    pub fn heap_bytes(&self) -> usize {
        self.data.capacity() + self.spans.capacity() * 8 + self.table.capacity() * 5
    }
}
