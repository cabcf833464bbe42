//! Finding allocations: by stack-frame text (substring or regular expression) or by an
//! address inside them.

use crate::frames::frame_line;
use crate::model::Snapshot;
use crate::timeline::Timeline;

/// What to look for.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Query {
    /// Frames whose `filename:line:name` line contains the text (case-insensitive).
    Substring(String),
    /// Frames whose line matches the regular expression.
    Regex(String),
    /// Elements whose `[addr, addr + size)` contains the address (hex with `0x`, or decimal).
    Address(String),
}

/// Elements of `tl` that match `q`, in element order; an error names what is wrong with
/// the query.
pub fn find(snap: &Snapshot, tl: &Timeline, q: &Query) -> Result<Vec<u32>, String> {
    let stack_hits = |matches: &dyn Fn(&str) -> bool| -> Vec<u32> {
        let frame_hit: Vec<bool> = snap.frames.iter().map(|f| matches(&frame_line(snap, f))).collect();
        let mut stack_hit: Vec<Option<bool>> = vec![None; snap.stacks.len()];
        let mut out = Vec::new();
        for (i, e) in tl.elements().iter().enumerate() {
            let Some(s) = e.stack else { continue };
            let slot = &mut stack_hit[s.0 as usize];
            let hit = *slot.get_or_insert_with(|| {
                snap.stacks.get(s).iter().any(|f| frame_hit.get(f.0 as usize).copied().unwrap_or(false))
            });
            if hit {
                out.push(i as u32);
            }
        }
        out
    };
    match q {
        Query::Substring(text) => {
            let needle = text.to_lowercase();
            if needle.is_empty() {
                return Err("empty search".into());
            }
            Ok(stack_hits(&|line: &str| line.to_lowercase().contains(&needle)))
        }
        Query::Regex(pattern) => {
            let re = regex_lite::Regex::new(pattern).map_err(|e| format!("bad regular expression: {e}"))?;
            Ok(stack_hits(&|line: &str| re.is_match(line)))
        }
        Query::Address(text) => {
            let addr = parse_address(text).ok_or_else(|| format!("not an address: {text:?}"))?;
            Ok(tl
                .elements()
                .iter()
                .enumerate()
                .filter(|(_, e)| e.addr <= addr && addr < e.addr.saturating_add(e.size.max(1)))
                .map(|(i, _)| i as u32)
                .collect())
        }
    }
}

/// `0x7f3a00000000`, `7f3a00000000` with hex digits, or decimal.
pub fn parse_address(text: &str) -> Option<u64> {
    let t = text.trim().trim_start_matches("b'").trim_start_matches("s'");
    let t = t.split('_').next().unwrap_or(t);
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok();
    }
    if t.chars().all(|c| c.is_ascii_digit()) {
        return t.parse().ok();
    }
    u64::from_str_radix(t, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(parse_address("0x10"), Some(16));
        assert_eq!(parse_address("16"), Some(16));
        assert_eq!(parse_address("b'7f00_3"), Some(0x7f00));
        assert_eq!(parse_address("zz"), None);
    }
}
