//! The user's category rules: kept in localStorage, sent to every open file's worker
//! (answers after that use them), edited, exported and imported as JSON.

use engine::protocol::{Category, Request, Response, Rule, Rules, Target};
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::client::worker;
use crate::dom::storage;
use crate::state::{Docs, Messages};

const RULES_KEY: &str = "memscape.rules";

/// The rules, and how many times every worker has been given them.
#[derive(Clone, Copy)]
pub(crate) struct UserRules {
    rules: RwSignal<Rules>,
    version: RwSignal<u32>,
    /// The user has set rules on this page (the saved ones, read later, then do not count).
    edited: StoredValue<bool>,
}

/// The longest the saved rules wait for the page to be idle (ms).
const READ_MS: u32 = 1000;

impl UserRules {
    /// The rules: none until the saved ones are read, once the page is first idle (the
    /// first look into localStorage took 3 to 12 ms on a fresh profile, which the page's
    /// first view need not wait for). Whenever they or the open files change, every worker
    /// gets them (a worker whose rules did not change keeps its analyses).
    pub(crate) fn new(docs: Docs, messages: Messages) -> UserRules {
        let u = UserRules {
            rules: RwSignal::new(Rules::default()),
            version: RwSignal::new(0),
            edited: StoredValue::new(false),
        };
        crate::dom::when_idle(READ_MS, move || {
            let saved =
                storage().and_then(|st| st.get_item(RULES_KEY).ok().flatten()).and_then(|t| Rules::from_json(&t).ok());
            if let Some(saved) = saved.filter(|_| !u.edited.get_value()) {
                u.rules.set(saved);
            }
        });
        let ids = Memo::new(move |_| docs.ids());
        Effect::new(move |_| {
            let rules = u.rules.get();
            let docs = ids.get();
            spawn_local(async move {
                for doc in docs {
                    if let Response::Error(e) = worker().ask(Request::Rules { doc, rules: rules.clone() }).await {
                        messages.error(format!("category rules: {e}"));
                    }
                }
                u.version.update(|v| *v += 1);
            });
        });
        u
    }

    /// The user's new rules: kept, saved, and given to every worker.
    fn set(self, rules: Rules) {
        self.edited.set_value(true);
        if let Some(st) = storage() {
            let _ = st.set_item(RULES_KEY, &rules.to_json());
        }
        self.rules.set(rules);
    }

    /// Subscribes the running effect to the workers having new rules.
    pub(crate) fn track(self) {
        self.version.track();
    }
}

/// The list of rules and the form that adds one.
#[component]
pub(crate) fn RulesEditor() -> impl IntoView {
    let (u, messages) = (expect_context::<UserRules>(), expect_context::<Messages>());
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
        let mut next = u.rules.get_untracked();
        next.rules.push(rule);
        match next.compile() {
            Ok(_) => {
                u.set(next);
                p.set_value("");
            }
            Err(e) => messages.error(format!("category rules: {e}")),
        }
    };
    view! {
        <section id="rules">
            <h2>"Your rules (tried first, in order)"</h2>
            <table class="list" id="rule-list">
                {move || u.rules.get().rules.into_iter().enumerate().map(|(k, r)| view! {
                    <tr class="rule">
                        <td>{k + 1}</td><td><code>{r.pattern.clone()}</code></td>
                        <td>{if r.on == Target::Frame { "frames" } else { "annotations" }}</td>
                        <td>{r.category.label()}</td>
                        <td><button class="rule-remove" on:click=move |_| {
                            let mut next = u.rules.get_untracked();
                            next.rules.remove(k);
                            u.set(next);
                        }>"remove"</button></td>
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
                <Transfer/>
            </div>
        </section>
    }
}

/// *Export JSON* and *Import JSON*.
#[component]
fn Transfer() -> impl IntoView {
    let (u, messages) = (expect_context::<UserRules>(), expect_context::<Messages>());
    let export = move |_| {
        if let Err(e) =
            crate::save::download("memscape-rules.json", "application/json", u.rules.get_untracked().to_json())
        {
            messages.error(format!("could not export the rules: {e}"));
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
                    messages.status(format!("Imported {} rules from {name}", r.rules.len()));
                    u.set(r);
                }
                Err(e) => messages.error(format!("{name}: {e}")),
            }
        });
    };
    view! {
        <button id="rules-export" on:click=export>"Export JSON"</button>
        <label class="button">"Import JSON"<input id="rules-import" type="file" accept=".json" on:change=import/></label>
    }
}
