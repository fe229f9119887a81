//! The daemon's layers point one way: `cli` → `api` → `engine` → `store` → `cmdgate_policy`. This
//! test reads the source and fails when `engine` names `api` or `cli`, or `store` names `engine`,
//! `api` or `cli` (by `crate::` path or by `super::` climbing out of the layer).

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("read {}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The lines of `text` (a file of layer `layer`) that name one of the `forbidden` layers: a
/// `crate::<layer>` path, or a `super::` path that climbs to the crate root and then names it.
/// Comments are not code and are skipped.
fn violations(text: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        for layer in forbidden {
            let by_crate = format!("crate::{layer}");
            let hit = code.match_indices(&by_crate).any(|(i, _)| {
                // `crate::api` but not `crate::apiary`, nor `some_crate::api`.
                let after = code[i + by_crate.len()..].chars().next();
                let before = code[..i].chars().next_back();
                !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            }) || code.contains(&format!("super::super::{layer}"))
                || code.contains(&format!("super::{layer}::"));
            if hit {
                found.push(format!("line {}: {}", n + 1, line.trim()));
            }
        }
    }
    // Grouped imports (`use crate::{api::Role, clock};`, possibly over several lines).
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    for (i, _) in code.match_indices("crate::{") {
        let inner = &code[i + "crate::{".len()..];
        let mut depth = 1;
        let end = inner
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map_or(inner.len(), |(j, _)| j);
        let group = &inner[..end];
        for item in group.split(',') {
            let first = item.trim().split("::").next().unwrap_or_default().trim();
            if forbidden.contains(&first) {
                found.push(format!("group crate::{{{}}}", group.trim()));
            }
        }
    }
    found
}

/// Every violation under `src/<layer>` of the rule "never import `forbidden`".
fn check_layer(layer: &str, forbidden: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(layer);
    let files = sources(&root);
    assert!(!files.is_empty(), "no sources under {}", root.display());
    let mut all = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for v in violations(&text, forbidden) {
            all.push(format!("{}: {v}", f.display()));
        }
    }
    all
}

#[test]
fn engine_does_not_import_api_or_cli() {
    let v = check_layer("engine", &["api", "cli"]);
    assert!(v.is_empty(), "engine reaches up a layer:\n{}", v.join("\n"));
}

#[test]
fn store_does_not_import_engine_api_or_cli() {
    let v = check_layer("store", &["engine", "api", "cli"]);
    assert!(v.is_empty(), "store reaches up a layer:\n{}", v.join("\n"));
}

#[test]
fn api_does_not_import_cli() {
    let v = check_layer("api", &["cli"]);
    assert!(v.is_empty(), "api reaches up a layer:\n{}", v.join("\n"));
}

#[test]
fn the_check_finds_what_it_must_and_nothing_else() {
    let forbidden = ["api", "cli"];
    for bad in [
        "use crate::api::ApiResponse;",
        "use crate::api;",
        "    let x = crate::cli::client::get();",
        "use crate::{api::Role, clock};",
        "use crate::{\n    clock,\n    cli::client,\n};",
        "use super::super::api::Peer;",
        "use super::api::routes;",
    ] {
        assert_eq!(violations(bad, &forbidden).len(), 1, "missed: {bad}");
    }
    for good in [
        "use crate::engine::Peer;",
        "use crate::apiary;",
        "use other_crate::api::Thing;",
        "// crate::api is mapped to HTTP elsewhere",
        "use crate::store::audit;",
        "use crate::{clock, engine::Peer};",
    ] {
        assert!(
            violations(good, &forbidden).is_empty(),
            "false alarm: {good}"
        );
    }
}
