//! A profiler trace's events into a [`Snapshot`]: per device, its `[memory]` events as
//! allocations and frees, each with the frames of what enclosed it in time on its thread
//! (the operators, then the Python functions, innermost first), `Total Reserved` as the
//! reserved memory, `[OutOfMemory]` events as `oom` entries, `record_function` spans as
//! annotations.
//!
//! Only what the views need is kept while the file is read: a small row per memory event
//! and per span (start, end, thread, frame); frames and stacks are interned as they come.

use rustc_hash::FxHashMap;

use super::event::{micros_to_ns, Args, Event, Int};
use super::ProfilerInfo;
use crate::error::{ErrorKind, ReadError, Warning};
use crate::intern::StrId;
use crate::model::{Action, Annotation, DeviceInfo, Entry, Frame, FrameId, Snapshot, StackId, Trace, SPAN_FILE};

/// Frames kept per stack, innermost first (a recursion deeper than this is cut).
const MAX_FRAMES: usize = 256;
/// Where addresses made up for a trace without `Addr` start (beyond any real one).
const MADE_UP_BASE: u64 = 0x7e00_0000_0000;
/// Where the made-up segments that carry `Total Reserved` start, apart from the blocks.
const RESERVED_BASE: u64 = 0x7f00_0000_0000;

/// `c10::DeviceType::CPU`.
const CPU: i64 = 0;
/// `c10::DeviceType::CUDA`.
const CUDA: i64 = 1;

struct Mem {
    ts: i64,
    bytes: i64,
    addr: Option<u64>,
    total_allocated: Option<i64>,
    total_reserved: Option<i64>,
    device: (i64, i64),
    thread: u32,
    oom: bool,
    stack: Option<StackId>,
}

struct Span {
    start: i64,
    end: i64,
    thread: u32,
    what: What,
    /// An operator's `Call stack` (traces of 2021): an index into `call_stacks`.
    call_stack: Option<u32>,
}

#[derive(Clone, Copy)]
enum What {
    /// An operator or `record_function`: its frame.
    Op(FrameId),
    /// A Python function: an index into `py`, and the line of its caller it was called from.
    Python { name: u32, from: Option<(StrId, i64)> },
}

/// A `python_function`'s name, `file.py(12): name`, where 12 is the line the function starts
/// on: the frame's line is its callee's `CallFrom`.
struct PyName {
    name: StrId,
    file: StrId,
    def_line: i64,
    /// Built-in functions (`<built-in method randn of type object at 0x7f...>`) make no frame:
    /// PyTorch's stacks have none, and their text holds an address that differs per run.
    frame: bool,
}

/// The events read so far.
#[derive(Default)]
pub(crate) struct Builder {
    snap: Snapshot,
    mem: Vec<Mem>,
    spans: Vec<Span>,
    threads: FxHashMap<(i64, i64), u32>,
    ops: FxHashMap<Box<str>, FrameId>,
    py_names: FxHashMap<Box<str>, u32>,
    py: Vec<PyName>,
    py_frames: FxHashMap<(StrId, StrId, i64), FrameId>,
    stacks: FxHashMap<Vec<FrameId>, StackId>,
    /// The frames of the stack being looked up (one buffer for every memory event).
    scratch: Vec<FrameId>,
    call_stack_ids: FxHashMap<Box<str>, u32>,
    call_stacks: Vec<Vec<FrameId>>,
    /// `record_function` spans: start, end, name.
    annotations: Vec<(i64, i64, Box<str>)>,
    devices: Vec<DeviceInfo>,
    rank: Option<i64>,
    base_ns: i64,
    events: u64,
    skipped: u64,
}

fn int_arg(v: Option<Int>, what: &str) -> Result<Option<i64>, String> {
    v.map(|Int(x)| i64::try_from(x).map_err(|_| format!("`{what}` is {x}, out of range"))).transpose()
}

impl Builder {
    /// A member of the root object other than `traceEvents`.
    pub(crate) fn member(&mut self, key: &str, value: &[u8]) {
        #[derive(serde::Deserialize)]
        struct Prop {
            id: Option<Int>,
            name: Option<String>,
            #[serde(rename = "totalGlobalMem")]
            total: Option<Int>,
        }
        #[derive(serde::Deserialize)]
        struct Dist {
            rank: Option<Int>,
        }
        match key {
            "deviceProperties" => {
                if let Ok(props) = serde_json::from_slice::<Vec<Prop>>(value) {
                    self.devices = props
                        .into_iter()
                        .filter_map(|p| {
                            Some(DeviceInfo {
                                device: i64::try_from(p.id?.0).ok()?,
                                name: p.name.unwrap_or_default(),
                                total_bytes: u64::try_from(p.total?.0).ok()?,
                                ..DeviceInfo::default()
                            })
                        })
                        .collect();
                }
            }
            "distributedInfo" => {
                if let Ok(d) = serde_json::from_slice::<Dist>(value) {
                    self.rank = d.rank.and_then(|Int(r)| i64::try_from(r).ok());
                }
            }
            "baseTimeNanoseconds" => {
                if let Ok(Int(b)) = serde_json::from_slice::<Int>(value) {
                    self.base_ns = i64::try_from(b).unwrap_or(0);
                }
            }
            _ => {}
        }
    }

    /// One element of `traceEvents` (or of a root array of events).
    pub(crate) fn event(&mut self, index: u64, bytes: &[u8], offset: u64) -> Result<(), ReadError> {
        let bad = |msg: String| {
            ReadError::new(ErrorKind::Schema, format!("traceEvents[{index}]: {msg}"))
                .at(offset)
                .path(format!("traceEvents[{index}]"))
        };
        let e: Event = serde_json::from_slice(bytes).map_err(|e| {
            let kind = if e.is_data() { ErrorKind::Schema } else { ErrorKind::Malformed };
            let mut err = bad(format!("{e}"));
            err.kind = kind;
            err
        })?;
        self.events += 1;
        let name = e.name.as_deref().unwrap_or("");
        let ts = e.ts.map(|t| micros_to_ns(t.get()).ok_or_else(|| bad(format!("`ts` {} is not a time", t.get()))));
        let thread = self.thread(e.pid.map_or(0, |p| p.0), e.tid.map_or(0, |t| t.0));
        match (name, e.ph.as_deref()) {
            ("[memory]" | "[OutOfMemory]", _) => {
                let args = e.args.unwrap_or_default();
                let Some(ts) = ts.transpose()? else {
                    self.skipped += 1;
                    return Ok(());
                };
                self.memory(name == "[OutOfMemory]", ts, thread, &args).map_err(bad)?;
            }
            (_, Some("X")) => {
                let kind = e.cat.as_deref().unwrap_or("");
                let python = kind == "python_function";
                if !(python || matches!(kind, "cpu_op" | "Operator" | "user_annotation")) {
                    return Ok(());
                }
                let Some(start) = ts.transpose()? else { return Ok(()) };
                let dur = match e.dur {
                    Some(d) => {
                        micros_to_ns(d.get()).ok_or_else(|| bad(format!("`dur` {} is not a duration", d.get())))?
                    }
                    None => 0,
                };
                let end = start.saturating_add(dur.max(0));
                let args = e.args.as_ref();
                let what = if python {
                    let from = args.and_then(|a| a.call_from.as_deref()).and_then(|c| self.call_from(c));
                    What::Python { name: self.py_name(name), from }
                } else {
                    What::Op(self.op(name))
                };
                let call_stack = args.and_then(|a| a.call_stack.as_deref()).map(|cs| self.call_stack(cs));
                self.spans.push(Span { start, end, thread, what, call_stack });
                if kind == "user_annotation" {
                    self.annotations.push((start, end, name.into()));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn thread(&mut self, pid: i64, tid: i64) -> u32 {
        let n = self.threads.len() as u32;
        *self.threads.entry((pid, tid)).or_insert(n)
    }

    fn memory(&mut self, oom: bool, ts: i64, thread: u32, a: &Args) -> Result<(), String> {
        let bytes = int_arg(a.bytes, "Bytes")?.ok_or("a memory event without `Bytes`")?;
        let addr = match a.addr {
            Some(Int(x)) => Some(u64::try_from(x).map_err(|_| format!("`Addr` is {x}, not an address"))?),
            None => None,
        };
        let device =
            (int_arg(a.device_type, "Device Type")?.unwrap_or(CUDA), int_arg(a.device_id, "Device Id")?.unwrap_or(0));
        if device.0 == CUDA && !(0..1024).contains(&device.1) {
            return Err(format!("`Device Id` {} is not a device", device.1));
        }
        let total_reserved = int_arg(a.total_reserved, "Total Reserved")?;
        let total_allocated = int_arg(a.total_allocated, "Total Allocated")?;
        self.mem.push(Mem { ts, bytes, addr, total_allocated, total_reserved, device, thread, oom, stack: None });
        Ok(())
    }

    fn op(&mut self, name: &str) -> FrameId {
        if let Some(&f) = self.ops.get(name) {
            return f;
        }
        let f = self.snap.add_frame(name, SPAN_FILE, 0);
        self.ops.insert(name.into(), f);
        f
    }

    fn py_name(&mut self, text: &str) -> u32 {
        if let Some(&i) = self.py_names.get(text) {
            return i;
        }
        let (name, file, def_line) = split_python(text);
        let strings = &mut self.snap.strings;
        let p = PyName {
            name: strings.intern(name),
            file: strings.intern(file),
            def_line,
            frame: !text.starts_with("<built-in"),
        };
        self.py.push(p);
        let i = self.py.len() as u32 - 1;
        self.py_names.insert(text.into(), i);
        i
    }

    /// `file.py:12`.
    fn call_from(&mut self, text: &str) -> Option<(StrId, i64)> {
        let (file, line) = text.rsplit_once(':')?;
        Some((self.snap.strings.intern(file), line.trim().parse().ok()?))
    }

    fn py_frame(&mut self, name: StrId, file: StrId, line: i64) -> FrameId {
        if let Some(&f) = self.py_frames.get(&(name, file, line)) {
            return f;
        }
        self.snap.frames.push(Frame { name, filename: file, line, extras: Vec::new() });
        let f = FrameId(self.snap.frames.len() as u32 - 1);
        self.py_frames.insert((name, file, line), f);
        f
    }

    fn call_stack(&mut self, text: &str) -> u32 {
        if let Some(&i) = self.call_stack_ids.get(text) {
            return i;
        }
        let mut frames = Vec::new();
        for part in text.split(';').map(str::trim).filter(|s| !s.is_empty()).take(MAX_FRAMES) {
            // Here the line is the one running (the call), as in PyTorch's snapshots.
            let (name, file, line) = split_python(part);
            let (name, file) = (self.snap.strings.intern(name), self.snap.strings.intern(file));
            frames.push(self.py_frame(name, file, line));
        }
        self.call_stacks.push(frames);
        let i = self.call_stacks.len() as u32 - 1;
        self.call_stack_ids.insert(text.into(), i);
        i
    }

    /// The stacks of the memory events: per thread, one sweep over its spans in start order.
    fn attach_stacks(&mut self) {
        let mut spans: Vec<u32> = (0..self.spans.len() as u32).collect();
        let s = &self.spans;
        spans.sort_unstable_by_key(|&i| {
            (s[i as usize].thread, s[i as usize].start, std::cmp::Reverse(s[i as usize].end))
        });
        let mut mems: Vec<u32> = (0..self.mem.len() as u32).collect();
        let m = &self.mem;
        mems.sort_by_key(|&i| (m[i as usize].thread, m[i as usize].ts));
        let mut open: Vec<u32> = Vec::new();
        let mut next = 0;
        // A span that ended is still on the stack when one that started inside it outlasts it
        // (a `record_function` opened in `__enter__`): only the spans still open are frames.
        let mut live: Vec<u32> = Vec::new();
        let mut thread = u32::MAX;
        for &mi in &mems {
            let (t, ts) = (self.mem[mi as usize].thread, self.mem[mi as usize].ts);
            if t != thread {
                thread = t;
                open.clear();
                while next < spans.len() && self.spans[spans[next] as usize].thread < t {
                    next += 1;
                }
            }
            while next < spans.len() {
                let sp = &self.spans[spans[next] as usize];
                if sp.thread != t || sp.start > ts {
                    break;
                }
                while open.last().is_some_and(|&o| self.spans[o as usize].end < sp.start) {
                    open.pop();
                }
                open.push(spans[next]);
                next += 1;
            }
            while open.last().is_some_and(|&o| self.spans[o as usize].end < ts) {
                open.pop();
            }
            live.clear();
            live.extend(open.iter().copied().filter(|&o| self.spans[o as usize].end >= ts));
            if live.is_empty() {
                continue;
            }
            let stack = self.stack_of(&live);
            self.mem[mi as usize].stack = stack;
        }
    }

    /// The frames of the open spans, innermost first; an operator's `Call stack` stands for
    /// the Python frames where the trace has no `python_function` events.
    fn stack_of(&mut self, open: &[u32]) -> Option<StackId> {
        let mut frames = std::mem::take(&mut self.scratch);
        frames.clear();
        let mut python = false;
        let mut call_stack = None;
        // The line the next Python function out is running: its callee's `CallFrom`.
        let mut running: Option<(StrId, i64)> = None;
        for &o in open.iter().rev() {
            let sp = &self.spans[o as usize];
            if call_stack.is_none() {
                call_stack = sp.call_stack;
            }
            match sp.what {
                What::Op(f) => frames.push(f),
                What::Python { name, from } => {
                    python = true;
                    let p = &self.py[name as usize];
                    if p.frame {
                        let line = match running {
                            Some((file, line)) if file == p.file => line,
                            _ => p.def_line,
                        };
                        let (name, file) = (p.name, p.file);
                        frames.push(self.py_frame(name, file, line));
                    }
                    running = from;
                }
            }
        }
        if let (false, Some(cs)) = (python, call_stack) {
            frames.extend_from_slice(&self.call_stacks[cs as usize]);
        }
        frames.truncate(MAX_FRAMES);
        let stack = match self.stacks.get(&frames) {
            _ if frames.is_empty() => None,
            Some(&s) => Some(s),
            None => {
                let s = self.snap.add_stack(&frames);
                self.stacks.insert(frames.clone(), s);
                Some(s)
            }
        };
        self.scratch = frames;
        stack
    }

    /// Per device, the bytes its first `Total Allocated` counts that the trace never shows
    /// allocated: what the model's curve at that event lacks (its running sum of `Bytes`, plus
    /// what frees of allocations it never saw made alive from the start).
    fn before_the_trace(&self, order: &[u32], index: &FxHashMap<(i64, i64), usize>, devices: usize) -> Vec<u64> {
        let mut sum = vec![0i128; devices];
        let mut first: Vec<Option<(i64, i128)>> = vec![None; devices];
        let mut unseen = vec![0i128; devices];
        let mut live: FxHashMap<(usize, u64), u32> = FxHashMap::default();
        for &i in order {
            let m = &self.mem[i as usize];
            if m.oom {
                continue;
            }
            let d = index[&m.device];
            let key = (d, m.addr.unwrap_or(m.bytes.unsigned_abs()));
            sum[d] += i128::from(m.bytes);
            if m.bytes >= 0 {
                *live.entry(key).or_default() += 1;
            } else {
                match live.get_mut(&key).filter(|n| **n > 0) {
                    Some(n) => *n -= 1,
                    None => unseen[d] += i128::from(m.bytes.unsigned_abs()),
                }
            }
            if let (None, Some(ta)) = (first[d], m.total_allocated) {
                first[d] = Some((ta, sum[d]));
            }
        }
        (0..devices)
            .map(|d| first[d].map_or(0, |(ta, s)| u64::try_from(i128::from(ta) - s - unseen[d]).unwrap_or(0)))
            .collect()
    }

    /// The model, and what the reader says of it.
    pub(crate) fn finish(mut self) -> Result<(Snapshot, Vec<Warning>, ProfilerInfo), ReadError> {
        if self.events == 0 {
            return Err(ReadError::new(
                ErrorKind::Schema,
                "a JSON document with no events in `traceEvents` and no `segments`: neither a profiler trace with events nor a memory snapshot",
            ));
        }
        self.attach_stacks();
        // Devices: CUDA at their ordinals, other accelerators after them, the CPU last.
        let mut kinds: Vec<(i64, i64)> = self.mem.iter().map(|m| m.device).collect();
        kinds.sort_unstable_by_key(|&(t, id)| (t == CPU, t != CUDA, t, id));
        kinds.dedup();
        let mut index: FxHashMap<(i64, i64), usize> = FxHashMap::default();
        let mut names: Vec<String> = Vec::new();
        for &(t, id) in &kinds {
            let at = if t == CUDA { (id as usize).max(names.len()) } else { names.len() };
            names.resize(at, String::new());
            for (i, n) in names.iter_mut().enumerate() {
                if n.is_empty() {
                    *n = format!("cuda:{i} (no memory events)");
                }
            }
            names.push(match t {
                CPU => "cpu".to_string(),
                CUDA => format!("cuda:{id}"),
                other => format!("device type {other}:{id}"),
            });
            index.insert((t, id), at);
        }
        let mut order: Vec<u32> = (0..self.mem.len() as u32).collect();
        let m = &self.mem;
        order.sort_by_key(|&i| m[i as usize].ts);
        let addresses = self.mem.iter().any(|m| m.addr.is_some() && !m.oom);
        let before = self.before_the_trace(&order, &index, names.len());
        let before_stack = if before.iter().any(|&b| b > 0) {
            let f = self.snap.add_frame("memory allocated before the trace began (its Total Allocated)", SPAN_FILE, 0);
            Some(self.snap.add_stack(&[f]))
        } else {
            None
        };
        let mut traces: Vec<Trace> = (0..names.len()).map(|_| Trace::default()).collect();
        let mut made_up = MadeUp::default();
        let mut reserved: Vec<Reserved> = (0..names.len()).map(Reserved::new).collect();
        let capacity = |dev: (i64, i64)| {
            (dev.0 == CUDA).then(|| self.devices.iter().find(|d| d.device == dev.1).map(|d| d.total_bytes)).flatten()
        };
        for &i in &order {
            let m = &self.mem[i as usize];
            let d = index[&m.device];
            let time_us = Some((m.ts + self.base_ns).div_euclid(1000));
            let trace = &mut traces[d];
            if trace.is_empty() && before[d] > 0 {
                let mut e = Entry::new(Action::Alloc, made_up.fresh(before[d]), before[d], 0);
                e.time_us = time_us;
                e.frames = before_stack;
                trace.push(&e);
            }
            if let Some(r) = m.total_reserved {
                reserved[d].to(r.max(0) as u64, time_us, trace);
            }
            let mut e = if m.oom {
                let mut e = Entry::new(Action::Oom, 0, m.bytes.unsigned_abs(), 0);
                e.addr = None;
                e.device_free =
                    capacity(m.device).zip(m.total_reserved).map(|(c, r)| c.saturating_sub(r.max(0) as u64));
                e
            } else if m.bytes >= 0 {
                let addr = m.addr.unwrap_or_else(|| made_up.alloc(d, m.bytes as u64));
                Entry::new(Action::Alloc, addr, m.bytes as u64, 0)
            } else {
                let size = m.bytes.unsigned_abs();
                let addr = m.addr.unwrap_or_else(|| made_up.free(d, size));
                Entry::new(Action::FreeCompleted, addr, size, 0)
            };
            e.time_us = time_us;
            e.frames = m.stack;
            trace.push(&e);
        }
        let mut snap = self.snap;
        snap.device_traces = Some(traces);
        if !self.annotations.is_empty() {
            let (start, end) = (snap.strings.intern("START"), snap.strings.intern("END"));
            let mut anns = Vec::with_capacity(self.annotations.len() * 2);
            for (s, e, name) in &self.annotations {
                let name = snap.strings.intern(name);
                for (stage, t) in [(start, *s), (end, *e)] {
                    anns.push(Annotation {
                        stage,
                        name,
                        device: -1,
                        time_us: (t + self.base_ns).div_euclid(1000),
                        extras: Vec::new(),
                    });
                }
            }
            anns.sort_by_key(|a| a.time_us);
            snap.external_annotations = Some(anns);
        }
        let gpus: Vec<DeviceInfo> = (self.devices.iter())
            .filter_map(|d| Some(DeviceInfo { device: index.get(&(CUDA, d.device)).copied()? as i64, ..d.clone() }))
            .collect();
        if !gpus.is_empty() {
            snap.set_device_info(&gpus);
        }
        let mut warnings = Vec::new();
        if !addresses && !self.mem.is_empty() {
            warnings.push(Warning {
                message: "the trace's memory events have no `Addr` (PyTorch before 1.10): the totals curve is exact, but which allocation a free ends is a guess (the latest of its size)".into(),
                count: 1,
            });
        }
        if self.skipped > 0 {
            warnings.push(Warning { message: "memory events without `ts` were skipped".into(), count: self.skipped });
        }
        let info = ProfilerInfo {
            source: crate::profiler::TRACE.into(),
            devices: names,
            addresses,
            reserved: self.mem.iter().any(|m| m.total_reserved.is_some_and(|r| r > 0)),
            rank: self.rank,
            memory_events: self.mem.len() as u64,
        };
        Ok((snap, warnings, info))
    }
}

/// `file.py(12): name` as (name, file, 12); other names (`nn.Module: Linear_0`) whole.
fn split_python(text: &str) -> (&str, &str, i64) {
    if let Some((head, name)) = text.split_once("): ") {
        if let Some((file, line)) = head.rsplit_once('(') {
            if let Ok(line) = line.parse::<i64>() {
                return (name, file, line);
            }
        }
    }
    (text, SPAN_FILE, 0)
}

/// Addresses for a trace without `Addr`: each allocation a new one, a free ending the
/// latest allocation of its size still alive (or, when none is, memory allocated before the
/// trace).
#[derive(Default)]
struct MadeUp {
    next: u64,
    live: FxHashMap<(usize, u64), Vec<u64>>,
}

impl MadeUp {
    fn fresh(&mut self, size: u64) -> u64 {
        let a = MADE_UP_BASE + self.next;
        self.next += size.div_ceil(512).max(1) * 512;
        a
    }
    fn alloc(&mut self, device: usize, size: u64) -> u64 {
        let a = self.fresh(size);
        self.live.entry((device, size)).or_default().push(a);
        a
    }
    fn free(&mut self, device: usize, size: u64) -> u64 {
        match self.live.get_mut(&(device, size)).and_then(Vec::pop) {
            Some(a) => a,
            None => self.fresh(size),
        }
    }
}

/// `Total Reserved` as segments of their own address range: each rise a `segment_alloc`,
/// each fall `segment_free`s of the latest, the last one cut by a new `segment_alloc` of
/// what remains, so the reserved bytes equal the trace's at every event.
struct Reserved {
    now: u64,
    next: u64,
    live: Vec<(u64, u64)>,
}

impl Reserved {
    fn new(device: usize) -> Self {
        Reserved { now: 0, next: RESERVED_BASE + ((device as u64) << 36), live: Vec::new() }
    }
    fn seg(&mut self, action: Action, addr: u64, size: u64, time_us: Option<i64>, trace: &mut Trace) {
        let mut e = Entry::new(action, addr, size, 0);
        e.time_us = time_us;
        trace.push(&e);
    }
    fn to(&mut self, bytes: u64, time_us: Option<i64>, trace: &mut Trace) {
        if bytes > self.now {
            let (addr, size) = (self.next, bytes - self.now);
            self.next += size.div_ceil(512) * 512;
            self.live.push((addr, size));
            self.seg(Action::SegmentAlloc, addr, size, time_us, trace);
        } else {
            let mut drop = self.now - bytes;
            while drop > 0 {
                let Some((addr, size)) = self.live.pop() else { break };
                self.seg(Action::SegmentFree, addr, size, time_us, trace);
                if size > drop {
                    let keep = size - drop;
                    self.live.push((addr, keep));
                    self.seg(Action::SegmentAlloc, addr, keep, time_us, trace);
                    drop = 0;
                } else {
                    drop -= size;
                }
            }
        }
        self.now = bytes;
    }
}
