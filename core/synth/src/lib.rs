//! A deterministic generator of realistic snapshots of any size.
//!
//! A simulated CUDA caching allocator (small and large pools, 512-byte rounding, best-fit
//! block reuse with splitting and merging, cudaMalloc of 2 MiB / 20 MiB / rounded segments,
//! cache release and retry before an OOM, frees pending on another stream) runs under a
//! simulated training loop: parameters allocated before recording began, activations kept
//! from forward to backward, gradients, AdamW state created at the first step, temporaries,
//! and `record_function` annotations. Stacks come from a pool of Python and C++ frames; frees
//! carry the stack of where they happen (the module, autograd's thread, the optimizer).
//!
//! It can plant truths for the analyses to find ([`generate_with_truth`]): it knows the
//! category of everything it allocates and reports the bytes of each at its peak; a leak (a
//! tensor kept every iteration at a known call site); an extra activation at a known call
//! site (alive from the forward pass to the end of the step), whose randomness is its own so
//! that two runs with and without it differ by exactly that.
//!
//! The top layer of memscape's core: it uses the format, the replay's allocator rules and the
//! categories it plants.
#![deny(missing_docs)]

mod training;

use std::collections::BTreeMap;

use memscape_analysis::categories::{self, Category, N};
use memscape_format::intern::{self, StrId};
use memscape_format::model::{self, Action, Entry, FrameId, Segment, Snapshot, StackId, Trace};
use memscape_format::value::Value;
use memscape_replay::allocator;
use memscape_replay::simulate::segments::{self, Holder, Labels};
use memscape_replay::simulate::{place_after, Policy, Simulator};

use training::{run_training, Names};

/// What to generate.
#[derive(Clone, Debug)]
pub struct Options {
    /// Seed of the pseudo-random generator: the same options give the same snapshot.
    pub seed: u64,
    /// Stop after about this many trace entries (all devices together).
    pub target_entries: usize,
    /// Number of devices.
    pub devices: usize,
    /// Transformer layers of the simulated model.
    pub layers: usize,
    /// Every layer runs the same code (one `Block` class in an `nn.ModuleList`, as real
    /// models are written), so their stacks are the same; otherwise each layer has lines of
    /// its own.
    pub shared_layer_code: bool,
    /// Hidden size.
    pub hidden: u64,
    /// Tokens per batch.
    pub tokens: u64,
    /// Device memory in bytes.
    pub capacity_bytes: u64,
    /// End with an allocation that does not fit (an `oom` entry).
    pub oom: bool,
    /// Plant a leak: every iteration keeps a tensor of this many bytes (0: none) at
    /// [`LEAK_SITE`].
    pub leak_bytes: u64,
    /// Plant an extra activation of this many bytes per iteration (0: none) at
    /// [`EXTRA_SITE`], alive from the start of the forward pass to the end of the step.
    pub extra_activation_bytes: u64,
    /// End with an out-of-memory error caused by fragmentation: the cache holds more free
    /// bytes than the request in blocks each too small for it, and the device is full.
    pub fragmentation_oom: bool,
    /// At the end of every forward pass, try an allocation of the whole device (an `oom`
    /// event the program survives): many errors, each in a state made by the trace.
    pub oom_every_iteration: bool,
    /// End with an out-of-memory error raised inside a worker thread, as `nn.DataParallel`'s
    /// `parallel_apply` runs each replica: one more forward pass on that thread (its
    /// activations made by the model's code, stacks running through the worker), the request
    /// that fails, then the exception unwinding, which frees every activation of that pass with
    /// the worker's own (library) frames.
    pub oom_in_worker: bool,
    /// Activation checkpointing per layer: a layer keeps only its first activation through the
    /// forward pass and makes the others again in backward.
    pub checkpointing: bool,
    /// Activations in bf16: the activations a layer keeps are half the bytes.
    pub bf16_activations: bool,
    /// The optimizer, whose state is made at the first step.
    pub optimizer: OptimizerKind,
    /// `zero_grad` after the forward pass (as in a script that calls it just before
    /// `backward`), so last step's gradients are alive during the forward pass.
    pub zero_grad_after_forward: bool,
    /// Training steps run before the recording starts (PyTorch's advice, torchtitan's
    /// default): the parameters and the optimizer state are then only blocks of the final
    /// snapshot, without frames, as PyTorch keeps what it allocated while not recording.
    pub warmup_steps: usize,
    /// `torch.optim`'s `record_function` annotations around the optimizer step and
    /// `zero_grad` (`Optimizer.step#AdamW.step`).
    pub annotations: bool,
    /// The recording ends after the first recorded forward pass (the snapshot is taken
    /// there, as on an error in forward).
    pub end_in_forward: bool,
    /// The allocator's settings (`PYTORCH_CUDA_ALLOC_CONF`), written into the snapshot's
    /// `allocator_settings` as PyTorch writes them.
    pub allocator: AllocatorOptions,
}

/// The caching allocator's settings of a generated run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocatorOptions {
    /// `expandable_segments:True`.
    pub expandable_segments: bool,
    /// `max_split_size_mb`, in bytes (`None`: unlimited).
    pub max_split_size: Option<u64>,
    /// `roundup_power2_divisions` of every size interval (0: none).
    pub roundup_power2_divisions: u64,
    /// `garbage_collection_threshold` (0: off). PyTorch applies it under a memory fraction;
    /// the generator takes the device's capacity as that limit.
    pub garbage_collection_threshold: f64,
}

impl AllocatorOptions {
    /// The simulator's policy on a device of `capacity` bytes.
    pub fn policy(&self, capacity: u64) -> Policy {
        Policy {
            max_split: self.max_split_size,
            divisions: [self.roundup_power2_divisions; memscape_replay::settings::INTERVALS],
            expandable: self.expandable_segments,
            gc_threshold: self.garbage_collection_threshold,
            capacity: Some(capacity),
        }
    }

    /// `PYTORCH_CUDA_ALLOC_CONF` for these settings (empty: the defaults).
    pub fn conf(&self) -> String {
        let mut parts = Vec::new();
        if self.expandable_segments {
            parts.push("expandable_segments:True".to_string());
        }
        if let Some(m) = self.max_split_size {
            parts.push(format!("max_split_size_mb:{}", m >> 20));
        }
        if self.roundup_power2_divisions > 0 {
            parts.push(format!("roundup_power2_divisions:{}", self.roundup_power2_divisions));
        }
        if self.garbage_collection_threshold > 0.0 {
            parts.push(format!("garbage_collection_threshold:{}", self.garbage_collection_threshold));
        }
        parts.join(",")
    }
}

/// The optimizer of the simulated loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OptimizerKind {
    /// Two fp32 moments per parameter.
    #[default]
    AdamW,
    /// Two fp32 moments per parameter (as AdamW, another name in its annotations).
    Adam,
    /// One fp32 momentum buffer per parameter.
    SgdMomentum,
    /// SGD without momentum: no state.
    Sgd,
    /// Two 1-byte moments per parameter and an fp32 scale per 2048 values of each.
    Adam8bit,
    /// A row and a column vector per matrix, the full second moment of a vector; no momentum.
    Adafactor,
}

impl OptimizerKind {
    /// Every kind, by its key ([`OptimizerKind::key`]).
    pub const ALL: [OptimizerKind; 6] = [
        OptimizerKind::AdamW,
        OptimizerKind::Adam,
        OptimizerKind::SgdMomentum,
        OptimizerKind::Sgd,
        OptimizerKind::Adam8bit,
        OptimizerKind::Adafactor,
    ];

    /// Its name on the command line: `adamw`, `sgd-momentum`.
    pub fn key(self) -> &'static str {
        match self {
            OptimizerKind::AdamW => "adamw",
            OptimizerKind::Adam => "adam",
            OptimizerKind::SgdMomentum => "sgd-momentum",
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::Adam8bit => "adam8bit",
            OptimizerKind::Adafactor => "adafactor",
        }
    }

    /// Its class name, as `torch.optim`'s annotations write it (bitsandbytes' for 8-bit Adam).
    pub fn class_name(self) -> &'static str {
        match self {
            OptimizerKind::AdamW => "AdamW",
            OptimizerKind::Adam => "Adam",
            OptimizerKind::SgdMomentum | OptimizerKind::Sgd => "SGD",
            OptimizerKind::Adam8bit => "Adam8bit",
            OptimizerKind::Adafactor => "Adafactor",
        }
    }
}

/// The simulated allocator's own figures just before an out-of-memory error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OomTruth {
    /// Trace entry of the `oom` event.
    pub entry: usize,
    /// Bytes it looked for (rounded).
    pub requested_bytes: u64,
    /// `device_free`.
    pub device_free_bytes: u64,
    /// Reserved bytes.
    pub reserved_bytes: u64,
    /// Requested bytes of allocated blocks (pending frees included).
    pub allocated_bytes: u64,
    /// Sizes of allocated blocks (pending frees included).
    pub live_block_bytes: u64,
    /// Bytes of free blocks.
    pub cached_free_bytes: u64,
    /// The largest free block of the large pool.
    pub largest_free_large_bytes: u64,
    /// The largest free block of the small pool.
    pub largest_free_small_bytes: u64,
}

/// The call site of the planted leak, as `filename:line:name`.
pub const LEAK_SITE: &str = "train.py:318:train_step";
/// The call site of the planted extra activation.
pub const EXTRA_SITE: &str = "model.py:230:Head.forward";

/// What the generator planted, for tests to compare the analyses with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Truth {
    /// Highest live bytes of device 0 (the sum of `at_peak`).
    pub peak_bytes: u64,
    /// Live bytes of each category at that peak, by the generator's own accounting.
    pub at_peak: [u64; N],
    /// Complete training iterations of device 0.
    pub iterations: usize,
    /// The allocator's figures before each out-of-memory error of device 0.
    pub ooms: Vec<OomTruth>,
    /// The highest bytes device 0's allocator reserved while recording.
    pub peak_reserved_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 1,
            target_entries: 10_000,
            devices: 1,
            layers: 24,
            shared_layer_code: false,
            hidden: 2048,
            tokens: 4096,
            capacity_bytes: 80 << 30,
            oom: false,
            leak_bytes: 0,
            extra_activation_bytes: 0,
            fragmentation_oom: false,
            oom_every_iteration: false,
            oom_in_worker: false,
            checkpointing: false,
            bf16_activations: false,
            optimizer: OptimizerKind::AdamW,
            zero_grad_after_forward: false,
            warmup_steps: 0,
            annotations: true,
            end_in_forward: false,
            allocator: AllocatorOptions::default(),
        }
    }
}

impl Options {
    /// Options for a pickle of about `bytes` bytes (written with [`memscape_format::write`]).
    pub fn for_bytes(bytes: u64) -> Self {
        Options { target_entries: (bytes / 100).max(100) as usize, ..Default::default() }
    }
}

/// A small, fast, deterministic PRNG (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

const STREAM: i64 = 0;

/// What the program knows of a block it allocated.
#[derive(Clone, Copy, Debug)]
struct Held {
    requested: u64,
    size: u64,
    pending: bool,
    stack: Option<StackId>,
}

/// The program's side of one device: the shared allocator simulator
/// ([`memscape_replay::simulate`]) decides every placement and segment; this records the
/// trace, the stacks, and what is alive by category.
struct Allocator {
    device: usize,
    capacity: u64,
    next_addr: u64,
    sim: Simulator,
    /// Allocated blocks, by address.
    held: BTreeMap<u64, Held>,
    /// The stack of the request each segment was made (or first mapped) for.
    segment_stacks: BTreeMap<u64, StackId>,
    pending: Vec<u64>,
    trace: Trace,
    recording: bool,
    /// Blocks allocated while not recording keep their frames (runs recorded from their first
    /// step, as the generator always made them); PyTorch keeps none, as warm-up runs show.
    frames_unrecorded: bool,
    time_us: i64,
    /// The stack frees are recorded with (where the program is).
    context: Option<StackId>,
    /// What is alive, by the generator's own knowledge: address to (bytes, category).
    live: BTreeMap<u64, (u64, Category)>,
    bytes: [u64; N],
    peak: u64,
    at_peak: [u64; N],
    /// Entries written for planted allocations (not counted against the target).
    planted: usize,
    /// Its own figures before each out-of-memory error.
    ooms: Vec<OomTruth>,
    /// The highest reserved bytes while recording.
    peak_reserved: u64,
    /// Under settings other than the defaults, the same live blocks in an allocator under the
    /// defaults (with its addresses for ours), which the planted fragmentation ending sizes its
    /// requests from: so that a run under other settings asks for what the default run asked.
    shadow: Option<(Simulator, BTreeMap<u64, u64>, u64)>,
}

impl Allocator {
    fn new(device: usize, policy: Policy, t0: i64) -> Self {
        let defaults = Policy { capacity: policy.capacity, ..Policy::default() };
        let first = 0x7f00_0000_0000 + ((device as u64) << 40);
        let shadow = (policy != defaults).then(|| (Simulator::with_policy(defaults), BTreeMap::new(), first));
        Allocator {
            device,
            capacity: policy.capacity.unwrap_or(u64::MAX),
            next_addr: first,
            sim: Simulator::with_policy(policy),
            held: BTreeMap::new(),
            segment_stacks: BTreeMap::new(),
            pending: Vec::new(),
            trace: Trace::default(),
            recording: false,
            frames_unrecorded: true,
            time_us: t0,
            context: None,
            live: BTreeMap::new(),
            bytes: [0; N],
            peak: 0,
            at_peak: [0; N],
            planted: 0,
            ooms: Vec::new(),
            peak_reserved: 0,
            shadow,
        }
    }

    /// The largest free block of the large pool and the reserved bytes, as the allocator under
    /// the default settings has them (this one's, under the defaults).
    fn seen(&self) -> (u64, u64) {
        match &self.shadow {
            Some((s, _, _)) => (s.cached().1, s.reserved()),
            None => (self.sim.cached().1, self.reserved()),
        }
    }

    /// Bytes reserved from the device.
    fn reserved(&self) -> u64 {
        self.sim.reserved()
    }

    fn record(&mut self, action: Action, addr: Option<u64>, size: u64, stack: Option<StackId>, rng: &mut Rng) {
        self.time_us += 1 + rng.below(40) as i64;
        if !self.recording {
            return;
        }
        self.peak_reserved = self.peak_reserved.max(self.reserved());
        let mut e = Entry::new(action, addr.unwrap_or(0), size, STREAM);
        e.addr = addr;
        e.time_us = Some(self.time_us);
        e.frames = stack;
        if action == Action::Oom {
            let free = self.capacity.saturating_sub(self.reserved());
            e.device_free = Some(free);
            let truth = self.figures(self.trace.len(), size, free);
            self.ooms.push(truth);
        }
        self.trace.push(&e);
    }

    /// Records what the simulator asked of the device, each for the request of `stack`.
    fn record_events(&mut self, stack: StackId, rng: &mut Rng) {
        for ev in self.sim.take_events() {
            let (action, address, size) = ev.entry();
            if matches!(action, Action::SegmentAlloc | Action::SegmentMap) {
                self.segment_stacks.entry(address).or_insert(stack);
            }
            self.record(action, Some(address), size, Some(stack), rng);
        }
    }

    /// The allocator's own figures now.
    fn figures(&self, entry: usize, requested: u64, device_free: u64) -> OomTruth {
        let (cached, large, small) = self.sim.cached();
        OomTruth {
            entry,
            requested_bytes: requested,
            device_free_bytes: device_free,
            reserved_bytes: self.reserved(),
            allocated_bytes: self.held.values().map(|b| b.requested).sum(),
            live_block_bytes: self.held.values().map(|b| b.size).sum(),
            cached_free_bytes: cached,
            largest_free_large_bytes: large,
            largest_free_small_bytes: small,
        }
    }

    /// Entries that count against the target size.
    fn entries(&self) -> usize {
        self.trace.len() - self.planted
    }

    fn account(&mut self, addr: u64, alloc: Option<(u64, Category)>) {
        match alloc {
            Some((bytes, cat)) => {
                self.live.insert(addr, (bytes, cat));
                self.bytes[cat.index()] += bytes;
            }
            None => {
                if let Some((bytes, cat)) = self.live.remove(&addr) {
                    self.bytes[cat.index()] -= bytes;
                }
            }
        }
        let total: u64 = self.bytes.iter().sum();
        if self.recording && total > self.peak {
            self.peak = total;
            self.at_peak = self.bytes;
        }
    }

    fn malloc(&mut self, requested: u64, stack: StackId, cat: Category, rng: &mut Rng) -> Option<u64> {
        let placed = self.sim.malloc(requested, STREAM, None, place_after(&mut self.next_addr));
        self.record_events(stack, rng);
        let p = match placed {
            Ok(p) => p,
            Err(e) => {
                self.record(Action::Oom, None, e.requested_bytes, Some(stack), rng);
                return None;
            }
        };
        if let Some((s, map, next)) = &mut self.shadow {
            let placed = s.malloc(requested, STREAM, None, place_after(next));
            if let Ok(q) = placed {
                map.insert(p.address, q.address);
            }
            s.take_events();
        }
        let kept = Some(stack).filter(|_| self.recording || self.frames_unrecorded);
        self.held.insert(p.address, Held { requested, size: p.size, pending: false, stack: kept });
        self.record(Action::Alloc, Some(p.address), requested, Some(stack), rng);
        self.account(p.address, Some((requested, cat)));
        Some(p.address)
    }

    /// Frees a block; with `side_stream` the block waits for another stream first.
    fn free(&mut self, addr: u64, side_stream: bool, rng: &mut Rng) {
        let Some(b) = self.held.get_mut(&addr) else { return };
        let (req, stack) = (b.requested, self.context.or(b.stack));
        if side_stream {
            b.pending = true;
        }
        self.record(Action::FreeRequested, Some(addr), req, stack, rng);
        if side_stream {
            self.pending.push(addr);
        } else {
            self.complete_free(addr, rng);
        }
    }

    fn complete_free(&mut self, addr: u64, rng: &mut Rng) {
        let Some(b) = self.held.remove(&addr) else { return };
        self.sim.free(addr);
        if let Some((s, map, _)) = &mut self.shadow {
            if let Some(q) = map.remove(&addr) {
                s.free(q);
            }
        }
        self.record(Action::FreeCompleted, Some(addr), b.requested, self.context.or(b.stack), rng);
        self.account(addr, None);
    }

    fn process_pending(&mut self, rng: &mut Rng) {
        let done: Vec<u64> = self.pending.drain(..).collect();
        for a in done {
            self.complete_free(a, rng);
        }
    }

    /// `empty_cache`: returns every wholly free segment to the device.
    fn release_cached(&mut self, stack: StackId, rng: &mut Rng) {
        self.sim.empty_cache();
        if let Some((s, _, _)) = &mut self.shadow {
            s.empty_cache();
            s.take_events();
        }
        self.record_events(stack, rng);
    }

    fn segments(&self, empty: StackId, segment_type: (StrId, StrId)) -> Vec<Segment> {
        let labels = Labels { device: self.device as i64, small: segment_type.0, large: segment_type.1, empty };
        segments::to_model(
            self.sim.segments(),
            labels,
            |address| {
                self.held.get(&address).map(|h| Holder {
                    requested: h.requested,
                    stack: h.stack,
                    pending_free: h.pending,
                })
            },
            |address| self.segment_stacks.range(..=address).next_back().map(|(_, &k)| k),
        )
    }
}

/// Builds stacks from a realistic pool of frames; equal frames and stacks are stored once,
/// as the reader stores them.
struct StackPool<'a> {
    snap: &'a mut Snapshot,
    frames: std::collections::HashMap<(StrId, StrId, i64), FrameId>,
    stacks: std::collections::HashMap<Vec<FrameId>, StackId>,
}

impl StackPool<'_> {
    fn frame(&mut self, filename: &str, line: i64, name: &str) -> FrameId {
        let key = (self.snap.strings.intern(name), self.snap.strings.intern(filename), line);
        let snap = &mut *self.snap;
        *self.frames.entry(key).or_insert_with(|| snap.add_frame(name, filename, line))
    }

    fn stack(&mut self, frames: &[FrameId]) -> StackId {
        let snap = &mut *self.snap;
        *self.stacks.entry(frames.to_vec()).or_insert_with(|| snap.add_stack(frames))
    }
}

/// The call sites of the simulated program, each with its own stack.
struct Sites {
    empty: StackId,
    param: Vec<StackId>,
    act: Vec<StackId>,
    temp: Vec<StackId>,
    grad: Vec<StackId>,
    optim_state: StackId,
    optim_temp: StackId,
    loss: StackId,
    input: StackId,
    /// Autograd's own buffers in backward.
    bwd_temp: StackId,
    leak: StackId,
    extra: StackId,
    /// A replica's activations in a worker thread of `parallel_apply`, per layer.
    worker_act: Vec<StackId>,
    /// Where frees happen.
    in_forward: StackId,
    in_backward: StackId,
    in_zero_grad: StackId,
    in_step: StackId,
    in_loop: StackId,
    /// The worker thread of `parallel_apply`, unwinding an exception.
    in_worker: StackId,
}

fn sites(snap: &mut Snapshot, layers: usize, shared: bool) -> Sites {
    let mut p = StackPool { snap, frames: Default::default(), stacks: Default::default() };
    let main = p.frame("train.py", 412, "<module>");
    let train = p.frame("train.py", 377, "main");
    let step = p.frame("train.py", 301, "train_step");
    let call = p.frame("/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", 1750, "_call_impl");
    let wcall = p.frame("/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", 1739, "_wrapped_call_impl");
    let model_fwd = p.frame("model.py", 188, "forward");
    let cpp = [
        p.frame("??", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"),
        p.frame("??", 0, "at::native::empty_cuda(c10::ArrayRef<long>, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, std::optional<c10::MemoryFormat>)"),
        p.frame("??", 0, "at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, std::optional<c10::MemoryFormat>)"),
        p.frame("/opt/conda/lib/python3.11/ceval.c", 0, "_PyEval_EvalFrameDefault"),
    ];
    let ops = ["linear", "gelu", "layer_norm", "softmax", "matmul", "dropout"];
    let op_frames: Vec<FrameId> = ops
        .iter()
        .enumerate()
        .map(|(i, op)| p.frame("/usr/lib/python3.11/site-packages/torch/nn/functional.py", 2000 + 37 * i as i64, op))
        .collect();
    let mut outer = vec![call, wcall, model_fwd, call, wcall, step, train, main];
    let empty = p.stack(&[]);
    let mut param = Vec::new();
    let mut act = Vec::new();
    let mut temp = Vec::new();
    let mut grad = Vec::new();
    for l in 0..layers.max(1) {
        let layer = if shared {
            p.frame("model.py", 90, "Block.forward")
        } else {
            p.frame("model.py", 90 + (l % 40) as i64, &format!("Block{}.forward", l % 8))
        };
        outer[2] = layer;
        let init = p.frame("/usr/lib/python3.11/site-packages/torch/nn/init.py", 459, "kaiming_uniform_");
        let ctor = p.frame("model.py", 40 + if shared { 0 } else { l as i64 }, "Block.__init__");
        param.push(p.stack(&[cpp[0], cpp[1], init, ctor, train, main]));
        for (k, &opf) in op_frames.iter().enumerate() {
            let mut s = vec![cpp[0], cpp[1], cpp[2], opf, cpp[3]];
            s.extend_from_slice(&outer);
            let id = p.stack(&s);
            if k % 2 == 0 {
                act.push(id);
            } else {
                temp.push(id);
            }
        }
        let acc = p.frame(
            "??",
            0,
            "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
        );
        let engine = p.frame("/usr/lib/python3.11/site-packages/torch/autograd/graph.py", 825, "_engine_run_backward");
        let backward = p.frame("/usr/lib/python3.11/site-packages/torch/_tensor.py", 626, "backward");
        grad.push(p.stack(&[cpp[0], cpp[1], acc, engine, backward, step, train, main]));
    }
    let adamw = p.frame("/usr/lib/python3.11/site-packages/torch/optim/adamw.py", 467, "_multi_tensor_adamw");
    let init_group = p.frame("/usr/lib/python3.11/site-packages/torch/optim/adam.py", 183, "_init_group");
    let opt_step = p.frame("/usr/lib/python3.11/site-packages/torch/optim/optimizer.py", 493, "wrapper");
    let optim_state = p.stack(&[cpp[0], cpp[1], init_group, opt_step, step, train, main]);
    let optim_temp = p.stack(&[cpp[0], cpp[1], cpp[2], adamw, opt_step, step, train, main]);
    let ce = p.frame("/usr/lib/python3.11/site-packages/torch/nn/functional.py", 3479, "cross_entropy");
    let loss = p.stack(&[cpp[0], cpp[1], ce, step, train, main]);
    let to = p.frame("train.py", 290, "get_batch");
    let input = p.stack(&[cpp[0], cpp[1], to, step, train, main]);
    // Autograd's worker thread: C++ frames only, as PyTorch records them.
    let thread = [
        p.frame("??", 0, "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)"),
        p.frame("??", 0, "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
        p.frame("??", 0, "execute_native_thread_routine"),
        p.frame("??", 0, "clone"),
    ];
    let mm = p.frame("??", 0, "at::native::mm_out_cuda(at::Tensor const&, at::Tensor const&, at::Tensor&)");
    let bwd_temp = p.stack(&[cpp[0], cpp[1], mm, thread[0], thread[1], thread[2], thread[3]]);
    let free = p.frame("??", 0, "torch::autograd::SavedVariable::reset_data()");
    let in_backward = p.stack(&[free, thread[0], thread[1], thread[2], thread[3]]);
    let keep = p.frame("train.py", 318, "train_step");
    let leak = p.stack(&[cpp[0], cpp[1], keep, train, main]);
    let head = p.frame("model.py", 230, "Head.forward");
    let extra =
        p.stack(&[cpp[0], cpp[1], cpp[2], op_frames[0], head, call, wcall, model_fwd, call, wcall, step, train, main]);
    let in_forward = p.stack(&[call, wcall, model_fwd, call, wcall, step, train, main]);
    let zg = p.frame("/usr/lib/python3.11/site-packages/torch/optim/optimizer.py", 990, "zero_grad");
    let in_zero_grad = p.stack(&[zg, step, train, main]);
    let in_step = p.stack(&[adamw, opt_step, step, train, main]);
    let in_loop = p.stack(&[step, train, main]);
    // `nn.DataParallel`: each replica's forward runs in a thread of `parallel_apply`.
    let threading = "/usr/lib/python3.11/threading.py";
    let thread = [
        p.frame("/usr/lib/python3.11/site-packages/torch/nn/parallel/parallel_apply.py", 83, "_worker"),
        p.frame(threading, 1012, "run"),
        p.frame(threading, 1075, "_bootstrap_inner"),
        p.frame(threading, 1032, "_bootstrap"),
    ];
    let unwinding = p.frame("/usr/lib/python3.11/site-packages/torch/nn/parallel/parallel_apply.py", 103, "_worker");
    let in_worker = p.stack(&[unwinding, thread[1], thread[2], thread[3]]);
    let worker_act = (0..layers.max(1))
        .map(|l| {
            let layer = p.frame("models.py", 120 + (l % 3) as i64, "Block.forward");
            let mut s = vec![cpp[0], cpp[1], cpp[2], op_frames[0], cpp[3], layer, call, wcall, model_fwd, call, wcall];
            s.extend_from_slice(&thread);
            p.stack(&s)
        })
        .collect();
    Sites {
        empty,
        param,
        act,
        temp,
        grad,
        optim_state,
        optim_temp,
        loss,
        input,
        bwd_temp,
        leak,
        extra,
        in_forward,
        in_backward,
        in_zero_grad,
        in_step,
        in_loop,
        worker_act,
        in_worker,
    }
}

/// Generates a snapshot.
pub fn generate(opts: &Options) -> Snapshot {
    generate_with_truth(opts).0
}

/// Generates a snapshot and says what it planted.
pub fn generate_with_truth(opts: &Options) -> (Snapshot, Truth) {
    let mut snap = Snapshot::default();
    let mut rng = Rng(opts.seed);
    let layers = opts.layers.max(1);
    let sites = sites(&mut snap, layers, opts.shared_layer_code);
    let seg_type = (snap.strings.intern("small"), snap.strings.intern("large"));
    let names = Names {
        start: snap.strings.intern("START"),
        end: snap.strings.intern("END"),
        zero_grad: snap.strings.intern(&format!("Optimizer.zero_grad#{0}.zero_grad", opts.optimizer.class_name())),
        step: snap.strings.intern(&format!("Optimizer.step#{0}.step", opts.optimizer.class_name())),
    };
    let t0 = 1_754_641_328_380_304_i64 + (opts.seed % 1000) as i64 * 1_000_000;
    let devices = opts.devices.max(1);
    let per_device = opts.target_entries.div_ceil(devices);
    let mut traces = Vec::new();
    let mut annotations = Vec::new();
    let mut segments = Vec::new();
    let mut truth = Truth::default();
    for d in 0..devices {
        let mut a = Allocator::new(d, opts.allocator.policy(opts.capacity_bytes), t0);
        let iterations = run_training(&mut a, opts, &sites, &names, per_device, &mut rng, &mut annotations);
        if d == 0 {
            truth = Truth {
                peak_bytes: a.peak,
                at_peak: a.at_peak,
                iterations,
                ooms: a.ooms.clone(),
                peak_reserved_bytes: a.peak_reserved,
            };
        }
        segments.extend(a.segments(sites.empty, seg_type));
        traces.push(a.trace);
    }
    snap.segments = segments;
    snap.device_traces = Some(traces);
    snap.external_annotations = Some(annotations);
    snap.allocator_settings = Some(allocator_settings(&opts.allocator));
    (snap, truth)
}

fn allocator_settings(o: &AllocatorOptions) -> Value {
    let s = |x: &str| Value::Str(x.into());
    let mut roundup = Vec::new();
    let mut k = 1u64;
    while k <= 32768 {
        roundup.push((s(&k.to_string()), Value::Int(o.roundup_power2_divisions as i128)));
        k *= 2;
    }
    Value::Dict(vec![
        (s("PYTORCH_CUDA_ALLOC_CONF"), s(&o.conf())),
        (s("max_split_size"), Value::Int(o.max_split_size.map_or(-1, i128::from))),
        (s("garbage_collection_threshold"), Value::Float(o.garbage_collection_threshold)),
        (s("expandable_segments"), Value::Bool(o.expandable_segments)),
        (s("pinned_num_register_threads"), Value::Int(1)),
        (s("release_lock_on_cudamalloc"), Value::Bool(false)),
        (s("pinned_use_cuda_host_register"), Value::Bool(false)),
        (s("roundup_power2_divisions"), Value::Dict(roundup)),
    ])
}
