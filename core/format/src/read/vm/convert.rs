//! Arena values read as model values: ints, stream handles, strings and pools checked, a
//! trace-entry dict packed into an [`Entry`], and anything converted to an owned [`Value`].

use super::Vm;
use crate::intern::StrId;
use crate::model::{Action, Entry, FrameId, PoolId};
use crate::read::pval::{Kind, PVal};
use crate::read::schema::{
    FIRST_ACTION, K_ACTION, K_ADDR, K_CATEGORY, K_COMPILE_CONTEXT, K_DEVICE_FREE, K_FILENAME, K_FRAMES, K_LINE, K_NAME,
    K_POOL_ID, K_SIZE, K_STREAM, K_TIME_US, K_USER_METADATA, MAX_DEPTH,
};
use crate::value::Value;

impl Vm {
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
