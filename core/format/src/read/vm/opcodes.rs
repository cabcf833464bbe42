//! The pickle opcodes (named as in CPython's `pickletools`), which of them would run code, and
//! the decoding of their integer arguments.

pub(super) const MARK: u8 = b'(';
pub(super) const STOP: u8 = b'.';
pub(super) const POP: u8 = b'0';
pub(super) const POP_MARK: u8 = b'1';
pub(super) const DUP: u8 = b'2';
pub(super) const FLOAT: u8 = b'F';
pub(super) const INT: u8 = b'I';
pub(super) const BININT: u8 = b'J';
pub(super) const BININT1: u8 = b'K';
pub(super) const LONG: u8 = b'L';
pub(super) const BININT2: u8 = b'M';
pub(super) const NONE: u8 = b'N';
pub(super) const PERSID: u8 = b'P';
pub(super) const BINPERSID: u8 = b'Q';
pub(super) const REDUCE: u8 = b'R';
pub(super) const STRING: u8 = b'S';
pub(super) const BINSTRING: u8 = b'T';
pub(super) const SHORT_BINSTRING: u8 = b'U';
pub(super) const UNICODE: u8 = b'V';
pub(super) const BINUNICODE: u8 = b'X';
pub(super) const APPEND: u8 = b'a';
pub(super) const BUILD: u8 = b'b';
pub(super) const GLOBAL: u8 = b'c';
pub(super) const DICT: u8 = b'd';
pub(super) const EMPTY_DICT: u8 = b'}';
pub(super) const APPENDS: u8 = b'e';
pub(super) const GET: u8 = b'g';
pub(super) const BINGET: u8 = b'h';
pub(super) const INST: u8 = b'i';
pub(super) const LONG_BINGET: u8 = b'j';
pub(super) const LIST: u8 = b'l';
pub(super) const EMPTY_LIST: u8 = b']';
pub(super) const OBJ: u8 = b'o';
pub(super) const PUT: u8 = b'p';
pub(super) const BINPUT: u8 = b'q';
pub(super) const LONG_BINPUT: u8 = b'r';
pub(super) const SETITEM: u8 = b's';
pub(super) const TUPLE: u8 = b't';
pub(super) const EMPTY_TUPLE: u8 = b')';
pub(super) const SETITEMS: u8 = b'u';
pub(super) const BINFLOAT: u8 = b'G';
pub(super) const PROTO: u8 = 0x80;
pub(super) const NEWOBJ: u8 = 0x81;
pub(super) const EXT1: u8 = 0x82;
pub(super) const EXT2: u8 = 0x83;
pub(super) const EXT4: u8 = 0x84;
pub(super) const TUPLE1: u8 = 0x85;
pub(super) const TUPLE2: u8 = 0x86;
pub(super) const TUPLE3: u8 = 0x87;
pub(super) const NEWTRUE: u8 = 0x88;
pub(super) const NEWFALSE: u8 = 0x89;
pub(super) const LONG1: u8 = 0x8a;
pub(super) const LONG4: u8 = 0x8b;
pub(super) const BINBYTES: u8 = b'B';
pub(super) const SHORT_BINBYTES: u8 = b'C';
pub(super) const SHORT_BINUNICODE: u8 = 0x8c;
pub(super) const BINUNICODE8: u8 = 0x8d;
pub(super) const BINBYTES8: u8 = 0x8e;
pub(super) const EMPTY_SET: u8 = 0x8f;
pub(super) const ADDITEMS: u8 = 0x90;
pub(super) const FROZENSET: u8 = 0x91;
pub(super) const NEWOBJ_EX: u8 = 0x92;
pub(super) const STACK_GLOBAL: u8 = 0x93;
pub(super) const MEMOIZE: u8 = 0x94;
pub(super) const FRAME: u8 = 0x95;
pub(super) const BYTEARRAY8: u8 = 0x96;
pub(super) const NEXT_BUFFER: u8 = 0x97;
pub(super) const READONLY_BUFFER: u8 = 0x98;

pub(super) fn code_opcode_name(o: u8) -> Option<&'static str> {
    Some(match o {
        GLOBAL => "GLOBAL",
        STACK_GLOBAL => "STACK_GLOBAL",
        REDUCE => "REDUCE",
        BUILD => "BUILD",
        INST => "INST",
        OBJ => "OBJ",
        NEWOBJ => "NEWOBJ",
        NEWOBJ_EX => "NEWOBJ_EX",
        PERSID => "PERSID",
        BINPERSID => "BINPERSID",
        EXT1 => "EXT1",
        EXT2 => "EXT2",
        EXT4 => "EXT4",
        NEXT_BUFFER => "NEXT_BUFFER",
        READONLY_BUFFER => "READONLY_BUFFER",
        _ => return None,
    })
}

pub(super) fn le_uint(b: &[u8]) -> u64 {
    b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

/// Decodes a little-endian two's complement integer of at most 16 bytes.
pub(super) fn le_signed(b: &[u8]) -> Option<i128> {
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

/// A small int opcode at `pos`: the value and the bytes used.
#[inline]
pub(super) fn fast_int(d: &[u8], pos: usize) -> Option<(i64, usize)> {
    match *d.get(pos)? {
        BININT1 => Some((i64::from(*d.get(pos + 1)?), 2)),
        BININT2 => {
            let b = d.get(pos + 1..pos + 3)?;
            Some((i64::from(u16::from_le_bytes([b[0], b[1]])), 3))
        }
        BININT => {
            let b = d.get(pos + 1..pos + 5)?;
            Some((i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])), 5))
        }
        LONG1 => {
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
