//! Finding allocations: by stack-frame text (substring or regular expression), by an
//! address inside them, or by their call site.

use rustc_hash::FxHashMap;

use crate::frames::frame_text;
use crate::labels::Labels;
use crate::model::{Snapshot, StackId};
use crate::sites::Charge;
use crate::timeline::Timeline;

/// What to look for.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Query {
    /// Frames of an allocation's stack whose `filename:line:name` line, or the FX node and
    /// original code under it ([`crate::frames::fx_lines`]), contains the text
    /// (case-insensitive); and allocations whose label (an `annotate` entry, [`Labels`])
    /// contains it.
    Substring(String),
    /// Frames whose line matches the regular expression.
    Regex(String),
    /// Elements whose `[addr, addr + size)` contains the address (hex with `0x`, or decimal).
    Address(String),
    /// Elements whose call site (the first frame of the user's own code in their
    /// allocation's stack, keyed as the diff keys them: [`Charge::site`]) is exactly this
    /// `file:line:name`.
    CallSite(String),
}

/// Whether a frame's `filename:line:name` line matches.
pub type FrameTest<'a> = Box<dyn Fn(&str) -> bool + 'a>;

/// A frame-line test for a text query: substring (case-insensitive), regular expression, or
/// a call site's own line (`Address` tests elements, not frames: `None`). An error names
/// what is wrong with the query.
pub fn frame_matcher(q: &Query) -> Result<Option<FrameTest<'_>>, String> {
    match q {
        Query::Substring(text) => {
            let needle = text.to_lowercase();
            if needle.is_empty() {
                return Err("empty search".into());
            }
            Ok(Some(Box::new(move |line: &str| line.to_lowercase().contains(&needle))))
        }
        Query::Regex(pattern) => {
            let re = regex_lite::Regex::new(pattern).map_err(|e| format!("bad regular expression: {e}"))?;
            Ok(Some(Box::new(move |line: &str| re.is_match(line))))
        }
        Query::CallSite(site) => Ok(Some(Box::new(move |line: &str| line == site))),
        Query::Address(_) => Ok(None),
    }
}

/// Elements of `tl` that match `q`, in element order; an error names what is wrong with
/// the query. O(elements + frames + stacks).
pub fn find(snap: &Snapshot, tl: &Timeline, q: &Query) -> Result<Vec<u32>, String> {
    let by_stack = |hit_of: &mut dyn FnMut(Option<StackId>) -> bool| -> Vec<u32> {
        // Decided once per stack (and once for elements without one).
        let mut stack_hit: Vec<Option<bool>> = vec![None; snap.stacks.len()];
        let mut no_stack_hit: Option<bool> = None;
        let mut out = Vec::new();
        for (i, e) in tl.elements().iter().enumerate() {
            let slot = match e.stack {
                Some(s) => stack_hit.get_mut(s.0 as usize),
                None => Some(&mut no_stack_hit),
            };
            let hit = match slot {
                Some(slot) => *slot.get_or_insert_with(|| hit_of(e.stack)),
                None => hit_of(e.stack),
            };
            if hit {
                out.push(i as u32);
            }
        }
        out
    };
    match q {
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
        Query::CallSite(site) => {
            // Decided once per charge: by stack id for the allocations' own stacks (a table
            // lookup per element), by hash for those allocated before the recording, which are
            // named by their free.
            let mut of_stack: Vec<Option<bool>> = vec![None; snap.stacks.len()];
            let mut others: FxHashMap<Charge, bool> = FxHashMap::default();
            let mut hit = |c: Charge| match c {
                Charge::Stack(s) if (s.0 as usize) < of_stack.len() => {
                    *of_stack[s.0 as usize].get_or_insert_with(|| c.site(snap) == *site)
                }
                _ => *others.entry(c).or_insert_with(|| c.site(snap) == *site),
            };
            Ok((0u32..)
                .zip(tl.elements())
                .filter(|(_, e)| hit(Charge::of(snap, tl.device(), e)))
                .map(|(i, _)| i)
                .collect())
        }
        Query::Substring(_) | Query::Regex(_) => {
            let Some(matches) = frame_matcher(q)? else { return Ok(Vec::new()) };
            let frame_hit: Vec<bool> = snap.frames.iter().map(|f| matches(&frame_text(snap, f))).collect();
            let mut hits = by_stack(&mut |stack| {
                stack.is_some_and(|s| {
                    snap.stacks.get(s).iter().any(|f| frame_hit.get(f.0 as usize).copied().unwrap_or(false))
                })
            });
            // Labels put on allocations after the fact (`annotate` entries) match as well.
            let labels = Labels::new(snap, tl.device());
            if !labels.is_empty() {
                let labelled = tl
                    .elements()
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| labels.of(snap, tl.device(), e).iter().any(|l| matches(l)));
                hits.extend(labelled.map(|(i, _)| i as u32));
                hits.sort_unstable();
                hits.dedup();
            }
            Ok(hits)
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
