//! `memscape check`: memory budgets as a CI gate. Exit 0 when every budget holds, 1 when one
//! fails, 2 on bad input; the outcome as text, GitHub workflow annotations or JSON, and
//! optionally a JUnit XML report. What is checked is `snapshot::check`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use snapshot::categories::Category;
use snapshot::check::{Budgets, Outcome};
use snapshot::stats::format_size as fs;

use crate::input::read_rules;
use crate::parse::parse_size;
use crate::ranks::any_profile;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The run to check: a snapshot in any form `stats` reads, or a `memscape profile` file.
    run: PathBuf,
    /// The run to compare with (a snapshot or a profile), for --max-growth and to name the
    /// call sites that grew.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// The highest live bytes allowed, e.g. 70G.
    #[arg(long, value_parser = parse_size)]
    max_peak: Option<u64>,
    /// The peak's growth over the baseline allowed, in percent (`2` or `2%`).
    #[arg(long, value_parser = parse_pct)]
    max_growth: Option<f64>,
    /// Bytes allowed for a category at the peak, e.g. `activation=20G` (repeatable; the
    /// categories of `memscape stats`).
    #[arg(long = "max", value_parser = parse_category_budget)]
    max_category: Vec<(Category, u64)>,
    /// How to print the outcome: text, github (workflow annotations, one line each) or json.
    #[arg(long, default_value = "text", value_parser = ["text", "github", "json"])]
    format: String,
    /// Also write a JUnit XML report (a test case per budget) to this file.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Device (default: the first with an out-of-memory error, else the one with the most events).
    #[arg(long)]
    device: Option<usize>,
    /// Category rules, as for `stats`.
    #[arg(long)]
    rules: Option<PathBuf>,
}

/// 0 when every budget holds, 1 when one fails; an error (2) on bad input.
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let budgets =
        Budgets { max_peak: args.max_peak, max_growth_pct: args.max_growth, max_category: args.max_category.clone() };
    if budgets.max_peak.is_none() && budgets.max_growth_pct.is_none() && budgets.max_category.is_empty() {
        bail!("no budget to check: give --max-peak, --max-growth or --max CATEGORY=SIZE");
    }
    let rules = read_rules(args.rules.as_deref())?;
    let run = any_profile(&args.run, args.device, &rules)?;
    let baseline = args.baseline.as_deref().map(|b| any_profile(b, args.device, &rules)).transpose()?;
    let outcome = snapshot::check::check(&run, baseline.as_ref(), &budgets).map_err(anyhow::Error::msg)?;
    let mut out = std::io::stdout().lock();
    match args.format.as_str() {
        "json" => {
            serde_json::to_writer(&mut out, &outcome)?;
            writeln!(out)?;
        }
        "github" => github(&mut out, &outcome, &args.run)?,
        _ => text(&mut out, &outcome, &args.run)?,
    }
    if let Some(path) = &args.junit {
        let xml = junit(&outcome, &args.run)?;
        std::fs::write(path, xml).with_context(|| format!("{}: cannot write", path.display()))?;
    }
    Ok(if outcome.passed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `2`, `2%` or `0.5`.
fn parse_pct(s: &str) -> Result<f64, String> {
    let n: f64 = s.trim().trim_end_matches('%').trim().parse().map_err(|_| format!("not a percentage: {s:?}"))?;
    if n.is_finite() && n >= 0.0 {
        Ok(n)
    } else {
        Err(format!("not a percentage of at least 0: {s:?}"))
    }
}

/// `activation=20G`.
fn parse_category_budget(s: &str) -> Result<(Category, u64), String> {
    let (name, size) = s.split_once('=').ok_or_else(|| format!("{s:?}: write CATEGORY=SIZE, e.g. activation=20G"))?;
    let c = Category::parse(name).ok_or_else(|| {
        let keys: Vec<&str> = Category::ALL.iter().map(|c| c.key()).collect();
        format!("{name:?} is not a category (one of {})", keys.join(", "))
    })?;
    Ok((c, parse_size(size)?))
}

/// The call sites that grew, as lines.
fn grown_lines(o: &Outcome) -> Vec<String> {
    o.grown
        .iter()
        .map(|g| {
            format!(
                "{} grew by {} ({} -> {})",
                g.site,
                fs(g.delta_bytes.into()),
                fs(g.baseline_bytes.into()),
                fs(g.run_bytes.into())
            )
        })
        .collect()
}

fn text(out: &mut impl std::io::Write, o: &Outcome, run: &Path) -> std::io::Result<()> {
    let failed = o.budgets.iter().filter(|b| !b.passed).count();
    writeln!(
        out,
        "{}: {} ({} of {} budgets hold)",
        run.display(),
        if o.passed { "PASS" } else { "FAIL" },
        o.budgets.len() - failed,
        o.budgets.len()
    )?;
    for b in &o.budgets {
        writeln!(out, "  {} {}: {}", if b.passed { "ok  " } else { "FAIL" }, b.name, b.message)?;
    }
    if !o.grown.is_empty() {
        writeln!(out, "  grew most against the baseline (alive at the peaks):")?;
        for line in grown_lines(o) {
            writeln!(out, "    {line}")?;
        }
    }
    Ok(())
}

/// GitHub Actions workflow commands: one `::error` line per failed budget (naming the call
/// sites that grew most), one `::notice` line for the outcome.
fn github(out: &mut impl std::io::Write, o: &Outcome, run: &Path) -> std::io::Result<()> {
    // Workflow commands end at a newline; `%`, CR and LF in the message are escaped as GitHub
    // reads them, and `,` and `:` in properties too.
    let data = |s: &str| s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A");
    let prop = |s: &str| data(s).replace(':', "%3A").replace(',', "%2C");
    let file = prop(&run.display().to_string());
    let grown = grown_lines(o);
    for b in o.budgets.iter().filter(|b| !b.passed) {
        let mut msg = b.message.clone();
        if !grown.is_empty() {
            msg.push_str("; grew most: ");
            msg.push_str(&grown.join("; "));
        }
        writeln!(out, "::error file={file},title={}::{}", prop(&format!("memscape {}", b.name)), data(&msg))?;
    }
    let held = o.budgets.iter().filter(|b| b.passed).count();
    writeln!(
        out,
        "::notice file={file},title=memscape check::{}",
        data(&format!("{held} of {} memory budgets hold; peak {}", o.budgets.len(), fs(o.peak_bytes.into())))
    )
}

/// A JUnit report: one test suite, one test case per budget (a failure with its message and
/// the call sites that grew).
fn junit(o: &Outcome, run: &Path) -> anyhow::Result<String> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let mut report = Report::new("memscape check");
    let mut suite = TestSuite::new(run.display().to_string());
    let grown = grown_lines(o).join("\n");
    for b in &o.budgets {
        let status = if b.passed {
            TestCaseStatus::success()
        } else {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(b.message.clone()).set_type("memory budget");
            if !grown.is_empty() {
                s.set_description(format!("grew most against the baseline:\n{grown}"));
            }
            s
        };
        let mut case = TestCase::new(b.name.clone(), status);
        case.set_classname("memscape.check");
        case.set_system_out(b.message.clone());
        suite.add_test_case(case);
    }
    report.add_test_suite(suite);
    Ok(report.to_string()?)
}
