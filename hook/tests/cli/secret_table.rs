//! The policy's secret table (`cmdgate_policy::secrets::SECRET_TABLE`) through the hook's own
//! paths: for every entry, a Read, a Glob, a Grep and a Bash `cat` of a path it covers are never
//! allowed by the hook (the daemon is absent here, so each ends in the fail-closed deny that names
//! the secret). The policy's side of the same table is `policy/tests/it/secret_table.rs`.

use cmdgate_policy::secrets::{Category, SECRET_TABLE};
use serde_json::json;

use crate::common::World;

/// A concrete path the entry covers, under the world's home and workspace.
fn example(w: &World, pattern: &str) -> String {
    let filled = pattern.replace(['*', '?'], "x");
    let home = w.path("home").display().to_string();
    if let Some(rest) = filled.strip_prefix("~/") {
        format!("{home}/{rest}")
    } else if filled.starts_with('/') {
        filled
    } else {
        format!("{}/sub/{filled}", w.work())
    }
}

#[track_caller]
fn refused(w: &World, tool: &str, input: serde_json::Value, what: &str) {
    let (d, reason) = w.run(&w.pre(tool, input), &[]).decision();
    assert_eq!(
        d, "deny",
        "{tool} of {what} was allowed by the hook: {reason}"
    );
    assert!(
        reason.contains("secret"),
        "{tool} of {what}: the reason should say why: {reason}"
    );
}

#[test]
fn every_table_entry_is_refused_by_read_glob_grep_and_bash() {
    let w = World::new();
    for cat in Category::ALL {
        for e in SECRET_TABLE.iter().filter(|e| e.category == *cat) {
            let path = example(&w, e.pattern);
            let what = format!("{path} ({cat:?} {})", e.pattern);
            refused(&w, "Read", json!({"file_path": path}), &what);
            refused(&w, "Glob", json!({"pattern": path}), &what);
            refused(&w, "Grep", json!({"pattern": "x", "path": path}), &what);
            refused(
                &w,
                "Bash",
                json!({"command": format!("cat '{path}'"), "description": "t"}),
                &what,
            );
        }
    }
    // Nothing was allowed, so nothing was spooled as a local allow.
    assert!(
        w.spool().iter().all(|r| r["kind"] != "local_allow"),
        "{:?}",
        w.spool()
    );
}

#[test]
fn claude_codes_own_token_and_environment_dumps_are_not_local_reads() {
    let w = World::new();
    let creds = format!("{}/.claude/.credentials.json", w.path("home").display());
    refused(
        &w,
        "Read",
        json!({"file_path": creds}),
        "Claude Code's token",
    );
    for cmd in [
        "cat ~/.claude/.credentials.json",
        "env",
        "printenv",
        "printenv ANTHROPIC_API_KEY",
        "export -p",
        "declare -x",
        "set",
        "ps auxeww",
        "cat /proc/self/environ",
        "echo $GITHUB_TOKEN",
    ] {
        refused(&w, "Bash", json!({"command": cmd, "description": "t"}), cmd);
    }
}
