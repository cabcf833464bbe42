//! The open files (a tab each) and where the user is in each one. A tab keeps its own
//! device, memory kind, window and selected event, so going back to it shows it as it was.

use engine::protocol::{DocId, DocInfo, Kind};
use leptos::prelude::*;

/// One open file and where the user is in it.
#[derive(Clone, Debug)]
pub(crate) struct Tab {
    pub(crate) info: DocInfo,
    pub(crate) device: u32,
    pub(crate) kind: Kind,
    /// The window in steps; `end <= start` until the first view says the trace's length.
    pub(crate) start: f64,
    pub(crate) end: f64,
    pub(crate) n_steps: u32,
    /// The event selected in the event list (the allocator state is shown after it).
    pub(crate) event: Option<u32>,
    /// The bytes the timeline spans, bottom to top, when the user zoomed the memory axis.
    pub(crate) y: Option<(u64, u64)>,
}

impl Tab {
    /// A file just opened, on its default device, the whole trace.
    pub(crate) fn new(info: DocInfo) -> Tab {
        // As `FirstView::query` has it: the worker draws that view before the tab exists.
        let device = info.first_device();
        Tab { info, device, kind: Kind::Blocks, start: 0.0, end: 0.0, n_steps: 0, event: None, y: None }
    }

    /// Whether the device shown recorded wall-clock times.
    pub(crate) fn has_time(&self) -> bool {
        self.info.devices.iter().any(|d| d.device == self.device && d.has_time)
    }
}

/// A predicted file's warning (`Docs::prediction_notice`), as text: it holds the file's command
/// and the reason it stopped, which are data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PredictionNotice {
    /// After "Predicted, not recorded:": what it would record, on which GPU, with which torch.
    pub(crate) line: String,
    /// After "INCOMPLETE:", when the program did not get to its end: why.
    pub(crate) incomplete: Option<String>,
    /// The whole command and what the prediction assumed, a line each (the banner's tooltip).
    pub(crate) title: String,
}

/// The most of a command the banner shows (the tooltip has all of it).
const COMMAND_CHARS: usize = 100;

/// The tabs and which one is shown.
#[derive(Clone, Copy)]
pub(crate) struct Docs {
    tabs: RwSignal<Vec<Tab>>,
    active: RwSignal<Option<DocId>>,
}

impl Docs {
    pub(crate) fn new() -> Docs {
        Docs { tabs: RwSignal::new(Vec::new()), active: RwSignal::new(None) }
    }

    /// Every tab (tracked).
    pub(crate) fn tabs(self) -> Vec<Tab> {
        self.tabs.get()
    }

    /// The open files' ids, in tab order (tracked).
    pub(crate) fn ids(self) -> Vec<DocId> {
        self.tabs.with(|t| t.iter().map(|t| t.info.doc).collect())
    }

    /// The file shown (tracked).
    pub(crate) fn active(self) -> Option<DocId> {
        self.active.get()
    }

    /// The tab shown (tracked).
    pub(crate) fn tab(self) -> Option<Tab> {
        let id = self.active.get()?;
        self.tabs.with(|t| t.iter().find(|t| t.info.doc == id).cloned())
    }

    pub(crate) fn tab_untracked(self) -> Option<Tab> {
        let id = self.active.get_untracked()?;
        self.tabs.with_untracked(|t| t.iter().find(|t| t.info.doc == id).cloned())
    }

    /// Changes the tab shown.
    pub(crate) fn edit(self, f: impl FnOnce(&mut Tab)) {
        let Some(id) = self.active.get_untracked() else { return };
        self.tabs.update(|t| {
            if let Some(t) = t.iter_mut().find(|t| t.info.doc == id) {
                f(t);
            }
        });
    }

    /// What the file shown was, when it was read from a `torch.profiler` file: the page's
    /// standing notice for its tab (tracked).
    pub(crate) fn profiler_notice(self) -> Option<String> {
        self.tabs.with(|t| {
            let info = self.active.get().and_then(|id| t.iter().find(|t| t.info.doc == id)).map(|t| &t.info)?;
            info.summary.profiler.as_ref().map(|p| format!("Opened from {}.", p.describe()))
        })
    }

    /// What the file shown is when `memscape predict` made it on a CPU rather than PyTorch
    /// recording it on a GPU: the page's standing warning for its tab (tracked).
    pub(crate) fn prediction_notice(self) -> Option<PredictionNotice> {
        self.tabs.with(|t| {
            let info = self.active.get().and_then(|id| t.iter().find(|t| t.info.doc == id)).map(|t| &t.info)?;
            let p = info.summary.prediction.as_ref()?;
            let command = p.command.join(" ");
            let shown = if command.chars().count() > COMMAND_CHARS {
                format!("{}…", command.chars().take(COMMAND_CHARS).collect::<String>())
            } else {
                command.clone()
            };
            let run = if shown.is_empty() { "the program".to_string() } else { format!("`{shown}`") };
            let torch = if p.torch.is_empty() { String::new() } else { format!(" (torch {})", p.torch) };
            let mut title = vec![format!("Command: {command}")];
            title.extend(p.assumptions.iter().map(|a| format!("Assumed: {a}")));
            Some(PredictionNotice {
                line: format!("what {run} would record on {}{torch}, computed by memscape predict on a CPU.", p.gpu),
                incomplete: p
                    .incomplete
                    .as_ref()
                    .map(|why| format!("the program stopped ({why}), so this is what was predicted up to there.")),
                title: title.join("\n"),
            })
        })
    }

    /// Device `device` of the file shown, as the file names it (`text::device_name`; tracked).
    pub(crate) fn device_name(self, device: u32) -> String {
        self.tabs.with(|t| {
            let info = self.active.get().and_then(|id| t.iter().find(|t| t.info.doc == id)).map(|t| &t.info);
            info.map_or_else(|| format!("cuda:{device}"), |i| crate::text::device_name(i, device))
        })
    }

    /// The device a file shows (0 when it is not open).
    pub(crate) fn device_of(self, doc: DocId) -> u32 {
        self.tabs.with_untracked(|t| t.iter().find(|t| t.info.doc == doc).map_or(0, |t| t.device))
    }

    pub(crate) fn push(self, tab: Tab) {
        self.tabs.update(|t| t.push(tab));
    }

    pub(crate) fn show(self, doc: Option<DocId>) {
        self.active.set(doc);
    }

    /// Drops a tab; returns the one to show next when it was the one shown.
    pub(crate) fn remove(self, doc: DocId) -> Option<Option<DocId>> {
        self.tabs.update(|t| t.retain(|t| t.info.doc != doc));
        (self.active.get_untracked() == Some(doc)).then(|| self.tabs.with_untracked(|t| t.last().map(|t| t.info.doc)))
    }
}
