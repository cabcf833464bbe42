//! Where each captured process writes its snapshot, and how. Under a launcher that sets
//! `RANK` (torchrun, DeepSpeed, accelerate, SLURM through one of those) rank R writes
//! `<stem>.rank<R><ext>` beside the path `memscape capture --out` named; otherwise the first
//! process of the run to claim that path keeps it and every other one writes
//! `<stem>.pid<PID><ext>`. A snapshot is written whole to a temporary file of its own process
//! and renamed into place, so no reader sees half a file and no two processes write one.
//! Each process notes what it wrote in the run's list, which `memscape capture` reads to
//! summarize every file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// One snapshot a process of the run wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub pid: u32,
    pub rank: Option<u32>,
    pub path: PathBuf,
}

/// The launcher's rank of this process, from `RANK` (a number; anything else is no rank).
pub fn rank_from(var: Option<&str>) -> Option<u32> {
    var.and_then(|r| r.trim().parse().ok())
}

/// `out` with `tag` before its extension: `run.pickle` and `rank3` give `run.rank3.pickle`.
fn tagged(out: &Path, tag: &str) -> PathBuf {
    let stem = out.file_stem().unwrap_or_default().to_string_lossy();
    let name = match out.extension() {
        Some(ext) => format!("{stem}.{tag}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{tag}"),
    };
    out.with_file_name(name)
}

/// `out` with `suffix` added to its name.
fn beside(out: &Path, suffix: &str) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The path of this process's snapshot: by rank when it has one, else `out` for the first
/// process of the run and a name with its process id for the others.
pub fn path_for(out: &Path, rank: Option<u32>, first: bool, pid: u32) -> PathBuf {
    match rank {
        Some(r) => tagged(out, &format!("rank{r}")),
        None if first => out.to_path_buf(),
        None => tagged(out, &format!("pid{pid}")),
    }
}

/// The file whose creation makes a process the first of the run.
pub fn claim_path(out: &Path) -> PathBuf {
    beside(out, ".memscape-claim")
}

/// The run's list of written snapshots.
pub fn list_path(out: &Path) -> PathBuf {
    beside(out, ".memscape-files")
}

/// The run's folder for PyTorch's dumps and the hook that writes them (`--torch`).
pub fn torch_dir(out: &Path) -> PathBuf {
    beside(out, ".memscape-torch")
}

/// Whether this process is the first of the run to claim `out`: only one can create the
/// claim file (`create_new` is atomic), whatever the order the processes start in.
pub fn claim(out: &Path, pid: u32) -> io::Result<bool> {
    match OpenOptions::new().write(true).create_new(true).open(claim_path(out)) {
        Ok(mut f) => {
            writeln!(f, "{pid}")?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes `path` whole: into a temporary file named after the process, then renamed over
/// `path` (atomic on one file system). On failure the temporary is removed and `path` is
/// left as it was.
pub fn write_atomically(path: &Path, pid: u32, write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let tmp = beside(path, &format!(".{pid}.tmp"));
    let written = (|| {
        let mut f = BufWriter::new(File::create(&tmp)?);
        write(&mut f)?;
        f.into_inner().map_err(io::IntoInnerError::into_error)?.sync_all()
    })();
    match written {
        Ok(()) => fs::rename(&tmp, path),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Notes in the run's list that this process wrote `w.path`: one line, appended in a single
/// write (`O_APPEND`), so lines of processes writing at once do not interleave.
pub fn note(list: &Path, w: &Written) -> io::Result<()> {
    let rank = w.rank.map_or_else(|| "-".to_string(), |r| r.to_string());
    let line = format!("{}\t{rank}\t{}\n", w.pid, w.path.display());
    OpenOptions::new().create(true).append(true).open(list)?.write_all(line.as_bytes())
}

/// The snapshots of the run's list, each once, in the order first written. A line that does
/// not read (a file system that broke an append) is skipped.
pub fn read_list(list: &Path) -> io::Result<Vec<Written>> {
    let text = match fs::read_to_string(list) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out: Vec<Written> = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, '\t');
        let (Some(pid), Some(rank), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let Ok(pid) = pid.parse() else { continue };
        let w = Written { pid, rank: rank_from(Some(rank)), path: PathBuf::from(path) };
        if !out.iter().any(|o| o.path == w.path) {
            out.push(w);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("memscape-output-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn names_by_rank_first_process_and_pid() {
        let out = Path::new("/runs/step.pickle");
        assert_eq!(path_for(out, Some(3), false, 77), Path::new("/runs/step.rank3.pickle"));
        assert_eq!(path_for(out, Some(0), true, 77), Path::new("/runs/step.rank0.pickle"));
        assert_eq!(path_for(out, None, true, 77), out);
        assert_eq!(path_for(out, None, false, 77), Path::new("/runs/step.pid77.pickle"));
        assert_eq!(path_for(Path::new("run"), None, false, 5), Path::new("run.pid5"));
        assert_eq!(rank_from(Some("12")), Some(12));
        assert_eq!(rank_from(Some(" 4\n")), Some(4));
        assert_eq!(rank_from(Some("-1")), None);
        assert_eq!(rank_from(Some("node3")), None);
        assert_eq!(rank_from(None), None);
    }

    /// Eight processes (threads with their own ids here) start at once: exactly one keeps
    /// `out`, each other writes its own file, all complete, none overwritten, and the list
    /// names each file once.
    #[test]
    fn processes_at_once_write_their_own_files_whole() {
        let d = dir("race");
        let out = d.join("run.pickle");
        let list = list_path(&out);
        let handles: Vec<_> = (0..8u32)
            .map(|i| {
                let (out, list) = (out.clone(), list.clone());
                std::thread::spawn(move || {
                    let pid = 1000 + i;
                    let first = claim(&out, pid).unwrap();
                    let path = path_for(&out, None, first, pid);
                    // Two dumps per process (a periodic one, then the one at exit).
                    for round in 0..2u8 {
                        let body = vec![i as u8 + round; 256 << 10];
                        write_atomically(&path, pid, |w| w.write_all(&body)).unwrap();
                        note(&list, &Written { pid, rank: None, path: path.clone() }).unwrap();
                    }
                    (pid, first, path)
                })
            })
            .collect();
        let done: Vec<(u32, bool, PathBuf)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(done.iter().filter(|d| d.1).count(), 1, "one process keeps the path");
        for (pid, _, path) in &done {
            let body = fs::read(path).unwrap();
            let i = (pid - 1000) as u8;
            assert!(body.len() == 256 << 10 && body.iter().all(|&b| b == i + 1), "{path:?} holds its last dump whole");
        }
        let listed = read_list(&list).unwrap();
        assert_eq!(listed.len(), 8);
        let mut paths: Vec<&PathBuf> = listed.iter().map(|w| &w.path).collect();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), 8, "eight files, none shared");
        let left: Vec<_> =
            fs::read_dir(&d).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".tmp")).collect();
        assert!(left.is_empty(), "no temporary file is left");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_the_previous_snapshot() {
        let d = dir("fail");
        let path = d.join("run.rank1.pickle");
        write_atomically(&path, 9, |w| w.write_all(b"first")).unwrap();
        let failed = write_atomically(&path, 9, |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("disk full"))
        });
        assert!(failed.is_err());
        assert_eq!(fs::read(&path).unwrap(), b"first");
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1, "the temporary is removed");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_list_reads_ranks_and_skips_what_does_not_parse() {
        let d = dir("list");
        let list = d.join("run.pickle.memscape-files");
        fs::write(&list, "12\t3\t/a/run.rank3.pickle\nbroken line\n13\t-\t/a/run.pickle\n12\t3\t/a/run.rank3.pickle\n")
            .unwrap();
        let l = read_list(&list).unwrap();
        assert_eq!(
            l,
            vec![
                Written { pid: 12, rank: Some(3), path: "/a/run.rank3.pickle".into() },
                Written { pid: 13, rank: None, path: "/a/run.pickle".into() },
            ]
        );
        assert!(read_list(&d.join("none")).unwrap().is_empty());
        fs::remove_dir_all(&d).unwrap();
    }
}
