//! A pickle virtual machine that only builds data.
//!
//! Containers live in an arena and the memo holds handles to them, so an object the
//! pickle shares (a frame dict, a stack list) exists once. Dicts that look like trace
//! entries are packed into the columns of the list they are appended to as soon as
//! they are complete, so memory follows the model, not a value tree of the pickle.
//! Opcodes that import or call code are refused.
//!
//! Its files: this one holds the machine's state ([`Vm`]) and its loop ([`Vm::run`], with the
//! stack and memo operations); `vm/step.rs` the general path of one opcode, `vm/fast.rs` the
//! fast path of a trace entry, `vm/opcodes.rs` the opcode table; `vm/arena.rs` the arena of
//! containers, `vm/rows.rs` a trace list's rows (and a windowed read's dropping), `vm/frames.rs`
//! the interning of frames and stacks, `vm/convert.rs` the reading of values as model values.

mod arena;
mod convert;
mod fast;
mod frames;
mod opcodes;
mod rows;
mod step;

use hashbrown::HashTable;
use rustc_hash::FxHashMap;

use super::limits::Limits;
use super::memo::Memo;
use super::pval::{Obj, PVal};
use super::schema::KEYS;
use super::seen::SeenLists;
use crate::error::{ErrorKind, ReadError};
use crate::intern::{StrId, Strings};
use crate::model::{Action, Entry, Frame, FrameId, Stacks};
use opcodes::{self as op, fast_int};

/// Most values the pickle stack may hold at once. Picklers push containers' items in
/// batches of 1000, so only hostile input comes near; without a bound, a stream of pushes
/// after one MARK would grow the stack until memory runs out.
const MAX_STACK: usize = 1 << 24;

/// Most items one list, tuple or dict may hold (a dict counts keys and values). Snapshots'
/// long lists are trace entries, which are stored by column and not counted here; a single
/// container past this would, in wasm32, outgrow the largest allocation there is (2 GiB).
const MAX_ITEMS: usize = 1 << 25;

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
}
