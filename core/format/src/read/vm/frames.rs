//! Frames and frames lists interned: a frame dict becomes a [`FrameId`], a list of them a
//! [`StackId`], each stored once, and the arena objects that held them collapse to the ids.

use rustc_hash::FxBuildHasher;
use std::hash::BuildHasher as _;

use super::Vm;
use crate::intern::{StrId, Strings};
use crate::model::{Frame, FrameId, StackId};
use crate::read::pval::{Kind, PVal};
use crate::read::schema::{K_FILENAME, K_LINE, K_NAME, MAX_DEPTH};

impl Vm {
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
    pub(super) fn intern_frames_batch(&mut self, list: PVal, m: usize) -> bool {
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

    pub(super) fn intern_stack(&mut self, frames: &[FrameId]) -> StackId {
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
    pub(super) fn expand_stack(&mut self, id: u32) {
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
