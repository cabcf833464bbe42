//! `memscape mcp`: a Model Context Protocol server over standard input and output, on the
//! official Rust SDK (`rmcp`). Each tool has a JSON schema (from its parameters' types) and a
//! description written for a model; the answers are `session.rs`'s. Files are read once and
//! kept open; nothing is written and nothing leaves the machine.

mod lines;
mod session;

use std::sync::Mutex;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::{tool, tool_handler, tool_router, ServerHandler, ServiceExt as _};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use snapshot::categories::Category;

use session::Session;

/// `memscape mcp`'s arguments (none: it serves standard input and output).
#[derive(clap::Args)]
pub(crate) struct Args {}

/// Serves until the client closes standard input.
pub(crate) fn run(_: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let pipes = lines::filtered(tokio::io::stdin(), tokio::io::stdout());
        let service = Server::new().serve(pipes).await?;
        service.waiting().await?;
        anyhow::Ok(())
    })
}

const LIMIT: usize = 10;

fn limit(l: Option<usize>) -> usize {
    l.unwrap_or(LIMIT).clamp(1, 1000)
}

/// A file and, optionally, its device.
#[derive(Deserialize, JsonSchema)]
struct FileArgs {
    /// Path of a PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`: pickle,
    /// .pickle.gz, JSON, or a `_memory_viz.py` HTML page).
    path: String,
    /// CUDA device index (default: the first device that ran out of memory, else the busiest).
    device: Option<usize>,
    /// How many rows each list keeps (default 10).
    limit: Option<usize>,
}

#[derive(Deserialize, JsonSchema)]
struct OpenArgs {
    /// Path of a PyTorch memory snapshot.
    path: String,
}

#[derive(Deserialize, JsonSchema)]
struct AtArgs {
    /// Path of a PyTorch memory snapshot.
    path: String,
    /// CUDA device index (default: the first device that ran out of memory, else the busiest).
    device: Option<usize>,
    /// A step of the Active Memory Timeline (default: the peak).
    step: Option<u32>,
    /// How many rows each list keeps (default 10).
    limit: Option<usize>,
}

#[derive(Deserialize, JsonSchema)]
struct WhatIfArgs {
    /// Path of a PyTorch memory snapshot.
    path: String,
    /// CUDA device index (default: the first device that ran out of memory, else the busiest).
    device: Option<usize>,
    /// Also predict the peak with the batch size times this factor (e.g. 1.5).
    batch_factor: Option<f64>,
    /// Also run the recorded trace through the simulated caching allocator under these
    /// settings, as PYTORCH_CUDA_ALLOC_CONF writes them (e.g. "expandable_segments:True").
    alloc_conf: Option<String>,
    /// The device's memory in bytes for alloc_conf (default: what the process could reach at
    /// its first out-of-memory error, else the device's memory where the file says it).
    device_memory_bytes: Option<u64>,
}

#[derive(Deserialize, JsonSchema)]
struct SearchArgs {
    /// Path of a PyTorch memory snapshot.
    path: String,
    /// CUDA device index (default: the first device that ran out of memory, else the busiest).
    device: Option<usize>,
    /// What to look for: text in a frame (`attention`), a regular expression, an address
    /// (`0x7f3a00000000`), or a call site exactly as other tools name it (`model.py:88:forward`).
    query: String,
    /// `text` (default), `regex`, `address` or `site`.
    mode: Option<String>,
    /// How many matches to list (default 10).
    limit: Option<usize>,
}

#[derive(Deserialize, JsonSchema)]
struct StateArgs {
    /// Path of a PyTorch memory snapshot.
    path: String,
    /// CUDA device index (default: the first device that ran out of memory, else the busiest).
    device: Option<usize>,
    /// The state after this trace entry (default: the end).
    entry: Option<usize>,
}

#[derive(Deserialize, JsonSchema)]
struct DiffArgs {
    /// The first run (A): a snapshot or a `memscape profile` file.
    a: String,
    /// The second run (B).
    b: String,
    /// CUDA device index in both (default: each file's own).
    device: Option<usize>,
    /// How many rows each list keeps (default 10).
    limit: Option<usize>,
}

#[derive(Deserialize, JsonSchema)]
struct RanksArgs {
    /// Snapshots or `memscape profile` files, one per rank, or folders of them.
    paths: Vec<String>,
    /// How many ranks and outliers to list (default 10).
    limit: Option<usize>,
}

#[derive(Deserialize, JsonSchema)]
struct CheckArgs {
    /// The run to check: a snapshot or a `memscape profile` file.
    run: String,
    /// The run to compare with (needed for max_growth_pct; names the call sites that grew).
    baseline: Option<String>,
    /// The highest live bytes allowed.
    max_peak_bytes: Option<u64>,
    /// The peak's growth over the baseline allowed, in percent.
    max_growth_pct: Option<f64>,
    /// Bytes allowed per category at the peak, e.g. {"activation": 21474836480}. Categories:
    /// parameter, optimizer_state, gradient, input, activation, autograd_detail, temporary,
    /// unknown, outside_allocator, persistent.
    max_category_bytes: Option<std::collections::BTreeMap<String, u64>>,
    /// CUDA device index (default: the first device that ran out of memory, else the busiest).
    device: Option<usize>,
}

/// The server: the open files behind a lock (tools are called one at a time anyway).
#[derive(Clone)]
struct Server {
    session: std::sync::Arc<Mutex<Session>>,
    tool_router: ToolRouter<Self>,
}

type Out = Result<Json<Value>, String>;

impl Server {
    fn with<R>(&self, f: impl FnOnce(&mut Session) -> R) -> R {
        let mut s = self.session.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut s)
    }
}

#[tool_router(router = tool_router)]
impl Server {
    fn new() -> Server {
        Server { session: Default::default(), tool_router: Self::tool_router() }
    }

    #[tool(
        name = "open",
        description = "Read a PyTorch CUDA memory snapshot once and keep it open for the other tools (they open it themselves too). Returns its devices with trace entries, peak live bytes, bytes reserved at the end and out-of-memory errors, the device the other tools use by default, and reader warnings. Bytes come as {bytes, human}."
    )]
    async fn open(&self, Parameters(a): Parameters<OpenArgs>) -> Out {
        self.with(|s| s.open(&a.path)).map(Json)
    }

    #[tool(
        name = "stats",
        description = "Statistics of one device of a snapshot, as `memscape stats --json`: trace entries, reserved bytes, the allocation timeline's peak and final bytes, history overflow, private (CUDA graph) pools, and the categories (parameter, optimizer_state, gradient, activation, ...) at the peak with the memory budget, training iterations, leak suspects and what was inferred of memory alive before the recording."
    )]
    async fn stats(&self, Parameters(a): Parameters<FileArgs>) -> Out {
        self.with(|s| s.stats(&a.path, a.device, limit(a.limit))).map(Json)
    }

    #[tool(
        name = "doctor",
        description = "Why a run ran out of memory, as `memscape doctor --json`: for every out-of-memory error the allocator's figures just before it (requested, device free, reserved, allocated, free in cache, largest free block per pool), a verdict (exhausted, fragmentation, other_limit) with its reason, the call sites holding the memory, and advice (allocator settings, zero_grad, checkpointing, another optimizer) with predicted effects; the peak and its headroom; the what-if table. Start here for an OOM."
    )]
    async fn doctor(&self, Parameters(a): Parameters<FileArgs>) -> Out {
        self.with(|s| s.doctor(&a.path, a.device, limit(a.limit))).map(Json)
    }

    #[tool(
        name = "what_if",
        description = "Predicted peak of the run under changes of its training setup: activation checkpointing per layer, bf16 activations, SGD with momentum / 8-bit Adam / Adafactor instead of the run's optimizer, zero_grad(set_to_none=True) before forward, batch x2 and x0.5 (and x batch_factor if given). Each row says whether it applies and what it assumes. With alloc_conf (e.g. \"expandable_segments:True\", \"max_split_size_mb:512\"), also the trace run through the simulated caching allocator under those settings: the peak reserved against the file's own settings and which out-of-memory errors would not happen (a simulation of this trace)."
    )]
    async fn what_if(&self, Parameters(a): Parameters<WhatIfArgs>) -> Out {
        self.with(|s| s.what_if(&a.path, a.device, a.batch_factor, a.alloc_conf.as_deref(), a.device_memory_bytes))
            .map(Json)
    }

    #[tool(
        name = "categories",
        description = "What the memory is for at the peak (or at a step): bytes per category (parameter, optimizer_state, gradient, input, activation, autograd_detail, temporary, unknown, outside_allocator, persistent), the budget parameters + optimizer state + max(gradients + optimizer intermediates, activations), iterations found, and what was inferred of memory alive before the recording."
    )]
    async fn categories(&self, Parameters(a): Parameters<AtArgs>) -> Out {
        self.with(|s| s.categories(&a.path, a.device, a.step)).map(Json)
    }

    #[tool(
        name = "largest",
        description = "The largest allocations alive at the peak (or at a step): address, size, category with the rule that decided it, and the line of the user's own code that allocated it (`file:line:function`)."
    )]
    async fn largest(&self, Parameters(a): Parameters<AtArgs>) -> Out {
        self.with(|s| s.largest(&a.path, a.device, a.step, limit(a.limit))).map(Json)
    }

    #[tool(
        name = "flame",
        description = "The lines of the user's own code holding the most memory at the peak (or at a step), heaviest first: the flame graph reduced to its call sites."
    )]
    async fn flame(&self, Parameters(a): Parameters<AtArgs>) -> Out {
        self.with(|s| s.flame(&a.path, a.device, a.step, limit(a.limit))).map(Json)
    }

    #[tool(
        name = "search",
        description = "Find allocations by text in their stack frames, a regular expression, an address, or a call site; returns how many match and the first ones with size, lifetime in steps, category and call site."
    )]
    async fn search(&self, Parameters(a): Parameters<SearchArgs>) -> Out {
        let mode = a.mode.as_deref().unwrap_or("text");
        self.with(|s| s.search(&a.path, a.device, &a.query, mode, limit(a.limit))).map(Json)
    }

    #[tool(
        name = "state",
        description = "The caching allocator's state after a trace entry (default: the end): segments, reserved, allocated, free in the cache and the largest free block, per pool and stream. Fragmentation shows as much free in the cache with a small largest free block."
    )]
    async fn state(&self, Parameters(a): Parameters<StateArgs>) -> Out {
        self.with(|s| s.state(&a.path, a.device, a.entry)).map(Json)
    }

    #[tool(
        name = "diff",
        description = "Compare two runs, as `memscape diff --json`: peaks, reserved, categories at each peak, the call sites alive at the peaks whose bytes changed (largest change first), allocations made a different number of times, segments only in one. Files are snapshots or `memscape profile` files."
    )]
    async fn diff(&self, Parameters(a): Parameters<DiffArgs>) -> Out {
        self.with(|s| s.diff(&a.a, &a.b, a.device, limit(a.limit))).map(Json)
    }

    #[tool(
        name = "ranks",
        description = "A distributed run's ranks side by side, as `memscape ranks --json`: per rank its peak, reserved bytes and categories at the peak; the median; the outlier ranks (peak well above the median) with the call site that makes each one's difference."
    )]
    async fn ranks(&self, Parameters(a): Parameters<RanksArgs>) -> Out {
        self.with(|s| s.ranks(&a.paths, limit(a.limit))).map(Json)
    }

    #[tool(
        name = "check",
        description = "Memory budgets, as `memscape check --format json`: the run's peak, its growth over a baseline run in percent, and bytes per category at the peak, each against a limit; `passed` is false when one fails, and `grown` names the call sites that grew most against the baseline."
    )]
    async fn check(&self, Parameters(a): Parameters<CheckArgs>) -> Out {
        let mut max_category = Vec::new();
        for (k, &v) in a.max_category_bytes.iter().flatten() {
            let c = Category::parse(k).ok_or_else(|| format!("{k:?} is not a category"))?;
            max_category.push((c, v));
        }
        let budgets =
            snapshot::check::Budgets { max_peak: a.max_peak_bytes, max_growth_pct: a.max_growth_pct, max_category };
        self.with(|s| s.check(&a.run, a.baseline.as_deref(), &budgets, a.device)).map(Json)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("memscape", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "memscape reads PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot) on this machine. For an out-of-memory error call `doctor` first; `categories` and `largest` say what holds the memory at the peak; `what_if` predicts the peak under training changes; `diff` compares two runs; `ranks` compares a distributed run's ranks; `check` tests memory budgets. Paths are local files.",
            )
    }
}
