//! The hook under the real Claude Code CLI, with no daemon at all: reads run, everything else is
//! denied with a reason that reaches the model, and the workspace is untouched; outcomes of what ran
//! are spooled; the escape hatch steps aside but still stops a catastrophic command; with a test peer
//! on the daemon's socket, its allow/ask/deny reach the CLI and outcomes reach the peer.

use cmdgate_tests::bins::cargo_bin;
use cmdgate_tests::claude::Session;
use cmdgate_tests::fake_api::{tool_use_id, FakeApi, Step};

/// A session with the hook installed and the daemon's socket pointing at nothing.
fn session() -> Session {
    let hook = cargo_bin("cmdgate-hook", "cmdgate-hook");
    let mut s = Session::new();
    s.install_hooks(&hook, &[]);
    s.set_env(
        "CMDGATE_SOCKET",
        &s.scratch("no-daemon.sock").display().to_string(),
    );
    s.set_env(
        "CMDGATE_SPOOL_DIR",
        &s.scratch("spool").display().to_string(),
    );
    s.set_env(
        "CMDGATE_CONFIG_DIR",
        &s.scratch("config").display().to_string(),
    );
    s
}

#[test]
fn without_a_daemon_reads_run_and_everything_else_is_denied_with_a_reason() {
    let s = session();
    let notes = s.workspace().join("notes.txt");
    std::fs::write(&notes, "precious notes\n").unwrap();
    let notes_path = notes.display().to_string();
    let created = s.workspace().join("new.txt");
    let api = FakeApi::start(vec![
        Step::read(&notes_path),
        Step::bash("rm notes.txt"),
        Step::write(&created.display().to_string(), "x"),
        Step::edit(&notes_path, "precious", "lost"),
        Step::bash("cat notes.txt | grep -c precious"),
        Step::bash("ls no-such-dir"),
    ]);
    let run = s.run(&api, "tidy up the workspace");
    println!("claude -p result: {}", run.result);
    println!("tool results:\n{}", api.transcript());
    eprintln!("claude stderr:\n{}", run.done.stderr_text());
    assert!(
        run.done.status.success(),
        "claude exited {:?}",
        run.done.status
    );

    let read = api.result_of(0).expect("a result for the Read");
    assert!(
        !read.is_error && read.content.contains("precious notes"),
        "{read:?}"
    );

    let rm = api.result_of(1).expect("a result for the rm");
    assert!(rm.is_error, "{rm:?}");
    assert!(
        rm.content.contains("cmdgate denied `rm notes.txt`"),
        "{rm:?}"
    );
    assert!(
        rm.content.contains("cmdgate up"),
        "the model is told how to fix it: {rm:?}"
    );

    for turn in [2, 3] {
        let r = api.result_of(turn).expect("a result for the write/edit");
        assert!(r.is_error && r.content.contains("cmdgate denied"), "{r:?}");
    }
    assert_eq!(
        std::fs::read_to_string(&notes).unwrap(),
        "precious notes\n",
        "the file survives"
    );
    assert!(!created.exists(), "the Write did not happen");

    // A Bash read runs with no daemon.
    let cat = api.result_of(4).expect("a result for the cat");
    assert!(!cat.is_error && cat.content.trim() == "1", "{cat:?}");
    // A read that fails: Claude Code fires PostToolUseFailure ("Exit code 2 ..."), the hook reports
    // the outcome, and with no daemon it lands in the spool.
    let ls = api.result_of(5).expect("a result for the ls");
    assert!(
        ls.is_error && ls.content.starts_with("Exit code 2"),
        "{ls:?}"
    );

    let denials = run.result["permission_denials"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(denials, 3, "{}", run.result);

    let spool: Vec<serde_json::Value> = std::fs::read_to_string(s.scratch("spool/hook.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("spool line"))
        .collect();
    let allows: Vec<_> = spool
        .iter()
        .filter(|r| r["kind"] == "local_allow")
        .map(|r| r["tool_name"].clone())
        .collect();
    assert_eq!(allows, ["Read", "Bash", "Bash"], "{spool:?}");
    let outcome = |id: &str| {
        spool
            .iter()
            .find(|r| r["kind"] == "outcome" && r["report"]["tool_use_id"] == id)
            .cloned()
    };
    let ok = outcome(&tool_use_id(4)).expect("outcome of the cat");
    assert_eq!(ok["report"]["event"], "PostToolUse");
    assert_eq!(ok["report"]["exit_code"], 0);
    let failed = outcome(&tool_use_id(5)).expect("outcome of the failing ls");
    assert_eq!(failed["report"]["event"], "PostToolUseFailure");
    assert_eq!(failed["report"]["exit_code"], 2);
    assert_eq!(failed["report"]["success"], false);
}

#[test]
fn escape_hatch_steps_aside_under_the_real_cli_but_catastrophic_commands_stay_denied() {
    let mut s = session();
    s.set_env("CMDGATE_ESCAPE_HATCH", "e2e: operator override");
    let notes = s.workspace().join("notes.txt");
    std::fs::write(&notes, "scratch\n").unwrap();
    std::fs::write(s.home().join("keep.txt"), "home file\n").unwrap();
    let api = FakeApi::start(vec![Step::bash("rm notes.txt"), Step::bash("rm -rf ~")]);
    // bypassPermissions: with cmdgate stepping aside, Claude Code's own rules let everything run,
    // so only the hook's catastrophic check stands between `rm -rf ~` and the (temporary) HOME.
    let run = s.run_with(
        &api,
        "clean up",
        &["--permission-mode", "bypassPermissions"],
    );
    println!("claude -p result: {}", run.result);
    println!("tool results:\n{}", api.transcript());
    assert!(
        run.done.status.success(),
        "claude exited {:?}\n{}",
        run.done.status,
        run.done.stderr_text()
    );

    let rm = api.result_of(0).expect("a result for the rm");
    assert!(!rm.is_error, "stepped aside, so Claude Code ran it: {rm:?}");
    assert!(!notes.exists(), "the escape hatch let the rm through");
    let rm_home = api.result_of(1).expect("a result for rm -rf ~");
    assert!(
        rm_home.is_error && rm_home.content.contains("catastrophic"),
        "{rm_home:?}"
    );
    assert!(s.home().join("keep.txt").exists(), "HOME survives");

    let spool = std::fs::read_to_string(s.scratch("spool/hook.jsonl")).unwrap_or_default();
    let hatch = spool
        .lines()
        .filter(|l| l.contains("\"kind\":\"escape_hatch\""))
        .count();
    assert_eq!(hatch, 2, "{spool}");
}

/// A test peer on the daemon's socket: answers `/v1/decide` with `answer(request)` and records
/// every request (path, body). It stands in for nothing in product code; the real daemon's own
/// end-to-end tests replace it.
fn test_peer(
    socket: &std::path::Path,
    answer: fn(&serde_json::Value) -> serde_json::Value,
) -> std::sync::Arc<std::sync::Mutex<Vec<(String, serde_json::Value)>>> {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::os::unix::net::UnixListener::bind(socket).expect("bind test peer");
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&log);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let path = line
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string();
            let mut len = 0;
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let reply = if path == "/v1/decide" {
                answer(&body).to_string()
            } else {
                String::new()
            };
            let status = if path == "/v1/decide" {
                "200 OK"
            } else {
                "204 No Content"
            };
            seen.lock().expect("log").push((path, body));
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    log
}

#[test]
fn routed_calls_follow_the_daemons_answer_and_outcomes_reach_it() {
    let s = session();
    let socket = s.scratch("peer.sock");
    let mut s = s;
    s.set_env("CMDGATE_SOCKET", &socket.display().to_string());
    let log = test_peer(&socket, |req| {
        let command = req["tool_input"]["command"].as_str().unwrap_or_default();
        let (decision, reason) = if command.starts_with("rm ") {
            ("allow", "test-run clean")
        } else if command.starts_with("touch ") {
            ("ask", "creating files needs a person here")
        } else {
            ("deny", "writes need review")
        };
        serde_json::json!({"v": 1, "decision": decision, "reason": reason, "source": "sandbox",
                           "tiermap_revision": 3, "audit_id": 9})
    });
    let old = s.workspace().join("old.txt");
    std::fs::write(&old, "stale\n").unwrap();
    let new = s.workspace().join("new.txt");
    let written = s.workspace().join("w.txt");
    let api = FakeApi::start(vec![
        Step::bash("rm old.txt"),
        Step::bash("touch new.txt"),
        Step::write(&written.display().to_string(), "x"),
    ]);
    let run = s.run(&api, "tidy");
    println!("claude -p result: {}", run.result);
    println!("tool results:\n{}", api.transcript());
    assert!(
        run.done.status.success(),
        "claude exited {:?}",
        run.done.status
    );

    assert!(!api.result_of(0).expect("rm result").is_error);
    assert!(!old.exists(), "the daemon allowed the rm, so it ran");
    let ask = api.result_of(1).expect("touch result");
    assert!(
        ask.is_error && ask.content.contains("needs a person"),
        "-p turns ask into a denial: {ask:?}"
    );
    assert!(!new.exists());
    let deny = api.result_of(2).expect("write result");
    assert!(
        deny.is_error
            && deny.content.contains("writes need review")
            && deny.content.contains("audit #9"),
        "{deny:?}"
    );
    assert!(!written.exists());

    let log = log.lock().expect("log").clone();
    let decides: Vec<_> = log.iter().filter(|(p, _)| p == "/v1/decide").collect();
    assert_eq!(decides.len(), 3, "{log:?}");
    assert_eq!(decides[0].1["tool_use_id"], tool_use_id(0));
    assert_eq!(
        decides[0].1["project_dir"],
        s.workspace().display().to_string()
    );
    let outcomes: Vec<_> = log.iter().filter(|(p, _)| p == "/v1/outcome").collect();
    assert_eq!(outcomes.len(), 1, "only the rm ran: {log:?}");
    assert_eq!(outcomes[0].1["tool_use_id"], tool_use_id(0));
    assert_eq!(outcomes[0].1["event"], "PostToolUse");
    assert_eq!(outcomes[0].1["exit_code"], 0);
    assert!(
        !s.scratch("spool/hook.jsonl").exists(),
        "delivered outcomes are not spooled"
    );
}
