//! Every failure mode of the hook ends in a decision: deny JSON and exit 0 for PreToolUse (or for an
//! input whose event is unknown), exit 0 and no output for the Post events. Never a fail-open exit.

use crate::common::{decision, Behaviour, FakeDaemon, World};
use serde_json::json;

fn rm() -> serde_json::Value {
    json!({"command": "rm notes.txt", "description": "delete"})
}

#[test]
fn daemon_absent_denies_with_how_to_start_it() {
    let w = World::new();
    let reason = w.run(&w.pre("Bash", rm()), &[]).denied();
    assert!(reason.contains("`rm notes.txt`"), "{reason}");
    assert!(reason.contains("not running"), "{reason}");
    assert!(reason.contains("cmdgate up"), "{reason}");
    assert!(
        reason.contains("Read/Glob/Grep/LS"),
        "what would be allowed: {reason}"
    );
}

#[test]
fn daemon_hanging_is_cut_by_the_deadline() {
    let mut w = World::new();
    w.set("CMDGATE_HOOK_DEADLINE_MS", "400");
    let _d = FakeDaemon::start(&w.socket(), Behaviour::Hang);
    let reason = w.run(&w.pre("Bash", rm()), &[]).denied();
    assert!(
        reason.contains("did not answer in time") || reason.contains("deadline"),
        "{reason}"
    );
}

#[test]
fn deadline_from_argv() {
    let w = World::new();
    let _d = FakeDaemon::start(&w.socket(), Behaviour::Hang);
    let reason = w
        .run(&w.pre("Bash", rm()), &["--deadline-ms", "300"])
        .denied();
    assert!(
        reason.contains("did not answer in time") || reason.contains("deadline"),
        "{reason}"
    );
}

#[test]
fn daemon_garbage_denies() {
    for garbage in [
        &b"garbage\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"v\":1",
        b"",
    ] {
        let w = World::new();
        let _d = FakeDaemon::start(&w.socket(), Behaviour::Raw(garbage.to_vec()));
        let reason = w.run(&w.pre("Bash", rm()), &[]).denied();
        assert!(reason.contains("no usable answer"), "{reason}");
    }
}

#[test]
fn daemon_wrong_answers_deny() {
    let bad_bodies = [
        (500, "internal".to_string()),
        (
            200,
            json!({"v": 2, "decision": "allow", "reason": "", "source": "learned"}).to_string(),
        ),
        (
            200,
            json!({"v": 1, "decision": "yes", "reason": "", "source": "learned"}).to_string(),
        ),
        (200, json!({"v": 1, "decision": "allow"}).to_string()),
        (200, "x".repeat(300 * 1024)),
    ];
    for (status, body) in bad_bodies {
        let w = World::new();
        let _d = FakeDaemon::start(&w.socket(), Behaviour::Http(status, body.clone()));
        let reason = w.run(&w.pre("Bash", rm()), &[]).denied();
        assert!(
            reason.contains("no usable answer"),
            "{status} {}: {reason}",
            &body[..body.len().min(80)]
        );
    }
}

#[test]
fn daemon_decisions_pass_through_with_provenance() {
    for verdict in ["allow", "deny", "ask"] {
        let w = World::new();
        let d = FakeDaemon::start(
            &w.socket(),
            Behaviour::Http(200, decision(verdict, "because")),
        );
        let run = w.run(&w.pre("Bash", rm()), &[]);
        let (got, reason) = run.decision();
        assert_eq!(got, verdict);
        assert!(
            reason.contains("because")
                && reason.contains("tier map revision 7")
                && reason.contains("audit #42"),
            "{reason}"
        );
        let reqs = d.requests();
        assert_eq!(reqs.len(), 1);
        assert!(
            reqs[0].head.starts_with("POST /v1/decide HTTP/1.1"),
            "{}",
            reqs[0].head
        );
        let body = &reqs[0].body;
        assert_eq!(body["v"], 1);
        assert_eq!(body["event"], "PreToolUse");
        assert_eq!(body["session_id"], "sess-1");
        assert_eq!(body["tool_use_id"], "toolu_01");
        assert_eq!(body["tool_input"]["command"], "rm notes.txt");
        assert_eq!(body["project_dir"], w.work());
    }
}

#[test]
fn huge_input_denies() {
    let w = World::new();
    let big = json!({"command": format!("echo {}", "a".repeat(5 * 1024 * 1024))});
    let reason = w.run(&w.pre("Bash", big), &[]).denied();
    assert!(reason.contains("larger than"), "{reason}");
}

#[test]
fn bad_json_inputs_deny() {
    let w = World::new();
    let dup = String::from_utf8(w.pre("Bash", json!({"command": "ls"})))
        .unwrap()
        .replace(
            r#""command":"ls""#,
            r#""command":"ls","command":"rm -rf notes.txt""#,
        );
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let mut bad_utf8 = w.pre("Bash", json!({"command": "ls XX"}));
    let at = bad_utf8.windows(2).position(|p| p == b"XX").unwrap();
    bad_utf8[at] = 0xff;
    for (name, input) in [
        ("duplicate keys", dup.into_bytes()),
        ("deep nesting", deep.into_bytes()),
        ("invalid utf-8", bad_utf8),
        ("not json", b"PreToolUse please".to_vec()),
        ("empty", Vec::new()),
        ("array", b"[1,2]".to_vec()),
        (
            "trailing",
            [
                w.pre("Read", json!({"file_path": "/etc/hostname"})),
                b"{}".to_vec(),
            ]
            .concat(),
        ),
    ] {
        let run = w.run(&input, &[]);
        let reason = run.denied();
        assert!(
            reason.contains("could not decide safely"),
            "{name}: {reason}"
        );
    }
}

#[test]
fn missing_and_mistyped_fields_deny() {
    let w = World::new();
    let full: serde_json::Value =
        serde_json::from_slice(&w.pre("Read", json!({"file_path": "/etc/hostname"}))).unwrap();
    for field in [
        "session_id",
        "cwd",
        "hook_event_name",
        "tool_name",
        "tool_input",
        "tool_use_id",
    ] {
        let mut v = full.clone();
        v.as_object_mut().unwrap().remove(field);
        let reason = w.run(&serde_json::to_vec(&v).unwrap(), &[]).denied();
        assert!(reason.contains(field), "{field}: {reason}");
        let mut v = full.clone();
        v[field] = json!(17);
        w.run(&serde_json::to_vec(&v).unwrap(), &[]).denied();
    }
}

#[test]
fn unknown_event_and_unknown_tool_deny() {
    let w = World::new();
    let reason = w
        .run(
            &w.event("Stop", "Bash", json!({"command": "ls"}), json!({})),
            &[],
        )
        .denied();
    assert!(reason.contains("unsupported hook event"), "{reason}");
    let reason = w
        .run(
            &w.pre("mcp__db__drop_table", json!({"table": "users"})),
            &[],
        )
        .denied();
    assert!(
        reason.contains("mcp__db__drop_table") && reason.contains("cmdgate up"),
        "{reason}"
    );
}

#[test]
fn stdin_never_closed_is_cut_by_the_deadline() {
    let mut w = World::new();
    w.set("CMDGATE_HOOK_DEADLINE_MS", "300");
    let run = crate::common::run_hook(
        &w.env,
        b"{\"session_id\":",
        &[],
        crate::common::StdinEnd::HoldOpen,
    );
    let reason = run.denied();
    assert!(reason.contains("deadline"), "{reason}");
}

#[test]
fn bad_configuration_denies() {
    let mut w = World::new();
    w.set("CMDGATE_HOOK_DEADLINE_MS", "soon");
    let reason = w
        .run(&w.pre("Read", json!({"file_path": "/etc/hostname"})), &[])
        .denied();
    assert!(reason.contains("CMDGATE_HOOK_DEADLINE_MS"), "{reason}");
    let w = World::new();
    let reason = w
        .run(
            &w.pre("Read", json!({"file_path": "/etc/hostname"})),
            &["--allow-all"],
        )
        .denied();
    assert!(reason.contains("unknown argument"), "{reason}");
}

#[test]
fn a_panic_still_denies_and_exits_zero() {
    let mut w = World::new();
    w.set("CMDGATE_HOOK_FAULT", "panic");
    let run = w.run(&w.pre("Read", json!({"file_path": "/etc/hostname"})), &[]);
    let reason = run.denied();
    assert!(reason.contains("internal error"), "{reason}");
    assert!(run.stderr.contains("injected fault"), "{run:?}");
    assert_eq!(run.stdout.lines().count(), 1, "exactly one answer: {run:?}");
}

#[test]
fn a_crash_by_a_fatal_signal_still_denies_and_exits_zero() {
    // A stack overflow (SIGSEGV, handled on the alternate stack) and an abort (SIGABRT): without
    // the handler the process would die by the signal, which Claude Code does not read as a deny.
    for fault in ["stack", "abort"] {
        let mut w = World::new();
        w.set("CMDGATE_HOOK_FAULT", fault);
        let run = w.run(&w.pre("Read", json!({"file_path": "/etc/hostname"})), &[]);
        assert_eq!(run.code, Some(0), "{fault}: {run:?}");
        let reason = run.denied();
        assert!(reason.contains("crashed"), "{fault}: {reason}");
        assert_eq!(
            run.stdout.lines().count(),
            1,
            "{fault}: one answer: {run:?}"
        );
    }
}

#[test]
fn a_crash_in_a_post_event_prints_nothing() {
    let mut w = World::new();
    w.set("CMDGATE_HOOK_FAULT", "abort");
    let run = w.run(
        &w.event(
            "PostToolUse",
            "Bash",
            json!({"command": "ls"}),
            json!({"tool_response": {}}),
        ),
        &[],
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "", "{run:?}");
}

#[test]
fn a_panic_in_a_post_event_prints_nothing() {
    let mut w = World::new();
    w.set("CMDGATE_HOOK_FAULT", "panic");
    let run = w.run(
        &w.event(
            "PostToolUse",
            "Bash",
            json!({"command": "ls"}),
            json!({"tool_response": {}}),
        ),
        &[],
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "", "{run:?}");
}

#[test]
fn unparseable_post_event_prints_nothing() {
    let w = World::new();
    let input =
        String::from_utf8(w.event("PostToolUse", "Bash", json!({"command": "ls"}), json!({})))
            .unwrap()
            .replace(r#""tool_use_id":"toolu_01""#, r#""tool_use_id":5"#);
    let run = w.run(input.as_bytes(), &[]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "", "{run:?}");
}
