//! Call sites: the line of the user's code an allocation is charged to. One rule for every
//! view that names one (the diff's call sites, the doctor's holders, the flame graph's lines
//! of your code, the leak suspects, search by call site).
//!
//! - The first frame of the user's own code, innermost first.
//! - A frame of compiled code (`<eval_with_key>.N`, an Inductor output file) that carries the
//!   original model code (`fx_original_trace`, written by
//!   `_snapshot(augment_with_fx_traces=True)`) is named by that code's innermost user line,
//!   not by the generated file.
//! - A stack with no Python frame (backward under `stacks="all"`: autograd's threads have
//!   none) is named by its autograd node and the aten op that allocated
//!   (`backward: SelectBackward0, aten::zeros`), never by an allocator or unwinder frame.

use crate::model::{Frame, FrameId, Snapshot, StackId};

/// `file` as `/`-separated text contains `part` (or `\\`-separated: the replaced copy is made
/// only for a file that has a backslash, since this runs per frame).
pub(crate) fn has(file: &str, part: &str) -> bool {
    file.contains(part) || (file.contains('\\') && file.contains(&part.replace('/', "\\")))
}

pub(crate) fn is_py(file: &str) -> bool {
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
pub(crate) fn is_library(snap: &Snapshot, f: &Frame) -> bool {
    is_library_file(snap.str(f.filename))
}

/// The text of an FX key of a frame (`fx_node_name`, `fx_original_trace`, ...), when present.
pub fn fx_field<'a>(snap: &'a Snapshot, f: &'a Frame, key: &str) -> Option<&'a str> {
    f.extras.iter().find(|(k, _)| snap.str(*k) == key).and_then(|(_, v)| match v {
        crate::Value::Str(s) if !s.is_empty() => Some(&**s),
        _ => None,
    })
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
    innermost_user_line(fx_field(snap, f, "fx_original_trace")?)
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
    innermost_user_line(text).map(|t| format!("{}:{}:{}", t.file, t.line, t.name))
}

/// Frames PyTorch's allocator and unwinder add at the top of every C++ stack: never a site.
fn is_plumbing(name: &str, file: &str) -> bool {
    name.contains("CachingAllocator")
        || name.contains("unwind::unwind")
        || name.contains("CapturedTraceback")
        || name.contains("gather_with_cpp")
        || file.contains("CachingAllocator")
}

/// The autograd node a C++ frame runs (`torch::autograd::generated::SelectBackward0::apply`).
fn autograd_node(name: &str) -> Option<&str> {
    let rest = &name[name.find("torch::autograd::generated::")? + "torch::autograd::generated::".len()..];
    let (node, after) = rest.split_once("::")?;
    after.starts_with("apply").then_some(node)
}

/// The aten op a C++ frame dispatches (`at::_ops::zeros::call`).
fn aten_op(name: &str) -> Option<&str> {
    let rest = &name[name.find("at::_ops::")? + "at::_ops::".len()..];
    rest.split_once("::").map(|(op, _)| op).filter(|op| !op.is_empty())
}

/// A stack without Python frames named by its autograd node and aten op.
fn cpp_site(snap: &Snapshot, stack: StackId) -> Option<String> {
    let node = snap.stack(stack).find_map(|f| autograd_node(snap.str(f.name)));
    let op = snap.stack(stack).find_map(|f| aten_op(snap.str(f.name)));
    match (node, op) {
        (Some(n), Some(o)) => Some(format!("backward: {n}, aten::{o}")),
        (Some(n), None) => Some(format!("backward: {n}")),
        (None, Some(o)) => Some(format!("aten::{o}")),
        (None, None) => None,
    }
}

/// The frame a stack is charged to: the first of the user's own code or of compiled code
/// with its original source, else the first Python frame, else (a C++ stack) the first that
/// is neither hidden by PyTorch's filter nor the allocator's or the unwinder's own.
pub fn call_site(snap: &Snapshot, stack: StackId) -> Option<FrameId> {
    let ids = snap.stacks.get(stack);
    let frame = |id: &FrameId| &snap.frames[id.0 as usize];
    ids.iter()
        .find(|id| !is_library(snap, frame(id)) || original_line(snap, frame(id)).is_some())
        .or_else(|| ids.iter().find(|id| is_py(snap.str(frame(id).filename))))
        .or_else(|| {
            ids.iter().find(|id| {
                let f = frame(id);
                !crate::frames::is_hidden(snap, f) && !is_plumbing(snap.str(f.name), snap.str(f.filename))
            })
        })
        .copied()
}

/// The call site an allocation of `stack` is keyed by: `file:line:name` of [`call_site`]'s
/// frame, of the original model code behind compiled code, or a C++ stack's
/// `backward: Node, aten::op`; `(no stack)` or `(no frames)`.
pub fn site_name(snap: &Snapshot, stack: Option<StackId>) -> String {
    let Some(s) = stack else { return "(no stack)".into() };
    let Some(id) = call_site(snap, s) else { return "(no frames)".into() };
    let f = &snap.frames[id.0 as usize];
    if let Some(t) = original_line(snap, f) {
        return format!("{}:{}:{}", t.file, t.line, t.name);
    }
    if !is_py(snap.str(f.filename)) {
        if let Some(name) = cpp_site(snap, s) {
            return name;
        }
    }
    crate::frames::frame_line(snap, f)
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
        let alloc_only = s.add_stack(&ids[..3]);
        assert_eq!(site_name(&s, Some(alloc_only)), "??:0:at::detail::empty_cuda(c10::ArrayRef<long>)");
        assert_eq!(site_name(&s, None), "(no stack)");
    }
}
