//! Memory alive before the recording began, through to its end, with nothing of its own to go
//! on (no stack, no free): parameters or optimizer state, told apart by the evidence the rest
//! of the file holds.
//!
//! A recording started after a warm-up step (PyTorch's advice, torchtitan's default) holds the
//! parameters and the optimizer state only as blocks of the final snapshot, without frames. What
//! still tells them apart:
//! - the optimizer, named by a `record_function` annotation (`Optimizer.step#AdamW.step`,
//!   `Optimizer.zero_grad#SGD.zero_grad`) or by a frame inside its step (`torch/optim/adamw.py`,
//!   `_multi_tensor_adamw`), and so how many blocks the size of each parameter it keeps
//!   (Adam and AdamW two, SGD none or one, ...);
//! - the gradients: one per trained parameter, each of its parameter's size;
//! - the sizes of the blocks: with `k` state blocks per parameter, each gradient size appears
//!   `1 + k` times among the parameters and the optimizer state.
//!
//! [`split`] matches the three per size; what does not match stays `persistent` (parameters or
//! optimizer state) rather than taking a confident wrong label. `docs/categories.md` describes
//! the rule.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::{Category, Class, Why};
use crate::allocator::round_size;
use crate::model::{Frame, Snapshot};
use crate::sites::{has, is_py};

/// Sizes are compared as the allocator rounds them ([`round_size`], saturating at `u64::MAX`):
/// a block from an old snapshot without its requested size has its rounded size, a gradient
/// its requested one.
pub(super) fn size_key(size: u64) -> u64 {
    round_size(size)
}

/// The optimizer a file names, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Named {
    /// The class name as written (`AdamW`, `SGD`).
    pub name: String,
    /// Where it was read, in words.
    pub by: String,
}

/// The optimizer class of an annotation that `torch.optim` records around its step and its
/// `zero_grad`: `Optimizer.step#AdamW.step` gives `AdamW`.
pub(super) fn annotation_optimizer(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("Optimizer.step#").or_else(|| name.strip_prefix("Optimizer.zero_grad#"))?;
    let class = rest.split('.').next()?;
    (!class.is_empty()).then_some(class)
}

/// The optimizer a frame inside its step shows: `torch/optim/adamw.py` or `_multi_tensor_adamw`
/// give `adamw`; bitsandbytes' optimizers give `bitsandbytes`.
pub(super) fn frame_optimizer(snap: &Snapshot, f: &Frame) -> Option<String> {
    let file = snap.str(f.filename);
    if !is_py(file) {
        return None;
    }
    if has(file, "bitsandbytes/optim") {
        return Some("bitsandbytes".into());
    }
    if !has(file, "torch/optim/") {
        return None;
    }
    let name = snap.str(f.name);
    for prefix in ["_multi_tensor_", "_single_tensor_", "_fused_"] {
        if let Some(n) = name.strip_prefix(prefix) {
            return Some(n.to_string());
        }
    }
    let stem = file.rsplit(['/', '\\']).next()?.strip_suffix(".py")?;
    let generic = ["optimizer", "__init__", "lr_scheduler", "swa_utils", "_functional", "_adafactor"];
    (!generic.contains(&stem) && !stem.starts_with('_')).then(|| stem.to_string())
}

/// Blocks the size of a parameter that the optimizer keeps per parameter, each possibility
/// (`None`: its state is not the parameters' size, or the optimizer is not known).
fn state_blocks(name: &str) -> Option<&'static [u32]> {
    match name.to_ascii_lowercase().as_str() {
        "adam" | "adamw" | "nadam" | "radam" | "adamax" | "adadelta" => Some(&[2]),
        "sgd" => Some(&[0, 1]),
        "rmsprop" => Some(&[1, 2, 3]),
        "adagrad" | "asgd" | "lion" => Some(&[1]),
        _ => None,
    }
}

/// What the file shows of the blocks alive throughout, per size ([`size_key`]).
#[derive(Debug, Default)]
pub(super) struct Evidence {
    /// The blocks to decide: element id, size key, address, bytes.
    pub persistent: Vec<(u32, u64, u64, u64)>,
    /// Gradients alive at the step with the most gradient bytes.
    pub gradients: FxHashMap<u64, u32>,
    /// Gradient bytes at that step.
    pub gradient_bytes: u64,
    /// Blocks alive at the end that other evidence already calls optimizer state.
    pub state: FxHashMap<u64, u32>,
    /// Blocks alive at the end that other evidence already calls parameters.
    pub parameters: FxHashMap<u64, u32>,
}

/// What was inferred of the memory alive before the recording, for the statistics and the
/// categories view.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inference {
    /// Bytes alive from before the recording to its end with no evidence of their own.
    pub persistent_bytes: u64,
    /// The optimizer's class, where the file names it.
    pub optimizer: Option<String>,
    /// Where it is named, in words.
    pub optimizer_named_by: Option<String>,
    /// Blocks the size of a parameter it keeps per parameter, as the sizes showed.
    pub state_blocks_per_parameter: Option<u32>,
    /// Gradient bytes the split was matched against (at their highest).
    pub gradient_bytes: u64,
    /// Of `persistent_bytes`: inferred parameters (one per gradient of their size).
    pub parameter_bytes: u64,
    /// Inferred optimizer state.
    pub optimizer_state_bytes: u64,
    /// Blocks of a size no gradient has, once the optimizer's state is accounted for: buffers
    /// or frozen parameters (counted as parameters).
    pub buffer_bytes: u64,
    /// Left as `persistent` (parameters or optimizer state).
    pub unsplit_bytes: u64,
    /// The inference in words: what it rests on, or why it could not split.
    pub summary: String,
}

/// Decides the blocks of `ev` from the optimizer (`named`), the gradients and the sizes:
/// classes by element id (with the element's bytes), and the inference in words. O(b log b)
/// in the blocks.
pub(super) fn split(ev: &Evidence, named: Option<&Named>) -> (Vec<(u32, Class, u64)>, Inference) {
    let size = |b: u64| crate::units::format_size(i128::from(b));
    let mut per_size: FxHashMap<u64, Vec<(u64, u32, u64)>> = FxHashMap::default();
    for &(id, key, addr, bytes) in &ev.persistent {
        per_size.entry(key).or_default().push((addr, id, bytes));
    }
    // Which of equal blocks is the parameter is not recorded: the lowest addresses are counted
    // as parameters (a model's weights are allocated before its optimizer's state).
    for blocks in per_size.values_mut() {
        blocks.sort_unstable();
    }
    let bytes_of = |blocks: &[(u64, u32, u64)]| blocks.iter().map(|b| b.2).fold(0, u64::saturating_add);
    let mut inf = Inference {
        persistent_bytes: ev.persistent.iter().map(|p| p.3).fold(0, u64::saturating_add),
        optimizer: named.map(|n| n.name.clone()),
        optimizer_named_by: named.map(|n| n.by.clone()),
        gradient_bytes: ev.gradient_bytes,
        ..Inference::default()
    };
    let unsplit = |mut inf: Inference, why: String| {
        let classes = ev
            .persistent
            .iter()
            .map(|p| (p.0, Class { category: Category::Persistent, why: Why::Unsplit }, p.3))
            .collect();
        inf.unsplit_bytes = inf.persistent_bytes;
        inf.summary = format!("{} alive before the recording, not split: {why}", size(inf.persistent_bytes));
        (classes, inf)
    };
    let Some(named) = named else {
        return unsplit(inf, "no annotation or frame names the optimizer".into());
    };
    let Some(candidates) = state_blocks(&named.name) else {
        return unsplit(inf, format!("{}'s state is not one block the size of each parameter", named.name));
    };
    if ev.gradients.is_empty() {
        return unsplit(inf, "no gradient in the recording to match the parameters' sizes with".into());
    }
    // Per size with gradients: do the blocks number (1 + k) per gradient?
    let fits = |key: u64, k: u32| -> bool {
        let g = u64::from(ev.gradients.get(&key).copied().unwrap_or(0));
        let known = |m: &FxHashMap<u64, u32>| u64::from(m.get(&key).copied().unwrap_or(0));
        let (kp, kn, k) = (known(&ev.parameters), known(&ev.state), u64::from(k));
        let u = per_size.get(&key).map_or(0, |v| v.len() as u64);
        g > 0 && u > 0 && u + kp + kn == g * (1 + k) && kp <= g && kn <= g * k
    };
    let explained = |k: u32| -> u64 {
        ev.gradients
            .keys()
            .filter(|&&key| fits(key, k))
            .map(|key| bytes_of(&per_size[key]))
            .fold(0, u64::saturating_add)
    };
    let (k, best) = candidates.iter().map(|&k| (k, explained(k))).fold((0, 0), |a, b| if b.1 > a.1 { b } else { a });
    if best == 0 {
        let ks: Vec<String> = candidates.iter().map(u32::to_string).collect();
        return unsplit(
            inf,
            format!(
                "the blocks' sizes do not come {} per gradient of {} of gradients, as {} would keep them",
                ks.iter().map(|k| format!("1 + {k}")).collect::<Vec<_>>().join(" or "),
                size(ev.gradient_bytes),
                named.name
            ),
        );
    }
    inf.state_blocks_per_parameter = Some(k);
    let mut classes = Vec::with_capacity(ev.persistent.len());
    for (&key, blocks) in &per_size {
        match ev.gradients.get(&key) {
            Some(&g) if fits(key, k) => {
                let params = g - ev.parameters.get(&key).copied().unwrap_or(0);
                for (j, &(_, id, bytes)) in blocks.iter().enumerate() {
                    let class = if (j as u32) < params {
                        inf.parameter_bytes = inf.parameter_bytes.saturating_add(bytes);
                        Class { category: Category::Parameter, why: Why::InferredParameter }
                    } else {
                        inf.optimizer_state_bytes = inf.optimizer_state_bytes.saturating_add(bytes);
                        Class { category: Category::OptimizerState, why: Why::InferredOptimizerState }
                    };
                    classes.push((id, class, bytes));
                }
            }
            Some(_) => {
                inf.unsplit_bytes = inf.unsplit_bytes.saturating_add(bytes_of(blocks));
                classes.extend(
                    blocks
                        .iter()
                        .map(|&(_, id, b)| (id, Class { category: Category::Persistent, why: Why::Unsplit }, b)),
                );
            }
            None => {
                inf.buffer_bytes = inf.buffer_bytes.saturating_add(bytes_of(blocks));
                classes.extend(
                    blocks
                        .iter()
                        .map(|&(_, id, b)| (id, Class { category: Category::Parameter, why: Why::InferredBuffer }, b)),
                );
            }
        }
    }
    inf.summary = format!(
        "{} alive before the recording: {} keeps {k} block{} the size of each parameter ({}), and the {} of gradients match {} of them by size: parameters {}, optimizer state {}{}{}",
        size(inf.persistent_bytes),
        named.name,
        if k == 1 { "" } else { "s" },
        named.by,
        size(ev.gradient_bytes),
        size(inf.parameter_bytes.saturating_add(inf.optimizer_state_bytes)),
        size(inf.parameter_bytes),
        size(inf.optimizer_state_bytes),
        if inf.buffer_bytes > 0 { format!(", buffers or frozen parameters (no gradient of their size) {}", size(inf.buffer_bytes)) } else { String::new() },
        if inf.unsplit_bytes > 0 { format!(", not split {}", size(inf.unsplit_bytes)) } else { String::new() },
    );
    (classes, inf)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Blocks of the given sizes (MiB) at rising addresses, and gradients of the given sizes.
    fn evidence(blocks: &[u64], gradients: &[u64]) -> Evidence {
        let mut ev = Evidence::default();
        for (k, &m) in blocks.iter().enumerate() {
            ev.persistent.push((k as u32, size_key(m * MIB), 0x1000 * k as u64, m * MIB));
        }
        for &m in gradients {
            *ev.gradients.entry(size_key(m * MIB)).or_default() += 1;
            ev.gradient_bytes += m * MIB;
        }
        ev
    }

    fn named(name: &str) -> Named {
        Named { name: name.into(), by: "named by the annotation Optimizer.step#X.step".into() }
    }

    fn bytes(classes: &[(u32, Class, u64)], c: Category) -> u64 {
        classes.iter().filter(|x| x.1.category == c).map(|x| x.2).sum()
    }

    #[test]
    fn adam_keeps_two_blocks_per_gradient_the_lowest_address_is_the_parameter() {
        // Two parameters of 4 MiB and one of 1 MiB; a buffer of 3 MiB no gradient has.
        let ev = evidence(&[4, 4, 1, 4, 4, 1, 4, 4, 1, 3], &[4, 4, 1]);
        let (classes, inf) = split(&ev, Some(&named("AdamW")));
        assert_eq!(inf.state_blocks_per_parameter, Some(2));
        assert_eq!(bytes(&classes, Category::Parameter), (9 + 3) * MIB);
        assert_eq!(bytes(&classes, Category::OptimizerState), 18 * MIB);
        assert_eq!((inf.parameter_bytes, inf.optimizer_state_bytes, inf.buffer_bytes), (9 * MIB, 18 * MIB, 3 * MIB));
        let first = classes.iter().find(|x| x.0 == 0).unwrap().1;
        assert_eq!(first.why, Why::InferredParameter);
        assert!(classes.iter().any(|x| x.0 == 9 && x.1.why == Why::InferredBuffer));
    }

    #[test]
    fn sgd_with_or_without_momentum_is_told_by_the_sizes() {
        let (_, with) = split(&evidence(&[2, 2, 8, 8], &[2, 8]), Some(&named("SGD")));
        assert_eq!(with.state_blocks_per_parameter, Some(1));
        let (_, without) = split(&evidence(&[2, 8], &[2, 8]), Some(&named("SGD")));
        assert_eq!(without.state_blocks_per_parameter, Some(0));
        assert_eq!(without.parameter_bytes, 10 * MIB);
    }

    #[test]
    fn what_the_evidence_cannot_decide_stays_persistent() {
        let unsplit = |ev: &Evidence, n: Option<&Named>| {
            let (classes, inf) = split(ev, n);
            assert!(classes.iter().all(|x| x.1.category == Category::Persistent), "{inf:?}");
            assert_eq!(inf.unsplit_bytes, inf.persistent_bytes);
            inf.summary
        };
        let ev = evidence(&[4, 4, 4], &[4]);
        assert!(unsplit(&ev, None).contains("no annotation or frame names the optimizer"));
        assert!(unsplit(&evidence(&[4, 4, 4], &[]), Some(&named("Adam"))).contains("no gradient"));
        assert!(unsplit(&ev, Some(&named("Adafactor"))).contains("not one block the size"));
        // AdamW, but four blocks per gradient (gradients kept from before the recording too).
        assert!(unsplit(&evidence(&[4, 4, 4, 4], &[4]), Some(&named("AdamW"))).contains("do not come"));
        // Where one size fits and another does not, only the other stays persistent.
        let (classes, inf) = split(&evidence(&[4, 4, 4, 2, 2], &[4, 2]), Some(&named("AdamW")));
        assert_eq!(bytes(&classes, Category::Persistent), 4 * MIB);
        assert_eq!((inf.parameter_bytes, inf.optimizer_state_bytes), (4 * MIB, 8 * MIB));
    }

    /// Sizes are keyed as the allocator rounds them, one rule: up to 512 bytes, at least 512,
    /// and a hostile file's size that rounds past `u64::MAX` stops there.
    #[test]
    fn sizes_are_keyed_as_the_allocator_rounds_them() {
        for size in [0, 1, 511, 512, 513, 4 * MIB + 1, u64::MAX - 512, u64::MAX - 511, u64::MAX - 100, u64::MAX] {
            assert_eq!(size_key(size), crate::allocator::round_size(size), "{size}");
        }
        assert_eq!(size_key(u64::MAX - 100), u64::MAX);
        assert_eq!(size_key(4 * MIB - 100), 4 * MIB);
    }

    /// Blocks whose bytes add up past `u64::MAX`: every figure stops there.
    #[test]
    fn bytes_past_u64_max_saturate() {
        let huge = u64::MAX - 100;
        let mut ev = Evidence::default();
        for k in 0..3u32 {
            ev.persistent.push((k, size_key(huge), 0x1000 * u64::from(k), huge));
        }
        ev.gradients.insert(size_key(huge), 1);
        ev.gradient_bytes = huge;
        let (classes, inf) = split(&ev, Some(&named("AdamW")));
        assert_eq!(inf.state_blocks_per_parameter, Some(2), "{}", inf.summary);
        assert_eq!((inf.persistent_bytes, inf.parameter_bytes, inf.optimizer_state_bytes), (u64::MAX, huge, u64::MAX));
        assert_eq!(classes.len(), 3);
        let (_, unsplit) = split(&ev, None);
        assert_eq!(unsplit.unsplit_bytes, u64::MAX);
    }

    #[test]
    fn optimizers_are_read_from_torch_optim_annotations() {
        assert_eq!(annotation_optimizer("Optimizer.step#AdamW.step"), Some("AdamW"));
        assert_eq!(annotation_optimizer("Optimizer.zero_grad#SGD.zero_grad"), Some("SGD"));
        assert_eq!(annotation_optimizer("## forward ##"), None);
        assert_eq!(annotation_optimizer("Optimizer.step#"), None);
    }
}
