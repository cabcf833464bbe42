//! The core's layers hold: each crate of `core/` depends only on crates of lower layers, so an
//! import that runs upward (or sideways, between the doctor and the comparisons) cannot be
//! written. Read from `cargo metadata`, every kind of dependency (normal, dev, build).

use std::process::Command;

/// The layers, lowest first; crates of one layer may not use each other. ARCHITECTURE.md
/// draws the same table.
const LAYERS: &[&[&str]] = &[
    &["memscape-format"],
    &["memscape-replay"],
    &["memscape-analysis"],
    &["memscape-doctor", "memscape-compare", "memscape-synth", "memscape-predict"],
    &["snapshot"],
];

fn layer(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&name))
}

/// (package, its dependencies that are packages of this workspace).
fn workspace_edges() -> Vec<(String, Vec<String>)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let ours: Vec<&str> = packages.iter().map(|p| p["name"].as_str().unwrap()).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["name"].as_str().unwrap())
                .filter(|d| ours.contains(d))
                .map(String::from)
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

/// What breaks the layers in `edges`: a layer's crate using one of its own layer or a higher
/// one, or a crate outside the layers.
fn violations(edges: &[(String, Vec<String>)]) -> Vec<String> {
    let mut out = Vec::new();
    for (name, deps) in edges {
        let Some(mine) = layer(name) else { continue };
        for d in deps.iter().filter(|d| *d != "testkit") {
            match layer(d) {
                Some(theirs) if theirs < mine => {}
                Some(theirs) => out.push(format!("{name} (layer {mine}) uses {d} (layer {theirs})")),
                None => out.push(format!("{name} uses {d}, which is no layer of the core")),
            }
        }
    }
    out
}

#[test]
fn each_core_crate_uses_only_lower_layers() {
    let edges = workspace_edges();
    let layered = edges.iter().filter(|(n, _)| layer(n).is_some()).count();
    assert_eq!(layered, LAYERS.iter().map(|l| l.len()).sum::<usize>(), "every layer's crate is in the workspace");
    assert_eq!(violations(&edges), Vec::<String>::new());
}

/// The check bites: the real graph with one edge upward, one sideways and one out of the core.
#[test]
fn an_upward_or_sideways_dependency_is_refused() {
    let mut edges = workspace_edges();
    let add = |edges: &mut Vec<(String, Vec<String>)>, from: &str, to: &str| {
        edges.iter_mut().find(|(n, _)| n == from).unwrap().1.push(to.to_string());
    };
    add(&mut edges, "memscape-format", "memscape-replay");
    add(&mut edges, "memscape-doctor", "memscape-compare");
    add(&mut edges, "memscape-analysis", "engine");
    let mut found = violations(&edges);
    found.sort();
    assert_eq!(
        found,
        [
            "memscape-analysis uses engine, which is no layer of the core",
            "memscape-doctor (layer 3) uses memscape-compare (layer 3)",
            "memscape-format (layer 0) uses memscape-replay (layer 1)",
        ]
    );
}
