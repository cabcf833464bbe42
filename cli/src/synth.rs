//! `memscape synth`: a generated snapshot (`snapshot::synth`), and what it planted as JSON.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

use anyhow::Context as _;

use crate::parse::parse_size;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Approximate size of the pickle, e.g. 100M or 1G.
    #[arg(long, value_parser = parse_size, conflicts_with = "entries")]
    size: Option<u64>,
    /// Approximate number of trace entries.
    #[arg(long)]
    entries: Option<usize>,
    /// Number of devices.
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// Transformer layers of the simulated model.
    #[arg(long, default_value_t = 24)]
    layers: usize,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// End with an out-of-memory event.
    #[arg(long)]
    oom: bool,
    /// End with an out-of-memory error caused by fragmentation (free bytes enough, no
    /// free block large enough, the device full).
    #[arg(long)]
    fragmentation_oom: bool,
    /// Plant a leak: keep a tensor of this size every iteration (e.g. 8M).
    #[arg(long, value_parser = parse_size)]
    leak: Option<u64>,
    /// Plant an extra activation of this size in every iteration (e.g. 24M).
    #[arg(long, value_parser = parse_size)]
    extra_activation: Option<u64>,
    /// The optimizer whose state the first step makes: adamw, adam, sgd-momentum, sgd,
    /// adam8bit, adafactor.
    #[arg(long, default_value = "adamw", value_parser = parse_optimizer)]
    optimizer: snapshot::synth::OptimizerKind,
    /// Training steps before the recording starts: parameters and optimizer state are then
    /// blocks of the final snapshot without frames, as in a recording started mid-training.
    #[arg(long, default_value_t = 0)]
    warmup_steps: usize,
    /// Leave out torch.optim's record_function annotations.
    #[arg(long)]
    no_annotations: bool,
    /// End the recording after its first forward pass.
    #[arg(long)]
    end_in_forward: bool,
    /// The allocator's settings, as PYTORCH_CUDA_ALLOC_CONF writes them
    /// (e.g. expandable_segments:True,max_split_size_mb:128; roundup_power2_divisions takes one
    /// value for every size here).
    #[arg(long, value_name = "CONF")]
    alloc_conf: Option<String>,
    /// Also write what was planted (bytes per category at the peak, the leak's and the
    /// extra activation's call sites) as JSON to this file.
    #[arg(long)]
    truth: Option<PathBuf>,
    /// Output file (`.gz` is gzip-compressed).
    #[arg(short, long)]
    output: PathBuf,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        size,
        entries,
        devices,
        layers,
        seed,
        oom,
        fragmentation_oom,
        leak,
        extra_activation,
        optimizer,
        warmup_steps,
        no_annotations,
        end_in_forward,
        alloc_conf,
        truth,
        output,
    } = args;
    let mut opts = match (size, entries) {
        (Some(b), _) => snapshot::synth::Options::for_bytes(b),
        (None, Some(n)) => snapshot::synth::Options { target_entries: n, ..Default::default() },
        (None, None) => snapshot::synth::Options::default(),
    };
    opts.devices = devices;
    opts.layers = layers;
    opts.seed = seed;
    opts.oom = oom;
    opts.fragmentation_oom = fragmentation_oom;
    opts.leak_bytes = leak.unwrap_or(0);
    opts.extra_activation_bytes = extra_activation.unwrap_or(0);
    opts.optimizer = optimizer;
    opts.warmup_steps = warmup_steps;
    opts.annotations = !no_annotations;
    opts.end_in_forward = end_in_forward;
    if let Some(conf) = alloc_conf {
        let p =
            snapshot::simulate::Policy::default().with_conf(&conf).map_err(|e| anyhow::anyhow!("--alloc-conf: {e}"))?;
        opts.allocator = snapshot::synth::AllocatorOptions {
            expandable_segments: p.expandable,
            max_split_size: p.max_split,
            roundup_power2_divisions: p.divisions.iter().copied().max().unwrap_or(0),
            garbage_collection_threshold: p.gc_threshold,
        };
    }
    let (snap, planted) = snapshot::synth::generate_with_truth(&opts);
    if let Some(path) = truth {
        use snapshot::categories::Category;
        let at_peak: serde_json::Map<String, serde_json::Value> =
            Category::ALL.iter().map(|c| (c.key().to_string(), planted.at_peak[c.index()].into())).collect();
        let json = serde_json::json!({
            "peak_bytes": planted.peak_bytes,
            "peak_reserved_bytes": planted.peak_reserved_bytes,
            "at_peak": at_peak,
            "iterations": planted.iterations,
            "leak": (opts.leak_bytes > 0).then(|| serde_json::json!({"site": snapshot::synth::LEAK_SITE, "bytes_per_iteration": opts.leak_bytes})),
            "extra_activation": (opts.extra_activation_bytes > 0).then(|| serde_json::json!({"site": snapshot::synth::EXTRA_SITE, "bytes": opts.extra_activation_bytes})),
        });
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    let f = File::create(&output).with_context(|| format!("{}: cannot create", output.display()))?;
    let gz = output.extension().is_some_and(|e| e == "gz");
    let r = if gz {
        let mut enc = flate2::write::GzEncoder::new(BufWriter::new(f), flate2::Compression::default());
        snapshot::write::write_pickle(&snap, &mut enc).and_then(|_| enc.finish().map(|_| ()))
    } else {
        snapshot::write::write_pickle(&snap, BufWriter::new(f))
    };
    r.with_context(|| format!("{}: cannot write", output.display()))?;
    let n: usize = snap.device_traces.iter().flatten().map(|t| t.len()).sum();
    let bytes = std::fs::metadata(&output).map(|m| m.len()).unwrap_or(0);
    eprintln!("wrote {} ({bytes} bytes, {n} trace entries, {} segments)", output.display(), snap.segments.len());
    Ok(())
}

fn parse_optimizer(s: &str) -> Result<snapshot::synth::OptimizerKind, String> {
    use snapshot::synth::OptimizerKind;
    OptimizerKind::ALL.into_iter().find(|k| k.key() == s).ok_or_else(|| {
        let keys: Vec<&str> = OptimizerKind::ALL.iter().map(|k| k.key()).collect();
        format!("not an optimizer: {s:?} (one of {})", keys.join(", "))
    })
}
