//! A plain owned value tree for the parts of a snapshot that have no fixed schema
//! (`allocator_settings`, unknown keys from newer PyTorch versions).

/// A Python value as far as snapshots use them. Tuples stay tuples so a written
/// pickle loads back as the same Python object.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `None`
    None,
    /// `True` / `False`
    Bool(bool),
    /// An `int` (snapshots never need more than 128 bits).
    Int(i128),
    /// A `float`
    Float(f64),
    /// A `str`
    Str(Box<str>),
    /// A `bytes` or `bytearray`
    Bytes(Box<[u8]>),
    /// A `list`
    List(Vec<Value>),
    /// A `tuple`
    Tuple(Vec<Value>),
    /// A `dict`, in insertion order.
    Dict(Vec<(Value, Value)>),
}

impl Value {
    /// The value under `key` when this is a dict with string keys.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items.iter().find_map(|(k, v)| match k {
                Value::Str(s) if &**s == key => Some(v),
                _ => None,
            }),
            _ => None,
        }
    }

    /// Converts to JSON for display (tuples become arrays, non-string keys are printed).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::None => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => {
                if let Ok(v) = i64::try_from(*i) {
                    J::from(v)
                } else if let Ok(v) = u64::try_from(*i) {
                    J::from(v)
                } else {
                    J::String(i.to_string())
                }
            }
            Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
            Value::Str(s) => J::String(s.to_string()),
            Value::Bytes(b) => J::String(String::from_utf8_lossy(b).into_owned()),
            Value::List(v) | Value::Tuple(v) => J::Array(v.iter().map(Value::to_json).collect()),
            Value::Dict(items) => J::Object(
                items
                    .iter()
                    .map(|(k, v)| {
                        let key = match k {
                            Value::Str(s) => s.to_string(),
                            other => other.to_json().to_string(),
                        };
                        (key, v.to_json())
                    })
                    .collect(),
            ),
        }
    }
}
