//! Memory budgets for CI (`memscape check`): a run's peak, its growth over a baseline run and
//! its categories at the peak, each against a limit; when one fails, the call sites that grew
//! most against the baseline (the diff's keys) say where to look.
//!
//! Plain data in, plain data out: the command line reads the files and prints the outcome as
//! text, GitHub annotations, JSON or JUnit XML.

use serde::{Deserialize, Serialize};

use crate::categories::Category;
use crate::diff::{diff, Align, Profile, SiteMode};
use crate::units::format_size;

/// The budgets to check (each optional).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Budgets {
    /// The highest live bytes allowed.
    pub max_peak: Option<u64>,
    /// The peak's growth over the baseline's allowed, in percent.
    pub max_growth_pct: Option<f64>,
    /// Bytes allowed per category at the peak.
    pub max_category: Vec<(Category, u64)>,
}

/// One budget, measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BudgetResult {
    /// Its name: `max-peak`, `max-growth`, `max:activation`.
    pub name: String,
    /// The limit (bytes, or percent for growth).
    pub limit: f64,
    /// The measured value (bytes, or percent for growth).
    pub measured: f64,
    /// Within the limit.
    pub passed: bool,
    /// One sentence: what was measured against what, and by how much it is over or under.
    pub message: String,
}

/// A call site alive at the peaks whose bytes changed from the baseline to the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grown {
    /// `filename:line:name` (the first frame of the user's code).
    pub site: String,
    /// Bytes at the baseline's peak.
    pub baseline_bytes: u64,
    /// Bytes at the run's peak.
    pub run_bytes: u64,
    /// `run - baseline`.
    pub delta_bytes: i64,
}

/// Everything `memscape check` found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Every budget within its limit.
    pub passed: bool,
    /// The run's peak.
    pub peak_bytes: u64,
    /// The baseline's peak, when there is one.
    pub baseline_peak_bytes: Option<u64>,
    /// Each budget asked for, in the order above.
    pub budgets: Vec<BudgetResult>,
    /// The call sites that grew most from the baseline to the run (at most [`GROWN`]), largest
    /// first; empty without a baseline.
    pub grown: Vec<Grown>,
}

/// How many grown call sites an outcome names.
pub const GROWN: usize = 5;

/// Checks `run` against `budgets` (growth against `baseline`, which it then needs). Errors
/// name a budget that cannot be checked.
pub fn check(run: &Profile, baseline: Option<&Profile>, budgets: &Budgets) -> Result<Outcome, String> {
    let size = |b: u64| format_size(i128::from(b));
    let over = |measured: u64, limit: u64| {
        let d = i128::from(measured) - i128::from(limit);
        if d > 0 {
            format!("over by {}", format_size(d))
        } else {
            format!("{} to spare", format_size(-d))
        }
    };
    let mut results = Vec::new();
    if let Some(limit) = budgets.max_peak {
        let p = run.peak_bytes;
        results.push(BudgetResult {
            name: "max-peak".into(),
            limit: limit as f64,
            measured: p as f64,
            passed: p <= limit,
            message: format!("peak {} against a budget of {}: {}", size(p), size(limit), over(p, limit)),
        });
    }
    if let Some(pct) = budgets.max_growth_pct {
        let Some(base) = baseline else { return Err("--max-growth needs a baseline (--baseline FILE)".into()) };
        if !(pct.is_finite() && pct >= 0.0) {
            return Err(format!("--max-growth {pct}: not a percentage of at least 0"));
        }
        let growth = if base.peak_bytes == 0 {
            if run.peak_bytes == 0 {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            (run.peak_bytes as f64 - base.peak_bytes as f64) / base.peak_bytes as f64 * 100.0
        };
        let allowed = (base.peak_bytes as f64 * (1.0 + pct / 100.0)).floor() as u64;
        results.push(BudgetResult {
            name: "max-growth".into(),
            limit: pct,
            measured: growth,
            passed: growth <= pct,
            message: format!(
                "peak {} against the baseline's {}: {}{:.2}% for a budget of {pct}% ({}): {}",
                size(run.peak_bytes),
                size(base.peak_bytes),
                if growth >= 0.0 { "+" } else { "" },
                growth,
                size(allowed),
                over(run.peak_bytes, allowed)
            ),
        });
    }
    for &(c, limit) in &budgets.max_category {
        let b = run.at_peak.get(c.index()).copied().unwrap_or(0);
        results.push(BudgetResult {
            name: format!("max:{}", c.key()),
            limit: limit as f64,
            measured: b as f64,
            passed: b <= limit,
            message: format!(
                "{} at the peak {} against a budget of {}: {}",
                c.label(),
                size(b),
                size(limit),
                over(b, limit)
            ),
        });
    }
    let grown = baseline.map_or_else(Vec::new, |base| grown(base, run));
    Ok(Outcome {
        passed: results.iter().all(|r| r.passed),
        peak_bytes: run.peak_bytes,
        baseline_peak_bytes: baseline.map(|b| b.peak_bytes),
        budgets: results,
        grown,
    })
}

/// The call sites alive at the peaks that grew most from `base` to `run`.
fn grown(base: &Profile, run: &Profile) -> Vec<Grown> {
    let d = diff(base, run, Align::Iteration, SiteMode::Frame);
    let mut sites: Vec<Grown> = d
        .sites
        .iter()
        .filter(|s| s.delta() > 0)
        .map(|s| Grown {
            site: s.site.clone(),
            baseline_bytes: s.a,
            run_bytes: s.b,
            delta_bytes: s.delta().clamp(i64::MIN.into(), i64::MAX.into()) as i64,
        })
        .collect();
    sites.sort_by(|a, b| b.delta_bytes.cmp(&a.delta_bytes).then_with(|| a.site.cmp(&b.site)));
    sites.truncate(GROWN);
    sites
}
