//! The daemon under load: 64 concurrent hook processes, every call answered and audited, the chain
//! intact; and a `kill -9` in the middle of that load: after a restart no acknowledged decision is
//! missing and the chain still verifies.

use std::io::Write;
use std::process::{Child, Stdio};
use std::time::Duration;

use cmdgate_tests::gate::{audit_id, Gate};
use serde_json::{json, Value};

const CALLS: usize = 64;

fn command(i: usize) -> String {
    match i % 2 {
        0 => format!("touch file{i}.txt"),
        _ => format!("cp tracked.txt copy{i}.txt"),
    }
}

/// Starts one hook process per call, all at once; returns them with their tool_use_ids.
fn launch(g: &Gate, prefix: &str) -> Vec<(String, Child)> {
    (0..CALLS)
        .map(|i| {
            let id = format!("{prefix}-{i}");
            let event = json!({
                "session_id": format!("load-{}", i % 4),
                "transcript_path": g.dir.path().join("t.jsonl"),
                "cwd": g.proj,
                "permission_mode": "default",
                "hook_event_name": "PreToolUse",
                "tool_name": "Bash",
                "tool_input": {"command": command(i)},
                "tool_use_id": id,
            });
            let mut child = g
                .hook_command()
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn the hook");
            child
                .stdin
                .take()
                .unwrap()
                .write_all(event.to_string().as_bytes())
                .unwrap();
            (id, child)
        })
        .collect()
}

/// Waits for every hook; returns (tool_use_id, decision, reason).
fn answers(children: Vec<(String, Child)>) -> Vec<(String, String, String)> {
    children
        .into_iter()
        .map(|(id, child)| {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "hook {id} exited {:?}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!(
                    "hook {id} printed no JSON ({e}): {:?}",
                    String::from_utf8_lossy(&out.stdout)
                )
            });
            let h = &v["hookSpecificOutput"];
            (
                id,
                h["permissionDecision"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                h["permissionDecisionReason"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

#[test]
fn sixty_four_concurrent_hooks_are_all_answered_and_audited() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    let got = answers(launch(&g, "load"));
    let rows = g.audit("decision");
    for (id, decision, reason) in &got {
        assert!(
            ["allow", "deny", "ask"].contains(&decision.as_str()),
            "{id}: {decision} {reason}"
        );
        let aid = audit_id(reason)
            .unwrap_or_else(|| panic!("{id} was not answered by the daemon: {reason}"));
        let row = rows
            .iter()
            .find(|r| r["tool_use_id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} is not audited"));
        assert_eq!(row["id"].as_i64(), Some(aid));
        // An allow here is the rewrite into a mirrored run (audited as `run`).
        let audited = if decision == "allow" { "run" } else { decision };
        assert_eq!(row["decision"], audited);
    }
    assert_eq!(
        got.iter().filter(|a| a.1 == "allow").count(),
        CALLS,
        "every call is routed to a mirrored run: {got:?}"
    );
    let report = g.verify();
    assert!(report["broken"].is_null(), "{report}");
    assert!(
        !g.proj.join("file0.txt").exists(),
        "nothing ran before a client redeemed its ticket"
    );
}

#[test]
fn kill_9_under_load_loses_no_acknowledged_decision() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    let mut children = launch(&g, "crash");
    // Let some calls be answered, then kill the daemon while the rest are in flight.
    loop {
        let mut done = 0;
        for (_, c) in children.iter_mut() {
            if c.try_wait().unwrap().is_some() {
                done += 1;
            }
        }
        if done >= CALLS / 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    g.kill9();
    let got = answers(children);
    let acknowledged: Vec<(&String, i64)> = got
        .iter()
        .filter_map(|(id, _, reason)| audit_id(reason).map(|a| (id, a)))
        .collect();
    assert!(!acknowledged.is_empty());
    // Every call got an answer, and none of the unacknowledged ones is an allow.
    for (id, decision, reason) in &got {
        if audit_id(reason).is_none() {
            assert_eq!(
                decision, "deny",
                "{id} without the daemon must be denied: {reason}"
            );
        }
    }
    g.start();
    let rows = g.audit("decision");
    for (id, aid) in &acknowledged {
        let row = rows
            .iter()
            .find(|r| r["id"].as_i64() == Some(*aid))
            .unwrap_or_else(|| {
                panic!("acknowledged audit #{aid} ({id}) is missing after the crash")
            });
        assert_eq!(row["tool_use_id"], id.as_str());
    }
    let report = g.verify();
    assert!(report["broken"].is_null(), "{report}");
    // And the restarted daemon keeps deciding and appending to the same chain.
    let (d, reason) = g.pre("after-restart", "touch after.txt");
    assert_eq!(d, "allow", "{reason}");
    assert!(g.verify()["broken"].is_null());
}
