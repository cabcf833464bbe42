//! A whole run opened at once (a folder, or three files or more: `engine::ranks::opens_as_run`):
//! its files profiled by the pool's workers (`client::Client::rank`), what each answered (a few
//! KB: `engine::ranks::RankProfile`), the files that failed or were skipped, and the overview
//! (`engine::ranks::overview`, the command line's rule). The page keeps the `File` handles so
//! that a rank can be opened in full; the Ranks view (`ranks.rs`) draws the rest.

use std::collections::HashMap;
use std::sync::Arc;

use engine::protocol::DocId;
use engine::ranks::{self, Overview, RankProfile};
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::client::worker;
use crate::dom::{now, record};
use crate::modes::{Mode, Shown};
use crate::open::Opener;
use crate::state::{Docs, Messages, Redraw};

/// How often, at most, the overview is made again while files are still being read, ms.
const REFRESH_MS: f64 = 400.0;
/// How often, at most, the count of files read is shown while files are still being read, ms:
/// each change is a frame (style, layout, paint, and the hover's hit test), which drawn for
/// every answer cost the page about 1 s of 1,000 profiles.
const PROGRESS_MS: f64 = 200.0;

/// The run open in the Ranks view.
#[derive(Clone, Copy)]
pub(crate) struct Run {
    /// The run's files (path, file), in the order given.
    files: StoredValue<Vec<(String, web_sys::File)>, LocalStorage>,
    /// What the workers answered, in the order they answered, and the index of each one's file.
    profiles: StoredValue<Vec<RankProfile>>,
    file_of: StoredValue<Vec<usize>>,
    /// Files to read, and read (profiled or failed) as last shown ([`PROGRESS_MS`]).
    pub(crate) total: RwSignal<usize>,
    pub(crate) done: RwSignal<usize>,
    /// Files read (profiled or failed), and when `done` was last shown.
    read: StoredValue<usize>,
    last_progress: StoredValue<f64>,
    /// Files that could not be read: path and why.
    pub(crate) failed: RwSignal<Vec<(String, String)>>,
    /// Files of a folder that are neither snapshots nor profiles by name.
    pub(crate) skipped: RwSignal<Vec<String>>,
    /// The overview of the ranks read so far.
    pub(crate) overview: RwSignal<Option<Arc<Overview>>>,
    /// Milliseconds from opening to the complete overview.
    pub(crate) elapsed: RwSignal<Option<f64>>,
    /// How the view sorts the rows, and the rows picked for Compare (profile indices): kept
    /// while another view is shown.
    pub(crate) sort: RwSignal<engine::ranks::SortBy>,
    pub(crate) picked: RwSignal<Vec<usize>>,
    /// Which run the answers belong to (a new run ignores the old one's).
    generation: StoredValue<u32>,
    last_overview: StoredValue<f64>,
    /// Files already open as tabs, by file index.
    opened: StoredValue<HashMap<usize, DocId>>,
    opener: Opener,
    docs: Docs,
    messages: Messages,
    shown: Shown,
    redraw: Redraw,
}

impl Run {
    pub(crate) fn new(opener: Opener, docs: Docs, messages: Messages, shown: Shown, redraw: Redraw) -> Run {
        Run {
            files: StoredValue::new_local(Vec::new()),
            profiles: StoredValue::new(Vec::new()),
            file_of: StoredValue::new(Vec::new()),
            total: RwSignal::new(0),
            done: RwSignal::new(0),
            read: StoredValue::new(0),
            last_progress: StoredValue::new(0.0),
            failed: RwSignal::new(Vec::new()),
            skipped: RwSignal::new(Vec::new()),
            overview: RwSignal::new(None),
            elapsed: RwSignal::new(None),
            sort: RwSignal::new(engine::ranks::SortBy::Rank),
            picked: RwSignal::new(Vec::new()),
            generation: StoredValue::new(0),
            last_overview: StoredValue::new(0.0),
            opened: StoredValue::new(HashMap::new()),
            opener,
            docs,
            messages,
            shown,
            redraw,
        }
    }

    /// Files chosen or dropped together: a run when they are a folder or three or more
    /// (shown in the Ranks view), else each opens as a tab, as always.
    pub(crate) fn open(self, files: Vec<(web_sys::File, String)>, folder: bool) {
        if !ranks::opens_as_run(files.len(), folder) {
            for (f, _) in files {
                let name = f.name();
                self.opener.open(f.into(), name);
            }
            return;
        }
        self.start(files, folder);
    }

    /// Reads a run: every file in the pool, the overview made as answers arrive.
    fn start(self, files: Vec<(web_sys::File, String)>, folder: bool) {
        let generation = self.generation.get_value() + 1;
        self.generation.set_value(generation);
        let paths: Vec<&str> = files.iter().map(|(_, p)| p.as_str()).collect();
        let (read, skipped) = ranks::run_files(&paths, folder);
        let skipped: Vec<String> = skipped.into_iter().map(|k| paths[k].to_string()).collect();
        let files: Vec<(String, web_sys::File)> = files.into_iter().map(|(f, p)| (p, f)).collect();
        let todo: Vec<(usize, String)> = read.into_iter().map(|k| (k, files[k].0.clone())).collect();
        self.files.set_value(files);
        self.profiles.set_value(Vec::new());
        self.file_of.set_value(Vec::new());
        self.opened.set_value(HashMap::new());
        self.total.set(todo.len());
        self.done.set(0);
        self.read.set_value(0);
        self.failed.set(Vec::new());
        self.skipped.set(skipped);
        self.overview.set(None);
        self.elapsed.set(None);
        self.picked.set(Vec::new());
        self.shown.show(Mode::Ranks, self.redraw);
        let started = now();
        if todo.is_empty() {
            self.messages.error(format!(
                "No snapshot or profile in what was opened (looked for {})",
                snapshot::ranks::RUN_SUFFIXES.map(|s| format!("*{s}")).join(", ")
            ));
            return;
        }
        // A profile's size is not asked (it costs a look at the disk, paid again when the file
        // is posted); a snapshot's decides whether it goes alone.
        let sizes: Vec<Option<u64>> = self.files.with_value(|v| {
            todo.iter().map(|(k, p)| (!ranks::is_profile_name(p)).then(|| v[*k].1.size() as u64)).collect()
        });
        let workers = crate::client::rank_workers();
        for batch in ranks::batches(&sizes, workers) {
            let part: Vec<(usize, String)> = todo[batch.clone()].to_vec();
            let size = sizes[batch].iter().map(|s| s.unwrap_or(0)).sum();
            let files = js_sys::Array::new();
            self.files.with_value(|v| {
                for (k, _) in &part {
                    files.push(&v[*k].1);
                }
            });
            spawn_local(async move {
                let names = part.iter().map(|(_, p)| p.clone()).collect();
                let answers = worker().rank(&files, names, size).await;
                if self.generation.get_value() != generation {
                    return;
                }
                self.took(part, answers);
                self.answered(started);
            });
        }
    }

    /// Keeps a batch's answers (`part`: each file's index and path): the profiles, and the
    /// files that failed, with why.
    fn took(self, part: Vec<(usize, String)>, answers: Vec<Result<RankProfile, String>>) {
        let n = part.len();
        let mut failed = Vec::new();
        for ((k, path), a) in part.into_iter().zip(answers) {
            match a {
                Ok(p) => {
                    self.profiles.update_value(|v| v.push(p));
                    self.file_of.update_value(|v| v.push(k));
                }
                Err(e) => failed.push((path, e)),
            }
        }
        if !failed.is_empty() {
            self.failed.update(|f| f.extend(failed));
        }
        self.read.update_value(|d| *d += n);
    }

    /// Shows the count read and makes the overview again: at once when the last file is read,
    /// else at most every [`PROGRESS_MS`] and [`REFRESH_MS`].
    fn answered(self, started: f64) {
        let read = self.read.get_value();
        let complete = read == self.total.get_untracked();
        let t = now();
        if complete || t - self.last_progress.get_value() >= PROGRESS_MS {
            self.last_progress.set_value(t);
            self.done.set(read);
        }
        if !complete && t - self.last_overview.get_value() < REFRESH_MS {
            return;
        }
        self.last_overview.set_value(t);
        let o = self.profiles.with_value(|v| ranks::overview(v));
        self.overview.set(Some(Arc::new(o)));
        if complete {
            let ms = now() - started;
            self.elapsed.set(Some(ms));
            record("ranks-overview", ms);
            worker().end_idle_rank_workers();
        }
    }

    /// The curve of a row's profile (`Overview::index`), for its small chart.
    pub(crate) fn with_profile<T>(self, k: usize, f: impl FnOnce(&RankProfile) -> T) -> Option<T> {
        self.profiles.with_value(|v| v.get(k).map(f))
    }

    /// Opens the file of a profile (`Overview::index`) as a tab, or goes to its tab when it is
    /// open; then `then` with its tab. A profile file has no model to show: says so.
    pub(crate) fn open_rank(self, k: usize, then: impl Fn(DocId) + 'static) {
        let Some(source) = self.profiles.with_value(|v| v.get(k).map(|p| p.source.clone())) else { return };
        let Some(file_ix) = self.file_of.with_value(|v| v.get(k).copied()) else { return };
        let Some((path, file)) = self.files.with_value(|v| v.get(file_ix).cloned()) else { return };
        if let Some(source) = source {
            self.messages.error(format!(
                "{path} is a profile: it holds the rank's figures, not its allocations, so it cannot be opened in full. Open its snapshot ({source}) to see its timeline."
            ));
            return;
        }
        let open_doc = self.opened.with_value(|o| o.get(&file_ix).copied());
        if let Some(doc) = open_doc.filter(|d| self.docs.ids().contains(d)) {
            then(doc);
            return;
        }
        let opened = self.opened;
        self.opener.open_then(file.into(), path, move |doc| {
            opened.update_value(|o| {
                o.insert(file_ix, doc);
            });
            then(doc);
        });
    }
}
