//! A JSON document split as its bytes arrive: the root object's members, or, for the one
//! array that holds the events (`traceEvents`, or the root itself when it is an array), each
//! element on its own. Every piece is handed over as its own bytes, to be parsed into a small
//! struct; no value tree of the document is ever built, and no piece may outgrow `cap`.
//!
//! The scanner checks the grammar of what it walks (the root, keys, commas, colons); inside
//! a piece it only counts brackets and skips strings, and the piece's parser checks the rest.

use crate::error::{ErrorKind, ReadError};

/// Nesting deeper than this inside one piece is refused (serde_json's own limit is 128).
const MAX_DEPTH: u32 = 128;

/// A piece of the document.
pub(crate) enum Piece<'a> {
    /// A member of the root object that is not streamed: its key, and its value's bytes.
    Member { key: &'a str, value: &'a [u8] },
    /// One element of the streamed array.
    Element { index: u64, value: &'a [u8], offset: u64 },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum At {
    /// Before the root.
    Start,
    /// In the root object, expecting a key (or `}` when `first`).
    Key { first: bool },
    /// Inside a key's string.
    InKey,
    /// After a key.
    Colon,
    /// Expecting a member's value.
    Value,
    /// Inside a member's value.
    InValue,
    /// After a member: `,` or `}`.
    AfterMember,
    /// In the streamed array, expecting an element (or `]` when `first`).
    Element { first: bool },
    /// Inside an element.
    InElement,
    /// After an element: `,` or `]`.
    AfterElement,
    /// After the root.
    End,
}

/// The splitter's state between chunks.
pub(crate) struct Scanner {
    at: At,
    /// The key whose array is streamed.
    streamed_key: &'static str,
    /// Whether the root is an array (then it is the streamed one).
    root_array: bool,
    /// Inside a piece: bracket depth, in a string, after a backslash, a bare scalar.
    depth: u32,
    in_str: bool,
    esc: bool,
    scalar: bool,
    /// Bytes of a piece (or key) that began in an earlier chunk.
    buf: Vec<u8>,
    /// The current member's key.
    key: String,
    /// Offset of the current piece's first byte.
    piece_start: u64,
    /// Offset of the next chunk's first byte.
    base: u64,
    /// The next element's index.
    index: u64,
    cap: usize,
}

fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

impl Scanner {
    /// A scanner streaming the elements of the root array, or of the member `streamed_key`
    /// of the root object; no piece may be longer than `cap` bytes.
    pub(crate) fn new(streamed_key: &'static str, cap: usize) -> Self {
        Scanner {
            at: At::Start,
            streamed_key,
            root_array: false,
            depth: 0,
            in_str: false,
            esc: false,
            scalar: false,
            buf: Vec::new(),
            key: String::new(),
            piece_start: 0,
            base: 0,
            index: 0,
            cap,
        }
    }

    fn err(&self, at: usize, what: String) -> ReadError {
        ReadError::new(ErrorKind::Malformed, format!("invalid JSON: {what}")).at(self.base + at as u64)
    }

    fn unexpected(&self, b: &[u8], i: usize, wanted: &str) -> ReadError {
        let c = b[i];
        let shown = if c.is_ascii_graphic() { format!("`{}`", c as char) } else { format!("byte 0x{c:02x}") };
        self.err(i, format!("expected {wanted}, found {shown}"))
    }

    /// Reads the next chunk, handing each completed piece to `emit`.
    pub(crate) fn feed(
        &mut self,
        b: &[u8],
        emit: &mut dyn FnMut(Piece<'_>) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        let mut i = 0;
        while i < b.len() {
            match self.at {
                At::InKey => {
                    let start = i;
                    match self.string_end(b, i) {
                        Some(end) => {
                            self.buf.extend_from_slice(&b[start..end]);
                            let raw = std::mem::take(&mut self.buf);
                            self.key = serde_json::from_slice::<String>(&raw)
                                .map_err(|e| self.err(end, format!("a key that is not a string ({e})")))?;
                            self.at = At::Colon;
                            i = end;
                        }
                        None => {
                            self.buf.extend_from_slice(&b[start..]);
                            self.check_cap(b.len())?;
                            i = b.len();
                        }
                    }
                }
                At::InValue | At::InElement => {
                    let start = i;
                    match self.piece_end(b, i)? {
                        Some(end) => {
                            let owned = !self.buf.is_empty();
                            if owned {
                                self.buf.extend_from_slice(&b[start..end]);
                                self.check_cap(end)?;
                            }
                            let buf = std::mem::take(&mut self.buf);
                            let value = if owned { &buf[..] } else { &b[start..end] };
                            let offset = self.piece_start;
                            let r = if self.at == At::InValue {
                                self.at = At::AfterMember;
                                emit(Piece::Member { key: &self.key, value })
                            } else {
                                self.at = At::AfterElement;
                                self.index += 1;
                                emit(Piece::Element { index: self.index - 1, value, offset })
                            };
                            self.buf = buf;
                            self.buf.clear();
                            r?;
                            i = end;
                        }
                        None => {
                            self.buf.extend_from_slice(&b[start..]);
                            self.check_cap(b.len())?;
                            i = b.len();
                        }
                    }
                }
                _ => {
                    let c = b[i];
                    if is_ws(c) {
                        i += 1;
                        continue;
                    }
                    self.structure(b, i)?;
                    // A piece's first byte is read again as part of it.
                    if !matches!(self.at, At::InValue | At::InElement) {
                        i += 1;
                    }
                }
            }
        }
        self.base += b.len() as u64;
        Ok(())
    }

    /// One structural byte outside pieces (whitespace already skipped).
    fn structure(&mut self, b: &[u8], i: usize) -> Result<(), ReadError> {
        let c = b[i];
        self.at = match (self.at, c) {
            (At::Start, b'{') => At::Key { first: true },
            (At::Start, b'[') => {
                self.root_array = true;
                At::Element { first: true }
            }
            (At::Start, _) => return Err(self.unexpected(b, i, "`{` or `[` at the start of the document")),
            (At::Key { first: true }, b'}') | (At::AfterMember, b'}') => At::End,
            (At::Key { .. }, b'"') => {
                self.buf.clear();
                self.buf.push(b'"');
                self.in_str = true;
                self.esc = false;
                At::InKey
            }
            (At::Key { .. }, _) => return Err(self.unexpected(b, i, "a key")),
            (At::Colon, b':') => At::Value,
            (At::Colon, _) => return Err(self.unexpected(b, i, "`:` after a key")),
            (At::Value, b'[') if self.key == self.streamed_key => At::Element { first: true },
            (At::Value, _) => {
                self.start_piece(c, i)?;
                At::InValue
            }
            (At::AfterMember, b',') => At::Key { first: false },
            (At::AfterMember, _) => return Err(self.unexpected(b, i, "`,` or `}` after a member")),
            (At::Element { first: true }, b']') | (At::AfterElement, b']') => {
                if self.root_array {
                    At::End
                } else {
                    At::AfterMember
                }
            }
            (At::Element { .. }, _) => {
                self.start_piece(c, i)?;
                At::InElement
            }
            (At::AfterElement, b',') => At::Element { first: false },
            (At::AfterElement, _) => return Err(self.unexpected(b, i, "`,` or `]` after an element")),
            (At::End, _) => return Err(self.unexpected(b, i, "nothing after the document's end")),
            (At::InKey | At::InValue | At::InElement, _) => unreachable!("pieces are read in `feed`"),
        };
        Ok(())
    }

    /// Sets the piece state from its first byte; the byte is read again by `piece_end`.
    fn start_piece(&mut self, c: u8, i: usize) -> Result<(), ReadError> {
        self.piece_start = self.base + i as u64;
        self.depth = 0;
        self.in_str = false;
        self.esc = false;
        self.scalar = !matches!(c, b'{' | b'[' | b'"');
        if matches!(c, b'}' | b']' | b',' | b':') {
            return Err(ReadError::new(
                ErrorKind::Malformed,
                format!("invalid JSON: expected a value, found `{}`", c as char),
            )
            .at(self.piece_start));
        }
        Ok(())
    }

    fn check_cap(&self, at: usize) -> Result<(), ReadError> {
        if self.buf.len() > self.cap {
            let what = if self.at == At::InKey { "a key" } else { "one value" };
            return Err(ReadError::new(
                ErrorKind::TooLarge,
                format!("{what} of the JSON is over {} MiB (no profiler trace has one so large)", self.cap >> 20),
            )
            .at(self.base + at as u64));
        }
        Ok(())
    }

    /// The end of the string being read (after its closing quote), or `None` at the chunk's end.
    fn string_end(&mut self, b: &[u8], mut i: usize) -> Option<usize> {
        while i < b.len() {
            if self.esc {
                self.esc = false;
                i += 1;
                continue;
            }
            match memchr::memchr2(b'"', b'\\', &b[i..]) {
                None => return None,
                Some(k) => {
                    i += k;
                    if b[i] == b'\\' {
                        self.esc = true;
                        i += 1;
                    } else {
                        self.in_str = false;
                        return Some(i + 1);
                    }
                }
            }
        }
        None
    }

    /// The end of the piece being read (exclusive), or `None` at the chunk's end.
    fn piece_end(&mut self, b: &[u8], mut i: usize) -> Result<Option<usize>, ReadError> {
        while i < b.len() {
            if self.in_str {
                match self.string_end(b, i) {
                    Some(end) => {
                        i = end;
                        if self.depth == 0 {
                            return Ok(Some(i));
                        }
                        continue;
                    }
                    None => return Ok(None),
                }
            }
            let c = b[i];
            if self.scalar {
                if is_ws(c) || matches!(c, b',' | b'}' | b']') {
                    return Ok(Some(i));
                }
                i += 1;
                continue;
            }
            match c {
                b'"' => self.in_str = true,
                b'{' | b'[' => {
                    self.depth += 1;
                    if self.depth > MAX_DEPTH {
                        return Err(ReadError::new(
                            ErrorKind::TooLarge,
                            format!("the JSON nests deeper than {MAX_DEPTH} levels (no profiler trace does)"),
                        )
                        .at(self.base + i as u64));
                    }
                }
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return Ok(Some(i + 1));
                    }
                }
                _ => {}
            }
            i += 1;
        }
        Ok(None)
    }

    /// Bytes read so far.
    pub(crate) fn consumed(&self) -> u64 {
        self.base
    }

    /// Ends the input: an error unless the root closed.
    pub(crate) fn finish(&self) -> Result<(), ReadError> {
        if self.at == At::End {
            return Ok(());
        }
        let inside = match self.at {
            At::Start => "before its first value",
            At::InElement | At::Element { .. } | At::AfterElement => "inside its list of events",
            _ => "before its root object closes",
        };
        Err(ReadError::new(ErrorKind::Truncated, format!("the JSON ends {inside} (truncated file?)")).at(self.base))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(doc: &[u8], chunk: usize) -> Result<Vec<String>, ReadError> {
        let mut s = Scanner::new("traceEvents", 1 << 20);
        let mut out = Vec::new();
        for c in doc.chunks(chunk) {
            s.feed(c, &mut |p| {
                out.push(match p {
                    Piece::Member { key, value, .. } => format!("{key}={}", String::from_utf8_lossy(value)),
                    Piece::Element { index, value, .. } => format!("#{index}:{}", String::from_utf8_lossy(value)),
                });
                Ok(())
            })?;
        }
        s.finish()?;
        Ok(out)
    }

    #[test]
    fn members_and_elements_in_any_chunking() {
        let doc = br#" {"a": 1, "s": "x\"}]", "traceEvents": [ {"n": [1, {"b": "]"}]}, 2 ,"\\" ], "z": {"k": [ ]} } "#;
        let want = vec!["a=1", r#"s="x\"}]""#, r#"#0:{"n": [1, {"b": "]"}]}"#, "#1:2", r#"#2:"\\""#, r#"z={"k": [ ]}"#];
        for chunk in [1, 2, 3, 7, 1000] {
            assert_eq!(pieces(doc, chunk).unwrap(), want, "chunks of {chunk}");
        }
        assert_eq!(pieces(b"[[1,2],[3]]", 1).unwrap(), vec!["#0:[1,2]", "#1:[3]"]);
    }

    #[test]
    fn bad_documents_are_errors_with_offsets() {
        let e = pieces(br#"{"traceEvents": [{"a": 1}"#, 4).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Truncated);
        let e = pieces(br#"{"a" 1}"#, 100).unwrap_err();
        assert!(e.message.contains("`:`"), "{e}");
        assert_eq!(e.offset, Some(5));
        let deep = format!("{{\"traceEvents\": [{}{}]}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(pieces(deep.as_bytes(), 64).unwrap_err().kind, ErrorKind::TooLarge);
        let e = pieces(b"{} x", 100).unwrap_err();
        assert!(e.message.contains("after the document's end"), "{e}");
    }
}
