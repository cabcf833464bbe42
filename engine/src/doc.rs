//! One open file in the viewer: its document (the snapshot and its analyses, made when first
//! asked for or in the background), its laid-out timelines (a [`Lane`] per device and kind)
//! and the answers to the page's view requests.

use std::collections::HashMap;
use std::sync::Arc;

use snapshot::document::Document;
use snapshot::labels::Labels;
use snapshot::timeline::{Element, Inside, LodQuery, Origin, Timeline};
use snapshot::{frames, history, search, sites, Action, Snapshot};

use crate::protocol::*;
use crate::raster;
use crate::view::{min_bytes, natural_axis, CATEGORY_COLOURS};
use snapshot::timeline::colour;

pub(crate) struct Lane {
    /// Shared with the document for the blocks timeline.
    pub(crate) timeline: Arc<Timeline>,
    /// Out-of-memory events: (step, trace entry).
    ooms: Vec<(u32, u32)>,
    spans: Vec<SpanVm>,
    /// Search hits: a flag per element and their count.
    hits: Option<(Vec<bool>, u32)>,
    /// The bands of the last view drawn (what a hover outlines).
    pub(crate) drawn: Arc<Vec<Band>>,
    /// The baseline of the last view (the next view's first guess).
    baseline: Option<u64>,
    /// The `annotate` entries by the allocation they label.
    labels: Labels,
    /// [`Kind::PoolEnvelopes`]: the private pool of each envelope element (the last ones).
    pieces: Vec<(snapshot::PoolId, i64)>,
    /// [`Kind::PoolEnvelopes`]: the pools' blocks, drawn inside their envelopes.
    inside: Option<Inside>,
}

impl Lane {
    /// A laid-out timeline with its OOM and annotation lanes.
    pub(crate) fn new(snap: &Snapshot, timeline: Arc<Timeline>) -> Lane {
        let device = timeline.device() as u32;
        let trace = snap.trace(device as usize);
        let ooms = (0..trace.len())
            .filter(|&i| trace.action(i) == Action::Oom)
            .map(|i| (timeline.step_of_entry(i as u32), i as u32))
            .collect();
        let spans = spans(snap, &timeline, device);
        let labels =
            if timeline.kind() == Kind::Blocks { Labels::new(snap, device as usize) } else { Labels::default() };
        Lane {
            timeline,
            ooms,
            spans,
            hits: None,
            drawn: Arc::default(),
            baseline: None,
            labels,
            pieces: Vec::new(),
            inside: None,
        }
    }

    /// The element at `bytes` after `step` as the last view drew it (a pool's block inside
    /// its envelope in [`Kind::PoolEnvelopes`]).
    pub(crate) fn element_near(&self, step: u32, bytes: u64, slack: u64) -> Option<u32> {
        match &self.inside {
            Some(inside) => inside.element_near(&self.timeline, step, bytes, slack),
            None => self.timeline.element_near(step, bytes, slack),
        }
    }

    /// Where the last view drew `element` (nothing when it was not drawn on its own).
    pub(crate) fn outline(&self, element: u32) -> Vec<OutlineVm> {
        self.drawn
            .iter()
            .filter(|b| b.element == Some(element))
            .map(|b| OutlineVm {
                first: b.first_column,
                last: b.last_column,
                offset: b.offset_bytes,
                size: b.size_bytes,
            })
            .collect()
    }
}

pub(crate) struct Doc {
    pub(crate) info: DocInfo,
    /// The snapshot and its analyses, made when first asked for or in the background.
    pub(crate) file: Document,
    pub(crate) lanes: HashMap<(u32, Kind), Lane>,
    /// The pinned host memory as a file of its own whose device 0 is the host
    /// (`snapshot::host`): requests for device [`HOST`] go there.
    pub(crate) host: Option<Box<Doc>>,
}

impl Doc {
    pub(crate) fn new(info: DocInfo, file: Document) -> Doc {
        Doc { info, file, lanes: HashMap::new(), host: None }
    }

    /// Puts the analyses of `device` in line for the background (the device on screen first).
    pub(crate) fn schedule(&mut self, device: u32) {
        self.file.schedule(device);
    }

    pub(crate) fn categories_vm(
        &mut self,
        device: u32,
        start: f64,
        end: f64,
        columns: u32,
        at: Option<u32>,
    ) -> CategoriesVm {
        let tl = Arc::clone(self.file.blocks(device));
        let (cats, report) = self.file.categories(device);
        let n = f64::from(tl.n_steps());
        let (start, end) = if end > start { (start, end) } else { (0.0, n) };
        let at = at.filter(|&s| s < tl.n_steps());
        CategoriesVm {
            n_steps: tl.n_steps(),
            start,
            end,
            columns: cats.columns(&tl, start, end, columns),
            colours: CATEGORY_COLOURS,
            report: report.clone(),
            selected: at.map(|s| (s, cats.bytes_at(&tl, s))),
            selected_total: at.map(|s| tl.totals()[s as usize]),
        }
    }

    pub(crate) fn profile(&mut self, device: u32) -> Profile {
        self.file.profile(device)
    }

    /// The doctor's report: needs the device's categories and allocator-state checkpoints
    /// (finished now if the background has not).
    pub(crate) fn doctor(&mut self, device: u32) -> snapshot::doctor::Report {
        self.file.doctor(device).clone()
    }

    pub(crate) fn lane(&mut self, device: u32, kind: Kind) -> &mut Lane {
        let file = &mut self.file;
        self.lanes.entry((device, kind)).or_insert_with(|| match kind {
            // The document's own: the analyses are made on it.
            Kind::Blocks => {
                let tl = Arc::clone(file.blocks(device));
                Lane::new(file.snapshot(), tl)
            }
            // Laid out from the blocks timeline, with the pool of each envelope element and
            // the pools' blocks to draw inside them.
            Kind::PoolEnvelopes => {
                let base = Arc::clone(file.blocks(device));
                let snap = file.snapshot();
                let e = snapshot::pools::envelopes(snap, &base);
                Lane { pieces: e.pieces, inside: Some(e.inside), ..Lane::new(snap, Arc::new(e.timeline)) }
            }
            _ => {
                let snap = file.snapshot();
                Lane::new(snap, Arc::new(Timeline::build(snap, device as usize, kind)))
            }
        })
    }

    pub(crate) fn clear_search(&mut self) {
        for lane in self.lanes.values_mut() {
            lane.hits = None;
        }
    }

    pub(crate) fn view(&mut self, q: &ViewQuery) -> ViewModel {
        self.lane(q.device, Kind::Blocks);
        self.lane(q.device, q.kind);
        self.schedule(q.device);
        let blocks = &self.lanes[&(q.device, Kind::Blocks)].timeline;
        let lane = &self.lanes[&(q.device, q.kind)];
        let tl = &lane.timeline;
        // Allocated bytes after the event behind a segment step (the two timelines count
        // steps differently, so they meet at trace entries).
        let allocated = |step: u32| -> Option<u64> {
            if q.kind != Kind::Segments {
                return None;
            }
            Some(tl.step_entry(step).map_or(blocks.final_bytes(), |e| blocks.total_after_entry(e)))
        };
        let y_max = tl.peak_bytes().max(1);
        let n = f64::from(tl.n_steps());
        let (start, end) = if q.end > q.start { (q.start, q.end) } else { (0.0, n) };
        let hits = lane.hits.as_ref().map(|(h, _)| h.as_slice());
        // Elements down to 1/SUBPIXEL of a pixel row are bands of their own (thin bands
        // blend into a texture, as in PyTorch's viewer, and stay hoverable); runs of smaller
        // ones are blended in their place in the stack. A private pool's blocks are drawn
        // inside its envelope by a second pass over the sweep's answer.
        let lod_of = |lo: u64, hi: u64| {
            let min_bytes = if q.totals_only { u64::MAX } else { min_bytes(hi.saturating_sub(lo), q.rows) };
            let query = LodQuery { start, end, columns: q.columns, min_bytes };
            let mut lod = tl.lod_marked(&query, hits);
            if let Some(inside) = &lane.inside {
                inside.paint(tl, &query, &mut lod, hits);
            }
            lod
        };
        let zoomed = q.y.filter(|y| y.1 > y.0);
        // The baseline is a by-product of the sweep. Until it is known, the last view's sets
        // how thin an element may be and still be drawn alone; positions do not depend on
        // that threshold, so the axis moves to this window's baseline after one sweep, and
        // only a guess more than twice too coarse is swept again. The first view guesses
        // from the bytes no step changes (`Timeline::lasting_bytes`): where those are the
        // window's baseline, as in a training loop whose weights were there before the
        // trace, it sweeps once and draws what every later request for the window gets.
        // A guess more than twice too fine (the baseline far below them, or left at zero
        // where nothing moves) is swept again too; within twice, the first view keeps its
        // guess's threshold, as any view does.
        let first = lane.baseline.is_none();
        let guess = zoomed
            .unwrap_or_else(|| natural_axis(y_max, lane.baseline.unwrap_or_else(|| tl.lasting_bytes()), q.baseline));
        let mut lod = lod_of(guess.0, guess.1);
        // Where nothing in the window moves, every byte is "stable": no baseline then (the
        // axis would start at the top of what is drawn, and the plot show nothing).
        let top = lod.columns.iter().map(|c| c.total_bytes).max().unwrap_or(0);
        let stable_bytes = if lod.stable_bytes < top { lod.stable_bytes } else { 0 };
        let (y_lo, y_top) = match zoomed {
            Some(y) => y,
            None => {
                // Search matches below the baseline would be hidden: the axis starts under them.
                let lowest_hit = lod.bands.iter().filter(|b| b.hit_bytes > 0).map(|b| b.offset_bytes).min();
                let axis = natural_axis(y_max, stable_bytes.min(lowest_hit.unwrap_or(u64::MAX)), q.baseline);
                let (span, guessed) = (axis.1 - axis.0, guess.1 - guess.0);
                if span.saturating_mul(2) < guessed || (first && guessed.saturating_mul(2) < span) {
                    lod = lod_of(axis.0, axis.1);
                }
                axis
            }
        };
        let trace = self.file.snapshot().trace(q.device as usize);
        let trace_time = |step: u32| -> Option<i64> { tl.step_entry(step).and_then(|e| trace.time_us(e as usize)) };
        let columns: Vec<ColumnVm> = lod
            .columns
            .iter()
            .map(|c| ColumnVm {
                step: c.step,
                total: c.total_bytes,
                drawn: if q.totals_only { 0 } else { c.drawn_bytes },
                time_us: trace_time(c.step),
                allocated: allocated(c.step),
            })
            .collect();
        // Moved, not copied: the same bands are the raster's, the answer's and the lane's.
        let bands = Arc::new(lod.bands);
        let pixels = if q.totals_only {
            Vec::new()
        } else {
            let p = &q.palette;
            let pal = raster::Palette { summarized: p.summarized, hit: p.hit, pinned: p.pinned, ..Default::default() };
            let rows = raster::Rows { count: q.rows, lo: y_lo as f64, top: y_top as f64 };
            raster::raster(&bands, &columns, rows, hits.is_some(), q.pinned, &pal).rgba
        };
        if let Some(lane) = self.lanes.get_mut(&(q.device, q.kind)).filter(|_| !q.totals_only) {
            lane.drawn = Arc::clone(&bands);
            lane.baseline = Some(stable_bytes);
        }
        let lane = &self.lanes[&(q.device, q.kind)];
        let tl = &lane.timeline;
        // Only what the window shows: the page draws nothing else of them.
        let shown_ooms: Vec<(u32, u32)> =
            lane.ooms.iter().copied().filter(|&(o, _)| f64::from(o) + 1.0 >= start && f64::from(o) <= end).collect();
        ViewModel {
            n_steps: tl.n_steps(),
            start,
            end,
            y_max,
            y_lo,
            y_top,
            stable_bytes,
            peak_step: tl.peak_step(),
            peak_bytes: tl.peak_bytes(),
            columns,
            bands,
            pixels,
            ooms: shown_ooms.iter().map(|o| o.0).collect(),
            oom_entries: shown_ooms.iter().map(|o| o.1).collect(),
            spans: lane.spans.iter().filter(|sp| sp.end >= start && sp.start <= end).cloned().collect(),
            hits: lane.hits.as_ref().map_or(0, |(_, n)| *n),
        }
    }

    /// Everything the element itself says, at once; its category only when the background
    /// analysis has it (`class_pending` otherwise: a hover never waits for a whole file).
    pub(crate) fn details(&mut self, device: u32, kind: Kind, element: u32) -> Option<Details> {
        self.lane(device, kind);
        let class = if kind == Kind::Blocks {
            self.schedule(device);
            self.file.categories_made(device).map(|(c, _)| c.class(element))
        } else {
            None
        };
        let class_pending = kind == Kind::Blocks && self.file.is_categorised() && class.is_none();
        let class = class.map(|c| (c.category, c.why.describe(self.file.rules().rules())));
        let lane = &self.lanes[&(device, kind)];
        let snap = self.file.snapshot();
        let tl = &lane.timeline;
        let e = tl.elements().get(element as usize)?;
        // A private pool's block is at 0 bytes in the envelope timeline: its own size, and its
        // pool as `snapshot::pools` filed it.
        let in_pool = lane.inside.as_ref().and_then(|i| Some((i.block(element)?, i.pools())));
        let own;
        let e = match in_pool {
            Some(((_, size), _)) => {
                own = Element { size, ..e.clone() };
                &own
            }
            None => e,
        };
        let trace = snap.trace(device as usize);
        let entry = e.alloc_entry.or(e.free_entry).map(|i| i as usize).filter(|&i| i < trace.len());
        let seg = e.segment.and_then(|s| snap.segments.get(s as usize));
        let block = seg.and_then(|s| s.blocks.iter().find(|b| b.address == Some(e.addr)));
        // An allocation made before the recording shows its free's stack, and `no_stack` says so.
        let stack = match e.origin {
            Origin::UnmatchedFree => e.free_entry.and_then(|i| trace.frames(i as usize)),
            _ => e.stack,
        };
        let text = |id: Option<snapshot::StrId>| id.map(|s| snap.str(s).to_string());
        let n_elements = tl.elements().len();
        let piece = (element as usize).checked_sub(n_elements - lane.pieces.len()).map(|k| lane.pieces[k]);
        let origin = match e.origin {
            _ if piece.is_some() => {
                let ((a, b), stream) = piece.unwrap_or_default();
                let when = if e.origin == Origin::Traced { "grew here to this size" } else { "before recording began" };
                format!(
                    "private pool ({a}, {b}), stream {stream}: its envelope {when}, the larger of what its allocations hold and what it reserves (it never shrinks); its allocations are drawn inside it"
                )
            }
            Origin::Traced => match e.alloc_entry {
                Some(a) => format!("allocated at event {a}"),
                None => "allocated in the trace".into(),
            },
            Origin::UnmatchedFree => format!(
                "allocated before recording began: its allocation was never recorded, freed at event {}",
                e.free_entry.map_or("?".to_string(), |f| f.to_string())
            ),
            Origin::Snapshot => "alive before recording began: known only from the final snapshot".into(),
        };
        let forward_frames = match (entry, block) {
            (Some(i), _) if e.origin == Origin::Traced => sites::forward_frames(snap, trace.extras(i)),
            (_, Some(b)) => sites::forward_frames(snap, &b.extras),
            _ => None,
        };
        let total_after = if e.origin == Origin::Traced {
            tl.totals().get(e.start as usize).copied().unwrap_or(0)
        } else {
            tl.initial_bytes()
        };
        Some(Details {
            element,
            kind,
            addr: e.addr,
            size: e.size,
            requested: block.map(|b| b.requested_bytes()),
            stream: entry.map(|i| trace.stream(i)).or(seg.map(|s| s.stream)),
            pool: in_pool
                .and_then(|((k, _), pools)| pools.get(k as usize))
                .map(|p| p.0)
                .or_else(|| entry.and_then(|i| trace.pool_id(i)))
                .or(seg.and_then(|s| s.segment_pool_id)),
            time_us: entry.and_then(|i| trace.time_us(i)),
            start_step: e.start,
            end_step: e.end,
            alloc_entry: e.alloc_entry,
            free_entry: e.free_entry,
            total_after,
            compile_context: entry.and_then(|i| text(trace.compile_context(i))),
            user_metadata: entry.and_then(|i| text(trace.user_metadata(i))).filter(|s| !s.is_empty()),
            category: entry.and_then(|i| text(trace.category(i))),
            class,
            class_pending,
            origin,
            no_stack: if piece.is_some() { None } else { history::no_stack_cause(snap, tl, e) },
            forward_site: forward_frames.as_deref().and_then(sites::forward_site),
            forward_frames,
            labels: lane.labels.of(snap, device as usize, e),
            frames: stack.map(|s| frames::stack_lines(snap, s, true)).unwrap_or_default(),
            all_frames: stack.map(|s| frames::stack_lines(snap, s, false)).unwrap_or_default(),
        })
    }

    pub(crate) fn events(&self, device: u32, first: u32, count: u32) -> EventPage {
        let snap = self.file.snapshot();
        let t = snap.trace(device as usize);
        let total = t.len() as u32;
        let end = first.saturating_add(count).min(total);
        let rows = (first.min(end)..end)
            .map(|i| {
                let i = i as usize;
                // The line of code it is charged to, as everywhere else (a C++ stack's
                // innermost frames are the allocator's own).
                let frame = t
                    .frames(i)
                    .map(|s| sites::site_name(snap, Some(s)))
                    .filter(|s| s != "(no frames)")
                    .unwrap_or_default();
                EventRow {
                    entry: i as u32,
                    action: t.action(i).name().unwrap_or("?").to_string(),
                    addr: t.addr(i),
                    size: t.size(i),
                    stream: t.stream(i),
                    time_us: t.time_us(i),
                    frame,
                }
            })
            .collect();
        EventPage { total, first, rows }
    }

    pub(crate) fn state(&mut self, device: u32, entry: Option<u32>) -> StateView {
        let step = entry.map(|e| self.lane(device, Kind::Blocks).timeline.step_of_entry(e));
        let st = self.file.state_after(device, entry.map(|e| e as usize));
        // Each private pool on each stream: its segments, reserved and allocated bytes.
        let mut pools: std::collections::BTreeMap<((u64, u64), i64), PoolVm> = std::collections::BTreeMap::new();
        let mut pending = 0;
        let segments: Vec<SegmentVm> = st
            .segments
            .iter()
            .map(|s| {
                if let Some(p) = s.pool.filter(|p| *p != (0, 0)) {
                    let vm = pools.entry((p, s.stream)).or_insert(PoolVm {
                        pool: p,
                        stream: s.stream,
                        segments: 0,
                        reserved: 0,
                        allocated: 0,
                    });
                    vm.segments += 1;
                    vm.reserved += s.size;
                    vm.allocated += s.blocks.iter().map(|b| b.requested_size).sum::<u64>();
                }
                SegmentVm {
                    address: s.address,
                    size: s.size,
                    stream: s.stream,
                    pool: s.pool,
                    expandable: s.expandable,
                    blocks: s
                        .blocks
                        .iter()
                        .map(|b| {
                            pending += u32::from(b.pending_free);
                            BlockVm {
                                offset: b.address.saturating_sub(s.address),
                                size: b.size,
                                requested: b.requested_size,
                                pending_free: b.pending_free,
                                rgb: colour((b.address >> 9) as u32 ^ (b.address >> 41) as u32),
                            }
                        })
                        .collect(),
                }
            })
            .collect();
        StateView {
            after_entry: st.after_entry,
            step,
            reserved: st.reserved_bytes,
            allocated: st.allocated_bytes,
            internal_free: st.segments.iter().map(|s| s.internal_free_bytes).sum(),
            external_free: st.segments.iter().map(|s| s.external_free_bytes).sum(),
            pending_frees: pending,
            private_pools: pools.len() as u32,
            pools: pools.into_values().collect(),
            segments,
            orphan_blocks: st.orphan_blocks.len() as u32,
        }
    }

    pub(crate) fn search(&mut self, device: u32, kind: Kind, q: &search::Query) -> Result<SearchResult, String> {
        self.lane(device, kind);
        self.clear_search();
        let snap = self.file.snapshot();
        let Some(lane) = self.lanes.get_mut(&(device, kind)) else { return Err("no such device".into()) };
        let found = search::find(snap, &lane.timeline, q)?;
        let els = lane.timeline.elements();
        let mut hits = vec![false; els.len()];
        for &i in &found {
            hits[i as usize] = true;
        }
        let matches = found.iter().map(|&i| (i, els[i as usize].start, els[i as usize].end)).collect();
        lane.hits = Some((hits, found.len() as u32));
        Ok(SearchResult { count: found.len() as u32, matches })
    }
}

/// `record_function` spans of a device placed on its steps: STARTs and ENDs are paired by
/// name, innermost first; an END without a START starts at step 0 and a START without an
/// END runs to the end, both flagged so the page can show them.
fn spans(snap: &Snapshot, tl: &Timeline, device: u32) -> Vec<SpanVm> {
    let trace = snap.trace(device as usize);
    if snap.external_annotations.is_none() || !trace.has_time() {
        return Vec::new();
    }
    // The first step at or after time `t` (steps are in time order): a binary search over
    // the steps' times read as it goes, not a vector of them (8 bytes a step, the largest
    // thing a load of a 0.9 GB file made after the layout).
    let time_of = |s: usize| tl.step_entry(s as u32).and_then(|e| trace.time_us(e as usize)).unwrap_or(i64::MIN);
    let step_at = |t: i64| {
        let (mut lo, mut hi) = (0, tl.n_actions());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if time_of(mid) < t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo as f64
    };
    let n = f64::from(tl.n_steps());
    snapshot::categories::spans(snap, device as usize)
        .into_iter()
        .map(|sp| {
            let start = sp.start_us.map_or(0.0, step_at);
            SpanVm {
                name: snap.str(sp.name).to_string(),
                start,
                end: sp.end_us.map_or(n, |t| step_at(t).max(start)),
                depth: sp.depth,
                unmatched_end: sp.start_us.is_none(),
                unmatched_start: sp.end_us.is_none(),
            }
        })
        .collect()
}
