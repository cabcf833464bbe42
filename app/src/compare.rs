//! Comparing open files: every file's peak and reserved bytes, and the diff of any two
//! (A's worker makes its profile, B's worker compares its own file with it): both totals on
//! one axis, peaks and categories, call sites alive at the peak, allocation counts, segments.

use engine::protocol::{Align, Diff, DocId, Request, Response, SiteMode};
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::categories::cat_row;
use crate::client::worker;
use crate::dom::{canvas_by_id, now};
use crate::draw;
use crate::modes::{Mode, Shown};
use crate::state::{Docs, Messages, Nav, Redraw};
use crate::text::{bytes_text, delta_text, device_name};

/// Which files are A and B, how they are aligned, and their diff.
#[derive(Clone, Copy)]
pub(crate) struct Compare {
    a: RwSignal<Option<DocId>>,
    b: RwSignal<Option<DocId>>,
    align: RwSignal<Align>,
    sites_by: RwSignal<SiteMode>,
    diff: RwSignal<Option<Diff>>,
    busy: RwSignal<bool>,
    docs: Docs,
    messages: Messages,
}

impl Compare {
    /// Draws the diff chart when it changes; a closed file leaves the comparison.
    pub(crate) fn new(docs: Docs, messages: Messages, redraw: Redraw) -> Compare {
        let c = Compare {
            a: RwSignal::new(None),
            b: RwSignal::new(None),
            align: RwSignal::new(Align::Iteration),
            sites_by: RwSignal::new(SiteMode::Frame),
            diff: RwSignal::new(None),
            busy: RwSignal::new(false),
            docs,
            messages,
        };
        Effect::new(move |_| {
            redraw.track();
            c.diff.with(|d| {
                if let (Some(d), Some(canvas)) = (d, canvas_by_id("diff-chart")) {
                    draw::diff(&canvas, d, &draw::Theme::read());
                }
            });
        });
        let ids = Memo::new(move |_| docs.ids());
        Effect::new(move |_| {
            let ids = ids.get();
            for sig in [c.a, c.b] {
                if sig.get_untracked().is_some_and(|d| !ids.contains(&d)) {
                    sig.set(None);
                    c.diff.set(None);
                }
            }
        });
        c
    }

    /// Compares two open files (A and B), as picking them in the list does.
    pub(crate) fn pick(self, a: DocId, b: DocId) {
        self.a.set(Some(a));
        self.b.set(Some(b));
        self.run();
    }

    /// Asks A's worker for its profile and B's worker for the diff against it.
    fn run(self) {
        let (Some(a), Some(b)) = (self.a.get_untracked(), self.b.get_untracked()) else { return };
        let (da, db) = (self.docs.device_of(a), self.docs.device_of(b));
        let (align, sites_by) = (self.align.get_untracked(), self.sites_by.get_untracked());
        self.busy.set(true);
        spawn_local(async move {
            let t0 = now();
            let r = match worker().ask(Request::Profile { doc: a, device: da }).await {
                Response::Profile(p) => worker().ask(Request::Diff { doc: b, device: db, a: p, align, sites_by }).await,
                other => other,
            };
            self.busy.set(false);
            match r {
                Response::Diff(d) => {
                    self.messages.status(format!("Compared in {:.0} ms", now() - t0));
                    self.diff.set(Some(*d));
                }
                Response::Error(e) => self.messages.error(format!("compare: {e}")),
                _ => {}
            }
        });
    }
}

#[component]
pub(crate) fn CompareView() -> impl IntoView {
    let c = expect_context::<Compare>();
    view! {
        <div id="compare-view">
            <Files/>
            <Options/>
            {move || (c.a.get().is_none() || c.b.get().is_none()).then(|| view! {
                <p class="hint" id="diff-hint">"Pick a file as A and one as B."</p>
            })}
            <div class="plot" style:display=move || if c.diff.with(Option::is_some) { "" } else { "none" }>
                <canvas id="diff-chart"></canvas>
            </div>
            {move || c.diff.get().map(|d| view! { <DiffTables d=d/> })}
        </div>
    }
}

/// Every open file's peak and reserved bytes; pick two to compare.
#[component]
fn Files() -> impl IntoView {
    let (c, docs, nav) = (expect_context::<Compare>(), expect_context::<Docs>(), expect_context::<Nav>());
    let (shown, redraw) = (expect_context::<Shown>(), expect_context::<Redraw>());
    view! {
        <section id="files">
            <h2>"Open files"</h2>
            <table class="list">
                <tr><th>"file"</th><th>"device"</th><th>"peak allocated"</th><th>"reserved"</th><th>"A"</th><th>"B"</th><th></th></tr>
                <For each=move || docs.tabs() key=|t| (t.info.doc, t.device) let:t>
                    {
                        let doc = t.info.doc;
                        let dev = t.info.device_summary(t.device).cloned();
                        let peak = dev.as_ref().map_or(0, |d| d.timeline.peak_bytes);
                        let reserved = dev.as_ref().map_or(0, |d| d.reserved_bytes);
                        view! {
                            <tr class="file" data-name=t.info.name.clone() data-peak=peak.to_string() data-reserved=reserved.to_string()>
                                <td>{t.info.name.clone()}</td><td>{device_name(&t.info, t.device)}</td>
                                <td>{bytes_text(peak)}</td><td>{bytes_text(reserved)}</td>
                                <td><input type="radio" name="diff-a" class="pick-a" prop:checked=move || c.a.get() == Some(doc)
                                    on:change=move |_| { c.a.set(Some(doc)); c.run(); }/></td>
                                <td><input type="radio" name="diff-b" class="pick-b" prop:checked=move || c.b.get() == Some(doc)
                                    on:change=move |_| { c.b.set(Some(doc)); c.run(); }/></td>
                                <td><button class="open-file" on:click=move |_| { nav.select(doc); shown.show(Mode::Timeline, redraw); }>"open"</button></td>
                            </tr>
                        }
                    }
                </For>
            </table>
        </section>
    }
}

/// How the two runs are aligned and how call sites are told apart.
#[component]
fn Options() -> impl IntoView {
    let c = expect_context::<Compare>();
    view! {
        <div class="toolbar">
            <label>"Align by "
                <select id="align" on:change=move |e| {
                    c.align.set(Align::parse(&event_target_value(&e)).unwrap_or_default());
                    c.run();
                }>
                    {Align::ALL.into_iter().map(|a| view! { <option value=a.key() selected=move || c.align.get() == a>{a.key()}</option> }).collect_view()}
                </select>
            </label>
            <label>"Call sites by "
                <select id="sites-by" on:change=move |e| {
                    c.sites_by.set(if event_target_value(&e) == "stack" { SiteMode::Stack } else { SiteMode::Frame });
                    c.run();
                }>
                    <option value="frame">"first frame of your code"</option>
                    <option value="stack">"whole stack"</option>
                </select>
            </label>
            <span id="diff-busy">{move || if c.busy.get() { "comparing…" } else { "" }}</span>
        </div>
    }
}

/// The diff's axis note and tables.
#[component]
fn DiffTables(d: Diff) -> impl IntoView {
    view! {
        <p id="diff-axis" data-align=d.align.key()>
            <span class="swatch" style:background="#3b6ea5"></span>"A "
            <span class="swatch" style:background="#e0663a"></span>"B, x: "{d.x_label.clone()}
            {d.align_note.clone().map(|n| format!(" ({n})"))}
        </p>
        <div class="panels">
            <section id="diff-summary">
                <h2>"Peaks"</h2>
                <table class="kv">
                    <tr><th></th><th>"A"</th><th>"B"</th><th>"B - A"</th></tr>
                    <tr data-key="peak" data-delta=(i128::from(d.peak.1) - i128::from(d.peak.0)).to_string()>
                        <th>"peak allocated"</th><td>{bytes_text(d.peak.0)}</td><td>{bytes_text(d.peak.1)}</td><td>{delta_text(d.peak.0, d.peak.1)}</td></tr>
                    <tr data-key="reserved"><th>"reserved"</th><td>{bytes_text(d.reserved.0)}</td><td>{bytes_text(d.reserved.1)}</td><td>{delta_text(d.reserved.0, d.reserved.1)}</td></tr>
                    {d.categories.iter().filter(|c| c.1 + c.2 > 0).map(|&(c, a, b)| {
                        cat_row(c, engine::CATEGORY_COLOURS[c.index()], vec![bytes_text(a), bytes_text(b), delta_text(a, b)])
                    }).collect_view()}
                </table>
            </section>
            <section id="diff-segments">
                <h2>{format!("Segments only in A: {}, only in B: {}", d.segments_only_a.len(), d.segments_only_b.len())}</h2>
                <table class="list">
                    {d.segments_only_a.iter().map(|x| ("A", x)).chain(d.segments_only_b.iter().map(|x| ("B", x))).take(100).map(|(w, x)| view! {
                        <tr><td>{w}</td><td>{format!("0x{:x}", x.address)}</td><td>{bytes_text(x.size)}</td><td>{x.site.clone()}</td></tr>
                    }).collect_view()}
                </table>
            </section>
        </div>
        <section id="diff-sites">
            <h2>"Alive at the peak, by call site (largest change first)"</h2>
            <table class="list">
                <tr><th>"B - A"</th><th>"A"</th><th>"B"</th><th>"call site"</th></tr>
                {d.sites.iter().take(50).map(|r| view! {
                    <tr class="site" data-site=r.site.clone() data-delta=r.delta().to_string()>
                        <td>{delta_text(r.a, r.b)}</td><td>{bytes_text(r.a)}</td><td>{bytes_text(r.b)}</td><td><pre>{r.site.clone()}</pre></td>
                    </tr>
                }).collect_view()}
            </table>
        </section>
        <section id="diff-allocs">
            <h2>"Allocations made a different number of times"</h2>
            <table class="list">
                <tr><th>"size"</th><th>"A"</th><th>"B"</th><th>"call site"</th></tr>
                {d.allocs.iter().take(50).map(|r| view! {
                    <tr class="alloc" data-site=r.site.clone() data-size=r.size.to_string() data-a=r.count_a.to_string() data-b=r.count_b.to_string()>
                        <td>{bytes_text(r.size)}</td><td>{r.count_a}</td><td>{r.count_b}</td><td>{r.site.clone()}</td>
                    </tr>
                }).collect_view()}
            </table>
        </section>
    }
}
