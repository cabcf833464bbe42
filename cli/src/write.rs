//! Writing a snapshot file whole or not at all: into a temporary file beside the target,
//! synced, then renamed over it (`slice`, `convert`).

use std::path::Path;

use anyhow::Context as _;

/// Writes beside `path` and renames, so a failed write never leaves half a file under its
/// name; returns the bytes written.
pub(crate) fn write_whole(path: &Path, snap: &snapshot::Snapshot) -> anyhow::Result<u64> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map_or("snapshot".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.{}.part", std::process::id()));
    let written = (|| {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        snapshot::write::write_pickle(snap, &mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        let bytes = file.metadata()?.len();
        std::fs::rename(&tmp, path)?;
        Ok::<_, std::io::Error>(bytes)
    })();
    if written.is_err() {
        std::fs::remove_file(&tmp).ok();
    }
    written.with_context(|| format!("{}: cannot write", path.display()))
}
