//! Stack traces as PyTorch's viewers print them: `filename:line:name`, innermost first, with
//! the same frame filter (interpreter and dispatcher plumbing hidden) and the same elision
//! of repeated lines (`<repeats N times>`), see docs §4.7.

use crate::model::{Frame, Snapshot, StackId};

const HIDDEN_NAMES: &[&str] = &[
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
];

const HIDDEN_FILES: &[&str] = &[
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
];

/// The text of an FX key of a frame (`fx_node_name`, `fx_original_trace`, ...), when present.
pub fn fx_field<'a>(snap: &'a Snapshot, f: &'a Frame, key: &str) -> Option<&'a str> {
    f.extras.iter().find(|(k, _)| snap.str(*k) == key).and_then(|(_, v)| match v {
        crate::Value::Str(s) if !s.is_empty() => Some(&**s),
        _ => None,
    })
}

/// True when PyTorch's viewers hide this frame by default.
pub fn is_hidden(snap: &Snapshot, f: &Frame) -> bool {
    let name = snap.str(f.name);
    let file = snap.str(f.filename);
    HIDDEN_NAMES.iter().any(|h| name.contains(h)) || HIDDEN_FILES.iter().any(|h| file.contains(h))
}

/// One frame as a line: `filename:line:name`, as PyTorch's viewers print it; a profiler
/// trace's span without a file (`aten::mm`, [`SPAN_FILE`](crate::model::SPAN_FILE)) by its
/// name alone.
pub fn frame_line(snap: &Snapshot, f: &Frame) -> String {
    let file = snap.str(f.filename);
    if file == crate::model::SPAN_FILE {
        return snap.str(f.name).to_string();
    }
    format!("{file}:{}:{}", f.line, snap.str(f.name))
}

/// What PyTorch's viewer shows under a frame of compiled code
/// (`_snapshot(augment_with_fx_traces=True)`): its FX node (name, op, target) and the
/// original model code, each line indented under the frame. Empty for other frames.
pub fn fx_lines(snap: &Snapshot, f: &Frame) -> Vec<String> {
    if f.extras.is_empty() {
        return Vec::new();
    }
    let field = |k: &str| fx_field(snap, f, k);
    let mut out = Vec::new();
    let node: Vec<String> = [("node", "fx_node_name"), ("op", "fx_node_op"), ("target", "fx_node_target")]
        .iter()
        .filter_map(|(label, k)| field(k).map(|v| format!("{label}={v}")))
        .collect();
    if !node.is_empty() {
        out.push(format!("    FX {}", node.join(", ")));
    }
    if let Some(code) = field("fx_original_trace") {
        out.push("    original code:".into());
        out.extend(code.trim_end().lines().filter(|l| !l.trim().is_empty()).map(|l| format!("      {}", l.trim_end())));
    }
    out
}

/// A frame's line and what is shown under it ([`fx_lines`]), as search matches them.
pub fn frame_text(snap: &Snapshot, f: &Frame) -> String {
    let mut text = frame_line(snap, f);
    for l in fx_lines(snap, f) {
        text.push('\n');
        text.push_str(&l);
    }
    text
}

/// The lines of a stack, innermost first, each frame of compiled code followed by its FX
/// node and original code ([`fx_lines`]); `filtered` hides what PyTorch's viewers hide.
/// Runs of three or more identical lines collapse to the line and `<repeats N times>`.
pub fn stack_lines(snap: &Snapshot, stack: StackId, filtered: bool) -> Vec<String> {
    let lines = snap
        .stack(stack)
        .filter(|f| !(filtered && is_hidden(snap, f)))
        .flat_map(|f| std::iter::once(frame_line(snap, f)).chain(fx_lines(snap, f)));
    elide_repeats(lines)
}

/// Collapses runs of identical lines: a run of `n + 1 >= 3` becomes the line followed by
/// `<repeats n times>`; shorter runs are kept as they are.
pub fn elide_repeats(lines: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let flush = |out: &mut Vec<String>, line: String, k: usize| {
        if k >= 3 {
            out.push(line);
            out.push(format!("<repeats {} times>", k - 1));
        } else {
            out.extend(std::iter::repeat_n(line, k));
        }
    };
    let mut run: Option<(String, usize)> = None;
    for line in lines {
        match &mut run {
            Some((prev, k)) if *prev == line => *k += 1,
            _ => {
                if let Some((prev, k)) = run.take() {
                    flush(&mut out, prev, k);
                }
                run = Some((line, 1));
            }
        }
    }
    if let Some((prev, k)) = run {
        flush(&mut out, prev, k);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn repeats_collapse_from_three() {
        assert_eq!(elide_repeats(v(&["a", "a", "b"])), v(&["a", "a", "b"]));
        assert_eq!(elide_repeats(v(&["a", "a", "a", "b"])), v(&["a", "<repeats 2 times>", "b"]));
        assert_eq!(elide_repeats(v(&["x", "a", "a", "a", "a"])), v(&["x", "a", "<repeats 3 times>"]));
        assert_eq!(elide_repeats(v(&["a", "b", "a"])), v(&["a", "b", "a"]));
    }

    #[test]
    fn filter_hides_interpreter_frames() {
        let mut s = Snapshot::default();
        let keep = s.add_frame("forward", "model.py", 12);
        let hide = s.add_frame("_PyEval_EvalFrameDefault", "ceval.c", 0);
        let st = s.add_stack(&[keep, hide]);
        assert_eq!(stack_lines(&s, st, true), v(&["model.py:12:forward"]));
        assert_eq!(stack_lines(&s, st, false).len(), 2);
    }
}
