//! The header (open files, one tab per file, help) and what opening says: progress bars
//! with *Cancel*, the error of a file that failed, a notice about a link's saved view, the
//! warning that a file was predicted (`memscape predict`), not recorded.

use leptos::prelude::*;
use snapshot::stats::format_size;

use crate::client::worker;
use crate::dom::{files_with_paths, now};
use crate::keys::Help;
use crate::open::Opener;
use crate::run::Run;
use crate::state::{Docs, Messages, Nav};

#[component]
pub(crate) fn Header() -> impl IntoView {
    let (run, help) = (expect_context::<Run>(), expect_context::<Help>());
    view! {
        <header>
            <h1>"memscape"</h1>
            <label class="button" title="Open snapshots (.pickle, .pkl, .gz, .zst, .json, .html): one or two open as tabs, three or more as a run (Ranks)">
                "Open files…"
                <input id="file-input" type="file" multiple=true on:change=move |e| {
                    let input: web_sys::HtmlInputElement = event_target(&e);
                    run.open(files_with_paths(input.files()), false);
                    input.set_value("");
                }/>
            </label>
            // Picking the folder takes the user a while: the pool's workers start meanwhile.
            <label class="button" title="Open a folder of a run's snapshots and profiles, one file per rank (Ranks)"
                on:click=|_| crate::client::worker().warm_rank_workers()>
                "Open run…"
                <input id="run-input" type="file" prop:webkitdirectory=true multiple=true on:change=move |e| {
                    let input: web_sys::HtmlInputElement = event_target(&e);
                    run.open(files_with_paths(input.files()), true);
                    input.set_value("");
                }/>
            </label>
            // The bar takes the header's free width (the note and help stay at its right end).
            <TabBar/>
            <span class="privacy">"Files never leave this page."</span>
            <button id="help-button" title="Keyboard shortcuts" on:click=move |_| help.toggle()>"?"</button>
        </header>
    }
}

#[component]
fn TabBar() -> impl IntoView {
    let (docs, nav) = (expect_context::<Docs>(), expect_context::<Nav>());
    view! {
        <nav id="tabs">
            <For each=move || docs.tabs() key=|t| t.info.doc let:t>
                {
                    let doc = t.info.doc;
                    let name = t.info.name.clone();
                    view! {
                        <span class="tab" class:active=move || docs.active() == Some(doc)>
                            <button class="tab-name" on:click=move |_| nav.select(doc)>{name}</button>
                            <button class="tab-close" title="Close" on:click=move |_| nav.close(doc)>"×"</button>
                        </span>
                    }
                }
            </For>
        </nav>
    }
}

/// A progress bar per file being read, with its figures and the time left, once the load has
/// gone on a moment. A row lives as long as its load (keyed by the load, not its progress),
/// so *Cancel* stays put while the figures change.
#[component]
pub(crate) fn Loads() -> impl IntoView {
    let opener = expect_context::<Opener>();
    let shown = move || opener.loads.get().into_iter().filter(|l| l.shown).collect::<Vec<_>>();
    view! {
        <div id="loads">
            <For each=shown key=|l| l.id let:l>
                {
                    let id = l.id;
                    let now_of = move || opener.loads.with(|v| v.iter().find(|x| x.id == id).map(|x| (x.bytes, x.total, x.started)));
                    let pct = move || now_of().map_or(0.0, |(b, t, _)| if t > 0 { b as f64 / t as f64 * 100.0 } else { 0.0 });
                    let figures = move || {
                        let (bytes, total, started) = now_of().unwrap_or_default();
                        let elapsed = (now() - started) / 1000.0;
                        let left = if bytes > 0 && bytes < total {
                            format!("{:.1} s left", elapsed / bytes as f64 * (total - bytes) as f64)
                        } else {
                            String::new()
                        };
                        format!("{} / {} ({:.0}%) {left}", format_size(i128::from(bytes)), format_size(i128::from(total)), pct())
                    };
                    view! {
                        <div class="load">
                            <span class="load-name">{l.name.clone()}</span>
                            <progress max="100" value=move || format!("{:.1}", pct())></progress>
                            <span class="load-figures">{figures}</span>
                            <button class="cancel" on:click=move |_| worker().cancel(id)>"Cancel"</button>
                        </div>
                    }
                }
            </For>
        </div>
    }
}

/// The error (until dismissed) and the notice: a message of the moment, else what the file
/// shown was (a profiler file's, which belongs to its tab); and, for a file `memscape predict`
/// made, a warning of its own that it was predicted, not recorded (its tab's too).
#[component]
pub(crate) fn Banners() -> impl IntoView {
    let m = expect_context::<Messages>();
    let docs = expect_context::<Docs>();
    let notice = move || m.notice.get().or_else(|| docs.profiler_notice());
    // A memo of its own: the tabs change with every pan, the warning only with the tab shown.
    // Text nodes only: the command and the reason it stopped are the file's.
    let prediction = Memo::new(move |_| docs.prediction_notice());
    let predicted = move || {
        prediction.get().map(|p| {
            view! {
                <div id="predicted" class="predicted" data-testid="predicted-banner" role="note" title=p.title>
                    <strong>"Predicted, not recorded:"</strong>
                    " "
                    <span class="predicted-line">{p.line}</span>
                    {p.incomplete.map(|why| view! {
                        " "
                        <strong class="predicted-incomplete">"INCOMPLETE:"</strong>
                        " "
                        <span class="predicted-why">{why}</span>
                    })}
                </div>
            }
        })
    };
    view! {
        <Show when=move || m.error.with(Option::is_some)>
            <div id="error" role="alert">
                <span class="error-text">{move || m.error.get().unwrap_or_default()}</span>
                <button on:click=move |_| m.error.set(None)>"Dismiss"</button>
            </div>
        </Show>
        <Show when=move || notice().is_some()>
            <div id="notice">{move || notice().unwrap_or_default()}</div>
        </Show>
        {predicted}
    }
}
