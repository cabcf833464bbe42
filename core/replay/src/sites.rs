//! Call sites: the line of the user's code an allocation is charged to. One rule for every
//! view that names one (the diff's call sites, the doctor's holders, the flame graph's lines
//! of your code, the leak suspects, search by call site, the categories' evidence).
//!
//! - An element is charged to its **allocation's** stack ([`Charge`]), never to its free's:
//!   the frees after an out-of-memory error run while the exception unwinds, in whatever
//!   thread let go of the tensors. A block allocated before the recording (no `alloc` entry)
//!   is named for what is known of it: allocated before recording, and where it was freed.
//! - In a stack, the first frame of the user's own code, innermost first.
//! - A frame of compiled code (`<eval_with_key>.N`, an Inductor output file) that carries the
//!   original model code (`fx_original_trace`, written by
//!   `_snapshot(augment_with_fx_traces=True)`) is named by that code's innermost user line,
//!   not by the generated file.
//! - A stack with no Python frame (backward under `stacks="all"`: autograd's threads have
//!   none) is named by its autograd node and the aten op that allocated
//!   (`backward: SelectBackward0, aten::zeros`; [`autograd_node`] knows every node kind),
//!   never by an allocator, unwinder or destructor frame.

use crate::model::{Frame, FrameId, Snapshot, StackId};
use crate::timeline::{Element, Origin};

/// `file` as `/`-separated text contains `part` (or `\\`-separated: the replaced copy is made
/// only for a file that has a backslash, since this runs per frame).
pub fn has(file: &str, part: &str) -> bool {
    file.contains(part) || (file.contains('\\') && file.contains(&part.replace('/', "\\")))
}

/// A Python source file.
pub fn is_py(file: &str) -> bool {
    file.ends_with(".py")
}

/// A file of library code (PyTorch, site-packages, the standard library), generated code
/// (`<eval_with_key>.3`, Inductor's output under `torchinductor_`) or C++.
fn is_library_file(file: &str) -> bool {
    !is_py(file)
        || has(file, "site-packages/")
        || has(file, "dist-packages/")
        || has(file, "/lib/python")
        || has(file, "torch/")
        || has(file, "torchinductor_")
        || file.starts_with('<')
}

/// A frame from a library, generated code or C++.
pub fn is_library(snap: &Snapshot, f: &Frame) -> bool {
    is_library_file(snap.str(f.filename))
}

/// One line of a Python traceback: `File "path", line N, in name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceLine<'a> {
    /// The file.
    pub file: &'a str,
    /// The line number.
    pub line: i64,
    /// The function.
    pub name: &'a str,
}

impl std::fmt::Display for TraceLine<'_> {
    /// `file:line:name`, as call sites are written.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.name)
    }
}

/// The `File "...", line N, in name` lines of a Python traceback as `traceback` formats it
/// (the original model code of an FX node), outermost first as written.
pub fn traceback_lines(text: &str) -> Vec<TraceLine<'_>> {
    text.lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("File \"")?;
            let (file, rest) = rest.split_once("\", line ")?;
            let (num, rest) = rest.split_once(',').unwrap_or((rest, ""));
            let name = rest.trim_start().strip_prefix("in ").unwrap_or("").trim();
            Some(TraceLine { file, line: num.trim().parse().ok()?, name })
        })
        .collect()
}

/// The innermost line of the user's own code in a Python traceback (else its innermost line).
pub fn innermost_user_line(text: &str) -> Option<TraceLine<'_>> {
    let lines = traceback_lines(text);
    lines.iter().rev().find(|t| !is_library_file(t.file)).or(lines.last()).cloned()
}

/// The original model code behind a frame of compiled code, when the file says it.
fn original_line<'a>(snap: &'a Snapshot, f: &'a Frame) -> Option<TraceLine<'a>> {
    innermost_user_line(crate::frames::fx_field(snap, f, "fx_original_trace")?)
}

/// The forward traceback of a backward allocation (`forward_frames`, 2.11+, under anomaly
/// mode: a list of lines as Python's `traceback` formats them) among a block's or an entry's
/// other keys, joined.
pub fn forward_frames(snap: &Snapshot, extras: &[(crate::StrId, crate::Value)]) -> Option<String> {
    let (_, v) = extras.iter().find(|(k, _)| snap.str(*k) == "forward_frames")?;
    let crate::Value::List(items) = v else { return None };
    let text: String = items
        .iter()
        .filter_map(|x| match x {
            crate::Value::Str(s) => Some(&**s),
            _ => None,
        })
        .collect();
    (!text.trim().is_empty()).then(|| text.trim_end().to_string())
}

/// Where a forward traceback was in the user's code: its innermost user line,
/// `file:line:name` as call sites are named.
pub fn forward_site(text: &str) -> Option<String> {
    innermost_user_line(text).map(|t| t.to_string())
}

/// Frames PyTorch's allocator and unwinder add at the top of every C++ stack, and the
/// destructors that release a tensor's storage (the frames of a free): never a site.
fn is_plumbing(name: &str, file: &str) -> bool {
    name.contains("CachingAllocator")
        || name.contains("unwind::unwind")
        || name.contains("CapturedTraceback")
        || name.contains("gather_with_cpp")
        || file.contains("CachingAllocator")
        || is_release(name)
}

/// A destructor or the code that drops a tensor's storage (`c10::TensorImpl::~TensorImpl()`,
/// `c10::intrusive_ptr<c10::StorageImpl, ...>::reset_not_null_`, `THPVariable_dealloc`).
fn is_release(name: &str) -> bool {
    name.contains("::~")
        || name.starts_with('~')
        || name.starts_with("c10::intrusive_ptr<")
        || name.contains("reset_not_null_")
        || name.contains("_dealloc(")
        || name.contains("THPVariable_clear")
}

/// The autograd node a C++ frame runs, by its `apply`: `generated::SelectBackward0` (and
/// every `...Backward0`, `...Backward1`), `AccumulateGrad`, `CopySlices`, `CopyBackwards`, a
/// custom C++ function (`CppNode<MyFunction>`: `MyFunction`) or a Python one (`PyNode`).
pub fn autograd_node(name: &str) -> Option<&str> {
    // A profiler trace's span of the node: `autograd::engine::evaluate_function: MmBackward0`;
    // in traces of 2021 the node's own name (`CudnnConvolutionBackward`,
    // `torch::autograd::AccumulateGrad`).
    let plain = |n: &str| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if let Some(node) = name.strip_prefix(PROFILER_NODE) {
        let node = node.trim();
        let node = node.strip_prefix("torch::autograd::").unwrap_or(node);
        let node = node.strip_prefix("generated::").unwrap_or(node);
        return plain(node).then_some(node);
    }
    if plain(name) && name.trim_end_matches(|c: char| c.is_ascii_digit()).ends_with("Backward") {
        return Some(name);
    }
    if let Some(node @ ("AccumulateGrad" | "CopySlices" | "CopyBackwards")) = name.strip_prefix("torch::autograd::") {
        return Some(node);
    }
    const NS: &str = "torch::autograd::";
    let rest = &name[name.find(NS)? + NS.len()..];
    let head = rest.split('(').next()?;
    let class = head.strip_suffix("::apply")?;
    let class = class.strip_prefix("generated::").unwrap_or(class);
    if let Some(inner) = class.strip_prefix("CppNode<").and_then(|c| c.strip_suffix('>')) {
        return inner.rsplit("::").next().filter(|n| !n.is_empty());
    }
    let plain = !class.is_empty() && class.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    (plain && class != "Node").then_some(class)
}

/// A node as the user knows it: `AccumulateGrad` is where gradients are accumulated into
/// `.grad`, `PyNode` a custom `autograd.Function` written in Python.
pub fn node_text(node: &str) -> String {
    match node {
        "AccumulateGrad" => "gradient accumulation (AccumulateGrad)".into(),
        "PyNode" => "custom Function (PyNode)".into(),
        n => n.to_string(),
    }
}

/// The aten op a C++ frame dispatches (`at::_ops::zeros::call`).
fn aten_op(name: &str) -> Option<&str> {
    // A profiler trace's operator span: `aten::mm`.
    if let Some(op) = name.strip_prefix("aten::") {
        let end = op.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(op.len());
        return Some(&op[..end]).filter(|op| !op.is_empty());
    }
    let rest = &name[name.find("at::_ops::")? + "at::_ops::".len()..];
    rest.split_once("::").map(|(op, _)| op).filter(|op| !op.is_empty())
}

/// ATen's own `empty` functions, which code that bypasses the dispatcher calls directly
/// (Inductor's generated code: `at::detail::empty_strided_cuda`): `empty_strided`, `empty`.
fn aten_empty(name: &str) -> Option<&'static str> {
    let rest = name[name.find("at::detail::")? + "at::detail::".len()..].trim_start_matches('_');
    if rest.starts_with("empty_strided") {
        Some("empty_strided")
    } else if rest.starts_with("empty") {
        Some("empty")
    } else {
        None
    }
}

/// The op a frame names: a dispatched aten op, else one of ATen's `empty` functions.
fn op_name(name: &str) -> Option<&str> {
    aten_op(name).or_else(|| aten_empty(name))
}

/// A frame of autograd's engine (a backward pass's thread).
fn is_engine(name: &str) -> bool {
    name.contains("torch::autograd::Engine::") || name.starts_with(PROFILER_NODE)
}

/// How a profiler trace names the span of an autograd node.
const PROFILER_NODE: &str = "autograd::engine::evaluate_function: ";

/// The operator a run of C++ frames allocated in: its autograd node's frame and its aten op's
/// (innermost first), `None` when it names neither.
pub fn operator(snap: &Snapshot, frames: &[FrameId]) -> Option<Operator> {
    let name = |id: &FrameId| snap.frames.get(id.0 as usize).map_or("", |f| snap.str(f.name));
    let node = frames.iter().copied().find(|id| autograd_node(name(id)).is_some());
    // A dispatched op wherever it is; ATen's `empty` functions sit below every one of them.
    let op = (frames.iter().copied().find(|id| aten_op(name(id)).is_some()))
        .or_else(|| frames.iter().copied().find(|id| aten_empty(name(id)).is_some()));
    let backward = node.is_some() || frames.iter().any(|id| is_engine(name(id)));
    (node.is_some() || op.is_some()).then_some(Operator { node, op, backward })
}

/// The operator that allocated: the frames that name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Operator {
    /// The frame of its autograd node (`...Backward0::apply`).
    pub node: Option<FrameId>,
    /// The frame of its aten op (`at::_ops::zeros::call`).
    pub op: Option<FrameId>,
    /// It ran in autograd's engine (a backward pass), with or without a node.
    pub backward: bool,
}

impl Operator {
    /// `backward: SelectBackward0, aten::zeros`, `backward: aten::sum`, `aten::zeros`.
    pub fn text(&self, snap: &Snapshot) -> String {
        let name = |id: Option<FrameId>| id.and_then(|id| snap.frames.get(id.0 as usize)).map(|f| snap.str(f.name));
        let node = name(self.node).and_then(autograd_node).map(node_text);
        let op = name(self.op).and_then(op_name);
        let op = op.map(|o| format!("aten::{o}"));
        let what = match (node, op) {
            (Some(n), Some(o)) => format!("{n}, {o}"),
            (Some(n), None) => n,
            (None, Some(o)) => o,
            (None, None) => String::new(),
        };
        if self.backward {
            format!("backward: {what}")
        } else {
            what
        }
    }
}

/// A stack without Python frames named by its autograd node and aten op.
fn cpp_site(snap: &Snapshot, stack: StackId) -> Option<String> {
    operator(snap, snap.stacks.get(stack)).map(|o| o.text(snap))
}

/// The frame a stack is charged to: the first of the user's own code or of compiled code
/// with its original source, else the first Python frame, else (a C++ stack) the first that
/// is neither hidden by PyTorch's filter nor the allocator's or the unwinder's own.
pub fn call_site(snap: &Snapshot, stack: StackId) -> Option<FrameId> {
    let ids = snap.stacks.get(stack);
    let py = |id: &&FrameId| snap.frames.get(id.0 as usize).is_some_and(|f| is_py(snap.str(f.filename)));
    user_frame(snap, stack).or_else(|| ids.iter().find(py).copied()).or_else(|| fallback_frame(snap, ids))
}

/// A Python frame as a call site: the original model code's line behind compiled code, else
/// its own `file:line:name`.
fn frame_site(snap: &Snapshot, f: &Frame) -> String {
    match original_line(snap, f) {
        Some(t) => t.to_string(),
        None => crate::frames::frame_line(snap, f),
    }
}

/// The first of C++ `frames` (innermost first) that is neither hidden by PyTorch's filter nor
/// the allocator's, the unwinder's or a destructor's: what names a C++ stack that has no
/// autograd node or aten op.
pub fn fallback_frame(snap: &Snapshot, frames: &[FrameId]) -> Option<FrameId> {
    frames.iter().copied().find(|id| {
        snap.frames
            .get(id.0 as usize)
            .is_some_and(|f| !crate::frames::is_hidden(snap, f) && !is_plumbing(snap.str(f.name), snap.str(f.filename)))
    })
}

/// The call site an allocation of `stack` is keyed by: `file:line:name` of [`call_site`]'s
/// frame, of the original model code behind compiled code, or a C++ stack's
/// `backward: Node, aten::op`; `(no stack)` or `(no frames)`.
pub fn site_name(snap: &Snapshot, stack: Option<StackId>) -> String {
    let Some(s) = stack else { return "(no stack)".into() };
    let Some(id) = call_site(snap, s) else { return "(no frames)".into() };
    let f = &snap.frames[id.0 as usize];
    if !is_py(snap.str(f.filename)) && original_line(snap, f).is_none() {
        if let Some(name) = cpp_site(snap, s) {
            return name;
        }
    }
    frame_site(snap, f)
}

/// A frame of Python code: a `.py` file, or code Python made (`<eval_with_key>.3`, `<string>`).
pub fn is_python(snap: &Snapshot, f: &Frame) -> bool {
    let file = snap.str(f.filename);
    is_py(file) || file.starts_with('<')
}

/// The innermost frame of the user's own code in a stack (or of compiled code that carries
/// the original model code).
pub fn user_frame(snap: &Snapshot, stack: StackId) -> Option<FrameId> {
    let frame = |id: &&FrameId| snap.frames.get(id.0 as usize);
    snap.stacks
        .get(stack)
        .iter()
        .find(|id| frame(id).is_some_and(|f| !is_library(snap, f) || original_line(snap, f).is_some()))
        .copied()
}

/// The innermost line of the user's own code in a stack (or of the original model code
/// behind compiled code), `file:line:name`; `None` when the stack has none.
pub fn user_line(snap: &Snapshot, stack: StackId) -> Option<String> {
    Some(frame_site(snap, &snap.frames[user_frame(snap, stack)?.0 as usize]))
}

/// What an element of a timeline is charged to: its allocation's stack, never its free's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Charge {
    /// The stack its allocation recorded (an `alloc` entry's, or a final block's `frames`,
    /// which PyTorch takes at the allocation).
    Stack(StackId),
    /// Allocated in the trace, recorded without a stack.
    NoStack,
    /// Allocated before the recording, with no stack of its own: the stack of its free, when
    /// the trace has one (where it went, not where it came from).
    Before(Option<StackId>),
}

/// The words for a block allocated before the recording with no stack of its own.
pub const BEFORE_RECORDING: &str = "allocated before recording";

impl Charge {
    /// The charge of `e`, an element of a timeline of `device`. A stack without frames is
    /// none (PyTorch writes `frames: []` for a block it kept no context for).
    pub fn of(snap: &Snapshot, device: usize, e: &Element) -> Charge {
        match (e.stack.filter(|&s| !snap.stacks.get(s).is_empty()), e.origin) {
            (Some(s), _) => Charge::Stack(s),
            (None, Origin::Traced) => Charge::NoStack,
            (None, Origin::UnmatchedFree | Origin::Snapshot) => {
                let free = e.free_entry.and_then(|i| snap.trace(device).frames(i as usize));
                Charge::Before(free.filter(|&s| !snap.stacks.get(s).is_empty()))
            }
        }
    }

    /// Its call site: [`site_name`] of its stack, `(no stack)`, or
    /// `allocated before recording; freed at train.py:88:step` (where the free's stack names
    /// a line of the user's code or an autograd node; just `allocated before recording`
    /// otherwise).
    pub fn site(self, snap: &Snapshot) -> String {
        match self {
            Charge::Stack(s) => site_name(snap, Some(s)),
            Charge::NoStack => site_name(snap, None),
            Charge::Before(free) => match free.and_then(|s| freed_at(snap, s)) {
                Some(at) => format!("{BEFORE_RECORDING}; freed at {at}"),
                None => BEFORE_RECORDING.into(),
            },
        }
    }
}

/// Where a free's stack says a block went: the user's line, else the autograd node whose
/// work let go of it.
fn freed_at(snap: &Snapshot, stack: StackId) -> Option<String> {
    user_line(snap, stack).or_else(|| {
        let o = operator(snap, snap.stacks.get(stack))?;
        o.node.map(|_| Operator { op: None, ..o }.text(snap))
    })
}

/// [`Charge::site`] of many elements, each stack named once.
#[derive(Default)]
pub struct SiteNames {
    names: rustc_hash::FxHashMap<Charge, std::rc::Rc<str>>,
}

impl SiteNames {
    /// The call site of an element charged to `c`.
    pub fn get(&mut self, snap: &Snapshot, c: Charge) -> std::rc::Rc<str> {
        self.names.entry(c).or_insert_with(|| c.site(snap).into()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "  File \"/home/u/train.py\", line 40, in step\n    loss = model(x)\n  File \"/usr/lib/python3.12/site-packages/torch/nn/modules/module.py\", line 1775, in _call_impl\n    return forward_call(*args)\n  File \"/home/u/model.py\", line 12, in forward\n    a = self.net1(x)\n";

    #[test]
    fn the_innermost_user_line_of_a_traceback() {
        let lines = traceback_lines(TRACE);
        assert_eq!(lines.len(), 3);
        assert_eq!(innermost_user_line(TRACE), Some(TraceLine { file: "/home/u/model.py", line: 12, name: "forward" }));
        let lib_only = "  File \"/x/site-packages/torch/nn/functional.py\", line 9, in linear\n";
        assert_eq!(innermost_user_line(lib_only).map(|t| t.line), Some(9));
        assert_eq!(innermost_user_line("no traceback here"), None);
    }

    #[test]
    fn a_compiled_frame_is_named_by_its_original_code() {
        let mut s = Snapshot::default();
        let op = s.add_frame("__call__", "/x/site-packages/torch/_ops.py", 723);
        let gen = s.add_frame("forward", "<eval_with_key>.3", 5);
        let key = s.strings.intern("fx_original_trace");
        s.frames[gen.0 as usize].extras.push((key, crate::Value::Str(TRACE.into())));
        let outer = s.add_frame("step", "/home/u/train.py", 40);
        let st = s.add_stack(&[op, gen, outer]);
        assert_eq!(site_name(&s, Some(st)), "/home/u/model.py:12:forward");
        // Without the original code, the generated frame is library code: the caller's line.
        s.frames[gen.0 as usize].extras.clear();
        assert_eq!(site_name(&s, Some(st)), "/home/u/train.py:40:step");
    }

    #[test]
    fn a_profiler_traces_spans_name_nodes() {
        assert_eq!(autograd_node("autograd::engine::evaluate_function: MmBackward0"), Some("MmBackward0"));
        let acc = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad";
        assert_eq!(autograd_node(acc), Some("AccumulateGrad"));
        assert_eq!(autograd_node("CudnnConvolutionBackward"), Some("CudnnConvolutionBackward"));
        assert_eq!(autograd_node("torch::autograd::AccumulateGrad"), Some("AccumulateGrad"));
        assert_eq!(autograd_node("aten::mm"), None);
        assert_eq!(aten_op("aten::cudnn_convolution_backward_weight"), Some("cudnn_convolution_backward_weight"));
        assert_eq!(aten_op("aten::"), None);
    }

    #[test]
    fn a_cpp_stack_is_named_by_its_node_and_op() {
        let mut s = Snapshot::default();
        let names = [
            ("torch::unwind::unwind()", "??"),
            (
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int)",
                "CUDACachingAllocator.cpp",
            ),
            ("at::detail::empty_cuda(c10::ArrayRef<long>)", "??"),
            ("at::_ops::zeros::call(c10::ArrayRef<c10::SymInt>)", "??"),
            ("torch::autograd::generated::SelectBackward0::apply(std::vector<at::Tensor>&&)", "Functions.cpp"),
            ("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)", "engine.cpp"),
        ];
        let ids: Vec<_> = names.iter().map(|(n, f)| s.add_frame(n, f, 0)).collect();
        let st = s.add_stack(&ids);
        assert_eq!(site_name(&s, Some(st)), "backward: SelectBackward0, aten::zeros");
        // ATen's `empty` called without the dispatcher (Inductor's generated code).
        let alloc_only = s.add_stack(&ids[..3]);
        assert_eq!(site_name(&s, Some(alloc_only)), "aten::empty");
        // Only the allocator's and the unwinder's frames: nothing names it.
        let plumbing = s.add_stack(&ids[..2]);
        assert_eq!(site_name(&s, Some(plumbing)), "(no frames)");
        // In autograd's engine without a node (outputs reduced between two nodes).
        let between = s.add_stack(&[ids[0], ids[1], ids[3], ids[5]]);
        assert_eq!(site_name(&s, Some(between)), "backward: aten::zeros");
        assert_eq!(site_name(&s, None), "(no stack)");
    }

    #[test]
    fn every_autograd_node_is_named() {
        let node = |n: &str| autograd_node(n).map(node_text);
        let apply = "::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)";
        assert_eq!(
            node(&format!("torch::autograd::AccumulateGrad{apply}")).unwrap(),
            "gradient accumulation (AccumulateGrad)"
        );
        assert_eq!(node(&format!("torch::autograd::CopySlices{apply}")).unwrap(), "CopySlices");
        assert_eq!(node(&format!("torch::autograd::CopyBackwards{apply}")).unwrap(), "CopyBackwards");
        assert_eq!(node(&format!("torch::autograd::generated::MeanBackward1{apply}")).unwrap(), "MeanBackward1");
        assert_eq!(node(&format!("torch::autograd::CppNode<my_ext::ScaleFunction>{apply}")).unwrap(), "ScaleFunction");
        assert_eq!(node(&format!("torch::autograd::PyNode{apply}")).unwrap(), "custom Function (PyNode)");
        // Not nodes: the engine, the generic call, the functional half of a generated node.
        assert_eq!(node("torch::autograd::Node::operator()(std::vector<at::Tensor>&&)"), None);
        assert_eq!(
            node("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
            None
        );
        assert_eq!(node("torch::autograd::generated::DivBackward0_apply_functional(std::vector<at::Tensor>&&)"), None);
        assert_eq!(node("torch::autograd::VariableType::(anonymous namespace)::mul_Tensor(c10::DispatchKeySet)"), None);
    }

    #[test]
    fn a_free_never_names_an_allocation() {
        let mut s = Snapshot::default();
        let unwind = s.add_frame("torch::unwind::unwind()", "??", 0);
        let release = s.add_frame(
            "c10::intrusive_ptr<c10::StorageImpl, c10::detail::intrusive_target_default_null_type<c10::StorageImpl> >::reset_not_null_(c10::StorageImpl*)",
            "",
            0,
        );
        let dtor = s.add_frame("c10::TensorImpl::~TensorImpl() [clone .localalias]", "TensorImpl.cpp", 0);
        let acc = s.add_frame("torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor>&&)", "??", 0);
        let user = s.add_frame("step", "/home/u/train.py", 88);
        // A destructor is never a call site.
        let free = s.add_stack(&[unwind, release, dtor]);
        assert_eq!(site_name(&s, Some(free)), "(no frames)");
        // Allocated before the recording: named by where it went, the user's line or the node.
        let mut e = Element {
            addr: 0,
            size: 8,
            start: 0,
            end: 1,
            origin: Origin::UnmatchedFree,
            alloc_entry: None,
            free_entry: None,
            stack: None,
            segment: None,
            order: 0,
        };
        assert_eq!(Charge::of(&s, 0, &e).site(&s), "allocated before recording");
        let mut trace = crate::model::Trace::default();
        for frames in [s.add_stack(&[unwind, release, dtor, user]), s.add_stack(&[unwind, release, dtor, acc])] {
            let mut entry = crate::model::Entry::new(crate::model::Action::FreeCompleted, 0, 8, 0);
            entry.frames = Some(frames);
            trace.push(&entry);
        }
        s.device_traces = Some(vec![trace]);
        e.free_entry = Some(0);
        assert_eq!(Charge::of(&s, 0, &e).site(&s), "allocated before recording; freed at /home/u/train.py:88:step");
        e.free_entry = Some(1);
        assert_eq!(
            Charge::of(&s, 0, &e).site(&s),
            "allocated before recording; freed at backward: gradient accumulation (AccumulateGrad)"
        );
        // An allocation is charged to its own stack, whatever its free's.
        e.stack = Some(s.add_stack(&[user]));
        e.origin = Origin::Traced;
        assert_eq!(Charge::of(&s, 0, &e).site(&s), "/home/u/train.py:88:step");
    }
}
