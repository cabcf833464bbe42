//! `memscape diff`: two runs compared (peaks, categories at each peak, call sites alive at
//! the peak, allocations and segments only in one), as text or JSON.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::input::read_rules;
use crate::parse::parse_align;
use crate::ranks;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The first run (A).
    a: PathBuf,
    /// The second run (B).
    b: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// How the two totals are put on one axis: iteration, annotation, event or time.
    #[arg(long, default_value = "iteration", value_parser = parse_align)]
    align: snapshot::diff::Align,
    /// Key call sites by the whole stack instead of the first frame of your own code.
    #[arg(long)]
    whole_stack: bool,
    /// Device (default: the one with the most events, in each file).
    #[arg(long)]
    device: Option<usize>,
    /// Category rules, as for `stats`.
    #[arg(long)]
    rules: Option<PathBuf>,
    /// Name files by their path inside their project (after site-packages/, or their last two
    /// folders), so that the same code run from two folders or machines (a prediction and
    /// its recording) has the same call sites. On by default when either file is a prediction.
    #[arg(long)]
    portable_paths: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let Args { a, b, json, align, whole_stack, device, rules, portable_paths } = args;
    let rules = read_rules(rules.as_deref())?;
    let (mut pa, predicted_a) = ranks::snapshot_profile_predicted(&a, device, &rules)?;
    let (mut pb, predicted_b) = ranks::snapshot_profile_predicted(&b, device, &rules)?;
    if portable_paths || predicted_a || predicted_b {
        (pa, pb) = (pa.portable(), pb.portable());
    }
    let by = if whole_stack { snapshot::diff::SiteMode::Stack } else { snapshot::diff::SiteMode::Frame };
    let d = snapshot::diff::diff(&pa, &pb, align, by);
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, &d)?;
        writeln!(out)?;
    } else {
        print_diff(&mut out, &d, &a, &b)?;
    }
    Ok(())
}

fn print_diff(out: &mut impl std::io::Write, d: &snapshot::diff::Diff, a: &Path, b: &Path) -> std::io::Result<()> {
    use snapshot::stats::format_size as fs;
    let delta = |x: u64, y: u64| fs(i128::from(y) - i128::from(x));
    writeln!(out, "A: {}\nB: {}", a.display(), b.display())?;
    writeln!(out, "peak: {} -> {} ({})", fs(d.peak.0.into()), fs(d.peak.1.into()), delta(d.peak.0, d.peak.1))?;
    writeln!(
        out,
        "reserved: {} -> {} ({})",
        fs(d.reserved.0.into()),
        fs(d.reserved.1.into()),
        delta(d.reserved.0, d.reserved.1)
    )?;
    writeln!(out, "at each peak, by category:")?;
    for (c, x, y) in d.categories.iter().filter(|c| c.1 + c.2 > 0) {
        writeln!(out, "  {:>16}  {:>12} -> {:>12} ({})", c.label(), fs((*x).into()), fs((*y).into()), delta(*x, *y))?;
    }
    writeln!(out, "alive at the peak, by call site (largest change first):")?;
    for s in d.sites.iter().take(15) {
        writeln!(
            out,
            "  {:>12}  {} -> {}  {}",
            fs(s.delta()),
            fs(s.a.into()),
            fs(s.b.into()),
            s.site.replace('\n', " <- ")
        )?;
    }
    writeln!(out, "allocations made a different number of times:")?;
    for r in d.allocs.iter().take(15) {
        writeln!(out, "  {} x {} -> {}  {}", fs(r.size.into()), r.count_a, r.count_b, r.site)?;
    }
    writeln!(out, "segments only in A: {}, only in B: {}", d.segments_only_a.len(), d.segments_only_b.len())?;
    for (tag, list) in [("A", &d.segments_only_a), ("B", &d.segments_only_b)] {
        for s in list.iter().take(10) {
            writeln!(out, "  only {tag}: {:#x} {} ({})", s.address, fs(s.size.into()), s.site)?;
        }
    }
    if let Some(n) = &d.align_note {
        writeln!(out, "({n})")?;
    }
    Ok(())
}
