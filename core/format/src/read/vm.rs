//! A pickle virtual machine that only builds data.
//!
//! Containers live in an arena and the memo holds handles to them, so an object the
//! pickle shares (a frame dict, a stack list) exists once. Dicts that look like trace
//! entries are packed into the columns of the list they are appended to as soon as
//! they are complete, so memory follows the model, not a value tree of the pickle.
//! Opcodes that import or call code are refused.

use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashMap};
use std::hash::BuildHasher as _;

use super::memo::Memo;
use super::seen::SeenLists;
use crate::error::{ErrorKind, ReadError};
use crate::intern::{StrId, Strings};
use crate::model::{Action, Entry, Frame, FrameId, PoolId, StackId, Stacks, Trace};
use crate::value::Value;

/// Keys and action names interned first, so a key test is an integer comparison.
pub(crate) const KEYS: [&str; 14] = [
    "action",
    "addr",
    "size",
    "stream",
    "time_us",
    "frames",
    "compile_context",
    "user_metadata",
    "category",
    "pool_id",
    "device_free",
    "name",
    "filename",
    "line",
];
const K_ACTION: u32 = 0;
const K_ADDR: u32 = 1;
const K_SIZE: u32 = 2;
const K_STREAM: u32 = 3;
const K_TIME_US: u32 = 4;
const K_FRAMES: u32 = 5;
const K_COMPILE_CONTEXT: u32 = 6;
const K_USER_METADATA: u32 = 7;
const K_CATEGORY: u32 = 8;
const K_POOL_ID: u32 = 9;
const K_DEVICE_FREE: u32 = 10;
const K_NAME: u32 = 11;
const K_FILENAME: u32 = 12;
const K_LINE: u32 = 13;
const FIRST_ACTION: u32 = KEYS.len() as u32;

/// Trace-entry keys that are known but rare; they are kept as extras without a warning.
pub(crate) const KNOWN_ENTRY_EXTRAS: [&str; 3] = ["forward_frames", "internal_metadata", "segment_pool_id"];

/// Deepest nesting accepted when a free-form value is converted.
pub(crate) const MAX_DEPTH: u32 = 64;

/// A value on the VM stack or in the memo. Containers are arena handles.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PVal {
    None,
    Bool(bool),
    Int(i64),
    Big(u32),
    Float(f64),
    Str(StrId),
    Bytes(u32),
    Obj(u32, u32),
    /// Row `i` of the rows of the list that holds this value.
    Row(u32),
    /// A frames list already interned.
    Stack(StackId),
    /// A frame dict already interned.
    Frame(FrameId),
    /// A trace entry read by the fast path, waiting for the APPENDS that adds it to its list.
    Pending(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    List,
    Dict,
    Tuple,
    Free,
    /// A list interned as a stack; its items were released.
    Stack(StackId),
    /// A dict interned as a frame; its items were released.
    Frame(FrameId),
}

pub(crate) struct Obj {
    pub kind: Kind,
    gen: u32,
    pub offset: u64,
    /// The memo slot that last stored this object (`u32::MAX`: none).
    memo: u32,
    /// Items; for a dict, keys and values alternate.
    pub items: Vec<PVal>,
    /// Trace entries appended to this list, packed by column.
    pub rows: Option<Box<Trace>>,
}

/// Most values the pickle stack may hold at once. Picklers push containers' items in
/// batches of 1000, so only hostile input comes near; without a bound, a stream of pushes
/// after one MARK would grow the stack until memory runs out.
const MAX_STACK: usize = 1 << 24;

/// Most items one list, tuple or dict may hold (a dict counts keys and values). Snapshots'
/// long lists are trace entries, which are stored by column and not counted here; a single
/// container past this would, in wasm32, outgrow the largest allocation there is (2 GiB).
const MAX_ITEMS: usize = 1 << 25;

/// Resource limits of one read.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The reader refuses a snapshot whose working memory would exceed this.
    pub max_memory_bytes: u64,
    /// Longest single string or bytes value.
    pub max_string_bytes: u64,
    /// Largest pickle stream (after decompression) the reader takes whole. A file known to be
    /// larger is refused before it is read; a compressed one when its output passes this. A
    /// windowed read ([`Limits::keep_last_entries`]) takes any size.
    pub max_pickle_bytes: u64,
    /// A windowed read: each trace keeps only its last this many entries ([`Trace::dropped`]
    /// counts the others), and the memo forgets what only those entries used, so memory
    /// follows the window, not the file. `None`: the whole trace.
    pub keep_last_entries: Option<u64>,
    /// A windowed read of entries `start..end` of each trace (file indices; `end` past the
    /// trace: to its end). What follows the window is reduced as it goes to what the
    /// allocator state at the window's end needs (`slice::settle_tail`).
    pub keep_entries: Option<(u64, u64)>,
}

impl Limits {
    /// Whether this is a windowed read (of the last entries, or of a range).
    pub fn windowed(&self) -> bool {
        self.keep_last_entries.is_some() || self.keep_entries.is_some()
    }

    /// The largest pickle this read takes: [`Limits::max_pickle_bytes`], or any size for a
    /// windowed read, whose memory follows its window.
    pub fn whole_file_cap(&self) -> u64 {
        if self.windowed() {
            u64::MAX
        } else {
            self.max_pickle_bytes
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        let wasm = cfg!(target_pointer_width = "32");
        Limits {
            max_memory_bytes: if wasm { 3 << 30 } else { 64 << 30 },
            max_string_bytes: if wasm { 256 << 20 } else { 2 << 30 },
            // Measured in Chromium on generated snapshots (the densest: ~94 bytes an event):
            // 2.87 GiB opens with 3.3 GiB of wasm memory; at 2.98 GiB an array of the layout
            // outgrows wasm32's largest allocation (2 GiB). See docs/benchmarks.md.
            max_pickle_bytes: if wasm { 23 << 27 } else { u64::MAX },
            keep_last_entries: None,
            keep_entries: None,
        }
    }
}

pub(crate) struct Vm {
    stack: Vec<PVal>,
    marks: Vec<usize>,
    memo: Memo,
    memo_sparse: FxHashMap<u64, PVal>,
    pub objs: Vec<Obj>,
    free_objs: Vec<u32>,
    spare: Vec<Vec<PVal>>,
    scratch: Vec<PVal>,
    pub strings: Strings,
    pub bigs: Vec<i128>,
    pub bytes: Vec<Box<[u8]>>,
    pub frames: Vec<Frame>,
    pub stacks: Stacks,
    frame_dedup: FxHashMap<(StrId, StrId, i64), FrameId>,
    stack_dedup: HashTable<u32>,
    stack_buf: Vec<FrameId>,
    /// Frames lists read by the fast path, by their bytes.
    seen_lists: SeenLists,
    pub root: Option<PVal>,
    /// Offset of the STOP opcode.
    pub stop_offset: u64,
    proto: Option<u8>,
    mem: u64,
    pub limits: Limits,
    /// Set while converting JSON, where offsets are unknown.
    pub offset_known: bool,
    /// Total input bytes, when the caller knows them: used to reserve trace columns once.
    pub size_hint: Option<u64>,
    /// Rows already reserved for trace lists: all of them together get at most what the
    /// size hint allows, however many lists (devices) there are.
    rows_reserved: u64,
    /// Trace entries read by the fast path and not yet appended, and how many are live.
    pending: Vec<Entry>,
    pending_live: usize,
    /// A windowed read: the memo slots of the new frames lists of each live allocation's
    /// events (its alloc, its free_requested), by address.
    frames_slots: FxHashMap<u64, [u64; 2]>,
    fresh: Vec<u32>,
}

#[cold]
#[inline(never)]
pub(crate) fn err(kind: ErrorKind, msg: impl Into<String>) -> ReadError {
    ReadError::new(kind, msg)
}

mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const FLOAT: u8 = b'F';
    pub const INT: u8 = b'I';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const LONG: u8 = b'L';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const PERSID: u8 = b'P';
    pub const BINPERSID: u8 = b'Q';
    pub const REDUCE: u8 = b'R';
    pub const STRING: u8 = b'S';
    pub const BINSTRING: u8 = b'T';
    pub const SHORT_BINSTRING: u8 = b'U';
    pub const UNICODE: u8 = b'V';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const BUILD: u8 = b'b';
    pub const GLOBAL: u8 = b'c';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const GET: u8 = b'g';
    pub const BINGET: u8 = b'h';
    pub const INST: u8 = b'i';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const OBJ: u8 = b'o';
    pub const PUT: u8 = b'p';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINFLOAT: u8 = b'G';
    pub const PROTO: u8 = 0x80;
    pub const NEWOBJ: u8 = 0x81;
    pub const EXT1: u8 = 0x82;
    pub const EXT2: u8 = 0x83;
    pub const EXT4: u8 = 0x84;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINBYTES8: u8 = 0x8e;
    pub const EMPTY_SET: u8 = 0x8f;
    pub const ADDITEMS: u8 = 0x90;
    pub const FROZENSET: u8 = 0x91;
    pub const NEWOBJ_EX: u8 = 0x92;
    pub const STACK_GLOBAL: u8 = 0x93;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
    pub const BYTEARRAY8: u8 = 0x96;
    pub const NEXT_BUFFER: u8 = 0x97;
    pub const READONLY_BUFFER: u8 = 0x98;
}

fn code_opcode_name(o: u8) -> Option<&'static str> {
    Some(match o {
        op::GLOBAL => "GLOBAL",
        op::STACK_GLOBAL => "STACK_GLOBAL",
        op::REDUCE => "REDUCE",
        op::BUILD => "BUILD",
        op::INST => "INST",
        op::OBJ => "OBJ",
        op::NEWOBJ => "NEWOBJ",
        op::NEWOBJ_EX => "NEWOBJ_EX",
        op::PERSID => "PERSID",
        op::BINPERSID => "BINPERSID",
        op::EXT1 => "EXT1",
        op::EXT2 => "EXT2",
        op::EXT4 => "EXT4",
        op::NEXT_BUFFER => "NEXT_BUFFER",
        op::READONLY_BUFFER => "READONLY_BUFFER",
        _ => return None,
    })
}

fn le_uint(b: &[u8]) -> u64 {
    b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

/// Decodes a little-endian two's complement integer of at most 16 bytes.
fn le_signed(b: &[u8]) -> Option<i128> {
    if b.is_empty() {
        return Some(0);
    }
    if b.len() > 16 {
        return None;
    }
    let mut buf = if b[b.len() - 1] & 0x80 != 0 { [0xffu8; 16] } else { [0u8; 16] };
    buf[..b.len()].copy_from_slice(b);
    Some(i128::from_le_bytes(buf))
}

enum Step {
    /// Consumed this many bytes.
    Done(usize),
    /// The opcode at the current position is incomplete.
    More,
}

impl Vm {
    pub fn new(limits: Limits) -> Self {
        let mut strings = Strings::default();
        for k in KEYS {
            strings.intern(k);
        }
        for (name, _) in Action::KNOWN {
            strings.intern(name);
        }
        Vm {
            stack: Vec::new(),
            marks: Vec::new(),
            memo: if limits.windowed() { Memo::forgetting_entries() } else { Memo::default() },
            memo_sparse: FxHashMap::default(),
            objs: Vec::new(),
            free_objs: Vec::new(),
            spare: Vec::new(),
            scratch: Vec::new(),
            strings,
            bigs: Vec::new(),
            bytes: Vec::new(),
            frames: Vec::new(),
            stacks: Stacks::default(),
            frame_dedup: FxHashMap::default(),
            stack_dedup: HashTable::new(),
            stack_buf: Vec::new(),
            seen_lists: SeenLists::default(),
            root: None,
            stop_offset: 0,
            proto: None,
            mem: 0,
            limits,
            offset_known: true,
            size_hint: None,
            rows_reserved: 0,
            pending: Vec::new(),
            pending_live: 0,
            frames_slots: FxHashMap::default(),
            fresh: Vec::new(),
        }
    }

    pub fn memory_bytes(&self) -> u64 {
        self.mem
    }

    #[cold]
    fn over_limits(&self, offset: u64) -> ReadError {
        if self.stack.len() >= MAX_STACK {
            let what =
                format!("more than {MAX_STACK} values on the pickle stack at once (Python's pickler batches by 1000)");
            return err(ErrorKind::TooLarge, what).at(offset);
        }
        self.memory_error(offset)
    }

    #[cold]
    fn memory_error(&self, offset: u64) -> ReadError {
        let what = format!(
            "the snapshot needs more than {} MiB of memory to read (limit {} MiB)",
            self.mem >> 20,
            self.limits.max_memory_bytes >> 20
        );
        ReadError::too_big(what).at(offset)
    }

    /// Refuses to grow container `id` past [`MAX_ITEMS`].
    fn room(&self, id: u32, more: usize, offset: u64) -> Result<(), ReadError> {
        if self.objs[id as usize].items.len() + more > MAX_ITEMS {
            let what = format!("a list, tuple or dict with more than {MAX_ITEMS} items");
            return Err(err(ErrorKind::TooLarge, what).at(offset));
        }
        Ok(())
    }

    fn charge(&mut self, bytes: u64, offset: u64) -> Result<(), ReadError> {
        self.mem += bytes;
        if self.mem > self.limits.max_memory_bytes {
            return Err(self.memory_error(offset));
        }
        Ok(())
    }

    pub fn new_obj(&mut self, kind: Kind, offset: u64) -> Result<PVal, ReadError> {
        self.charge(64, offset)?;
        let items = self.spare.pop().unwrap_or_default();
        if let Some(id) = self.free_objs.pop() {
            let o = &mut self.objs[id as usize];
            o.kind = kind;
            o.gen = o.gen.wrapping_add(1);
            o.offset = offset;
            o.memo = u32::MAX;
            o.items = items;
            o.rows = None;
            Ok(PVal::Obj(id, o.gen))
        } else {
            let id =
                u32::try_from(self.objs.len()).map_err(|_| err(ErrorKind::TooLarge, "too many objects").at(offset))?;
            self.objs.push(Obj { kind, gen: 0, offset, memo: u32::MAX, items, rows: None });
            Ok(PVal::Obj(id, 0))
        }
    }

    fn recycle(&mut self, id: u32) {
        let o = &mut self.objs[id as usize];
        o.kind = Kind::Free;
        o.rows = None;
        self.release_items(id);
        self.free_objs.push(id);
    }

    fn release_items(&mut self, id: u32) {
        let mut items = std::mem::take(&mut self.objs[id as usize].items);
        items.clear();
        if self.spare.len() < 4096 && items.capacity() <= 64 {
            self.spare.push(items);
        }
    }

    /// Collapses an interned frames list or frame dict to its id, releasing its items, and
    /// points its memo slot at the id so later references skip the arena.
    fn collapse(&mut self, id: u32, kind: Kind, interned: PVal) {
        self.release_items(id);
        let o = &mut self.objs[id as usize];
        o.kind = kind;
        let (slot, gen) = (o.memo as usize, o.gen);
        if matches!(self.memo.get(slot), Some(PVal::Obj(i, g)) if i == id && g == gen) {
            self.memo.set(slot, interned);
        }
    }

    /// The object behind a handle, or an error for a stale or foreign handle.
    pub fn obj(&self, v: PVal) -> Option<(u32, &Obj)> {
        match v {
            PVal::Obj(id, gen) => {
                let o = self.objs.get(id as usize)?;
                (o.gen == gen && o.kind != Kind::Free).then_some((id, o))
            }
            _ => None,
        }
    }

    pub fn describe(&self, v: PVal) -> &'static str {
        match v {
            PVal::None => "None",
            PVal::Bool(_) => "bool",
            PVal::Int(_) | PVal::Big(_) => "int",
            PVal::Float(_) => "float",
            PVal::Str(_) => "str",
            PVal::Bytes(_) => "bytes",
            PVal::Row(_) => "trace entry",
            PVal::Stack(_) => "list",
            PVal::Frame(_) => "dict",
            PVal::Pending(_) => "trace entry",
            PVal::Obj(..) => match self.obj(v) {
                Some((_, o)) => match o.kind {
                    Kind::List | Kind::Stack(_) => "list",
                    Kind::Dict | Kind::Frame(_) => "dict",
                    Kind::Tuple => "tuple",
                    Kind::Free => "consumed object",
                },
                None => "an object the reader already consumed (referenced again)",
            },
        }
    }

    /// Runs opcodes from `data` (which starts at absolute offset `base`) until STOP or
    /// until the next opcode is incomplete. Returns the bytes consumed.
    pub fn run(&mut self, data: &[u8], base: u64) -> Result<usize, ReadError> {
        let mut pos = 0;
        let n = data.len();
        while pos < n && self.root.is_none() {
            if self.stack.len() >= MAX_STACK || self.mem > self.limits.max_memory_bytes {
                return Err(self.over_limits(base + pos as u64));
            }
            // The opcodes that make up almost all of a snapshot, handled without a call.
            let o = data[pos];
            match o {
                op::BINGET if pos + 1 < n => {
                    if let Some(v) = self.memo.get(data[pos + 1] as usize) {
                        self.stack.push(v);
                        pos += 2;
                        continue;
                    }
                }
                op::LONG_BINGET if pos + 4 < n => {
                    let idx = u32::from_le_bytes([data[pos + 1], data[pos + 2], data[pos + 3], data[pos + 4]]);
                    if let Some(v) = self.memo.get(idx as usize) {
                        self.stack.push(v);
                        pos += 5;
                        continue;
                    }
                }
                op::MARK => {
                    self.marks.push(self.stack.len());
                    pos += 1;
                    continue;
                }
                op::EMPTY_DICT => {
                    if let Some(used) = self.fast_entry(&data[pos..]) {
                        pos += used;
                        continue;
                    }
                }
                op::BININT1 if pos + 1 < n => {
                    self.stack.push(PVal::Int(i64::from(data[pos + 1])));
                    pos += 2;
                    continue;
                }
                op::BININT2 if pos + 2 < n => {
                    self.stack.push(PVal::Int(i64::from(u16::from_le_bytes([data[pos + 1], data[pos + 2]]))));
                    pos += 3;
                    continue;
                }
                op::LONG1 => {
                    if let Some((v, used)) = fast_int(data, pos) {
                        self.stack.push(PVal::Int(v));
                        pos += used;
                        continue;
                    }
                }
                _ => {}
            }
            match self.step(&data[pos..], base + pos as u64)? {
                Step::Done(n) => pos += n,
                Step::More => break,
            }
        }
        Ok(pos)
    }

    pub fn finished(&self) -> bool {
        self.root.is_some()
    }

    pub fn proto(&self) -> Option<u8> {
        self.proto
    }

    fn pop(&mut self, offset: u64) -> Result<PVal, ReadError> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err(err(ErrorKind::Malformed, "stack underflow: a MARK is in the way").at(offset));
        }
        self.stack.pop().ok_or_else(|| err(ErrorKind::Malformed, "stack underflow").at(offset))
    }

    fn top(&self, offset: u64) -> Result<PVal, ReadError> {
        self.stack.last().copied().ok_or_else(|| err(ErrorKind::Malformed, "stack underflow").at(offset))
    }

    fn pop_mark(&mut self, offset: u64) -> Result<usize, ReadError> {
        self.marks.pop().ok_or_else(|| err(ErrorKind::Malformed, "no MARK on the stack").at(offset))
    }

    fn push(&mut self, v: PVal) {
        self.stack.push(v);
    }

    fn push_str(&mut self, b: &[u8], offset: u64) -> Result<(), ReadError> {
        let s = std::str::from_utf8(b)
            .map_err(|e| err(ErrorKind::Malformed, format!("invalid UTF-8 in a string ({e})")).at(offset))?;
        let before = self.strings.len();
        let id = self.strings.intern(s);
        if self.strings.len() != before {
            self.charge(s.len() as u64 + 16, offset)?;
        }
        self.push(PVal::Str(id));
        Ok(())
    }

    fn push_bytes(&mut self, b: &[u8], offset: u64) -> Result<(), ReadError> {
        self.charge(b.len() as u64 + 16, offset)?;
        let id = self.bytes.len() as u32;
        self.bytes.push(b.into());
        self.push(PVal::Bytes(id));
        Ok(())
    }

    fn push_int(&mut self, v: i128) {
        match i64::try_from(v) {
            Ok(i) => self.push(PVal::Int(i)),
            Err(_) => {
                let id = self.bigs.len() as u32;
                self.bigs.push(v);
                self.push(PVal::Big(id));
            }
        }
    }

    fn memo_put(&mut self, idx: u64, offset: u64) -> Result<(), ReadError> {
        let v = self.top(offset)?;
        let len = self.memo.len() as u64;
        if let PVal::Obj(id, _) = v {
            if let Ok(m) = u32::try_from(idx) {
                self.objs[id as usize].memo = m;
            }
        }
        if idx == len {
            self.mem = self.mem.saturating_sub(self.memo.push(v));
            self.charge(16, offset)?;
        } else if idx < len {
            // A slot rewritten: a list body seen before may now refer to other frames.
            self.mem = self.mem.saturating_sub(self.seen_lists.stop());
            self.memo.set(idx as usize, v);
        } else {
            self.charge(32, offset)?;
            self.memo_sparse.insert(idx, v);
        }
        Ok(())
    }

    fn memo_get(&mut self, idx: u64, offset: u64) -> Result<(), ReadError> {
        let v = match self.memo.get(idx as usize) {
            _ if self.memo.forgot(idx as usize) => {
                return Err(err(
                    ErrorKind::Malformed,
                    format!(
                        "memo entry {idx} (a trace entry's, or a freed allocation's frames, which a windowed read does not keep) is referred to again; \
                         open the file whole, or cut a window with `memscape slice`"
                    ),
                )
                .at(offset))
            }
            Some(v) => v,
            None => *self
                .memo_sparse
                .get(&idx)
                .ok_or_else(|| err(ErrorKind::Malformed, format!("memo entry {idx} is not defined")).at(offset))?,
        };
        self.push(v);
        Ok(())
    }

    /// Checks a declared length against the limit; the bytes themselves are only read once
    /// they have all arrived, so no allocation follows an untrusted length.
    fn check_len(&self, len: u64, offset: u64) -> Result<usize, ReadError> {
        if len > self.limits.max_string_bytes {
            return Err(err(
                ErrorKind::TooLarge,
                format!("a value claims {len} bytes (limit {} bytes)", self.limits.max_string_bytes),
            )
            .at(offset));
        }
        Ok(len as usize)
    }

    fn step(&mut self, d: &[u8], off: u64) -> Result<Step, ReadError> {
        let o = d[0];
        let avail = d.len() - 1;
        macro_rules! need {
            ($n:expr) => {
                if avail < $n {
                    return Ok(Step::More);
                }
            };
        }
        // Reads a length-prefixed payload: `$w` length bytes, then the payload.
        macro_rules! payload {
            ($w:expr) => {{
                need!($w);
                let len = self.check_len(le_uint(&d[1..1 + $w]), off)?;
                need!($w + len);
                (&d[1 + $w..1 + $w + len], 1 + $w + len)
            }};
        }
        let used = match o {
            op::PROTO => {
                need!(1);
                let p = d[1];
                if !(2..=5).contains(&p) {
                    return Err(err(ErrorKind::Unsupported, format!("pickle protocol {p} (2 to 5 are read)")).at(off));
                }
                self.proto = Some(p);
                2
            }
            op::FRAME => {
                need!(8);
                9
            }
            op::STOP => {
                let v = self.pop(off)?;
                self.root = Some(v);
                self.stop_offset = off;
                1
            }
            op::MARK => {
                self.marks.push(self.stack.len());
                1
            }
            op::POP => {
                if self.marks.last().is_some_and(|&m| m == self.stack.len()) {
                    self.marks.pop();
                } else {
                    self.pop(off)?;
                }
                1
            }
            op::POP_MARK => {
                let m = self.pop_mark(off)?;
                self.stack.truncate(m);
                1
            }
            op::DUP => {
                let v = self.top(off)?;
                self.push(v);
                1
            }
            op::NONE => {
                self.push(PVal::None);
                1
            }
            op::NEWTRUE => {
                self.push(PVal::Bool(true));
                1
            }
            op::NEWFALSE => {
                self.push(PVal::Bool(false));
                1
            }
            op::BININT1 => {
                need!(1);
                self.push(PVal::Int(i64::from(d[1])));
                2
            }
            op::BININT2 => {
                need!(2);
                self.push(PVal::Int(i64::from(u16::from_le_bytes([d[1], d[2]]))));
                3
            }
            op::BININT => {
                need!(4);
                self.push(PVal::Int(i64::from(i32::from_le_bytes([d[1], d[2], d[3], d[4]]))));
                5
            }
            op::LONG1 => {
                need!(1);
                let n = d[1] as usize;
                need!(1 + n);
                let v = le_signed(&d[2..2 + n])
                    .ok_or_else(|| err(ErrorKind::Unsupported, "integer wider than 128 bits").at(off))?;
                self.push_int(v);
                2 + n
            }
            op::LONG4 => {
                need!(4);
                let n = i32::from_le_bytes([d[1], d[2], d[3], d[4]]);
                if !(0..=16).contains(&n) {
                    return Err(
                        err(ErrorKind::Unsupported, format!("LONG4 of {n} bytes (at most 16 are read)")).at(off)
                    );
                }
                let n = n as usize;
                need!(4 + n);
                let v = le_signed(&d[5..5 + n]).unwrap_or(0);
                self.push_int(v);
                5 + n
            }
            op::BINFLOAT => {
                need!(8);
                let mut b = [0u8; 8];
                b.copy_from_slice(&d[1..9]);
                self.push(PVal::Float(f64::from_be_bytes(b)));
                9
            }
            op::SHORT_BINUNICODE => {
                let (s, n) = payload!(1);
                self.push_str(s, off)?;
                n
            }
            op::BINUNICODE => {
                let (s, n) = payload!(4);
                self.push_str(s, off)?;
                n
            }
            op::BINUNICODE8 => {
                let (s, n) = payload!(8);
                self.push_str(s, off)?;
                n
            }
            op::SHORT_BINSTRING => {
                let (s, n) = payload!(1);
                self.push_str(&latin1(s), off)?;
                n
            }
            op::BINSTRING => {
                need!(4);
                if d[4] & 0x80 != 0 {
                    return Err(err(ErrorKind::Malformed, "BINSTRING with a negative length").at(off));
                }
                let (s, n) = payload!(4);
                self.push_str(&latin1(s), off)?;
                n
            }
            op::SHORT_BINBYTES => {
                let (s, n) = payload!(1);
                self.push_bytes(s, off)?;
                n
            }
            op::BINBYTES => {
                let (s, n) = payload!(4);
                self.push_bytes(s, off)?;
                n
            }
            op::BINBYTES8 | op::BYTEARRAY8 => {
                let (s, n) = payload!(8);
                self.push_bytes(s, off)?;
                n
            }
            op::INT | op::LONG | op::FLOAT | op::STRING | op::UNICODE | op::GET | op::PUT => {
                let Some(nl) = d[1..].iter().take(1 << 20).position(|&b| b == b'\n') else {
                    if avail >= 1 << 20 {
                        return Err(err(ErrorKind::Malformed, "text opcode argument longer than 1 MiB").at(off));
                    }
                    return Ok(Step::More);
                };
                let line = &d[1..1 + nl];
                self.text_op(o, line, off)?;
                2 + nl
            }
            op::EMPTY_DICT => {
                let v = self.new_obj(Kind::Dict, off)?;
                self.push(v);
                1
            }
            op::EMPTY_LIST => {
                let v = self.new_obj(Kind::List, off)?;
                self.push(v);
                1
            }
            op::EMPTY_TUPLE => {
                let v = self.new_obj(Kind::Tuple, off)?;
                self.push(v);
                1
            }
            op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                let n = (o - op::TUPLE1 + 1) as usize;
                let floor = self.marks.last().copied().unwrap_or(0);
                if self.stack.len() < floor + n {
                    return Err(err(ErrorKind::Malformed, "stack underflow building a tuple").at(off));
                }
                let at = self.stack.len() - n;
                self.make_container(Kind::Tuple, at, off)?;
                1
            }
            op::TUPLE | op::LIST | op::DICT => {
                let m = self.pop_mark(off)?;
                let kind = match o {
                    op::TUPLE => Kind::Tuple,
                    op::LIST => Kind::List,
                    _ => Kind::Dict,
                };
                self.make_container(kind, m, off)?;
                1
            }
            op::APPEND => {
                let item = self.pop(off)?;
                let list = self.top(off)?;
                self.append(list, item, off)?;
                1
            }
            op::APPENDS => {
                let m = self.pop_mark(off)?;
                let list = match m.checked_sub(1).and_then(|i| self.stack.get(i)) {
                    Some(&v) => v,
                    None => return Err(err(ErrorKind::Malformed, "APPENDS without a list").at(off)),
                };
                // The last (or only) batch of a frames list: intern it now, straight from the
                // stack, and free its arena slots (see `intern_frames_batch`).
                if self.intern_frames_batch(list, m) {
                    return Ok(Step::Done(1));
                }
                // Fast path: plain items (interned frames, scalars) into a plain list.
                if let Some((lid, o)) = self.obj(list) {
                    let plain = o.kind == Kind::List
                        && o.rows.is_none()
                        && !self.stack[m..].iter().any(|v| matches!(v, PVal::Obj(..) | PVal::Pending(_)));
                    if plain {
                        self.room(lid, self.stack.len() - m, off)?;
                        self.charge((self.stack.len() - m) as u64 * 16, off)?;
                        self.objs[lid as usize].items.extend_from_slice(&self.stack[m..]);
                        self.stack.truncate(m);
                        return Ok(Step::Done(1));
                    }
                }
                let mut items = std::mem::take(&mut self.scratch);
                items.clear();
                items.extend(self.stack.drain(m..));
                let r = items.iter().try_for_each(|&it| self.append(list, it, off));
                self.scratch = items;
                r?;
                1
            }
            op::SETITEM => {
                let v = self.pop(off)?;
                let k = self.pop(off)?;
                let dict = self.top(off)?;
                self.set_items(dict, &[k, v], off)?;
                1
            }
            op::SETITEMS => {
                let m = self.pop_mark(off)?;
                let dict = match m.checked_sub(1).and_then(|i| self.stack.get(i)) {
                    Some(&v) => v,
                    None => return Err(err(ErrorKind::Malformed, "SETITEMS without a dict").at(off)),
                };
                if !(self.stack.len() - m).is_multiple_of(2) {
                    return Err(err(ErrorKind::Malformed, "SETITEMS with an odd number of items").at(off));
                }
                let id = match self.obj(dict) {
                    Some((id, o)) if o.kind == Kind::Dict => id,
                    _ => {
                        let what = self.describe(dict);
                        return Err(err(ErrorKind::Malformed, format!("SETITEMS on a {what}, not a dict")).at(off));
                    }
                };
                self.room(id, self.stack.len() - m, off)?;
                self.charge((self.stack.len() - m) as u64 * 16, off)?;
                self.objs[id as usize].items.extend_from_slice(&self.stack[m..]);
                self.stack.truncate(m);
                1
            }
            op::MEMOIZE => {
                let idx = self.memo.len() as u64;
                self.memo_put(idx, off)?;
                1
            }
            op::BINPUT => {
                need!(1);
                self.memo_put(u64::from(d[1]), off)?;
                2
            }
            op::LONG_BINPUT => {
                need!(4);
                self.memo_put(le_uint(&d[1..5]), off)?;
                5
            }
            op::BINGET => {
                need!(1);
                self.memo_get(u64::from(d[1]), off)?;
                2
            }
            op::LONG_BINGET => {
                need!(4);
                self.memo_get(le_uint(&d[1..5]), off)?;
                5
            }
            op::EMPTY_SET | op::ADDITEMS | op::FROZENSET => {
                return Err(err(ErrorKind::Unsupported, "sets do not occur in memory snapshots").at(off));
            }
            other => {
                if let Some(name) = code_opcode_name(other) {
                    return Err(err(
                        ErrorKind::Code,
                        format!("the pickle wants to run code (opcode {name}); snapshots never do, so it is refused"),
                    )
                    .at(off));
                }
                return Err(err(ErrorKind::Malformed, format!("unknown pickle opcode 0x{other:02x}")).at(off));
            }
        };
        Ok(Step::Done(used))
    }

    fn text_op(&mut self, o: u8, line: &[u8], off: u64) -> Result<(), ReadError> {
        let text = std::str::from_utf8(line).unwrap_or("").trim_end_matches('\r');
        let bad = || err(ErrorKind::Malformed, format!("malformed text argument {:?}", text)).at(off);
        match o {
            op::INT => match text {
                "00" => self.push(PVal::Bool(false)),
                "01" => self.push(PVal::Bool(true)),
                _ => self.push_int(text.parse::<i128>().map_err(|_| bad())?),
            },
            op::LONG => self.push_int(text.trim_end_matches('L').parse::<i128>().map_err(|_| bad())?),
            op::FLOAT => self.push(PVal::Float(text.parse::<f64>().map_err(|_| bad())?)),
            op::GET => self.memo_get(text.parse::<u64>().map_err(|_| bad())?, off)?,
            op::PUT => self.memo_put(text.parse::<u64>().map_err(|_| bad())?, off)?,
            op::STRING => {
                let inner = text
                    .strip_prefix('\'')
                    .and_then(|t| t.strip_suffix('\''))
                    .or_else(|| text.strip_prefix('"').and_then(|t| t.strip_suffix('"')))
                    .ok_or_else(bad)?;
                self.push_str(inner.as_bytes(), off)?;
            }
            _ => self.push_str(text.as_bytes(), off)?,
        }
        Ok(())
    }

    fn make_container(&mut self, kind: Kind, at: usize, off: u64) -> Result<(), ReadError> {
        let mut items = std::mem::take(&mut self.scratch);
        items.clear();
        items.extend(self.stack.drain(at..));
        let v = self.new_obj(kind, off)?;
        let r = match kind {
            Kind::List => items.iter().try_for_each(|&it| self.append(v, it, off)),
            Kind::Dict => {
                if !items.len().is_multiple_of(2) {
                    Err(err(ErrorKind::Malformed, "DICT with an odd number of items").at(off))
                } else {
                    self.set_items(v, &items, off)
                }
            }
            _ => {
                self.charge(items.len() as u64 * 16, off)?;
                if let PVal::Obj(id, _) = v {
                    self.objs[id as usize].items.extend_from_slice(&items);
                }
                Ok(())
            }
        };
        self.scratch = items;
        r?;
        self.push(v);
        Ok(())
    }

    fn set_items(&mut self, dict: PVal, kv: &[PVal], off: u64) -> Result<(), ReadError> {
        let id = match self.obj(dict) {
            Some((id, o)) if o.kind == Kind::Dict => id,
            _ => {
                let what = self.describe(dict);
                return Err(err(ErrorKind::Malformed, format!("SETITEM(S) on a {what}, not a dict")).at(off));
            }
        };
        self.room(id, kv.len(), off)?;
        self.charge(kv.len() as u64 * 16, off)?;
        self.objs[id as usize].items.extend_from_slice(kv);
        Ok(())
    }

    /// Appends `item` to `list`. A dict that is a trace entry is packed into the list's rows.
    pub fn append(&mut self, list: PVal, item: PVal, off: u64) -> Result<(), ReadError> {
        let lid = match self.obj(list) {
            Some((id, o)) if o.kind == Kind::List => id,
            Some((id, o)) if matches!(o.kind, Kind::Stack(_)) => {
                self.expand_stack(id);
                id
            }
            _ => {
                let what = self.describe(list);
                return Err(err(ErrorKind::Malformed, format!("APPEND to a {what}, not a list")).at(off));
            }
        };
        if let PVal::Pending(k) = item {
            if let Some(e) = self.pending.get(k as usize) {
                let dropped = push_row(
                    &mut self.objs[lid as usize],
                    e,
                    self.size_hint,
                    &mut self.rows_reserved,
                    off,
                    self.limits,
                );
                self.mem = (self.mem + 48).saturating_sub(dropped.saturating_mul(48));
                self.pending_live = self.pending_live.saturating_sub(1);
                if self.pending_live == 0 {
                    self.pending.clear();
                }
                return Ok(());
            }
        }
        if !matches!(item, PVal::Obj(..)) {
            self.room(lid, 1, off)?;
            let l = &mut self.objs[lid as usize];
            if l.rows.is_none() {
                l.items.push(item);
                self.mem += 16;
                return Ok(());
            }
        }
        if let Some((did, d)) = self.obj(item) {
            let is_entry =
                d.kind == Kind::Dict && d.items.iter().step_by(2).any(|k| matches!(k, PVal::Str(s) if s.0 == K_ACTION));
            if is_entry {
                let items = std::mem::take(&mut self.objs[did as usize].items);
                let entry = self.entry_from_items(&items);
                self.objs[did as usize].items = items;
                if let Ok(entry) = entry {
                    self.charge(48, off)?;
                    let dropped = push_row(
                        &mut self.objs[lid as usize],
                        &entry,
                        self.size_hint,
                        &mut self.rows_reserved,
                        off,
                        self.limits,
                    );
                    self.mem = self.mem.saturating_sub(dropped.saturating_mul(48));
                    self.recycle(did);
                    return Ok(());
                }
            }
        }
        self.charge(16, off)?;
        let l = &mut self.objs[lid as usize];
        if let Some(rows) = &l.rows {
            if l.items.is_empty() {
                l.items.extend((0..rows.len() as u32).map(PVal::Row));
            }
        }
        l.items.push(item);
        Ok(())
    }

    pub fn as_i128(&self, v: PVal) -> Option<i128> {
        match v {
            PVal::Int(i) => Some(i128::from(i)),
            PVal::Big(b) => self.bigs.get(b as usize).copied(),
            PVal::Bool(b) => Some(i128::from(b)),
            _ => None,
        }
    }

    pub fn as_u64(&self, v: PVal) -> Result<u64, String> {
        match v {
            PVal::Int(i) if i >= 0 => Ok(i as u64),
            PVal::Bool(b) => Ok(u64::from(b)),
            PVal::Big(_) => {
                self.as_i128(v).and_then(|i| u64::try_from(i).ok()).ok_or_else(|| "an int outside 0..2^64".to_string())
            }
            PVal::Int(i) => Err(format!("a non-negative int, found {i}")),
            other => Err(format!("an int, found {}", self.describe(other))),
        }
    }

    pub fn as_i64(&self, v: PVal) -> Result<i64, String> {
        match v {
            PVal::Int(i) => Ok(i),
            PVal::Bool(b) => Ok(i64::from(b)),
            PVal::Big(_) => self
                .as_i128(v)
                .and_then(|i| i64::try_from(i).ok())
                .ok_or_else(|| "an int that fits in 64 bits".to_string()),
            other => Err(format!("an int, found {}", self.describe(other))),
        }
    }

    /// Stream handles are pointers printed as int64; a few writers print them unsigned.
    pub fn as_stream(&self, v: PVal) -> Result<i64, String> {
        match self.as_i128(v) {
            Some(i) if i64::try_from(i).is_ok() => Ok(i as i64),
            Some(i) if u64::try_from(i).is_ok() => Ok(i as u64 as i64),
            _ => Err(format!("an int stream handle, found {}", self.describe(v))),
        }
    }

    pub fn as_str(&self, v: PVal) -> Result<StrId, String> {
        match v {
            PVal::Str(s) => Ok(s),
            other => Err(format!("a str, found {}", self.describe(other))),
        }
    }

    pub fn as_pool(&self, v: PVal) -> Result<PoolId, String> {
        let bad = || format!("a pair of ints, found {}", self.describe(v));
        let (_, o) = self.obj(v).ok_or_else(bad)?;
        match o.items.as_slice() {
            [a, b] if o.kind != Kind::Dict => Ok((self.as_u64(*a)?, self.as_u64(*b)?)),
            _ => Err(bad()),
        }
    }

    /// Packs a trace-entry dict. Unknown keys are kept as extras.
    pub fn entry_from_items(&mut self, items: &[PVal]) -> Result<Entry, String> {
        let mut e = Entry::new(Action::Snapshot, 0, 0, 0);
        e.addr = None;
        let mut have_action = false;
        let mut have_size = false;
        for kv in items.chunks_exact(2) {
            let (k, v) = (kv[0], kv[1]);
            let PVal::Str(key) = k else {
                return Err(format!("a trace entry has a {} key", self.describe(k)));
            };
            macro_rules! with {
                ($e:expr) => {
                    $e.map_err(|m| format!("`{}`: expected {m}", self.strings.get(key)))
                };
            }
            match key.0 {
                K_ACTION => {
                    let s = with!(self.as_str(v))?;
                    e.action = if (FIRST_ACTION..FIRST_ACTION + Action::KNOWN.len() as u32).contains(&s.0) {
                        Action::KNOWN[(s.0 - FIRST_ACTION) as usize].1
                    } else {
                        Action::Other(s)
                    };
                    have_action = true;
                }
                K_ADDR => e.addr = Some(with!(self.as_u64(v))?),
                K_SIZE => {
                    e.size = with!(self.as_u64(v))?;
                    have_size = true;
                }
                K_STREAM => e.stream = with!(self.as_stream(v))?,
                K_TIME_US => e.time_us = Some(with!(self.as_i64(v))?),
                K_FRAMES => e.frames = Some(with!(self.stack_of(v))?),
                K_COMPILE_CONTEXT => e.compile_context = Some(with!(self.as_str(v))?),
                K_USER_METADATA => e.user_metadata = Some(with!(self.as_str(v))?),
                K_CATEGORY => e.category = Some(with!(self.as_str(v))?),
                K_POOL_ID => e.pool_id = Some(with!(self.as_pool(v))?),
                K_DEVICE_FREE => e.device_free = Some(with!(self.as_u64(v))?),
                _ => {
                    let val = with!(self.to_value(v, MAX_DEPTH, &mut 1_000_000))?;
                    e.extras.push((key, val));
                }
            }
        }
        if !have_action {
            return Err("a trace entry has no `action`".into());
        }
        if !have_size && e.action != Action::Snapshot {
            return Err("a trace entry has no `size`".into());
        }
        Ok(e)
    }

    /// The stack id of a frames list, interning its frames.
    pub fn stack_of(&mut self, v: PVal) -> Result<StackId, String> {
        let id = match v {
            PVal::Stack(s) => return Ok(s),
            PVal::Obj(..) => match self.obj(v).map(|(id, o)| (id, o.kind)) {
                Some((_, Kind::Stack(s))) => return Ok(s),
                Some((id, Kind::List | Kind::Tuple)) => id,
                _ => return Err(format!("a list of frames, found {}", self.describe(v))),
            },
            _ => return Err(format!("a list of frames, found {}", self.describe(v))),
        };
        let items = std::mem::take(&mut self.objs[id as usize].items);
        let mut buf = std::mem::take(&mut self.stack_buf);
        buf.clear();
        let r = items.iter().try_for_each(|&f| {
            buf.push(self.frame_of(f)?);
            Ok::<(), String>(())
        });
        self.objs[id as usize].items = items;
        if let Err(e) = r {
            self.stack_buf = buf;
            return Err(e);
        }
        let sid = self.intern_stack(&buf);
        self.stack_buf = buf;
        self.collapse(id, Kind::Stack(sid), PVal::Stack(sid));
        Ok(sid)
    }

    /// Python's pickler writes a list in batches of 1000, so a shorter batch into an empty
    /// list completes it. When such a batch holds only frames (interned ones, or dicts with
    /// frame keys), the list is interned as a stack here, and the handle that is still on the
    /// stack is replaced by the stack id. With the memo slot rewritten too, nothing refers to
    /// the list or to its new frame dicts any more, so their arena slots are recycled: a
    /// snapshot's millions of per-entry frames lists cost no arena memory.
    fn intern_frames_batch(&mut self, list: PVal, m: usize) -> bool {
        let Some((lid, o)) = self.obj(list) else { return false };
        let batch = &self.stack[m..];
        if o.kind != Kind::List || !o.items.is_empty() || o.rows.is_some() || batch.is_empty() || batch.len() >= 1000 {
            return false;
        }
        let all_frames = batch.iter().all(|&v| match v {
            PVal::Frame(_) => true,
            PVal::Obj(..) => self.obj(v).is_some_and(|(_, d)| match d.kind {
                Kind::Frame(_) => true,
                Kind::Dict => is_frame_dict(&d.items, &self.strings),
                _ => false,
            }),
            _ => false,
        });
        if !all_frames || m == 0 || !matches!(self.stack[m - 1], PVal::Obj(i, _) if i == lid) {
            return false;
        }
        let mut buf = std::mem::take(&mut self.stack_buf);
        buf.clear();
        let mut fresh = std::mem::take(&mut self.fresh);
        fresh.clear();
        let list_offset = self.objs[lid as usize].offset;
        for k in m..self.stack.len() {
            let v = self.stack[k];
            let fid = match v {
                PVal::Frame(f) => f,
                _ => match self.frame_of(v) {
                    Ok(f) => {
                        // Only a dict created inside this batch is referenced by nothing else;
                        // one made earlier may still sit in another container's items.
                        if let PVal::Obj(id, _) = v {
                            if self.objs[id as usize].offset > list_offset {
                                fresh.push(id);
                            }
                        }
                        f
                    }
                    Err(_) => {
                        // Not a frame after all: leave the list to the general path.
                        self.stack_buf = buf;
                        self.fresh = fresh;
                        return false;
                    }
                },
            };
            buf.push(fid);
        }
        let sid = self.intern_stack(&buf);
        self.stack_buf = buf;
        self.stack.truncate(m);
        self.stack[m - 1] = PVal::Stack(sid);
        self.collapse(lid, Kind::Stack(sid), PVal::Stack(sid));
        self.recycle(lid);
        fresh.sort_unstable();
        fresh.dedup();
        for &id in &fresh {
            if matches!(self.objs[id as usize].kind, Kind::Frame(_)) {
                self.recycle(id);
            }
        }
        self.fresh = fresh;
        true
    }

    /// The fast path for a trace entry as Python's pickler writes it inside a trace list:
    /// `EMPTY_DICT MEMOIZE MARK (key value)* SETITEMS`, keys memoized, values plain ints or
    /// strings, `frames` a memoized list or a new list of known frames. The entry is first
    /// scanned without touching any state; only when all of it fits is it committed (memo
    /// slots in order, the row staged for the list's APPENDS). Anything else returns `None`
    /// and the general path reads the same bytes.
    fn fast_entry(&mut self, d: &[u8]) -> Option<usize> {
        // Inside the MARK of a list, with room for a whole entry in this buffer.
        let &m = self.marks.last()?;
        let parent = *self.stack.get(m.checked_sub(1)?)?;
        match self.obj(parent) {
            Some((_, o)) if o.kind == Kind::List => {}
            _ => return None,
        }
        if d.get(1) != Some(&op::MEMOIZE) || d.get(2) != Some(&op::MARK) {
            return None;
        }
        let mut e = Entry::new(Action::Snapshot, 0, 0, 0);
        e.addr = None;
        let (mut have_action, mut have_size) = (false, false);
        let mut pos = 3;
        // Memo pushes in order: a new list (interned later) or a new string.
        // A new frames list: its body's range and hash, and its stack when seen before.
        let mut new_list: Option<(usize, usize, u64, Option<StackId>)> = None;
        let mut memo_new: u32 = 1; // the dict itself
        let mut new_strings: [(usize, usize, u8); 4] = [(0, 0, 0); 4];
        let mut n_new_strings = 0usize;
        loop {
            let o = *d.get(pos)?;
            if o == op::SETITEMS {
                pos += 1;
                break;
            }
            // Key: a memoized known key string.
            let (key, used) = self.fast_memo(d, pos)?;
            pos += used;
            let PVal::Str(key) = key else { return None };
            match key.0 {
                K_ACTION => {
                    let (v, used) = self.fast_memo(d, pos)?;
                    pos += used;
                    let PVal::Str(s) = v else { return None };
                    let k = s.0.checked_sub(FIRST_ACTION)? as usize;
                    e.action = Action::KNOWN.get(k)?.1;
                    have_action = true;
                }
                K_ADDR | K_SIZE | K_STREAM | K_TIME_US | K_DEVICE_FREE => {
                    let (v, used) = fast_int(d, pos)?;
                    pos += used;
                    match key.0 {
                        K_ADDR => e.addr = Some(u64::try_from(v).ok()?),
                        K_SIZE => {
                            e.size = u64::try_from(v).ok()?;
                            have_size = true;
                        }
                        K_STREAM => e.stream = v,
                        K_TIME_US => e.time_us = Some(v),
                        _ => e.device_free = Some(u64::try_from(v).ok()?),
                    }
                }
                K_COMPILE_CONTEXT | K_USER_METADATA | K_CATEGORY => {
                    let sid = match *d.get(pos)? {
                        op::SHORT_BINUNICODE => {
                            let len = *d.get(pos + 1)? as usize;
                            let text = d.get(pos + 2..pos + 2 + len)?;
                            std::str::from_utf8(text).ok()?;
                            if n_new_strings == new_strings.len() || d.get(pos + 2 + len) != Some(&op::MEMOIZE) {
                                return None;
                            }
                            new_strings[n_new_strings] = (pos + 2, len, key.0 as u8);
                            n_new_strings += 1;
                            memo_new += 1;
                            pos += 3 + len;
                            None
                        }
                        _ => {
                            let (v, used) = self.fast_memo(d, pos)?;
                            pos += used;
                            let PVal::Str(s) = v else { return None };
                            Some(s)
                        }
                    };
                    if let Some(sid) = sid {
                        match key.0 {
                            K_COMPILE_CONTEXT => e.compile_context = Some(sid),
                            K_USER_METADATA => e.user_metadata = Some(sid),
                            _ => e.category = Some(sid),
                        }
                    }
                }
                K_FRAMES => match *d.get(pos)? {
                    op::EMPTY_LIST => {
                        if d.get(pos + 1) != Some(&op::MEMOIZE)
                            || d.get(pos + 2) != Some(&op::MARK)
                            || new_list.is_some()
                        {
                            return None;
                        }
                        // The body: memo references only, up to the APPENDS. Seen before,
                        // it is the same stack (see `seen.rs`); otherwise its frames are
                        // gathered in `stack_buf` as they are checked, for the commit below
                        // (nothing else uses the buffer in between).
                        let start = pos + 3;
                        let mut q = start;
                        loop {
                            match *d.get(q)? {
                                op::APPENDS => break,
                                op::BINGET => q += 2,
                                op::LONG_BINGET => q += 5,
                                _ => return None,
                            }
                        }
                        let body = d.get(start..q)?;
                        let hash = SeenLists::hash(body);
                        let known = self.seen_lists.get(hash, body);
                        if known.is_none() {
                            let mut buf = std::mem::take(&mut self.stack_buf);
                            buf.clear();
                            let mut r = start;
                            while r < q {
                                match self.fast_memo(d, r) {
                                    Some((PVal::Frame(f), used)) => {
                                        buf.push(f);
                                        r += used;
                                    }
                                    _ => break,
                                }
                            }
                            let n = buf.len();
                            self.stack_buf = buf;
                            if r != q || n == 0 || n >= 1000 {
                                return None;
                            }
                        }
                        new_list = Some((start, q, hash, known));
                        memo_new += 1;
                        pos = q + 1;
                    }
                    _ => {
                        let (v, used) = self.fast_memo(d, pos)?;
                        pos += used;
                        let PVal::Stack(s) = v else { return None };
                        e.frames = Some(s);
                    }
                },
                _ => return None,
            }
        }
        if !have_action || (!have_size && e.action != Action::Snapshot) {
            return None;
        }
        // Commit: memo slots in the order the pickle created them.
        let mut stack_slot = None;
        self.mem = self.mem.saturating_sub(self.memo.push(PVal::Row(u32::MAX)));
        let mut order: [(usize, u8); 5] = [(0, 0); 5];
        let mut n_order = 0;
        for &(at, _, _) in &new_strings[..n_new_strings] {
            order[n_order] = (at, 0);
            n_order += 1;
        }
        if let Some((at, ..)) = new_list {
            order[n_order] = (at, 1);
            n_order += 1;
        }
        order[..n_order].sort_unstable();
        for &(at, kind) in &order[..n_order] {
            if let (1, Some((start, end, hash, known))) = (kind, new_list) {
                let sid = match known {
                    Some(s) => s,
                    None => {
                        let buf = std::mem::take(&mut self.stack_buf);
                        let s = self.intern_stack(&buf);
                        self.stack_buf = buf;
                        self.mem += self.seen_lists.insert(hash, &d[start..end], s);
                        s
                    }
                };
                e.frames = Some(sid);
                stack_slot = Some(self.memo.len());
                self.mem = self.mem.saturating_sub(self.memo.push(PVal::Stack(sid)));
            } else {
                let Some(&(s_at, len, key)) = new_strings[..n_new_strings].iter().find(|x| x.0 == at) else { continue };
                let text = std::str::from_utf8(&d[s_at..s_at + len]).unwrap_or("");
                let sid = self.strings.intern(text);
                self.mem += len as u64 + 16;
                match u32::from(key) {
                    K_COMPILE_CONTEXT => e.compile_context = Some(sid),
                    K_USER_METADATA => e.user_metadata = Some(sid),
                    _ => e.category = Some(sid),
                }
                self.mem = self.mem.saturating_sub(self.memo.push(PVal::Str(sid)));
            }
        }
        self.mem += 16 * u64::from(memo_new);
        if self.memo.forgets() {
            self.forget_freed_frames(&e, stack_slot);
        }
        let k = self.pending.len() as u32;
        self.pending.push(e);
        self.pending_live += 1;
        self.stack.push(PVal::Pending(k));
        Some(pos)
    }

    /// A windowed read: the new frames lists of an allocation's events are remembered by its
    /// address and forgotten from the memo when its free completes (PyTorch's pickles refer to
    /// them again from that allocation's later events: `free_completed` reuses
    /// `free_requested`'s list), so the memo holds the lists of live allocations, not of every
    /// event. (A block in the segments, written first, and a `segment_alloc` lend their lists
    /// to later entries; those are kept.)
    fn forget_freed_frames(&mut self, e: &Entry, slot: Option<usize>) {
        let Some(addr) = e.addr else { return };
        match e.action {
            Action::Alloc | Action::FreeRequested => {
                if let Some(s) = slot {
                    // The alloc's list first, the free_requested's second (no allocation per
                    // entry: this runs for every event of a windowed read).
                    let slots = self.frames_slots.entry(addr).or_insert([u64::MAX; 2]);
                    slots[usize::from(e.action == Action::FreeRequested)] = s as u64;
                }
            }
            a if a.ends_allocation() => {
                for s in self.frames_slots.remove(&addr).unwrap_or([u64::MAX; 2]) {
                    if s != u64::MAX {
                        self.memo.forget_stack(s as usize);
                    }
                }
            }
            _ => {}
        }
    }

    /// A BINGET or LONG_BINGET at `pos`: the memo value and the bytes used.
    #[inline(always)]
    fn fast_memo(&self, d: &[u8], pos: usize) -> Option<(PVal, usize)> {
        match *d.get(pos)? {
            op::BINGET => Some((self.memo.get(*d.get(pos + 1)? as usize)?, 2)),
            op::LONG_BINGET => {
                let b = d.get(pos + 1..pos + 5)?;
                let idx = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                Some((self.memo.get(idx as usize)?, 5))
            }
            _ => None,
        }
    }

    fn intern_stack(&mut self, frames: &[FrameId]) -> StackId {
        let hash = FxBuildHasher.hash_one(frames);
        let stacks = &mut self.stacks;
        match self.stack_dedup.find(hash, |&s| stacks.get(StackId(s)) == frames) {
            Some(&s) => StackId(s),
            None => {
                let s = stacks.push(frames);
                self.stack_dedup.insert_unique(hash, s.0, |&s| FxBuildHasher.hash_one(stacks.get(StackId(s))));
                self.mem += frames.len() as u64 * 4 + 16;
                s
            }
        }
    }

    /// Turns a collapsed frames list back into a plain list, for writers that append to a
    /// list in several short batches.
    fn expand_stack(&mut self, id: u32) {
        let Kind::Stack(sid) = self.objs[id as usize].kind else { return };
        let items: Vec<PVal> = self.stacks.get(sid).iter().map(|&f| PVal::Frame(f)).collect();
        let o = &mut self.objs[id as usize];
        o.kind = Kind::List;
        o.items = items;
        let (slot, gen) = (o.memo as usize, o.gen);
        if matches!(self.memo.get(slot), Some(PVal::Stack(s)) if s == sid) {
            self.memo.set(slot, PVal::Obj(id, gen));
        }
    }

    fn frame_of(&mut self, v: PVal) -> Result<FrameId, String> {
        let id = match v {
            PVal::Frame(f) => return Ok(f),
            PVal::Obj(..) => match self.obj(v).map(|(id, o)| (id, o.kind)) {
                Some((_, Kind::Frame(f))) => return Ok(f),
                Some((id, Kind::Dict)) => id,
                _ => return Err(format!("a frame dict, found {}", self.describe(v))),
            },
            _ => return Err(format!("a frame dict, found {}", self.describe(v))),
        };
        let items = std::mem::take(&mut self.objs[id as usize].items);
        let r = self.frame_from_items(&items);
        self.objs[id as usize].items = items;
        let frame = r?;
        let fid = if frame.extras.is_empty() {
            let key = (frame.name, frame.filename, frame.line);
            match self.frame_dedup.get(&key) {
                Some(&f) => f,
                None => {
                    let f = FrameId(self.frames.len() as u32);
                    self.frames.push(frame);
                    self.frame_dedup.insert(key, f);
                    f
                }
            }
        } else {
            self.frames.push(frame);
            FrameId(self.frames.len() as u32 - 1)
        };
        self.mem += 48;
        self.collapse(id, Kind::Frame(fid), PVal::Frame(fid));
        Ok(fid)
    }

    fn frame_from_items(&self, items: &[PVal]) -> Result<Frame, String> {
        let empty = StrId(u32::MAX);
        let mut f = Frame { name: empty, filename: empty, line: 0, extras: Vec::new() };
        for kv in items.chunks_exact(2) {
            let PVal::Str(key) = kv[0] else {
                return Err("a frame has a non-str key".into());
            };
            let v = kv[1];
            macro_rules! with {
                ($e:expr) => {
                    $e.map_err(|m: String| format!("frame `{}`: expected {m}", self.strings.get(key)))
                };
            }
            match key.0 {
                K_NAME => f.name = with!(self.as_str(v))?,
                K_FILENAME => f.filename = with!(self.as_str(v))?,
                K_LINE => f.line = with!(self.as_i64(v))?,
                _ => f.extras.push((key, with!(self.to_value(v, MAX_DEPTH, &mut 100_000))?)),
            }
        }
        Ok(f)
    }

    /// Converts to an owned value, refusing nesting deeper than `depth` and more than
    /// `budget` nodes (shared references are copied, so the budget bounds blow-ups).
    pub fn to_value(&self, v: PVal, depth: u32, budget: &mut u64) -> Result<Value, String> {
        if *budget == 0 {
            return Err("a value small enough to copy (too many nested items)".into());
        }
        *budget -= 1;
        Ok(match v {
            PVal::None => Value::None,
            PVal::Bool(b) => Value::Bool(b),
            PVal::Int(i) => Value::Int(i128::from(i)),
            PVal::Big(_) => Value::Int(self.as_i128(v).unwrap_or(0)),
            PVal::Float(f) => Value::Float(f),
            PVal::Str(s) => Value::Str(self.strings.get(s).into()),
            PVal::Bytes(b) => Value::Bytes(self.bytes.get(b as usize).cloned().unwrap_or_default()),
            PVal::Row(_) | PVal::Pending(_) => return Err("a value, found a trace entry outside a trace".into()),
            PVal::Stack(s) => Value::List(self.stacks.get(s).iter().map(|&f| self.frame_value(f)).collect()),
            PVal::Frame(f) => self.frame_value(f),
            PVal::Obj(..) => {
                let Some((_, o)) = self.obj(v) else {
                    return Err(format!("a value, found {}", self.describe(v)));
                };
                if depth == 0 {
                    return Err(format!("nesting of at most {MAX_DEPTH} levels"));
                }
                let conv = |items: &[PVal], budget: &mut u64| -> Result<Vec<Value>, String> {
                    items.iter().map(|&i| self.to_value(i, depth - 1, budget)).collect()
                };
                match o.kind {
                    Kind::Stack(s) => return self.to_value(PVal::Stack(s), depth, budget),
                    Kind::Frame(f) => return self.to_value(PVal::Frame(f), depth, budget),
                    Kind::Dict => {
                        let flat = conv(&o.items, budget)?;
                        let mut it = flat.into_iter();
                        let mut pairs = Vec::new();
                        while let (Some(k), Some(v)) = (it.next(), it.next()) {
                            pairs.push((k, v));
                        }
                        Value::Dict(pairs)
                    }
                    Kind::Tuple => Value::Tuple(conv(&o.items, budget)?),
                    Kind::List if o.rows.is_some() => {
                        return Err("plain data, found a list of trace entries outside `device_traces`".into())
                    }
                    _ => Value::List(conv(&o.items, budget)?),
                }
            }
        })
    }
}

impl Vm {
    fn frame_value(&self, f: FrameId) -> Value {
        let Some(fr) = self.frames.get(f.0 as usize) else { return Value::None };
        let s = |id: StrId| Value::Str(self.strings.get(id).into());
        let mut items = vec![
            (s(StrId(K_NAME)), s(fr.name)),
            (s(StrId(K_FILENAME)), s(fr.filename)),
            (s(StrId(K_LINE)), Value::Int(i128::from(fr.line))),
        ];
        items.extend(fr.extras.iter().map(|(k, v)| (s(*k), v.clone())));
        Value::Dict(items)
    }
}

/// A dict whose keys are those of a stack frame (`name`, `filename`, `line`, FX extras).
fn is_frame_dict(items: &[PVal], strings: &Strings) -> bool {
    let mut has_location = false;
    for k in items.iter().step_by(2) {
        let PVal::Str(s) = *k else { return false };
        match s.0 {
            K_FILENAME | K_LINE => has_location = true,
            K_NAME => {}
            _ if strings.get(s).starts_with("fx_") => {}
            _ => return false,
        }
    }
    has_location
}

/// Appends a trace entry to the rows of list `l` (a `Row` marker too when the list also holds
/// other items). The first row reserves room for the rest of the input: entries take 50 to
/// 200 bytes, so this avoids growing (and copying) the columns a dozen times. What all lists
/// reserve together stays within one row per 64 bytes of the input (`reserved` counts it), so
/// a file with a trace per device does not reserve the rest of the file once per device.
///
/// A windowed read of the last entries keeps at most an eighth more than the window and then
/// drops the oldest rows, so each row is moved about eight times and memory stays at the
/// window; one of a range keeps the rows inside it and gives those after it to the trace's
/// tail. Returns how many rows it did not keep (for the memory count).
fn push_row(l: &mut Obj, e: &Entry, size_hint: Option<u64>, reserved: &mut u64, off: u64, limits: Limits) -> u64 {
    let window = limits.keep_last_entries.map(|n| n.saturating_add((n / 8).max(1 << 16)));
    let range = limits.keep_entries.filter(|_| l.items.is_empty());
    let rows = l.rows.get_or_insert_with(|| {
        let left = size_hint.map_or(0, |h| (h / 64).saturating_sub(*reserved));
        let most = window.or(range.map(|(a, b)| b.saturating_sub(a))).unwrap_or(u64::MAX);
        let reserve = size_hint.map_or(0, |h| h.saturating_sub(off) / 64).min(left).min(most);
        *reserved += reserve;
        Box::new(Trace::with_capacity(reserve as usize))
    });
    if let Some((start, end)) = range {
        let at = rows.dropped() + rows.len() as u64 + rows.tail_len();
        if at < start {
            rows.skip_front();
            rows.follow(e);
            return 1;
        }
        if at >= end {
            // Kept in the tail, it still counts against the memory limit.
            let kept = rows.push_tail(e);
            rows.follow(e);
            return u64::from(!kept);
        }
        rows.follow(e);
    }
    let mut dropped = 0;
    if let (Some(n), Some(most)) = (limits.keep_last_entries, window) {
        if rows.len() as u64 >= most && l.items.is_empty() {
            dropped = (rows.len() as u64 + 1).saturating_sub(n);
            rows.drop_front(dropped as usize);
        }
    }
    let row = rows.len() as u32;
    rows.push(e);
    if !l.items.is_empty() {
        l.items.push(PVal::Row(row));
    }
    dropped
}

/// A small int opcode at `pos`: the value and the bytes used.
#[inline]
fn fast_int(d: &[u8], pos: usize) -> Option<(i64, usize)> {
    match *d.get(pos)? {
        op::BININT1 => Some((i64::from(*d.get(pos + 1)?), 2)),
        op::BININT2 => {
            let b = d.get(pos + 1..pos + 3)?;
            Some((i64::from(u16::from_le_bytes([b[0], b[1]])), 3))
        }
        op::BININT => {
            let b = d.get(pos + 1..pos + 5)?;
            Some((i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])), 5))
        }
        op::LONG1 => {
            let n = *d.get(pos + 1)? as usize;
            Some((long1_i64(d.get(pos + 2..pos + 2 + n)?)?, 2 + n))
        }
        _ => None,
    }
}

/// A LONG1 payload of at most 8 bytes (little-endian two's complement) as an i64, or `None`
/// when it is wider or does not fit. Assembled in a register: a copy into a stack buffer
/// read back whole stalls the load that follows the byte stores (a tenth of the reader's
/// loop natively, and in wasm the copy is a call).
#[inline]
fn long1_i64(b: &[u8]) -> Option<i64> {
    let n = b.len();
    if n == 0 {
        return Some(0);
    }
    if n > 8 {
        return None;
    }
    let raw = if let Ok(w) = <[u8; 8]>::try_from(b) {
        u64::from_le_bytes(w)
    } else {
        b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
    };
    // Sign-extend from the top bit of the last byte.
    let shift = 64 - 8 * n as u32;
    Some(((raw << shift) as i64) >> shift)
}

fn latin1(b: &[u8]) -> Vec<u8> {
    b.iter().map(|&c| c as char).collect::<String>().into_bytes()
}
