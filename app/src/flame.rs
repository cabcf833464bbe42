//! The flame graph: what is alive at the chosen step (`state::Chosen`, the peak unless a
//! click on the category chart or the timeline chose another), by call stack, as an
//! icicle; or bytes × lifetime over the tab's window. A click zooms into a node (the
//! breadcrumb goes back), the pointer shows a node's bytes and share, the search flags
//! frames. Beside it, the lines of the user's code holding the most; a click on one
//! highlights its allocations on the timeline.

use engine::protocol::{DocId, FlameVm, Query, Request, Response};
use leptos::prelude::*;
use leptos::task::spawn_local;
use snapshot::stats::format_size;

use crate::client::worker;
use crate::dom::{canvas_by_id, set_value_by_id};
use crate::draw::{self, Placed};
use crate::modes::{Mode, Shown};
use crate::search::Finder;
use crate::state::{Chosen, Docs, Messages, Redraw, Search, Selection};
use crate::text::bytes_text;

/// The view's state: the worker's answer (for its file and device), the mode, the focused
/// node (by its frames below the root, so that it survives a new answer) and the hovered one.
#[derive(Clone, Copy)]
pub(crate) struct Flames {
    vm: RwSignal<Option<((DocId, u32), FlameVm)>>,
    lifetime: RwSignal<bool>,
    focus: RwSignal<Vec<String>>,
    hover: RwSignal<Option<u32>>,
    placed: StoredValue<Vec<Placed>>,
    place: Memo<Option<(DocId, u32)>>,
}

impl Flames {
    /// Asks the worker again whenever the view is shown and the file, device, chosen step,
    /// mode (and in the lifetime mode the window), frame filter or search change.
    pub(crate) fn new(docs: Docs, shown: Shown, messages: Messages, redraw: Redraw) -> Flames {
        let (chosen, search, selection) =
            (expect_context::<Chosen>(), expect_context::<Search>(), expect_context::<Selection>());
        let place = Memo::new(move |_| docs.tab().map(|t| (t.info.doc, t.device)));
        let f = Flames {
            vm: RwSignal::new(None),
            lifetime: RwSignal::new(false),
            focus: RwSignal::new(Vec::new()),
            hover: RwSignal::new(None),
            placed: StoredValue::new(Vec::new()),
            place,
        };
        let window = Memo::new(move |_| docs.tab().map(|t| (t.start.to_bits(), t.end.to_bits())));
        let seq = StoredValue::new(0u32);
        Effect::new(move |_| {
            if !shown.is(Mode::Flame) {
                return;
            }
            let Some((doc, device)) = place.get() else { return };
            let step = chosen.get(docs);
            let window =
                if f.lifetime.get() { window.get().map(|(a, b)| (f64::from_bits(a), f64::from_bits(b))) } else { None };
            let (all_frames, query) = (selection.all_frames.get(), search.query.get());
            seq.update_value(|x| *x += 1);
            let my = seq.get_value();
            spawn_local(async move {
                match worker().ask(Request::Flame { doc, device, step, window, all_frames, query }).await {
                    Response::Flame(v) if seq.get_value() == my => {
                        f.hover.set(None);
                        f.vm.set(Some(((doc, device), *v)));
                    }
                    Response::Error(e) => messages.error(format!("flame graph: {e}")),
                    _ => {}
                }
            });
        });
        Effect::new(move |_| {
            redraw.track();
            let (focus, hover) = (f.focus.get(), f.hover.get());
            f.with(|vm| {
                let (Some(vm), Some(canvas)) = (vm, canvas_by_id("flame")) else { return };
                let node = focus_of(vm, &focus);
                let width = f64::from(canvas.client_width());
                let placed = draw::flame_layout(vm, node, width);
                let height = f64::from(draw::flame_rows(&placed)) * draw::FLAME_ROW;
                web_sys::HtmlElement::style(&canvas).set_property("height", &format!("{height}px")).ok();
                draw::flame(&canvas, vm, &placed, hover, &root_label(vm, node), &draw::Theme::read());
                // What the boxes drawn stand for, for those who cannot see the canvas (and the tests).
                let names: std::collections::BTreeSet<&str> = placed
                    .iter()
                    .filter_map(|p| vm.nodes.get(p.node as usize))
                    .skip(1)
                    .map(|n| n.name.as_str())
                    .collect();
                canvas.set_attribute("data-names", &names.into_iter().collect::<Vec<_>>().join("\n")).ok();
                f.placed.set_value(placed);
            });
        });
        f
    }

    /// The answer for the place shown, if any (tracked).
    fn with<T>(self, g: impl FnOnce(Option<&FlameVm>) -> T) -> T {
        let place = self.place.get();
        self.vm.with(|v| g(v.as_ref().filter(|v| Some(v.0) == place).map(|v| &v.1)))
    }

    /// The node under (x, y) of the canvas.
    fn at(self, x: f64, y: f64) -> Option<u32> {
        self.placed.with_value(|placed| {
            placed.iter().find(|p| x >= p.x && x < p.x + p.w && y >= p.y && y < p.y + draw::FLAME_ROW).map(|p| p.node)
        })
    }
}

/// A node's key in a focus path: its frame line.
fn key(vm: &FlameVm, k: u32) -> String {
    vm.nodes.get(k as usize).map_or(String::new(), |n| format!("{}:{}:{}", n.file, n.line, n.name))
}

/// The node a focus path leads to (as far as this answer has it).
fn focus_of(vm: &FlameVm, path: &[String]) -> u32 {
    let mut at = 0u32;
    for want in path {
        let depth = vm.nodes.get(at as usize).map_or(0, |n| n.depth);
        let below = vm.nodes.iter().enumerate().skip(at as usize + 1).take_while(|(_, n)| n.depth > depth);
        match below.filter(|(_, n)| n.parent == Some(at)).find(|&(k, _)| key(vm, k as u32) == *want) {
            Some((k, _)) => at = k as u32,
            None => break,
        }
    }
    at
}

/// The nodes from the root's child down to `k`.
fn path_of(vm: &FlameVm, mut k: u32) -> Vec<u32> {
    let mut path = Vec::new();
    while let Some(p) = vm.nodes.get(k as usize).and_then(|n| n.parent) {
        path.push(k);
        k = p;
    }
    path.reverse();
    path
}

/// Weights in words: bytes, or byte-steps over a window.
fn weight_text(vm: &FlameVm, w: u64) -> String {
    match vm.window {
        Some(_) => format!("{}·steps", format_size(i128::from(w))),
        None => format_size(i128::from(w)),
    }
}

/// What the whole graph is: bytes after which step, or bytes × steps over which window.
fn total_text(vm: &FlameVm) -> String {
    match (vm.window, vm.step) {
        (Some((a, b)), _) => format!(
            "bytes × lifetime over steps {a}..{b}: {} (on average {} alive)",
            weight_text(vm, vm.total),
            format_size(i128::from(vm.total / u64::from((b - a).max(1))))
        ),
        (None, Some(s)) => format!(
            "{} alive after step {s}{}",
            bytes_text(vm.total),
            if vm.peak_step == Some(s) { " (the peak)" } else { "" }
        ),
        (None, None) => format!("{} alive before the first event (the peak)", bytes_text(vm.total)),
    }
}

fn root_label(vm: &FlameVm, node: u32) -> String {
    match vm.nodes.get(node as usize) {
        Some(n) if node == 0 => format!("all: {}", weight_text(vm, n.weight)),
        Some(n) => format!("{}: {}", n.name, weight_text(vm, n.weight)),
        None => String::new(),
    }
}

#[component]
pub(crate) fn FlameView() -> impl IntoView {
    let (f, docs, chosen, sel) = (
        expect_context::<Flames>(),
        expect_context::<Docs>(),
        expect_context::<Chosen>(),
        expect_context::<Selection>(),
    );
    let finder = Finder::new();
    let on_move = move |e: web_sys::MouseEvent| {
        let k = f.at(f64::from(e.offset_x()), f64::from(e.offset_y()));
        if f.hover.get_untracked() != k {
            f.hover.set(k);
        }
    };
    let on_click = move |e: web_sys::MouseEvent| {
        let Some(k) = f.at(f64::from(e.offset_x()), f64::from(e.offset_y())) else { return };
        let path = f.with(|vm| {
            let vm = vm?;
            let focus = focus_of(vm, &f.focus.get_untracked());
            // The focused node itself (the top row) goes up one level.
            let mut p = path_of(vm, k);
            if k == focus {
                p.pop();
            }
            Some(p.into_iter().map(|n| key(vm, n)).collect::<Vec<_>>())
        });
        if let Some(p) = path {
            f.focus.set(p);
        }
    };
    let on_search = move |e: web_sys::KeyboardEvent| {
        if e.key() == "Enter" {
            finder.find(Query::Substring(event_target_value(&e)), false);
        }
    };
    view! {
        <div id="flame-view">
            <div class="toolbar">
                <span id="flame-total" data-bytes=move || f.with(|v| v.map(|v| v.total.to_string()))
                    data-step=move || f.with(|v| v.and_then(|v| v.step).map(|s| s.to_string()))>
                    {move || f.with(|v| v.map(total_text))}
                </span>
                <button id="flame-peak" on:click=move |_| chosen.clear()
                    disabled=move || chosen.get(docs).is_none()>"Peak"</button>
                <label><input id="flame-lifetime" type="checkbox" prop:checked=move || f.lifetime.get()
                    on:change=move |e| f.lifetime.set(event_target_checked(&e))/>" bytes × lifetime over the window"</label>
                <label><input id="flame-all-frames" type="checkbox" prop:checked=move || sel.all_frames.get()
                    on:change=move |e| sel.all_frames.set(event_target_checked(&e))/>" all frames"</label>
                <span class="spacer"></span>
                <input id="flame-search" type="search" placeholder="Highlight frames" on:keydown=on_search/>
            </div>
            <Crumbs/>
            <div id="flame-hover" class="hint">{move || hover_text(f).unwrap_or_else(|| {
                "Click a frame to zoom into it; click a step on the category chart or the timeline to see it here.".into()
            })}</div>
            <div class="flame-panels">
                <div class="flame-plot">
                    <canvas id="flame" data-hits=move || f.with(|v| v.map(|v| v.hits.to_string()))
                        data-focus=move || f.with(|v| v.map(|v| root_label(v, focus_of(v, &f.focus.get()))))
                        on:mousemove=on_move on:mouseleave=move |_| f.hover.set(None) on:click=on_click></canvas>
                </div>
                <Lines/>
            </div>
        </div>
    }
}

/// The hovered node: its frame, weight, share of everything and of the focused node.
fn hover_text(f: Flames) -> Option<String> {
    let k = f.hover.get()?;
    f.with(|vm| {
        let vm = vm?;
        let n = vm.nodes.get(k as usize)?;
        let focus = vm.nodes.get(focus_of(vm, &f.focus.get()) as usize)?;
        let share = |of: u64| n.weight as f64 / of.max(1) as f64 * 100.0;
        let place = if n.file.is_empty() { String::new() } else { format!(" — {}:{}", n.file, n.line) };
        Some(format!(
            "{}{place}: {} ({:.1}% of all, {:.1}% of the zoomed frame), {} allocations",
            n.name,
            weight_text(vm, n.weight),
            share(vm.total),
            share(focus.weight),
            n.count
        ))
    })
}

/// The focused node's ancestors, each a button back to it.
#[component]
fn Crumbs() -> impl IntoView {
    let f = expect_context::<Flames>();
    let crumbs = move || {
        f.with(|vm| {
            let Some(vm) = vm else { return Vec::new() };
            let focus = focus_of(vm, &f.focus.get());
            let mut keys: Vec<String> = Vec::new();
            let mut out = vec![("all".to_string(), Vec::new())];
            for k in path_of(vm, focus) {
                keys.push(key(vm, k));
                out.push((vm.nodes[k as usize].name.clone(), keys.clone()));
            }
            out
        })
    };
    view! {
        <div id="flame-crumbs">
            {move || crumbs().into_iter().map(|(name, path)| view! {
                <button class="crumb" on:click=move |_| f.focus.set(path.clone())>{name}</button>
            }).collect_view()}
        </div>
    }
}

/// The lines of the user's code holding the most, each a link to its allocations on the
/// timeline.
#[component]
fn Lines() -> impl IntoView {
    let (f, shown, redraw) = (expect_context::<Flames>(), expect_context::<Shown>(), expect_context::<Redraw>());
    let finder = Finder::new();
    let rows = move || f.with(|v| v.map(|v| (v.lines.clone(), v.n_lines, v.window.is_some())));
    view! {
        <section id="flame-lines">
            <h2>"Lines of your code"</h2>
            <p class="hint">"The first frame outside PyTorch and libraries; click one to see its allocations on the timeline."</p>
            {move || rows().map(|(lines, n, window)| view! {
                <table class="list">
                    <tr><th></th><th>"line"</th><th>{if window { "bytes × steps" } else { "bytes" }}</th><th>"allocations"</th></tr>
                    {lines.into_iter().map(|l| {
                        let (site, text) = (l.site.clone(), l.site.clone());
                        view! {
                            <tr class="flame-line" data-site=l.site data-bytes=l.weight.to_string() data-count=l.count.to_string()
                                on:click=move |_| {
                                    // The search box shows what the timeline highlights.
                                    set_value_by_id("search", &site);
                                    finder.find(Query::CallSite(site.clone()), false);
                                    shown.show(Mode::Timeline, redraw);
                                }>
                                <td><span class="swatch" style:background=draw::css(l.rgb)></span></td>
                                <td class="site">{text}</td>
                                <td>{format!("{}{}", format_size(i128::from(l.weight)), if window { "·steps" } else { "" })}</td>
                                <td>{l.count}</td>
                            </tr>
                        }
                    }).collect_view()}
                </table>
                {(n as usize > engine::flame::LINES).then(|| view! {
                    <p class="hint">{format!("the first {} of {n}", engine::flame::LINES)}</p>
                })}
            })}
        </section>
    }
}
