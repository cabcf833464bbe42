//! The details of the pinned allocation, else of the one under the pointer: figures,
//! origin, why it has no stack, labels put on it, where a backward allocation's tensor was
//! made in forward, category, and its stack (PyTorch's frame filter, or every frame, with
//! compiled code's FX node and original code under its frame), copyable.

use engine::protocol::Details;
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::state::{Messages, Selection};
use crate::text::bytes_text;

#[component]
pub(crate) fn DetailsPanel() -> impl IntoView {
    let sel = expect_context::<Selection>();
    view! {
        <section id="details">
            <h2>{move || if sel.pinned.with(Option::is_some) { "Pinned allocation" } else { "Allocation under the pointer" }}</h2>
            {move || match sel.shown() {
                None => view! { <p class="hint">"Hover over the timeline; click to pin."</p> }.into_any(),
                Some(d) => {
                    let frames = if sel.all_frames.get() { d.all_frames.clone() } else { d.frames.clone() };
                    let forward = d.forward_frames.clone();
                    view! {
                        <Figures d=d/>
                        <StackTools/>
                        <pre id="stack">{if frames.is_empty() { "(no stack recorded)".to_string() } else { frames.join("\n") }}</pre>
                        {forward.map(|f| view! {
                            <h3>"Forward pass (where this tensor was created)"</h3>
                            <pre id="forward-stack">{f}</pre>
                        })}
                    }.into_any()
                }
            }}
        </section>
    }
}

/// One row per figure the allocation has.
#[component]
fn Figures(d: Details) -> impl IntoView {
    let row = |k: &'static str, v: String| view! { <tr data-key=k><th>{k}</th><td>{v}</td></tr> };
    view! {
        <table class="kv">
            {row("address", format!("0x{:x}", d.addr))}
            {row("size", bytes_text(d.size))}
            {d.requested.map(|r| row("requested", bytes_text(r)))}
            {row("stream", d.stream.map_or("?".into(), |x| x.to_string()))}
            {d.pool.map(|p| row("pool", format!("({}, {})", p.0, p.1)))}
            {d.time_us.map(|t| row("time", format!("{t} µs")))}
            {row("total after", bytes_text(d.total_after))}
            {row("lifetime", format!("steps {} to {}", d.start_step, d.end_step))}
            {row("origin", d.origin.clone())}
            {d.no_stack.clone().map(|c| row("no stack", c))}
            {d.forward_site.clone().map(|c| row("created in forward", format!("at {c}")))}
            {(!d.labels.is_empty()).then(|| row("labels", d.labels.join("; ")))}
            {d.compile_context.clone().map(|c| row("compile context", c))}
            {d.user_metadata.clone().map(|c| row("user metadata", c))}
            {d.category.clone().map(|c| row("category field", c))}
            {d.class.clone().map(|(c, why)| row("category", format!("{}: {why}", c.label())))}
            {d.class_pending.then(|| view! { <tr data-key="category-pending"><th>"category"</th><td>"being worked out for the whole file…"</td></tr> })}
        </table>
    }
}

/// *show all frames* and *Copy stack*.
#[component]
fn StackTools() -> impl IntoView {
    let (sel, messages) = (expect_context::<Selection>(), expect_context::<Messages>());
    let copy = move |_| {
        let Some(d) = sel.shown_untracked() else { return };
        let frames = if sel.all_frames.get_untracked() { d.all_frames } else { d.frames };
        let text = frames.join("\n");
        if let Some(w) = web_sys::window() {
            let p = w.navigator().clipboard().write_text(&text);
            spawn_local(async move {
                match wasm_bindgen_futures::JsFuture::from(p).await {
                    Ok(_) => messages.status("Stack copied".into()),
                    Err(_) => messages.status("The browser refused clipboard access".into()),
                }
            });
        }
    };
    view! {
        <div class="stack-tools">
            <label><input id="all-frames" type="checkbox" prop:checked=move || sel.all_frames.get()
                on:change=move |e| sel.all_frames.set(event_target_checked(&e))/>" show all frames"</label>
            <button id="copy-stack" on:click=copy>"Copy stack"</button>
        </div>
    }
}
