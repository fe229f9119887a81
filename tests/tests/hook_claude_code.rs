//! The hook under the real Claude Code CLI, with no daemon at all: reads run, everything else is
//! denied with a reason that reaches the model, and the workspace is untouched.

use cmdgate_tests::bins::cargo_bin;
use cmdgate_tests::claude::Session;
use cmdgate_tests::fake_api::{FakeApi, Step};

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

    let denials = run.result["permission_denials"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(denials, 3, "{}", run.result);

    let spool = std::fs::read_to_string(s.scratch("spool/hook.jsonl")).unwrap_or_default();
    assert!(
        spool
            .lines()
            .any(|l| l.contains("\"kind\":\"local_allow\"") && l.contains("\"Read\"")),
        "{spool}"
    );
}
