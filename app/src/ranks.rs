//! The Ranks view: a run's ranks, a row each (its totals over time on a scale shared by all
//! rows, peak, reserved, categories at its peak), sorted by rank or by peak, the outliers named
//! with their excess and top call site; a click opens a rank as a tab, two picked open in
//! Compare. Only the rows in sight are in the page (a run may have thousands).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use engine::protocol::DocId;

use engine::ranks::{order, Overview, SortBy};
use engine::CATEGORY_COLOURS;
use leptos::prelude::*;
use snapshot::categories::Category;
use snapshot::stats::format_size;

use crate::compare::Compare;
use crate::draw;
use crate::modes::{Mode, Shown};
use crate::run::Run;
use crate::state::{Nav, Redraw};

/// A row's height, px (the list's rows are placed by it).
const ROW_PX: f64 = 30.0;
/// The list's height, px.
const LIST_PX: f64 = 480.0;
/// Rows drawn beyond those in sight, above and below.
const SPARE_ROWS: usize = 8;
/// The small chart's size in its own units (it is stretched to its box).
const CURVE_W: f64 = 240.0;
const CURVE_H: f64 = 24.0;

fn size(b: u64) -> String {
    format_size(i128::from(b))
}

fn rank_text(rank: Option<u32>) -> String {
    rank.map_or_else(|| "?".into(), |r| r.to_string())
}

#[component]
pub(crate) fn RanksView() -> impl IntoView {
    let run = expect_context::<Run>();
    let (sort, picked) = (run.sort, run.picked);
    view! {
        <div id="ranks-view">
            {move || (run.total.get() == 0 && run.skipped.with(Vec::is_empty)).then(|| view! {
                <p class="hint" id="ranks-hint">"Open a run: a folder of snapshots or profiles (Open run…, or drop the folder here), or three files or more at once. One row per rank."</p>
            })}
            <Progress/>
            <Summary/>
            <Notes/>
            <div class="toolbar">
                <label>"Sort by "
                    <select id="ranks-sort" on:change=move |e| sort.set(if event_target_value(&e) == "peak" { SortBy::Peak } else { SortBy::Rank })>
                        <option value="rank" selected=move || sort.get() == SortBy::Rank>"rank"</option>
                        <option value="peak" selected=move || sort.get() == SortBy::Peak>"peak (highest first)"</option>
                    </select>
                </label>
                <CompareButton picked=picked/>
            </div>
            {move || run.overview.get().map(|o| view! { <Rows o=o sort=sort picked=picked/> })}
        </div>
    }
}

/// `profiled n of N` while reading, then the time the overview took.
#[component]
fn Progress() -> impl IntoView {
    let run = expect_context::<Run>();
    view! {
        <p id="ranks-progress" data-done=move || run.done.get().to_string() data-total=move || run.total.get().to_string()
            data-ms=move || run.elapsed.get().map(|ms| format!("{ms:.0}")).unwrap_or_default()>
            {move || {
                let (done, total) = (run.done.get(), run.total.get());
                match run.elapsed.get() {
                    Some(ms) => format!("{total} files profiled in {:.2} s", ms / 1000.0),
                    None if total > 0 => format!("profiled {done} of {total}…"),
                    None => String::new(),
                }
            }}
            {move || (run.total.get() > 0 && run.elapsed.get().is_none()).then(|| view! {
                <progress max=move || run.total.get().to_string() value=move || run.done.get().to_string()></progress>
            })}
        </p>
    }
}

/// The median, the threshold and the outliers, as `memscape ranks` prints them.
#[component]
fn Summary() -> impl IntoView {
    let run = expect_context::<Run>();
    move || {
        run.overview.get().map(|o| {
            let r = &o.ranks;
            let head = r.headline();
            let base = r.median_rank.as_ref().map(|m| format!("rank {} ({})", rank_text(m.rank), m.file)).unwrap_or_default();
            view! {
                <p id="ranks-summary">{head}</p>
                <ul id="ranks-outliers">
                    {r.outliers.iter().map(|out| {
                        let site = out.top_site.as_ref().map(|s| format!("; top site {s} holds {} more than in {base}", size(out.top_site_bytes))).unwrap_or_default();
                        view! {
                            <li class="outlier" data-rank=rank_text(out.rank) data-file=out.file.clone() data-excess=out.excess_bytes.to_string()
                                data-site=out.top_site.clone().unwrap_or_default() data-site-bytes=out.top_site_bytes.to_string()>
                                <b>{format!("rank {}", rank_text(out.rank))}</b>
                                {format!(" ({}): peak {}, {} above the median{site}", out.file, size(out.peak_bytes), size(out.excess_bytes))}
                            </li>
                        }
                    }).collect_view()}
                </ul>
            }
        })
    }
}

/// Files that failed (name and why) and files skipped.
#[component]
fn Notes() -> impl IntoView {
    let run = expect_context::<Run>();
    view! {
        <ul id="ranks-failed">
            {move || run.failed.get().into_iter().map(|(file, why)| view! {
                <li class="failed" data-file=file.clone()><b>{file.clone()}</b>" could not be read: "{why}</li>
            }).collect_view()}
        </ul>
        {move || {
            let skipped = run.skipped.get();
            (!skipped.is_empty()).then(|| {
                let shown: Vec<String> = skipped.iter().take(10).cloned().collect();
                let more = if skipped.len() > 10 { format!(" and {} more", skipped.len() - 10) } else { String::new() };
                view! {
                    <p id="ranks-skipped" data-count=skipped.len().to_string()>
                        {format!("Skipped {} file(s) that are neither snapshots nor profiles by name: {}{more}", skipped.len(), shown.join(", "))}
                    </p>
                }
            })
        }}
    }
}

/// Opens the two picked ranks and compares them.
#[component]
fn CompareButton(picked: RwSignal<Vec<usize>>) -> impl IntoView {
    let (run, compare) = (expect_context::<Run>(), expect_context::<Compare>());
    let (shown, redraw) = (expect_context::<Shown>(), expect_context::<Redraw>());
    let go = move |_| {
        let p = picked.get_untracked();
        let (Some(&a), Some(&b)) = (p.first(), p.get(1)) else { return };
        // Each opens (or is found open) in its own time; the second to arrive compares.
        let docs: Rc<Cell<(Option<DocId>, Option<DocId>)>> = Rc::new(Cell::new((None, None)));
        let both = move |docs: &Cell<(Option<DocId>, Option<DocId>)>| {
            if let (Some(a), Some(b)) = docs.get() {
                compare.pick(a, b);
                shown.show(Mode::Compare, redraw);
            }
        };
        let da = docs.clone();
        run.open_rank(a, move |d| {
            da.set((Some(d), da.get().1));
            both(&da);
        });
        run.open_rank(b, move |d| {
            docs.set((docs.get().0, Some(d)));
            both(&docs);
        });
    };
    view! {
        <button id="ranks-compare" disabled=move || picked.with(|p| p.len() < 2) on:click=go>
            {move || format!("Compare the two picked ({} of 2)", picked.with(Vec::len))}
        </button>
    }
}

/// The rows, only those in sight (and a few more) in the page.
#[component]
fn Rows(o: Arc<Overview>, sort: RwSignal<SortBy>, picked: RwSignal<Vec<usize>>) -> impl IntoView {
    let scroll = RwSignal::new(0.0f64);
    let n = o.ranks.ranks.len();
    let o2 = o.clone();
    let rows = Memo::new(move |_| order(&o2.ranks, sort.get()));
    let visible = move || {
        let first = ((scroll.get() / ROW_PX) as usize).saturating_sub(SPARE_ROWS);
        let last = (first + (LIST_PX / ROW_PX) as usize + 2 * SPARE_ROWS).min(n);
        rows.with(|r| (first..last).filter_map(|pos| r.get(pos).map(|&row| (pos, row))).collect::<Vec<_>>())
    };
    view! {
        <div class="rank-head">
            <span class="rank-pick"></span><span class="rank-no">"rank"</span><span class="rank-curve">"allocated over time (shared scale)"</span>
            <span class="rank-peak">"peak"</span><span class="rank-reserved">"reserved"</span><span class="rank-cats">"at the peak, by category"</span>
            <span class="rank-file">"file (click to open)"</span>
        </div>
        <div id="ranks-rows" data-rows=n.to_string() style:height=format!("{}px", LIST_PX.min(n as f64 * ROW_PX + 2.0))
            on:scroll=move |e| scroll.set(event_target::<web_sys::HtmlElement>(&e).scroll_top() as f64)>
            <div class="rank-space" style:height=format!("{}px", n as f64 * ROW_PX)>
                <For each=visible key=|&(pos, row)| (pos, row) let:at>
                    <RankRow o=o.clone() pos=at.0 row=at.1 picked=picked/>
                </For>
            </div>
        </div>
    }
}

#[component]
fn RankRow(o: Arc<Overview>, pos: usize, row: usize, picked: RwSignal<Vec<usize>>) -> impl IntoView {
    let (run, nav) = (expect_context::<Run>(), expect_context::<Nav>());
    let (shown, redraw) = (expect_context::<Shown>(), expect_context::<Redraw>());
    let r = &o.ranks.ranks[row];
    let k = o.index[row];
    let scale = o.max_bytes.max(1) as f64;
    let outlier = o.outlier[row].and_then(|i| o.ranks.outliers.get(i));
    let curve = run.with_profile(k, |p| curve_path(&p.curve, scale)).unwrap_or_default();
    let devices = run.with_profile(k, |p| p.devices).unwrap_or(1);
    let rank = if devices > 1 { format!("{} cuda:{}", rank_text(r.rank), r.device) } else { rank_text(r.rank) };
    let cats = Category::ALL
        .iter()
        .filter(|c| r.at_peak[c.index()] > 0)
        .map(|&c| {
            let b = r.at_peak[c.index()];
            let width = format!("{:.2}%", b as f64 / scale * 100.0);
            view! { <span class="cat" title=format!("{}: {}", c.label(), size(b)) style:width=width style:background=draw::css(CATEGORY_COLOURS[c.index()])></span> }
        })
        .collect_view();
    let note = outlier.map(|out| {
        format!(
            "+{} above the median{}",
            size(out.excess_bytes),
            out.top_site.as_ref().map(|s| format!(" · {s}")).unwrap_or_default()
        )
    });
    // The Ranks view stays (with the load's progress above it) until the tab is open.
    let open = move |_| {
        run.open_rank(k, move |doc| {
            nav.select(doc);
            shown.show(Mode::Timeline, redraw);
        })
    };
    let file = r.source.as_ref().map_or_else(|| r.file.clone(), |s| format!("{} (profile of {s})", r.file));
    view! {
        <div class="rank-row" class:outlier=outlier.is_some() style:top=format!("{}px", pos as f64 * ROW_PX)
            data-rank=rank_text(r.rank) data-file=r.file.clone() data-peak=r.peak_bytes.to_string() data-pos=pos.to_string()>
            <span class="rank-pick"><input type="checkbox" title="Pick for Compare" prop:checked=move || picked.with(|p| p.contains(&k))
                on:change=move |_| picked.update(|p| {
                    if let Some(i) = p.iter().position(|&x| x == k) {
                        p.remove(i);
                    } else {
                        p.push(k);
                        if p.len() > 2 {
                            p.remove(0);
                        }
                    }
                })/></span>
            <span class="rank-no">{rank}</span>
            <svg class="rank-curve" viewBox=format!("0 0 {CURVE_W} {CURVE_H}") preserveAspectRatio="none"><path d=curve></path></svg>
            <span class="rank-peak">{size(r.peak_bytes)}</span>
            <span class="rank-reserved">{size(r.reserved_bytes)}</span>
            <span class="rank-cats">{cats}</span>
            <button class="rank-file" title="Open this rank as a tab" on:click=open>{file}</button>
            {note.map(|t| view! { <span class="rank-note">{t}</span> })}
        </div>
    }
}

/// The filled area under a curve, on the shared scale.
fn curve_path(curve: &[u64], scale: f64) -> String {
    if curve.is_empty() {
        return String::new();
    }
    let dx = CURVE_W / (curve.len().max(2) - 1) as f64;
    let mut d = format!("M0,{CURVE_H}");
    for (i, &v) in curve.iter().enumerate() {
        d.push_str(&format!(" L{:.1},{:.1}", i as f64 * dx, CURVE_H - v as f64 / scale * CURVE_H));
    }
    d.push_str(&format!(" L{:.1},{CURVE_H} Z", (curve.len() - 1) as f64 * dx));
    d
}
