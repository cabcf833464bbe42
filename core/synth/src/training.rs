//! The simulated training loop the generator runs on each device's allocator: parameters
//! before recording, then iterations of forward, backward and optimizer step, then the end
//! the options ask for (a free pending on a side stream, out-of-memory errors).

use super::{Allocator, OptimizerKind, Options, Rng, Sites};
use crate::allocator::{MIN_LARGE_ALLOC, ROUND_LARGE};
use crate::categories::Category;
use crate::intern::StrId;
use crate::model::{Annotation, StackId};

/// The strings of the `record_function` annotations.
pub(super) struct Names {
    pub start: StrId,
    pub end: StrId,
    pub zero_grad: StrId,
    pub step: StrId,
}

/// Runs the simulated training loop on one device until its trace has about `target`
/// entries; returns the complete iterations.
pub(super) fn run_training(
    a: &mut Allocator,
    opts: &Options,
    sites: &Sites,
    names: &Names,
    target: usize,
    rng: &mut Rng,
    annotations: &mut Vec<Annotation>,
) -> usize {
    let mut t = Training::new(opts, sites, names, annotations);
    // Parameters exist before recording starts, as in most real captures; after a warm-up
    // step, the optimizer's state too, both without frames.
    a.frames_unrecorded = opts.warmup_steps == 0;
    t.allocate_parameters(a, rng);
    a.recording = opts.warmup_steps == 0;
    let mut iteration = 0u64;
    let mut complete = 0;
    while a.entries() < target {
        iteration += 1;
        if iteration as usize > opts.warmup_steps {
            a.recording = true;
        }
        if !t.iteration(a, rng, target, iteration) {
            break;
        }
        complete += usize::from(a.recording);
    }
    t.end(a, rng);
    complete
}

/// What activations a layer's forward pass keeps for backward, and what backward makes again
/// (with checkpointing: every activation but the layer's input, by site and bytes).
type Saved = (Vec<u64>, Vec<(StackId, u64)>);

/// The loop's settings and what lives from one iteration to the next.
struct Training<'a> {
    opts: &'a Options,
    sites: &'a Sites,
    names: &'a Names,
    annotations: &'a mut Vec<Annotation>,
    layers: usize,
    hidden: u64,
    /// Bytes of one activation.
    act_bytes: u64,
    /// Bytes of an intermediate the size of an activation (forward temporaries, autograd's
    /// buffers): in bf16 too, when the activations are (the what-if predictions assume they
    /// do not change).
    act_temp: u64,
    /// Planted allocations draw on their own randomness and do not count against the target,
    /// so that a run with them differs from one without only by them.
    planted_rng: Rng,
    /// Parameters: address, bytes, layer; and their shapes, in the same order.
    params: Vec<(u64, u64, usize)>,
    shapes: Vec<(u64, u64)>,
    optim_state: Vec<u64>,
    grads: Vec<u64>,
}

impl<'a> Training<'a> {
    fn new(opts: &'a Options, sites: &'a Sites, names: &'a Names, annotations: &'a mut Vec<Annotation>) -> Self {
        let hidden = opts.hidden.max(64);
        let act_bytes = opts.tokens.max(1) * hidden * 2;
        Training {
            opts,
            sites,
            names,
            annotations,
            layers: opts.layers.max(1),
            hidden,
            act_bytes,
            act_temp: if opts.bf16_activations { act_bytes / 2 } else { act_bytes },
            planted_rng: Rng(opts.seed ^ 0x5eed_1ea4),
            params: Vec::new(),
            shapes: Vec::new(),
            optim_state: Vec::new(),
            grads: Vec::new(),
        }
    }

    /// Each layer's weights (attention, projection, MLP in and out) and norms, in fp32.
    fn allocate_parameters(&mut self, a: &mut Allocator, rng: &mut Rng) {
        let h = self.hidden;
        for l in 0..self.layers {
            for (rows, cols) in [(h, 3 * h), (h, h), (h, 4 * h), (4 * h, h), (1, h), (1, h)] {
                if let Some(p) = a.malloc(rows * cols * 4, self.sites.param[l], Category::Parameter, rng) {
                    self.params.push((p, rows * cols * 4, l));
                    self.shapes.push((rows, cols));
                }
            }
        }
    }

    /// One iteration; false when the run ends in its forward pass.
    fn iteration(&mut self, a: &mut Allocator, rng: &mut Rng, target: usize, iteration: u64) -> bool {
        let (opts, sites) = (self.opts, self.sites);
        if !opts.zero_grad_after_forward {
            self.zero_grad(a, rng);
        }
        a.context = Some(sites.in_loop);
        let input = a.malloc(opts.tokens * 8, sites.input, Category::Input, rng);
        a.context = Some(sites.in_forward);
        let extra = if opts.extra_activation_bytes > 0 {
            self.planted(a, |a, r| a.malloc(opts.extra_activation_bytes, sites.extra, Category::Activation, r))
        } else {
            None
        };
        let mut saved = self.forward(a, rng, target, iteration);
        let loss = a.malloc(4, sites.loss, Category::Activation, rng);
        if opts.end_in_forward && a.recording {
            return false;
        }
        if opts.leak_bytes > 0 {
            // `history.append(logits)`: kept by the program, never freed.
            self.planted(a, |a, r| a.malloc(opts.leak_bytes, sites.leak, Category::Activation, r));
        }
        if opts.oom_every_iteration {
            a.malloc(opts.capacity_bytes, sites.act[0], Category::Activation, rng);
        }
        if opts.zero_grad_after_forward {
            self.zero_grad(a, rng);
        }
        self.backward(a, rng, &mut saved);
        if let Some(l) = loss {
            a.free(l, false, rng);
        }
        a.context = Some(sites.in_loop);
        if let Some(i) = input {
            a.free(i, true, rng);
        }
        a.process_pending(rng);
        self.optimizer_step(a, rng);
        a.context = Some(sites.in_loop);
        if let Some(x) = extra {
            self.planted(a, |a, r| {
                a.free(x, false, r);
                None
            });
        }
        true
    }

    /// The forward pass, layer by layer, until the target is reached (after the first
    /// iteration); what each layer keeps.
    fn forward(&mut self, a: &mut Allocator, rng: &mut Rng, target: usize, iteration: u64) -> Vec<Saved> {
        let mut saved = Vec::new();
        for l in 0..self.layers {
            saved.push(self.forward_layer(a, rng, l));
            if a.entries() >= target && iteration > 1 {
                break;
            }
        }
        saved
    }

    /// One layer's forward pass: it keeps some activations for backward and frees
    /// temporaries.
    fn forward_layer(&mut self, a: &mut Allocator, rng: &mut Rng, l: usize) -> Saved {
        let (opts, sites) = (self.opts, self.sites);
        let mut keep = Vec::new();
        let mut again = Vec::new();
        for (k, &site) in sites.act[l * 3..l * 3 + 3].iter().enumerate() {
            let jitter = rng.below(64) * 512 + rng.below(128) * 4;
            let mut bytes = self.act_bytes * (1 + k as u64 % 2) + jitter;
            if opts.bf16_activations {
                bytes /= 2;
            }
            if let Some(x) = a.malloc(bytes, site, Category::Activation, rng) {
                keep.push(x);
                if k > 0 {
                    again.push((site, bytes));
                }
            }
        }
        for &site in &sites.temp[l * 3..l * 3 + 3] {
            let n = 1 + rng.below(3);
            let mut tmp = Vec::new();
            for _ in 0..n {
                let size = if rng.below(4) == 0 { self.act_temp / 2 } else { 256 << rng.below(12) };
                if let Some(x) = a.malloc(size, site, Category::Temporary, rng) {
                    tmp.push(x);
                }
            }
            for x in tmp {
                a.free(x, false, rng);
            }
        }
        if opts.checkpointing {
            // The layer's input stays; the rest goes until backward makes it again.
            for x in keep.drain(1..) {
                a.free(x, false, rng);
            }
        } else {
            again.clear();
        }
        (keep, again)
    }

    /// Backward, last layer first: gradients appear, activations go.
    fn backward(&mut self, a: &mut Allocator, rng: &mut Rng, saved: &mut [Saved]) {
        let sites = self.sites;
        a.context = Some(sites.in_backward);
        for l in (0..saved.len()).rev() {
            let (keep, again) = &mut saved[l];
            for &(site, bytes) in again.iter() {
                if let Some(x) = a.malloc(bytes, site, Category::Activation, rng) {
                    keep.push(x);
                }
            }
            if !again.is_empty() {
                // Recomputing the layer makes its intermediates again (which the prediction of
                // checkpointing does not count).
                if let Some(t) = a.malloc(self.act_temp / 2, sites.temp[l * 3], Category::Temporary, rng) {
                    a.free(t, false, rng);
                }
            }
            for &(_, bytes, pl) in self.params.iter().filter(|p| p.2 == l) {
                if let Some(g) = a.malloc(bytes, sites.grad[pl], Category::Gradient, rng) {
                    self.grads.push(g);
                }
            }
            let tmp = a.malloc(self.act_temp, sites.bwd_temp, Category::AutogradDetail, rng);
            for x in keep.drain(..) {
                a.free(x, false, rng);
            }
            if let Some(t) = tmp {
                a.free(t, false, rng);
            }
        }
    }

    /// The optimizer step: its state at the first step, temporaries every step.
    fn optimizer_step(&mut self, a: &mut Allocator, rng: &mut Rng) {
        let sites = self.sites;
        self.mark(a, true, self.names.step);
        a.context = Some(sites.in_step);
        if self.optim_state.is_empty() {
            for &shape in &self.shapes {
                for bytes in optimizer_state_bytes(self.opts.optimizer, shape) {
                    if let Some(s) = a.malloc(bytes, sites.optim_state, Category::OptimizerState, rng) {
                        self.optim_state.push(s);
                    }
                }
            }
        }
        for chunk in self.params.chunks(8) {
            let bytes: u64 = chunk.iter().map(|p| p.1).sum();
            if let Some(t) = a.malloc(bytes, sites.optim_temp, Category::Temporary, rng) {
                a.free(t, false, rng);
            }
        }
        self.mark(a, false, self.names.step);
    }

    /// `optimizer.zero_grad()`: the gradients go.
    fn zero_grad(&mut self, a: &mut Allocator, rng: &mut Rng) {
        self.mark(a, true, self.names.zero_grad);
        a.context = Some(self.sites.in_zero_grad);
        for g in self.grads.drain(..) {
            a.free(g, false, rng);
        }
        self.mark(a, false, self.names.zero_grad);
    }

    /// What the run ends with: one free still waiting on a side stream when the snapshot is
    /// taken, then the out-of-memory errors the options plant.
    fn end(&self, a: &mut Allocator, rng: &mut Rng) {
        let (opts, sites) = (self.opts, self.sites);
        if let Some(t) = a.malloc(self.act_bytes, sites.temp[0], Category::Temporary, rng) {
            a.free(t, true, rng);
        }
        if opts.oom {
            a.malloc(opts.capacity_bytes, sites.act[0], Category::Activation, rng);
        }
        if opts.fragmentation_oom {
            fragment(a, sites, rng);
        }
        if opts.oom_in_worker {
            self.oom_in_worker(a, rng);
        }
    }

    /// A replica's forward pass in a worker thread, an allocation of the whole device that
    /// fails in it, and the exception unwinding through the worker, which lets go of what the
    /// pass made (frees whose stacks are the worker's frames only).
    fn oom_in_worker(&self, a: &mut Allocator, rng: &mut Rng) {
        let sites = self.sites;
        let mut made = Vec::new();
        for &site in &sites.worker_act {
            for k in 0..3u64 {
                if let Some(x) = a.malloc(self.act_bytes * (1 + k % 2), site, Category::Activation, rng) {
                    made.push(x);
                }
            }
        }
        a.malloc(self.opts.capacity_bytes, sites.worker_act[0], Category::Activation, rng);
        a.context = Some(sites.in_worker);
        for x in made.into_iter().rev() {
            a.free(x, false, rng);
        }
    }

    /// A planted allocation or free: its own randomness, its entries not counted against the
    /// target.
    fn planted(&mut self, a: &mut Allocator, f: impl FnOnce(&mut Allocator, &mut Rng) -> Option<u64>) -> Option<u64> {
        let before = a.trace.len();
        let p = f(a, &mut self.planted_rng);
        a.planted += a.trace.len() - before;
        p
    }

    /// A `record_function` annotation, as PyTorch keeps them: only while recording.
    fn mark(&mut self, a: &Allocator, start: bool, name: StrId) {
        if a.recording && self.opts.annotations {
            self.annotations.push(Annotation {
                stage: if start { self.names.start } else { self.names.end },
                name,
                device: a.device as i64,
                time_us: a.time_us,
                extras: Vec::new(),
            });
        }
    }
}

/// The optimizer's state tensors for a parameter of `rows` x `cols`, in bytes.
fn optimizer_state_bytes(optimizer: OptimizerKind, (rows, cols): (u64, u64)) -> Vec<u64> {
    let n = rows * cols;
    match optimizer {
        OptimizerKind::AdamW | OptimizerKind::Adam => vec![n * 4, n * 4],
        OptimizerKind::SgdMomentum => vec![n * 4],
        OptimizerKind::Sgd => Vec::new(),
        OptimizerKind::Adam8bit => vec![n, n, n.div_ceil(2048) * 4, n.div_ceil(2048) * 4],
        OptimizerKind::Adafactor if rows > 1 && cols > 1 => vec![rows * 4, cols * 4],
        OptimizerKind::Adafactor => vec![n * 4],
    }
}

/// Ends with an allocation that fails for fragmentation: a segment carved into equal pieces
/// every other one of which is freed (free blocks each half the request, together more than
/// it), then the device filled, then a request of two pieces.
fn fragment(a: &mut Allocator, sites: &Sites, rng: &mut Rng) {
    a.context = Some(sites.in_loop);
    // Sized from the allocator under the default settings (`Allocator::seen`), so that a run
    // under other settings asks for the same.
    let (largest, _) = a.seen();
    // Larger than any free block, so the pieces come from the new segment only.
    let piece = (largest + 1).next_power_of_two().max(64 << 20);
    a.release_cached(sites.in_loop, rng);
    let room = a.capacity.saturating_sub(a.seen().1);
    let n = (room / piece).saturating_sub(2).min(8) & !1;
    if n < 4 {
        return;
    }
    if let Some(whole) = a.malloc(n * piece, sites.act[0], Category::Temporary, rng) {
        a.free(whole, false, rng);
    }
    let pieces: Vec<u64> = (0..n).filter_map(|_| a.malloc(piece, sites.act[1], Category::Activation, rng)).collect();
    for &p in pieces.iter().step_by(2) {
        a.free(p, false, rng);
    }
    // Fill the device: what is left, in one segment of its own.
    let fill = a.capacity.saturating_sub(a.seen().1) / ROUND_LARGE * ROUND_LARGE;
    let filler = if fill >= MIN_LARGE_ALLOC { a.malloc(fill, sites.act[2], Category::Activation, rng) } else { None };
    a.malloc(2 * piece, sites.act[0], Category::Activation, rng);
    // The program catches the error and lets go of the filler and the pieces.
    for p in filler.into_iter().chain(pieces.iter().skip(1).step_by(2).copied()) {
        a.free(p, false, rng);
    }
}
