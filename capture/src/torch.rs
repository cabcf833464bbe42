//! `memscape capture --torch`: PyTorch's own memory recording in every Python process of the
//! run, merged with the driver capture of the same process. A `sitecustomize` (in
//! `capture/python/`) put first on `PYTHONPATH` turns on
//! `torch.cuda.memory._record_memory_history` when a process initializes CUDA and dumps
//! `torch.<pid>.pickle` into the run's folder at exit and on an out-of-memory error; it runs
//! any `sitecustomize` it hides. After the run, [`merge_into`] folds each dump into the
//! snapshot the same process's driver capture wrote ([`snapshot::merge::merge_capture`]):
//! PyTorch's blocks with their Python frames, the rest of the driver's allocations outside
//! its allocator.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use snapshot::merge::Merged;

use crate::env;
use crate::output::{write_atomically, Written};

/// The hook, as written into the run's folder.
pub const SITECUSTOMIZE: &str = include_str!("../python/sitecustomize.py");

/// What PyTorch's recording is asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// PyTorch's `max_entries`.
    pub max_entries: usize,
    /// PyTorch's `stacks`: `python` or `all` (C++ frames too).
    pub stacks: String,
}

/// The run's folder for the hook and PyTorch's dumps: `sitecustomize.py` written into `dir`
/// (created if needed), and the environment a process of the run needs: `(name, value)`
/// pairs, `PYTHONPATH` with `dir` first and `existing` after it.
pub fn prepare(dir: &Path, settings: &Settings, existing: Option<&OsStr>) -> io::Result<Vec<(String, OsString)>> {
    fs::create_dir_all(dir)?;
    fs::write(dir.join("sitecustomize.py"), SITECUSTOMIZE)?;
    let mut paths = vec![dir.to_path_buf()];
    paths.extend(existing.iter().flat_map(std::env::split_paths));
    let python_path = std::env::join_paths(paths).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    Ok(vec![
        ("PYTHONPATH".into(), python_path),
        (env::TORCH_DIR.into(), dir.as_os_str().to_owned()),
        (env::TORCH_MAX_ENTRIES.into(), settings.max_entries.to_string().into()),
        (env::TORCH_STACKS.into(), settings.stacks.clone().into()),
    ])
}

/// Where process `pid` dumps PyTorch's snapshot.
pub fn dump_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("torch.{pid}.pickle"))
}

/// Merges PyTorch's dump of process `w.pid` (in `dir`) into the snapshot its driver capture
/// wrote (`w.path`, replaced whole) and removes the dump. `Ok(None)` when the process left no
/// dump (it never initialized CUDA through torch, or was killed): its capture stays as it
/// was. A dump or capture that does not read is an error naming the file; the capture is
/// left as it was.
pub fn merge_into(w: &Written, dir: &Path) -> Result<Option<Merged>, String> {
    let dump = dump_path(dir, w.pid);
    let torch = match fs::read(&dump) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", dump.display())),
    };
    let read = |bytes: &[u8], path: &Path| {
        snapshot::read(bytes).map(|l| l.snapshot).map_err(|e| format!("{}: {e}", path.display()))
    };
    let torch = read(&torch, &dump)?;
    let driver = read(&fs::read(&w.path).map_err(|e| format!("{}: {e}", w.path.display()))?, &w.path)?;
    let (merged, what) = snapshot::merge::merge_capture(&torch, &driver);
    let bytes = snapshot::write::to_pickle_bytes(&merged);
    write_atomically(&w.path, std::process::id(), |f| f.write_all(&bytes))
        .map_err(|e| format!("{}: cannot write the merged snapshot: {e}", w.path.display()))?;
    let _ = fs::remove_file(&dump);
    Ok(Some(what))
}
