//! The statistics of the file and the device shown: the figures of `memscape stats` (and
//! of PyTorch's `_memory_viz.py stats`), each row with its key and exact value as data.

use leptos::prelude::*;
use snapshot::stats::{format_size, DeviceSummary, Summary};

use crate::state::{Docs, Tab};
use crate::text::{bytes_text, device_name};

#[component]
pub(crate) fn StatsPanel() -> impl IntoView {
    let docs = expect_context::<Docs>();
    view! {
        <section id="stats">
            <h2>"Statistics"</h2>
            {move || docs.tab().map(|t| view! {
                <p class="file-line" data-format=t.info.format.clone()>{format!("{} · {} · {}", t.info.name, format_size(i128::from(t.info.bytes)), t.info.format)}</p>
                <table class="kv" id="stats-table">{rows(&t)}</table>
                {(!t.info.warnings.is_empty()).then(|| view! { <details><summary>{format!("{} warnings", t.info.warnings.len())}</summary><pre>{t.info.warnings.join("\n")}</pre></details> })}
            })}
        </section>
    }
}

fn text_row(key: String, label: String, value: String, text: String) -> impl IntoView {
    view! { <tr data-key=key data-value=value><th>{label}</th><td>{text}</td></tr> }
}

fn row(key: String, label: String, v: u64, bytes: bool) -> impl IntoView {
    let text = if bytes { bytes_text(v) } else { v.to_string() };
    text_row(key, label, v.to_string(), text)
}

fn rows(t: &Tab) -> Vec<AnyView> {
    let sum: &Summary = &t.info.summary;
    let mut rows = vec![
        row("segments".into(), "segments (all devices)".into(), sum.segments, false).into_any(),
        row("total_reserved".into(), "reserved".into(), sum.total_reserved, true).into_any(),
        row("total_allocated".into(), "allocated".into(), sum.total_allocated, true).into_any(),
        row("free_internal".into(), "free inside blocks".into(), sum.free_internal.max(0) as u64, true).into_any(),
        row("free_external".into(), "free between blocks".into(), sum.free_external, true).into_any(),
    ];
    if let Some(w) = &sum.window {
        rows.insert(0, text_row("window".into(), "a window of".into(), w.source.clone(), w.describe()).into_any());
    }
    if let Some(p) = &sum.profiler {
        rows.insert(0, text_row("profiler".into(), "opened from".into(), p.source.clone(), p.describe()).into_any());
    }
    if let Some(d) = t.info.device_summary(t.device) {
        device_rows(&device_name(&t.info, t.device), d, &mut rows);
    }
    // A trace without `time_us` (torch_npu's, before 2.2): said once, here.
    if t.info.devices.iter().any(|d| d.device == t.device && d.entries > 0 && !d.has_time) {
        let text = "none: the trace has no time_us, so the axis is the event index".to_string();
        rows.push(text_row("time_axis".into(), "wall-clock time".into(), "none".into(), text).into_any());
    }
    rows
}

fn device_rows(name: &str, d: &DeviceSummary, rows: &mut Vec<AnyView>) {
    // Device name and memory: only in snapshots written by `memscape capture` (NVML).
    if let Some(g) = &d.gpu {
        rows.push(text_row("gpu.name".into(), format!("{name} device"), g.name.clone(), g.name.clone()).into_any());
        rows.push(row("gpu.total_bytes".into(), format!("{name} memory"), g.total_bytes, true).into_any());
        if let Some(held) = g.process_used_bytes {
            rows.push(
                row("gpu.process_used_bytes".into(), format!("{name} held by the process (driver)"), held, true)
                    .into_any(),
            );
        }
    }
    rows.push(row("trace_entries".into(), format!("{name} events"), d.trace_entries, false).into_any());
    if let Some(o) = d.history_overflowed {
        let text = match (o, d.history_max_entries) {
            (true, Some(n)) => format!("overflowed: only the last {n} events were kept"),
            (true, None) => "overflowed: only the last events were kept".into(),
            (false, _) => "complete".into(),
        };
        rows.push(text_row("history_overflowed".into(), format!("{name} history"), o.to_string(), text).into_any());
    }
    rows.push(row("reserved_bytes".into(), format!("{name} reserved"), d.reserved_bytes, true).into_any());
    if d.outside_allocator_bytes > 0 {
        let label = format!("{name} outside PyTorch's allocator");
        rows.push(row("outside_allocator_bytes".into(), label, d.outside_allocator_bytes, true).into_any());
    }
    for (pre, label, tl) in
        [("timeline", "allocated", &d.timeline), ("segment_timeline", "reserved", &d.segment_timeline)]
    {
        let mut add = |k: &str, what: &str, v: u64, bytes: bool| {
            rows.push(row(format!("{pre}.{k}"), format!("{label}: {what}"), v, bytes).into_any());
        };
        add("elements", "elements", tl.elements, false);
        add("peak_bytes", "peak", tl.peak_bytes, true);
        add("final_bytes", "at the end", tl.final_bytes, true);
        add("initially_allocated", "alive before recording", tl.initially_allocated, false);
        add("unmatched_frees", "frees without alloc", tl.unmatched_frees, false);
        add("snapshot_only", "only in final snapshot", tl.snapshot_only, false);
    }
    pool_rows(d, rows);
}

/// Private pools (`snapshot::pools`): the peak with each pool as its envelope, and a row per
/// pool and stream.
fn pool_rows(d: &DeviceSummary, rows: &mut Vec<AnyView>) {
    if d.private_pools.is_empty() {
        return;
    }
    let incl = &d.timeline_incl_private_pools;
    rows.push(
        row(
            "timeline_incl_private_pools.peak_bytes".into(),
            "allocated incl. private pools: peak".into(),
            incl.peak_bytes,
            true,
        )
        .into_any(),
    );
    rows.push(
        row(
            "timeline_incl_private_pools.final_bytes".into(),
            "allocated incl. private pools: at the end".into(),
            incl.final_bytes,
            true,
        )
        .into_any(),
    );
    for p in &d.private_pools {
        let (a, b) = p.pool_id;
        let text = format!(
            "reserved peak {}, {} at the end; its allocations at most {}",
            format_size(i128::from(p.reserved_peak_bytes)),
            format_size(i128::from(p.final_reserved_bytes)),
            format_size(i128::from(p.live_peak_bytes))
        );
        let key = format!("private_pool.{a}.{b}.{}", p.stream);
        rows.push(
            text_row(
                key,
                format!("private pool ({a}, {b}), stream {}", p.stream),
                p.reserved_peak_bytes.to_string(),
                text,
            )
            .into_any(),
        );
    }
}
