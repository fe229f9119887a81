//! Remembered decisions end to end: `cmdgate rules` against a real `cmdgated`, the real hook
//! deciding afterwards, revision-checked edits from concurrent CLI processes, and learned entries.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use cmdgate_tests::gate::Gate;
use cmdgate_tests::proc::{run_bounded, Finished};
use serde_json::Value;

/// The exit code of a conflicting rule edit (`cli_rules::EXIT_CONFLICT`, documented in docs/config.md).
const EXIT_CONFLICT: i32 = 3;

fn revision(g: &Gate) -> i64 {
    g.cli_json(&["rules", "list", "--json"])["revision"]
        .as_i64()
        .expect("rules list has a revision")
}

fn rule_ids(g: &Gate) -> Vec<i64> {
    g.cli_json(&["rules", "list", "--json"])["rules"]
        .as_array()
        .expect("rules list has rules")
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

/// `cmdgate` with the gate's environment in `dir`.
fn cli_in(g: &Gate, dir: &Path, args: &[&str]) -> Finished {
    let mut cmd = Command::new(&g.cmdgate);
    cmd.args(args).current_dir(dir);
    g.env(&mut cmd);
    run_bounded(&mut cmd, b"", Duration::from_secs(120))
}

#[test]
fn a_remembered_rejection_denies_with_the_note_until_disabled_or_removed() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    let proj = g.proj.to_str().unwrap().to_owned();
    let before = revision(&g);
    let added = g.cli_json(&[
        "rules",
        "remember",
        "reject",
        "--project",
        &proj,
        "--note",
        "use make clean",
        "--json",
        "--",
        "rm",
        "-rf",
        "build",
    ]);
    let id = added["id"].as_i64().unwrap();
    assert_eq!(added["revision"].as_i64(), Some(before + 1), "{added}");
    let sid = id.to_string();

    let (d, reason) = g.pre("rej-1", "rm -rf build");
    assert_eq!(d, "deny", "{reason}");
    assert!(
        reason.contains("use make clean") && reason.contains(&format!("rule #{id}")),
        "{reason}"
    );

    // Disabled: it never matches, and the test-run decides (nothing to delete: clean).
    let disabled = g.cli_json(&["rules", "disable", &sid, "--json"]);
    assert_eq!(disabled["enabled"], false, "{disabled}");
    let (d, reason) = g.pre("rej-2", "rm -rf build");
    assert_eq!(d, "allow", "{reason}");

    // Enabled again: denied again.
    assert!(g.cli(&["rules", "enable", &sid]).status.success());
    let (d, reason) = g.pre("rej-3", "rm -rf build");
    assert_eq!(d, "deny", "{reason}");

    // `show` has the decisions it made, newest first, and its history.
    let shown = g.cli_json(&["rules", "show", &sid, "--json"]);
    let matched: Vec<&str> = shown["matched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(matched, ["rej-3", "rej-1"], "{shown}");
    let history: Vec<&str> = shown["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["decision"].as_str().unwrap())
        .collect();
    assert_eq!(history, ["reject", "disable", "enable"], "{shown}");

    // Removed: gone from the list, the command is test-run again, and the removal is audited.
    let removed = g.cli_json(&["rules", "remove", &sid, "--json"]);
    assert_eq!(removed["removed"], true, "{removed}");
    assert!(!rule_ids(&g).contains(&id));
    let (d, reason) = g.pre("rej-4", "rm -rf build");
    assert_eq!(d, "allow", "{reason}");
    let show_gone = g.cli(&["rules", "show", &sid]);
    assert!(!show_gone.status.success());
    assert!(
        show_gone.stderr_text().contains(&format!("no rule {id}")),
        "{}",
        show_gone.stderr_text()
    );
    let rule_rows = g.audit("rule");
    assert!(
        rule_rows
            .iter()
            .any(|r| r["decision"] == "remove" && r["rule"] == format!("rule #{id}")),
        "{rule_rows:?}"
    );
    // Every change raised the revision: add, disable, enable, remove.
    assert_eq!(revision(&g), before + 4);
    // A removed rule's id is never given to a new one (its audit rows would seem to be the new
    // rule's).
    let again = g.cli_json(&[
        "rules",
        "remember",
        "reject",
        "--project",
        &proj,
        "--json",
        "--",
        "rm",
        "-rf",
        "build",
    ]);
    assert!(again["id"].as_i64().unwrap() > id, "{again}");
    assert!(g.verify()["broken"].is_null());
}

#[test]
fn a_remembered_approval_is_scoped_to_its_project() {
    let mut g = Gate::new();
    g.init_signed();
    let b = g.other_project();
    g.start();
    // Tier 2 in the starter map: asked in both projects.
    let push = "git push origin main";
    let (d, reason) = g.pre("a-0", push);
    assert_eq!(d, "ask", "{reason}");
    // Remembered from a subdirectory without --project: scoped to the canonical project root.
    let sub = g.proj.join("src").join("deep");
    std::fs::create_dir_all(&sub).unwrap();
    let done = cli_in(
        &g,
        &sub,
        &[
            "rules", "remember", "approve", "--json", "--", "git", "push", "origin", "main",
        ],
    );
    assert!(done.status.success(), "{}", done.stderr_text());
    let added: Value = serde_json::from_str(&done.stdout_text()).unwrap();
    let canonical = std::fs::canonicalize(&g.proj).unwrap();
    assert_eq!(
        added["project"].as_str(),
        canonical.to_str(),
        "the rule is scoped to the project root: {added}"
    );
    let id = added["id"].as_i64().unwrap();

    let (d, reason) = g.pre("a-1", push);
    assert_eq!(d, "allow", "{reason}");
    assert!(reason.contains(&format!("rule #{id}")), "{reason}");
    // The same command in another project is still asked.
    let (d, reason) = g.pre_in(&b, "b-1", push);
    assert_eq!(d, "ask", "{reason}");
    assert!(!reason.contains(&format!("rule #{id}")), "{reason}");

    // A remembered approval never overrides tier 3 (`git push --force *`)...
    let forced = "git push --force origin main";
    g.cli_json(&[
        "rules", "remember", "approve", "--json", "--", "git", "push", "--force", "origin", "main",
    ]);
    let (d, reason) = g.pre("a-2", forced);
    assert_eq!(d, "deny", "{reason}");
    // ...nor a remembered rejection of the same command.
    let rejected = g.cli_json(&[
        "rules", "remember", "reject", "--json", "--", "git", "push", "origin", "main",
    ]);
    let (d, reason) = g.pre("a-3", push);
    assert_eq!(d, "deny", "{reason}");
    assert!(
        reason.contains(&format!("rule #{}", rejected["id"])),
        "{reason}"
    );

    // A project that does not exist is refused rather than stored as a rule that never matches.
    let missing = g.dir.path().join("no-such-project");
    let done = g.cli(&[
        "rules",
        "remember",
        "reject",
        "--project",
        missing.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(!done.status.success());
}

#[test]
fn always_ask_turns_an_allow_into_an_ask() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    let (d, reason) = g.pre("aa-0", "touch ok.txt");
    assert_eq!(d, "allow", "a clean test-run allows it: {reason}");
    let added = g.cli_json(&[
        "rules",
        "always-ask",
        "--note",
        "I want to see these",
        "--json",
        "--",
        "touch",
        "ok.txt",
    ]);
    let id = added["id"].as_i64().unwrap();
    let (d, reason) = g.pre("aa-1", "touch ok.txt");
    assert_eq!(d, "ask", "{reason}");
    assert!(reason.contains(&format!("rule #{id}")), "{reason}");
    // Only that exact command.
    let (d, reason) = g.pre("aa-2", "touch other.txt");
    assert_eq!(d, "allow", "{reason}");
    let listed = g.cli_json(&["rules", "list", "--json"]);
    let rule = listed["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .cloned()
        .unwrap();
    assert_eq!(rule["kind"], "always_ask", "{rule}");
    assert_eq!(rule["note"], "I want to see these", "{rule}");
}

#[test]
fn concurrent_edits_against_the_same_revision_never_both_apply() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    let mut ids = Vec::new();
    for word in ["one", "two", "three", "four"] {
        let added = g.cli_json(&["rules", "remember", "reject", "--json", "--", "touch", word]);
        ids.push(added["id"].as_i64().unwrap().to_string());
    }
    let seen = revision(&g).to_string();
    // Four processes, each changing a different rule, all made against the revision just listed,
    // started together.
    let g = Arc::new(g);
    let barrier = Arc::new(Barrier::new(ids.len()));
    let handles: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let (g, barrier, id, seen) = (g.clone(), barrier.clone(), id.clone(), seen.clone());
            std::thread::spawn(move || {
                let verb = if i % 2 == 0 { "disable" } else { "remove" };
                barrier.wait();
                g.cli(&["rules", verb, &id, "--revision", &seen])
            })
        })
        .collect();
    let results: Vec<Finished> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = results.iter().filter(|r| r.status.success()).count();
    let conflicts: Vec<&Finished> = results
        .iter()
        .filter(|r| r.status.code() == Some(EXIT_CONFLICT))
        .collect();
    let report: Vec<String> = results
        .iter()
        .map(|r| format!("{:?}: {} {}", r.status, r.stdout_text(), r.stderr_text()))
        .collect();
    assert_eq!(ok, 1, "exactly one edit applies: {report:#?}");
    assert_eq!(conflicts.len(), 3, "the others conflict: {report:#?}");
    let current = revision(&g);
    assert_eq!(current, seen.parse::<i64>().unwrap() + 1);
    for c in conflicts {
        assert!(
            c.stderr_text().contains(&format!(
                "rules changed: the current revision is {current} (you expected {seen})"
            )),
            "{}",
            c.stderr_text()
        );
    }
    // Nothing but the one edit happened.
    let listed = g.cli_json(&["rules", "list", "--json"]);
    let rules = listed["rules"].as_array().unwrap();
    let changed = ids
        .iter()
        .filter(|id| {
            !rules
                .iter()
                .any(|r| r["id"].as_i64() == id.parse().ok() && r["enabled"] == true)
        })
        .count();
    assert_eq!(changed, 1, "{listed}");

    // With --json the conflict is also reported on stdout, machine-readably.
    let stale = g.cli(&["rules", "enable", &ids[0], "--revision", &seen, "--json"]);
    assert_eq!(stale.status.code(), Some(EXIT_CONFLICT));
    let answer: Value = serde_json::from_str(&stale.stdout_text()).unwrap();
    assert_eq!(answer["conflict"], true, "{answer}");
    assert_eq!(answer["revision"].as_i64(), Some(current), "{answer}");
    // Retrying against the current revision works.
    let retried = g.cli(&[
        "rules",
        "enable",
        &ids[0],
        "--revision",
        &current.to_string(),
    ]);
    assert!(retried.status.success(), "{}", retried.stderr_text());
    assert!(
        retried
            .stdout_text()
            .contains(&format!("rules revision {}", current + 1)),
        "{}",
        retried.stdout_text()
    );
}

#[test]
fn a_learned_promotion_raises_the_revision_and_shows_its_sources_and_matches() {
    let mut g = Gate::new();
    std::fs::write(g.conf.join("config.toml"), "[promotion]\nk = 1\n").unwrap();
    g.init_signed();
    g.start();
    let before = revision(&g);
    let command = "mkdir -p build && touch build/stamp";
    // One clean mirrored run that exits 0 earns it (k = 1).
    let rewritten = g.pre_rewrite("first", command);
    let ran = g.shell(&rewritten);
    assert_eq!(ran.status.code(), Some(0), "{}", ran.stderr_text());
    g.post("first", &rewritten, true);
    let (d, reason) = g.pre("second", command);
    assert_eq!(d, "allow", "{reason}");
    let listed = g.cli_json(&["rules", "list", "--json"]);
    let learned = listed["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "learned")
        .cloned()
        .unwrap_or_else(|| panic!("nothing learned: {listed}"));
    assert!(
        listed["revision"].as_i64().unwrap() > before,
        "a promotion raises the revision: {listed}"
    );
    let id = learned["id"].as_i64().unwrap();
    let shown = g.cli_json(&["rules", "show", &id.to_string(), "--json"]);
    let first = g
        .audit("run")
        .into_iter()
        .find(|r| r["tool_use_id"] == "first")
        .expect("the run row");
    let sources = shown["sources"].as_array().unwrap();
    assert!(
        sources.iter().any(|r| r["id"] == first["id"]),
        "the clean, successful mirrored run that earned it is a source: {shown}"
    );
    let matched = shown["matched"].as_array().unwrap();
    assert_eq!(matched.len(), 1, "{shown}");
    assert_eq!(matched[0]["tool_use_id"], "second", "{shown}");
    assert_eq!(matched[0]["source"], "learned", "{shown}");
    // The text form says the same.
    let text = g.cli(&["rules", "show", &id.to_string()]).stdout_text();
    assert!(text.contains("requests it matched"), "{text}");
    assert!(text.contains(&format!("audit #{}", first["id"])), "{text}");

    // The operator cannot add learned entries; they only come from the daemon.
    let forged = g.cli(&[
        "rules", "add", "--kind", "learned", "--", "rm", "-rf", "src",
    ]);
    assert!(!forged.status.success());
    // A demotion (the real run failed) raises it again.
    let promoted = revision(&g);
    g.post("second", command, false);
    assert!(revision(&g) > promoted);
}

#[test]
fn a_rule_about_a_read_is_refused_because_the_hook_never_asks_about_reads() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    let before = revision(&g);
    for args in [
        &["rules", "always-ask", "--", "ls", "-la"][..],
        &["rules", "remember", "reject", "--", "cat", "README.md"][..],
    ] {
        let done = g.cli(args);
        assert!(!done.status.success(), "{args:?} was stored");
        assert!(
            done.stderr_text().contains("is a read") && done.stderr_text().contains("secret_paths"),
            "{args:?}: {}",
            done.stderr_text()
        );
    }
    assert_eq!(revision(&g), before, "nothing was stored");
    // A secret read does reach the daemon, so a rule about it is kept.
    let kept = g.cli(&["rules", "always-ask", "--", "cat", "~/.ssh/id_rsa"]);
    assert!(kept.status.success(), "{}", kept.stderr_text());
    // And an approval of a read is harmless (it is allowed anyway), so it is not refused.
    let kept = g.cli(&["rules", "remember", "approve", "--", "ls"]);
    assert!(kept.status.success(), "{}", kept.stderr_text());
}

/// Runs SQL on the daemon's store from outside (Python's sqlite3: the tests crate links no SQLite).
fn sql(g: &Gate, statement: &str) {
    let db = g.data.join("cmdgate.db");
    let done = run_bounded(
        Command::new("python3").args([
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute(sys.argv[2]); c.commit()",
            db.to_str().unwrap(),
            statement,
        ]),
        b"",
        Duration::from_secs(60),
    );
    assert!(done.status.success(), "{statement}: {}", done.stderr_text());
}

#[test]
fn rules_that_cannot_be_reloaded_after_a_change_refuse_every_routed_call() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    let (d, reason) = g.pre("before", "touch a.txt");
    assert_eq!(d, "allow", "{reason}");
    // A row this daemon cannot read, then a committed change: the reload after it fails.
    sql(
        &g,
        "INSERT INTO rules (kind, project, key, enabled, created_ms, created_by, provenance, updated_ms) \
         VALUES ('bogus', '/elsewhere', 'x', 1, 0, 'operator', '[]', 0)",
    );
    let remembered = g.cli(&["rules", "remember", "reject", "--", "touch", "a.txt"]);
    assert!(
        !remembered.status.success(),
        "the failed reload is reported: {}",
        remembered.stdout_text()
    );
    // The rejection is in the store but not in memory: deciding with the old set would allow.
    let (d, reason) = g.pre("stale", "touch a.txt");
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("could not be reloaded"), "{reason}");
    assert_eq!(g.cli_json(&["status", "--json"])["rules_stale"], true);
    let status = g.cli(&["status"]).stdout_text();
    assert!(status.contains("STALE"), "{status}");
    // Once the store reads again, the next call reloads and the remembered rejection applies.
    sql(&g, "DELETE FROM rules WHERE kind = 'bogus'");
    let (d, reason) = g.pre("after", "touch a.txt");
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("rule #"), "{reason}");
    assert_eq!(g.cli_json(&["status", "--json"])["rules_stale"], false);
}
