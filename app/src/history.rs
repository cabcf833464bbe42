//! The lost-history banner: the recording's ring buffer overflowed on the device shown, so
//! its trace keeps only the last events (`snapshot::history`).

use leptos::prelude::*;

use crate::state::Docs;

/// "The recording kept the last N events of cuda:D ...", while the device shown says so.
#[component]
pub(crate) fn HistoryBanner() -> impl IntoView {
    let docs = expect_context::<Docs>();
    let lost = move || {
        docs.tab().and_then(|t| {
            let d = t.info.device_summary(t.device)?;
            (d.history_overflowed == Some(true))
                .then(|| (crate::text::device_name(&t.info, t.device), d.history_max_entries))
        })
    };
    view! {
        <Show when=move || lost().is_some()>
            <div id="history-banner" role="status">
                {move || lost().map(|(dev, n)| {
                    let kept = n.map_or("only its last events".to_string(), |n| format!("the last {n} events"));
                    format!("The recording of {dev} kept {kept} (its ring buffer overflowed): what was allocated before is reconstructed from the final state, and allocations without a stack say why in their details.")
                })}
            </div>
        </Show>
    }
}
