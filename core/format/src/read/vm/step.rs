//! The general path of the opcode loop: one opcode at a time, with its argument checked and
//! decoded (scalars, strings, bytes, the memo, containers), and code-running opcodes refused.

use super::opcodes::{self as op, code_opcode_name, le_signed, le_uint};
use super::{err, Step, Vm};
use crate::error::{ErrorKind, ReadError};
use crate::read::pval::{Kind, PVal};

impl Vm {
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

    pub(super) fn step(&mut self, d: &[u8], off: u64) -> Result<Step, ReadError> {
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
}

fn latin1(b: &[u8]) -> Vec<u8> {
    b.iter().map(|&c| c as char).collect::<String>().into_bytes()
}
