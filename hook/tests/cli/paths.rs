//! The hook's normal paths against the built binary: local reads, the escape hatch, outcome reports
//! and the spool.

use crate::common::{Behaviour, FakeDaemon, World};
use serde_json::json;

#[test]
fn read_tool_outside_secrets_is_allowed_locally_and_spooled() {
    let w = World::new();
    let file = format!("{}/src/main.rs", w.work());
    let (d, reason) = w
        .run(&w.pre("Read", json!({"file_path": file})), &[])
        .decision();
    assert_eq!(d, "allow", "{reason}");
    let spool = w.spool();
    assert_eq!(spool.len(), 1, "{spool:?}");
    assert_eq!(spool[0]["kind"], "local_allow");
    assert_eq!(spool[0]["tool_use_id"], "toolu_01");
    assert_eq!(spool[0]["v"], 1);
}

#[test]
fn glob_grep_ls_reads_are_allowed_locally() {
    let w = World::new();
    std::fs::create_dir_all(w.path("work/src")).unwrap();
    for (tool, input) in [
        ("Glob", json!({"pattern": "**/*.rs"})),
        // Grep searches recursively: a subdirectory of the project, or a filter that no secret
        // name matches (`*.rs` would also pick `.env.rs`).
        (
            "Grep",
            json!({"pattern": "fn main", "path": format!("{}/src", w.work())}),
        ),
        ("Grep", json!({"pattern": "fn main", "path": "src"})),
        ("Grep", json!({"pattern": "fn main", "glob": "[!.]*.rs"})),
        ("LS", json!({"path": w.work()})),
    ] {
        let (d, reason) = w.run(&w.pre(tool, input), &[]).decision();
        assert_eq!(d, "allow", "{tool}: {reason}");
    }
}

#[test]
fn secret_reads_go_to_the_daemon_and_deny_without_it() {
    let w = World::new();
    let home = w.path("home").display().to_string();
    std::fs::write(w.path("work/.env"), "TOKEN=x").unwrap();
    std::fs::create_dir_all(w.path("home/.ssh")).unwrap();
    std::fs::write(w.path("home/.ssh/id_ed25519"), "key").unwrap();
    std::os::unix::fs::symlink(w.path("home/.ssh/id_ed25519"), w.path("work/notes.txt")).unwrap();
    for (tool, input) in [
        (
            "Read",
            json!({"file_path": format!("{home}/.ssh/id_ed25519")}),
        ),
        ("Read", json!({"file_path": format!("{}/.env", w.work())})),
        (
            "Read",
            json!({"file_path": format!("{}/notes.txt", w.work())}),
        ),
        (
            "Read",
            json!({"file_path": format!("{}/../home/.ssh/id_ed25519", w.work())}),
        ),
        ("Glob", json!({"pattern": "**/.env*"})),
        (
            "Glob",
            json!({"pattern": "*", "path": format!("{home}/.ssh")}),
        ),
        ("Grep", json!({"pattern": "TOKEN", "path": w.work()})),
        ("Grep", json!({"pattern": "BEGIN", "path": home})),
        ("LS", json!({"path": format!("{home}/.ssh")})),
    ] {
        let reason = w.run(&w.pre(tool, input.clone()), &[]).denied();
        assert!(reason.contains("cmdgate up"), "{tool} {input}: {reason}");
    }
    assert!(w.spool().is_empty());
}

#[test]
fn grep_over_a_tree_that_may_hold_secrets_goes_to_the_daemon() {
    // Nothing secret-named exists here: these are refused by their paths, not by a listing.
    let w = World::new();
    let home = w.path("home").display().to_string();
    std::fs::create_dir_all(w.path("work/src")).unwrap();
    std::fs::create_dir_all(w.path("other")).unwrap();
    for (input, why) in [
        // Above the home's secret directories (~/.ssh, ~/.aws, …).
        (json!({"pattern": "PRIVATE KEY", "path": home}), "secret"),
        (json!({"pattern": "PRIVATE KEY", "path": "~"}), "secret"),
        (json!({"pattern": "PRIVATE KEY", "path": "/"}), "secret"),
        (
            json!({"pattern": "KEY", "path": "../home", "glob": "[!.]*.txt"}),
            "secret",
        ),
        (json!({"pattern": "x", "glob": "*.rs,*.pem"}), "secret"),
        // Outside the project (`run` would be refused sooner: it holds cmdgate's sockets).
        (
            json!({"pattern": "x", "path": w.path("other").display().to_string()}),
            "may hold secret files",
        ),
        (
            json!({"pattern": "x", "path": w.path("run").display().to_string()}),
            "cmdgate's own",
        ),
    ] {
        let reason = w.run(&w.pre("Grep", input.clone()), &[]).denied();
        assert!(reason.contains("cmdgate up"), "{input}: {reason}");
        assert!(reason.contains(why), "{input}: {reason}");
    }
    assert!(w.spool().is_empty());
}

#[test]
fn grep_of_the_project_root_is_judged_by_listing_it() {
    // No path: Claude Code searches the cwd, the project root, where `.env` files live. Its top
    // level is listed by the hook: nothing secret-named there, a read allowed without the daemon.
    let w = World::new();
    std::fs::create_dir_all(w.path("work/src")).unwrap();
    std::fs::create_dir_all(w.path("work/.git")).unwrap();
    std::fs::write(w.path("work/Cargo.toml"), "[package]\n").unwrap();
    let root_searches = [
        json!({"pattern": "DB_PASSWORD"}),
        json!({"pattern": "DB_PASSWORD", "path": w.work()}),
        json!({"pattern": "x", "path": "."}),
        json!({"pattern": "x", "glob": "*.rs"}),
    ];
    for input in &root_searches {
        let (d, reason) = w.run(&w.pre("Grep", input.clone()), &[]).decision();
        assert_eq!(d, "allow", "{input}: {reason}");
        assert!(reason.contains("allowed by the hook"), "{input}: {reason}");
    }
    assert_eq!(w.spool().len(), root_searches.len());

    // A secret-named entry at the top level: routed to the daemon (denied without it), named.
    for (entry, dir) in [
        (".env", false),
        ("id_rsa", false),
        ("tls.key", false),
        (".ssh", true),
    ] {
        let w = World::new();
        let path = w.path(&format!("work/{entry}"));
        if dir {
            std::fs::create_dir_all(&path).unwrap();
        } else {
            std::fs::write(&path, "SECRET=1\n").unwrap();
        }
        for input in [
            json!({"pattern": "DB_PASSWORD"}),
            json!({"pattern": "DB_PASSWORD", "path": w.work()}),
            json!({"pattern": "x", "path": "."}),
        ] {
            let reason = w.run(&w.pre("Grep", input.clone()), &[]).denied();
            assert!(
                reason.contains(&format!("`./{entry}`")) && reason.contains("cmdgate up"),
                "{entry}, {input}: {reason}"
            );
        }
        // A subdirectory stays a read (rule 2).
        std::fs::create_dir_all(w.path("work/src")).unwrap();
        let input = json!({"pattern": "x", "path": "src"});
        let (d, reason) = w.run(&w.pre("Grep", input), &[]).decision();
        assert_eq!(d, "allow", "{entry}: {reason}");
        assert_eq!(w.spool().len(), 1, "only the read is spooled");
    }
}

#[test]
fn escape_hatch_steps_aside_loudly_and_is_spooled() {
    let mut w = World::new();
    w.set("CMDGATE_ESCAPE_HATCH", "incident 42: daemon migration");
    let run = w.run(&w.pre("Bash", json!({"command": "rm notes.txt"})), &[]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let v = run.json();
    assert!(v.get("hookSpecificOutput").is_none(), "no decision: {v}");
    let msg = v["systemMessage"].as_str().unwrap();
    assert!(
        msg.contains("ESCAPE HATCH") && msg.contains("incident 42"),
        "{msg}"
    );
    let spool = w.spool();
    assert_eq!(spool.len(), 1);
    assert_eq!(spool[0]["kind"], "escape_hatch");
    assert_eq!(spool[0]["reason"], "incident 42: daemon migration");
}

#[test]
fn escape_hatch_still_denies_catastrophic_commands() {
    let mut w = World::new();
    w.set("CMDGATE_ESCAPE_HATCH", "incident 42");
    let reason = w
        .run(&w.pre("Bash", json!({"command": ":(){ :|:& };:"})), &[])
        .denied();
    assert!(reason.contains("catastrophic"), "{reason}");
    assert_eq!(w.spool()[0]["verdict"], "deny");
}

#[test]
fn escape_hatch_in_the_command_string_does_not_count() {
    let w = World::new();
    let reason = w
        .run(
            &w.pre(
                "Bash",
                json!({"command": "CMDGATE_ESCAPE_HATCH=1 rm notes.txt"}),
            ),
            &[],
        )
        .denied();
    assert!(reason.contains("cmdgate up"), "{reason}");
}

#[test]
fn post_tool_use_reports_the_outcome_and_prints_nothing() {
    let w = World::new();
    let d = FakeDaemon::start(&w.socket(), Behaviour::Http(204, String::new()));
    let input = w.event(
        "PostToolUseFailure",
        "Bash",
        json!({"command": "false"}),
        json!({"error": "Exit code 1\n", "is_interrupt": false, "duration_ms": 12}),
    );
    let run = w.run(&input, &[]);
    assert_eq!((run.code, run.stdout.as_str()), (Some(0), ""), "{run:?}");
    let reqs = d.requests();
    assert_eq!(reqs.len(), 1);
    assert!(reqs[0].head.starts_with("POST /v1/outcome HTTP/1.1"));
    let body = &reqs[0].body;
    assert_eq!(body["event"], "PostToolUseFailure");
    assert_eq!(body["success"], false);
    assert_eq!(body["exit_code"], 1);
    assert_eq!(body["duration_ms"], 12);
    assert_eq!(body["tool_use_id"], "toolu_01");
    assert!(w.spool().is_empty());
}

#[test]
fn post_tool_use_spools_when_the_daemon_is_down_or_hangs() {
    let w = World::new();
    let input = w.event(
        "PostToolUse",
        "Bash",
        json!({"command": "ls"}),
        json!({"tool_response": {"stdout": "a", "stderr": "", "interrupted": false}}),
    );
    let run = w.run(&input, &[]);
    assert_eq!((run.code, run.stdout.as_str()), (Some(0), ""), "{run:?}");
    let spool = w.spool();
    assert_eq!(spool.len(), 1);
    assert_eq!(spool[0]["kind"], "outcome");
    assert_eq!(spool[0]["report"]["success"], true);
    assert_eq!(spool[0]["report"]["exit_code"], 0);

    let mut w = World::new();
    w.set("CMDGATE_HOOK_OUTCOME_MS", "100");
    let _d = FakeDaemon::start(&w.socket(), Behaviour::Hang);
    let run = w.run(&input, &[]);
    assert_eq!((run.code, run.stdout.as_str()), (Some(0), ""), "{run:?}");
    assert_eq!(w.spool()[0]["kind"], "outcome");
}

#[test]
fn unwritable_spool_does_not_change_the_answer() {
    let mut w = World::new();
    std::fs::write(w.path("not-a-dir"), "").unwrap();
    w.set(
        "CMDGATE_SPOOL_DIR",
        &w.path("not-a-dir/spool").display().to_string(),
    );
    let file = format!("{}/README.md", w.work());
    let run = w.run(&w.pre("Read", json!({"file_path": file})), &[]);
    assert_eq!(run.decision().0, "allow");
    assert!(run.stderr.contains("spool"), "{run:?}");
}

#[test]
fn a_204_without_content_length_is_a_delivered_outcome() {
    // hyper answers 204 without Content-Length; the outcome was taken and must not be spooled too.
    let w = World::new();
    let d = FakeDaemon::start(
        &w.socket(),
        Behaviour::Raw(
            b"HTTP/1.1 204 No Content\r\ndate: Sun, 29 Nov 2026 16:00:00 GMT\r\n\r\n".to_vec(),
        ),
    );
    let input = w.event(
        "PostToolUse",
        "Bash",
        json!({"command": "ls"}),
        json!({"tool_response": {"stdout": "", "stderr": "", "interrupted": false}}),
    );
    let run = w.run(&input, &[]);
    assert_eq!((run.code, run.stdout.as_str()), (Some(0), ""), "{run:?}");
    assert_eq!(d.requests().len(), 1);
    assert!(w.spool().is_empty(), "{:?}", w.spool());
}
