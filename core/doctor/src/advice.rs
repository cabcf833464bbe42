//! Advice at an out-of-memory error, each with its effect predicted from the allocator state
//! and the categories there.

use serde::{Deserialize, Serialize};

use crate::allocator::{LARGE_BUFFER, ROUND_LARGE, SMALL_BUFFER};
use crate::categories::{Category, Phase, N};
use crate::model::PoolId;
use crate::units::format_size;

use super::verdict::Verdict;
use super::whatif::{Change, WhatIf};
use crate::layout::{sum, Layout, PoolKind};
use crate::settings::Settings;

/// One piece of advice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Advice {
    /// What to change: `expandable_segments:True`, `max_split_size_mb:512`,
    /// `zero_grad(set_to_none=True) before forward`, `activation checkpointing`.
    pub setting: String,
    /// The advice and its predicted effect, in words.
    pub text: String,
    /// Bytes it is predicted to make usable (or free) for the failing request.
    pub predicted_effect_bytes: u64,
    /// Whether the request is predicted to fit with it (`None`: not predicted).
    pub request_fits: Option<bool>,
}

/// What the advice is computed from.
pub struct Context<'a> {
    /// The state's segments and free blocks.
    pub layout: &'a Layout,
    /// The settings in force.
    pub settings: &'a Settings,
    /// The verdict.
    pub verdict: Verdict,
    /// Bytes requested.
    pub requested: u64,
    /// The request's pool.
    pub pool: (PoolKind, Option<PoolId>),
    /// The request's stream.
    pub stream: i64,
    /// The device's free bytes (0 when unknown).
    pub device_free: u64,
    /// The largest free block the request could use.
    pub largest_fit: u64,
    /// Bytes free anywhere (cache and device).
    pub free_anywhere: u64,
    /// Bytes allocated at the error.
    pub allocated: u64,
    /// What the device had for PyTorch: reserved plus the device's free bytes (`None`: the
    /// file does not give the free bytes).
    pub capacity: Option<u64>,
    /// Bytes per category at the error.
    pub categories: [u64; N],
    /// The phase of the program at the error.
    pub phase: Phase,
    /// The run's what-if predictions.
    pub what_if: &'a [WhatIf],
}

fn s(b: u64) -> String {
    format_size(i128::from(b))
}

/// Whole `page`-sized, `page`-aligned pages inside `[start, start + size)`.
fn whole_pages(start: u64, size: u64, page: u64) -> u64 {
    let first = start.div_ceil(page).saturating_mul(page);
    let end = (start.saturating_add(size) / page).saturating_mul(page);
    end.saturating_sub(first)
}

/// Every piece of advice that applies, most useful first.
pub fn advise(c: &Context) -> Vec<Advice> {
    let mut out = Vec::new();
    let r = c.requested;
    let gaps: Vec<_> = c.layout.gaps_for(c.pool, c.stream).collect();
    let pool_free = sum(gaps.iter().map(|g| g.size));
    // Expandable segments: one growing range per stream; whole pages of free blocks can be
    // unmapped and mapped again at its end, next to the device's free memory.
    // Only where memory was there: exhausted means even one perfect range could not hold it.
    if !c.settings.expandable() && c.verdict == Verdict::Fragmentation && c.pool.0 != PoolKind::Private {
        let page = if c.pool.0 == PoolKind::Small { SMALL_BUFFER } else { LARGE_BUFFER };
        let pages = sum(gaps.iter().map(|g| whole_pages(g.address, g.size, page)));
        let range = pages.saturating_add(c.device_free / page * page);
        // What the allocator can reach today: a cached block, or a new segment of the device's free bytes.
        let today = c.largest_fit.max(c.device_free / ROUND_LARGE * ROUND_LARGE);
        if range > today {
            let fits = range >= r;
            out.push(Advice {
                setting: "expandable_segments:True".into(),
                text: format!(
                    "the {} free in {} blocks of this pool ({} in whole {} pages) and the device's {} would map into one range of {}: the {} request {}",
                    s(pool_free),
                    gaps.len(),
                    s(pages),
                    s(page),
                    s(c.device_free),
                    s(range),
                    s(r),
                    if fits { "fits" } else { "still does not fit" }
                ),
                predicted_effect_bytes: range - today,
                request_fits: Some(fits),
            });
        }
    }
    // max_split_size_mb: blocks at least this large are never split, so small tensors stop
    // carving the large segments.
    if c.settings.max_split_size_bytes.is_none() && c.verdict == Verdict::Fragmentation && c.pool.0 == PoolKind::Large {
        let mb = (r >> 20).max(1);
        let m_mb = (1u64 << (63 - mb.leading_zeros())).max(32);
        let m = m_mb << 20;
        let (mut segs, mut tensors, mut small_bytes, mut trapped, mut biggest) = (0u32, 0u32, 0u64, 0u64, 0u64);
        // Free bytes per segment, in one pass over the gaps (not a scan of them per segment).
        let mut free_in = vec![0u64; c.layout.segments.len()];
        for g in &c.layout.gaps {
            if let Some(f) = free_in.get_mut(g.segment) {
                *f = f.saturating_add(g.size);
            }
        }
        for (k, seg) in c.layout.segments.iter().enumerate() {
            if seg.pool != PoolKind::Large || seg.stream != c.stream || seg.size <= m {
                continue;
            }
            let small: Vec<_> = seg.blocks.iter().filter(|b| b.0 < m).collect();
            if small.is_empty() {
                continue;
            }
            segs += 1;
            tensors += small.len() as u32;
            small_bytes = small_bytes.saturating_add(sum(small.iter().map(|b| b.0)));
            trapped = trapped.saturating_add(free_in[k]);
            // Without its small tensors the segment's free space is one block.
            let large = sum(seg.blocks.iter().filter(|b| b.0 >= m).map(|b| b.0));
            biggest = biggest.max(seg.size.saturating_sub(large));
        }
        if segs > 0 && trapped > 0 {
            let fits = biggest >= r;
            out.push(Advice {
                setting: format!("max_split_size_mb:{m_mb}"),
                text: format!(
                    "blocks over {m_mb} MiB would no longer be split for smaller tensors: of the {segs} segments that now hold {tensors} of them ({}) with {} free between them, the largest kept whole would offer {} to the {} request, which {}",
                    s(small_bytes),
                    s(trapped),
                    s(biggest),
                    s(r),
                    if fits { "fits" } else { "still does not fit" }
                ),
                predicted_effect_bytes: trapped,
                request_fits: Some(fits),
            });
        }
    }
    // Last step's gradients alive during the forward pass.
    let grads = c.categories[Category::Gradient.index()];
    if grads > 0 && !matches!(c.phase, Phase::Backward | Phase::Optimizer) {
        let fits = c.free_anywhere.saturating_add(grads) >= r;
        out.push(Advice {
            setting: "zero_grad(set_to_none=True) before forward".into(),
            text: format!(
                "these {} of last step's gradients are alive during the {} phase: zero_grad(set_to_none=True) before forward frees them, and the {} request {}",
                s(grads),
                match c.phase {
                    Phase::Forward => "forward",
                    Phase::ZeroGrad => "zero_grad",
                    _ => "pre-forward",
                },
                s(r),
                if fits { "would fit" } else { "would still not fit" }
            ),
            predicted_effect_bytes: grads,
            request_fits: Some(fits),
        });
    }
    // Activations: point at the what-if.
    let total = sum(c.categories.iter().copied());
    let acts = c.categories[Category::Activation.index()];
    if total > 0 && acts.saturating_mul(5) >= total {
        let ck = c.what_if.iter().find(|w| w.option == Change::Checkpointing && w.applies);
        let saving = ck.map_or(0, |w| w.baseline_peak_bytes.saturating_sub(w.predicted_peak_bytes));
        out.push(Advice {
            setting: "activation checkpointing".into(),
            text: format!(
                "activations are {:.0}% of live memory at the error ({}): see what-if{}",
                100.0 * acts as f64 / total as f64,
                s(acts),
                match ck {
                    Some(w) => format!(
                        " (checkpointing each layer predicts a peak of {}, {} lower)",
                        s(w.predicted_peak_bytes),
                        s(saving)
                    ),
                    None => String::new(),
                }
            ),
            predicted_effect_bytes: saving,
            request_fits: None,
        });
    }
    if !out.iter().any(|a| a.request_fits == Some(true)) {
        out.extend(fitting_change(c));
    }
    out
}

/// When no setting makes the request fit: the least change of the what-if that would, the
/// demand at the error (allocated plus the request) scaled as the change scales the run's
/// peak, against what the device had.
fn fitting_change(c: &Context) -> Option<Advice> {
    let capacity = c.capacity?;
    let demand = c.allocated.saturating_add(c.requested);
    let (w, need) = c
        .what_if
        .iter()
        .filter(|w| w.applies && w.baseline_peak_bytes > 0 && w.predicted_peak_bytes < w.baseline_peak_bytes)
        .map(|w| (w, (demand as f64 * w.predicted_peak_bytes as f64 / w.baseline_peak_bytes as f64) as u64))
        .filter(|&(_, need)| need <= capacity)
        .max_by_key(|&(w, need)| (need, std::cmp::Reverse(w.key.clone())))?;
    Some(Advice {
        setting: w.change.clone(),
        text: format!(
            "predicted peak {} (the run's {}); at this error it would need about {}, which fits in the {} the device had",
            s(w.predicted_peak_bytes),
            s(w.baseline_peak_bytes),
            s(need),
            s(capacity)
        ),
        predicted_effect_bytes: demand.saturating_sub(need),
        request_fits: Some(true),
    })
}
