//! The category view (what the memory is for), the user's category rules, and the
//! comparison of open files (an overview of each, and the diff of any two). Every figure
//! comes from the workers; the diff asks A's worker for its profile and sends it to B's.

use engine::protocol::*;
use leptos::prelude::*;
use leptos::task::spawn_local;
use snapshot::stats::format_size;

use crate::{bytes_text, canvas_by_id, draw, now, worker, S};

/// What the main area shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Timeline,
    Categories,
    Compare,
}

const RULES_KEY: &str = "memscape.rules";

/// The state of these views (all `Copy`).
#[derive(Clone, Copy)]
pub(crate) struct I {
    pub(crate) mode: RwSignal<Mode>,
    pub(crate) rules: RwSignal<Rules>,
    cats: RwSignal<Option<CategoriesVm>>,
    hidden: RwSignal<[bool; 8]>,
    at: RwSignal<Option<u32>>,
    a: RwSignal<Option<DocId>>,
    b: RwSignal<Option<DocId>>,
    align: RwSignal<Align>,
    sites_by: RwSignal<SiteMode>,
    diff: RwSignal<Option<Diff>>,
    diff_busy: RwSignal<bool>,
}

fn storage() -> Option<web_sys::Storage> {
    web_sys::window()?.local_storage().ok().flatten()
}

fn delta_text(a: u64, b: u64) -> String {
    let d = i128::from(b) - i128::from(a);
    if d > 0 {
        format!("+{}", format_size(d))
    } else {
        format_size(d)
    }
}

impl I {
    pub(crate) fn new(s: S) -> I {
        let saved = storage()
            .and_then(|st| st.get_item(RULES_KEY).ok().flatten())
            .and_then(|t| Rules::from_json(&t).ok())
            .unwrap_or_default();
        let i = I {
            mode: RwSignal::new(Mode::Timeline),
            rules: RwSignal::new(saved),
            cats: RwSignal::new(None),
            hidden: RwSignal::new([false; 8]),
            at: RwSignal::new(None),
            a: RwSignal::new(None),
            b: RwSignal::new(None),
            align: RwSignal::new(Align::Iteration),
            sites_by: RwSignal::new(SiteMode::Frame),
            diff: RwSignal::new(None),
            diff_busy: RwSignal::new(false),
        };
        // Every open file's worker gets the rules; later answers use them.
        let docs = Memo::new(move |_| s.tabs.with(|t| t.iter().map(|t| t.info.doc).collect::<Vec<_>>()));
        let version = RwSignal::new(0u32);
        Effect::new(move |_| {
            let rules = i.rules.get();
            let docs = docs.get();
            if let Some(st) = storage() {
                let _ = st.set_item(RULES_KEY, &rules.to_json());
            }
            spawn_local(async move {
                for doc in docs {
                    if let Response::Error(e) = worker().ask(Request::Rules { doc, rules: rules.clone() }).await {
                        s.error.set(Some(format!("category rules: {e}")));
                    }
                }
                version.update(|v| *v += 1);
            });
        });
        // The category view follows the tab's window, device and the rules.
        let seq = StoredValue::new(0u32);
        let key = Memo::new(move |_| s.tab().map(|t| (t.info.doc, t.device, t.start.to_bits(), t.end.to_bits())));
        Effect::new(move |_| {
            if i.mode.get() != Mode::Categories {
                return;
            }
            let Some((doc, device, start, end)) = key.get() else { return };
            version.track();
            s.size.track();
            let at = i.at.get();
            seq.update_value(|x| *x += 1);
            let my = seq.get_value();
            let columns = canvas_by_id("categories")
                .map(|c| f64::from(c.client_width()) - draw::LEFT - draw::RIGHT)
                .filter(|&w| w > 50.0)
                .map_or(800, |w| w as u32);
            let (start, end) = (f64::from_bits(start), f64::from_bits(end));
            spawn_local(async move {
                let r = worker().ask(Request::Categories { doc, device, start, end, columns, at }).await;
                if seq.get_value() == my {
                    if let Response::Categories(c) = r {
                        i.cats.set(Some(*c));
                    }
                }
            });
        });
        Effect::new(move |_| {
            let hidden = i.hidden.get();
            let at = i.at.get();
            i.cats.with(|c| {
                if let (Some(c), Some(canvas)) = (c, canvas_by_id("categories")) {
                    draw::categories(&canvas, c, &hidden, at, &draw::Theme::read());
                }
            });
        });
        Effect::new(move |_| {
            s.size.track();
            i.diff.with(|d| {
                if let (Some(d), Some(canvas)) = (d, canvas_by_id("diff-chart")) {
                    draw::diff(&canvas, d, &draw::Theme::read());
                }
            });
        });
        // A selected step belongs to its file and device.
        let where_ = Memo::new(move |_| s.tab().map(|t| (t.info.doc, t.device)));
        Effect::new(move |_| {
            where_.track();
            i.at.set(None);
        });
        // A closed file leaves the comparison.
        Effect::new(move |_| {
            let docs = docs.get();
            for sig in [i.a, i.b] {
                if sig.get_untracked().is_some_and(|d| !docs.contains(&d)) {
                    sig.set(None);
                    i.diff.set(None);
                }
            }
        });
        i
    }

    /// Asks A's worker for its profile and B's worker for the diff against it.
    fn run_diff(self, s: S) {
        let (Some(a), Some(b)) = (self.a.get_untracked(), self.b.get_untracked()) else { return };
        let device_of =
            |doc: DocId| s.tabs.with_untracked(|t| t.iter().find(|t| t.info.doc == doc).map(|t| t.device)).unwrap_or(0);
        let (da, db) = (device_of(a), device_of(b));
        let (align, sites_by) = (self.align.get_untracked(), self.sites_by.get_untracked());
        self.diff_busy.set(true);
        spawn_local(async move {
            let t0 = now();
            let r = match worker().ask(Request::Profile { doc: a, device: da }).await {
                Response::Profile(p) => worker().ask(Request::Diff { doc: b, device: db, a: p, align, sites_by }).await,
                other => other,
            };
            self.diff_busy.set(false);
            match r {
                Response::Diff(d) => {
                    s.status.set(format!("Compared in {:.0} ms", now() - t0));
                    self.diff.set(Some(*d));
                }
                Response::Error(e) => s.error.set(Some(format!("compare: {e}"))),
                _ => {}
            }
        });
    }
}

/// The three views' switch.
#[component]
pub(crate) fn Modes(s: S, i: I) -> impl IntoView {
    let button = move |m: Mode, id: &'static str, label: &'static str| {
        view! {
            <button id=id class:active=move || i.mode.get() == m on:click=move |_| {
                i.mode.set(m);
                s.size.update(|x| *x += 1);
            }>{label}</button>
        }
    };
    view! {
        <nav id="modes">
            {button(Mode::Timeline, "mode-timeline", "Timeline")}
            {button(Mode::Categories, "mode-categories", "Categories")}
            {button(Mode::Compare, "mode-compare", "Compare files")}
        </nav>
    }
}

fn cat_row(c: Category, colour: u32, cells: Vec<String>) -> impl IntoView {
    view! {
        <tr data-category=c.key()>
            <th><span class="swatch" style:background=draw::css(colour)></span>{c.label()}</th>
            {cells.into_iter().map(|v| view! { <td>{v}</td> }).collect_view()}
        </tr>
    }
}

/// Bytes by category over time, the breakdown at the peak and at a clicked step, the
/// budget, iterations, leak suspects and the rules.
#[component]
pub(crate) fn CategoryView(s: S, i: I) -> impl IntoView {
    let on_click = move |e: web_sys::MouseEvent| {
        let Some(c) = canvas_by_id("categories") else { return };
        let w = f64::from(c.client_width()) - draw::LEFT - draw::RIGHT;
        let Some((start, end, n)) = i.cats.with_untracked(|c| c.as_ref().map(|c| (c.start, c.end, c.n_steps))) else {
            return;
        };
        let x = f64::from(e.offset_x()) - draw::LEFT;
        if x < 0.0 || x > w || n == 0 {
            return;
        }
        let step = (start + x / w * (end - start)).floor().clamp(0.0, f64::from(n - 1)) as u32;
        i.at.set(Some(step));
    };
    view! {
        <div id="category-view">
            <div class="legend" id="legend">
                {Category::ALL.into_iter().map(|c| {
                    let k = c.index();
                    view! {
                        <label data-category=c.key()>
                            <input type="checkbox" id=format!("legend-{}", c.key())
                                prop:checked=move || !i.hidden.get()[k]
                                on:change=move |e| { let on = event_target_checked(&e); i.hidden.update(|h| h[k] = !on); }/>
                            <span class="swatch" style:background=draw::css(engine::CATEGORY_COLOURS[k])></span>
                            {c.label()}
                        </label>
                    }
                }).collect_view()}
                <span class="hint">"Click the chart to see the breakdown at that step."</span>
            </div>
            <div class="plot"><canvas id="categories" on:click=on_click></canvas></div>
            {move || i.cats.get().map(|c| {
                let r = c.report.clone();
                let sel = c.selected;
                let b = r.budget;
                let complete = r.iterations.iter().filter(|x| x.complete).count();
                view! {
                    <div class="panels">
                        <section id="breakdown">
                            <h2>"Breakdown"</h2>
                            <table class="kv">
                                <tr><th></th><th>{format!("at the peak (step {})", r.peak_step)}</th>
                                    <th>{sel.map_or("click the chart".to_string(), |(st, _)| format!("at step {st}"))}</th>
                                    <th>"highest"</th></tr>
                                {Category::ALL.into_iter().map(|cat| {
                                    let k = cat.index();
                                    cat_row(cat, c.colours[k], vec![
                                        bytes_text(r.at_peak[k].bytes),
                                        sel.map_or(String::new(), |(_, v)| bytes_text(v[k])),
                                        bytes_text(r.max[k].bytes),
                                    ])
                                }).collect_view()}
                                <tr data-category="total"><th>"total"</th><td>{bytes_text(r.peak_bytes)}</td>
                                    <td>{c.selected_total.map(bytes_text).unwrap_or_default()}</td><td></td></tr>
                            </table>
                        </section>
                        <section id="budget">
                            <h2>"Budget"</h2>
                            <p class="formula">"parameters + optimizer state + max(gradients + optimizer intermediates, activations)"</p>
                            <p id="budget-terms" data-total=b.total.to_string()>
                                {format!("{} + {} + max({}, {}) = {}", bytes_text(b.parameters), bytes_text(b.optimizer_state),
                                    bytes_text(b.gradients_and_intermediates), bytes_text(b.activations), bytes_text(b.total))}
                            </p>
                            <p id="budget-peak" data-peak=b.peak.to_string()>{format!("measured peak: {} ({})", bytes_text(b.peak), delta_text(b.total, b.peak))}</p>
                        </section>
                    </div>
                    <div class="panels">
                        <section id="iterations">
                            <h2>{format!("Iterations: {} ({complete} complete, {})", r.iterations.len(), match r.iteration_source {
                                snapshot::categories::IterationSource::OptimizerSteps => "one per optimizer step",
                                snapshot::categories::IterationSource::BackwardPasses => "one per backward pass",
                                snapshot::categories::IterationSource::None => "no training steps found",
                            })}</h2>
                            <table class="list">
                                <tr><th>"#"</th><th>"steps"</th><th>"peak"</th><th></th></tr>
                                {r.iterations.iter().enumerate().take(200).map(|(k, it)| {
                                    let (a, b, p) = (it.start, it.end, it.peak_step);
                                    view! {
                                        <tr class="iteration" data-peak=it.peak_bytes.to_string()>
                                            <td>{k}</td><td>{format!("{a}..{b}")}</td><td>{bytes_text(it.peak_bytes)}</td>
                                            <td><button on:click=move |_| { s.set_window(f64::from(a), f64::from(b)); i.at.set(Some(p)); }>"zoom"</button>
                                                {(!it.complete).then_some(" cut")}</td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </table>
                        </section>
                        <section id="leaks">
                            <h2>{format!("Leak suspects: {}", r.leaks.len())}</h2>
                            {if r.leaks.is_empty() {
                                view! { <p class="hint">"Nothing grows from iteration to iteration."</p> }.into_any()
                            } else {
                                r.leaks.iter().map(|l| view! {
                                    <details class="leak" data-site=l.site.clone() data-growth=l.bytes_per_iteration.to_string()>
                                        <summary>{format!("{} grows {} per iteration ({} alive)", l.site, bytes_text(l.bytes_per_iteration), l.count)}</summary>
                                        <pre>{l.stack.join("\n")}</pre>
                                    </details>
                                }).collect_view().into_any()
                            }}
                        </section>
                    </div>
                    <section id="rule-use">
                        <h2>"Which rule decided what"</h2>
                        <p class="hint">"Bytes of every allocation each rule decided, over the whole trace."</p>
                        <table class="list">
                            {r.rules.iter().map(|u| view! {
                                <tr><td>{u.category.label()}</td><td>{bytes_text(u.bytes)}</td><td>{u.rule.clone()}</td></tr>
                            }).collect_view()}
                        </table>
                    </section>
                }
            })}
            <RulesEditor s=s i=i/>
        </div>
    }
}

/// The user's rules: added, removed, exported and imported as JSON, kept in localStorage.
#[component]
fn RulesEditor(s: S, i: I) -> impl IntoView {
    let pattern = NodeRef::<leptos::html::Input>::new();
    let category = NodeRef::<leptos::html::Select>::new();
    let target = NodeRef::<leptos::html::Select>::new();
    let add = move |_| {
        let (Some(p), Some(c), Some(t)) = (pattern.get(), category.get(), target.get()) else { return };
        let rule = Rule {
            pattern: p.value(),
            category: Category::parse(&c.value()).unwrap_or(Category::Unknown),
            on: if t.value() == "annotation" { Target::Annotation } else { Target::Frame },
        };
        let mut next = i.rules.get_untracked();
        next.rules.push(rule);
        match next.compile() {
            Ok(_) => {
                i.rules.set(next);
                p.set_value("");
            }
            Err(e) => s.error.set(Some(format!("category rules: {e}"))),
        }
    };
    let export = move |_| {
        if let Err(e) =
            crate::save::download("memscape-rules.json", "application/json", i.rules.get_untracked().to_json())
        {
            s.error.set(Some(format!("could not export the rules: {e}")));
        }
    };
    let import = move |e: leptos::ev::Event| {
        let input: web_sys::HtmlInputElement = event_target(&e);
        let Some(file) = input.files().and_then(|f| f.get(0)) else { return };
        let name = file.name();
        input.set_value("");
        spawn_local(async move {
            let text = gloo_file::futures::read_as_text(&gloo_file::File::from(file)).await;
            match text.map_err(|e| e.to_string()).and_then(|t| Rules::from_json(&t)) {
                Ok(r) => {
                    s.status.set(format!("Imported {} rules from {name}", r.rules.len()));
                    i.rules.set(r);
                }
                Err(e) => s.error.set(Some(format!("{name}: {e}"))),
            }
        });
    };
    view! {
        <section id="rules">
            <h2>"Your rules (tried first, in order)"</h2>
            <table class="list" id="rule-list">
                {move || i.rules.get().rules.into_iter().enumerate().map(|(k, r)| view! {
                    <tr class="rule">
                        <td>{k + 1}</td><td><code>{r.pattern.clone()}</code></td>
                        <td>{if r.on == Target::Frame { "frames" } else { "annotations" }}</td>
                        <td>{r.category.label()}</td>
                        <td><button class="rule-remove" on:click=move |_| i.rules.update(|x| { x.rules.remove(k); })>"remove"</button></td>
                    </tr>
                }).collect_view()}
            </table>
            <div class="rule-form">
                <input id="rule-pattern" node_ref=pattern placeholder="regular expression, e.g. kv_cache"/>
                <select id="rule-on" node_ref=target>
                    <option value="frame">"on frames"</option>
                    <option value="annotation">"on annotations"</option>
                </select>
                <select id="rule-category" node_ref=category>
                    {Category::ALL.into_iter().map(|c| view! { <option value=c.key()>{c.label()}</option> }).collect_view()}
                </select>
                <button id="rule-add" on:click=add>"Add rule"</button>
                <button id="rules-export" on:click=export>"Export JSON"</button>
                <label class="button">"Import JSON"<input id="rules-import" type="file" accept=".json" on:change=import/></label>
            </div>
        </section>
    }
}

/// Every open file's peak and reserved bytes; pick two to compare.
#[component]
pub(crate) fn CompareView(s: S, i: I) -> impl IntoView {
    view! {
        <div id="compare-view">
            <section id="files">
                <h2>"Open files"</h2>
                <table class="list">
                    <tr><th>"file"</th><th>"device"</th><th>"peak allocated"</th><th>"reserved"</th><th>"A"</th><th>"B"</th><th></th></tr>
                    <For each=move || s.tabs.get() key=|t| (t.info.doc, t.device) let:t>
                        {
                            let doc = t.info.doc;
                            let dev = t.info.summary.devices.iter().find(|d| d.device == u64::from(t.device)).cloned();
                            let peak = dev.as_ref().map_or(0, |d| d.timeline.peak_bytes);
                            let reserved = dev.as_ref().map_or(0, |d| d.reserved_bytes);
                            view! {
                                <tr class="file" data-name=t.info.name.clone() data-peak=peak.to_string() data-reserved=reserved.to_string()>
                                    <td>{t.info.name.clone()}</td><td>{format!("cuda:{}", t.device)}</td>
                                    <td>{bytes_text(peak)}</td><td>{bytes_text(reserved)}</td>
                                    <td><input type="radio" name="diff-a" class="pick-a" prop:checked=move || i.a.get() == Some(doc)
                                        on:change=move |_| { i.a.set(Some(doc)); i.run_diff(s); }/></td>
                                    <td><input type="radio" name="diff-b" class="pick-b" prop:checked=move || i.b.get() == Some(doc)
                                        on:change=move |_| { i.b.set(Some(doc)); i.run_diff(s); }/></td>
                                    <td><button class="open-file" on:click=move |_| { s.select_tab(doc); i.mode.set(Mode::Timeline); s.size.update(|x| *x += 1); }>"open"</button></td>
                                </tr>
                            }
                        }
                    </For>
                </table>
            </section>
            <div class="toolbar">
                <label>"Align by "
                    <select id="align" on:change=move |e| {
                        i.align.set(Align::parse(&event_target_value(&e)).unwrap_or_default());
                        i.run_diff(s);
                    }>
                        {Align::ALL.into_iter().map(|a| view! { <option value=a.key() selected=move || i.align.get() == a>{a.key()}</option> }).collect_view()}
                    </select>
                </label>
                <label>"Call sites by "
                    <select id="sites-by" on:change=move |e| {
                        i.sites_by.set(if event_target_value(&e) == "stack" { SiteMode::Stack } else { SiteMode::Frame });
                        i.run_diff(s);
                    }>
                        <option value="frame">"first frame of your code"</option>
                        <option value="stack">"whole stack"</option>
                    </select>
                </label>
                <span id="diff-busy">{move || if i.diff_busy.get() { "comparing…" } else { "" }}</span>
            </div>
            {move || (i.a.get().is_none() || i.b.get().is_none()).then(|| view! {
                <p class="hint" id="diff-hint">"Pick a file as A and one as B."</p>
            })}
            <div class="plot" style:display=move || if i.diff.with(Option::is_some) { "" } else { "none" }>
                <canvas id="diff-chart"></canvas>
            </div>
            {move || i.diff.get().map(|d| view! {
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
            })}
        </div>
    }
}
