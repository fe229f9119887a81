//! Background mode end to end: a real `cmdgated` holds an "ask" as a pending approval while the real
//! hook binary waits; the real `cmdgate` CLI lists it and answers it from another process.

use std::time::{Duration, Instant};

use cmdgate_tests::gate::Gate;
use serde_json::{json, Value};

/// A tier-2 command of the starter map: it needs a person.
const ASKS: &str = "git push -q origin HEAD:refs/heads/approved";

/// Waits (bounded) until `cmdgate pending` lists the request of `tool_use_id`; returns it.
fn wait_pending(g: &Gate, tool_use_id: &str) -> Value {
    let started = Instant::now();
    loop {
        let list = g.cli_json(&["pending", "--json"]);
        if let Some(p) = list
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["tool_use_id"] == tool_use_id)
        {
            return p.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{tool_use_id} never became pending: {list}\n{}",
            std::fs::read_to_string(g.log_path()).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every decision row of a tool_use_id, oldest first.
fn decisions(g: &Gate, tool_use_id: &str) -> Vec<Value> {
    let mut rows: Vec<Value> = g
        .audit("decision")
        .into_iter()
        .filter(|r| r["tool_use_id"] == tool_use_id)
        .collect();
    rows.sort_by_key(|r| r["id"].as_i64());
    rows
}

fn background(g: &Gate, extra: &str) {
    std::fs::write(
        g.conf.join("config.toml"),
        format!("[approvals]\nmode = \"background\"\n{extra}"),
    )
    .unwrap();
}

#[test]
fn a_pending_approval_answered_from_the_cli_unblocks_the_waiting_hook() {
    let mut g = Gate::new();
    background(&g, "");
    g.init_signed();
    g.start();
    let waiting = g.spawn_pre("bg-1", ASKS, &[]);
    let p = wait_pending(&g, "bg-1");
    assert_eq!(p["command"], ASKS, "{p}");
    assert_eq!(p["rememberable"], true, "{p}");
    assert!(p["reason"].as_str().unwrap().contains("git push"), "{p}");
    let id = p["id"].as_i64().unwrap().to_string();
    let answered = g.cli_json(&["approve", &id, "--note", "ship it", "--json"]);
    assert_eq!(answered["decision"], "allow", "{answered}");
    assert_eq!(answered["delivered"], true, "{answered}");
    let (d, reason) = waiting.join().unwrap();
    assert_eq!(d, "allow", "{reason}");
    assert!(reason.contains("ship it"), "{reason}");
    // The ask, then the person's answer, with the same tool_use_id and the note.
    let rows = decisions(&g, "bg-1");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["decision"], "ask");
    assert_eq!(rows[0]["id"].as_i64(), p["id"].as_i64());
    assert_eq!(rows[1]["decision"], "allow");
    assert_eq!(rows[1]["source"], "human");
    assert_eq!(rows[1]["note"], "ship it");
    // Answered once: a second answer finds nothing, and the list is empty.
    let again = g.cli(&["reject", &id]);
    assert!(!again.status.success());
    assert!(
        again.stderr_text().contains("no pending request"),
        "{}",
        again.stderr_text()
    );
    assert_eq!(g.cli_json(&["pending", "--json"]), json!([]));
    assert!(g.verify()["broken"].is_null());
}

#[test]
fn a_remembered_rejection_answers_the_next_identical_call_without_holding_it() {
    let mut g = Gate::new();
    background(&g, "");
    g.init_signed();
    g.start();
    let waiting = g.spawn_pre("bg-r1", ASKS, &[]);
    let id = wait_pending(&g, "bg-r1")["id"].to_string();
    let answered = g.cli_json(&[
        "reject",
        &id,
        "--remember",
        "--note",
        "no commits from the agent",
        "--json",
    ]);
    let rule = answered["rule"].as_i64().expect("a rule id");
    let (d, reason) = waiting.join().unwrap();
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("no commits from the agent"), "{reason}");
    // The next identical call: denied by the rule at once (never held).
    let (d, reason) = g.pre("bg-r2", ASKS);
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains(&format!("rule #{rule}")), "{reason}");
    assert!(reason.contains("no commits from the agent"), "{reason}");
    let rows = decisions(&g, "bg-r2");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["source"], "remembered");
}

#[test]
fn an_unanswered_request_is_denied_at_its_deadline_and_cannot_be_answered_late() {
    let mut g = Gate::new();
    background(&g, "wait_ms = 1500\n");
    g.init_signed();
    g.start();
    // Not polled through `cmdgate pending`: on a loaded machine the short window could pass
    // before the CLI looks. The pending id is the ask's audit row.
    let (d, reason) = g.pre("bg-t", ASKS);
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("nobody answered"), "{reason}");
    let rows = decisions(&g, "bg-t");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["decision"], "ask");
    assert_eq!(rows[1]["decision"], "deny");
    assert_eq!(rows[1]["source"], "fail_closed");
    let id = rows[0]["id"].to_string();
    assert!(
        reason.contains(&format!("pending approval #{id}")),
        "{reason}"
    );
    let late = g.cli(&["approve", &id]);
    assert!(!late.status.success(), "a late approval was taken");
}

#[test]
fn a_restart_denies_what_waits_and_never_resurrects_it_but_keeps_remembered_rules() {
    let mut g = Gate::new();
    background(&g, "");
    g.init_signed();
    g.start();
    // A remembered approval with a note, made while the request waited.
    let waiting = g.spawn_pre("bg-k1", ASKS, &[]);
    let id = wait_pending(&g, "bg-k1")["id"].to_string();
    let answered = g.cli_json(&[
        "approve",
        &id,
        "--remember",
        "--note",
        "empty commits are fine",
        "--json",
    ]);
    let rule = answered["rule"].as_i64().expect("a rule id");
    assert_eq!(waiting.join().unwrap().0, "allow");
    // Another one is waiting when the daemon stops: its hook gets a deny, not a hang.
    let other = "git push -q origin HEAD:refs/heads/other";
    let waiting = g.spawn_pre("bg-k2", other, &[]);
    let stale = wait_pending(&g, "bg-k2")["id"].to_string();
    g.stop();
    let (d, reason) = waiting.join().unwrap();
    assert_eq!(d, "deny", "{reason}");
    g.start();
    assert_eq!(g.cli_json(&["pending", "--json"]), json!([]));
    let late = g.cli(&["approve", &stale]);
    assert!(
        !late.status.success(),
        "a request from before the restart was answered"
    );
    assert!(
        late.stderr_text().contains("restart"),
        "{}",
        late.stderr_text()
    );
    // The rule and its note survived; the identical command is allowed without a person.
    let (d, reason) = g.pre("bg-k3", ASKS);
    assert_eq!(d, "allow", "{reason}");
    assert!(
        reason.contains(&format!("(remembered operator decision, rule #{rule},")),
        "{reason}"
    );
    let listed = g.cli(&["rules", "list", "--json"]).stdout_text();
    assert!(listed.contains("empty commits are fine"), "{listed}");
}

#[test]
fn the_session_overrides_the_configured_mode_both_ways() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    // Configured interactive (the default): the ask goes back at once.
    let (d, reason) = g.pre("int-1", ASKS);
    assert_eq!(d, "ask", "{reason}");
    // This session asked for background mode: held.
    let waiting = g.spawn_pre("int-2", ASKS, &[("CMDGATE_APPROVAL_MODE", "background")]);
    let id = wait_pending(&g, "int-2")["id"].to_string();
    g.cli_json(&["reject", &id, "--json"]);
    assert_eq!(waiting.join().unwrap().0, "deny");
    g.stop();
    background(&g, "");
    g.start();
    let (d, reason) = g
        .spawn_pre("int-3", ASKS, &[("CMDGATE_APPROVAL_MODE", "interactive")])
        .join()
        .unwrap();
    assert_eq!(d, "ask", "{reason}");
    // A typo in the override is refused, never guessed.
    let (d, reason) = g
        .spawn_pre("int-4", ASKS, &[("CMDGATE_APPROVAL_MODE", "backgroud")])
        .join()
        .unwrap();
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("CMDGATE_APPROVAL_MODE"), "{reason}");
}

#[test]
fn a_longer_hook_deadline_is_installed_with_a_timeout_above_it() {
    let g = Gate::new();
    let proj = g.proj.to_str().unwrap();
    let hook = g.hook.to_str().unwrap();
    let installed = g.cli_json(&[
        "hook",
        "install",
        "--project",
        proj,
        "--hook",
        hook,
        "--deadline-ms",
        "300000",
        "--json",
    ]);
    assert_eq!(installed["timeout_s"], 305, "{installed}");
    assert!(
        installed["hook"]
            .as_str()
            .unwrap()
            .ends_with("cmdgate-hook --deadline-ms 300000"),
        "{installed}"
    );
    // A timeout the deadline would outlast is refused: the call would run unchecked.
    let short = g.cli(&[
        "hook",
        "install",
        "--project",
        proj,
        "--hook",
        hook,
        "--deadline-ms",
        "300000",
        "--timeout",
        "60",
    ]);
    assert!(!short.status.success());
    assert!(
        short.stderr_text().contains("too short"),
        "{}",
        short.stderr_text()
    );
}
