//! The operator and a rolled-back run, end to end (issue 14, "Diffs, apply, and the person"): the
//! real hook rewrites the call, the real `cmdgate-run` client runs it in the real daemon's mirror,
//! the run is rolled back and kept; `cmdgate runs show RUN --diff` shows what it did,
//! `cmdgate apply RUN` commits it as the operator's audited decision (once; `cmdgate undo`
//! reverses it), and an apply after a conflicting host edit, or of a protected path without
//! `--include-protected`, commits nothing.

use cmdgate_tests::gate::Gate;
use serde_json::Value;

fn gate() -> Gate {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    g
}

/// The mirrored run's own row for a tool_use_id.
fn run_row(g: &Gate, tool_use_id: &str) -> Value {
    g.audit("run")
        .into_iter()
        .filter(|r| r["tool_use_id"] == tool_use_id && r["source"] == "sandbox")
        .max_by_key(|r| r["id"].as_i64())
        .unwrap_or_else(|| panic!("no run row for {tool_use_id}"))
}

fn run_id(row: &Value) -> String {
    row["note"]
        .as_str()
        .and_then(|n| n.strip_prefix("run "))
        .unwrap_or_else(|| panic!("no run id in {row}"))
        .to_owned()
}

/// Runs `command` through the hook and the client; asserts it was rolled back; its run id.
fn rolled_back(g: &Gate, tool_use_id: &str, command: &str) -> String {
    let done = g.shell(&g.pre_rewrite(tool_use_id, command));
    let err = done.stderr_text();
    println!("{command}: exit {:?}\n{err}", done.status);
    assert_ne!(done.status.code(), Some(0), "{err}");
    assert!(err.contains("cmdgate rolled back"), "{err}");
    let row = run_row(g, tool_use_id);
    assert_eq!(row["decision"], "rolled_back", "{row}");
    let id = run_id(&row);
    assert!(
        err.contains(&format!("cmdgate runs show {id} --diff")),
        "the agent is told the run is kept for the operator: {err}"
    );
    id
}

fn operator_rows(g: &Gate, id: &str) -> Vec<Value> {
    g.audit("run")
        .into_iter()
        .filter(|r| r["source"] == "operator" && r["note"] == format!("run {id}").as_str())
        .collect()
}

#[test]
fn a_rolled_back_run_is_read_as_a_diff_applied_once_by_the_operator_and_undone() {
    let g = gate();
    let id = rolled_back(&g, "t1", "rm tracked.txt && printf 'made\\n' > new.txt");
    assert_eq!(
        std::fs::read_to_string(g.proj.join("tracked.txt")).unwrap(),
        "precious\n"
    );
    assert!(!g.proj.join("new.txt").exists());

    let shown = g.cli(&["runs", "show", &id, "--diff"]);
    let text = shown.stdout_text();
    println!("{text}");
    assert!(shown.status.success(), "{}", shown.stderr_text());
    assert!(
        text.contains("--- a/tracked.txt\n+++ /dev/null\n") && text.contains("-precious\n"),
        "{text}"
    );
    assert!(
        text.contains("+++ b/new.txt\n") && text.contains("+made\n"),
        "{text}"
    );
    assert!(text.contains("2 files changed, +1 -1"), "{text}");
    assert!(text.contains(&format!("cmdgate apply {id}")), "{text}");
    let diff = g.cli_json(&["runs", "show", &id, "--diff", "--json"]);
    assert_eq!(diff["source"], "kept", "{diff}");
    assert_eq!(diff["stat"]["files"], 2, "{diff}");

    let applied = g.cli_json(&["apply", &id, "--json"]);
    println!("apply: {applied}");
    assert!(
        !g.proj.join("tracked.txt").exists(),
        "the operator's apply committed the run"
    );
    assert_eq!(
        std::fs::read_to_string(g.proj.join("new.txt")).unwrap(),
        "made\n"
    );
    let rows = operator_rows(&g, &id);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["decision"], "applied", "{}", rows[0]);
    assert_eq!(rows[0]["id"], applied["audit_id"]);
    assert_eq!(
        rows[0]["command"],
        "rm tracked.txt && printf 'made\\n' > new.txt"
    );
    assert!(rows[0]["peer"].as_str().unwrap_or("").contains("uid="));

    // Once: the kept run is spent.
    let again = g.cli(&["apply", &id]);
    println!("again: {}", again.stderr_text());
    assert_eq!(again.status.code(), Some(4), "{}", again.stderr_text());
    assert!(
        again.stderr_text().contains("is not kept"),
        "{}",
        again.stderr_text()
    );
    // The diff now comes from the journal.
    let diff = g.cli_json(&["runs", "show", &id, "--diff", "--json"]);
    assert_eq!(diff["source"], "journal", "{diff}");
    assert!(
        diff["text"].as_str().unwrap().contains("-precious\n"),
        "{diff}"
    );

    // Journalled like any commit: undo restores the workspace.
    g.cli_json(&["undo", &id, "--json"]);
    assert_eq!(
        std::fs::read_to_string(g.proj.join("tracked.txt")).unwrap(),
        "precious\n"
    );
    assert!(!g.proj.join("new.txt").exists());
    assert!(g.verify()["broken"].is_null());
}

#[test]
fn an_apply_after_a_conflicting_host_edit_or_of_a_protected_path_is_refused() {
    let g = gate();
    let id = rolled_back(&g, "t1", "printf 'from the run\\n' > tracked.txt");
    // The host (the agent's Edit tool, a person) changes the file after the run started.
    std::fs::write(g.proj.join("tracked.txt"), "edited on the host\n").unwrap();
    let refused = g.cli(&["apply", &id]);
    let err = refused.stderr_text();
    println!("conflict: {err}");
    assert_eq!(refused.status.code(), Some(3), "{err}");
    assert!(
        err.contains("conflict") && err.contains("tracked.txt"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(g.proj.join("tracked.txt")).unwrap(),
        "edited on the host\n",
        "nothing of the run was committed"
    );
    let rows = operator_rows(&g, &id);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["decision"], "apply_refused", "{}", rows[0]);

    // A git hook: refused unless the operator says so explicitly.
    let id = rolled_back(
        &g,
        "t2",
        "mkdir -p .git/hooks && printf '#!/bin/sh\\necho hi\\n' > .git/hooks/pre-commit",
    );
    let shown = g.cli(&["runs", "show", &id, "--diff"]);
    assert!(
        shown.stdout_text().contains("+++ b/.git/hooks/pre-commit"),
        "{}",
        shown.stdout_text()
    );
    let refused = g.cli(&["apply", &id]);
    let err = refused.stderr_text();
    println!("protected: {err}");
    assert_eq!(refused.status.code(), Some(3), "{err}");
    assert!(
        err.contains("protected") && err.contains(".git/hooks/pre-commit"),
        "{err}"
    );
    assert!(!g.proj.join(".git/hooks/pre-commit").exists());
    let applied = g.cli_json(&["apply", &id, "--include-protected", "--json"]);
    println!("{applied}");
    assert!(g.proj.join(".git/hooks/pre-commit").exists());
    let rows = operator_rows(&g, &id);
    let row = rows
        .iter()
        .find(|r| r["decision"] == "applied")
        .expect("applied row");
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .contains("protected paths included"),
        "{row}"
    );
}
