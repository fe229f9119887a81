//! The routing daemon end to end: a real `cmdgated` on temp sockets, the real hook binary as its
//! client, the real sandbox for test-runs, the real CLI for the audit.

use cmdgate_tests::gate::{audit_id, Gate};
use serde_json::json;

#[test]
fn reads_never_reach_the_daemon_and_are_audited_from_the_spool() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    let (d, reason) = g.pre("read-1", "ls -la");
    assert_eq!(d, "allow", "{reason}");
    let (d, reason) = g.pre_tool(
        "read-2",
        "Read",
        json!({"file_path": g.proj.join("tracked.txt")}),
    );
    assert_eq!(d, "allow", "{reason}");
    assert!(
        g.decision_row("read-1").is_none(),
        "a read reached the daemon"
    );
    assert!(
        g.decision_row("read-2").is_none(),
        "a read reached the daemon"
    );
    // The hook's spool tells the audit about them afterwards, as claims.
    let ingested = g.ingest();
    assert!(ingested["ingested"].as_u64().unwrap() >= 2, "{ingested}");
    let local = g.audit("local_allow");
    assert!(
        local.iter().any(|r| r["tool_use_id"] == "read-1"),
        "{local:?}"
    );
    assert!(g.verify()["broken"].is_null());
}

#[test]
fn tier_3_is_denied_with_the_rule() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    // `git clean -fdx` is tier 3 in the starter map and on no built-in list, so the tier rule decides.
    let (d, reason) = g.pre("t3", "git clean -fdx");
    assert_eq!(d, "deny", "{reason}");
    let row = g.decision_row("t3").expect("audited");
    assert_eq!(row["decision"], "deny");
    assert!(
        row["rule"]
            .as_str()
            .unwrap_or_default()
            .contains("git clean -fdx"),
        "{row}"
    );
    assert_eq!(audit_id(&reason), row["id"].as_i64());
}

/// Adds tier-1 entries marked `direct` (test-run, then run on the host) and re-signs the map.
fn direct_entries(g: &Gate, patterns: &[&str]) {
    let map = g.proj.join("CLAUDE_CMDS.md");
    let text = std::fs::read_to_string(&map).unwrap();
    let entries: String = patterns
        .iter()
        .map(|p| format!("- `{p}` — direct\n"))
        .collect();
    let text = text.replacen(
        "- `cargo build *`",
        &format!("{entries}- `cargo build *`"),
        1,
    );
    std::fs::write(&map, text).unwrap();
    g.resign();
}

#[test]
fn a_clean_test_run_of_a_direct_entry_is_allowed_and_leaves_the_workspace_untouched() {
    let mut g = Gate::new();
    g.init_signed();
    direct_entries(&g, &["mkdir *"]);
    g.start();
    let (d, reason) = g.pre("clean", "mkdir -p out/artifact");
    assert_eq!(d, "allow", "{reason}");
    assert!(reason.contains("test-ran"), "{reason}");
    assert!(
        !g.proj.join("out").exists(),
        "the test-run touched the real workspace"
    );
    let row = g.decision_row("clean").expect("audited");
    assert_eq!(row["source"], "sandbox");
    let sandbox: serde_json::Value =
        serde_json::from_str(row["sandbox"].as_str().unwrap()).unwrap();
    assert_eq!(sandbox["clean"], true, "{sandbox}");
    // The outcome of the real run joins the decision.
    g.post("clean", "mkdir -p out/artifact", true);
    let show = g.cli_json(&["audit", "show", &row["id"].to_string(), "--json"]);
    assert_eq!(show["outcomes"][0]["success"], true, "{show}");
}

#[test]
fn a_dirty_test_run_of_a_direct_entry_is_denied_with_its_effects() {
    let mut g = Gate::new();
    g.init_signed();
    direct_entries(&g, &["rm *"]);
    g.start();
    let (d, reason) = g.pre("dirty", "rm tracked.txt");
    assert_eq!(d, "deny", "{reason}");
    assert!(
        reason.contains("tracked.txt"),
        "the effect is not in the reason: {reason}"
    );
    assert_eq!(
        std::fs::read_to_string(g.proj.join("tracked.txt")).unwrap(),
        "precious\n"
    );
}

#[test]
fn a_command_that_does_not_parse_is_denied() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    let (d, reason) = g.pre("garbled", "echo $( && ");
    assert_eq!(d, "deny", "{reason}");
    assert!(
        reason.contains("could not be analysed") || reason.contains("parse"),
        "{reason}"
    );
}

#[test]
fn a_tampered_map_makes_the_project_read_only() {
    let mut g = Gate::new();
    g.init_signed();
    let map = g.proj.join("CLAUDE_CMDS.md");
    let signed = std::fs::read_to_string(&map).unwrap();
    // The agent adds itself a rule without the operator's key.
    std::fs::write(&map, signed.replacen("- `pwd`", "- `pwd`\n- `rm *`", 1)).unwrap();
    g.start();
    let (d, reason) = g.pre("tampered", "touch x");
    assert_eq!(d, "deny", "{reason}");
    assert!(
        reason.contains("read-only") && reason.contains("signature"),
        "{reason}"
    );
    let events = g.audit("tiermap");
    assert!(
        events.iter().any(|e| e["decision"] == "rejected"),
        "{events:?}"
    );
}

#[test]
fn a_replayed_older_map_makes_the_project_read_only_even_after_a_restart() {
    let mut g = Gate::new();
    g.init_signed();
    let map = g.proj.join("CLAUDE_CMDS.md");
    let old = std::fs::read_to_string(&map).unwrap();
    let edited = old.replacen("- `pwd`", "- `pwd`\n- `whoami`", 1);
    std::fs::write(&map, edited).unwrap();
    g.resign();
    g.start();
    let (d, reason) = g.pre("newer", "touch a");
    assert_eq!(d, "allow", "the re-signed map should be accepted: {reason}");
    assert!(reason.contains("revision 2"), "{reason}");
    g.stop();
    // The old, validly signed revision 1 comes back.
    std::fs::write(&map, &old).unwrap();
    g.start();
    let (d, reason) = g.pre("replayed", "touch b");
    assert_eq!(d, "deny", "{reason}");
    assert!(
        reason.contains("read-only") && reason.contains("older than revision 2"),
        "{reason}"
    );
}

#[test]
fn an_edit_that_does_not_verify_turns_the_project_read_only_until_restored() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    let (d, reason) = g.pre("before", "touch a");
    assert_eq!(d, "allow", "{reason}");
    let map = g.proj.join("CLAUDE_CMDS.md");
    let text = std::fs::read_to_string(&map).unwrap();
    // Half-written (or edited by anyone without the key): nothing but reads until it verifies again;
    // the last valid revision is named, not used.
    std::fs::write(&map, &text[..text.len() / 2]).unwrap();
    let (d, reason) = g.pre("during", "touch b");
    assert_eq!(d, "deny", "{reason}");
    assert!(
        reason.contains("read-only") && reason.contains("revision 1"),
        "{reason}"
    );
    let (d, reason) = g.pre("read", "ls");
    assert_eq!(d, "allow", "reads still run: {reason}");
    // Restoring the signed file restores revision 1 (same revision, same content: no replay).
    std::fs::write(&map, &text).unwrap();
    let (d, reason) = g.pre("after", "touch c");
    assert_eq!(d, "allow", "{reason}");
    std::fs::write(&map, &text[..text.len() / 2]).unwrap();
    assert_eq!(g.pre("again", "touch d").0, "deny");
    let status = g.cli_json(&["status", "--json"]);
    let problem = status["projects"][0]["problem"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        problem.contains("rejected"),
        "the failure is reported: {status}"
    );
}

#[test]
fn peers_not_configured_are_refused_and_audited() {
    let mut g = Gate::new();
    // Only uid 4242 may use the decide socket; the test runs as someone else.
    std::fs::write(
        g.conf.join("config.toml"),
        "[peers]\ndecide_uids = [4242]\n",
    )
    .unwrap();
    g.start();
    let (d, reason) = g.pre("refused", "touch x");
    assert_eq!(d, "deny", "{reason}");
    let refused = g.audit("refused_peer");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(g.verify()["broken"].is_null());
}

#[test]
fn doctor_finds_the_fail_open_setups_and_passes_a_good_one() {
    let mut g = Gate::new();
    let doctor = g.cli(&["doctor", "--project", g.proj.to_str().unwrap(), "--json"]);
    assert!(!doctor.status.success());
    let report: serde_json::Value = serde_json::from_str(&doctor.stdout_text()).unwrap();
    let failed: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for expected in [
        "registered: PreToolUse",
        "registered: PostToolUse",
        "registered: PostToolUseFailure",
        "daemon",
        "pinned keys",
    ] {
        assert!(
            failed.contains(&expected),
            "{expected} not reported: {failed:?}"
        );
    }
    // Existing settings survive the install.
    let settings = g.proj.join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(&settings, r#"{"model": "keep-me", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}}"#).unwrap();
    g.init_signed();
    let install = g.cli(&[
        "hook",
        "install",
        "--project",
        g.proj.to_str().unwrap(),
        "--hook",
        g.hook.to_str().unwrap(),
    ]);
    assert!(install.status.success(), "{}", install.stderr_text());
    let merged: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(merged["model"], "keep-me");
    assert_eq!(merged["hooks"]["Stop"][0]["hooks"][0]["command"], "true");
    assert!(
        g.cli(&[
            "hook",
            "install",
            "--project",
            g.proj.to_str().unwrap(),
            "--hook",
            g.hook.to_str().unwrap(),
            "--timeout",
            "30"
        ])
        .status
        .code()
            != Some(0)
    );
    g.start();
    let doctor = g.cli(&["doctor", "--project", g.proj.to_str().unwrap()]);
    assert!(doctor.status.success(), "{}", doctor.stdout_text());
    // Mirrored runs: the client beside the hook, no other hook that could replace the rewrite,
    // and the Claude Code version against the tested one (a warning at most).
    let json = g.cli(&["doctor", "--project", g.proj.to_str().unwrap(), "--json"]);
    let checks: serde_json::Value = serde_json::from_str(&json.stdout_text()).unwrap();
    let status_of = |name: &str| {
        checks["checks"]
            .as_array()
            .or(checks.as_array())
            .unwrap_or_else(|| panic!("{checks}"))
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["status"].clone())
            .unwrap_or_else(|| panic!("no {name} check: {checks}"))
    };
    assert_eq!(status_of("run client"), "ok");
    assert_eq!(status_of("other Bash hooks"), "ok");
    assert_ne!(status_of("claude code version"), "fail");
    // A second PreToolUse hook on every tool could replace cmdgate's rewrite: a warning.
    let settings = g.proj.join(".claude/settings.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    v["hooks"]["PreToolUse"]
        .as_array_mut()
        .unwrap()
        .push(json!({"matcher": "*", "hooks": [{"type": "command", "command": "/usr/local/bin/other-rewriter"}]}));
    std::fs::write(&settings, v.to_string()).unwrap();
    let json = g.cli(&["doctor", "--project", g.proj.to_str().unwrap(), "--json"]);
    let checks: serde_json::Value = serde_json::from_str(&json.stdout_text()).unwrap();
    let other = checks["checks"]
        .as_array()
        .or(checks.as_array())
        .unwrap()
        .iter()
        .find(|c| c["name"] == "other Bash hooks")
        .cloned()
        .unwrap();
    assert_eq!(other["status"], "warn", "{other}");
    assert!(
        other["detail"].as_str().unwrap().contains("other-rewriter"),
        "{other}"
    );
}

#[test]
fn a_tripped_breaker_means_read_only_until_the_operator_resets_it() {
    let mut g = Gate::new();
    std::fs::write(g.conf.join("config.toml"), "[breaker]\nthreshold = 2\n").unwrap();
    g.init_signed();
    g.start();
    // A dirty (rolled-back) run weighs 2: the session's breaker trips.
    let rolled_back = g.shell(&g.pre_rewrite("dirty", "rm tracked.txt"));
    assert_ne!(rolled_back.status.code(), Some(0));
    let (d, reason) = g.pre("while-open", "touch ok.txt");
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("circuit breaker"), "{reason}");
    // Reads still run.
    let (d, reason) = g.pre("read", "ls");
    assert_eq!(d, "allow", "{reason}");
    let reset = g.cli_json(&["breaker", "reset", "--json"]);
    assert!(
        reset["reset"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s == "session:sess-1"),
        "{reset}"
    );
    let (d, reason) = g.pre("after-reset", "touch ok.txt");
    assert_eq!(d, "allow", "{reason}");
    let breaker_rows = g.audit("breaker");
    assert!(
        breaker_rows.len() >= 2,
        "trip and reset are audited: {breaker_rows:?}"
    );
}

#[test]
fn a_command_that_ran_clean_and_then_succeeded_is_learned() {
    let mut g = Gate::new();
    std::fs::write(g.conf.join("config.toml"), "[promotion]\nk = 1\n").unwrap();
    g.init_signed();
    g.start();
    let command = "mkdir -p build && touch build/stamp";
    // Its one mirrored run is clean and exits 0: with k = 1 that earns the promotion.
    let first = g.pre_rewrite("first", command);
    let ran = g.shell(&first);
    assert_eq!(ran.status.code(), Some(0), "{}", ran.stderr_text());
    g.post("first", &first, true);
    // Promoted, and `mkdir`/`touch` of project paths run nothing the agent wrote: the same
    // command in the same project now runs on the host, without the mirror.
    let (d, reason) = g.pre("second", command);
    assert_eq!(d, "allow", "{reason}");
    assert_eq!(
        g.decision_row("second").unwrap()["source"],
        "learned",
        "{reason}"
    );
    let learn = g.audit("learn");
    assert!(
        learn.iter().any(|r| r["decision"] == "promoted"),
        "{learn:?}"
    );
    // A failed real run demotes it: the next call runs in the mirror again.
    g.post("second", command, false);
    g.pre_rewrite("third", command);
    let third = g.decision_row("third").unwrap();
    assert_eq!(third["source"], "sandbox", "{third}");
    assert_eq!(third["decision"], "run", "{third}");
}

#[test]
fn a_remembered_rejection_is_told_to_the_model_with_the_operators_note() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    let proj = g.proj.to_str().unwrap().to_owned();
    let added = g.cli_json(&[
        "rules",
        "add",
        "--kind",
        "reject",
        "--project",
        &proj,
        "--note",
        "use make clean",
        "--json",
        "rm",
        "-rf",
        "build",
    ]);
    let id = added["id"].as_i64().unwrap();
    let (d, reason) = g.pre("rejected", "rm -rf build");
    assert_eq!(d, "deny", "{reason}");
    assert!(
        reason.contains("use make clean") && reason.contains(&format!("rule #{id}")),
        "{reason}"
    );
    assert!(g
        .cli(&["rules", "disable", &id.to_string()])
        .status
        .success());
    let (d, reason) = g.pre("disabled", "rm -rf build");
    assert_eq!(
        d, "allow",
        "a disabled rule never matches (the test-run decides): {reason}"
    );
}
