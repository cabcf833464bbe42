//! What a predicted snapshot is ([`PredictionInfo`]): `memscape predict` ran a program on a
//! CPU as if on a GPU and wrote the snapshot it would record. Kept in the model under
//! [`PREDICTION_KEY`](crate::model::PREDICTION_KEY), read back by `Snapshot::prediction_info`.
//! A leaf: the model and the predictor both use it.

use crate::value::Value;

/// A prediction's provenance: the GPU it is for, the PyTorch it ran, what it assumed, and
/// whether the program ran to its end.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PredictionInfo {
    /// The GPU as PyTorch names it (`NVIDIA H100 80GB HBM3`).
    pub gpu: String,
    /// Its memory, in bytes.
    pub memory_bytes: u64,
    /// Whether allocations beyond that memory failed as on the GPU (`--gpu-memory`).
    pub limited: bool,
    /// The PyTorch version the program ran with.
    pub torch: String,
    /// The command that ran.
    pub command: Vec<String>,
    /// What the prediction assumed where it could not know (each a sentence).
    pub assumptions: Vec<String>,
    /// Why the program did not get to its end (the exception, its operator and line), if it
    /// did not: the snapshot holds what was predicted up to there.
    pub incomplete: Option<String>,
}

impl PredictionInfo {
    /// As a value of the snapshot's top-level dict.
    pub fn to_value(&self) -> Value {
        let s = |v: &str| Value::Str(v.into());
        let list = |l: &[String]| Value::List(l.iter().map(|x| s(x)).collect());
        let mut items = vec![
            (s("gpu"), s(&self.gpu)),
            (s("memory_bytes"), Value::Int(self.memory_bytes.into())),
            (s("limited"), Value::Bool(self.limited)),
            (s("torch"), s(&self.torch)),
            (s("command"), list(&self.command)),
            (s("assumptions"), list(&self.assumptions)),
        ];
        if let Some(why) = &self.incomplete {
            items.push((s("incomplete"), s(why)));
        }
        Value::Dict(items)
    }

    /// Read back from the value [`to_value`](Self::to_value) wrote; `None` for anything else.
    pub fn from_value(v: &Value) -> Option<PredictionInfo> {
        let text = |k: &str| match v.get(k) {
            Some(Value::Str(s)) => Some(s.to_string()),
            _ => None,
        };
        let list = |k: &str| match v.get(k) {
            Some(Value::List(l)) => {
                l.iter().filter_map(|d| if let Value::Str(s) = d { Some(s.to_string()) } else { None }).collect()
            }
            _ => Vec::new(),
        };
        Some(PredictionInfo {
            gpu: text("gpu")?,
            memory_bytes: match v.get("memory_bytes") {
                Some(Value::Int(i)) => u64::try_from(*i).unwrap_or(0),
                _ => 0,
            },
            limited: matches!(v.get("limited"), Some(Value::Bool(true))),
            torch: text("torch").unwrap_or_default(),
            command: list("command"),
            assumptions: list("assumptions"),
            incomplete: text("incomplete"),
        })
    }

    /// One line for a banner or a report: what this snapshot is.
    pub fn describe(&self) -> String {
        let end = match &self.incomplete {
            Some(why) => {
                format!("; INCOMPLETE: the program stopped ({why}), so this is what was predicted up to there")
            }
            None => String::new(),
        };
        format!(
            "predicted by memscape on a CPU, not recorded: what `{}` would record on an {} (torch {}){end}",
            self.command.join(" "),
            self.gpu,
            self.torch
        )
    }
}
