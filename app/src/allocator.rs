//! The allocator after the selected event (before the first when none is): a summary line
//! and the map of every segment and block.

use engine::protocol::{Request, Response};
use leptos::prelude::*;
use leptos::task::spawn_local;
use snapshot::stats::format_size;

use crate::client::worker;
use crate::dom::{canvas_by_id, now, record};
use crate::draw;
use crate::state::{Allocator, Docs, Redraw};

/// Asks for the state whenever the file, device or event changes, and draws the map.
fn ask_and_draw(docs: Docs, allocator: Allocator, redraw: Redraw) {
    let event_key = Memo::new(move |_| docs.tab().map(|t| (t.info.doc, t.device, t.event)));
    // Before the first event is the whole trace undone: that waits for the background (a
    // selected event is asked for at once).
    let ready = Memo::new(move |_| event_key.get().is_some_and(|(doc, device, _)| allocator.ready(doc, device)));
    Effect::new(move |_| {
        let Some((doc, device, entry)) = event_key.get() else { return };
        if entry.is_none() && !ready.get() {
            if allocator.state.with_untracked(Option::is_some) {
                allocator.state.set(None);
            }
            return;
        }
        spawn_local(async move {
            let t0 = now();
            if let Response::State(st) = worker().ask(Request::State { doc, device, entry }).await {
                allocator.state.set(Some(st));
                record("state", now() - t0);
            }
        });
    });
    Effect::new(move |_| {
        let th = draw::Theme::read();
        redraw.track();
        allocator.state.with(|st| {
            let Some(c) = canvas_by_id("state-map") else { return };
            match st {
                Some(st) => draw::state_map(&c, st, &th),
                None => draw::clear(&c, &th),
            }
        });
    });
}

#[component]
pub(crate) fn AllocatorPanel() -> impl IntoView {
    let (docs, allocator) = (expect_context::<Docs>(), expect_context::<Allocator>());
    ask_and_draw(docs, allocator, expect_context());
    // Before the first event, the worker first undoes the whole trace (in the background).
    let waiting = move || {
        let before_first = docs.tab().is_some_and(|t| t.event.is_none());
        if before_first { "Undoing the trace to find the allocator before the first event…" } else { "" }.to_string()
    };
    view! {
        <section id="state">
            <h2>{move || match allocator.state.with(|st| st.as_ref().map(|st| st.after_entry)) {
                Some(Some(e)) => format!("Allocator after event {e}"),
                _ => "Allocator before the first event".to_string(),
            }}</h2>
            <p id="state-summary">{move || allocator.state.get().map_or_else(waiting, |st| format!(
                "{} segments · reserved {} · allocated {} · free inside blocks {} · free between blocks {} · {} pending frees · {} private pools{}",
                st.segments.len(),
                format_size(i128::from(st.reserved)),
                format_size(i128::from(st.allocated)),
                format_size(i128::from(st.internal_free)),
                format_size(i128::from(st.external_free)),
                st.pending_frees,
                st.private_pools,
                if st.orphan_blocks > 0 { format!(" · {} blocks of unknown segments", st.orphan_blocks) } else { String::new() },
            ))}</p>
            <ul id="state-pools">{move || allocator.state.with(|st| st.as_ref().map(|st| st.pools.iter().map(|p| {
                let (a, b) = p.pool;
                view! {
                    <li class="state-pool" data-pool=format!("{a}.{b}.{}", p.stream) data-reserved=p.reserved.to_string()>
                        {format!("private pool ({a}, {b}), stream {}: {} segments, {} reserved, {} allocated",
                            p.stream, p.segments, format_size(i128::from(p.reserved)), format_size(i128::from(p.allocated)))}
                    </li>
                }
            }).collect_view()))}</ul>
            <canvas id="state-map"></canvas>
            <p class="legend">"Segments in address order, end to end: coloured blocks are allocated, grey is free, red is freed but pending (used by another stream)."</p>
        </section>
    }
}
