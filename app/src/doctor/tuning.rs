//! The doctor's allocator what-ifs (`Report::allocator_what_if`): each allocator setting the
//! core ran through its simulation of PyTorch's caching allocator on the recorded trace, with
//! its figures and sentence, and a chart of reserved bytes over the trace, as recorded and as
//! simulated under the setting picked (a click on its row). The figures are the report's: the
//! page only lays them out.

use leptos::prelude::*;
use snapshot::doctor::Tuning;
use snapshot::stats::format_size;

use super::Doctor;
use crate::draw;
use crate::state::{Docs, Redraw};
use crate::text::{bytes_text, delta_text};

/// The settings tried, a row each, and the chart of the one picked; nothing when the report
/// tried none (no fragmentation). `oom_entries`: the recorded errors' trace entries.
#[component]
pub(super) fn AllocatorWhatIf(tunings: Vec<Tuning>, device: u32, oom_entries: Vec<u32>) -> impl IntoView {
    let first = tunings.first().cloned()?;
    let d = expect_context::<Doctor>();
    let last = tunings.len() - 1;
    let picked = Signal::derive(move || d.tuning.get().min(last));
    let rows = tunings.iter().cloned().enumerate().map(|(k, t)| view! { <Row k=k t=t picked=picked/> }).collect_view();
    Some(view! {
        <section id="allocator-what-if">
            <h2>"Allocator settings, simulated on this trace"</h2>
            <Basis t=first/>
            <table class="list" id="tunings">
                <thead>
                    <tr>
                        <th></th><th>"setting"</th><th>"peak reserved (simulated)"</th><th>"vs. the file's settings"</th>
                        <th>"recorded OOMs avoided"</th><th>"requests it could not hold"</th>
                    </tr>
                </thead>
                {rows}
            </table>
            <Chart tunings=tunings picked=picked device=device oom_entries=oom_entries/>
        </section>
    })
}

/// What every setting is measured against: the device simulated, the file's own settings
/// under the same simulation, the recording itself.
#[component]
fn Basis(t: Tuning) -> impl IntoView {
    let size = |b: u64| format_size(i128::from(b));
    let device =
        t.capacity_bytes.map_or("with no limit on the device's memory (the file does not say it)".to_string(), |c| {
            format!("on a device of {}", size(c))
        });
    let failed = match t.baseline_ooms {
        0 => String::new(),
        1 => " and cannot hold 1 request".to_string(),
        n => format!(" and cannot hold {n} requests"),
    };
    view! {
        <p class="hint" id="tuning-basis" data-capacity=t.capacity_bytes.map_or("null".to_string(), |c| c.to_string())>
            {format!(
                "Not a run of your program: the recorded requests replayed through a simulation of PyTorch's caching allocator \
                 under each setting, {device}. Under the file's own settings the same simulation peaks at {} reserved{failed}; \
                 the recording reserved {} at its peak. Click a setting to draw it.",
                size(t.baseline_peak_reserved_bytes),
                size(t.recorded_peak_reserved_bytes),
            )}
        </p>
    }
}

/// One setting: its figures on a row, its sentence under them; a click picks it for the chart.
#[component]
fn Row(k: usize, t: Tuning, picked: Signal<usize>) -> impl IntoView {
    let d = expect_context::<Doctor>();
    // Green only when the setting avoids every recorded error and fails no other request (an
    // error avoided because an earlier request failed instead is no cure).
    let avoided = match (t.recorded_ooms_avoided, t.recorded_ooms) {
        (_, 0) => "",
        (a, n) if a == n && t.ooms == 0 => "ok",
        (0, _) => "bad",
        _ => "some",
    };
    let pick = move |_| d.tuning.set(k);
    view! {
        <tbody class="tuning" class:active=move || picked.get() == k data-conf=t.conf.clone()
            data-peak=t.peak_reserved_bytes.to_string() data-baseline-peak=t.baseline_peak_reserved_bytes.to_string()
            data-recorded-ooms=t.recorded_ooms.to_string() data-avoided=t.recorded_ooms_avoided.to_string()
            data-ooms=t.ooms.to_string() on:click=pick>
            <tr>
                <td><input type="radio" name="tuning-pick" class="tuning-pick" aria-label=t.conf.clone()
                    prop:checked=move || picked.get() == k on:change=move |_| d.tuning.set(k)/></td>
                <td class="conf"><code>{t.conf.clone()}</code></td>
                <td class="num" title=bytes_text(t.peak_reserved_bytes)>{format_size(i128::from(t.peak_reserved_bytes))}</td>
                <td class="num">{format!("{} (was {})", delta_text(t.baseline_peak_reserved_bytes, t.peak_reserved_bytes),
                    format_size(i128::from(t.baseline_peak_reserved_bytes)))}</td>
                <td class=format!("num avoided {avoided}")>{format!("{} of {}", t.recorded_ooms_avoided, t.recorded_ooms)}</td>
                <td class="num">{format!("{} (file's settings: {})", t.ooms, t.baseline_ooms)}</td>
            </tr>
            <tr class="tuning-sentence">
                <td></td>
                <td colspan="5">{sentence(&t.sentence)}</td>
            </tr>
        </tbody>
    }
}

/// The report's sentence as a sentence: a capital first, a full stop last.
fn sentence(s: &str) -> String {
    let mut chars = s.chars();
    let Some(first) = chars.next() else { return String::new() };
    let stop = if s.ends_with('.') { "" } else { "." };
    format!("{}{}{stop}", first.to_uppercase(), chars.as_str())
}

/// The legend and the chart of the setting `picked`: recorded against simulated reserved
/// bytes; under it, the figures of the run under the pointer.
#[component]
fn Chart(tunings: Vec<Tuning>, picked: Signal<usize>, device: u32, oom_entries: Vec<u32>) -> impl IntoView {
    let (docs, redraw) = (expect_context::<Docs>(), expect_context::<Redraw>());
    // The runs split the device's trace: its length puts the errors and the axis in events.
    let entries =
        docs.tab_untracked().and_then(|t| t.info.devices.iter().find(|x| x.device == device).map(|x| x.entries));
    let capacity = tunings.first().and_then(|t| t.capacity_bytes);
    let runs = tunings.first().map_or(0, |t| t.recorded_curve.len());
    let has_ooms = !oom_entries.is_empty();
    let tunings = StoredValue::new(tunings);
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    let hover = RwSignal::new(None::<usize>);
    let failed = move || tunings.with_value(|ts| ts.get(picked.get()).is_some_and(|t| t.first_oom_entry.is_some()));
    let conf = move || tunings.with_value(|ts| ts.get(picked.get()).map(|t| t.conf.clone()).unwrap_or_default());
    Effect::new(move |_| {
        redraw.track();
        let k = picked.get();
        let Some(c) = canvas.get() else { return };
        tunings.with_value(|ts| {
            let Some(t) = ts.get(k) else { return };
            let chart = draw::Tuning {
                recorded: &t.recorded_curve,
                simulated: &t.curve,
                capacity_bytes: t.capacity_bytes,
                entries,
                oom_entries: &oom_entries,
                first_failed_entry: t.first_oom_entry,
            };
            draw::tuning(&c, &chart, &draw::Theme::read());
        });
    });
    let on_move = move |e: web_sys::MouseEvent| {
        let run = canvas.get_untracked().and_then(|c| draw::Area::of(&c).column_at(f64::from(e.offset_x()), runs));
        hover.set(run);
    };
    // The run under the pointer, its events and both curves there; else what the chart is.
    let caption = move || {
        let Some(k) = hover.get() else {
            return format!("Reserved bytes by trace event: the highest in each of {runs} runs of events. Point at the chart to read it.");
        };
        tunings
            .with_value(|ts| {
                let t = ts.get(picked.get())?;
                let (rec, sim) = (*t.recorded_curve.get(k)?, *t.curve.get(k)?);
                let span = entries.map_or(String::new(), |n| {
                    let at = |k: usize| (u128::from(n) * k as u128 / runs.max(1) as u128) as u64;
                    format!("events {} to {}: ", at(k), at(k + 1).saturating_sub(1).max(at(k)))
                });
                Some(format!("{span}recorded {}, simulated {} (highest in the run)", bytes_text(rec), bytes_text(sim)))
            })
            .unwrap_or_default()
    };
    view! {
        <p id="tuning-legend" class="chart-legend">
            <span class="key"><span class="swatch line" style:background=draw::RECORDED></span>"recorded (what the recording reserved)"</span>
            <span class="key" id="tuning-legend-simulated">
                <span class="swatch line thin" style:background=draw::SIMULATED></span>"simulated with "<code>{conf}</code>
            </span>
            {capacity.map(|c| view! {
                <span class="key"><span class="swatch dashed"></span>{format!("device capacity, {}", format_size(i128::from(c)))}</span>
            })}
            {has_ooms.then(|| view! { <span class="key"><span class="swatch oom-line"></span>"recorded out-of-memory error"</span> })}
            {move || failed().then(|| view! {
                <span class="key" id="tuning-legend-failed"><span class="swatch failed-line" style:border-color=draw::SIMULATED></span>
                    "first request the simulation could not hold"</span>
            })}
        </p>
        <div class="plot">
            <canvas id="tuning-chart" node_ref=canvas data-conf=conf on:mousemove=on_move on:mouseleave=move |_| hover.set(None)></canvas>
        </div>
        <p class="hint" id="tuning-caption">{caption}</p>
    }
}
