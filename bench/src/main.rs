//! `cargo run --release -p bench -- [--sizes 100M,1G] [--dir DIR] [--skip-baselines]`
//! (and `cargo run -p bench -- scale`: how the cost of every analysis grows, see `scale.rs`;
//! `cargo run --release -p bench -- ranks`: `memscape ranks` on 64 and 1,000 profiles, see
//! `ranks.rs`; `open` and `pan`: the viewer's worker on given files, natively, see `open.rs`
//! and `pan.rs`; `plotters`: the viewer's raster against plotters on the same bands, see
//! `plotters.rs`; `trace [--mb N] [--keep DIR]`: a `torch.profiler` Chrome trace of N MB read
//! beside a snapshot pickle of the same size, see `trace.rs`)
//!
//! Generates snapshots with `snapshot::synth`, then measures, each in a fresh process so
//! peak resident memory is honest: this reader, `pickled` (a correct general pickle reader)
//! and Python's `pickle.load`; then the analyses (timeline layout, level-of-detail query,
//! allocator state). Prints one table; paste it into docs/benchmarks.md.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context as _};
use serde_json::json;

mod open;
mod pan;
mod plotters;
mod ranks;
mod replay;
mod rewrites;
mod scale;
mod trace;

fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs inside a child process and prints one JSON line.
fn child(kind: &str, path: &Path, runs: usize) -> anyhow::Result<()> {
    let bytes = std::fs::read(path)?;
    let base_rss = peak_rss_bytes();
    let out = match kind {
        "memscape" => {
            let mut times = Vec::new();
            let mut model = 0;
            for _ in 0..runs {
                let t = Instant::now();
                let loaded = snapshot::read(&bytes)?;
                times.push(t.elapsed().as_secs_f64());
                model = loaded.snapshot.heap_bytes();
            }
            json!({"seconds": median(times), "model_bytes": model})
        }
        "memscape-chunked" => {
            // What the browser does: 4 MiB slices through the incremental reader.
            let mut times = Vec::new();
            let mut model = 0;
            for _ in 0..runs {
                let t = Instant::now();
                let mut l = snapshot::Loader::new(snapshot::Limits::default());
                l.set_size_hint(bytes.len() as u64);
                for c in bytes.chunks(4 << 20) {
                    l.feed(c)?;
                }
                let loaded = l.finish()?;
                times.push(t.elapsed().as_secs_f64());
                model = loaded.snapshot.heap_bytes();
            }
            json!({"seconds": median(times), "model_bytes": model})
        }
        "pickled" => {
            let t = Instant::now();
            let v = pickled::value_from_slice(&bytes, pickled::DeOptions::new())?;
            let secs = t.elapsed().as_secs_f64();
            drop(v);
            json!({"seconds": secs})
        }
        "analyses" => {
            let snap = snapshot::read(&bytes)?.snapshot;
            let d = snap.default_device().context("no device")?;
            let t = Instant::now();
            let tl = snapshot::timeline::Timeline::build(&snap, d, snapshot::timeline::TimelineKind::Blocks);
            let layout = t.elapsed().as_secs_f64();
            let n = f64::from(tl.n_steps());
            let min_bytes = tl.peak_bytes() / 600;
            let mut lod = Vec::new();
            let mut bands = 0;
            for k in 0..20 {
                // Whole trace, then windows zooming into the middle.
                let w = n / f64::from(1u32 << (k % 10));
                let start = (n - w) / 2.0;
                let q = snapshot::timeline::LodQuery { start, end: start + w, columns: 1500, min_bytes };
                let t = Instant::now();
                let r = tl.lod(&q);
                lod.push(t.elapsed().as_secs_f64());
                bands = bands.max(r.bands.len());
            }
            let mut hover = Vec::new();
            for k in 0..1000u32 {
                let step = (u64::from(k) * u64::from(tl.n_steps()) / 1000) as u32;
                let t = Instant::now();
                std::hint::black_box(tl.element_at(step, tl.totals()[step as usize] / 3));
                hover.push(t.elapsed().as_secs_f64());
            }
            let t = Instant::now();
            let st = snapshot::state::StateIndex::build(&snap, d);
            let state_build = t.elapsed().as_secs_f64();
            let mut state = Vec::new();
            let n_entries = snap.trace(d).len();
            for k in 0..50 {
                let e = k * n_entries / 50 + 17;
                let t = Instant::now();
                std::hint::black_box(st.state_after(&snap, Some(e)));
                state.push(t.elapsed().as_secs_f64());
            }
            let state_max = state.iter().copied().fold(0.0, f64::max);
            // Categories: classification and the per-step sweep, then the view's queries.
            let rules = snapshot::categories::Compiled::default();
            let t = Instant::now();
            let cats = snapshot::categories::analyze(&snap, &tl, &rules);
            let categories = t.elapsed().as_secs_f64();
            let mut cat_cols = Vec::new();
            for k in 0..20 {
                let w = n / f64::from(1u32 << (k % 10));
                let start = (n - w) / 2.0;
                let t = Instant::now();
                std::hint::black_box(cats.columns(&tl, start, start + w, 1500));
                cat_cols.push(t.elapsed().as_secs_f64());
            }
            let t = Instant::now();
            let prof = snapshot::diff::profile(&snap, &tl, &cats);
            let profile = t.elapsed().as_secs_f64();
            let t = Instant::now();
            std::hint::black_box(snapshot::diff::diff(
                &prof,
                &prof,
                snapshot::diff::Align::Iteration,
                snapshot::diff::SiteMode::Frame,
            ));
            let diff = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let agreement = snapshot::simulate::replay(&snap, d);
            let replay = t.elapsed().as_secs_f64();
            // The doctor's allocator what-ifs: a baseline and four settings, one state build.
            let t = Instant::now();
            let tuned = snapshot::doctor::tuning::tune(&snap, d, Some(80 << 30), &snapshot::doctor::tuning::OFFERED);
            let tune_s = t.elapsed().as_secs_f64();
            assert!(tuned.is_ok_and(|t| t.len() == 4));
            let lod_max = lod.iter().copied().fold(0.0, f64::max);
            let hover_max = hover.iter().copied().fold(0.0, f64::max);
            json!({
                "elements": tl.elements().len(), "layout_s": layout,
                "lod_median_s": median(lod), "lod_max_s": lod_max, "lod_max_bands": bands,
                "hover_median_s": median(hover), "hover_max_s": hover_max,
                "state_build_s": state_build, "state_median_s": median(state), "state_max_s": state_max,
                "categories_s": categories, "cat_columns_median_s": median(cat_cols.clone()),
                "cat_columns_max_s": cat_cols.iter().copied().fold(0.0, f64::max),
                "iterations": cats.iterations.len(), "profile_s": profile, "diff_s": diff,
                "entries": n_entries, "replay_s": replay, "replay_allocations": agreement.allocations,
                "replay_placed": agreement.placed_as_recorded, "tune_s": tune_s,
            })
        }
        other => bail!("unknown child {other}"),
    };
    let mut out = out;
    out["peak_rss_bytes"] = json!(peak_rss_bytes());
    out["rss_before_bytes"] = json!(base_rss);
    println!("{out}");
    Ok(())
}

fn run_child(kind: &str, path: &Path, runs: usize) -> anyhow::Result<serde_json::Value> {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe).arg("--child").arg(kind).arg(path).arg(runs.to_string()).output()?;
    if !out.status.success() {
        bail!("{kind} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

fn run_python(path: &Path) -> anyhow::Result<serde_json::Value> {
    let script = r#"
import pickle, resource, sys, time, json
data = open(sys.argv[1], 'rb').read()
t = time.perf_counter(); obj = pickle.loads(data); s = time.perf_counter() - t
print(json.dumps({"seconds": s, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"#;
    let out = Command::new("python3").args(["-c", script]).arg(path).output()?;
    if !out.status.success() {
        bail!("python3 failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Wall seconds of `memscape stats --json FILE` (the binary built beside this one: `cargo
/// build --release -p cli`) and of Python loading the same file, whole processes each,
/// alternating, medians of 5.
fn stats_against_python(path: &Path) -> anyhow::Result<(f64, f64)> {
    let exe = std::env::current_exe()?;
    let memscape = exe.with_file_name("memscape");
    if !memscape.exists() {
        bail!("{} is not built (cargo build --release -p cli)", memscape.display());
    }
    let wall = |cmd: &mut Command| -> anyhow::Result<f64> {
        let t = Instant::now();
        let out = cmd.output()?;
        if !out.status.success() {
            bail!("{:?} failed: {}", cmd, String::from_utf8_lossy(&out.stderr));
        }
        Ok(t.elapsed().as_secs_f64())
    };
    let (mut ours, mut python) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        ours.push(wall(Command::new(&memscape).args(["stats", "--json"]).arg(path))?);
        let load = "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))";
        python.push(wall(Command::new("python3").args(["-c", load]).arg(path))?);
    }
    Ok((median(ours), median(python)))
}

fn parse_size(s: &str) -> anyhow::Result<u64> {
    let s = s.trim().to_ascii_uppercase();
    let (n, m) = if let Some(n) = s.strip_suffix('G') {
        (n, 1u64 << 30)
    } else if let Some(n) = s.strip_suffix('M') {
        (n, 1 << 20)
    } else {
        (s.as_str(), 1)
    };
    Ok((n.parse::<f64>()? * m as f64) as u64)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--child") => return child(&args[1], Path::new(&args[2]), args[3].parse()?),
        Some("scale") => return scale::main(&args[1..]),
        Some("ranks") => return ranks::main(&args[1..]),
        Some("open") => return open::main(&args[1..]),
        Some("pan") => return pan::main(&args[1..]),
        Some("plotters") => return plotters::main(&args[1..]),
        Some("replay") => return replay::main(&args[1..]),
        Some("trace") => return trace::main(&args[1..]),
        _ => {}
    }
    let mut sizes = vec!["100M".to_string(), "1G".to_string()];
    let mut dir = std::env::temp_dir().join("memscape-bench");
    let mut baselines = true;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--sizes" => sizes = it.next().context("--sizes VALUE")?.split(',').map(String::from).collect(),
            "--dir" => dir = PathBuf::from(it.next().context("--dir VALUE")?),
            "--skip-baselines" => baselines = false,
            other => bail!("unknown argument {other}"),
        }
    }
    std::fs::create_dir_all(&dir)?;
    println!("memscape reader benchmark ({} cores)", std::thread::available_parallelism().map_or(1, |n| n.get()));
    for size in sizes {
        let target = parse_size(&size)?;
        let path = dir.join(format!("synth-{size}.pickle"));
        if !path.exists() {
            let snap = snapshot::synth::generate(&snapshot::synth::Options::for_bytes(target));
            let f = std::io::BufWriter::new(std::fs::File::create(&path)?);
            snapshot::write::write_pickle(&snap, f)?;
        }
        let file_bytes = std::fs::metadata(&path)?.len();
        let mb = file_bytes as f64 / 1e6;
        let ours = run_child("memscape", &path, if file_bytes < 400 << 20 { 5 } else { 2 })?;
        let chunked = run_child("memscape-chunked", &path, if file_bytes < 400 << 20 { 5 } else { 2 })?;
        let secs = ours["seconds"].as_f64().unwrap_or(0.0);
        let model = ours["model_bytes"].as_u64().unwrap_or(0);
        println!("\n## {} ({:.1} MB, {})", path.display(), mb, size);
        println!("| reader | seconds | MB/s | peak RSS (MB) | vs memscape |");
        println!("|---|---:|---:|---:|---:|");
        let row = |name: &str, v: &serde_json::Value| {
            let s = v["seconds"].as_f64().unwrap_or(f64::NAN);
            let rss = v["peak_rss_bytes"].as_u64().unwrap_or(0) as f64 / 1e6;
            println!("| {name} | {s:.3} | {:.0} | {rss:.0} | {:.1}x |", mb / s, s / secs);
        };
        row("memscape (whole file)", &ours);
        row("memscape (4 MiB chunks)", &chunked);
        if baselines {
            if file_bytes < 150 << 20 {
                match run_child("pickled", &path, 1) {
                    Ok(v) => row("pickled 1.2", &v),
                    Err(e) => println!("| pickled 1.2 | failed: {e} | | | |"),
                }
            } else {
                println!("| pickled 1.2 | not run: it took 139x the file in memory at 100 MB, more than this machine has at this size | | | |");
            }
            match run_python(&path) {
                Ok(v) => row("python3 pickle.loads", &v),
                Err(e) => println!("| python3 pickle.loads | failed: {e} | | | |"),
            }
            match stats_against_python(&path) {
                Ok((ours, python)) => println!(
                    "\nwhole commands, median of 5, alternating: `memscape stats --json` (read + every analysis) {ours:.3} s; \
                     `python3 -c 'pickle.load(open(f, \"rb\"))'` {python:.3} s: memscape {:.1}x faster",
                    python / ours
                ),
                Err(e) => println!("\nwhole commands: not run: {e}"),
            }
        }
        println!("\nmodel: {:.1} MB = {:.2}x the file", model as f64 / 1e6, model as f64 / file_bytes as f64);
        let a = run_child("analyses", &path, 1)?;
        let ms = |k: &str| a[k].as_f64().unwrap_or(f64::NAN) * 1e3;
        println!(
            "timeline layout of {} allocations: {:.0} ms; LOD query 1500 px: median {:.2} ms, max {:.2} ms ({} bands max); hover lookup: median {:.3} ms, max {:.3} ms",
            a["elements"], ms("layout_s"), ms("lod_median_s"), ms("lod_max_s"), a["lod_max_bands"], ms("hover_median_s"), ms("hover_max_s")
        );
        println!(
            "allocator state: checkpoints built in {:.0} ms; state after any event: median {:.2} ms, max {:.2} ms",
            ms("state_build_s"),
            ms("state_median_s"),
            ms("state_max_s")
        );
        println!(
            "categories ({} iterations): analysed in {:.0} ms (the layout above: {:.0} ms); category columns 1500 px: median {:.2} ms, max {:.2} ms; diff profile {:.0} ms, diff {:.1} ms",
            a["iterations"], ms("categories_s"), ms("layout_s"), ms("cat_columns_median_s"), ms("cat_columns_max_s"), ms("profile_s"), ms("diff_s")
        );
        println!(
            "allocator replay of {} entries: {:.0} ms ({} of {} allocations placed as recorded)",
            a["entries"],
            ms("replay_s"),
            a["replay_placed"],
            a["replay_allocations"]
        );
        println!("allocator what-ifs (the file's settings and the doctor's four, 80 GiB): {:.0} ms", ms("tune_s"));
    }
    Ok(())
}

/// The scaling check as `scripts/test` runs it: a test of this binary, so that the one `cargo
/// test` of the workspace builds it with everything else (`cargo run -p bench -- scale` after
/// that test build compiled the workspace's crates again: 76 s of a clean run on two cores).
/// `cargo test --workspace --exclude app --locked --bin bench -- --ignored --nocapture scaling`;
/// `MEMSCAPE_SCALE_ARGS` takes `scale`'s own arguments (`--only predict`).
#[cfg(test)]
mod ci {
    #[test]
    #[ignore = "times every analysis at N and 4N for a minute: scripts/test runs it on its own"]
    fn scaling() -> anyhow::Result<()> {
        let args: Vec<String> =
            std::env::var("MEMSCAPE_SCALE_ARGS").unwrap_or_default().split_whitespace().map(String::from).collect();
        super::scale::main(&args)
    }
}
