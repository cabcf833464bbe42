//! `engine` is the viewer's store: it holds the open snapshots and answers the page's
//! questions ([`protocol::Request`]) with view models ([`protocol::Response`]). It runs in
//! the Web Worker, but is plain Rust over plain data, so everything the viewer shows is
//! tested natively here. Layout, colours and summaries are decided here; the page only
//! turns view models into pixels.

#![deny(missing_docs)]

mod doc;
pub mod flame;
mod loading;
pub mod preview;
#[allow(missing_docs)]
pub mod protocol;
pub mod ranks;
#[allow(missing_docs)]
pub mod raster;
mod view;
pub mod warm;
pub mod window;

use std::collections::HashMap;

use protocol::*;
use snapshot::categories::Compiled;
use snapshot::document::Document;
use snapshot::stats;

use doc::Doc;
use loading::failed;
pub use loading::Loading;
pub use snapshot::timeline::colour;
pub use view::{min_bytes, natural_axis, CATEGORY_COLOURS, HEADROOM, SUBPIXEL};

/// The open files.
#[derive(Default)]
pub struct Engine {
    docs: HashMap<DocId, Doc>,
}

/// The protocol's name for a finished analysis.
fn finished(what: snapshot::document::Finished) -> Finished {
    match what {
        snapshot::document::Finished::Categories => Finished::Categories,
        snapshot::document::Finished::AllocatorState => Finished::AllocatorState,
    }
}

impl Engine {
    /// An engine with nothing open.
    pub fn new() -> Self {
        Self::default()
    }

    /// Finishes a load: the snapshot is kept as `doc` (the caller's name for it) and its
    /// default device laid out. `now_ms` is the caller's clock (the worker has no `Instant`).
    pub fn finish(&mut self, doc: DocId, loading: Loading, now_ms: &dyn Fn() -> f64) -> Result<DocInfo, String> {
        let name = loading.name.clone();
        let loaded = loading.loader.finish().map_err(|e| failed(&name, &e))?;
        let parsed = now_ms();
        let mut snap = loaded.snapshot;
        if let Some(w) = loading.window {
            let index = |i: u64| usize::try_from(i).unwrap_or(usize::MAX);
            let rule = match w {
                ReadWindow::Last(n) => snapshot::slice::Window::Last(index(n)),
                ReadWindow::Entries(a, b) => snapshot::slice::Window::Entries {
                    start: index(a),
                    end: Some(index(b)).filter(|&b| b < usize::MAX),
                },
            };
            snapshot::slice::mark_window(&mut snap, &name, &rule);
        }
        // The summary lays out every device; the default one's layout is kept for its lane.
        let default_device = snap.default_device();
        let mut first_lane = None;
        let summary = stats::summary_with(&snap, |tl| {
            if Some(tl.device()) == default_device {
                first_lane = Some(tl);
            }
        });
        let segments = snap.segments_by_device();
        let devices = snap
            .devices()
            .into_iter()
            .map(|d| DeviceInfo {
                device: d as u32,
                entries: snap.trace(d).len() as u64,
                ooms: snapshot::doctor::oom_entries(&snap, d).len() as u64,
                segments: segments.get(&(d as i64)).map_or(0, |s| s.0 as u64),
                has_time: snap.trace(d).has_time(),
            })
            .collect();
        let mut info = DocInfo {
            doc,
            name,
            bytes: loading.total,
            format: loaded.format.to_string(),
            warnings: loaded.warnings.iter().map(|w| w.to_string()).collect(),
            devices,
            default_device: default_device.map(|d| d as u32),
            summary,
            parse_ms: parsed - loading.started,
            layout_ms: 0.0,
            read_ms: 0.0,
            model_bytes: snap.heap_bytes() as u64,
            heap_bytes: 0,
            read_window: loading.window,
        };
        let host = snapshot::host::as_snapshot(&snap).map(|h| {
            let entries = h.trace(0).len() as u64;
            info.devices.push(DeviceInfo {
                device: HOST,
                entries,
                ooms: 0,
                segments: h.segments.len() as u64,
                has_time: h.trace(0).has_time(),
            });
            Box::new(Doc::new(info.clone(), Document::uncategorised(h)))
        });
        let mut d = Doc::new(info, Document::new(snap, Compiled::default()));
        d.host = host;
        // The default device is laid out now (by the summary); its analyses wait for its first
        // view, so that nothing delays the first picture.
        if let Some(tl) = first_lane {
            d.file.keep_blocks(tl);
            d.lane(d.file.snapshot().default_device().unwrap_or(0) as u32, Kind::Blocks);
        }
        d.info.layout_ms = now_ms() - parsed;
        let info = d.info.clone();
        self.docs.insert(doc, d);
        Ok(info)
    }

    /// Does about `units` units (entries, elements or steps) of the background analyses and
    /// returns whether any is left: the caller answers waiting requests between two calls.
    /// What is scheduled: the categories and the allocator-state checkpoints of every device
    /// that has been viewed, so that the category of a hovered allocation, the category view
    /// and the allocator state are ready before they are asked for.
    pub fn work(&mut self, units: usize) -> bool {
        for d in self.docs.values_mut() {
            if d.file.has_work() {
                d.file.work(units);
                break;
            }
            if let Some(h) = d.host.as_deref_mut().filter(|h| h.file.has_work()) {
                h.file.work(units);
                break;
            }
        }
        self.has_work()
    }

    /// The analyses finished since the last call, in the background or for a request: the
    /// worker tells the page, which asks again for what was waiting on them.
    pub fn take_finished(&mut self) -> Vec<(DocId, u32, Finished)> {
        let mut out = Vec::new();
        for (&id, d) in &mut self.docs {
            out.extend(d.file.take_finished().into_iter().map(|(device, what)| (id, device, finished(what))));
            if let Some(h) = d.host.as_deref_mut() {
                out.extend(h.file.take_finished().into_iter().map(|(_, what)| (id, HOST, finished(what))));
            }
        }
        out
    }

    /// No file is open.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Background work is left ([`Engine::work`]).
    pub fn has_work(&self) -> bool {
        self.docs.values().any(|d| d.file.has_work() || d.host.as_ref().is_some_and(|h| h.file.has_work()))
    }

    /// Answers one request.
    pub fn handle(&mut self, req: Request) -> Response {
        let doc_id = req.doc();
        if let Request::Close { doc } = req {
            self.docs.remove(&doc);
            return Response::Done;
        }
        let Some(doc) = self.docs.get_mut(&doc_id) else {
            return Response::Error(format!("no open file #{doc_id}"));
        };
        // The host's pinned memory is a file of its own, its device 0.
        let mut req = req;
        let per_gpu = matches!(
            req,
            Request::Categories { .. }
                | Request::Doctor { .. }
                | Request::Profile { .. }
                | Request::Diff { .. }
                | Request::Beside { .. }
        );
        let doc = match req.device_mut() {
            Some(d) if *d == HOST => {
                *d = 0;
                match doc.host.as_deref_mut() {
                    Some(_) if per_gpu => return Response::Error(PER_GPU.into()),
                    Some(h) => h,
                    None => return Response::Error("this file recorded no pinned host memory".into()),
                }
            }
            _ => doc,
        };
        match req {
            Request::View(q) => Response::View(doc.view(&q)),
            Request::Hit { device, kind, step, bytes, slack, .. } => {
                let lane = doc.lane(device, kind);
                let el = lane.element_near(step, bytes, slack);
                let outline = el.map_or_else(Vec::new, |el| lane.outline(el));
                Response::Hit(el.and_then(|el| doc.details(device, kind, el)), outline)
            }
            Request::Details { device, kind, element, .. } => match doc.details(device, kind, element) {
                Some(d) => Response::Details(d),
                None => Response::Error(format!("no element {element}")),
            },
            Request::Events { device, first, count, .. } => Response::Events(doc.events(device, first, count)),
            Request::State { device, entry, .. } => Response::State(doc.state(device, entry)),
            Request::Search { device, kind, query, .. } => match doc.search(device, kind, &query) {
                Ok(r) => Response::Search(r),
                Err(e) => Response::Error(e),
            },
            Request::ClearSearch { .. } => {
                doc.clear_search();
                if let Some(h) = doc.host.as_deref_mut() {
                    h.clear_search();
                }
                Response::Done
            }
            Request::Close { .. } => Response::Done,
            Request::Rules { rules, .. } => match rules.compile() {
                Ok(c) => {
                    if doc.file.rules().rules() != &rules {
                        doc.file.set_rules(c);
                    }
                    Response::Done
                }
                Err(e) => Response::Error(e),
            },
            Request::Categories { device, start, end, columns, at, .. } => {
                Response::Categories(Box::new(doc.categories_vm(device, start, end, columns, at)))
            }
            Request::Profile { device, .. } => Response::Profile(Box::new(doc.profile(device))),
            Request::Doctor { device, .. } => Response::Doctor(Box::new(doc.doctor(device))),
            Request::Diff { device, a, align, sites_by, .. } => {
                let b = doc.profile(device);
                Response::Diff(Box::new(snapshot::diff::diff(&a, &b, align, sites_by)))
            }
            Request::TimelineRows { .. } => {
                Response::TimelineRows(snapshot::categories::timeline_rows(doc.file.snapshot()))
            }
            Request::Beside { device, rows, .. } => {
                let mut b = doc.file.beside(device, &rows);
                b.theirs = Vec::new();
                Response::Beside(Box::new(b))
            }
            Request::Flame { device, step, window, all_frames, query, .. } => {
                doc.lane(device, Kind::Blocks);
                let tl = &doc.lanes[&(device, Kind::Blocks)].timeline;
                flame::view(doc.file.snapshot(), tl, step, window, all_frames, query.as_ref())
                    .map_or_else(Response::Error, |v| Response::Flame(Box::new(v)))
            }
        }
    }
}
