//! `memscape predict`: the snapshot a PyTorch program would record on a GPU, made on this
//! machine's CPU (docs/predict.md).
//!
//! `memscape predict [--gpu NAME] [--gpu-memory SIZE] [--out FILE] -- COMMAND...` runs the
//! command with a `sitecustomize` that starts `memscape._predict` in its Python: the program
//! runs unchanged on a fake CUDA device, and that Python starts `memscape predict --serve`,
//! which this file also is. The server reads one JSON object per line on its standard input
//! and answers some on its standard output; the core (`snapshot::predict::Predictor`) does
//! the rest:
//!
//! | message | answer |
//! | --- | --- |
//! | `{"frame":[file,line,name]}` (numbered from 0) | none |
//! | `{"stack":[frame...]}` (innermost first, numbered from 0) | none |
//! | `{"alloc":id,"size":n,"stream":s,"stack":k,"t":µs}` | under `--gpu-memory`: `{"ok":1}` or `{"oom":message}` |
//! | `{"free":id,"stack":k,"t":µs}` (where it was freed) | none |
//! | `{"annotation":"START"\|"END","name":...,"t":µs}` | none |
//! | `{"history":bool,"max_entries":n}` | none |
//! | `{"query":1}` | the figures (`allocated`, `peak_reserved`, ...) |
//! | `{"reset_peak":1}`, `{"empty_cache":1}`, `{"fraction":f}` (then a limit) | none |
//! | `{"assume":text}`, `{"incomplete":why}` | none |
//! | `{"dump":path}` | `{"ok":1}` or `{"error":message}` |
//! | `{"top_return":1}` (a function the top level called returns) | none; the frees that follow wait for the next other message, and are left out of a `whole` dump |
//! | `{"end":1}` | none; the server ends |

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use snapshot::predict::{PredictionInfo, Predictor};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The GPU to predict for: h100 (the default), h200, a100, a100-40gb, l4, a10, rtx4090, t4.
    #[arg(long)]
    gpu: Option<String>,
    /// The GPU's memory (`80GiB`, `24G`): allocations beyond it fail as on the GPU, and the
    /// snapshot ends with the out-of-memory error PyTorch would raise.
    #[arg(long, value_parser = crate::parse::parse_size)]
    gpu_memory: Option<u64>,
    /// Write the snapshot of the whole run here (as if recording began with the program).
    /// Snapshots the program dumps itself (`torch.cuda.memory._dump_snapshot`) are written
    /// where it asks in any case.
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// (Internal) serve one prediction on standard input and output: what the program's
    /// Python starts, with the prediction's description as JSON.
    #[arg(long, hide = true, conflicts_with_all = ["gpu", "gpu_memory", "out"])]
    serve: Option<String>,
    /// The program, after `--`: `python train.py --batch 8`.
    #[arg(last = true)]
    command: Vec<OsString>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(info) = args.serve {
        serve(&info)?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(out) = &args.out {
        if out.exists() {
            bail!(
                "{}: already exists; memscape predict does not overwrite files (name another with --out)",
                out.display()
            );
        }
    }
    let launch = Launch { gpu: args.gpu, gpu_memory: args.gpu_memory, command: args.command, quiet: false };
    let out = args.out.as_ref().map(std::path::absolute).transpose()?;
    let status = launch.run(out.as_deref(), None)?;
    if let Some(out) = &out {
        match std::fs::read(out) {
            Ok(bytes) => summarize(out, &bytes)?,
            Err(_) => eprintln!("memscape predict: {} was not written (see the messages above)", out.display()),
        }
    }
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => ExitCode::from(1),
    })
}

/// A program to run under prediction, and the GPU it is predicted for.
pub(crate) struct Launch {
    pub(crate) gpu: Option<String>,
    pub(crate) gpu_memory: Option<u64>,
    pub(crate) command: Vec<OsString>,
    /// The program's standard output goes to standard error.
    pub(crate) quiet: bool,
}

impl Launch {
    /// Runs the program under prediction, the whole run recorded into `out` (if any), with
    /// the doctor's what-if `what_if` made to it (`memscape doctor --verify`).
    pub(crate) fn run(&self, out: Option<&Path>, what_if: Option<&str>) -> anyhow::Result<std::process::ExitStatus> {
        let Some((program, rest)) = self.command.split_first() else {
            bail!("name the program to predict after --: memscape predict -- python train.py");
        };
        let boot = tempfile_dir()?;
        std::fs::write(boot.join("sitecustomize.py"), SITECUSTOMIZE).context("cannot write sitecustomize.py")?;
        let mut pythonpath = OsString::from(boot.as_os_str());
        if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
            pythonpath.push(":");
            pythonpath.push(old);
        }
        let exe = std::env::current_exe().context("cannot find the memscape program itself")?;
        let conf = json!({
            "gpu": self.gpu,
            "gpu_memory": self.gpu_memory,
            "out": out,
            "exe": exe,
            "what_if": what_if,
        });
        let mut cmd = Command::new(program);
        cmd.args(rest).env("PYTHONPATH", pythonpath).env("MEMSCAPE_PREDICT", conf.to_string());
        if self.quiet {
            cmd.stdout(std::process::Stdio::from(std::io::stderr()));
        }
        let status = cmd.status().with_context(|| format!("cannot run {}", program.to_string_lossy()));
        std::fs::remove_dir_all(&boot).ok();
        status
    }
}

/// The `sitecustomize.py` the program's Python runs first. Any failure to start the predictor
/// ends the program before it runs, rather than let it run on the machine's real devices.
const SITECUSTOMIZE: &str = r#"
try:
    import memscape._predict as _memscape_predict
    _memscape_predict._boot()
except BaseException as e:  # noqa: BLE001
    import os, sys
    print(f"memscape predict: cannot predict with this Python ({sys.executable}): {type(e).__name__}: {e}", file=sys.stderr)
    os._exit(97)
"#;

pub(crate) fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let base = std::env::temp_dir();
    for n in 0..1000u32 {
        let d = base.join(format!("memscape-predict-{}-{n}", std::process::id()));
        if std::fs::create_dir(&d).is_ok() {
            return Ok(d);
        }
    }
    bail!("cannot make a directory in {}", base.display())
}

fn summarize(out: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    let loaded =
        snapshot::read(bytes).with_context(|| format!("{}: cannot read the prediction back", out.display()))?;
    let snap = &loaded.snapshot;
    let s = snapshot::stats::summary(snap);
    let info = snap.prediction_info().unwrap_or_default();
    let size = |b: u64| snapshot::stats::format_size(b.into());
    let peak = s.devices.iter().map(|d| d.timeline.peak_bytes).max().unwrap_or(0);
    eprintln!(
        "memscape predict: {}: peak allocated {}, reserved at the end {}, on an {}{}",
        out.display(),
        size(peak),
        size(s.total_reserved),
        info.gpu,
        info.incomplete.as_ref().map_or(String::new(), |why| format!(" (INCOMPLETE: {why})"))
    );
    Ok(())
}

/// The server: messages in, answers out, until `end` or the end of its input.
fn serve(info: &str) -> anyhow::Result<()> {
    let v: Value = serde_json::from_str(info).context("--serve: the prediction's description is not JSON")?;
    let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let info = PredictionInfo {
        gpu: text("gpu"),
        memory_bytes: v.get("memory").and_then(Value::as_u64).unwrap_or(0),
        limited: v.get("limit").and_then(Value::as_bool).unwrap_or(false),
        torch: text("torch"),
        command: v
            .get("command")
            .and_then(Value::as_array)
            .map(|c| c.iter().filter_map(Value::as_str).map(String::from).collect())
            .unwrap_or_default(),
        assumptions: Vec::new(),
        incomplete: None,
    };
    let conf = std::env::var("PYTORCH_CUDA_ALLOC_CONF").unwrap_or_default();
    let mut p = Predictor::new(info, &conf).map_err(anyhow::Error::msg)?;
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let mut respond = |p: &mut Predictor, msg: &Value| -> anyhow::Result<()> {
        if let Some(a) = handle(p, msg).unwrap_or_else(|e| Some(json!({ "error": e }))) {
            writeln!(stdout, "{a}")?;
            stdout.flush()?;
        }
        Ok(())
    };
    // The frees after a function the program's top level called returned (`top_return`),
    // held back: applied before any message that reads or changes the allocator, and left
    // out of the whole run's snapshot if they are the last thing the program did (its
    // objects' teardown as `main()` returned).
    let mut held_back: Option<Vec<Value>> = None;
    for (n, line) in stdin.lines().enumerate() {
        let line = line?;
        let msg: Value = serde_json::from_str(&line).with_context(|| format!("message {}: not JSON", n + 1))?;
        if msg.get("top_return").is_some() {
            held_back.get_or_insert_with(Vec::new);
            continue;
        }
        if let Some(frees) = &mut held_back {
            let whole = msg.get("whole").and_then(Value::as_bool) == Some(true);
            if msg.get("free").is_some() {
                frees.push(msg);
                continue;
            } else if whole && !frees.is_empty() {
                p.assume(&format!(
                    "the program's last {} frees, after a function its top level called (main(), say) returned, are left out as its teardown at exit: the snapshot ends as that function returned",
                    frees.len()
                ));
            } else if !(whole
                || msg.get("stack").is_some_and(Value::is_array)
                || ["frame", "assume", "incomplete", "end"].iter().any(|k| msg.get(k).is_some()))
            {
                for f in held_back.take().unwrap_or_default() {
                    respond(&mut p, &f)?;
                }
            }
        }
        respond(&mut p, &msg)?;
        if msg.get("end").is_some() {
            break;
        }
    }
    Ok(())
}

/// One message: its answer, if it has one.
fn handle(p: &mut Predictor, m: &Value) -> Result<Option<Value>, String> {
    let int = |k: &str| m.get(k).and_then(Value::as_i64).unwrap_or(0);
    let uint = |k: &str| m.get(k).and_then(Value::as_u64).ok_or_else(|| format!("{m}: no {k}"));
    let t = int("t");
    if let Some(id) = m.get("alloc").and_then(Value::as_u64) {
        let r = p.alloc(id, uint("size")?, int("stream"), uint("stack")?, t);
        return Ok(match r {
            Ok(()) if p.limited() => Some(json!({ "ok": 1 })),
            Ok(()) => None,
            Err(oom) if p.limited() => Some(json!({ "oom": oom })),
            Err(e) => return Err(e),
        });
    }
    if let Some(id) = m.get("free").and_then(Value::as_u64) {
        p.free(id, m.get("stack").and_then(Value::as_u64), t)?;
    } else if let Some(f) = m.get("frame").and_then(Value::as_array) {
        let s = |i: usize| f.get(i).and_then(Value::as_str).unwrap_or_default();
        p.frame(s(0), f.get(1).and_then(Value::as_i64).unwrap_or(0), s(2));
    } else if let Some(ids) = m.get("stack").and_then(Value::as_array) {
        let ids: Vec<u64> = ids.iter().filter_map(Value::as_u64).collect();
        p.stack(&ids)?;
    } else if let Some(stage) = m.get("annotation").and_then(Value::as_str) {
        p.annotate(stage, m.get("name").and_then(Value::as_str).unwrap_or_default(), t);
    } else if let Some(on) = m.get("history").and_then(Value::as_bool) {
        p.history(on, m.get("max_entries").and_then(Value::as_u64).unwrap_or(1_000_000) as usize);
    } else if m.get("query").is_some() {
        let f = p.figures();
        return Ok(Some(json!({
            "allocated": f.allocated, "peak_allocated": f.peak_allocated,
            "requested": f.requested, "peak_requested": f.peak_requested,
            "reserved": f.reserved, "peak_reserved": f.peak_reserved,
            "device_free": f.device_free, "allocations": f.allocations, "ooms": f.ooms,
            "segments_allocated": f.segments_allocated, "segments_freed": f.segments_freed,
        })));
    } else if m.get("reset_peak").is_some() {
        p.reset_peak();
    } else if m.get("empty_cache").is_some() {
        p.empty_cache(t);
    } else if let Some(f) = m.get("fraction").and_then(Value::as_f64) {
        p.set_fraction(f)?;
    } else if let Some(a) = m.get("assume").and_then(Value::as_str) {
        p.assume(a);
    } else if let Some(why) = m.get("incomplete").and_then(Value::as_str) {
        p.incomplete(why);
    } else if let Some(path) = m.get("dump").and_then(Value::as_str) {
        let snap = p.snapshot();
        crate::write::write_whole(std::path::Path::new(path), &snap).map_err(|e| format!("{e:#}"))?;
        return Ok(Some(json!({ "ok": 1 })));
    }
    Ok(None)
}
