//! What the MCP server knows: the files it has open (each read once, and again when its size
//! or modification time changed; its analyses made when a tool first needs them and kept) and the answers of its tools as JSON values, compact by
//! default: top N lists, bytes as numbers with a human form beside, no whole stack lists.
//!
//! Plain functions over `snapshot`'s analyses, with no MCP in them: `mcp/mod.rs` is the glue.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use snapshot::categories::{self, Categories, Category, Compiled};
use snapshot::check::Budgets;
use snapshot::doctor::{Change, Report};
use snapshot::document::{Document, Stamp};
use snapshot::stats::{format_size, Summary};
use snapshot::timeline::Timeline;
use snapshot::Snapshot;

use crate::input::load;

/// `bytes` with its human form: `{"bytes": 6778535936, "human": "6.3GiB"}`.
pub(crate) fn bytes(b: u64) -> Value {
    json!({ "bytes": b, "human": format_size(i128::from(b)) })
}

/// One device of an open file, as the tools read it.
struct Device<'a> {
    tl: &'a Timeline,
    cats: &'a Categories,
    report: &'a categories::Report,
}

/// One open file.
struct Open {
    /// The snapshot and its analyses, made when a tool first needs them.
    doc: Document,
    warnings: Vec<String>,
    summary: Summary,
}

/// The open files, by their absolute path.
#[derive(Default)]
pub(crate) struct Session {
    files: HashMap<PathBuf, Open>,
    rules: Compiled,
}

/// A file's size and modification time (`None` where the file system does not say).
fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp { bytes: m.len(), modified: m.modified().ok()? })
}

/// A tool's error, in words for the model.
pub(crate) type Answer = Result<Value, String>;

impl Session {
    fn open_file(&mut self, path: &str) -> Result<(&mut Open, PathBuf), String> {
        let abs = std::path::absolute(Path::new(path)).map_err(|e| format!("{path}: {e}"))?;
        let stamp = stamp(&abs);
        if self.files.get(&abs).is_some_and(|open| open.doc.is_stale(stamp)) {
            // Written again since it was read (the agent's loop: re-record, ask again).
            self.files.remove(&abs);
        }
        if !self.files.contains_key(&abs) {
            let loaded = load(&abs).map_err(|e| format!("{e:#}"))?;
            let snap = loaded.snapshot;
            // The statistics lay out every device's blocks timeline: the document keeps them for
            // the other tools.
            let mut laid = Vec::new();
            let summary = snapshot::stats::summary_with(&snap, |tl| laid.push(tl));
            let mut doc = Document::new(snap, self.rules.clone()).with_stamp(stamp);
            for tl in laid {
                doc.keep_blocks(tl);
            }
            let warnings = loaded.warnings.iter().map(ToString::to_string).collect();
            self.files.insert(abs.clone(), Open { doc, warnings, summary });
        }
        let open = self.files.get_mut(&abs).ok_or("not open")?;
        Ok((open, abs))
    }

    /// The device asked for, or the one the doctor would diagnose, with its categories.
    fn device<'a>(
        &'a mut self,
        path: &str,
        device: Option<usize>,
    ) -> Result<(&'a Snapshot, Device<'a>, &'a Summary, usize), String> {
        let (open, _) = self.open_file(path)?;
        let d = open.doc.snapshot().pick_device(device).map_err(|e| format!("{path}: {e}"))?;
        open.doc.categories(d as u32);
        let Open { doc, summary, .. } = open;
        let (cats, report) = doc.categories_made(d as u32).ok_or("no categories")?;
        let tl = doc.blocks_made(d as u32).ok_or("no timeline")?;
        Ok((doc.snapshot(), Device { tl, cats, report }, summary, d))
    }

    /// `open`: reads a file once and says what it holds.
    pub(crate) fn open(&mut self, path: &str) -> Answer {
        let (open, abs) = self.open_file(path)?;
        let snap = open.doc.snapshot();
        let devices: Vec<Value> = open
            .summary
            .devices
            .iter()
            .map(|d| {
                json!({
                    "device": d.device,
                    "trace_entries": d.trace_entries,
                    "peak": bytes(d.timeline.peak_bytes),
                    "reserved_at_end": bytes(d.reserved_bytes),
                    "ooms": snapshot::doctor::oom_entries(snap, d.device.max(0) as usize).len(),
                })
            })
            .collect();
        Ok(json!({
            "path": abs.display().to_string(),
            "devices": devices,
            "default_device": snap.default_device(),
            "devices_with_oom": snap.devices_with_oom(),
            "warnings": open.warnings,
        }))
    }

    /// `stats`: one device's statistics and categories, as `memscape stats --json` has them
    /// (iterations and leaks cut to `limit`).
    pub(crate) fn stats(&mut self, path: &str, device: Option<usize>, limit: usize) -> Answer {
        let (_, dev, summary, d) = self.device(path, device)?;
        let stats = summary
            .devices
            .iter()
            .find(|s| s.device == d as i64)
            .ok_or(format!("{path}: device {d} has no statistics"))?;
        let mut device_json = serde_json::to_value(stats).map_err(|e| e.to_string())?;
        let report = Some(dev.report);
        let mut cats = report.map(|r| serde_json::to_value(r).unwrap_or(Value::Null)).unwrap_or(Value::Null);
        for key in ["iterations", "leaks", "rules"] {
            cut(&mut cats, &[key], limit);
        }
        cut(&mut device_json, &["private_pools"], limit);
        Ok(json!({
            "device": d,
            "summary": device_json,
            "categories": cats,
            "peak": bytes(report.map_or(0, |r| r.peak_bytes)),
        }))
    }

    fn doctor_report(&mut self, path: &str, device: Option<usize>) -> Result<(Report, usize), String> {
        let (open, _) = self.open_file(path)?;
        let d = open.doc.snapshot().pick_device(device).map_err(|e| format!("{path}: {e}"))?;
        Ok((open.doc.doctor(d as u32).clone(), d))
    }

    /// `doctor`: every out-of-memory error with its figures, verdict, holders and advice; the
    /// peak's headroom; the what-if table. As `memscape doctor --json`, holders cut to `limit`.
    pub(crate) fn doctor(&mut self, path: &str, device: Option<usize>, limit: usize) -> Answer {
        let (report, _) = self.doctor_report(path, device)?;
        let mut v = serde_json::to_value(&report).map_err(|e| e.to_string())?;
        if let Some(ooms) = v["ooms"].as_array_mut() {
            for o in ooms {
                cut(o, &["holders"], limit);
            }
        }
        cut(&mut v, &["peak", "holders"], limit);
        cut(&mut v, &["at_end", "holders"], limit);
        Ok(v)
    }

    /// `what_if`: the peak under each change (the doctor's default changes, a batch factor),
    /// and the trace under other allocator settings (`alloc_conf`).
    pub(crate) fn what_if(
        &mut self,
        path: &str,
        device: Option<usize>,
        batch: Option<f64>,
        alloc_conf: Option<&str>,
        memory: Option<u64>,
    ) -> Answer {
        let (snap, dev, _, _) = self.device(path, device)?;
        let mut changes = Change::DEFAULTS.to_vec();
        if let Some(k) = batch {
            if !(k.is_finite() && k >= 0.0) {
                return Err(format!("batch factor {k}: not a number of at least 0"));
            }
            changes.push(Change::Batch(k));
        }
        let w = snapshot::doctor::what_if(snap, dev.tl, dev.cats, &changes);
        let rows: Vec<Value> = w
            .iter()
            .map(|w| {
                json!({
                    "key": w.key, "change": w.change, "applies": w.applies,
                    "predicted_peak": bytes(w.predicted_peak_bytes),
                    "baseline_peak": bytes(w.baseline_peak_bytes),
                    "assumption": w.assumption,
                })
            })
            .collect();
        let Some(conf) = alloc_conf else { return Ok(json!({ "what_if": rows })) };
        let d = dev.tl.device();
        let capacity = memory.or_else(|| snapshot::doctor::tuning::capacity(snap, d));
        let tuned = snapshot::doctor::tuning::tune(snap, d, capacity, &[conf])?;
        Ok(json!({ "what_if": rows, "allocator": tuned }))
    }

    /// `categories`: bytes per category at the peak (or at `step`), the budget, and what was
    /// inferred of memory alive before the recording.
    pub(crate) fn categories(&mut self, path: &str, device: Option<usize>, step: Option<u32>) -> Answer {
        let (_, dev, _, d) = self.device(path, device)?;
        let (tl, cats) = (dev.tl, dev.cats);
        let (step, b) = match step {
            Some(s) if s < tl.n_steps() => (s, cats.bytes_at(tl, s)),
            Some(s) => return Err(format!("step {s} is past the last ({})", tl.n_steps().saturating_sub(1))),
            None => (tl.peak_step(), cats.at_peak),
        };
        let per: serde_json::Map<String, Value> = Category::ALL
            .iter()
            .filter(|c| b[c.index()] > 0)
            .map(|c| (c.key().to_string(), bytes(b[c.index()])))
            .collect();
        Ok(json!({
            "device": d,
            "step": step,
            "total": bytes(tl.totals().get(step as usize).copied().unwrap_or(0).max(b.iter().sum())),
            "by_category": per,
            "budget": cats.budget,
            "iteration_source": cats.iteration_source.to_string(),
            "iterations": cats.iterations.len(),
            "before_recording": cats.inference,
        }))
    }

    /// `largest`: the largest allocations alive at `step` (default: the peak), each with its
    /// size, category and the line of the user's code that made it.
    pub(crate) fn largest(&mut self, path: &str, device: Option<usize>, step: Option<u32>, limit: usize) -> Answer {
        let rules = self.rules.rules().clone();
        let (snap, dev, _, d) = self.device(path, device)?;
        let (tl, cats) = (dev.tl, dev.cats);
        let step = step.unwrap_or_else(|| tl.peak_step());
        if step >= tl.n_steps().max(1) {
            return Err(format!("step {step} is past the last ({})", tl.n_steps().saturating_sub(1)));
        }
        let mut alive: Vec<u32> =
            (0u32..).zip(tl.elements()).filter(|(_, e)| e.start <= step && step < e.end).map(|(i, _)| i).collect();
        let n = alive.len();
        alive.sort_unstable_by_key(|&i| std::cmp::Reverse(tl.elements()[i as usize].size));
        alive.truncate(limit);
        let rows: Vec<Value> = alive
            .iter()
            .map(|&i| {
                let e = &tl.elements()[i as usize];
                let c = cats.class(i);
                json!({
                    "address": format!("{:#x}", e.addr),
                    "size": bytes(e.size),
                    "category": c.category.key(),
                    "why": c.why.describe(&rules),
                    "site": snapshot::sites::Charge::of(snap, d, e).site(snap),
                    "alloc_entry": e.alloc_entry,
                })
            })
            .collect();
        Ok(json!({ "device": d, "step": step, "alive": n, "largest": rows }))
    }

    /// `flame`: the lines of the user's code holding the most at `step` (default: the peak).
    pub(crate) fn flame(&mut self, path: &str, device: Option<usize>, step: Option<u32>, limit: usize) -> Answer {
        let (snap, dev, _, d) = self.device(path, device)?;
        let tl = dev.tl;
        let at = match step {
            Some(s) => snapshot::flame::At::Step(s.min(tl.n_steps().saturating_sub(1))),
            None => snapshot::flame::peak(tl),
        };
        let mut q = snapshot::flame::FlameQuery::whole(at, false);
        q.lines = limit;
        q.min_share = 1000;
        let f = snapshot::flame::flame(snap, tl, &q);
        let lines: Vec<Value> = f.lines.iter().map(|l| json!({ "site": l.site, "held": bytes(l.weight) })).collect();
        Ok(json!({ "device": d, "at": f.at, "total": bytes(f.total()), "lines": lines, "lines_in_all": f.n_lines }))
    }

    /// `search`: allocations whose frames contain text (or match a regex, or whose call site
    /// is a line, or that contain an address).
    pub(crate) fn search(
        &mut self,
        path: &str,
        device: Option<usize>,
        query: &str,
        mode: &str,
        limit: usize,
    ) -> Answer {
        use snapshot::search::Query;
        let q = match mode {
            "text" => Query::Substring(query.into()),
            "regex" => Query::Regex(query.into()),
            "address" => Query::Address(query.into()),
            "site" => Query::CallSite(query.into()),
            m => return Err(format!("mode {m:?}: one of text, regex, address, site")),
        };
        let (snap, dev, _, d) = self.device(path, device)?;
        let found = snapshot::search::find(snap, dev.tl, &q)?;
        let rows: Vec<Value> = found
            .iter()
            .take(limit)
            .map(|&i| {
                let e = &dev.tl.elements()[i as usize];
                json!({
                    "address": format!("{:#x}", e.addr),
                    "size": bytes(e.size),
                    "steps": [e.start, e.end],
                    "category": dev.cats.class(i).category.key(),
                    "site": snapshot::sites::Charge::of(snap, d, e).site(snap),
                })
            })
            .collect();
        Ok(json!({ "device": d, "matches": found.len(), "first": rows }))
    }

    /// `state`: the allocator's state after trace entry `entry` (default: the end): reserved,
    /// allocated, free in the cache, the largest free block, per pool.
    pub(crate) fn state(&mut self, path: &str, device: Option<usize>, entry: Option<usize>) -> Answer {
        let (open, _) = self.open_file(path)?;
        let d = open.doc.snapshot().pick_device(device).map_err(|e| format!("{path}: {e}"))?;
        let n = open.doc.snapshot().trace(d).len();
        if entry.is_some_and(|e| e >= n) {
            return Err(format!("entry {} is past the last ({})", entry.unwrap_or(0), n.saturating_sub(1)));
        }
        let entry = entry.or(n.checked_sub(1));
        let state = open.doc.state_after(d as u32, entry);
        let snap = open.doc.snapshot();
        let settings = snapshot::settings::settings(snap, d);
        let f = snapshot::layout::layout(&state, &settings).figures(&state);
        let pools: Vec<Value> = f
            .pools
            .iter()
            .map(|p| json!({ "pool": p.name(), "stream": p.stream, "segments": p.segments, "reserved": bytes(p.reserved_bytes), "free": bytes(p.free_bytes), "largest_free_block": bytes(p.largest_free_block_bytes) }))
            .collect();
        Ok(json!({
            "device": d,
            "after_entry": entry,
            "segments": state.segments.len(),
            "reserved": bytes(f.reserved_bytes),
            "allocated": bytes(f.allocated_bytes),
            "free_in_cache": bytes(f.cached_free_bytes),
            "largest_free_block": bytes(f.largest_free_block_any_bytes),
            "pools": pools,
        }))
    }
}

impl Session {
    /// The profile of a snapshot (open, analysed once) or of a `memscape profile` file.
    fn profile(&mut self, path: &str, device: Option<usize>) -> Result<snapshot::diff::Profile, String> {
        if let Some(p) = crate::ranks::read_profile(Path::new(path)).map_err(|e| format!("{e:#}"))? {
            return Ok(p.profile);
        }
        let (open, _) = self.open_file(path)?;
        let d = open.doc.snapshot().pick_device(device).map_err(|e| format!("{path}: {e}"))?;
        Ok(open.doc.profile(d as u32))
    }

    /// `diff`: two runs compared, as `memscape diff --json` (lists cut to `limit`, the curve
    /// left out).
    pub(crate) fn diff(&mut self, a: &str, b: &str, device: Option<usize>, limit: usize) -> Answer {
        let (pa, pb) = (self.profile(a, device)?, self.profile(b, device)?);
        let d = snapshot::diff::diff(&pa, &pb, snapshot::diff::Align::Iteration, snapshot::diff::SiteMode::Frame);
        let mut v = serde_json::to_value(&d).map_err(|e| e.to_string())?;
        for key in ["sites", "allocs", "segments_only_a", "segments_only_b"] {
            let n = v[key].as_array().map_or(0, Vec::len);
            cut(&mut v, &[key], limit);
            v[format!("{key}_count")] = n.into();
        }
        if let Some(o) = v.as_object_mut() {
            o.remove("curve");
        }
        v["peak_change"] = json!({ "a": bytes(d.peak.0), "b": bytes(d.peak.1) });
        Ok(v)
    }

    /// `ranks`: a run's ranks side by side and the outliers, as `memscape ranks --json`.
    pub(crate) fn ranks(&mut self, paths: &[String], limit: usize) -> Answer {
        let paths: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
        let r = crate::ranks::overview(&paths, &self.rules).map_err(|e| format!("{e:#}"))?;
        let mut v = serde_json::to_value(&r).map_err(|e| e.to_string())?;
        v["rank_count"] = r.ranks.len().into();
        cut(&mut v, &["ranks"], limit);
        cut(&mut v, &["outliers"], limit);
        Ok(v)
    }

    /// `check`: budgets on a run (and its growth over a baseline), as `memscape check
    /// --format json`.
    pub(crate) fn check(
        &mut self,
        run: &str,
        baseline: Option<&str>,
        budgets: &Budgets,
        device: Option<usize>,
    ) -> Answer {
        if budgets.max_peak.is_none() && budgets.max_growth_pct.is_none() && budgets.max_category.is_empty() {
            return Err("no budget to check: give max_peak_bytes, max_growth_pct or max_category_bytes".into());
        }
        let r = self.profile(run, device)?;
        let b = baseline.map(|b| self.profile(b, device)).transpose()?;
        let o = snapshot::check::check(&r, b.as_ref(), budgets)?;
        serde_json::to_value(&o).map_err(|e| e.to_string())
    }
}

/// Cuts the JSON list at `path` in `v` to its first `n` items (nothing when there is none:
/// indexing would add the keys).
pub(crate) fn cut(v: &mut Value, path: &[&str], n: usize) {
    let mut at = Some(v);
    for k in path {
        at = at.and_then(|x| x.get_mut(*k));
    }
    if let Some(a) = at.and_then(Value::as_array_mut) {
        a.truncate(n);
    }
}
