//! The categories view: what the memory is for, as stacked areas over the window (legend
//! toggles), the breakdown at the peak and at a clicked step, the budget, training
//! iterations, leak suspects, which rule decided what, and the user's rules. A clicked step
//! is also the flame graph's (`state::Chosen`). The doctor's
//! ticked what-if predictions (`state::Predicted`) are drawn on the chart as dashed lines.
//! A `torch.profiler` trace shown beside its run's raw memory timeline also gets PyTorch's
//! categories next to memscape's at its peak (`pytorch`).

mod pytorch;

use engine::protocol::{CategoriesVm, Category, DocId, Request, Response};
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::client::worker;
use crate::dom::canvas_by_id;
use crate::draw;
use crate::modes::{Mode, Shown};
use crate::rules::{RulesEditor, UserRules};
use crate::state::{Chosen, Docs, Predicted, Redraw, Window};
use crate::text::{bytes_text, delta_text};
use pytorch::PytorchCategories;
pub(crate) use pytorch::Theirs;

/// The categories a file has a use for, in stacking order: memory outside PyTorch's allocator
/// only in merged snapshots that hold some, memory from before the recording not split only
/// where some is.
fn shown(v: Option<&CategoriesVm>) -> impl Iterator<Item = Category> + '_ {
    let rare = [Category::OutsideAllocator, Category::Persistent];
    Category::STACKED
        .into_iter()
        .filter(move |&c| !rare.contains(&c) || v.is_some_and(|v| v.report.max[c.index()].bytes > 0))
}

/// The view's state: the worker's answer, the hidden categories, the clicked step.
#[derive(Clone, Copy)]
pub(crate) struct Cats {
    cats: RwSignal<Option<CategoriesVm>>,
    hidden: RwSignal<[bool; snapshot::categories::N]>,
    at: RwSignal<Option<u32>>,
}

impl Cats {
    /// Asks the worker again whenever the view is shown and the window, device, size, clicked
    /// step or rules change.
    pub(crate) fn new(docs: Docs, shown: Shown, rules: UserRules, redraw: Redraw, predicted: Predicted) -> Cats {
        let c = Cats {
            cats: RwSignal::new(None),
            hidden: RwSignal::new([false; snapshot::categories::N]),
            at: RwSignal::new(None),
        };
        let seq = StoredValue::new(0u32);
        let key = Memo::new(move |_| docs.tab().map(|t| (t.info.doc, t.device, t.start.to_bits(), t.end.to_bits())));
        Effect::new(move |_| {
            if !shown.is(Mode::Categories) {
                return;
            }
            let Some((doc, device, start, end)) = key.get() else { return };
            if device == engine::protocol::HOST {
                c.cats.set(None);
                return;
            }
            rules.track();
            redraw.track();
            let at = c.at.get();
            seq.update_value(|x| *x += 1);
            let my = seq.get_value();
            let columns = canvas_by_id("categories")
                .map(|c| draw::Area::of(&c).width())
                .filter(|&w| w > 50.0)
                .map_or(800, |w| w as u32);
            let (start, end) = (f64::from_bits(start), f64::from_bits(end));
            spawn_local(async move {
                let r = worker().ask(Request::Categories { doc, device, start, end, columns, at }).await;
                if seq.get_value() == my {
                    if let Response::Categories(v) = r {
                        c.cats.set(Some(*v));
                    }
                }
            });
        });
        Effect::new(move |_| {
            let hidden = c.hidden.get();
            let at = c.at.get();
            let lines: Vec<(String, u64)> = predicted.lines().into_iter().map(|l| (l.label, l.bytes)).collect();
            c.cats.with(|v| {
                if let (Some(v), Some(canvas)) = (v, canvas_by_id("categories")) {
                    draw::categories(&canvas, v, &hidden, at, &lines, &draw::Theme::read());
                }
            });
        });
        // A clicked step and the answer belong to their file and device.
        let place = Memo::new(move |_| docs.tab().map(|t| (t.info.doc, t.device)));
        Effect::new(move |prev: Option<Option<(DocId, u32)>>| {
            let now = place.get();
            c.at.set(None);
            if prev.is_some_and(|p| p != now) {
                c.cats.set(None);
            }
            now
        });
        c
    }
}

/// A category's row: its swatch and name, then `cells`.
pub(crate) fn cat_row(c: Category, colour: u32, cells: Vec<String>) -> impl IntoView {
    view! {
        <tr data-category=c.key()>
            <th><span class="swatch" style:background=draw::css(colour)></span>{c.label()}</th>
            {cells.into_iter().map(|v| view! { <td>{v}</td> }).collect_view()}
        </tr>
    }
}

#[component]
pub(crate) fn CategoryView() -> impl IntoView {
    let (c, chosen, docs) = (expect_context::<Cats>(), expect_context::<Chosen>(), expect_context::<Docs>());
    let on_click = move |e: web_sys::MouseEvent| {
        let Some(canvas) = canvas_by_id("categories") else { return };
        let area = draw::Area::of(&canvas);
        let Some((start, end, n)) = c.cats.with_untracked(|v| v.as_ref().map(|v| (v.start, v.end, v.n_steps))) else {
            return;
        };
        let x = f64::from(e.offset_x());
        if x < draw::LEFT || x > draw::LEFT + area.width() || n == 0 {
            return;
        }
        let step = area.x_value(x, (start, end)).floor().clamp(0.0, f64::from(n - 1)) as u32;
        c.at.set(Some(step));
        chosen.set(docs, step);
    };
    view! {
        <div id="category-view">
            <Legend/>
            <div class="plot"><canvas id="categories" on:click=on_click></canvas></div>
            {move || c.cats.get().map(|v| view! {
                <div class="panels">
                    <Breakdown v=v.clone()/>
                    <Budget v=v/>
                </div>
            })}
            <PytorchCategories/>
            {move || c.cats.get().map(|v| view! {
                <div class="panels">
                    <Iterations v=v.clone()/>
                    <Leaks v=v.clone()/>
                </div>
                <RuleUse v=v/>
            })}
            <RulesEditor/>
        </div>
    }
}

/// A checkbox per category, in its colour.
#[component]
fn Legend() -> impl IntoView {
    let c = expect_context::<Cats>();
    view! {
        <div class="legend" id="legend">
            {move || c.cats.with(|v| shown(v.as_ref()).collect::<Vec<_>>()).into_iter().map(|cat| {
                let k = cat.index();
                view! {
                    <label data-category=cat.key()>
                        <input type="checkbox" id=format!("legend-{}", cat.key())
                            prop:checked=move || !c.hidden.get()[k]
                            on:change=move |e| { let on = event_target_checked(&e); c.hidden.update(|h| h[k] = !on); }/>
                        <span class="swatch" style:background=draw::css(engine::CATEGORY_COLOURS[k])></span>
                        {cat.label()}
                    </label>
                }
            }).collect_view()}
            <span class="hint">"Click the chart to see the breakdown at that step."</span>
        </div>
    }
}

/// Each category at the peak, at the clicked step, and at its own highest.
#[component]
fn Breakdown(v: CategoriesVm) -> impl IntoView {
    let r = &v.report;
    let sel = v.selected;
    view! {
        <section id="breakdown">
            <h2>"Breakdown"</h2>
            <table class="kv">
                <tr><th></th><th>{format!("at the peak (step {})", r.peak_step)}</th>
                    <th>{sel.map_or("click the chart".to_string(), |(st, _)| format!("at step {st}"))}</th>
                    <th>"highest"</th></tr>
                {shown(Some(&v)).map(|cat| {
                    let k = cat.index();
                    cat_row(cat, v.colours[k], vec![
                        bytes_text(r.at_peak[k].bytes),
                        sel.map_or(String::new(), |(_, s)| bytes_text(s[k])),
                        bytes_text(r.max[k].bytes),
                    ])
                }).collect_view()}
                <tr data-category="total"><th>"total"</th><td>{bytes_text(r.peak_bytes)}</td>
                    <td>{v.selected_total.map(bytes_text).unwrap_or_default()}</td><td></td></tr>
            </table>
        </section>
    }
}

#[component]
fn Budget(v: CategoriesVm) -> impl IntoView {
    let b = v.report.budget;
    view! {
        <section id="budget">
            <h2>"Budget"</h2>
            <p class="formula">{if b.persistent > 0 {
                "parameters + optimizer state + persistent before recording + max(gradients + optimizer intermediates, activations)"
            } else {
                "parameters + optimizer state + max(gradients + optimizer intermediates, activations)"
            }}</p>
            <p id="budget-terms" data-total=b.total.to_string()>
                {format!("{} + {} + {}max({}, {}) = {}", bytes_text(b.parameters), bytes_text(b.optimizer_state),
                    if b.persistent > 0 { format!("{} + ", bytes_text(b.persistent)) } else { String::new() },
                    bytes_text(b.gradients_and_intermediates), bytes_text(b.activations), bytes_text(b.total))}
            </p>
            <p id="budget-peak" data-peak=b.peak.to_string()>{format!("measured peak: {} ({})", bytes_text(b.peak), delta_text(b.total, b.peak))}</p>
            <Inferred v=v/>
        </section>
    }
}

/// What was inferred of the memory alive before the recording (no stack, alive to the end):
/// parameters and optimizer state, or why it could not be split.
#[component]
fn Inferred(v: CategoriesVm) -> impl IntoView {
    v.report.inference.map(|i| {
        view! {
            <p id="inferred" class="hint" data-parameters=i.parameter_bytes.to_string()
                data-optimizer-state=i.optimizer_state_bytes.to_string() data-unsplit=i.unsplit_bytes.to_string()>
                {i.summary}
            </p>
        }
    })
}

/// The training iterations found, each with its peak and a button that zooms to it.
#[component]
fn Iterations(v: CategoriesVm) -> impl IntoView {
    let (c, window) = (expect_context::<Cats>(), expect_context::<Window>());
    let r = v.report;
    let complete = r.iterations.iter().filter(|x| x.complete).count();
    let source = r.iteration_source;
    view! {
        <section id="iterations">
            <h2>{format!("Iterations: {} ({complete} complete, {source})", r.iterations.len())}</h2>
            <table class="list">
                <tr><th>"#"</th><th>"steps"</th><th>"peak"</th><th></th></tr>
                {r.iterations.iter().enumerate().take(200).map(|(k, it)| {
                    let (a, b, p) = (it.start, it.end, it.peak_step);
                    view! {
                        <tr class="iteration" data-peak=it.peak_bytes.to_string()>
                            <td>{k}</td><td>{format!("{a}..{b}")}</td><td>{bytes_text(it.peak_bytes)}</td>
                            <td><button on:click=move |_| { window.set(f64::from(a), f64::from(b)); c.at.set(Some(p)); }>"zoom"</button>
                                {(!it.complete).then_some(" cut")}</td>
                        </tr>
                    }
                }).collect_view()}
            </table>
        </section>
    }
}

#[component]
fn Leaks(v: CategoriesVm) -> impl IntoView {
    let leaks = v.report.leaks;
    view! {
        <section id="leaks">
            <h2>{format!("Leak suspects: {}", leaks.len())}</h2>
            {if leaks.is_empty() {
                view! { <p class="hint">"Nothing grows from iteration to iteration."</p> }.into_any()
            } else {
                leaks.into_iter().map(|l| view! {
                    <details class="leak" data-site=l.site.clone() data-growth=l.bytes_per_iteration.to_string()>
                        <summary>{format!("{} grows {} per iteration ({} alive)", l.site, bytes_text(l.bytes_per_iteration), l.count)}</summary>
                        <pre>{l.stack.join("\n")}</pre>
                    </details>
                }).collect_view().into_any()
            }}
        </section>
    }
}

#[component]
fn RuleUse(v: CategoriesVm) -> impl IntoView {
    view! {
        <section id="rule-use">
            <h2>"Which rule decided what"</h2>
            <p class="hint">"Bytes of every allocation each rule decided, over the whole trace."</p>
            <table class="list">
                {v.report.rules.into_iter().map(|u| view! {
                    <tr><td>{u.category.label()}</td><td>{bytes_text(u.bytes)}</td><td>{u.rule}</td></tr>
                }).collect_view()}
            </table>
        </section>
    }
}
