//! The circuit breaker and the learned allowlist end to end, beyond daemon_e2e.rs: a tripped
//! breaker survives a restart and `breaker status` shows it, a session's breaker is reset alone;
//! promotion after K = 3 clean, successful mirrored runs (the next call of a command that runs
//! nothing the agent wrote skips the mirror),
//! demotion, provenance; a remembered rejection beats a learned entry; tier 3 is never learned or
//! approved into an allow; nothing is learned while the breaker is open; a learned entry stays in
//! its project; a map revision that reclassifies a command demotes its entry, one that does not
//! keeps it.

// The harness serves several test files; this one uses part of it.
use cmdgate_tests::gate::Gate;
use serde_json::{json, Value};

/// Unknown to the starter map (so test-run), clean in the mirror, one canonical key.
const BUILD: &str = "mkdir -p build && touch build/stamp";

fn config(g: &Gate, toml: &str) {
    std::fs::write(g.conf.join("config.toml"), toml).unwrap();
}

/// The rules, whether `GET /admin/rules` answers a list or `{"revision": N, "rules": [...]}`.
fn rules(g: &Gate) -> Vec<Value> {
    let listed = g.cli_json(&["rules", "list", "--json"]);
    let list = match &listed {
        Value::Array(_) => &listed,
        _ => &listed["rules"],
    };
    list.as_array()
        .unwrap_or_else(|| panic!("no rule list in {listed}"))
        .clone()
}

fn learned_rules(g: &Gate) -> Vec<Value> {
    rules(g)
        .into_iter()
        .filter(|r| r["kind"] == "learned")
        .collect()
}

/// The decision row's source, and whether it carries a test-run.
fn source_and_sandbox(g: &Gate, id: &str) -> (String, bool) {
    let row = g
        .decision_row(id)
        .unwrap_or_else(|| panic!("no decision row for {id}"));
    (
        row["source"].as_str().unwrap_or_default().to_owned(),
        !row["sandbox"].is_null(),
    )
}

/// One clean mirrored run of `command` that exits 0 (with K = 1 this promotes it); Claude Code's
/// outcome reports the client it ran.
fn earn(g: &Gate, id: &str, command: &str) {
    let rewritten = g.pre_rewrite(id, command);
    assert_eq!(source_and_sandbox(g, id), ("sandbox".into(), true));
    let ran = g.shell(&rewritten);
    assert_eq!(ran.status.code(), Some(0), "{}", ran.stderr_text());
    g.post(id, &rewritten, true);
}

/// A mirrored run that is rolled back (a dirty run: the breaker counts it).
fn dirty(g: &Gate, id: &str) {
    let ran = g.shell(&g.pre_rewrite(id, "rm tracked.txt"));
    assert_ne!(ran.status.code(), Some(0), "{}", ran.stderr_text());
}

/// The `run` row of a call.
fn run_row_id(g: &Gate, id: &str) -> i64 {
    g.audit("run")
        .iter()
        .find(|r| r["tool_use_id"] == id)
        .unwrap_or_else(|| panic!("no run row for {id}"))["id"]
        .as_i64()
        .unwrap()
}

fn add_rule(g: &Gate, kind: &str, command: &str) {
    let proj = g.proj.to_str().unwrap().to_owned();
    let mut args = vec!["rules", "add", "--kind", kind, "--project", &proj, "--json"];
    args.extend(command.split(' '));
    let done = g.cli(&args);
    assert!(
        done.status.success(),
        "rules add {kind} {command}: {}\n{}",
        done.stdout_text(),
        done.stderr_text()
    );
}

fn session_breaker(g: &Gate, session: &str) -> Option<Value> {
    let status = g.cli_json(&["breaker", "status", "--json"]);
    status["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("{status}"))
        .iter()
        .find(|s| s["session"] == session)
        .cloned()
}

#[test]
fn a_tripped_breaker_survives_a_restart_shows_in_status_and_resets_by_session() {
    let mut g = Gate::new();
    config(&g, "[breaker]\nthreshold = 2\n");
    g.init_signed();
    g.start();
    let before = session_breaker(&g, "sess-1");
    assert!(before.is_none(), "no breaker before any signal: {before:?}");
    // A dirty (rolled-back) run weighs 2: the session's breaker trips.
    dirty(&g, "dirty");
    let b = session_breaker(&g, "sess-1").expect("the tripped session is listed");
    assert_eq!(b["state"]["state"], "open", "{b}");
    assert_eq!(b["scope"], "session:sess-1", "{b}");
    assert!(b["score"].as_u64().unwrap() >= 2, "{b}");
    let opened = b["opened_at_ms"].as_u64().expect("when it opened");
    assert!(
        b["half_open_at_ms"].as_u64().expect("when it half-opens") > opened,
        "{b}"
    );
    assert_eq!(b["last_transition"]["transition"]["transition"], "tripped");
    let global = g.cli_json(&["breaker", "status", "--json"])["global"].clone();
    assert_eq!(global["state"]["state"], "closed", "{global}");
    let text = g.cli(&["breaker", "status"]);
    assert!(text.status.success());
    assert!(
        text.stdout_text().contains("session:sess-1") && text.stdout_text().contains("half-opens"),
        "{}",
        text.stdout_text()
    );

    // A restart keeps it open: still read-only.
    g.stop();
    g.start();
    let (d, reason) = g.pre("after-restart", "touch ok.txt");
    assert_eq!(d, "deny", "{reason}");
    assert!(
        reason.contains("circuit breaker") && reason.contains("cmdgate breaker reset"),
        "the reason says why and how the operator resets it: {reason}"
    );
    let (d, reason) = g.pre("read-after-restart", "ls");
    assert_eq!(d, "allow", "reads still run: {reason}");
    let b = session_breaker(&g, "sess-1").expect("still listed after the restart");
    assert_eq!(b["state"]["state"], "open", "{b}");
    assert_eq!(b["opened_at_ms"].as_u64(), Some(opened), "{b}");
    assert_eq!(b["last_transition"]["transition"]["transition"], "tripped");

    // A session that does not exist is not reset, and says so.
    let none = g.cli(&["breaker", "reset", "--session", "no-such-session"]);
    assert!(!none.status.success(), "{}", none.stdout_text());
    let (d, _) = g.pre("still-open", "touch ok.txt");
    assert_eq!(d, "deny");

    let reset = g.cli_json(&["breaker", "reset", "--session", "sess-1", "--json"]);
    assert_eq!(reset["reset"], json!(["session:sess-1"]), "{reset}");
    let (d, reason) = g.pre("after-reset", "touch ok.txt");
    assert_eq!(d, "allow", "{reason}");
    let b = session_breaker(&g, "sess-1").expect("listed with its last transition");
    assert_eq!(b["state"]["state"], "closed", "{b}");
    assert_eq!(b["last_transition"]["transition"]["transition"], "reset");

    // Trip and reset are audited as breaker rows, and survive as such.
    let rows = g.audit("breaker");
    let says = |what: &str| {
        rows.iter()
            .any(|r| r["decision"].as_str().unwrap_or_default().contains(what))
    };
    assert!(says("tripped") && says("reset"), "{rows:?}");
    // `--global` names the global breaker alone.
    let reset = g.cli_json(&["breaker", "reset", "--global", "--json"]);
    assert_eq!(reset["reset"], json!(["global"]), "{reset}");
}

#[test]
fn three_clean_runs_and_successes_promote_then_a_failure_demotes() {
    let mut g = Gate::new();
    // The default K = 3.
    g.init_signed();
    g.start();
    let mut decisions = Vec::new();
    for i in 1..=3 {
        let id = format!("run-{i}");
        assert!(learned_rules(&g).is_empty(), "promoted before K: {i}");
        earn(&g, &id, BUILD);
        decisions.push(run_row_id(&g, &id));
    }
    // The K+1th call is allowed as learned, without the mirror: `mkdir` and `touch` of project
    // paths run nothing the agent could have changed.
    let (d, reason) = g.pre("run-4", BUILD);
    assert_eq!(d, "allow", "{reason}");
    assert_eq!(
        source_and_sandbox(&g, "run-4"),
        ("learned".into(), false),
        "the K+1th call must not be test-run: {reason}"
    );
    // Provenance: the three runs that earned it (each a clean run and a success).
    let learned = learned_rules(&g);
    assert_eq!(learned.len(), 1, "{learned:?}");
    let provenance: Vec<i64> = learned[0]["provenance"]
        .as_array()
        .expect("provenance listed")
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(provenance.len(), 6, "{provenance:?}");
    for id in &decisions {
        assert_eq!(
            provenance.iter().filter(|p| *p == id).count(),
            2,
            "{id} twice in {provenance:?}"
        );
    }
    let promoted = g.audit("learn");
    assert!(
        promoted.iter().any(|r| r["decision"] == "promoted"),
        "{promoted:?}"
    );

    // The learned run fails for real: demoted, and the next call runs in the mirror again.
    g.post("run-4", BUILD, false);
    let (d, reason) = g.pre("run-5", BUILD);
    assert_eq!(d, "allow", "{reason}");
    assert_eq!(source_and_sandbox(&g, "run-5"), ("sandbox".into(), true));
    let learned = learned_rules(&g);
    assert!(
        learned.iter().all(|r| r["enabled"] == false),
        "the demoted entry is disabled, kept with its provenance: {learned:?}"
    );
    assert!(g.audit("learn").iter().any(|r| r["decision"] == "demoted"));
}

#[test]
fn a_remembered_rejection_beats_a_learned_entry() {
    let mut g = Gate::new();
    config(&g, "[promotion]\nk = 1\n");
    g.init_signed();
    g.start();
    earn(&g, "earn", BUILD);
    let (_, reason) = g.pre("learned", BUILD);
    assert_eq!(source_and_sandbox(&g, "learned").0, "learned", "{reason}");
    add_rule(&g, "reject", BUILD);
    let (d, reason) = g.pre("rejected", BUILD);
    assert_eq!(d, "deny", "{reason}");
    assert_eq!(
        source_and_sandbox(&g, "rejected"),
        ("remembered".into(), false)
    );
    // The rejection also demotes the learned entry: removing the rejection does not bring it back.
    assert!(
        learned_rules(&g).iter().all(|r| r["enabled"] == false),
        "{:?}",
        learned_rules(&g)
    );
}

#[test]
fn tier_3_is_never_learned_or_approved_into_an_allow() {
    let mut g = Gate::new();
    config(&g, "[promotion]\nk = 1\n");
    g.init_signed();
    g.start();
    // `git clean -fdx *` is tier 3 in the starter map; `shutdown *` too.
    for (i, command) in ["git clean -fdx build", "shutdown now"].iter().enumerate() {
        for round in 0..2 {
            let id = format!("t3-{i}-{round}");
            let (d, reason) = g.pre(&id, command);
            assert_eq!(d, "deny", "{command}: {reason}");
            assert!(!source_and_sandbox(&g, &id).1, "never test-run");
            // Even if the agent claims it ran fine.
            g.post(&id, command, true);
        }
        add_rule(&g, "approve", command);
        let id = format!("t3-{i}-approved");
        let (d, reason) = g.pre(&id, command);
        assert_eq!(
            d, "deny",
            "a remembered approval never allows tier 3: {reason}"
        );
        let (source, _) = source_and_sandbox(&g, &id);
        assert_ne!(source, "remembered", "{reason}");
    }
    assert!(learned_rules(&g).is_empty(), "{:?}", learned_rules(&g));
}

#[test]
fn nothing_is_learned_while_the_breaker_is_open() {
    let mut g = Gate::new();
    config(&g, "[promotion]\nk = 1\n[breaker]\nthreshold = 2\n");
    g.init_signed();
    g.start();
    let clean = g.pre_rewrite("clean", BUILD);
    // The breaker trips before the clean run is redeemed.
    dirty(&g, "dirty");
    assert_eq!(
        session_breaker(&g, "sess-1").unwrap()["state"]["state"],
        "open"
    );
    // The ticket was issued before: it no longer runs.
    let refused = g.shell(&clean);
    assert_eq!(
        refused.status.code(),
        Some(126),
        "{}",
        refused.stderr_text()
    );
    assert!(
        refused.stderr_text().contains("circuit breaker"),
        "{}",
        refused.stderr_text()
    );
    assert!(!g.proj.join("build").exists());
    assert!(learned_rules(&g).is_empty(), "{:?}", learned_rules(&g));
    g.cli_json(&["breaker", "reset", "--json"]);
    let (d, reason) = g.pre("after", BUILD);
    assert_eq!(d, "allow", "{reason}");
    assert_eq!(source_and_sandbox(&g, "after"), ("sandbox".into(), true));
}

#[test]
fn a_command_learned_in_one_project_is_not_learned_in_another() {
    let mut g = Gate::new();
    config(&g, "[promotion]\nk = 1\n");
    g.init_signed();
    // Project B: a second git checkout with its own signed map.
    let b = g.other_project();
    g.start();
    earn(&g, "in-a", BUILD);
    let (_, reason) = g.pre("again-in-a", BUILD);
    assert_eq!(
        source_and_sandbox(&g, "again-in-a").0,
        "learned",
        "{reason}"
    );
    let (d, reason) = g.pre_in(&b, "first-in-b", BUILD);
    assert_eq!(d, "allow", "{reason}");
    assert_eq!(
        source_and_sandbox(&g, "first-in-b"),
        ("sandbox".into(), true),
        "B's first call must be test-run: {reason}"
    );
}

#[test]
fn a_map_revision_that_reclassifies_a_learned_command_demotes_it() {
    let mut g = Gate::new();
    config(&g, "[promotion]\nk = 1\n");
    g.init_signed();
    g.start();
    earn(&g, "earn", BUILD);
    let map = g.proj.join("CLAUDE_CMDS.md");
    // A revision that does not reclassify it (a new tier-0 entry): the entry stays.
    let text = std::fs::read_to_string(&map).unwrap();
    std::fs::write(&map, text.replacen("- `pwd`", "- `pwd`\n- `whoami`", 1)).unwrap();
    g.resign();
    let (d, reason) = g.pre("unrelated-edit", BUILD);
    assert_eq!(d, "allow", "{reason}");
    assert!(reason.contains("revision 2"), "{reason}");
    assert_eq!(
        source_and_sandbox(&g, "unrelated-edit"),
        ("learned".into(), false)
    );
    // A revision that puts `touch` in tier 2: a person decides, the learned entry is demoted.
    let text = std::fs::read_to_string(&map).unwrap();
    std::fs::write(
        &map,
        text.replacen("- `git push *`", "- `git push *`\n- `touch *`", 1),
    )
    .unwrap();
    g.resign();
    let (d, reason) = g.pre("reclassified", BUILD);
    assert_eq!(d, "ask", "{reason}");
    assert!(
        learned_rules(&g).iter().all(|r| r["enabled"] == false),
        "{:?}",
        learned_rules(&g)
    );
    assert!(
        g.audit("learn").iter().any(|r| r["decision"] == "demoted"),
        "the demotion is audited"
    );
}
