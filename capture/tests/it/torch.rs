//! `memscape capture --torch` without a GPU: the hook in real Python processes (it chains to
//! the user's sitecustomize, stays out of processes that never import torch, and asks
//! PyTorch's API for the recording at CUDA's initialization and the dump at exit), and the
//! merge of a process's dump into its capture on the H100 recordings.
//!
//! PyTorch with CUDA cannot run on this machine, so the hook's test puts a `torch` package
//! of its own on the path with the four functions the hook calls; its `_dump_snapshot`
//! writes PyTorch's real snapshot of the H100 step, which the merge then reads. On a GPU,
//! `capture/gpu-check` runs the same with real PyTorch under torchrun.

use std::path::{Path, PathBuf};
use std::process::Command;

use memscape_capture::output::Written;
use memscape_capture::torch::{dump_path, merge_into, prepare, Settings};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/h100").join(name)
}

fn fresh(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("memscape-torch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn settings() -> Settings {
    Settings { max_entries: 12345, stacks: "all".into() }
}

/// Runs `python3 -c code` with the hook of `dir` first on the path and `user` after it.
fn python(dir: &Path, user: Option<&Path>, code: &str) -> (String, String) {
    let env = prepare(dir, &settings(), user.map(Path::as_os_str)).unwrap();
    let out = Command::new("python3").arg("-c").arg(code).envs(env).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn the_hook_runs_the_users_sitecustomize_and_leaves_processes_without_torch_alone() {
    let root = fresh("chain");
    let (dir, user) = (root.join("hook"), root.join("user"));
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(user.join("sitecustomize.py"), "import builtins\nbuiltins.USER_SITE_RAN = True\n").unwrap();
    let (out, err) = python(
        &dir,
        Some(&user),
        "import builtins, sys; print(getattr(builtins, 'USER_SITE_RAN', False), \
         [type(f).__name__ for f in sys.meta_path if type(f).__name__ == '_WhenTorchLoads'])",
    );
    assert_eq!(out.trim(), "True ['_WhenTorchLoads']", "{err}");
    assert_eq!(err, "", "nothing said when nothing went wrong");
    // No torch, no dump.
    assert!(!dump_path(&dir, 0).exists());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "only the hook is there");
    // A user's sitecustomize that fails is reported in one line, and the program still runs.
    std::fs::write(user.join("sitecustomize.py"), "raise RuntimeError('broken site')\n").unwrap();
    let (out, err) = python(&dir, Some(&user), "print('ran')");
    assert_eq!(out.trim(), "ran");
    assert!(err.contains("RuntimeError: broken site"), "{err}");
    std::fs::remove_dir_all(&root).unwrap();
}

/// A `torch` package with the four functions of PyTorch's API the hook uses; each call is
/// logged to `calls.txt`, and `_dump_snapshot` writes PyTorch's snapshot of the H100 step.
fn fake_torch(root: &Path, snapshot: &Path) -> PathBuf {
    let pkg = root.join("site").join("torch");
    std::fs::create_dir_all(pkg.join("cuda")).unwrap();
    let log = root.join("calls.txt");
    std::fs::write(
        pkg.join("__init__.py"),
        format!(
            "from . import cuda\nclass _C:\n    @staticmethod\n    def _cuda_attach_out_of_memory_observer(f):\n        \
             open({log:?}, 'a').write('oom_observer\\n')\n"
        ),
    )
    .unwrap();
    std::fs::write(
        pkg.join("cuda").join("__init__.py"),
        format!(
            "from . import memory\n_queued = []\ndef _lazy_call(f):\n    open({log:?}, 'a').write('lazy_call\\n')\n    \
             _queued.append(f)\ndef init():\n    for f in _queued: f()\n"
        ),
    )
    .unwrap();
    std::fs::write(
        pkg.join("cuda").join("memory.py"),
        format!(
            "import gzip, shutil\ndef _record_memory_history(max_entries, stacks):\n    \
             open({log:?}, 'a').write(f'record max_entries={{max_entries}} stacks={{stacks}}\\n')\n\
             def _dump_snapshot(path):\n    open({log:?}, 'a').write('dump\\n')\n    \
             with gzip.open({snapshot:?}) as s, open(path, 'wb') as d: shutil.copyfileobj(s, d)\n"
        ),
    )
    .unwrap();
    log
}

#[test]
fn a_process_that_uses_cuda_through_torch_records_and_dumps_at_exit_and_the_dump_merges_into_its_capture() {
    let root = fresh("record");
    let dir = root.join("hook");
    let log = fake_torch(&root, &data("torch.pickle.gz"));
    let site = root.join("site");
    // Importing torch alone asks nothing of CUDA; the recording starts when CUDA does.
    let (out, _) = python(&dir, Some(&site), "import os, torch; print(os.getpid())");
    let pid: u32 = out.trim().parse().unwrap();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "lazy_call\n");
    assert!(!dump_path(&dir, pid).exists(), "no CUDA, no dump");
    std::fs::remove_file(&log).unwrap();
    let (out, err) = python(&dir, Some(&site), "import os, torch; torch.cuda.init(); print(os.getpid())");
    assert_eq!(err, "");
    let pid: u32 = out.trim().parse().unwrap();
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "lazy_call\nrecord max_entries=12345 stacks=all\noom_observer\ndump\n"
    );
    let dump = dump_path(&dir, pid);
    assert!(dump.exists());
    // The dump folds into the snapshot the driver capture of that process wrote.
    let capture = root.join("run.pickle");
    std::fs::copy(data("ours.pickle"), &capture).unwrap();
    let w = Written { pid, rank: None, path: capture.clone() };
    let merged = merge_into(&w, &dir).unwrap().expect("a dump to merge");
    assert_eq!(merged.outside.iter().map(|o| o.2).sum::<u64>(), 201_590_784);
    assert!(!dump.exists(), "the dump is in the snapshot now");
    let snap = snapshot::read(&std::fs::read(&capture).unwrap()).unwrap().snapshot;
    let outside = snap.segments.iter().filter(|s| snapshot::merge::is_outside(&snap, s)).count();
    assert_eq!(outside, merged.outside.len());
    // Merged once, a second look finds no dump and leaves the file as it is.
    let before = std::fs::read(&capture).unwrap();
    assert_eq!(merge_into(&w, &dir), Ok(None));
    assert_eq!(std::fs::read(&capture).unwrap(), before);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_dump_that_does_not_read_is_named_and_the_capture_is_kept() {
    let root = fresh("broken");
    let capture = root.join("run.pickle");
    std::fs::copy(data("ours.pickle"), &capture).unwrap();
    std::fs::write(dump_path(&root, 7), b"\x80\x04not a snapshot").unwrap();
    let w = Written { pid: 7, rank: Some(0), path: capture.clone() };
    let e = merge_into(&w, &root).unwrap_err();
    assert!(e.starts_with(&dump_path(&root, 7).display().to_string()), "{e}");
    assert_eq!(std::fs::read(&capture).unwrap(), std::fs::read(data("ours.pickle")).unwrap());
    std::fs::remove_dir_all(&root).unwrap();
}

/// The Python side names the environment as `memscape_capture::env` does and keeps as many
/// events by default: the hook reads exactly the variables the launcher sets for it, and the
/// Python package's `memscape.record` keeps what `memscape capture --torch` keeps. Python
/// reads both files (its `ast`), so a name spelt otherwise, a variable more or less, or
/// another default fails here.
#[test]
fn the_python_side_names_the_environment_and_the_default_as_the_launcher_does() {
    let script = r#"
import ast, sys
def read(path):
    tree = ast.parse(open(path).read())
    names = sorted({n.value for n in ast.walk(tree)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("MEMSCAPE_")})
    top = {t.id: a.value.value for a in tree.body if isinstance(a, ast.Assign) and isinstance(a.value, ast.Constant)
           for t in a.targets if isinstance(t, ast.Name)}
    return names, top
hook_names, hook = read(sys.argv[1])
package_names, package = read(sys.argv[2])
print(" ".join(hook_names))
print(" ".join(package_names) or "-")
print(hook["_DEFAULT_MAX_ENTRIES"], package["DEFAULT_MAX_ENTRIES"])
"#;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let hook = fresh("names").join("sitecustomize.py");
    std::fs::write(&hook, memscape_capture::torch::SITECUSTOMIZE).unwrap();
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&hook)
        .arg(root.join("../python/memscape/_record.py"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut names = memscape_capture::env::TORCH.to_vec();
    names.sort_unstable();
    let n = memscape_capture::env::DEFAULT_MAX_ENTRIES;
    let expected = format!("{}\n-\n{n} {n}\n", names.join(" "));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
    std::fs::remove_dir_all(hook.parent().unwrap()).unwrap();
}
