//! `cargo run --release -p bench -- ranks [--counts 64,1000] [--entries N] [--dir DIR]`: the
//! time of `memscape ranks` (the release binary beside this one: `cargo build --release -p
//! cli`) over folders of generated profiles, a whole process each, median of 5.
//!
//! Sixteen training loops of `--entries` trace entries each (seeds 1 to 16; the one of rank 5
//! with a 2 GiB extra activation (a peak of about 18 GiB)) are profiled once; a run of `count` ranks is their profiles
//! written as `rank0.profile` to `rank{count-1}.profile`, rank k holding loop k mod 16 (rank 5
//! the planted one, the other ranks the fifteen others in turn). The check that the command
//! names rank 5 alone, with the planted call site, is part of the run.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context as _};
use snapshot::categories::{analyze, Compiled};
use snapshot::ranks::ProfileFile;
use snapshot::synth::{generate, Options, EXTRA_SITE};
use snapshot::timeline::{Timeline, TimelineKind};

const LOOPS: u64 = 16;
const PLANTED: u64 = 5;

/// Runs the benchmark.
pub fn main(args: &[String]) -> anyhow::Result<()> {
    let mut counts = vec![64usize, 1000];
    let mut entries = 50_000usize;
    let mut dir = std::env::temp_dir().join("memscape-bench-ranks");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--counts" => {
                counts = it.next().context("--counts N,M")?.split(',').map(str::parse).collect::<Result<_, _>>()?
            }
            "--entries" => entries = it.next().context("--entries N")?.parse()?,
            "--dir" => dir = PathBuf::from(it.next().context("--dir DIR")?),
            other => bail!("unknown argument {other} (ranks takes --counts N,M, --entries N, --dir DIR)"),
        }
    }
    let memscape = std::env::current_exe()?.with_file_name("memscape");
    if !memscape.exists() {
        bail!("{} is not built (cargo build --release -p cli)", memscape.display());
    }
    let t = Instant::now();
    let loops: Vec<Vec<u8>> = (0..LOOPS)
        .map(|k| {
            let extra = if k == PLANTED { 2 << 30 } else { 0 };
            let opts =
                Options { target_entries: entries, seed: k + 1, extra_activation_bytes: extra, ..Default::default() };
            let snap = generate(&opts);
            let tl = Timeline::build(&snap, 0, TimelineKind::Blocks);
            let cats = analyze(&snap, &tl, &Compiled::default());
            let profile = snapshot::diff::profile(&snap, &tl, &cats);
            ProfileFile::new(&format!("loop{k}.pickle"), profile).to_bytes()
        })
        .collect();
    let mean = loops.iter().map(Vec::len).sum::<usize>() / loops.len();
    println!(
        "memscape ranks: {LOOPS} generated loops of {entries} entries profiled in {:.1} s; a profile is {:.0} KB on average; {} cores",
        t.elapsed().as_secs_f64(),
        mean as f64 / 1e3,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("\n| ranks | profiles (MB) | memscape ranks (s), median of 5 | min | max |");
    println!("|---:|---:|---:|---:|---:|");
    for count in counts {
        let folder = dir.join(format!("run-{count}"));
        std::fs::remove_dir_all(&folder).ok();
        std::fs::create_dir_all(&folder)?;
        let mut total = 0;
        for r in 0..count as u64 {
            // Only rank 5 holds the planted loop: the others that would, hold the next one.
            let k = match r % LOOPS {
                PLANTED if r != PLANTED => PLANTED + 1,
                k => k,
            };
            let bytes = &loops[k as usize];
            total += bytes.len();
            std::fs::write(folder.join(format!("rank{r}.profile")), bytes)?;
        }
        let mut times = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let out = Command::new(&memscape).args(["ranks", "--json"]).arg(&folder).output()?;
            times.push(t.elapsed().as_secs_f64());
            if !out.status.success() {
                bail!("memscape ranks failed: {}", String::from_utf8_lossy(&out.stderr));
            }
            check(&out.stdout, count)?;
        }
        times.sort_by(f64::total_cmp);
        println!(
            "| {count} | {:.1} | {:.3} | {:.3} | {:.3} |",
            total as f64 / 1e6,
            times[times.len() / 2],
            times[0],
            times[times.len() - 1]
        );
        std::fs::remove_dir_all(&folder).ok();
    }
    Ok(())
}

/// The command saw every rank and named the planted one alone.
fn check(json: &[u8], count: usize) -> anyhow::Result<()> {
    let v: serde_json::Value = serde_json::from_slice(json)?;
    let rows = v["ranks"].as_array().map_or(0, Vec::len);
    let outliers: Vec<(u64, &str)> = v["outliers"]
        .as_array()
        .map(|o| {
            o.iter().map(|o| (o["rank"].as_u64().unwrap_or(u64::MAX), o["top_site"].as_str().unwrap_or(""))).collect()
        })
        .unwrap_or_default();
    if rows != count || outliers != [(PLANTED, EXTRA_SITE)] {
        bail!("memscape ranks saw {rows} of {count} ranks and named {outliers:?}");
    }
    Ok(())
}
