//! The reader: bytes in (whole or in chunks), a [`Snapshot`] out.
//!
//! The format is chosen by content: a raw pickle (protocols 0 to 5), a gzip stream holding
//! one, JSON, or an HTML page written by `_memory_viz.py` (base64 pickle in `local_files`).
//!
//! Module map: this file recognises the container format and feeds the pickle to `vm`, the
//! pickle machine (with its children under `vm/`), which keeps its memo in `memo` and the
//! frames lists it has read in `seen`; `build` turns the machine's finished arena into a
//! [`Snapshot`]. Leaves that import none of these: `pval` (the machine's values and arena
//! slots), `schema` (the known keys), `limits` (the public [`Limits`]).

mod build;
mod limits;
mod memo;
mod pval;
mod schema;
mod seen;
mod trace;
mod vm;

use std::io::Write as _;

use base64::Engine as _;

pub use limits::Limits;

use crate::error::{ErrorKind, ReadError, Warning};
use crate::model::Snapshot;
use pval::{Kind, PVal};
use vm::Vm;

/// The container format a snapshot was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// A raw pickle of this protocol (`None` for protocols 0 and 1, which have no PROTO).
    Pickle(Option<u8>),
    /// Gzip around another format.
    Gzip(Box<Format>),
    /// Zstandard around another format.
    Zstd(Box<Format>),
    /// A JSON document.
    Json,
    /// An HTML page from `_memory_viz.py` around another format.
    Html(Box<Format>),
    /// A `torch.profiler` Chrome trace (JSON) with memory events.
    ProfilerTrace,
    /// A memory timeline of `torch.profiler` (`export_memory_timeline`, JSON).
    MemoryTimeline,
}

/// In words, as the viewer's statistics show it: "pickle, protocol 4",
/// "pickle, protocol 4, gzip-compressed", "pickle, protocol 4, inside a PyTorch HTML page".
impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Format::Pickle(Some(p)) => write!(f, "pickle, protocol {p}"),
            Format::Pickle(None) => f.write_str("pickle, protocol 0 or 1"),
            Format::Gzip(inner) => write!(f, "{inner}, gzip-compressed"),
            Format::Zstd(inner) => write!(f, "{inner}, zstd-compressed"),
            Format::Json => f.write_str("JSON"),
            Format::Html(inner) => write!(f, "{inner}, inside a PyTorch HTML page"),
            Format::ProfilerTrace => f.write_str("torch.profiler trace (JSON)"),
            Format::MemoryTimeline => f.write_str("torch.profiler memory timeline (JSON)"),
        }
    }
}

/// A snapshot read successfully, with what was odd about it.
#[derive(Debug)]
pub struct Loaded {
    /// The model.
    pub snapshot: Snapshot,
    /// Tolerated oddities (unknown keys, trailing bytes, ...).
    pub warnings: Vec<Warning>,
    /// What the bytes were.
    pub format: Format,
    /// Peak working memory of the reader, in bytes (approximate).
    pub reader_memory_bytes: u64,
}

/// Reads a whole snapshot from memory.
pub fn read(bytes: &[u8]) -> Result<Loaded, ReadError> {
    let mut l = Loader::new(Limits::default());
    l.set_size_hint(bytes.len() as u64);
    l.feed(bytes)?;
    l.finish()
}

/// An incremental reader: feed it chunks in order, then call [`Loader::finish`].
pub struct Loader {
    state: State,
    consumed: u64,
    limits: Limits,
    nested: bool,
    size_hint: Option<u64>,
}

enum State {
    Detect(Vec<u8>),
    Pickle(Box<PickleState>),
    Gzip(Box<flate2::write::GzDecoder<Sink>>),
    Buffer(Buffered, Vec<u8>),
    Profiler(Box<trace::Reader>),
    Failed,
}

#[derive(Clone, Copy)]
enum Buffered {
    Json,
    Html,
    /// Compressed bytes, decoded in a stream at the end (the decoder is pull-based).
    Zstd,
}

struct PickleState {
    vm: Vm,
    buf: Vec<u8>,
    base: u64,
    trailing: u64,
    trailing_non_nul: u64,
}

struct Sink {
    inner: Loader,
    error: Option<ReadError>,
}

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.error.is_some() {
            return Err(std::io::Error::other("stopped"));
        }
        match self.inner.feed(buf) {
            Ok(()) => Ok(buf.len()),
            Err(e) => {
                self.error = Some(e);
                Err(std::io::Error::other("stopped"))
            }
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Loader {
    /// A loader with these limits.
    pub fn new(limits: Limits) -> Self {
        Loader { state: State::Detect(Vec::new()), consumed: 0, limits, nested: false, size_hint: None }
    }

    /// Tells the reader how many bytes will be fed in all (a file's size), so it can reserve
    /// memory once instead of growing it. Call before the first [`Loader::feed`].
    pub fn set_size_hint(&mut self, total_bytes: u64) {
        self.size_hint = Some(total_bytes);
    }

    /// Bytes fed so far (of the outer file, before decompression).
    pub fn bytes_consumed(&self) -> u64 {
        self.consumed
    }

    /// Feeds the next chunk. After an error the loader refuses further input.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), ReadError> {
        let r = self.feed_inner(chunk);
        if r.is_err() {
            self.state = State::Failed;
        }
        r
    }

    fn feed_inner(&mut self, chunk: &[u8]) -> Result<(), ReadError> {
        self.consumed += chunk.len() as u64;
        match &mut self.state {
            State::Detect(prefix) if prefix.is_empty() => {
                // Decide on the chunk itself when it is long enough, without copying it.
                if let Some(next) = detect(chunk, false, self.nested, self.limits, self.size_hint)? {
                    self.state = next;
                    self.consumed -= chunk.len() as u64;
                    return self.feed_inner(chunk);
                }
                prefix.extend_from_slice(chunk);
                Ok(())
            }
            State::Detect(prefix) => {
                prefix.extend_from_slice(chunk);
                if let Some(next) = detect(prefix, false, self.nested, self.limits, self.size_hint)? {
                    let prefix = std::mem::take(prefix);
                    self.state = next;
                    self.consumed -= prefix.len() as u64;
                    return self.feed_inner(&prefix);
                }
                Ok(())
            }
            State::Pickle(p) => {
                if self.consumed > self.limits.whole_file_cap() {
                    return Err(too_large(self.consumed, self.limits, "decompressed, it is over").at(self.consumed));
                }
                p.feed(chunk)
            }
            State::Gzip(dec) => match dec.write_all(chunk) {
                Ok(()) => Ok(()),
                Err(e) => Err(gzip_error(dec.get_mut(), e, self.consumed)),
            },
            State::Profiler(r) => r.feed(chunk),
            State::Buffer(_, data) => {
                if data.len() as u64 + chunk.len() as u64 > self.limits.max_string_bytes {
                    return Err(ReadError::too_big(format!(
                        "JSON, HTML and zstd snapshots are read whole, and this one is over {} MiB",
                        self.limits.max_string_bytes >> 20
                    )));
                }
                data.extend_from_slice(chunk);
                Ok(())
            }
            State::Failed => Err(ReadError::new(ErrorKind::Malformed, "the reader already failed")),
        }
    }

    /// Ends the input and builds the model.
    pub fn finish(mut self) -> Result<Loaded, ReadError> {
        let state = std::mem::replace(&mut self.state, State::Failed);
        match state {
            State::Detect(prefix) => match detect(&prefix, true, self.nested, self.limits, self.size_hint)? {
                Some(next) => {
                    self.state = next;
                    self.consumed = 0;
                    self.feed_inner(&prefix)?;
                    self.finish()
                }
                None => Err(not_a_snapshot(&prefix)),
            },
            State::Pickle(p) => p.finish(),
            State::Gzip(mut dec) => {
                let consumed = self.consumed;
                if let Err(e) = dec.try_finish() {
                    return Err(gzip_error(dec.get_mut(), e, consumed));
                }
                let sink = match dec.finish() {
                    Ok(s) => s,
                    Err(e) => {
                        return Err(gzip_error(&mut Sink { inner: Loader::new(self.limits), error: None }, e, consumed))
                    }
                };
                if let Some(e) = sink.error {
                    return Err(e.layer("gzip payload"));
                }
                let mut loaded = sink.inner.finish().map_err(|e| e.layer("gzip payload"))?;
                loaded.format = Format::Gzip(Box::new(loaded.format));
                Ok(loaded)
            }
            State::Profiler(r) => {
                let format = match r.kind() {
                    trace::Kind::Trace => Format::ProfilerTrace,
                    trace::Kind::Timeline => Format::MemoryTimeline,
                };
                let (snapshot, warnings) = r.finish()?;
                let mem = snapshot.heap_bytes() as u64;
                Ok(Loaded { snapshot, warnings, format, reader_memory_bytes: mem })
            }
            State::Buffer(Buffered::Json, data) => read_json(&data, self.limits),
            State::Buffer(Buffered::Html, data) => read_html(&data, self.limits),
            State::Buffer(Buffered::Zstd, data) => read_zstd(&data, self.limits),
            State::Failed => Err(ReadError::new(ErrorKind::Malformed, "the reader already failed")),
        }
    }
}

fn gzip_error(sink: &mut Sink, e: std::io::Error, consumed: u64) -> ReadError {
    match sink.error.take() {
        Some(inner) => inner.layer("gzip payload"),
        None => ReadError::new(ErrorKind::Malformed, format!("corrupt gzip data ({e})")).at(consumed),
    }
}

/// Leading whitespace (before a JSON document) accepted before the format is known.
const MAX_LEADING_WHITESPACE: usize = 1 << 20;

/// Bytes of a JSON document looked at to tell a profiler file from a snapshot (its first
/// key): a key longer than this is a snapshot's problem.
const MAX_JSON_PEEK: usize = 64 << 10;

/// Chooses a reader from the first bytes; `None` while more bytes are needed.
fn detect(
    prefix: &[u8],
    at_end: bool,
    nested: bool,
    limits: Limits,
    size_hint: Option<u64>,
) -> Result<Option<State>, ReadError> {
    let body = prefix.strip_prefix(b"\xef\xbb\xbf").unwrap_or(prefix);
    let start = body.iter().position(|b| !b.is_ascii_whitespace());
    let Some(start) = start else {
        if at_end {
            let what = if prefix.is_empty() { "the file is empty" } else { "the file holds only whitespace" };
            return Err(ReadError::new(ErrorKind::NotASnapshot, what));
        }
        // The prefix is searched again as each chunk arrives: keep it short.
        if body.len() > MAX_LEADING_WHITESPACE {
            let what = "the file starts with more than 1 MiB of whitespace and nothing else";
            return Err(ReadError::new(ErrorKind::NotASnapshot, what).at(body.len() as u64));
        }
        return Ok(None);
    };
    let b = &body[start..];
    let first = b[0];
    if start == 0 && prefix.len() == body.len() {
        if first == 0x28 && b.len() < 4 && !at_end {
            return Ok(None);
        }
        if b.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            if nested {
                return Err(ReadError::new(ErrorKind::Unsupported, "zstd inside another container").at(0));
            }
            return Ok(Some(State::Buffer(Buffered::Zstd, Vec::new())));
        }
        if first == 0x1f {
            if b.len() < 2 && !at_end {
                return Ok(None);
            }
            if b.get(1) == Some(&0x8b) {
                if nested {
                    return Err(ReadError::new(ErrorKind::Unsupported, "gzip inside gzip").at(0));
                }
                let mut inner = Loader::new(limits);
                inner.nested = true;
                let dec = flate2::write::GzDecoder::new(Sink { inner, error: None });
                return Ok(Some(State::Gzip(Box::new(dec))));
            }
        }
        // Protocol 2+ starts with PROTO; protocols 0 and 1 with a container opcode, or with
        // GLOBAL when the pickle wants to run code (the VM then refuses it with a clear error).
        if first == 0x80 || (matches!(first, b'}' | b']' | b'(' | b')') && !looks_like_text(b)) || is_global(b) {
            if let Some(size) = size_hint.filter(|&s| s > limits.whole_file_cap()) {
                return Err(too_large(size, limits, "it is"));
            }
            return Ok(Some(State::Pickle(Box::new(PickleState::new(limits, size_hint)))));
        }
    }
    match first {
        b'{' | b'[' => match trace::classify(b, at_end) {
            Ok(Some(kind)) => Ok(Some(State::Profiler(Box::new(trace::Reader::new(kind))))),
            Err(()) if b.len() < MAX_JSON_PEEK => Ok(None),
            _ => Ok(Some(State::Buffer(Buffered::Json, Vec::new()))),
        },
        b'<' => Ok(Some(State::Buffer(Buffered::Html, Vec::new()))),
        _ => Err(not_a_snapshot(prefix)),
    }
}

/// The refusal of a pickle larger than [`Limits::max_pickle_bytes`].
fn too_large(size: u64, limits: Limits, what: &str) -> ReadError {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    ReadError::too_big(format!(
            "the snapshot is too large to open here: {what} {:.2} GiB, and this reader takes pickles up to {:.2} GiB (its model would not fit in memory)",
            gib(size),
            gib(limits.max_pickle_bytes)
        ),
    )
}

/// `c<module>\n<name>\n`: the GLOBAL opcode of protocols 0 and 1.
fn is_global(b: &[u8]) -> bool {
    let Some(rest) = b.strip_prefix(b"c") else { return false };
    let line = rest.iter().take(256).position(|&c| c == b'\n');
    line.is_some_and(|n| n > 0 && rest[..n].iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'.'))
}

fn looks_like_text(b: &[u8]) -> bool {
    b.len() > 1 && b[1] == b'\n'
}

fn not_a_snapshot(prefix: &[u8]) -> ReadError {
    let head: Vec<u8> = prefix.iter().copied().take(8).collect();
    let hint = if head.starts_with(b"\x89PNG") {
        " (it is a PNG image)"
    } else if head.starts_with(b"PK\x03\x04") {
        " (it is a zip archive, e.g. a torch.save checkpoint, not a memory snapshot)"
    } else if head.starts_with(b"%PDF") {
        " (it is a PDF document)"
    } else {
        ""
    };
    let hex: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
    ReadError::new(
        ErrorKind::NotASnapshot,
        format!(
            "not a memory snapshot{hint}: expected a pickle, gzip, JSON or a _memory_viz.py HTML page, but it starts with bytes {}",
            hex.join(" ")
        ),
    )
    .at(0)
}

impl PickleState {
    fn new(limits: Limits, size_hint: Option<u64>) -> Self {
        let mut vm = Vm::new(limits);
        vm.size_hint = size_hint;
        PickleState { vm, buf: Vec::new(), base: 0, trailing: 0, trailing_non_nul: 0 }
    }

    fn feed(&mut self, mut chunk: &[u8]) -> Result<(), ReadError> {
        if self.vm.finished() {
            self.note_trailing(chunk);
            return Ok(());
        }
        // An opcode was cut by the previous chunk: complete it from the start of this one,
        // copying only as much as it needs, then go on reading the chunk in place.
        while !self.buf.is_empty() && !chunk.is_empty() {
            let old = self.buf.len();
            let take = chunk.len().min(old.max(1 << 16));
            self.buf.extend_from_slice(&chunk[..take]);
            let n = self.vm.run(&self.buf, self.base)?;
            self.base += n as u64;
            if self.vm.finished() {
                let tail = self.buf.split_off(n);
                self.buf.clear();
                self.note_trailing(&tail);
                self.note_trailing(&chunk[take..]);
                return Ok(());
            }
            if n >= old {
                self.buf.clear();
                chunk = &chunk[n - old..];
            } else {
                // Still incomplete (n is 0): the new bytes stay buffered.
                self.buf.drain(..n);
                chunk = &chunk[take..];
            }
        }
        if chunk.is_empty() {
            return Ok(());
        }
        let n = self.vm.run(chunk, self.base)?;
        self.base += n as u64;
        if self.vm.finished() {
            self.note_trailing(&chunk[n..]);
        } else {
            self.buf.extend_from_slice(&chunk[n..]);
        }
        Ok(())
    }

    fn note_trailing(&mut self, b: &[u8]) {
        self.trailing += b.len() as u64;
        self.trailing_non_nul += b.iter().filter(|&&c| c != 0).count() as u64;
    }

    fn finish(self) -> Result<Loaded, ReadError> {
        if !self.vm.finished() {
            let end = self.base + self.buf.len() as u64;
            let msg = if self.buf.is_empty() {
                format!("the pickle ends after {end} bytes, before its STOP opcode (truncated file?)")
            } else {
                format!(
                    "the pickle ends after {end} bytes, in the middle of an opcode that starts at byte {} (truncated file?)",
                    self.base
                )
            };
            return Err(ReadError::new(ErrorKind::Truncated, msg).at(end));
        }
        let proto = self.vm.proto();
        let mem = self.vm.memory_bytes();
        let (snapshot, mut warnings) = build::build(self.vm)?;
        if self.trailing_non_nul > 0 {
            warnings.push(Warning {
                message: format!("{} bytes after the pickle's STOP opcode were ignored", self.trailing),
                count: 1,
            });
        }
        Ok(Loaded { snapshot, warnings, format: Format::Pickle(proto), reader_memory_bytes: mem })
    }
}

fn read_zstd(data: &[u8], limits: Limits) -> Result<Loaded, ReadError> {
    use std::io::Read as _;
    let layer = "zstd payload";
    let mut inner = Loader::new(limits);
    inner.nested = true;
    let mut rest = data;
    let mut buf = vec![0u8; 1 << 20];
    // A .zst file may hold several frames back to back: decode them in turn.
    while !rest.is_empty() {
        let at = (data.len() - rest.len()) as u64;
        let mut dec = ruzstd::decoding::StreamingDecoder::new(&mut rest)
            .map_err(|e| ReadError::new(ErrorKind::Malformed, format!("corrupt zstd data ({e})")).at(at))?;
        loop {
            let n = dec
                .read(&mut buf)
                .map_err(|e| ReadError::new(ErrorKind::Malformed, format!("corrupt zstd data ({e})")).at(at))?;
            if n == 0 {
                break;
            }
            inner.feed(&buf[..n]).map_err(|e| e.layer(layer))?;
        }
    }
    let mut loaded = inner.finish().map_err(|e| e.layer(layer))?;
    loaded.format = Format::Zstd(Box::new(loaded.format));
    Ok(loaded)
}

fn read_json(data: &[u8], limits: Limits) -> Result<Loaded, ReadError> {
    let doc: serde_json::Value = serde_json::from_slice(data).map_err(|e| {
        let mut err = ReadError::new(ErrorKind::Malformed, format!("invalid JSON: {e}"));
        if let Some(off) = line_col_offset(data, e.line(), e.column()) {
            err = err.at(off);
        }
        err
    })?;
    let mut vm = Vm::new(limits);
    vm.offset_known = false;
    let root = json_to_vm(&mut vm, &doc)?;
    drop(doc);
    vm.root = Some(root);
    let mem = vm.memory_bytes();
    let (snapshot, warnings) = build::build(vm)?;
    Ok(Loaded { snapshot, warnings, format: Format::Json, reader_memory_bytes: mem })
}

fn line_col_offset(data: &[u8], line: usize, col: usize) -> Option<u64> {
    if line == 0 {
        return None;
    }
    let mut start = 0usize;
    for _ in 1..line {
        start += data[start..].iter().position(|&b| b == b'\n')? + 1;
    }
    Some((start + col.saturating_sub(1)) as u64)
}

fn json_to_vm(vm: &mut Vm, v: &serde_json::Value) -> Result<PVal, ReadError> {
    use serde_json::Value as J;
    Ok(match v {
        J::Null => PVal::None,
        J::Bool(b) => PVal::Bool(*b),
        J::Number(n) => {
            if let Some(i) = n.as_i64() {
                PVal::Int(i)
            } else if let Some(u) = n.as_u64() {
                let id = vm.bigs.len() as u32;
                vm.bigs.push(i128::from(u));
                PVal::Big(id)
            } else {
                PVal::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        J::String(s) => PVal::Str(vm.strings.intern(s)),
        J::Array(items) => {
            let list = vm.new_obj(Kind::List, 0)?;
            for it in items {
                let x = json_to_vm(vm, it)?;
                vm.append(list, x, 0)?;
            }
            list
        }
        J::Object(map) => {
            let d = vm.new_obj(Kind::Dict, 0)?;
            let mut kv = Vec::with_capacity(map.len() * 2);
            for (k, x) in map {
                kv.push(PVal::Str(vm.strings.intern(k)));
                kv.push(json_to_vm(vm, x)?);
            }
            if let PVal::Obj(id, _) = d {
                vm.objs[id as usize].items = kv;
            }
            d
        }
    })
}

fn read_html(data: &[u8], limits: Limits) -> Result<Loaded, ReadError> {
    const MARKER: &[u8] = b"const local_files";
    let html_err = |m: String| ReadError::new(ErrorKind::NotASnapshot, m);
    let Some(at) = find(data, MARKER) else {
        return Err(html_err(
            "an HTML page without an embedded snapshot (no `const local_files = [...]` as written by _memory_viz.py)"
                .into(),
        ));
    };
    let after = &data[at + MARKER.len()..];
    let eq = after.iter().position(|&b| b == b'=').filter(|&i| after[..i].iter().all(u8::is_ascii_whitespace));
    let Some(eq) = eq else {
        return Err(html_err("`const local_files` is not followed by `=`".into()).at(at as u64));
    };
    let json_start = at + MARKER.len() + eq + 1;
    let mut stream = serde_json::Deserializer::from_slice(&data[json_start..]).into_iter::<serde_json::Value>();
    let files = match stream.next() {
        Some(Ok(v)) => v,
        Some(Err(e)) => {
            return Err(ReadError::new(ErrorKind::Malformed, format!("the `local_files` JSON is invalid: {e}"))
                .at(json_start as u64))
        }
        None => return Err(html_err("`local_files` is empty".into()).at(json_start as u64)),
    };
    let entries = files.as_array().cloned().unwrap_or_default();
    let Some(first) = entries.first() else {
        return Err(html_err("`local_files` holds no snapshot".into()).at(json_start as u64));
    };
    let Some(b64) = first.get("base64").and_then(|b| b.as_str()) else {
        return Err(
            ReadError::new(ErrorKind::Malformed, "`local_files[0]` has no `base64` string").at(json_start as u64)
        );
    };
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    );
    let cleaned: Vec<u8> = b64.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let payload = engine.decode(&cleaned).map_err(|e| {
        ReadError::new(ErrorKind::Malformed, format!("`local_files[0].base64` is not valid base64: {e}"))
            .at(json_start as u64)
    })?;
    let mut inner = Loader::new(limits);
    inner.nested = true;
    let layer = "HTML page's local_files[0]";
    inner.feed(&payload).map_err(|e| e.layer(layer))?;
    let mut loaded = inner.finish().map_err(|e| e.layer(layer))?;
    if entries.len() > 1 {
        loaded.warnings.push(Warning {
            message: format!("the page embeds {} snapshots; the first was opened", entries.len()),
            count: 1,
        });
    }
    loaded.format = Format::Html(Box::new(loaded.format));
    Ok(loaded)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
