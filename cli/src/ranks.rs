//! `memscape profile` (a snapshot's compact profile as a file of its own) and `memscape ranks`
//! (the overview of a run's ranks, with the outliers): reading the files, in parallel, and
//! printing. What they compute is `snapshot::ranks`.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use rayon::prelude::*;
use snapshot::categories::{Category, Compiled};
use snapshot::diff::Profile;
use snapshot::ranks::{self, ProfileFile, RankInput, Ranks};
use snapshot::stats::format_size as fs;
use snapshot::timeline::{Timeline, TimelineKind};

use crate::input::read_rules;

/// `memscape profile`'s arguments.
#[derive(clap::Args)]
pub(crate) struct ProfileArgs {
    /// A snapshot in any form `stats` reads.
    file: PathBuf,
    /// The profile file to write (`FILE.profile`, by convention).
    #[arg(short, long)]
    output: PathBuf,
    /// Device (default: the one with the most events).
    #[arg(long)]
    device: Option<usize>,
    /// Category rules, as for `stats`.
    #[arg(long)]
    rules: Option<PathBuf>,
}

/// `memscape ranks`'s arguments.
#[derive(clap::Args)]
pub(crate) struct RanksArgs {
    /// Snapshots, profiles or folders of them.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Category rules, as for `stats` (for snapshots; a profile has its categories).
    #[arg(long)]
    rules: Option<PathBuf>,
}

/// `memscape profile FILE -o OUT`.
pub(crate) fn profile(args: ProfileArgs) -> anyhow::Result<()> {
    let ProfileArgs { file, output, device, rules } = args;
    profile_command(&file, &output, device, &read_rules(rules.as_deref())?)
}

/// `memscape ranks FILE...`.
pub(crate) fn ranks(args: RanksArgs) -> anyhow::Result<()> {
    ranks_command(&args.files, args.json, &read_rules(args.rules.as_deref())?)
}

/// The profile of one device of a snapshot file (by default `Snapshot::default_device`: the first that ran out of memory, else the one with the most events).
pub(crate) fn snapshot_profile(path: &Path, device: Option<usize>, rules: &Compiled) -> anyhow::Result<Profile> {
    Ok(snapshot_profile_predicted(path, device, rules)?.0)
}

/// [`snapshot_profile`], and whether the file is a prediction (`memscape predict`).
pub(crate) fn snapshot_profile_predicted(
    path: &Path,
    device: Option<usize>,
    rules: &Compiled,
) -> anyhow::Result<(Profile, bool)> {
    let loaded = crate::input::load(path)?;
    for w in &loaded.warnings {
        eprintln!("memscape: {}: warning: {w}", path.display());
    }
    let snap = &loaded.snapshot;
    let d = snap.pick_device(device).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let tl = Timeline::build(snap, d, TimelineKind::Blocks);
    let cats = snapshot::categories::analyze(snap, &tl, rules);
    Ok((snapshot::diff::profile(snap, &tl, &cats), snap.prediction_info().is_some()))
}

/// `memscape profile FILE -o OUT`.
fn profile_command(file: &Path, output: &Path, device: Option<usize>, rules: &Compiled) -> anyhow::Result<()> {
    if read_profile(file)?.is_some() {
        bail!("{}: already a memscape profile", file.display());
    }
    let profile = snapshot_profile(file, device, rules)?;
    let written = ProfileFile::new(&file.display().to_string(), profile);
    let bytes = written.to_bytes();
    std::fs::write(output, &bytes).with_context(|| format!("{}: cannot write", output.display()))?;
    let p = &written.profile;
    let rank = ranks::rank_from_name(&written.source).map(|r| format!("rank {r}, ")).unwrap_or_default();
    println!(
        "wrote {} ({} bytes): {rank}device {}, peak {}, reserved {}",
        output.display(),
        bytes.len(),
        p.device,
        fs(p.peak_bytes.into()),
        fs(p.reserved_bytes.into())
    );
    Ok(())
}

/// `memscape ranks FILES...`.
fn ranks_command(paths: &[PathBuf], json: bool, rules: &Compiled) -> anyhow::Result<()> {
    let summary = overview(paths, rules)?;
    warn_repeated_ranks(&summary);
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, &summary)?;
        writeln!(out)?;
    } else {
        print_ranks(&mut out, &summary)?;
    }
    Ok(())
}

/// The overview of the ranks in `paths` (files and folders of them), read in parallel.
pub(crate) fn overview(paths: &[PathBuf], rules: &Compiled) -> anyhow::Result<Ranks> {
    let files = expand(paths)?;
    let read: Vec<anyhow::Result<RankInput>> = files.par_iter().map(|f| read_rank(f, rules)).collect();
    let inputs = read.into_iter().collect::<anyhow::Result<Vec<RankInput>>>()?;
    Ok(ranks::summarize(&inputs))
}

/// The files of the arguments, a folder standing for its snapshots and profiles.
fn expand(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for p in paths {
        if !p.is_dir() {
            files.push(p.clone());
            continue;
        }
        let entries = std::fs::read_dir(p).with_context(|| format!("{}: cannot read the folder", p.display()))?;
        let mut names: Vec<String> = Vec::new();
        for e in entries {
            let e = e.with_context(|| format!("{}: cannot read the folder", p.display()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_file() && ranks::is_run_file(&name) {
                names.push(name);
            }
        }
        // A profile named after a snapshot beside it (`X.profile` beside `X`) stands for that
        // snapshot, which is not read again.
        let stood_for = ranks::stood_for_by_profiles(&names.iter().map(String::as_str).collect::<Vec<_>>());
        let mut flags = stood_for.into_iter();
        names.retain(|_| !flags.next().unwrap_or(false));
        if names.is_empty() {
            bail!(
                "{}: no snapshot or profile in this folder (looked for {})",
                p.display(),
                ranks::RUN_SUFFIXES.map(|s| format!("*{s}")).join(", ")
            );
        }
        names.sort();
        files.extend(names.into_iter().map(|n| p.join(n)));
    }
    if files.is_empty() {
        bail!("no file given");
    }
    Ok(files)
}

/// A profile file, read whole; `None` for any other file (which is not read past its start).
pub(crate) fn read_profile(path: &Path) -> anyhow::Result<Option<ProfileFile>> {
    let mut f = std::fs::File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut head = Vec::with_capacity(32);
    (&mut f).take(32).read_to_end(&mut head).with_context(|| format!("{}: cannot read", path.display()))?;
    if !ranks::is_profile(&head) {
        return Ok(None);
    }
    let mut bytes = head;
    f.read_to_end(&mut bytes).with_context(|| format!("{}: cannot read", path.display()))?;
    ProfileFile::from_bytes(&bytes).map(Some).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The profile of a file that is a profile, or of a snapshot profiled now (`device` applies to
/// snapshots; a profile has its device).
pub(crate) fn any_profile(path: &Path, device: Option<usize>, rules: &Compiled) -> anyhow::Result<Profile> {
    Ok(match read_profile(path)? {
        Some(p) => match device {
            Some(d) if d != p.profile.device as usize => {
                bail!("{}: no device {d}: the profile is of device {}", path.display(), p.profile.device)
            }
            _ => p.profile,
        },
        None => snapshot_profile(path, device, rules)?,
    })
}

/// One rank's file: a profile, or a snapshot profiled now.
fn read_rank(path: &Path, rules: &Compiled) -> anyhow::Result<RankInput> {
    let file = path.display().to_string();
    Ok(match read_profile(path)? {
        Some(p) => RankInput::new(file, Some(p.source), p.profile),
        None => RankInput::new(file, None, snapshot_profile(path, None, rules)?),
    })
}

/// A rank read from more than one file is most likely two dumps of one run mixed up.
fn warn_repeated_ranks(r: &Ranks) {
    let mut k = 0;
    while k < r.ranks.len() {
        let same = r.ranks[k..].iter().take_while(|row| row.rank.is_some() && row.rank == r.ranks[k].rank).count();
        if same > 1 {
            let files: Vec<&str> = r.ranks[k..k + same].iter().map(|row| row.file.as_str()).collect();
            eprintln!(
                "memscape: warning: rank {} is in {same} files: {}",
                r.ranks[k].rank.unwrap_or_default(),
                files.join(", ")
            );
        }
        k += same.max(1);
    }
}

fn rank_text(rank: Option<u32>) -> String {
    rank.map_or("-".into(), |r| r.to_string())
}

fn print_ranks(out: &mut impl std::io::Write, r: &Ranks) -> std::io::Result<()> {
    writeln!(out, "{}", r.headline())?;
    // A column per category that holds anything at some rank's peak.
    let shown: Vec<Category> =
        Category::ALL.into_iter().filter(|c| r.ranks.iter().any(|row| row.at_peak[c.index()] > 0)).collect();
    let width = |c: &Category| c.label().len().max(10);
    write!(out, "\n{:>5}  {:>6}  {:>10}  {:>10}", "rank", "device", "peak", "reserved")?;
    for c in &shown {
        write!(out, "  {:>w$}", c.label(), w = width(c))?;
    }
    writeln!(out, "  file")?;
    for row in &r.ranks {
        write!(
            out,
            "{:>5}  {:>6}  {:>10}  {:>10}",
            rank_text(row.rank),
            row.device,
            fs(row.peak_bytes.into()),
            fs(row.reserved_bytes.into())
        )?;
        for c in &shown {
            write!(out, "  {:>w$}", fs(row.at_peak[c.index()].into()), w = width(c))?;
        }
        let source = row.source.as_ref().map(|s| format!(" (from {s})")).unwrap_or_default();
        writeln!(out, "  {}{source}", row.file)?;
    }
    if r.median_rank.is_none() {
        return Ok(());
    }
    if r.outliers.is_empty() {
        return writeln!(out, "\nno outliers");
    }
    writeln!(out, "\noutliers:")?;
    let base = r.median_rank.as_ref().map(|m| format!("rank {} ({})", rank_text(m.rank), m.file)).unwrap_or_default();
    for o in &r.outliers {
        writeln!(
            out,
            "  rank {} ({}): peak {}, {} above the median",
            rank_text(o.rank),
            o.file,
            fs(o.peak_bytes.into()),
            fs(o.excess_bytes.into())
        )?;
        match &o.top_site {
            Some(site) => {
                writeln!(out, "    top site: {site} holds {} more than in {base}", fs(o.top_site_bytes.into()))?
            }
            None => writeln!(out, "    no call site holds more than in {base} at its peak")?,
        }
    }
    Ok(())
}
