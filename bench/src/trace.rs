//! `bench trace [--mb N] [--keep DIR]`: a `torch.profiler` Chrome trace as large as asked,
//! written from a generated snapshot, read by `snapshot::read` beside two pickles: the same
//! snapshot, and a snapshot grown until its pickle is as large as the trace (the acceptance
//! of the trace reader: a trace opens within 3x the time of a snapshot of the same size).
//!
//! The trace is laid out as PyTorch 2.x's Kineto writes one on a GPU
//! (`prof.export_chrome_trace`, uncompressed), after `testdata/profiler/`'s real file: the
//! header with the device's properties, then the metadata events, the `cpu_op` and
//! `user_annotation` events of every thread in start order, the `[memory]` instants, the
//! `python_function` events in start order, and the profiler's own span. Each allocation
//! (`alloc`) and free (`free_completed`) of device 0 is a `[memory]` instant with the running
//! Total Allocated (and Total Reserved from the segment events), inside the ops that made it,
//! inside `python_function` events taken from the entry's Python frames. An entry whose stack
//! has no Python frame runs on autograd's thread, as backward does.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context as _};
use snapshot::{Action, BlockState, Snapshot, StrId};

const PID: u32 = 1234;
const MAIN_TID: u32 = 1234;
const AUTOGRAD_TID: u32 = 1301;
/// Where the first entry lands, in ns on Kineto's clock (`ts` is in µs with 3 decimals).
const FIRST_NS: u64 = 5_769_260_531_427_803;
/// One µs of the snapshot's clock: the room each entry has for its events.
const SLOT_NS: u64 = 8_000;
const BASE_TIME_NS: u64 = 1_790_857_026_000_000_000;

/// µs with 3 decimals, from ns.
struct Us(u64);

impl fmt::Display for Us {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// A JSON string's body, escaped.
struct Esc<'a>(&'a str);

impl fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
                c => write!(f, "{c}")?,
            }
        }
        Ok(())
    }
}

/// A tensor shape from its bytes (bf16): `[n, 2048]` when it divides, else `[n]`.
struct Shape(u64);

impl Shape {
    fn dims(&self) -> (u64, Option<u64>) {
        let elems = (self.0 / 2).max(1);
        if elems.is_multiple_of(2048) && elems > 2048 {
            (elems / 2048, Some(2048))
        } else {
            (elems, None)
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dims() {
            (a, Some(b)) => write!(f, "[{a}, {b}]"),
            (a, None) => write!(f, "[{a}]"),
        }
    }
}

/// Its strides.
struct Strides(u64);

impl fmt::Display for Strides {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Shape(self.0).dims() {
            (_, Some(b)) => write!(f, "[{b}, 1]"),
            (_, None) => f.write_str("[1]"),
        }
    }
}

#[derive(Clone, Copy)]
enum Name {
    Static(&'static str),
    Snap(StrId),
}

#[derive(Clone, Copy)]
enum Args {
    /// A factory (`aten::empty`): the shape as a concrete input.
    Factory(u64),
    /// A computing op on tensors of this many bytes, recorded for autograd.
    Compute(u64),
    /// A view of a tensor of this many bytes.
    View(u64),
    /// No inputs (a `user_annotation`, autograd's `evaluate_function`).
    Plain,
}

struct Op {
    start: u64,
    dur: u64,
    tid: u32,
    cat: &'static str,
    name: Name,
    args: Args,
}

struct Mem {
    ts: u64,
    tid: u32,
    reserved: u64,
    allocated: u64,
    bytes: i64,
    addr: u64,
}

struct Py {
    start: u64,
    end: u64,
    /// 0: none.
    parent: u32,
    name: u32,
    call_from: u32,
}

/// What one trace holds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Written {
    pub bytes: u64,
    pub memory: u64,
    pub cpu_ops: u64,
    pub annotations: u64,
    pub python: u64,
}

/// The ops an allocation runs in, by the innermost Python function of its stack: the op
/// called from Python, the one inside it that allocates, and a view after it.
fn ops_of(func: &str) -> (&'static str, &'static str, &'static str) {
    match func {
        "linear" => ("aten::linear", "aten::addmm", "aten::t"),
        "matmul" => ("aten::matmul", "aten::bmm", "aten::expand"),
        "gelu" => ("aten::gelu", "aten::empty_like", "aten::view"),
        "layer_norm" => ("aten::layer_norm", "aten::native_layer_norm", "aten::view"),
        "softmax" => ("aten::softmax", "aten::_softmax", "aten::view"),
        "dropout" => ("aten::dropout", "aten::native_dropout", "aten::empty_like"),
        "cross_entropy" => ("aten::cross_entropy_loss", "aten::_log_softmax", "aten::view"),
        "kaiming_uniform_" => ("aten::zeros", "aten::empty", "aten::zero_"),
        "_init_group" => ("aten::zeros_like", "aten::empty_like", "aten::zero_"),
        "_multi_tensor_adamw" => ("aten::_foreach_sqrt", "aten::empty", "aten::view"),
        "get_batch" => ("aten::to", "aten::_to_copy", "aten::copy_"),
        _ => ("aten::clone", "aten::empty_like", "aten::copy_"),
    }
}

const BACKWARD: (&str, &str, &str) = ("autograd::engine::evaluate_function: MmBackward0", "aten::mm", "aten::t");

/// `site-packages/torch/nn/functional.py` as the Python tracer names it.
fn short(file: &str) -> &str {
    match file.rfind("site-packages/") {
        Some(i) => &file[i + "site-packages/".len()..],
        None => file.rsplit('/').next().unwrap_or(file),
    }
}

fn jitter(i: usize) -> u64 {
    let mut z = (i as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % 1000
}

/// Interned texts of the Python events.
#[derive(Default)]
struct Texts {
    list: Vec<String>,
    index: HashMap<String, u32>,
}

impl Texts {
    fn get(&mut self, s: String) -> u32 {
        if let Some(&i) = self.index.get(&s) {
            return i;
        }
        self.list.push(s.clone());
        self.index.insert(s, self.list.len() as u32 - 1);
        self.list.len() as u32 - 1
    }
}

/// The events of device `device`'s trace, before writing.
struct Events {
    ops: Vec<Op>,
    mem: Vec<Mem>,
    py: Vec<Py>,
    texts: Texts,
    first: u64,
    last: u64,
}

fn events(snap: &Snapshot, device: usize) -> Events {
    let trace = snap.trace(device);
    let mut ev =
        Events { ops: Vec::new(), mem: Vec::new(), py: Vec::new(), texts: Texts::default(), first: 0, last: 0 };
    let t0 = (0..trace.len()).find_map(|i| trace.time_us(i)).unwrap_or(0);
    // The snapshot's µs, made strictly increasing, to ns from the first entry.
    let mut prev: Option<i64> = None;
    let mut slots = Vec::with_capacity(trace.len());
    for i in 0..trace.len() {
        let t = trace.time_us(i).unwrap_or(t0).max(prev.map_or(i64::MIN, |p| p + 1));
        prev = Some(t);
        slots.push((t - t0).max(0) as u64 * SLOT_NS);
    }
    // What was reserved and allocated before the first entry: the final segments less what
    // the trace did.
    let (mut net_reserved, mut net_allocated) = (0i128, 0i128);
    for i in 0..trace.len() {
        let size = i128::from(trace.size(i));
        match trace.action(i) {
            Action::SegmentAlloc | Action::SegmentMap => net_reserved += size,
            Action::SegmentFree | Action::SegmentUnmap => net_reserved -= size,
            Action::Alloc => net_allocated += size,
            Action::FreeCompleted | Action::Free => net_allocated -= size,
            _ => {}
        }
    }
    let segments = snap.segments.iter().filter(|s| s.device == device as i64);
    let final_reserved: u64 = segments.clone().map(|s| s.total_size).sum();
    let final_allocated: u64 = segments
        .flat_map(|s| &s.blocks)
        .filter(|b| matches!(b.state, BlockState::ActiveAllocated | BlockState::ActivePendingFree))
        .map(|b| b.size)
        .sum();
    let before = |last: u64, net: i128| u64::try_from(i128::from(last) - net).unwrap_or(0);
    let (mut reserved, mut allocated) = (before(final_reserved, net_reserved), before(final_allocated, net_allocated));
    // The main thread's open Python functions: (filename, name) and their event.
    let mut open: Vec<((StrId, StrId), u32)> = Vec::new();
    let mut last_main = 0u64;
    let mut python: Vec<snapshot::FrameId> = Vec::new();
    for (i, &slot) in slots.iter().enumerate() {
        let size = trace.size(i);
        let action = trace.action(i);
        match action {
            Action::SegmentAlloc | Action::SegmentMap => reserved += size,
            Action::SegmentFree | Action::SegmentUnmap => reserved = reserved.saturating_sub(size),
            _ => {}
        }
        let alloc = match action {
            Action::Alloc => true,
            Action::FreeCompleted | Action::Free => false,
            _ => continue,
        };
        if alloc {
            allocated += size;
        } else {
            allocated = allocated.saturating_sub(size);
        }
        let m = FIRST_NS + slot + jitter(i);
        python.clear();
        let stack = trace.frames(i).map(|s| snap.stacks.get(s)).unwrap_or(&[]);
        python.extend(
            stack
                .iter()
                .rev()
                .filter(|f| snap.frames.get(f.0 as usize).is_some_and(|f| snap.str(f.filename).ends_with(".py"))),
        );
        let main = !python.is_empty() || stack.is_empty();
        let tid = if main { MAIN_TID } else { AUTOGRAD_TID };
        let mut innermost = "";
        if !python.is_empty() {
            let key = |f: snapshot::FrameId| {
                let fr = &snap.frames[f.0 as usize];
                (fr.filename, fr.name)
            };
            let same = open.iter().zip(&python).take_while(|(o, &f)| o.0 == key(f)).count();
            for (d, (_, id)) in open.drain(same..).enumerate().map(|(k, o)| (k + same, o)) {
                ev.py[id as usize - 1].end = last_main + 2000 - 20 * d.min(39) as u64;
            }
            for d in same..python.len() {
                let fr = &snap.frames[python[d].0 as usize];
                let from = &snap.frames[python[d.saturating_sub(1)].0 as usize];
                let name =
                    ev.texts.get(format!("{}({}): {}", short(snap.str(fr.filename)), fr.line, snap.str(fr.name)));
                let call_from = ev.texts.get(format!("{}:{}", short(snap.str(from.filename)), from.line));
                let parent = open.last().map_or(0, |o| o.1);
                ev.py.push(Py { start: m - 3000 + 20 * d.min(39) as u64, end: 0, parent, name, call_from });
                open.push((key(python[d]), ev.py.len() as u32));
            }
            last_main = m;
            innermost = snap.str(snap.frames[python[python.len() - 1].0 as usize].name);
        }
        if let Some(&f) = python.last() {
            // Python calls that allocate nothing: the module's attributes the call reads.
            let parent = open.last().map_or(0, |o| o.1);
            let fr = &snap.frames[f.0 as usize];
            let name = ev.texts.get("torch/nn/modules/module.py(1915): __getattr__".to_string());
            let call_from = ev.texts.get(format!("{}:{}", short(snap.str(fr.filename)), fr.line));
            for k in 0..if alloc { 2 } else { 1 } {
                ev.py.push(Py { start: m - 2200 + 130 * k, end: m - 2100 + 130 * k, parent, name, call_from });
            }
        }
        let (outer, inner, view) = if main { ops_of(innermost) } else { BACKWARD };
        let compute = if main { Args::Compute(size) } else { Args::Plain };
        if alloc {
            if main && !python.is_empty() {
                // The C function Python called, around the op.
                let parent = open.last().map_or(0, |o| o.1);
                let fr = &snap.frames[python[python.len() - 1].0 as usize];
                let name =
                    ev.texts.get(format!("<built-in function {}>", &outer[outer.find("::").map_or(0, |k| k + 2)..]));
                let call_from = ev.texts.get(format!("{}:{}", short(snap.str(fr.filename)), fr.line));
                ev.py.push(Py { start: m - 1800, end: m + 1000, parent, name, call_from });
            }
            let op = |start, dur, name, args| Op { start, dur, tid, cat: "cpu_op", name: Name::Static(name), args };
            ev.ops.push(op(m - 1600, 2500, outer, compute));
            ev.ops.push(op(m - 900, 1200, inner, if main { Args::Factory(size) } else { Args::Compute(size) }));
            ev.ops.push(op(m + 400, 300, view, Args::View(size)));
        } else {
            ev.ops.push(Op { start: m - 700, dur: 1000, tid, cat: "cpu_op", name: Name::Static(outer), args: compute });
        }
        ev.mem.push(Mem {
            ts: m,
            tid,
            reserved,
            allocated,
            bytes: if alloc { size as i64 } else { -(size as i64) },
            addr: trace.addr(i),
        });
        if ev.first == 0 {
            ev.first = m;
        }
        ev.last = m;
    }
    for (d, (_, id)) in open.drain(..).enumerate() {
        ev.py[id as usize - 1].end = last_main + 2000 - 20 * d.min(39) as u64;
    }
    // `record_function` annotations, as `user_annotation` events between the entries.
    // Each lands after the events of the entries of its µs and before the next µs's, in
    // the order recorded (an end and a start in the same µs do not cross).
    let mut started: HashMap<StrId, Vec<u64>> = HashMap::new();
    let mut spans = Vec::new();
    let mut same = (i64::MIN, 0u64);
    for a in snap.external_annotations.iter().flatten().filter(|a| a.on_device(device)) {
        same = if same.0 == a.time_us { (a.time_us, (same.1 + 1).min(99)) } else { (a.time_us, 0) };
        let at = FIRST_NS + (a.time_us - t0).max(0) as u64 * SLOT_NS + 3000 + 10 * same.1;
        if snap.str(a.stage) == "START" {
            started.entry(a.name).or_default().push(at);
        } else if let Some(s) = started.get_mut(&a.name).and_then(Vec::pop) {
            spans.push((s, at, a.name));
        }
    }
    for (start, end, name) in spans {
        let dur = end.saturating_sub(start).max(1);
        ev.ops.push(Op {
            start,
            dur,
            tid: MAIN_TID,
            cat: "user_annotation",
            name: Name::Snap(name),
            args: Args::Plain,
        });
    }
    ev.ops.sort_by_key(|o| (o.start, std::cmp::Reverse(o.dur)));
    for p in &ev.py {
        ev.first = ev.first.min(p.start);
        ev.last = ev.last.max(p.end);
    }
    ev
}

/// Counts what goes through.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Writes device `device`'s trace of `snap` as Kineto's Chrome trace.
pub fn write_trace(snap: &Snapshot, device: usize, out: impl Write, trace_name: &str) -> io::Result<Written> {
    let ev = events(snap, device);
    let mut w = Counting { inner: io::BufWriter::with_capacity(1 << 20, out), bytes: 0 };
    let start = ev.first.saturating_sub(100_000);
    let end = ev.last + 100_000;
    write!(
        w,
        r#" {{
    "schemaVersion": 1,
    "deviceProperties": [
      {{
      "id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912,
      "computeMajor": 9, "computeMinor": 0,
      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
      "regsPerBlock": 65536, "warpSize": 32,
      "sharedMemPerBlock": 49152, "numSms": 132
    , "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472
      }}
    ],
    "cupti_version": 24,
    "cuda_runtime_version": 12080,
    "cuda_driver_version": 12080,
    
      "trace_id": "7F3A9C2E51B04D8E9A6C0B1D2E3F4A5B",
      "with_stack": 1,
      "profile_memory": 1,
      "record_shapes": 1,
      "host_name": "gpu-node",
    "displayTimeUnit": "ms",
    "baseTimeNanoseconds": {BASE_TIME_NS},
    "traceEvents": [
    "#
    )?;
    let meta = |w: &mut Counting<_>, name: &str, tid: u32, arg: &str, value: &str| {
        write!(
            w,
            "\n  {{\n    \"ph\": \"M\",\n    \"name\": \"{name}\",\n    \"ts\": {},\n    \"pid\": {PID},\n    \"tid\": {tid},\n    \"args\": {{\n      \"{arg}\": {value}\n    }}\n  }},",
            Us(start)
        )
    };
    meta(&mut w, "process_name", 0, "name", "\"python\"")?;
    meta(&mut w, "process_labels", 0, "labels", "\"CPU\"")?;
    meta(&mut w, "process_sort_index", 0, "sort_index", &PID.to_string())?;
    for tid in [MAIN_TID, AUTOGRAD_TID] {
        meta(&mut w, "thread_name", tid, "name", &format!("\"thread {tid} (python)\""))?;
        meta(&mut w, "thread_sort_index", tid, "sort_index", &tid.to_string())?;
    }
    let mut idx = 0u64;
    let mut written = Written::default();
    let mut seq = 0u64;
    for (k, op) in ev.ops.iter().enumerate() {
        let name = match op.name {
            Name::Static(s) => s,
            Name::Snap(id) => snap.str(id),
        };
        write!(
            w,
            "\n  {{\n    \"ph\": \"X\",\n    \"cat\": \"{}\",\n    \"name\": \"{}\",\n    \"pid\": {PID},\n    \"tid\": {},\n    \"ts\": {},\n    \"dur\": {}\n    ,\n    \"args\": {{\n      \"External id\": {},",
            op.cat,
            Esc(name),
            op.tid,
            Us(op.start),
            Us(op.dur),
            k + 1
        )?;
        match op.args {
            Args::Factory(b) => write!(
                w,
                "\"Record function id\": 0, \"Concrete Inputs\": [\"{}\", \"15\", \"0\", \"\", \"False\", \"\"], \"Input type\": [\"ScalarList\", \"Scalar\", \"Scalar\", \"\", \"Scalar\", \"\"], \"Input Strides\": [[], [], [], [], [], []], \"Input Dims\": [[], [], [], [], [], []], ",
                Shape(b)
            )?,
            Args::Compute(b) => {
                seq += 1;
                write!(
                    w,
                    "\"Sequence number\": {seq}, \"Fwd thread id\": 0, \"Record function id\": 0, \"Concrete Inputs\": [\"\", \"\", \"\"], \"Input type\": [\"c10::BFloat16\", \"c10::BFloat16\", \"c10::BFloat16\"], \"Input Strides\": [{}, [2048, 1], [1]], \"Input Dims\": [{}, [2048, 2048], [2048]], ",
                    Strides(b),
                    Shape(b)
                )?;
            }
            Args::View(b) => write!(
                w,
                "\"Record function id\": 0, \"Concrete Inputs\": [\"\", \"{}\"], \"Input type\": [\"c10::BFloat16\", \"ScalarList\"], \"Input Strides\": [{}, []], \"Input Dims\": [{}, []], ",
                Shape(b),
                Strides(b),
                Shape(b)
            )?,
            Args::Plain => write!(w, "\"Record function id\": 0, ")?,
        }
        write!(w, "\"Ev Idx\": {idx}\n    }}\n  }},")?;
        idx += 1;
        if op.cat == "cpu_op" {
            written.cpu_ops += 1;
        } else {
            written.annotations += 1;
        }
    }
    for m in &ev.mem {
        write!(
            w,
            "\n  {{\n    \"ph\": \"i\",\n    \n    \"cat\": \"cpu_instant_event\",\n    \"s\": \"t\",\n    \"name\": \"[memory]\",\n    \"pid\": {PID},\n    \"tid\": {},\n    \"ts\": {}\n    ,\n    \"args\": {{\n      \"Total Reserved\": {}, \"Total Allocated\": {}, \"Bytes\": {}, \"Device Id\": {device}, \"Device Type\": 1, \"Addr\": {}, \"finished\": false, \"Ev Idx\": {idx}\n    }}\n  }},",
            m.tid,
            Us(m.ts),
            m.reserved,
            m.allocated,
            m.bytes,
            m.addr
        )?;
        idx += 1;
        written.memory += 1;
    }
    for (k, p) in ev.py.iter().enumerate() {
        write!(
            w,
            "\n  {{\n    \"ph\": \"X\",\n    \"cat\": \"python_function\",\n    \"name\": \"{}\",\n    \"pid\": {PID},\n    \"tid\": {MAIN_TID},\n    \"ts\": {},\n    \"dur\": {}\n    ,\n    \"args\": {{\n      \"CallFrom\": \"{}\", ",
            Esc(&ev.texts.list[p.name as usize]),
            Us(p.start),
            Us(p.end.saturating_sub(p.start)),
            Esc(&ev.texts.list[p.call_from as usize]),
        )?;
        if p.parent != 0 {
            write!(w, "\"Python parent id\": {}, ", p.parent)?;
        }
        write!(w, "\"Python id\": {}, \"Ev Idx\": {idx}\n    }}\n  }},", k + 1)?;
        idx += 1;
        written.python += 1;
    }
    write!(
        w,
        r#"
  {{
    "ph": "X",
    "cat": "Trace",
    "name": "PyTorch Profiler (0)",
    "pid": "Spans",
    "tid": "PyTorch Profiler",
    "ts": {s},
    "dur": {d}
    ,
    "args": {{
      "Op count": 0
    }}
  }},
  {{
    "ph": "M",
    "name": "process_sort_index",
    "ts": {s},
    "pid": "Spans",
    "tid": 0,
    "args": {{
      "sort_index": 536870912
    }}
  }},
  {{
    "ph": "i",
    
    "s": "g",
    "name": "Iteration Start: PyTorch Profiler",
    "pid": "Traces",
    "tid": "Trace PyTorch Profiler",
    "ts": {s}
    
  }},
  {{
    "ph": "i",
    
    "s": "g",
    "name": "Record Window End",
    "pid": "",
    "tid": "",
    "ts": {e}
    
  }}
  ],"traceName": "{n}" }}"#,
        s = Us(start),
        d = Us(end - start),
        e = Us(end + 5_000),
        n = Esc(trace_name),
    )?;
    w.flush()?;
    written.bytes = w.bytes;
    Ok(written)
}

fn generate(entries: usize) -> Snapshot {
    snapshot::synth::generate(&snapshot::synth::Options { target_entries: entries, ..Default::default() })
}

fn pickle_bytes(snap: &Snapshot, path: &Path) -> anyhow::Result<u64> {
    let f = io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    snapshot::write::write_pickle(snap, f)?;
    Ok(std::fs::metadata(path)?.len())
}

/// Removes the temporary folder at the end, unless it was asked for.
struct Folder {
    path: PathBuf,
    keep: bool,
}

impl Drop for Folder {
    fn drop(&mut self) {
        if !self.keep {
            std::fs::remove_dir_all(&self.path).ok();
        }
    }
}

struct Timed {
    ms: f64,
    reader_memory: u64,
    model: usize,
    entries: usize,
}

/// `snapshot::read` of the file, read into memory first: best of 3.
fn time_read(path: &Path) -> anyhow::Result<Result<Timed, String>> {
    let bytes = std::fs::read(path)?;
    let mut best: Option<Timed> = None;
    for _ in 0..3 {
        let t = Instant::now();
        let r = snapshot::read(&bytes);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let loaded = match r {
            Ok(l) => l,
            Err(e) => return Ok(Err(format!("{e} (after {ms:.0} ms)"))),
        };
        let timed = Timed {
            ms,
            reader_memory: loaded.reader_memory_bytes,
            model: loaded.snapshot.heap_bytes(),
            entries: loaded.snapshot.trace(0).len(),
        };
        drop(loaded);
        if best.as_ref().is_none_or(|b| timed.ms < b.ms) {
            best = Some(timed);
        }
    }
    Ok(best.context("no run").map_err(|e| e.to_string()))
}

pub fn main(args: &[String]) -> anyhow::Result<()> {
    let mut mb = 20.0f64;
    let mut keep: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--mb" => mb = it.next().context("--mb N")?.parse().context("--mb N")?,
            "--keep" => keep = Some(PathBuf::from(it.next().context("--keep DIR")?)),
            other => bail!("unknown argument {other} (bench trace [--mb N] [--keep DIR])"),
        }
    }
    if mb.is_nan() || mb <= 0.0 {
        bail!("--mb must be positive");
    }
    let target = (mb * 1e6) as u64;
    let folder = match keep {
        Some(p) => Folder { path: p, keep: true },
        None => Folder {
            path: std::env::temp_dir().join(format!("memscape-bench-trace-{}", std::process::id())),
            keep: false,
        },
    };
    std::fs::create_dir_all(&folder.path)?;
    println!(
        "memscape trace reader benchmark ({} cores), target {mb} MB",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    // Bytes of trace per snapshot entry, on a small run.
    let small = generate(50_000);
    let probe = write_trace(&small, 0, io::sink(), "probe")?;
    let per_entry = probe.bytes as f64 / small.trace(0).len() as f64;
    drop(small);
    let mut entries = ((target as f64 / per_entry) as usize).max(1000);
    // Then once or twice more from what that size gave (the bytes per entry grow a little
    // with the run).
    let t = Instant::now();
    let mut snap = generate(entries);
    for _ in 0..2 {
        let bytes = write_trace(&snap, 0, io::sink(), "probe")?.bytes;
        if (bytes as f64 / target as f64 - 1.0).abs() < 0.01 {
            break;
        }
        entries = ((entries as f64 * target as f64 / bytes as f64) as usize).max(1000);
        snap = generate(entries);
    }
    let gen_s = t.elapsed().as_secs_f64();
    let name = format!("synth-{mb}MB");
    let trace_path = folder.path.join(format!("{name}.pt.trace.json"));
    let t = Instant::now();
    let f = std::fs::File::create(&trace_path)?;
    let written = write_trace(&snap, 0, f, &trace_path.display().to_string())?;
    let write_s = t.elapsed().as_secs_f64();
    let n_entries = snap.trace(0).len();
    println!(
        "\ntrace: {} ({:.1} MB; generated {n_entries} entries in {gen_s:.1} s, written in {write_s:.1} s)",
        trace_path.display(),
        written.bytes as f64 / 1e6
    );
    println!(
        "  {} [memory] events, {} cpu_op, {} python_function, {} user_annotation: {:.0} bytes of trace per [memory] event; per [memory] event {:.2} cpu_op and {:.2} python_function (the real CPU trace of testdata/profiler: 1.91 and 2.58)",
        written.memory,
        written.cpu_ops,
        written.python,
        written.annotations,
        written.bytes as f64 / written.memory as f64,
        written.cpu_ops as f64 / written.memory as f64,
        written.python as f64 / written.memory as f64,
    );
    let same_path = folder.path.join(format!("{name}.same-snapshot.pickle"));
    let same_bytes = pickle_bytes(&snap, &same_path)?;
    println!("same snapshot as a pickle: {} ({:.1} MB)", same_path.display(), same_bytes as f64 / 1e6);
    let pickle_per_entry = same_bytes as f64 / n_entries as f64;
    drop(snap);

    // A snapshot whose pickle is as large as the trace: sized from the bytes per entry, then
    // once more from what that gave.
    let grown_path = folder.path.join(format!("{name}.same-size.pickle"));
    let mut guess = (written.bytes as f64 / pickle_per_entry) as usize;
    let mut grown_bytes = 0;
    let mut grown_entries = 0;
    for _ in 0..3 {
        let s = generate(guess);
        grown_entries = s.trace(0).len();
        grown_bytes = pickle_bytes(&s, &grown_path)?;
        let off = grown_bytes as f64 / written.bytes as f64 - 1.0;
        if off.abs() < 0.005 {
            break;
        }
        guess = (guess as f64 * written.bytes as f64 / grown_bytes as f64) as usize;
    }
    println!(
        "snapshot of the same size: {} ({:.1} MB, {grown_entries} entries; {:+.2}% of the trace's bytes)",
        grown_path.display(),
        grown_bytes as f64 / 1e6,
        (grown_bytes as f64 / written.bytes as f64 - 1.0) * 100.0
    );

    println!("\n`snapshot::read` of each file, read into memory first; best of 3:\n");
    println!("| file | MB | read (ms) | MB/s | reader memory (MB) | model heap (MB) | device 0 entries read (entries, or [memory] events, written) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut results = Vec::new();
    for (label, path, bytes, expect) in [
        ("profiler trace", &trace_path, written.bytes, written.memory as usize),
        ("snapshot of the same size", &grown_path, grown_bytes, grown_entries),
        ("the trace's snapshot", &same_path, same_bytes, n_entries),
    ] {
        let mbs = bytes as f64 / 1e6;
        match time_read(path)? {
            Ok(r) => {
                println!(
                    "| {label} | {mbs:.1} | {:.1} | {:.0} | {:.1} | {:.1} | {} ({expect}) |",
                    r.ms,
                    mbs / (r.ms / 1e3),
                    r.reader_memory as f64 / 1e6,
                    r.model as f64 / 1e6,
                    r.entries
                );
                results.push(Some(r.ms));
            }
            Err(e) => {
                println!("| {label} | {mbs:.1} | refused: {e} | | | | |");
                results.push(None);
            }
        }
    }
    match (results[0], results[1]) {
        (Some(t), Some(s)) => println!("\ntrace / snapshot of the same size: {:.2}x (acceptance: within 3x)", t / s),
        (None, Some(s)) => {
            println!("\ntrace / snapshot of the same size: no figure: the trace was not read (the baseline: {s:.1} ms)")
        }
        _ => println!("\ntrace / snapshot of the same size: no figure"),
    }
    if folder.keep {
        println!("files kept in {}", folder.path.display());
    }
    Ok(())
}
