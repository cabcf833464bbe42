//! PyTorch's own categories beside memscape's (`snapshot::categories::Beside`): when the tab
//! shown is a `torch.profiler` trace and another tab holds a raw memory timeline of the run
//! (`export_memory_timeline("x.raw.json.gz")`), the timeline's worker lists its rows
//! (`Request::TimelineRows`) and the trace's worker puts PyTorch's category beside memscape's
//! on each of its allocations (`Request::Beside`), as a comparison asks A's worker for its
//! profile and B's for the diff. The page shows the bytes at the trace's peak per pair.

use engine::protocol::{Category, DocId, Request, Response};
use leptos::prelude::*;
use leptos::task::spawn_local;
use snapshot::categories::Beside;
use snapshot::stats::format_size;

use crate::client::worker;
use crate::draw;
use crate::modes::{Mode, Shown};
use crate::rules::UserRules;
use crate::state::{Docs, Messages, Tab};
use crate::text::bytes_text;

/// What `ProfilerInfo::source` says of a trace and of a raw memory timeline.
const TRACE: &str = "torch.profiler trace";
const RAW_TIMELINE: &str = "torch.profiler memory timeline (raw)";

/// What an answer is of: the trace, its device, the timeline.
type Key = (DocId, u32, DocId);

/// The timeline the user picked, the answer, and whether one is being made.
#[derive(Clone, Copy)]
pub(crate) struct Theirs {
    picked: RwSignal<Option<DocId>>,
    /// The open raw memory timelines other than the tab shown (name each), when the tab shown
    /// is a trace; empty otherwise.
    timelines: Memo<Vec<(DocId, String)>>,
    /// The answer's key: the timeline picked, else the only one open.
    key: Memo<Option<Key>>,
    answer: RwSignal<Option<(Key, Beside)>>,
    busy: RwSignal<bool>,
}

fn source(t: &Tab) -> Option<&str> {
    t.info.summary.profiler.as_ref().map(|p| p.source.as_str())
}

impl Theirs {
    /// Asks the workers whenever the categories view is shown and the trace, its device, the
    /// timeline or the rules change.
    pub(crate) fn new(docs: Docs, shown: Shown, rules: UserRules, messages: Messages) -> Theirs {
        let picked = RwSignal::new(None);
        let timelines = Memo::new(move |_| {
            let Some(shown) = docs.tab().filter(|t| source(t) == Some(TRACE)) else { return Vec::new() };
            let others = docs.tabs().into_iter().filter(|t| t.info.doc != shown.info.doc);
            others.filter(|t| source(t) == Some(RAW_TIMELINE)).map(|t| (t.info.doc, t.info.name)).collect()
        });
        let key = Memo::new(move |_| {
            let tab = docs.tab()?;
            let open = timelines.get();
            let timeline = match picked.get() {
                Some(p) if open.iter().any(|t| t.0 == p) => p,
                _ if open.len() == 1 => open[0].0,
                _ => return None,
            };
            Some((tab.info.doc, tab.device, timeline))
        });
        let t = Theirs { picked, timelines, key, answer: RwSignal::new(None), busy: RwSignal::new(false) };
        // Changes whenever the workers have been given rules (the trace's categories may differ).
        let rules_given = Memo::new(move |n: Option<&u32>| {
            rules.track();
            n.map_or(0, |n| n.wrapping_add(1))
        });
        // What was last asked for: the view shown again asks nothing new.
        let asked = StoredValue::new(None::<(Key, u32)>);
        let seq = StoredValue::new(0u32);
        Effect::new(move |_| {
            if !shown.is(Mode::Categories) {
                return;
            }
            // Not the tab (its window moves): only what the answer is of.
            let Some(key @ (trace, device, timeline)) = key.get().filter(|k| k.1 != engine::protocol::HOST) else {
                return;
            };
            let now = Some((key, rules_given.get()));
            if asked.get_value() == now {
                return;
            }
            asked.set_value(now);
            seq.update_value(|x| *x += 1);
            let my = seq.get_value();
            t.busy.set(true);
            spawn_local(async move {
                let r = match worker().ask(Request::TimelineRows { doc: timeline }).await {
                    Response::TimelineRows(rows) => worker().ask(Request::Beside { doc: trace, device, rows }).await,
                    other => other,
                };
                if seq.get_value() != my {
                    return;
                }
                t.busy.set(false);
                match r {
                    Response::Beside(b) => t.answer.set(Some((key, *b))),
                    Response::Error(e) => {
                        asked.set_value(None);
                        messages.error(format!("PyTorch's categories: {e}"));
                    }
                    _ => {}
                }
            });
        });
        t
    }

    /// The answer for the trace, device and timeline shown (tracked).
    fn shown(self) -> Option<Beside> {
        let key = self.key.get()?;
        self.answer.with(|a| a.as_ref().filter(|a| a.0 == key).map(|a| a.1.clone()))
    }
}

/// The section: nothing unless the tab shown is a trace and a raw memory timeline is open.
#[component]
pub(crate) fn PytorchCategories() -> impl IntoView {
    let t = expect_context::<Theirs>();
    move || {
        (!t.timelines.with(Vec::is_empty)).then(|| {
            view! {
                <div class="panels">
                    <section id="pytorch-categories">
                        <h2>"PyTorch's categories"</h2>
                        <Picker/>
                        {move || match t.shown() {
                            Some(b) => view! { <AtPeak b=b/> }.into_any(),
                            None if t.key.with(Option::is_none) => {
                                view! { <p class="hint">"Pick the memory timeline of this trace's run."</p> }.into_any()
                            }
                            None => view! {
                                <p class="hint" id="pytorch-busy">{move || if t.busy.get() { "reading the timeline…" } else { "" }}</p>
                            }.into_any(),
                        }}
                    </section>
                </div>
            }
        })
    }
}

/// Which open timeline: named when there is one, a menu when there are several.
#[component]
fn Picker() -> impl IntoView {
    let t = expect_context::<Theirs>();
    move || {
        let open = t.timelines.get();
        if let [(_, name)] = open.as_slice() {
            return view! {
                <p class="hint" id="pytorch-timeline-name">{format!("From the raw memory timeline {name}, at this trace's peak.")}</p>
            }
            .into_any();
        }
        let chosen = move || t.key.get().map(|k| k.2);
        view! {
            <label class="hint">"Raw memory timeline of this run: "
                <select id="pytorch-timeline" on:change=move |e| t.picked.set(event_target_value(&e).parse().ok())>
                    <option value="" selected=move || chosen().is_none()>"pick one"</option>
                    {open.into_iter().map(|(doc, name)| view! {
                        <option value=doc.to_string() selected=move || chosen() == Some(doc)>{name}</option>
                    }).collect_view()}
                </select>
            </label>
        }
        .into_any()
    }
}

/// A category with its swatch, or what stands for none.
fn named(c: Option<Category>) -> impl IntoView {
    match c {
        Some(c) => view! {
            <span><span class="swatch" style:background=draw::css(engine::CATEGORY_COLOURS[c.index()])></span>{c.label()}</span>
        }
        .into_any(),
        None => view! { <span class="hint">"not in the timeline"</span> }.into_any(),
    }
}

/// The bytes at the peak per (memscape's, PyTorch's) category, and how far they agree.
#[component]
fn AtPeak(b: Beside) -> impl IntoView {
    let (same, all) = b.agreement();
    let share = if all > 0 { same as f64 * 100.0 / all as f64 } else { 100.0 };
    let size = |n: u64| format_size(i128::from(n));
    // Files of one run match every allocation; another run's, next to none.
    let other_run = b.matched * 2 < b.allocations;
    view! {
        <p id="pytorch-agreement" data-matched=b.matched.to_string() data-allocations=b.allocations.to_string()
            data-same=same.to_string() data-all=all.to_string()>
            {format!("{} of {} allocations found in the timeline; they agree on {} ({share:.0}%) of the peak's {} (step {}).",
                b.matched, b.allocations, size(same), size(all), b.peak_step)}
        </p>
        {other_run.then(|| view! {
            <p id="pytorch-other-run" style:color="var(--accent)">
                "Few of this trace's allocations are in the timeline: it is probably not of the same run (or not of this device)."
            </p>
        })}
        <table class="list" id="pytorch-table" style:width="auto">
            <tr><th>"bytes"</th><th>"memscape's"</th><th>"PyTorch's"</th><th></th></tr>
            {b.at_peak.into_iter().map(|(ours, theirs, bytes)| {
                let differs = Some(ours) != theirs;
                view! {
                    <tr class="beside" class:differs=differs data-bytes=bytes.to_string() data-ours=ours.key()
                        data-theirs=theirs.map_or("", Category::key)>
                        <td>{bytes_text(bytes)}</td><td>{named(Some(ours))}</td><td>{named(theirs)}</td>
                        <td>{differs.then(|| view! { <span class="differs-mark" style:color="var(--accent)">"differs"</span> })}</td>
                    </tr>
                }
            }).collect_view()}
        </table>
    }
}
