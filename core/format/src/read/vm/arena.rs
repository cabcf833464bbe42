//! The arena of containers: handles made, checked, described and recycled, and lists, tuples
//! and dicts filled (a trace entry appended to a list is packed into its rows).

use super::rows::push_row;
use super::{err, Vm};
use crate::error::{ErrorKind, ReadError};
use crate::read::pval::{Kind, Obj, PVal};
use crate::read::schema::K_ACTION;

impl Vm {
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

    pub(super) fn recycle(&mut self, id: u32) {
        let o = &mut self.objs[id as usize];
        o.kind = Kind::Free;
        o.rows = None;
        self.release_items(id);
        self.free_objs.push(id);
    }

    pub(super) fn release_items(&mut self, id: u32) {
        let mut items = std::mem::take(&mut self.objs[id as usize].items);
        items.clear();
        if self.spare.len() < 4096 && items.capacity() <= 64 {
            self.spare.push(items);
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

    pub(super) fn make_container(&mut self, kind: Kind, at: usize, off: u64) -> Result<(), ReadError> {
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

    pub(super) fn set_items(&mut self, dict: PVal, kv: &[PVal], off: u64) -> Result<(), ReadError> {
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
}
