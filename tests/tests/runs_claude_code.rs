//! Mirrored runs (issue 19) under the real Claude Code CLI, scripted by the fake Messages API: what
//! the agent sees (the `tool_result` the CLI sends back) and what reaches the workspace. A failing
//! suite's output and exit status reach the agent and its build outputs land; a generator's files
//! land and `cmdgate undo` takes them back (`cmdgate status` shows both); code that tells the
//! mirror from the host runs only in the mirror, and what it wrote there is rolled back with the
//! reason; the Bash tool's timeout and a daemon killed mid-run commit nothing. The same mechanics
//! at the hook + client level (one-use tickets, conflicts, recovery) are `mirror_runs.rs`.

use cmdgate_tests::claude::World;
use cmdgate_tests::fake_api::{tool_use_id, Step, ToolResult};
use serde_json::json;

const FAILING_SUITE: &str = "test:\n\tmkdir -p build\n\techo built > build/out.txt\n\
                             \t@echo 'running 2 tests'\n\
                             \t@echo 'test add ... FAILED: expected 4, got 5' >&2\n\t@exit 2\n";

const GENERATOR: &str = "import os\nos.makedirs('gen/sub', exist_ok=True)\n\
                         open('gen/one.txt', 'w').write('one\\n')\n\
                         open('gen/sub/two.txt', 'w').write('two\\n')\nprint('generated 2 files')\n";

#[test]
fn a_failing_suite_reaches_the_agent_a_generator_lands_and_undo_takes_it_back() {
    let w = World::builder()
        .file("Makefile", FAILING_SUITE)
        .file("gen.py", GENERATOR)
        .start();
    let run = w.play(vec![Step::bash("make test"), Step::bash("python3 gen.py")]);

    // The suite failed: Claude Code reports the exit status and the output to the model.
    let suite = run.result(0);
    assert!(suite.is_error, "{suite:?}");
    assert!(suite.content.starts_with("Exit code 2"), "{suite:?}");
    assert!(
        suite.content.contains("running 2 tests")
            && suite
                .content
                .contains("test add ... FAILED: expected 4, got 5"),
        "the failing assertion reaches the agent: {suite:?}"
    );
    assert_eq!(w.read("build/out.txt"), "built\n", "its build outputs land");
    let row = w.run_row(0);
    assert_eq!(row["decision"], "committed", "{row}");
    assert_eq!(row["exit_code"], 2, "{row}");

    let generated = run.result(1);
    assert!(
        !generated.is_error && generated.content.contains("generated 2 files"),
        "{generated:?}"
    );
    assert_eq!(w.read("gen/one.txt"), "one\n");
    assert_eq!(w.read("gen/sub/two.txt"), "two\n");
    assert_eq!(run.denials(), 0, "{}", run.run.result);

    // `cmdgate status`: both runs committed, the newest can be undone.
    let gen_run = w.run_id(1);
    let status = w.gate.cli_json(&["status", "--json"]);
    let runs = &status["runs"];
    println!("status runs: {runs}");
    assert_eq!(runs["committed"], 2, "{runs}");
    assert_eq!(runs["rolled_back"], 0, "{runs}");
    assert_eq!(runs["recent"][0]["run_id"], gen_run.as_str(), "{runs}");
    assert_eq!(runs["recent"][0]["command"], "python3 gen.py", "{runs}");
    assert_eq!(runs["recent"][0]["undo_available"], true, "{runs}");
    assert_eq!(runs["recent"][1]["exit_code"], 2, "{runs}");
    let text = w.gate.cli(&["status"]).stdout_text();
    assert!(
        text.contains("2 committed, 0 rolled back")
            && text.contains(&format!("cmdgate undo {gen_run}")),
        "{text}"
    );

    let undone = w.gate.cli_json(&["undo", &gen_run, "--json"]);
    println!("undo: {undone}");
    assert!(!w.ws("gen").exists(), "undo took the generated tree back");
    assert_eq!(w.read("build/out.txt"), "built\n", "the other run stays");
    let runs = w.gate.cli_json(&["status", "--json"])["runs"].clone();
    assert_eq!(runs["undone"], 1, "{runs}");
    assert_eq!(runs["recent"][0]["undo_available"], false, "{runs}");
}

#[test]
fn code_that_tells_the_mirror_from_the_host_never_changes_a_tracked_file() {
    let main_rs = "fn main() {}\n";
    // Each guesses whether it is being watched and overwrites src/main.rs when it thinks it is
    // not. Under the old test-run-then-run-again model the guess decided what reached the host.
    let w = World::builder()
        .file("src/main.rs", main_rs)
        .file(
            "Makefile",
            "release:\n\t@test -n \"$$CI\" || echo pwned > src/main.rs\n\t@echo released\n",
        )
        .start();
    let script = w.ws("check.sh").display().to_string();
    let run = w.play(vec![
        // Small pids: a sandbox, so it does nothing — and it is never run anywhere else.
        Step::bash(
            "python3 -c \"import os; os.getpid() > 100 and open('src/main.rs','w').write('pwned')\"",
        ),
        // Written with the Write tool, then run: no `$SANDBOX`, so "not a sandbox".
        Step::write(
            &script,
            "if [ -n \"$SANDBOX\" ]; then exit 0; fi\necho pwned > src/main.rs\n",
        ),
        Step::bash("sh check.sh"),
        // No $CI: "a developer's machine".
        Step::bash("make release"),
    ]);

    let python = run.result(0);
    assert!(!python.is_error, "{python:?}");
    assert_eq!(
        w.row(0)["decision"],
        "run",
        "routed to the mirror, not allowed"
    );
    assert_eq!(w.run_row(0)["decision"], "committed");
    assert!(!run.result(1).is_error, "the Write tool wrote the script");
    for (turn, command) in [(2, "sh check.sh"), (3, "make release")] {
        let r = run.result(turn);
        assert!(r.is_error, "{r:?}");
        assert!(
            r.content
                .contains(&format!("cmdgate rolled back `{command}`"))
                && r.content.contains("src/main.rs"),
            "the agent is told what was refused: {r:?}"
        );
        assert_eq!(w.run_row(turn)["decision"], "rolled_back");
    }
    assert_eq!(w.read("src/main.rs"), main_rs, "the tracked file is intact");
    assert!(
        w.gate.audit("integrity").is_empty(),
        "Claude Code ran each call through its client"
    );
}

/// Claude Code 2.1.332 does not kill a Bash command at the tool's `timeout`: it moves it to the
/// background and tells the model it will be notified. The daemon honours that: the tool's
/// `timeout` is not the run's limit (`[sandbox] run_limit_secs` or the entry's `timeout=` is), so
/// the run goes on in the mirror after the Bash call returned, and when it ends its clean effects
/// are committed and its client prints what became of it into the background task's output.
#[test]
fn a_run_past_the_bash_tools_timeout_goes_on_in_the_background_and_commits() {
    let w = World::builder().file("gate.txt", "wait\n").start();
    let gate_file = w.ws("gate.txt");
    let run = w.play(vec![
        // Past its 2 s timeout: it waits until the test writes `go` into gate.txt (a tracked file
        // it never writes: its mirror reads it from the host), then writes `made` and, in the
        // mirror's scratch, /tmp/note (so its client prints a last line once it is committed).
        Step::bash_with(
            "echo waiting && until grep -q go gate.txt; do sleep 0.1; done && echo done > made \
             && echo x > /tmp/note && echo finished",
            json!({"timeout": 2000}),
        ),
        // Once Claude Code has moved it to the background: let it finish; once its client has
        // printed the commit's line, the model reads the task's output.
        Step::when(move |results| {
            // "… was moved to the background (ID: …). Output is being written to: FILE."
            let file = results
                .iter()
                .find(|r| r.tool_use_id == tool_use_id(0))?
                .content
                .split("Output is being written to: ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .trim_end_matches('.')
                .to_owned();
            if std::fs::read_to_string(&gate_file).ok()? != "go\n" {
                std::fs::write(&gate_file, "go\n").expect("write gate.txt in place");
            }
            let out = std::fs::read_to_string(&file).ok()?;
            out.contains("cmdgate:").then(|| Step::read(&file))
        }),
    ]);
    let r = run.result(0);
    println!("moved: {r:?}");
    assert!(
        r.content.contains("did not complete within its 2s timeout"),
        "{r:?}"
    );
    let out = run.result(1);
    println!("output: {out:?}");
    assert!(
        out.content.contains("finished") && out.content.contains("cmdgate: committed"),
        "{out:?}"
    );
    let row = w
        .gate
        .wait_audit("run", |r| r["tool_use_id"] == tool_use_id(0));
    println!("run row: {row}");
    assert_eq!(row["decision"], "committed", "{row}");
    assert_eq!(w.read("made"), "done\n");
}

#[test]
fn a_daemon_killed_mid_run_commits_nothing_and_the_agent_is_told() {
    let mut w = World::new();
    let played = std::thread::scope(|s| {
        let agent = s.spawn(|| w.play(vec![Step::bash("touch made && echo started && sleep 600")]));
        // The command is running in the mirror once its upper dir holds `made`.
        w.gate.wait_in_mirror("made");
        let pid = w.gate.daemon_pid().expect("a daemon").to_string();
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid])
            .status()
            .expect("kill");
        assert!(killed.success());
        agent.join().expect("claude thread")
    });
    w.gate.kill9(); // reaps it
    let r = played.result(0);
    assert!(r.is_error, "{r:?}");
    // (What the command printed before the kill may or may not have been relayed by then.)
    assert!(
        r.content.starts_with("Exit code 125") && r.content.contains("went away"),
        "the agent is told that the daemon went away and nothing was committed: {r:?}"
    );
    assert!(!w.ws("made").exists(), "nothing was committed");
    w.gate.start();
    assert!(!w.ws("made").exists(), "nor at the next start");
    // The next start repaired what the crash left: the workspace takes a new run at once.
    let again = w.play(vec![Step::bash("touch made")]);
    assert!(!again.result(0).is_error, "{:?}", again.result(0));
    assert!(w.ws("made").exists());
    let runs = w.gate.cli_json(&["status", "--json"])["runs"].clone();
    assert_eq!(runs["committed"], 1, "only the second run: {runs}");
}

/// The background task id and output file a `run_in_background` Bash result names.
fn background(r: &ToolResult) -> Option<(String, String)> {
    let id = r
        .content
        .split("with ID: ")
        .nth(1)?
        .split(|c: char| c == '.' || c.is_whitespace())
        .next()?
        .to_owned();
    let file = r
        .content
        .split("Output is being written to: ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .trim_end_matches('.')
        .to_owned();
    Some((id, file))
}

#[test]
fn two_overlapping_runs_one_commits_and_the_other_reports_the_conflict() {
    let w = World::builder().file("gate.txt", "wait\n").start();
    let gate_file = w.ws("gate.txt");
    let run = w.play(vec![
        // A, in the background: writes shared.txt, says so, then waits until the test writes `go`
        // into gate.txt (a tracked file A never writes: its mirror reads it from the host).
        Step::bash_with(
            "echo A > shared.txt && echo ready && until grep -q go gate.txt; do sleep 0.1; done",
            json!({"run_in_background": true}),
        ),
        // B, once A is running (its output file says `ready`): commits while A still runs.
        Step::hold(
            |results| {
                results
                    .iter()
                    .find(|r| r.tool_use_id == tool_use_id(0))
                    .and_then(background)
                    .and_then(|(_, file)| std::fs::read_to_string(file).ok())
                    .is_some_and(|out| out.contains("ready"))
            },
            Step::bash("echo B > shared.txt"),
        ),
        // Once B has finished: let A finish; once A's client has printed its last line, the
        // model reads A's output (this CLI has no tool that waits for a background task).
        Step::when(move |results| {
            results.iter().find(|r| r.tool_use_id == tool_use_id(1))?;
            let (_, file) = results
                .iter()
                .find(|r| r.tool_use_id == tool_use_id(0))
                .and_then(background)?;
            if std::fs::read_to_string(&gate_file).ok()? != "go\n" {
                std::fs::write(&gate_file, "go\n").expect("write gate.txt in place");
            }
            let out = std::fs::read_to_string(&file).ok()?;
            out.contains("cmdgate:").then(|| Step::read(&file))
        }),
    ]);
    let b = run.result(1);
    assert!(!b.is_error, "{b:?}");
    assert_eq!(w.run_row(1)["decision"], "committed");
    let a = run.result(2);
    println!("A: {a:?}");
    assert!(
        a.content.contains("nothing of") && a.content.contains("shared.txt"),
        "A reports the conflict: {a:?}"
    );
    assert_eq!(w.run_row(0)["decision"], "conflict");
    assert_eq!(w.read("shared.txt"), "B\n", "nothing of A was committed");
}
