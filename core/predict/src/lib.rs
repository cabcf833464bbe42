//! The snapshot a program would record on a GPU, made from the allocations it asked for.
//!
//! `memscape predict` runs a PyTorch program on the CPU with fake CUDA tensors
//! (`python/memscape/_fakecuda.py`); each storage it makes on the device and each it frees
//! arrives here in order, with its Python stack. A [`Predictor`] places them with the replay
//! layer's simulation of PyTorch's caching allocator (`memscape_replay::simulate`), exactly as
//! the allocator would (rounding, pools, splitting, segments, the out-of-memory path under a
//! limit), keeps the trace PyTorch's recorder would keep while recording is on, answers the
//! program's questions (`memory_allocated`, `max_memory_reserved`, ...) as [`Figures`], and
//! writes the [`Snapshot`] `_dump_snapshot` would, marked as a prediction
//! ([`PredictionInfo`] under [`PREDICTION_KEY`]).
#![deny(missing_docs)]

use std::collections::BTreeMap;

use memscape_format::model::{Action, Annotation, Entry, FrameId, Snapshot, StackId, Trace, PREDICTION_KEY};
use memscape_format::value::Value;
pub use memscape_format::PredictionInfo;
use memscape_replay::simulate::segments::{self, Holder, Labels};
use memscape_replay::simulate::{place_after, Policy, Simulator};
use rustc_hash::FxHashMap;

/// The bytes of the GPU a CUDA context and PyTorch's kernels take before any tensor (outside
/// the caching allocator; what `mem_get_info` and an out-of-memory error count as used by
/// something else). An assumption: it varies with the driver, the GPU and the libraries loaded.
pub const CONTEXT_BYTES: u64 = 512 << 20;

/// The allocator's figures now: what `torch.cuda.memory_stats` and its shorthands answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    /// Bytes of live blocks (`allocated_bytes.all.current`).
    pub allocated: u64,
    /// Their largest since the start or the last reset of the peaks.
    pub peak_allocated: u64,
    /// Bytes the program asked for in live blocks (`requested_bytes.all.current`).
    pub requested: u64,
    /// Their largest.
    pub peak_requested: u64,
    /// Bytes reserved from the device (`reserved_bytes.all.current`).
    pub reserved: u64,
    /// Their largest.
    pub peak_reserved: u64,
    /// What `cudaMemGetInfo` would say is free: the GPU less the context and what is reserved.
    pub device_free: u64,
    /// Allocations made.
    pub allocations: u64,
    /// Out-of-memory errors raised.
    pub ooms: u64,
    /// Segments asked of the device (`num_device_alloc`).
    pub segments_allocated: u64,
    /// Segments given back (`num_device_free`).
    pub segments_freed: u64,
}

/// A block the program holds.
#[derive(Clone, Copy, Debug)]
struct Held {
    address: u64,
    size: u64,
    requested: u64,
    stream: i64,
    /// Its stack, if it was allocated while recording (PyTorch keeps none otherwise).
    stack: Option<StackId>,
}

/// One prediction in progress.
#[derive(Debug)]
pub struct Predictor {
    info: PredictionInfo,
    /// Frames, stacks and strings of the snapshot being made (its segments and trace are
    /// made by [`Predictor::snapshot`]).
    snap: Snapshot,
    /// The stack without frames (interned once).
    empty: StackId,
    frames: Vec<FrameId>,
    stacks: Vec<StackId>,
    sim: Simulator,
    policy: Policy,
    conf: String,
    next_address: u64,
    held: FxHashMap<u64, Held>,
    /// The stack of the request each segment was made for, by the segment's address.
    segment_stacks: BTreeMap<u64, StackId>,
    trace: Trace,
    recording: bool,
    max_entries: usize,
    annotations: Vec<Annotation>,
    figures: Figures,
    time_us: i64,
}

/// Why a message of the program could not be taken.
pub type Refusal = String;

impl Predictor {
    /// A prediction for the GPU `info` names, under `conf` (`PYTORCH_CUDA_ALLOC_CONF`); with
    /// `info.limited`, allocations beyond the GPU's memory (less [`CONTEXT_BYTES`]) fail.
    pub fn new(mut info: PredictionInfo, conf: &str) -> Result<Predictor, Refusal> {
        let mut policy = Policy::default().with_conf(conf).map_err(|e| format!("PYTORCH_CUDA_ALLOC_CONF: {e}"))?;
        if info.limited {
            policy.capacity = Some(info.memory_bytes.saturating_sub(CONTEXT_BYTES));
        }
        info.assumptions.push(format!(
            "the CUDA context and kernels take {} of the GPU outside PyTorch's allocator",
            format_gib(CONTEXT_BYTES)
        ));
        let mut snap = Snapshot::default();
        let empty = snap.add_stack(&[]);
        Ok(Predictor {
            info,
            snap,
            empty,
            frames: Vec::new(),
            stacks: Vec::new(),
            sim: Simulator::with_policy(policy.clone()),
            policy,
            conf: conf.to_string(),
            next_address: 0x7f00_0000_0000,
            held: FxHashMap::default(),
            segment_stacks: BTreeMap::new(),
            trace: Trace::default(),
            recording: false,
            max_entries: usize::MAX,
            annotations: Vec::new(),
            figures: Figures::default(),
            time_us: 0,
        })
    }

    /// Adds a frame (`filename`, `line`, function `name`); frames are numbered from 0 in order.
    pub fn frame(&mut self, filename: &str, line: i64, name: &str) {
        let id = self.snap.add_frame(name, filename, line);
        self.frames.push(id);
    }

    /// Adds a stack of frame numbers, innermost first; stacks are numbered from 0 in order.
    pub fn stack(&mut self, frames: &[u64]) -> Result<(), Refusal> {
        let ids = frames
            .iter()
            .map(|&f| {
                self.frames
                    .get(f as usize)
                    .copied()
                    .ok_or_else(|| format!("stack names frame {f}, which was never sent"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let id = self.snap.add_stack(&ids);
        self.stacks.push(id);
        Ok(())
    }

    fn stack_id(&self, k: u64) -> Result<StackId, Refusal> {
        self.stacks.get(k as usize).copied().ok_or_else(|| format!("stack {k} was never sent"))
    }

    /// Allocation `id` of `size` bytes on `stream`, asked for at `stack`. An error is the
    /// out-of-memory message PyTorch would raise (the snapshot then has its `oom` entry).
    pub fn alloc(&mut self, id: u64, size: u64, stream: i64, stack: u64, time_us: i64) -> Result<(), Refusal> {
        let stack = self.stack_id(stack)?;
        if self.held.contains_key(&id) {
            return Err(format!("allocation {id} is already alive"));
        }
        self.time_us = time_us;
        let placed = self.sim.malloc(size, stream, None, place_after(&mut self.next_address));
        self.record_device(stack, stream);
        let p = match placed {
            Ok(p) => p,
            Err(oom) => {
                self.figures.ooms += 1;
                let free = self.device_free();
                if self.recording {
                    let mut e = Entry::new(Action::Oom, 0, oom.requested_bytes, stream);
                    e.addr = None;
                    e.time_us = Some(time_us);
                    e.frames = Some(stack);
                    e.device_free = Some(free);
                    self.trace.push(&e);
                }
                return Err(self.oom_message(oom.requested_bytes, free));
            }
        };
        let kept = self.recording.then_some(stack);
        self.held.insert(id, Held { address: p.address, size: p.size, requested: size, stream, stack: kept });
        self.push(Action::Alloc, p.address, size, stream, Some(stack));
        let f = &mut self.figures;
        f.allocations += 1;
        f.allocated += p.size;
        f.requested += size;
        f.peak_allocated = f.peak_allocated.max(f.allocated);
        f.peak_requested = f.peak_requested.max(f.requested);
        Ok(())
    }

    /// Frees allocation `id` at `stack` (where the program let it go; PyTorch records frees
    /// with that stack, not the allocation's). An id never allocated, or freed twice, is
    /// ignored: storages made before the prediction began.
    pub fn free(&mut self, id: u64, stack: Option<u64>, time_us: i64) -> Result<(), Refusal> {
        let stack = stack.map(|k| self.stack_id(k)).transpose()?;
        let Some(h) = self.held.remove(&id) else { return Ok(()) };
        self.time_us = time_us;
        self.sim.free(h.address);
        let at = stack.or(h.stack);
        self.push(Action::FreeRequested, h.address, h.requested, h.stream, at);
        self.push(Action::FreeCompleted, h.address, h.requested, h.stream, at);
        let f = &mut self.figures;
        f.allocated -= h.size;
        f.requested -= h.requested;
        Ok(())
    }

    /// `torch.cuda.empty_cache()`: wholly free segments go back to the device.
    pub fn empty_cache(&mut self, time_us: i64) {
        self.time_us = time_us;
        self.sim.empty_cache();
        self.record_device_at(self.empty, 0);
    }

    /// A `record_function` span starts (`START`) or ends (`END`), as PyTorch's recorder keeps it.
    pub fn annotate(&mut self, stage: &str, name: &str, time_us: i64) {
        if !self.recording {
            return;
        }
        let stage = self.snap.strings.intern(stage);
        let name = self.snap.strings.intern(name);
        self.annotations.push(Annotation { stage, name, device: 0, time_us, extras: Vec::new() });
    }

    /// `_record_memory_history(enabled, max_entries=...)`: recording starts, or stops and
    /// forgets what it recorded (as PyTorch's does: a later snapshot holds only what was
    /// recorded after recording started again).
    pub fn history(&mut self, on: bool, max_entries: usize) {
        self.recording = on;
        if on {
            self.max_entries = max_entries.max(1);
        } else {
            self.trace = Trace::default();
            self.annotations.clear();
        }
    }

    /// `reset_peak_memory_stats`: the peaks start again from now.
    pub fn reset_peak(&mut self) {
        let f = &mut self.figures;
        f.peak_allocated = f.allocated;
        f.peak_requested = f.requested;
        f.peak_reserved = self.sim.reserved();
    }

    /// The program stopped before its end, for `why`.
    pub fn incomplete(&mut self, why: &str) {
        self.info.incomplete = Some(why.to_string());
    }

    /// An assumption the program's side made (the cuBLAS workspace it modelled, ...).
    pub fn assume(&mut self, what: &str) {
        if !self.info.assumptions.iter().any(|a| a == what) {
            self.info.assumptions.push(what.to_string());
        }
    }

    /// Whether allocations beyond the GPU's memory fail (`--gpu-memory`, or a fraction set).
    pub fn limited(&self) -> bool {
        self.info.limited
    }

    /// `torch.cuda.set_per_process_memory_fraction(fraction)`: from now on the allocator may
    /// reserve at most that share of the GPU's memory, and allocations past it fail.
    pub fn set_fraction(&mut self, fraction: f64) -> Result<(), Refusal> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(format!("invalid fraction: {fraction}. Please set within [0, 1]."));
        }
        self.info.limited = true;
        self.sim.set_capacity(Some((self.info.memory_bytes as f64 * fraction) as u64));
        Ok(())
    }

    /// The figures now.
    pub fn figures(&self) -> Figures {
        Figures { reserved: self.sim.reserved(), device_free: self.device_free(), ..self.figures }
    }

    fn device_free(&self) -> u64 {
        self.info.memory_bytes.saturating_sub(CONTEXT_BYTES).saturating_sub(self.sim.reserved())
    }

    fn push(&mut self, action: Action, address: u64, size: u64, stream: i64, stack: Option<StackId>) {
        if !self.recording {
            return;
        }
        let mut e = Entry::new(action, address, size, stream);
        e.time_us = Some(self.time_us);
        e.frames = Some(stack.unwrap_or(self.empty));
        self.trace.push(&e);
    }

    /// Records what the simulator asked of the device for the request at `stack`.
    fn record_device(&mut self, stack: StackId, stream: i64) {
        self.record_device_at(stack, stream);
        self.figures.peak_reserved = self.figures.peak_reserved.max(self.sim.reserved());
    }

    fn record_device_at(&mut self, stack: StackId, stream: i64) {
        for ev in self.sim.take_events() {
            let (action, address, size) = ev.entry();
            match action {
                Action::SegmentAlloc | Action::SegmentMap => {
                    self.figures.segments_allocated += 1;
                    if self.recording {
                        self.segment_stacks.entry(address).or_insert(stack);
                    }
                }
                _ => self.figures.segments_freed += 1,
            }
            self.push(action, address, size, stream, Some(stack));
        }
    }

    /// PyTorch's out-of-memory message for a request of `size` bytes with `free` bytes free.
    fn oom_message(&self, size: u64, free: u64) -> String {
        let total = self.info.memory_bytes;
        let reserved = self.sim.reserved();
        let allocated = self.figures.allocated;
        format!(
            "CUDA out of memory. Tried to allocate {}. GPU 0 has a total capacity of {} of which {} is free. \
             Including non-PyTorch memory, this process has {} memory in use. Of the allocated memory {} is \
             allocated by PyTorch, and {} is reserved by PyTorch but unallocated. If reserved but unallocated \
             memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid \
             fragmentation.  See documentation for Memory Management  \
             (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables) [predicted by memscape]",
            format_gib(size),
            format_gib(total),
            format_gib(free),
            format_gib(total.saturating_sub(free)),
            format_gib(allocated),
            format_gib(reserved.saturating_sub(allocated)),
        )
    }

    /// The snapshot `_dump_snapshot` would write now: the allocator's segments and blocks,
    /// the trace recorded (its last `max_entries` entries), the annotations, the allocator's
    /// settings, and what the prediction is.
    pub fn snapshot(&self) -> Snapshot {
        let mut snap = self.snap.clone();
        let by_address: FxHashMap<u64, &Held> = self.held.values().map(|h| (h.address, h)).collect();
        let labels = Labels {
            device: 0,
            small: snap.strings.intern("small"),
            large: snap.strings.intern("large"),
            empty: self.empty,
        };
        snap.segments = segments::to_model(
            self.sim.segments(),
            labels,
            |address| {
                by_address.get(&address).map(|h| Holder { requested: h.requested, stack: h.stack, pending_free: false })
            },
            |address| self.segment_stacks.get(&address).copied(),
        );
        let mut trace = self.trace.clone();
        if trace.len() > self.max_entries {
            let mut kept = Trace::with_capacity(self.max_entries);
            for i in trace.len() - self.max_entries..trace.len() {
                kept.push(&trace.entry(i));
            }
            trace = kept;
        }
        snap.device_traces = Some(vec![trace]);
        snap.external_annotations = Some(self.annotations.clone());
        snap.allocator_settings = Some(self.settings());
        let key = snap.strings.intern(PREDICTION_KEY);
        snap.extras.push((key, self.info.to_value()));
        snap
    }

    /// `allocator_settings` as PyTorch writes it, for the policy predicted under.
    fn settings(&self) -> Value {
        let s = |x: &str| Value::Str(x.into());
        let mut roundup = Vec::new();
        let mut k = 1u64;
        for d in self.policy.divisions.iter() {
            roundup.push((s(&k.to_string()), Value::Int((*d).into())));
            k = k.saturating_mul(2);
        }
        Value::Dict(vec![
            (s("PYTORCH_CUDA_ALLOC_CONF"), s(&self.conf)),
            (s("max_split_size"), Value::Int(self.policy.max_split.map_or(-1, i128::from))),
            (s("garbage_collection_threshold"), Value::Float(self.policy.gc_threshold)),
            (s("expandable_segments"), Value::Bool(self.policy.expandable)),
            (s("pinned_num_register_threads"), Value::Int(1)),
            (s("release_lock_on_cudamalloc"), Value::Bool(false)),
            (s("pinned_use_cuda_host_register"), Value::Bool(false)),
            (s("roundup_power2_divisions"), Value::Dict(roundup)),
        ])
    }
}

/// A size as PyTorch's out-of-memory message writes it (`2.00 GiB`, `20.00 MiB`).
pub fn format_gib(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KIB {
        format!("{bytes} bytes")
    } else if b < KIB * KIB {
        format!("{:.2} KiB", b / KIB)
    } else if b < KIB * KIB * KIB {
        format!("{:.2} MiB", b / (KIB * KIB))
    } else {
        format!("{:.2} GiB", b / (KIB * KIB * KIB))
    }
}
