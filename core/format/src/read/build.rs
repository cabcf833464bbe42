//! Turns the VM's root object into a [`Snapshot`], checking the schema as it goes.

use std::collections::BTreeMap;

use super::pval::{Kind, PVal};
use super::schema::{KNOWN_ENTRY_EXTRAS, MAX_DEPTH};
use super::vm::Vm;
use crate::error::{ErrorKind, ReadError, Warning};
use crate::intern::StrId;
use crate::model::{Annotation, Block, BlockState, History, Root, Segment, Snapshot, StackId, Trace};
use crate::value::Value;

struct Builder<'a> {
    vm: &'a mut Vm,
    unknown: BTreeMap<String, u64>,
}

/// Builds the model from a finished VM.
pub(crate) fn build(mut vm: Vm) -> Result<(Snapshot, Vec<Warning>), ReadError> {
    let root = vm.root.ok_or_else(|| ReadError::new(ErrorKind::Truncated, "the pickle ends before its STOP opcode"))?;
    let stop = vm.stop_offset;
    let mut b = Builder { vm: &mut vm, unknown: BTreeMap::new() };
    let mut snap = Snapshot::default();
    match b.vm.obj(root).map(|(_, o)| o.kind) {
        Some(Kind::Dict) => b.root_dict(root, &mut snap)?,
        Some(Kind::List) => {
            snap.root = Root::SegmentList;
            snap.device_traces = None;
            snap.segments = b.segments(root, "segments")?;
        }
        _ => {
            return Err(ReadError::new(
                ErrorKind::Schema,
                format!(
                    "not a memory snapshot: the top-level object is a {}, not a dict or a list of segments",
                    b.vm.describe(root)
                ),
            )
            .at(stop))
        }
    }
    let warnings = b.unknown.into_iter().map(|(message, count)| Warning { message, count }).collect();
    snap.strings = std::mem::take(&mut vm.strings);
    snap.frames = std::mem::take(&mut vm.frames);
    snap.stacks = std::mem::take(&mut vm.stacks);
    Ok((snap, warnings))
}

fn schema(msg: impl Into<String>) -> ReadError {
    ReadError::new(ErrorKind::Schema, msg)
}

impl Builder<'_> {
    fn offset(&self, v: PVal) -> Option<u64> {
        self.vm.obj(v).filter(|_| self.vm.offset_known).map(|(_, o)| o.offset)
    }

    fn fail(&self, v: PVal, path: &str, msg: impl Into<String>) -> ReadError {
        let e = schema(msg).path(path);
        match self.offset(v) {
            Some(o) => e.at(o),
            None => e,
        }
    }

    /// The items of a dict, as (key, value) pairs with str keys.
    fn dict(&self, v: PVal, path: &str) -> Result<Vec<(StrId, PVal)>, ReadError> {
        match self.vm.obj(v) {
            Some((_, o)) if o.kind == Kind::Dict => o
                .items
                .chunks_exact(2)
                .map(|kv| match kv[0] {
                    PVal::Str(s) => Ok((s, kv[1])),
                    k => Err(self.fail(v, path, format!("expected str keys, found a {} key", self.vm.describe(k)))),
                })
                .collect(),
            _ => Err(self.fail(v, path, format!("expected a dict, found {}", self.vm.describe(v)))),
        }
    }

    fn list(&self, v: PVal, path: &str) -> Result<Vec<PVal>, ReadError> {
        match self.vm.obj(v) {
            Some((_, o)) if o.kind != Kind::Dict => {
                if let (Some(rows), true) = (&o.rows, o.items.is_empty()) {
                    return Ok((0..rows.len() as u32).map(PVal::Row).collect());
                }
                Ok(o.items.clone())
            }
            _ => Err(self.fail(v, path, format!("expected a list, found {}", self.vm.describe(v)))),
        }
    }

    fn key(&self, k: StrId) -> &str {
        self.vm.strings.get(k)
    }

    fn note_unknown(&mut self, what: &str, key: StrId) {
        // Our own mark (`memscape merge`) is known, though kept as an extra key.
        if self.key(key) == crate::model::OUTSIDE_KEY {
            return;
        }
        let msg = format!("unknown key `{}` in {what} (kept)", self.key(key));
        *self.unknown.entry(msg).or_default() += 1;
    }

    fn value(&self, v: PVal, path: &str) -> Result<Value, ReadError> {
        self.vm.to_value(v, MAX_DEPTH, &mut 10_000_000).map_err(|m| self.fail(v, path, format!("expected {m}")))
    }

    fn field<T>(&self, obj: PVal, path: &str, key: StrId, r: Result<T, String>) -> Result<T, ReadError> {
        r.map_err(|m| self.fail(obj, path, format!("`{}`: expected {m}", self.key(key))))
    }

    fn root_dict(&mut self, root: PVal, snap: &mut Snapshot) -> Result<(), ReadError> {
        snap.device_traces = None;
        let items = self.dict(root, "the snapshot")?;
        if !items.iter().any(|&(k, _)| matches!(self.key(k), "segments" | "device_traces")) {
            return Err(self.fail(
                root,
                "the snapshot",
                "not a memory snapshot: a dict without `segments` or `device_traces`",
            ));
        }
        for (k, v) in items {
            match self.key(k) {
                "segments" => snap.segments = self.segments(v, "segments")?,
                "device_traces" => {
                    let lists = self.list(v, "device_traces")?;
                    let mut traces = Vec::with_capacity(reserve(lists.len()));
                    for (d, l) in lists.into_iter().enumerate() {
                        traces.push(self.trace(l, &format!("device_traces[{d}]"))?);
                    }
                    snap.device_traces = Some(traces);
                }
                "allocator_settings" => snap.allocator_settings = Some(self.value(v, "allocator_settings")?),
                "external_annotations" => snap.external_annotations = Some(self.annotations(v)?),
                "host_segments" => snap.host_segments = Some(self.segments(v, "host_segments")?),
                "host_traces" => snap.host_traces = Some(self.trace(v, "host_traces")?),
                // memscape's own keys. `memscape capture`'s: kept as a value, read by `device_info`.
                crate::model::DEVICE_INFO_KEY => snap.extras.push((k, self.value(v, crate::model::DEVICE_INFO_KEY)?)),
                // `memscape slice`'s: what the file is a window of, read by `slice::WindowInfo::of`.
                crate::model::WINDOW_KEY => snap.extras.push((k, self.value(v, crate::model::WINDOW_KEY)?)),
                // A profiler file's (`memscape convert`): what it was, read by `Snapshot::profiler_info`.
                crate::model::PROFILER_KEY => snap.extras.push((k, self.value(v, crate::model::PROFILER_KEY)?)),
                // `memscape predict`'s: what the prediction is, read by `Snapshot::prediction_info`.
                crate::model::PREDICTION_KEY => snap.extras.push((k, self.value(v, crate::model::PREDICTION_KEY)?)),
                _ => {
                    self.note_unknown("the snapshot", k);
                    let val = self.value(v, self.key(k))?;
                    snap.extras.push((k, val));
                }
            }
        }
        Ok(())
    }

    fn trace(&mut self, v: PVal, path: &str) -> Result<Trace, ReadError> {
        let Some((id, o)) = self.vm.obj(v).filter(|(_, o)| o.kind == Kind::List) else {
            return Err(self.fail(v, path, format!("expected a list of trace entries, found {}", self.vm.describe(v))));
        };
        let offset = o.offset;
        if o.items.is_empty() {
            let mut t = self.vm.objs[id as usize].rows.take().map(|b| *b).unwrap_or_default();
            self.keep_window(&mut t);
            t.shrink_to_fit();
            self.note_entry_extras(&t);
            return Ok(t);
        }
        // Slow path: a list the VM could not pack as it went (JSON, odd writers, mixed items).
        let rows = self.vm.objs[id as usize].rows.take();
        let items = self.vm.objs[id as usize].items.clone();
        let mut t = Trace::default();
        for (i, it) in items.into_iter().enumerate() {
            let here = || format!("{path}[{i}]");
            match it {
                PVal::Row(r) => match &rows {
                    Some(rows) => t.push(&rows.entry(r as usize)),
                    None => return Err(schema("a trace row without rows").path(here())),
                },
                _ => {
                    let Some((eid, _)) = self.vm.obj(it).filter(|(_, o)| o.kind == Kind::Dict) else {
                        let e =
                            schema(format!("expected a trace entry dict, found {}", self.vm.describe(it))).path(here());
                        return Err(if self.vm.offset_known { e.at(offset) } else { e });
                    };
                    let items = std::mem::take(&mut self.vm.objs[eid as usize].items);
                    let r = self.vm.entry_from_items(&items);
                    self.vm.objs[eid as usize].items = items;
                    let e = r.map_err(|m| self.fail(it, &here(), m))?;
                    t.push(&e);
                }
            }
        }
        self.keep_window(&mut t);
        self.note_entry_extras(&t);
        Ok(t)
    }

    /// A windowed read keeps a trace's last entries only (the VM kept a few more as it went).
    fn keep_window(&self, t: &mut Trace) {
        if let Some(n) = self.vm.limits.keep_last_entries {
            t.drop_front(t.len().saturating_sub(usize::try_from(n).unwrap_or(usize::MAX)));
        }
    }

    fn note_entry_extras(&mut self, t: &Trace) {
        for i in 0..t.len() {
            for &(k, _) in t.extras(i) {
                if !KNOWN_ENTRY_EXTRAS.contains(&self.key(k)) {
                    self.note_unknown("trace entries", k);
                }
            }
            if let crate::model::Action::Other(s) = t.action(i) {
                let msg = format!("unknown action `{}` (kept, not drawn)", self.key(s));
                *self.unknown.entry(msg).or_default() += 1;
            }
        }
    }

    fn stack(&mut self, obj: PVal, path: &str, key: StrId, v: PVal) -> Result<StackId, ReadError> {
        let r = self.vm.stack_of(v);
        self.field(obj, path, key, r)
    }

    fn segments(&mut self, v: PVal, path: &str) -> Result<Vec<Segment>, ReadError> {
        let items = self.list(v, path)?;
        let mut out = Vec::with_capacity(reserve(items.len()));
        for (i, s) in items.into_iter().enumerate() {
            out.push(self.segment(s, &format!("{path}[{i}]"))?);
        }
        Ok(out)
    }

    fn segment(&mut self, v: PVal, path: &str) -> Result<Segment, ReadError> {
        let mut s = Segment {
            device: 0,
            address: 0,
            total_size: 0,
            allocated_size: None,
            active_size: None,
            requested_size: None,
            stream: 0,
            segment_type: None,
            segment_pool_id: None,
            is_expandable: None,
            frames: None,
            blocks: Vec::new(),
            extras: Vec::new(),
        };
        let (mut have_address, mut have_total) = (false, false);
        for (k, x) in self.dict(v, path)? {
            let vm = &*self.vm;
            match self.key(k) {
                "device" => s.device = self.field(v, path, k, vm.as_i64(x))?,
                "address" => {
                    s.address = self.field(v, path, k, vm.as_u64(x))?;
                    have_address = true;
                }
                "total_size" => {
                    s.total_size = self.field(v, path, k, vm.as_u64(x))?;
                    have_total = true;
                }
                "allocated_size" => s.allocated_size = Some(self.field(v, path, k, vm.as_u64(x))?),
                "active_size" => s.active_size = Some(self.field(v, path, k, vm.as_u64(x))?),
                "requested_size" => s.requested_size = Some(self.field(v, path, k, vm.as_u64(x))?),
                "stream" => s.stream = self.field(v, path, k, vm.as_stream(x))?,
                "segment_type" => s.segment_type = Some(self.field(v, path, k, vm.as_str(x))?),
                "segment_pool_id" => s.segment_pool_id = Some(self.field(v, path, k, vm.as_pool(x))?),
                "is_expandable" => {
                    s.is_expandable =
                        Some(self.field(v, path, k, vm.as_i128(x).map(|i| i != 0).ok_or("a bool".into()))?)
                }
                "frames" => s.frames = Some(self.stack(v, path, k, x)?),
                "blocks" => {
                    let items = self.list(x, &format!("{path}.blocks"))?;
                    s.blocks.reserve(reserve(items.len()));
                    for (i, b) in items.into_iter().enumerate() {
                        s.blocks.push(self.block(b, &format!("{path}.blocks[{i}]"))?);
                    }
                }
                other => {
                    if other != "forward_frames" {
                        self.note_unknown("segments", k);
                    }
                    s.extras.push((k, self.value(x, path)?));
                }
            }
        }
        if !have_address || !have_total {
            let missing = if have_address { "total_size" } else { "address" };
            return Err(self.fail(v, path, format!("a segment has no `{missing}`")));
        }
        Ok(s)
    }

    fn block(&mut self, v: PVal, path: &str) -> Result<Block, ReadError> {
        let mut b = Block {
            address: None,
            size: 0,
            requested_size: None,
            state: BlockState::Inactive,
            frames: None,
            history: None,
            extras: Vec::new(),
        };
        let (mut have_size, mut have_state) = (false, false);
        for (k, x) in self.dict(v, path)? {
            let vm = &*self.vm;
            match self.key(k) {
                "address" => b.address = Some(self.field(v, path, k, vm.as_u64(x))?),
                "size" => {
                    b.size = self.field(v, path, k, vm.as_u64(x))?;
                    have_size = true;
                }
                "requested_size" => b.requested_size = Some(self.field(v, path, k, vm.as_u64(x))?),
                "state" => {
                    let s = self.field(v, path, k, vm.as_str(x))?;
                    b.state = match self.key(s) {
                        "active_allocated" => BlockState::ActiveAllocated,
                        "active_pending_free" => BlockState::ActivePendingFree,
                        "inactive" => BlockState::Inactive,
                        _ => BlockState::Other(s),
                    };
                    have_state = true;
                }
                "frames" => b.frames = Some(self.stack(v, path, k, x)?),
                "history" => {
                    let items = self.list(x, &format!("{path}.history"))?;
                    let mut hs = Vec::with_capacity(reserve(items.len()));
                    for (i, h) in items.into_iter().enumerate() {
                        hs.push(self.history(h, &format!("{path}.history[{i}]"))?);
                    }
                    b.history = Some(hs);
                }
                other => {
                    if other != "forward_frames" {
                        self.note_unknown("blocks", k);
                    }
                    b.extras.push((k, self.value(x, path)?));
                }
            }
        }
        if !have_size || !have_state {
            let missing = if have_size { "state" } else { "size" };
            return Err(self.fail(v, path, format!("a block has no `{missing}`")));
        }
        Ok(b)
    }

    fn history(&mut self, v: PVal, path: &str) -> Result<History, ReadError> {
        let mut h = History { addr: 0, real_size: 0, frames: None, extras: Vec::new() };
        for (k, x) in self.dict(v, path)? {
            let vm = &*self.vm;
            match self.key(k) {
                "addr" => h.addr = self.field(v, path, k, vm.as_u64(x))?,
                "real_size" => h.real_size = self.field(v, path, k, vm.as_u64(x))?,
                "frames" => h.frames = Some(self.stack(v, path, k, x)?),
                _ => {
                    self.note_unknown("block history", k);
                    h.extras.push((k, self.value(x, path)?));
                }
            }
        }
        Ok(h)
    }

    fn annotations(&mut self, v: PVal) -> Result<Vec<Annotation>, ReadError> {
        let items = self.list(v, "external_annotations")?;
        let mut out = Vec::with_capacity(reserve(items.len()));
        let empty = StrId(u32::MAX);
        for (i, a) in items.into_iter().enumerate() {
            let path = format!("external_annotations[{i}]");
            let mut ann = Annotation { stage: empty, name: empty, device: 0, time_us: 0, extras: Vec::new() };
            for (k, x) in self.dict(a, &path)? {
                let vm = &*self.vm;
                match self.key(k) {
                    "stage" => ann.stage = self.field(a, &path, k, vm.as_str(x))?,
                    "name" => ann.name = self.field(a, &path, k, vm.as_str(x))?,
                    "device" => ann.device = self.field(a, &path, k, vm.as_i64(x))?,
                    "time_us" => ann.time_us = self.field(a, &path, k, vm.as_i64(x))?,
                    _ => {
                        self.note_unknown("external_annotations", k);
                        ann.extras.push((k, self.value(x, &path)?));
                    }
                }
            }
            out.push(ann);
        }
        Ok(out)
    }
}

/// Room to reserve for `n` items of a list being converted. A converted item is several
/// times larger than the 16 bytes the reader charged for it, so a huge list of the wrong
/// things must fail on its first item, not on reserving room for all of them.
fn reserve(n: usize) -> usize {
    n.min(1 << 16)
}
