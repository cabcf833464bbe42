//! Reading what the commands are given: a snapshot from a file (read on a second thread, in
//! chunks, through the incremental reader) or from standard input, within this machine's
//! memory; a rules file.

use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

/// The file name that means standard input (or output).
pub(crate) const STDIO: &str = "-";

/// A snapshot to read: a file (read in chunks as it is parsed), or standard input (read
/// whole first: `memscape html` embeds the very bytes).
pub(crate) enum Input {
    File(PathBuf),
    Stdin(Vec<u8>),
}

impl Input {
    /// `-` reads standard input now.
    pub(crate) fn new(path: &Path) -> anyhow::Result<Input> {
        if path != Path::new(STDIO) {
            return Ok(Input::File(path.to_path_buf()));
        }
        let mut bytes = Vec::new();
        std::io::stdin().lock().read_to_end(&mut bytes).context("<stdin>: cannot read")?;
        Ok(Input::Stdin(bytes))
    }

    pub(crate) fn load(&self) -> anyhow::Result<snapshot::Loaded> {
        match self {
            Input::File(path) => load(path),
            Input::Stdin(bytes) => {
                let mut loader = snapshot::Loader::new(limits());
                loader.set_size_hint(bytes.len() as u64);
                loader.feed(bytes).map_err(|e| anyhow::anyhow!("<stdin>: {e}"))?;
                loader.finish().map_err(|e| anyhow::anyhow!("<stdin>: {e}"))
            }
        }
    }

    /// What messages call it.
    pub(crate) fn shown(&self) -> String {
        match self {
            Input::File(path) => path.display().to_string(),
            Input::Stdin(_) => "<stdin>".into(),
        }
    }
}

/// Reads a snapshot file in chunks through the incremental reader.
pub(crate) fn load(path: &Path) -> anyhow::Result<snapshot::Loaded> {
    load_with(path, limits())
}

/// Reads a snapshot file as [`load`] does, with these limits (a windowed read).
pub(crate) fn load_with(path: &Path, limits: snapshot::Limits) -> anyhow::Result<snapshot::Loaded> {
    let mut f = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut loader = snapshot::Loader::new(limits);
    if let Ok(m) = f.metadata() {
        loader.set_size_hint(m.len());
    }
    // The disk is read on a second thread, 4 MiB ahead of the parser: reading and parsing
    // overlap, and the buffers go back and forth instead of being allocated each time.
    let (full_tx, full) = std::sync::mpsc::sync_channel::<std::io::Result<(Vec<u8>, usize)>>(2);
    let (empty, empty_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    for _ in 0..3 {
        let _ = empty.send(vec![0u8; 4 << 20]);
    }
    let reader = std::thread::spawn(move || {
        while let Ok(mut buf) = empty_rx.recv() {
            let read = f.read(&mut buf);
            let done = !matches!(read, Ok(n) if n > 0);
            if full_tx.send(read.map(|n| (buf, n))).is_err() || done {
                return;
            }
        }
    });
    let mut failed = None;
    for chunk in full {
        let (buf, n) = chunk.with_context(|| format!("{}: cannot read", path.display()))?;
        if n == 0 {
            break;
        }
        if let Err(e) = loader.feed(&buf[..n]) {
            failed = Some(e);
            break;
        }
        // The reader may have finished already (it has read the end): then nobody needs it.
        let _ = empty.send(buf);
    }
    drop(empty);
    let _ = reader.join();
    if let Some(e) = failed {
        bail!("{}: {e}", path.display());
    }
    loader.finish().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The reader's limits on this machine: its working memory at most half the RAM (the
/// model and analyses need about as much again), so a hostile file fails with a message
/// instead of swapping the machine to a halt or being killed.
pub(crate) fn limits() -> snapshot::Limits {
    let mut limits = snapshot::Limits::default();
    let ram = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let kb = m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().strip_suffix("kB")?;
        kb.trim().parse::<u64>().ok()
    });
    if let Some(kb) = ram {
        limits.max_memory_bytes = limits.max_memory_bytes.min(kb * 1024 / 2);
    }
    limits
}

/// Reads a rules file (or none).
pub(crate) fn read_rules(path: Option<&Path>) -> anyhow::Result<snapshot::categories::Compiled> {
    let Some(path) = path else { return Ok(Default::default()) };
    let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
    snapshot::categories::Rules::from_json(&text)
        .and_then(|r| r.compile())
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}
