//! The fast path of the opcode loop for a trace entry as Python's pickler writes it: scanned
//! without touching state, then committed whole, or left to the general path.

use super::opcodes::{self as op, fast_int};
use super::Vm;
use crate::model::{Action, Entry, StackId};
use crate::read::pval::{Kind, PVal};
use crate::read::schema::{
    FIRST_ACTION, K_ACTION, K_ADDR, K_CATEGORY, K_COMPILE_CONTEXT, K_DEVICE_FREE, K_FRAMES, K_SIZE, K_STREAM,
    K_TIME_US, K_USER_METADATA,
};
use crate::read::seen::SeenLists;

impl Vm {
    /// The fast path for a trace entry as Python's pickler writes it inside a trace list:
    /// `EMPTY_DICT MEMOIZE MARK (key value)* SETITEMS`, keys memoized, values plain ints or
    /// strings, `frames` a memoized list or a new list of known frames. The entry is first
    /// scanned without touching any state; only when all of it fits is it committed (memo
    /// slots in order, the row staged for the list's APPENDS). Anything else returns `None`
    /// and the general path reads the same bytes.
    pub(super) fn fast_entry(&mut self, d: &[u8]) -> Option<usize> {
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
}
