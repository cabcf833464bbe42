//! One trace event as the reader needs it: the fields of the Chrome trace format that
//! PyTorch's profiler (Kineto) writes, borrowed from the event's bytes; everything else in an
//! event is skipped without being built.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// An event of `traceEvents`.
#[derive(Deserialize)]
pub(crate) struct Event<'a> {
    /// `X` (a span with `dur`), `i` (an instant), `M` (metadata), ...
    #[serde(borrow, default)]
    pub ph: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub name: Option<Text<'a>>,
    /// `cpu_op`, `python_function`, `user_annotation`, `cpu_instant_event`; `Operator` in
    /// traces of 2021.
    #[serde(borrow, default)]
    pub cat: Option<Text<'a>>,
    /// Microseconds, with up to three decimals (nanoseconds): kept as text to be exact.
    #[serde(borrow, default)]
    pub ts: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub dur: Option<&'a RawValue>,
    #[serde(default)]
    pub pid: Option<Id>,
    /// A number, or a string of one in traces of 2021.
    #[serde(default)]
    pub tid: Option<Id>,
    #[serde(borrow, default)]
    pub args: Option<Args<'a>>,
}

/// The arguments the reader uses: those of `[memory]` and `[OutOfMemory]` events, and an
/// operator's `Call stack` (traces of 2021, before `python_function` events).
#[derive(Deserialize, Default)]
pub(crate) struct Args<'a> {
    #[serde(rename = "Bytes", default)]
    pub bytes: Option<Int>,
    #[serde(rename = "Addr", default)]
    pub addr: Option<Int>,
    #[serde(rename = "Total Allocated", default)]
    pub total_allocated: Option<Int>,
    #[serde(rename = "Total Reserved", default)]
    pub total_reserved: Option<Int>,
    #[serde(rename = "Device Type", default)]
    pub device_type: Option<Int>,
    #[serde(rename = "Device Id", default)]
    pub device_id: Option<Int>,
    #[serde(rename = "Call stack", borrow, default)]
    pub call_stack: Option<Text<'a>>,
    /// A `python_function`'s caller line, `file.py:12`.
    #[serde(rename = "CallFrom", borrow, default)]
    pub call_from: Option<Text<'a>>,
}

/// A string borrowed from the event's bytes when it has no escapes (serde's own `Cow` in an
/// `Option` always copies).
#[derive(Debug)]
pub(crate) struct Text<'a>(pub Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// An integer argument: a JSON integer, or a float with an integral value (some writers
/// print `1024.0`); anything else is an error naming what was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Int(pub i128);

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Int;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Int, E> {
                Ok(Int(v.into()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Int, E> {
                Ok(Int(v.into()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Int, E> {
                if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.2e18 {
                    Ok(Int(v as i128))
                } else {
                    Err(E::invalid_value(de::Unexpected::Float(v), &self))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// A process or thread id: a number, or a string (of a number in traces of 2021; any other
/// text is hashed, so equal strings stay equal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Id(pub i64);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
                Ok(Id(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
                Ok(Id(v as i64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Id, E> {
                Ok(Id(v as i64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Id, E> {
                Ok(Id(v.trim().parse().unwrap_or_else(|_| {
                    use std::hash::BuildHasher as _;
                    rustc_hash::FxBuildHasher.hash_one(v) as i64
                })))
            }
        }
        d.deserialize_any(V)
    }
}

/// Microseconds written as a JSON number (`5769260531427.803`, `1623142623460111`, `1.5e3`)
/// in whole nanoseconds, exactly for plain decimals (a float would round the last digits of
/// today's timestamps); `None` for what is not a number or does not fit.
pub(crate) fn micros_to_ns(text: &str) -> Option<i64> {
    let t = text.trim();
    let (neg, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let plain = !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit() || c == b'.');
    if plain && digits.bytes().filter(|&c| c == b'.').count() <= 1 {
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        let int: i64 = if int.is_empty() { 0 } else { int.parse().ok()? };
        let mut ns = 0i64;
        for (k, c) in frac.bytes().chain(std::iter::repeat(b'0')).take(3).enumerate() {
            ns += i64::from(c - b'0') * [100, 10, 1][k];
        }
        let v = int.checked_mul(1000)?.checked_add(ns)?;
        return Some(if neg { -v } else { v });
    }
    let f: f64 = t.parse().ok()?;
    let ns = f * 1000.0;
    (ns.is_finite() && ns.abs() < 9.2e18).then_some(ns.round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_are_exact_nanoseconds() {
        assert_eq!(micros_to_ns("5769260531427.803"), Some(5_769_260_531_427_803));
        assert_eq!(micros_to_ns("1623142623460111"), Some(1_623_142_623_460_111_000));
        assert_eq!(micros_to_ns("12.5"), Some(12_500));
        assert_eq!(micros_to_ns("-3.0004"), Some(-3_000));
        assert_eq!(micros_to_ns("1.5e3"), Some(1_500_000));
        assert_eq!(micros_to_ns("1e300"), None);
        assert_eq!(micros_to_ns("99999999999999999999"), None);
        assert_eq!(micros_to_ns("\"x\""), None);
    }

    #[test]
    fn events_borrow_and_skip_what_they_do_not_use() {
        let e: Event = serde_json::from_str(
            r#"{"ph": "i", "name": "[memory]", "tid": "42", "ts": 1.25,
                "args": {"Bytes": -512, "Addr": 18446744073709551615, "Input Dims": [[1, [2]]], "Device Type": 1.0}}"#,
        )
        .unwrap();
        let a = e.args.unwrap();
        assert_eq!(a.bytes, Some(Int(-512)));
        assert_eq!(a.addr, Some(Int(u64::MAX.into())));
        assert_eq!(a.device_type, Some(Int(1)));
        assert_eq!(e.tid, Some(Id(42)));
        assert!(matches!(e.name, Some(Text(Cow::Borrowed("[memory]")))));
        assert!(serde_json::from_str::<Event>(r#"{"args": {"Bytes": "many"}}"#).is_err());
        assert!(serde_json::from_str::<Event>(r#"{"args": {"Bytes": 1.5}}"#).is_err());
    }
}
