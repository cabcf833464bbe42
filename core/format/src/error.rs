//! Errors and warnings of the reader: data, not panics.

use std::fmt;

/// What kind of problem stopped the reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The bytes are not any snapshot format we know.
    NotASnapshot,
    /// The input ended early.
    Truncated,
    /// The pickle asks to import or call code (GLOBAL, REDUCE, ...): refused.
    Code,
    /// The pickle or its embedding is malformed.
    Malformed,
    /// Well-formed data that does not have the shape of a snapshot.
    Schema,
    /// A valid form this reader does not handle.
    Unsupported,
    /// The snapshot would need more memory than allowed ([`ReadError::bound`] says which
    /// limit it hit).
    TooLarge,
}

/// Which limit a [`ErrorKind::TooLarge`] error hit: the file's own size or the memory its
/// model needs (a snapshot that is simply big: a reader with more room reads it), or a
/// shape no real snapshot has (a length, a count or a depth: refused by every reader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The pickle is longer than the reader takes, or its model would not fit in memory.
    Size,
    /// A declared length, a container's item count or the pickle stack's depth.
    Shape,
}

/// A read error: what was wrong and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadError {
    /// The kind of problem.
    pub kind: ErrorKind,
    /// What was wrong, in words.
    pub message: String,
    /// Byte offset in the (decompressed, decoded) pickle or JSON, when known.
    pub offset: Option<u64>,
    /// Where in the snapshot, e.g. `device_traces[0][17].size`, when known.
    pub path: Option<String>,
    /// The layer the offset refers to, e.g. `gzip payload` or `HTML local_files[0]`.
    pub layer: Option<String>,
    /// For [`ErrorKind::TooLarge`]: which limit.
    pub bound: Option<Bound>,
}

impl ReadError {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        let bound = (kind == ErrorKind::TooLarge).then_some(Bound::Shape);
        ReadError { kind, message: message.into(), offset: None, path: None, layer: None, bound }
    }
    /// A `TooLarge` error for a snapshot that is simply big (its size or its memory).
    pub(crate) fn too_big(message: impl Into<String>) -> Self {
        ReadError { bound: Some(Bound::Size), ..Self::new(ErrorKind::TooLarge, message) }
    }
    pub(crate) fn at(mut self, offset: u64) -> Self {
        self.offset.get_or_insert(offset);
        self
    }
    pub(crate) fn path(mut self, path: impl Into<String>) -> Self {
        if self.path.is_none() {
            self.path = Some(path.into());
        }
        self
    }
    pub(crate) fn layer(mut self, layer: impl Into<String>) -> Self {
        if self.layer.is_none() {
            self.layer = Some(layer.into());
        }
        self
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(p) = &self.path {
            write!(f, " in {p}")?;
        }
        if let Some(o) = self.offset {
            write!(f, " at byte {o}")?;
        }
        if let Some(l) = &self.layer {
            write!(f, " of the {l}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ReadError {}

/// Something odd that did not stop the reader (unknown keys, trailing bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// What was seen.
    pub message: String,
    /// How many times.
    pub count: u64,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.count > 1 {
            write!(f, "{} ({} times)", self.message, self.count)
        } else {
            f.write_str(&self.message)
        }
    }
}
