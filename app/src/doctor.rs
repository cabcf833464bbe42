//! The doctor: why a device ran out of memory. For each OOM the figures just before it,
//! the verdict (exhausted, fragmentation, other limit) and why, who holds the memory, and
//! advice with its predicted effect; without an OOM the headroom at the peak. What-if
//! budgets predict the peak under other setups; a ticked one is drawn as a line on the
//! category chart (`state::Predicted`). A banner names every device that ran out of memory (a link to each) and offers the
//! doctor on the device shown; a
//! click on an OOM's mark in the timeline opens it there. When fragmentation caused an OOM,
//! the allocator settings the core simulated on the trace (`tuning`).

mod tuning;

use engine::protocol::{DocId, DoctorReport as Report, Request, Response};
use leptos::prelude::*;
use leptos::task::spawn_local;
use snapshot::doctor::{Advice, Holder, Oom, PoolFree};

use crate::client::worker;
use crate::modes::{Mode, Shown};
use crate::rules::UserRules;
use crate::state::{Docs, Line, Messages, Nav, Predicted, Redraw};
use crate::text::{bytes_text, delta_text, device_name};
use tuning::AllocatorWhatIf;

/// The report of the device shown and the OOM chosen.
#[derive(Clone, Copy)]
pub(crate) struct Doctor {
    report: RwSignal<Option<((DocId, u32), Report)>>,
    chosen: RwSignal<usize>,
    /// The allocator setting whose simulation is drawn (`tuning`).
    tuning: RwSignal<usize>,
    /// An OOM asked for by its trace entry (a click on the timeline's lane), until the report
    /// is in.
    wanted: RwSignal<Option<u32>>,
    /// The file and device shown.
    place: Memo<Option<(DocId, u32)>>,
    shown: Shown,
    redraw: Redraw,
}

impl Doctor {
    /// Asks for the report whenever the doctor is shown and the file, device or rules change;
    /// an answer for a place the user has left is dropped. A new report refreshes the ticked
    /// predictions on the category chart.
    pub(crate) fn new(docs: Docs, shown: Shown, rules: UserRules, messages: Messages, redraw: Redraw) -> Doctor {
        let predicted = expect_context::<Predicted>();
        let place = Memo::new(move |_| docs.tab().map(|t| (t.info.doc, t.device)));
        let d = Doctor {
            report: RwSignal::new(None),
            chosen: RwSignal::new(0),
            tuning: RwSignal::new(0),
            wanted: RwSignal::new(None),
            place,
            shown,
            redraw,
        };
        Effect::new(move |prev: Option<Option<(DocId, u32)>>| {
            let now = place.get();
            if prev.is_some_and(|p| p != now) {
                d.chosen.set(0);
                d.tuning.set(0);
                predicted.clear();
            }
            now
        });
        Effect::new(move |_| {
            if !shown.is(Mode::Doctor) {
                return;
            }
            let Some((doc, device)) = place.get() else { return };
            if device == engine::protocol::HOST {
                return;
            }
            rules.track();
            spawn_local(async move {
                match worker().ask(Request::Doctor { doc, device }).await {
                    Response::Doctor(r) if place.get_untracked() == Some((doc, device)) => {
                        if let Some(entry) = d.wanted.get_untracked() {
                            d.wanted.set(None);
                            d.chosen.set(r.ooms.iter().position(|o| o.entry == entry).unwrap_or(0));
                        }
                        predicted.refresh(&lines(&r));
                        d.report.set(Some(((doc, device), *r)));
                    }
                    Response::Error(e) => messages.error(format!("doctor: {e}")),
                    _ => {}
                }
            });
        });
        d
    }

    /// The report of the place shown (tracked).
    fn current(self) -> Option<Report> {
        let place = self.place.get();
        self.report.with(|r| r.as_ref().filter(|r| Some(r.0) == place).map(|r| r.1.clone()))
    }

    /// Shows the doctor, at the OOM of trace entry `entry` when given.
    pub(crate) fn open(self, entry: Option<u32>) {
        if let Some(entry) = entry {
            let place = self.place.get_untracked();
            let known = self.report.with_untracked(|r| {
                let r = r.as_ref().filter(|r| Some(r.0) == place)?;
                r.1.ooms.iter().position(|o| o.entry == entry)
            });
            match known {
                Some(k) => self.chosen.set(k),
                None => self.wanted.set(Some(entry)),
            }
        }
        self.shown.show(Mode::Doctor, self.redraw);
    }
}

/// A report's what-if predictions as chart lines.
fn lines(r: &Report) -> Vec<Line> {
    r.what_if
        .iter()
        .map(|w| Line { key: w.key.clone(), label: w.change.clone(), bytes: w.predicted_peak_bytes })
        .collect()
}

/// "cuda:N ran out of memory", for every device of the file that did, each a link to that
/// device: shown over every view but the doctor's.
#[component]
pub(crate) fn OomBanner() -> impl IntoView {
    let (docs, shown, doctor) = (expect_context::<Docs>(), expect_context::<Shown>(), expect_context::<Doctor>());
    let nav = expect_context::<Nav>();
    let ooms = move || -> Vec<(u32, String, u64)> {
        let Some(t) = docs.tab() else { return Vec::new() };
        let named = |d: &engine::protocol::DeviceInfo| (d.device, device_name(&t.info, d.device), d.ooms);
        t.info.devices.iter().filter(|d| d.ooms > 0).map(named).collect()
    };
    let here = move || docs.tab().is_some_and(|t| t.info.devices.iter().any(|d| d.device == t.device && d.ooms > 0));
    let times = |n: u64| if n == 1 { "once".to_string() } else { format!("{n} times") };
    view! {
        <Show when=move || !shown.is(Mode::Doctor) && !ooms().is_empty()>
            <div id="oom-banner" role="status">
                {move || ooms().into_iter().map(|(dev, name, n)| view! {
                    <span class="oom-device-line">
                        <button class="oom-device link" data-device=dev.to_string() on:click=move |_| nav.device(dev)>{name}</button>
                        {format!(" ran out of memory {}.", times(n))}
                    </span>
                }).collect_view()}
                " "
                <Show when=here fallback=|| view! { <span class="hint">"Pick a device above to see why."</span> }>
                    <button id="open-doctor" on:click=move |_| doctor.open(None)>"Why? Open the doctor"</button>
                </Show>
            </div>
        </Show>
    }
}

#[component]
pub(crate) fn DoctorView() -> impl IntoView {
    let d = expect_context::<Doctor>();
    let report = Memo::new(move |_| d.current());
    view! {
        <div id="doctor-view">
            {move || match report.get() {
                None => view! { <p class="hint" id="doctor-wait">"Replaying the allocator…"</p> }.into_any(),
                Some(r) if r.ooms.is_empty() => view! { <PeakPanel r=r.clone()/><WhatIfTable r=r/> }.into_any(),
                Some(r) => {
                    let (tunings, ooms) = (r.allocator_what_if.clone(), r.ooms.iter().map(|o| o.entry).collect::<Vec<_>>());
                    view! {
                        <OomChooser r=r.clone()/><OomPanel r=r.clone()/>
                        <AllocatorWhatIf tunings=tunings device=r.device oom_entries=ooms/>
                        <WhatIfTable r=r/>
                    }
                    .into_any()
                }
            }}
        </div>
    }
}

/// A button per OOM of the device (when it has more than one).
#[component]
fn OomChooser(r: Report) -> impl IntoView {
    let d = expect_context::<Doctor>();
    (r.ooms.len() > 1).then(|| {
        view! {
            <nav id="oom-list">
                {r.ooms.iter().enumerate().map(|(k, o)| view! {
                    <button class="oom-pick" class:active=move || d.chosen.get() == k data-entry=o.entry.to_string()
                        on:click=move |_| d.chosen.set(k)>{format!("OOM {} (event {})", k + 1, o.entry)}</button>
                }).collect_view()}
            </nav>
        }
    })
}

fn figure(key: &'static str, label: &'static str, v: Option<u64>) -> impl IntoView {
    view! {
        <tr data-key=key data-value=v.map_or("null".to_string(), |v| v.to_string())>
            <th>{label}</th><td>{v.map_or("not recorded".to_string(), bytes_text)}</td>
        </tr>
    }
}

/// The chosen OOM: verdict, figures, holders, advice.
#[component]
fn OomPanel(r: Report) -> impl IntoView {
    let (d, docs) = (expect_context::<Doctor>(), expect_context::<Docs>());
    move || {
        let o: Oom = r.ooms.get(d.chosen.get()).or(r.ooms.first())?.clone();
        Some(view! {
            <section id="oom" data-entry=o.entry.to_string() data-step=o.step.to_string()>
                <h2>{format!("Out of memory on {} at event {}, {}", docs.device_name(o.device), o.entry, o.phase)}</h2>
                <p id="verdict" data-verdict=o.verdict.key()><strong>{o.verdict.label()}</strong>": "{o.why.clone()}</p>
                <div class="panels">
                    <section>
                        <h2>"Just before it"</h2>
                        <table class="kv" id="oom-figures">
                            {figure("requested_bytes", "requested", Some(o.requested_bytes))}
                            {figure("device_free_bytes", "free on the device", o.device_free_bytes)}
                            {figure("reserved_bytes", "reserved", Some(o.reserved_bytes))}
                            {figure("allocated_bytes", "allocated (requested sizes)", Some(o.allocated_bytes))}
                            {figure("live_block_bytes", "in live blocks (rounded, as PyTorch counts allocated)", Some(o.live_block_bytes))}
                            {figure("cached_free_bytes", "free in the cache", Some(o.cached_free_bytes))}
                            {figure("largest_free_block_bytes", "largest free block that could serve it", Some(o.largest_free_block_bytes))}
                            {figure("segment_bytes_needed", "segment it needed", Some(o.segment_bytes_needed))}
                        </table>
                    </section>
                    <Holders holders=o.holders.clone()/>
                </div>
                <Pools pools=o.free_by_pool.clone()/>
                <AdviceList advice=o.advice.clone()/>
            </section>
        })
    }
}

/// Each pool on each stream at the error: the private pools by their id.
#[component]
fn Pools(pools: Vec<PoolFree>) -> impl IntoView {
    view! {
        <section id="oom-pools">
            <h2>"Pools at the error"</h2>
            <table class="list">
                <tr><th>"pool"</th><th>"stream"</th><th>"segments"</th><th>"reserved"</th><th>"free"</th><th>"largest free block"</th></tr>
                {pools.into_iter().map(|p| view! {
                    <tr class="oom-pool" data-pool=p.name() data-reserved=p.reserved_bytes.to_string()>
                        <td>{p.name()}</td><td>{p.stream}</td><td>{p.segments}</td><td>{bytes_text(p.reserved_bytes)}</td>
                        <td>{bytes_text(p.free_bytes)}</td><td>{bytes_text(p.largest_free_block_bytes)}</td>
                    </tr>
                }).collect_view()}
            </table>
        </section>
    }
}

#[component]
fn Holders(holders: Vec<Holder>) -> impl IntoView {
    view! {
        <section id="holders">
            <h2>"Who holds the memory"</h2>
            <table class="list">
                <tr><th>"call site"</th><th>"bytes"</th><th>"blocks"</th></tr>
                {holders.into_iter().map(|h| view! {
                    <tr class="holder" data-site=h.site.clone() data-bytes=h.bytes.to_string()>
                        <td>{h.site.clone()}</td><td>{bytes_text(h.bytes)}</td><td>{h.count}</td>
                    </tr>
                }).collect_view()}
            </table>
        </section>
    }
}

#[component]
fn AdviceList(advice: Vec<Advice>) -> impl IntoView {
    view! {
        <section id="advice">
            <h2>"What would help"</h2>
            {if advice.is_empty() { Some(view! { <p class="hint">"No setting is predicted to help; see what-if below."</p> }) } else { None }}
            <ul>
                {advice.into_iter().map(|a| view! {
                    <li class="advice" data-setting=a.setting.clone() data-effect=a.predicted_effect_bytes.to_string()>
                        <code>{a.setting.clone()}</code>": "{a.text}
                    </li>
                }).collect_view()}
            </ul>
        </section>
    }
}

/// Without an OOM: the peak and the room left at it, and the final state's reading.
#[component]
fn PeakPanel(r: Report) -> impl IntoView {
    let p = r.peak;
    let device = expect_context::<Docs>().device_name(p.device);
    view! {
        <section id="peak-health" data-peak=p.peak_bytes.to_string()>
            <h2>{format!("No out-of-memory error recorded on {device}")}</h2>
            <p id="headroom" data-headroom=p.headroom_bytes.map_or("null".to_string(), |h| h.to_string())>
                {match (p.capacity_bytes, p.headroom_bytes) {
                    (Some(c), Some(h)) => format!("Peak {} of {} ({}): {} {}.", bytes_text(p.peak_bytes), bytes_text(c),
                        p.capacity_source.clone().unwrap_or_default(), bytes_text(h.unsigned_abs()), if h >= 0 { "to spare" } else { "over" }),
                    _ => format!("Peak {} at step {}; the file does not say the device's memory, so the headroom is unknown.", bytes_text(p.peak_bytes), p.step),
                }}
            </p>
            {r.at_end.map(|e| view! {
                <p id="at-end" data-verdict=e.verdict.map_or("none", |v| v.key())>{format!("At the end of the trace: {}.", e.state)}</p>
                <p id="at-end-if">{format!("If it was dumped at an out-of-memory error: {}, {}.", e.verdict.map_or("undecided", |v| v.label()), e.why)}</p>
                <p class="hint">{format!("Why \"if\": {}.", e.assumption)}</p>
            })}
            <Holders holders=p.holders/>
        </section>
    }
}

/// Predicted peaks under other setups; a ticked row is drawn on the category chart.
#[component]
fn WhatIfTable(r: Report) -> impl IntoView {
    let predicted = expect_context::<Predicted>();
    view! {
        <section id="what-if">
            <h2>"What if"</h2>
            <p class="hint">"Predicted peaks of the same run under other setups, from its categories. Tick one to draw it on the category chart."</p>
            <table class="list">
                <tr><th></th><th>"change"</th><th>"predicted peak"</th><th>"assumption"</th></tr>
                {r.what_if.into_iter().map(|w| {
                    let line = Line { key: w.key.clone(), label: w.change.clone(), bytes: w.predicted_peak_bytes };
                    let key = w.key.clone();
                    view! {
                        <tr class="what-if" data-key=w.key.clone() data-peak=w.predicted_peak_bytes.to_string() data-applies=w.applies.to_string()>
                            <td><input type="checkbox" class="what-if-line" prop:checked=move || predicted.is_on(&key)
                                on:change=move |e| predicted.set(line.clone(), event_target_checked(&e))/></td>
                            <td>{w.change}</td>
                            <td>{format!("{} ({})", bytes_text(w.predicted_peak_bytes), delta_text(w.baseline_peak_bytes, w.predicted_peak_bytes))}</td>
                            <td>{w.assumption}</td>
                        </tr>
                    }
                }).collect_view()}
            </table>
        </section>
    }
}
