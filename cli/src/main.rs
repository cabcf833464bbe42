//! `memscape`: the command line. This file parses the arguments and hands each subcommand to
//! its module (`stats.rs`, `doctor.rs`, ...); what they compute is `snapshot`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod check;
mod convert;
mod diff;
mod doctor;
mod html;
mod input;
mod launch;
mod mcp;
mod merge;
mod parse;
mod predict;
mod ranks;
mod replay;
mod skill;
mod slice;
mod stats;
mod synth;
mod verify;
mod write;

#[derive(Parser)]
#[command(name = "memscape", version, about = "Understand PyTorch GPU memory snapshots")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the statistics of a snapshot (those of `_memory_viz.py stats`, plus per-device timelines).
    Stats(stats::Args),
    /// Compare two runs: peaks, categories at each peak, call sites alive at the peak,
    /// allocations made in one and not the other, segments only in one.
    Diff(diff::Args),
    /// Why did it run out of memory: for every out-of-memory error, the allocator's figures just
    /// before it, a verdict (exhausted, fragmentation, other limit), who holds the memory and
    /// advice with predicted effects; the headroom at the peak; what-if budgets.
    Doctor(doctor::Args),
    /// Write the compact profile of a snapshot (what `diff` and `ranks` compare: peak,
    /// reserved, categories and call sites at the peak, a totals curve) as a file of its own:
    /// run it where each rank's snapshot is written, then `memscape ranks` on the profiles.
    Profile(ranks::ProfileArgs),
    /// The ranks of a run side by side (rank, device, peak, reserved, categories at the peak)
    /// and the outliers: ranks whose peak is well above the median, with the call site that
    /// makes the difference. Files are snapshots or profiles, mixed; a folder stands for its
    /// snapshots and profiles.
    Ranks(ranks::RanksArgs),
    /// Write one self-contained HTML file with the viewer and this snapshot: it opens from
    /// disk, offline, with no network at all (the replacement for `_memory_viz.py trace_plot`).
    Html(html::Args),
    /// Memory budgets as a CI gate: the run's peak, its growth over a baseline run and its
    /// categories at the peak against limits. Exit 0 when every budget holds, 1 when one
    /// fails (naming the call sites that grew most against the baseline), 2 on bad input.
    Check(check::Args),
    /// A Model Context Protocol server on standard input and output, for coding agents: tools
    /// to open snapshots (kept open), and stats, doctor, what-if, categories, largest
    /// allocations, flame lines, search, allocator state, diff, ranks and check.
    Mcp(mcp::Args),
    /// The agent skill (SKILL.md): how to record a snapshot, which command or MCP tool answers
    /// which question, how to read the doctor. Printed, or installed into a skills folder.
    Skill(skill::Args),
    /// One snapshot from PyTorch's own and a `memscape capture` of the same process: PyTorch's
    /// segments with their Python frames, plus every driver allocation outside them (NCCL,
    /// cuBLAS workspaces, CuPy...) marked as outside PyTorch's allocator.
    Merge(merge::Args),
    /// Cut a window of a recording (the last N entries, a range of entries or of time, or an
    /// annotation's span) into a smaller snapshot in PyTorch's own format: what was alive when
    /// the window starts appears as memory allocated before the recording.
    Slice(slice::Args),
    /// Write any file memscape reads (a snapshot as JSON, gzip, zstd or a `_memory_viz.py`
    /// HTML page) as a snapshot in PyTorch's own pickle format, which `_memory_viz.py` reads.
    Convert(convert::Args),
    /// Replay a recording through a simulation of PyTorch's caching allocator: the
    /// allocations it places where PyTorch did, the segments it makes and frees when PyTorch
    /// did, and the first decision it makes otherwise (a check that memscape understands the
    /// allocator, before trusting its allocator what-ifs).
    Replay(replay::Args),
    /// Predict the snapshot a PyTorch program would record on a GPU, on this machine's CPU:
    /// the program runs unchanged on a fake CUDA device (no tensor data is allocated), its
    /// allocations go through a simulation of PyTorch's caching allocator, and its own
    /// `_dump_snapshot` calls (or --out) write the predicted snapshot.
    Predict(predict::Args),
    /// Generate a realistic synthetic snapshot (deterministic for a given seed).
    Synth(synth::Args),
    /// Run a CUDA program and record every device allocation it makes (needs an NVIDIA GPU).
    Capture(launch::Args),
}

fn main() -> ExitCode {
    let done = |r: anyhow::Result<()>| r.map(|()| ExitCode::SUCCESS);
    let result = match Cli::parse().command {
        Command::Stats(a) => done(stats::run(a)),
        Command::Diff(a) => done(diff::run(a)),
        Command::Doctor(a) => done(doctor::run(a)),
        Command::Profile(a) => done(ranks::profile(a)),
        Command::Ranks(a) => done(ranks::ranks(a)),
        Command::Html(a) => done(html::run(a)),
        Command::Check(a) => check::run(a),
        Command::Mcp(a) => done(mcp::run(a)),
        Command::Skill(a) => done(skill::run(a)),
        Command::Merge(a) => done(merge::run(a)),
        Command::Slice(a) => done(slice::run(a)),
        Command::Convert(a) => done(convert::run(a)),
        Command::Replay(a) => done(replay::run(a)),
        Command::Synth(a) => done(synth::run(a)),
        // The program's own exit code is memscape's.
        Command::Predict(a) => predict::run(a),
        // The program's own exit code is memscape's.
        Command::Capture(a) => launch::run(a),
    };
    result.unwrap_or_else(|e| {
        if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) {
            return ExitCode::SUCCESS;
        }
        eprintln!("memscape: {e:#}");
        ExitCode::from(2)
    })
}
