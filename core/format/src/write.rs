//! Writes a [`Snapshot`] as a protocol-4 pickle that Python's `pickle.load` and PyTorch's
//! `_memory_viz.py` read. Like PyTorch, every frame dict and every stack list is written once
//! and referenced through the memo afterwards, and so are strings.

use std::io::{self, Write};

use crate::intern::StrId;
use crate::model::{Action, Annotation, Block, BlockState, FrameId, Root, Segment, Snapshot, StackId, Trace};
use crate::value::Value;

/// How to lay out the pickle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Options {
    /// Write each stack list once and refer to it afterwards (smaller). Off, every trace
    /// entry and block gets its own list of shared frame dicts, as PyTorch writes them.
    pub share_stacks: bool,
}

/// Serializes to a byte vector, laid out as PyTorch does.
pub fn to_pickle_bytes(snap: &Snapshot) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    write_pickle_with(snap, &mut out, Options::default()).ok();
    out
}

/// Serializes into `out` (wrap files in a `BufWriter`), laid out as PyTorch does.
pub fn write_pickle(snap: &Snapshot, out: impl Write) -> io::Result<()> {
    write_pickle_with(snap, out, Options::default())
}

/// Serializes into `out` with these options.
pub fn write_pickle_with(snap: &Snapshot, out: impl Write, opts: Options) -> io::Result<()> {
    let mut w = Writer {
        out,
        snap,
        opts,
        memo: 0,
        str_memo: vec![u32::MAX; snap.strings.len()],
        key_memo: [u32::MAX; KEY_NAMES.len()],
        frame_memo: vec![u32::MAX; snap.frames.len()],
        stack_memo: vec![u32::MAX; snap.stacks.len()],
    };
    w.raw(&[0x80, 4])?;
    match snap.root {
        Root::SegmentList => w.segments(&snap.segments)?,
        Root::Dict => w.root()?,
    }
    w.raw(b".")?;
    w.out.flush()
}

const KEY_NAMES: [&str; 51] = [
    "alloc",
    "free_requested",
    "free_completed",
    "free",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "snapshot",
    "oom",
    "annotate",
    "segments",
    "device_traces",
    "allocator_settings",
    "external_annotations",
    "host_segments",
    "host_traces",
    "device",
    "address",
    "total_size",
    "allocated_size",
    "active_size",
    "requested_size",
    "stream",
    "segment_type",
    "segment_pool_id",
    "is_expandable",
    "frames",
    "blocks",
    "size",
    "state",
    "history",
    "addr",
    "real_size",
    "action",
    "device_free",
    "time_us",
    "compile_context",
    "user_metadata",
    "category",
    "pool_id",
    "name",
    "filename",
    "line",
    "stage",
    "active_allocated",
    "active_pending_free",
    "inactive",
    "START",
    "END",
    "",
];

fn key_index(name: &str) -> usize {
    KEY_NAMES.iter().position(|&k| k == name).unwrap_or(KEY_NAMES.len() - 1)
}

struct Writer<'a, O: Write> {
    out: O,
    snap: &'a Snapshot,
    opts: Options,
    memo: u32,
    str_memo: Vec<u32>,
    key_memo: [u32; KEY_NAMES.len()],
    frame_memo: Vec<u32>,
    stack_memo: Vec<u32>,
}

const MARK: u8 = b'(';
const BATCH: usize = 1000;

impl<O: Write> Writer<'_, O> {
    fn raw(&mut self, b: &[u8]) -> io::Result<()> {
        self.out.write_all(b)
    }

    fn memoize(&mut self) -> io::Result<u32> {
        self.raw(&[0x94])?;
        self.memo += 1;
        Ok(self.memo - 1)
    }

    fn get(&mut self, idx: u32) -> io::Result<()> {
        if idx < 256 {
            self.raw(&[b'h', idx as u8])
        } else {
            let b = idx.to_le_bytes();
            self.raw(&[b'j', b[0], b[1], b[2], b[3]])
        }
    }

    fn str_bytes(&mut self, s: &str) -> io::Result<()> {
        let n = s.len();
        if n < 256 {
            self.raw(&[0x8c, n as u8])?;
        } else if n <= u32::MAX as usize {
            self.raw(b"X")?;
            self.raw(&(n as u32).to_le_bytes())?;
        } else {
            self.raw(&[0x8d])?;
            self.raw(&(n as u64).to_le_bytes())?;
        }
        self.raw(s.as_bytes())
    }

    fn key(&mut self, name: &str) -> io::Result<()> {
        let k = key_index(name);
        if name.is_empty() || KEY_NAMES[k] != name {
            return self.str_bytes(name);
        }
        match self.key_memo[k] {
            u32::MAX => {
                self.str_bytes(name)?;
                self.key_memo[k] = self.memoize()?;
                Ok(())
            }
            m => self.get(m),
        }
    }

    fn sid(&mut self, id: StrId) -> io::Result<()> {
        match self.str_memo.get(id.0 as usize).copied() {
            Some(u32::MAX) => {
                let s = self.snap.str(id);
                self.str_bytes(s)?;
                self.str_memo[id.0 as usize] = self.memoize()?;
                Ok(())
            }
            Some(m) => self.get(m),
            None => self.str_bytes(""),
        }
    }

    fn int(&mut self, v: i128) -> io::Result<()> {
        if (0..256).contains(&v) {
            self.raw(&[b'K', v as u8])
        } else if (0..65536).contains(&v) {
            let b = (v as u16).to_le_bytes();
            self.raw(&[b'M', b[0], b[1]])
        } else if i32::try_from(v).is_ok() {
            self.raw(b"J")?;
            self.raw(&(v as i32).to_le_bytes())
        } else {
            let bytes = v.to_le_bytes();
            let mut n = 16;
            while n > 1 {
                let top = bytes[n - 1];
                let next_sign = bytes[n - 2] & 0x80;
                if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.raw(&[0x8a, n as u8])?;
            self.raw(&bytes[..n])
        }
    }

    fn u(&mut self, v: u64) -> io::Result<()> {
        self.int(i128::from(v))
    }

    fn bool(&mut self, b: bool) -> io::Result<()> {
        self.raw(&[if b { 0x88 } else { 0x89 }])
    }

    fn pool(&mut self, p: (u64, u64)) -> io::Result<()> {
        self.u(p.0)?;
        self.u(p.1)?;
        self.raw(&[0x86])
    }

    fn value(&mut self, v: &Value) -> io::Result<()> {
        match v {
            Value::None => self.raw(b"N"),
            Value::Bool(b) => self.bool(*b),
            Value::Int(i) => self.int(*i),
            Value::Float(f) => {
                self.raw(b"G")?;
                self.raw(&f.to_be_bytes())
            }
            Value::Str(s) => self.key(s),
            Value::Bytes(b) => {
                self.raw(b"B")?;
                self.raw(&(b.len() as u32).to_le_bytes())?;
                self.raw(b)
            }
            Value::List(items) => {
                self.raw(b"]")?;
                self.list_items(items.iter(), |w, x| w.value(x))
            }
            Value::Tuple(items) => {
                self.raw(&[MARK])?;
                for x in items {
                    self.value(x)?;
                }
                self.raw(b"t")
            }
            Value::Dict(items) => {
                self.raw(b"}")?;
                if !items.is_empty() {
                    self.raw(&[MARK])?;
                    for (k, x) in items {
                        self.value(k)?;
                        self.value(x)?;
                    }
                    self.raw(b"u")?;
                }
                Ok(())
            }
        }
    }

    fn list_items<T>(
        &mut self,
        items: impl Iterator<Item = T>,
        mut f: impl FnMut(&mut Self, T) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut n = 0usize;
        for x in items {
            if n.is_multiple_of(BATCH) {
                if n > 0 {
                    self.raw(b"e")?;
                }
                self.raw(&[MARK])?;
            }
            f(self, x)?;
            n += 1;
        }
        if n > 0 {
            self.raw(b"e")?;
        }
        Ok(())
    }

    fn extras(&mut self, extras: &[(StrId, Value)]) -> io::Result<()> {
        for (k, v) in extras {
            self.sid(*k)?;
            self.value(v)?;
        }
        Ok(())
    }

    fn frame(&mut self, id: FrameId) -> io::Result<()> {
        let m = self.frame_memo.get(id.0 as usize).copied().unwrap_or(u32::MAX - 1);
        if m < u32::MAX - 1 {
            return self.get(m);
        }
        let snap = self.snap;
        let Some(f) = snap.frames.get(id.0 as usize) else {
            return self.raw(b"}");
        };
        self.raw(b"}")?;
        let memo = self.memoize()?;
        if let Some(slot) = self.frame_memo.get_mut(id.0 as usize) {
            *slot = memo;
        }
        self.raw(&[MARK])?;
        if f.name.0 != u32::MAX {
            self.key("name")?;
            self.sid(f.name)?;
        }
        if f.filename.0 != u32::MAX {
            self.key("filename")?;
            self.sid(f.filename)?;
        }
        self.key("line")?;
        self.int(i128::from(f.line))?;
        self.extras(&f.extras)?;
        self.raw(b"u")
    }

    fn stack(&mut self, id: StackId) -> io::Result<()> {
        let m = self.stack_memo.get(id.0 as usize).copied().unwrap_or(u32::MAX - 1);
        if m < u32::MAX - 1 {
            return self.get(m);
        }
        self.raw(b"]")?;
        let memo = self.memoize()?;
        // PyTorch shares the empty list; every captured traceback gets its own list.
        let shared = self.opts.share_stacks || self.snap.stacks.get(id).is_empty();
        if let (true, Some(slot)) = (shared, self.stack_memo.get_mut(id.0 as usize)) {
            *slot = memo;
        }
        let snap = self.snap;
        self.list_items(snap.stacks.get(id).iter(), |w, &f| w.frame(f))
    }

    fn root(&mut self) -> io::Result<()> {
        let snap = self.snap;
        self.raw(b"}")?;
        self.memoize()?;
        self.raw(&[MARK])?;
        self.key("segments")?;
        self.segments(&snap.segments)?;
        if let Some(traces) = &snap.device_traces {
            self.key("device_traces")?;
            self.raw(b"]")?;
            self.list_items(traces.iter(), |w, t| w.trace(t))?;
        }
        if let Some(v) = &snap.allocator_settings {
            self.key("allocator_settings")?;
            self.value(v)?;
        }
        if let Some(a) = &snap.external_annotations {
            self.key("external_annotations")?;
            self.raw(b"]")?;
            self.list_items(a.iter(), |w, a| w.annotation(a))?;
        }
        if let Some(s) = &snap.host_segments {
            self.key("host_segments")?;
            self.segments(s)?;
        }
        if let Some(t) = &snap.host_traces {
            self.key("host_traces")?;
            self.trace(t)?;
        }
        self.extras(&snap.extras)?;
        self.raw(b"u")
    }

    fn segments(&mut self, segs: &[Segment]) -> io::Result<()> {
        self.raw(b"]")?;
        self.list_items(segs.iter(), |w, s| w.segment(s))
    }

    fn segment(&mut self, s: &Segment) -> io::Result<()> {
        self.raw(b"}")?;
        self.raw(&[MARK])?;
        self.key("device")?;
        self.int(i128::from(s.device))?;
        self.key("address")?;
        self.u(s.address)?;
        self.key("total_size")?;
        self.u(s.total_size)?;
        for (name, v) in
            [("allocated_size", s.allocated_size), ("active_size", s.active_size), ("requested_size", s.requested_size)]
        {
            if let Some(v) = v {
                self.key(name)?;
                self.u(v)?;
            }
        }
        self.key("stream")?;
        self.int(i128::from(s.stream))?;
        if let Some(t) = s.segment_type {
            self.key("segment_type")?;
            self.sid(t)?;
        }
        if let Some(p) = s.segment_pool_id {
            self.key("segment_pool_id")?;
            self.pool(p)?;
        }
        if let Some(e) = s.is_expandable {
            self.key("is_expandable")?;
            self.bool(e)?;
        }
        if let Some(f) = s.frames {
            self.key("frames")?;
            self.stack(f)?;
        }
        self.key("blocks")?;
        self.raw(b"]")?;
        self.list_items(s.blocks.iter(), |w, b| w.block(b))?;
        self.extras(&s.extras)?;
        self.raw(b"u")
    }

    fn block(&mut self, b: &Block) -> io::Result<()> {
        self.raw(b"}")?;
        self.raw(&[MARK])?;
        if let Some(a) = b.address {
            self.key("address")?;
            self.u(a)?;
        }
        self.key("size")?;
        self.u(b.size)?;
        if let Some(r) = b.requested_size {
            self.key("requested_size")?;
            self.u(r)?;
        }
        self.key("state")?;
        match b.state {
            BlockState::ActiveAllocated => self.key("active_allocated")?,
            BlockState::ActivePendingFree => self.key("active_pending_free")?,
            BlockState::Inactive => self.key("inactive")?,
            BlockState::Other(s) => self.sid(s)?,
        }
        if let Some(f) = b.frames {
            self.key("frames")?;
            self.stack(f)?;
        }
        if let Some(h) = &b.history {
            self.key("history")?;
            self.raw(b"]")?;
            self.list_items(h.iter(), |w, h| {
                w.raw(b"}")?;
                w.raw(&[MARK])?;
                w.key("addr")?;
                w.u(h.addr)?;
                w.key("real_size")?;
                w.u(h.real_size)?;
                if let Some(f) = h.frames {
                    w.key("frames")?;
                    w.stack(f)?;
                }
                w.extras(&h.extras)?;
                w.raw(b"u")
            })?;
        }
        self.extras(&b.extras)?;
        self.raw(b"u")
    }

    fn annotation(&mut self, a: &Annotation) -> io::Result<()> {
        self.raw(b"}")?;
        self.raw(&[MARK])?;
        if a.stage.0 != u32::MAX {
            self.key("stage")?;
            self.sid(a.stage)?;
        }
        if a.name.0 != u32::MAX {
            self.key("name")?;
            self.sid(a.name)?;
        }
        self.key("device")?;
        self.int(i128::from(a.device))?;
        self.key("time_us")?;
        self.int(i128::from(a.time_us))?;
        self.extras(&a.extras)?;
        self.raw(b"u")
    }

    fn trace(&mut self, t: &Trace) -> io::Result<()> {
        self.raw(b"]")?;
        self.list_items(0..t.len(), |w, i| w.entry(t, i))
    }

    fn entry(&mut self, t: &Trace, i: usize) -> io::Result<()> {
        let e = t.entry(i);
        self.raw(b"}")?;
        if !self.opts.share_stacks {
            self.memoize()?;
        }
        self.raw(&[MARK])?;
        self.key("action")?;
        match e.action {
            Action::Other(s) => self.sid(s)?,
            a => self.key(a.name().unwrap_or("snapshot"))?,
        }
        if let Some(a) = e.addr {
            self.key("addr")?;
            self.u(a)?;
        }
        if let Some(f) = e.device_free {
            self.key("device_free")?;
            self.u(f)?;
        }
        self.key("size")?;
        self.u(e.size)?;
        self.key("stream")?;
        self.int(i128::from(e.stream))?;
        if let Some(tu) = e.time_us {
            self.key("time_us")?;
            self.int(i128::from(tu))?;
        }
        for (name, v) in
            [("compile_context", e.compile_context), ("user_metadata", e.user_metadata), ("category", e.category)]
        {
            if let Some(v) = v {
                self.key(name)?;
                self.sid(v)?;
            }
        }
        if let Some(p) = e.pool_id {
            self.key("pool_id")?;
            self.pool(p)?;
        }
        if let Some(f) = e.frames {
            self.key("frames")?;
            self.stack(f)?;
        }
        self.extras(&e.extras)?;
        self.raw(b"u")
    }
}
