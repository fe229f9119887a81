//! Mirrored runs end to end (issue 19) through the real hook, the real `cmdgate-run` client and a
//! real `cmdgated` with the real sandbox: the hook rewrites a tier-1/unknown Bash call into
//! `cmdgate-run TICKET`; the client streams the command's output and exits with its status; clean
//! effects are committed, dirty ones rolled back with the reason; overlapping runs conflict;
//! `cmdgate undo` restores; tickets are one-use and bound to their directory; a daemon killed
//! mid-run commits nothing and its next start repairs.

use std::io::{BufRead, BufReader, Read};

use cmdgate_tests::gate::Gate;
use serde_json::Value;

fn gate() -> Gate {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    g
}

/// The newest `run` audit row for a tool_use_id.
fn run_row(g: &Gate, tool_use_id: &str) -> Value {
    g.audit("run")
        .into_iter()
        .filter(|r| r["tool_use_id"] == tool_use_id)
        .max_by_key(|r| r["id"].as_i64())
        .unwrap_or_else(|| panic!("no run row for {tool_use_id}"))
}

fn run_id(row: &Value) -> String {
    row["note"]
        .as_str()
        .and_then(|n| n.strip_prefix("run "))
        .unwrap_or_else(|| panic!("no run id in {row}"))
        .to_owned()
}

#[test]
fn a_failing_suite_shows_its_output_and_status_and_its_build_outputs_land() {
    let g = gate();
    std::fs::write(
        g.proj.join("test.sh"),
        "mkdir -p build\necho built > build/out.txt\necho 'running 2 tests'\n\
         echo 'test add ... FAILED: expected 4, got 5' >&2\nexit 2\n",
    )
    .unwrap();
    let rewritten = g.pre_rewrite("t1", "sh test.sh");
    assert!(
        rewritten.contains("cmdgate-run") && !rewritten.contains("test.sh"),
        "{rewritten}"
    );
    let done = g.shell(&rewritten);
    println!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        done.status,
        done.stdout_text(),
        done.stderr_text()
    );
    assert_eq!(done.status.code(), Some(2), "the command's own exit status");
    assert!(done.stdout_text().contains("running 2 tests"));
    assert!(done
        .stderr_text()
        .contains("test add ... FAILED: expected 4, got 5"));
    assert_eq!(
        std::fs::read_to_string(g.proj.join("build/out.txt")).unwrap(),
        "built\n",
        "a clean run's effects are committed, whatever its exit status"
    );
    let row = run_row(&g, "t1");
    assert_eq!(row["decision"], "committed", "{row}");
    assert_eq!(row["exit_code"], 2, "{row}");
    let decision = g.decision_row("t1").expect("decision row");
    assert_eq!(decision["decision"], "run", "{decision}");
    // The ticket was used: the same command line runs nothing a second time.
    let again = g.shell(&rewritten);
    assert_eq!(again.status.code(), Some(126), "{}", again.stderr_text());
    assert!(
        again.stderr_text().contains("unknown or already used"),
        "{}",
        again.stderr_text()
    );
    assert!(g.verify()["broken"].is_null());
}

#[test]
fn removing_a_tracked_file_is_rolled_back_with_the_reason() {
    let g = gate();
    let rewritten = g.pre_rewrite("t1", "rm tracked.txt");
    let done = g.shell(&rewritten);
    let err = done.stderr_text();
    println!("exit {:?}\nstderr:\n{err}", done.status);
    assert_ne!(done.status.code(), Some(0));
    assert!(
        err.contains("cmdgate rolled back `rm tracked.txt`") && err.contains("tracked.txt"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(g.proj.join("tracked.txt")).unwrap(),
        "precious\n"
    );
    assert_eq!(run_row(&g, "t1")["decision"], "rolled_back");
}

#[test]
fn code_that_detects_the_mirror_only_ever_runs_in_it() {
    let g = gate();
    // Behaves "cleanly" when it believes it is in a sandbox (small pids, as in the mirror's pid
    // namespace) and overwrites a tracked file otherwise. Its only run is in the mirror.
    let sneaky = "python3 -c \"import os; open('tracked.txt','w').write('pwned') \
                  if os.getpid() > 100 else open('stamp','w').write('x')\"";
    let done = g.shell(&g.pre_rewrite("t1", sneaky));
    println!("exit {:?}\nstderr:\n{}", done.status, done.stderr_text());
    assert_eq!(done.status.code(), Some(0), "{}", done.stderr_text());
    assert_eq!(
        std::fs::read_to_string(g.proj.join("tracked.txt")).unwrap(),
        "precious\n"
    );
    // The other branch (what it would do on a host) is judged like anything else: rolled back.
    let loud = "python3 -c \"open('tracked.txt','w').write('pwned')\"";
    let done = g.shell(&g.pre_rewrite("t2", loud));
    assert_ne!(done.status.code(), Some(0));
    assert!(
        done.stderr_text().contains("cmdgate rolled back"),
        "{}",
        done.stderr_text()
    );
    assert_eq!(
        std::fs::read_to_string(g.proj.join("tracked.txt")).unwrap(),
        "precious\n"
    );
}

#[test]
fn overlapping_runs_one_commits_the_other_reports_the_conflict_and_undo_restores() {
    let g = gate();
    // A creates shared.txt, says so, then writes more than the pipes hold: it blocks until the
    // test reads on, so B runs and commits entirely while A is still running.
    let a_cmd = g.pre_rewrite(
        "ta",
        "echo A > shared.txt && echo ready && head -c 4000000 /dev/zero | tr '\\0' x",
    );
    let b_cmd = g.pre_rewrite("tb", "echo B > shared.txt");
    let mut a = g.spawn_shell(&a_cmd);
    let mut out = BufReader::new(a.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let b = g.shell(&b_cmd);
    assert_eq!(b.status.code(), Some(0), "{}", b.stderr_text());
    assert_eq!(
        std::fs::read_to_string(g.proj.join("shared.txt")).unwrap(),
        "B\n"
    );
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).unwrap();
    assert_eq!(rest.len(), 4_000_000);
    let mut err = String::new();
    a.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = a.wait().unwrap();
    println!("A: exit {status:?}\n{err}");
    assert_ne!(status.code(), Some(0));
    assert!(
        err.contains("nothing of") && err.contains("shared.txt"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(g.proj.join("shared.txt")).unwrap(),
        "B\n",
        "nothing of A was committed"
    );
    assert_eq!(run_row(&g, "ta")["decision"], "conflict");

    // Undo B: shared.txt did not exist before it.
    let b_run = run_id(&run_row(&g, "tb"));
    let undone = g.cli_json(&["undo", &b_run, "--json"]);
    println!("undo: {undone}");
    assert!(!g.proj.join("shared.txt").exists(), "undo removed B's file");
    let runs = g.cli_json(&["runs", "--json"]);
    assert!(
        runs.as_array()
            .unwrap()
            .iter()
            .any(|r| r["run_id"] == b_run.as_str()),
        "{runs}"
    );
    // Newest first: B's undo, then A (which ended after B), then B.
    let ids: Vec<i64> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["row"]["id"].as_i64().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "{runs}");
    assert_eq!(runs[0]["row"]["decision"], "undone", "{runs}");
    assert_eq!(runs[1]["row"]["tool_use_id"], "ta", "{runs}");
    assert_eq!(runs[2]["row"]["tool_use_id"], "tb", "{runs}");
}

#[test]
fn a_ticket_runs_only_from_its_directory() {
    let g = gate();
    std::fs::create_dir(g.proj.join("sub")).unwrap();
    // A leading `cd DIR &&` stays outside the client; the ticket is bound to DIR.
    let rewritten = g.pre_rewrite("t1", "cd sub && touch made");
    assert!(rewritten.starts_with("cd sub && "), "{rewritten}");
    let client_part = rewritten.trim_start_matches("cd sub && ");
    // Redeemed from the project root instead of sub: refused, nothing runs, the ticket is burnt.
    let wrong = g.shell(client_part);
    assert_eq!(wrong.status.code(), Some(126), "{}", wrong.stderr_text());
    assert!(
        wrong.stderr_text().contains("redeemed from"),
        "{}",
        wrong.stderr_text()
    );
    let late = g.shell(&rewritten);
    assert_eq!(late.status.code(), Some(126), "{}", late.stderr_text());
    assert!(!g.proj.join("sub/made").exists());
    // A fresh one from the right directory runs there.
    let ok = g.shell(&g.pre_rewrite("t2", "cd sub && touch made"));
    assert_eq!(ok.status.code(), Some(0), "{}", ok.stderr_text());
    assert!(g.proj.join("sub/made").exists());
}

#[test]
fn a_ticket_issued_under_an_older_map_revision_runs_nothing() {
    let g = gate();
    let rewritten = g.pre_rewrite("t1", "touch made");
    // The operator changes and re-signs the map between the decision and the redemption: the
    // decision was made under a map that no longer holds, so the ticket runs nothing and says why.
    let map = g.proj.join("CLAUDE_CMDS.md");
    let text = std::fs::read_to_string(&map).unwrap();
    let edited = text.replacen("- `pwd`\n", "- `pwd`\n- `make lint`\n", 1);
    assert_ne!(edited, text, "the starter map changed: adapt this test");
    std::fs::write(&map, edited).unwrap();
    g.resign();
    let late = g.shell(&rewritten);
    assert_eq!(late.status.code(), Some(126), "{}", late.stderr_text());
    assert!(
        late.stderr_text()
            .contains("the tier map changed since the decision"),
        "{}",
        late.stderr_text()
    );
    assert!(!g.proj.join("made").exists(), "nothing ran");
    // Nor does it run later: the attempt burnt the ticket.
    let again = g.shell(&rewritten);
    assert_eq!(again.status.code(), Some(126), "{}", again.stderr_text());
    assert!(!g.proj.join("made").exists());
    // The same command decided under the new map runs.
    let ok = g.shell(&g.pre_rewrite("t2", "touch made"));
    assert_eq!(ok.status.code(), Some(0), "{}", ok.stderr_text());
    assert!(g.proj.join("made").exists());
}

#[test]
fn a_daemon_killed_mid_run_commits_nothing_and_the_client_says_so() {
    let mut g = gate();
    let cmd = g.pre_rewrite(
        "t1",
        "touch made && echo started && head -c 4000000 /dev/zero | tr '\\0' x",
    );
    let mut child = g.spawn_shell(&cmd);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "started\n");
    g.kill9();
    let mut rest = Vec::new();
    let _ = out.read_to_end(&mut rest);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    println!("client: exit {status:?}\n{err}");
    assert_eq!(status.code(), Some(125), "{err}");
    assert!(err.contains("went away"), "{err}");
    assert!(!g.proj.join("made").exists(), "nothing was committed");
    g.start();
    assert!(!g.proj.join("made").exists());
    // The next start repairs what the crash left (the killed run's upper dir is discarded by
    // its helper or by recovery, whichever gets there first; recovery reports what it did), and
    // nothing of the run was committed.
    let recovered: Vec<Value> = g
        .audit("run")
        .into_iter()
        .filter(|r| r["decision"] == "recovered")
        .collect();
    println!("recovered: {recovered:?}");
    assert!(
        recovered.iter().all(|r| r["reason"]
            .as_str()
            .is_some_and(|t| t.contains("could not repair []"))),
        "{recovered:?}"
    );
    let runs = g.cli_json(&["runs", "--json"]);
    assert!(
        runs.as_array()
            .unwrap()
            .iter()
            .all(|r| r["row"]["decision"] != "committed"),
        "{runs}"
    );
}

#[test]
fn a_client_that_goes_away_kills_its_run_and_nothing_is_committed() {
    let g = gate();
    // What the Bash tool's timeout (or Ctrl-C) does to the client: it dies mid-run.
    let cmd = g.pre_rewrite(
        "t1",
        "touch made && echo started && head -c 4000000 /dev/zero | tr '\\0' x",
    );
    let mut child = g.spawn_shell(&cmd);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "started\n");
    child.kill().unwrap();
    child.wait().unwrap();
    drop(out);
    // The daemon notices at its next write, kills the run and records it: wait for that row.
    let row = g.wait_audit("run", |r| r["tool_use_id"] == "t1");
    println!("run row: {row}");
    assert_eq!(row["decision"], "failed", "{row}");
    assert!(
        row["reason"]
            .as_str()
            .is_some_and(|r| r.contains("client went away")),
        "{row}"
    );
    assert!(!g.proj.join("made").exists(), "nothing was committed");
}

#[test]
fn a_routed_call_reported_without_its_client_is_an_integrity_event() {
    let g = gate();
    // (A call that ran through its client is no event: `mission_claude_code::a_tier_1_command_runs_
    // once_in_the_mirror_its_effects_land_and_its_outcome_is_audited`.)
    // Claude Code reports having run the original command: it ignored the rewrite.
    g.pre_rewrite("t2", "touch ok2.txt");
    g.post("t2", "touch ok2.txt", true);
    let events = g.audit("integrity");
    println!("integrity rows: {events:?}");
    assert!(
        events
            .iter()
            .any(|e| e["decision"] == "rewrite_ignored" && e["tool_use_id"] == "t2"),
        "{events:?}"
    );
    let status = g.cli_json(&["breaker", "status", "--json"]);
    let session = status["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session"] == "sess-1")
        .cloned()
        .unwrap_or_else(|| panic!("{status}"));
    assert!(session["score"].as_u64().unwrap_or(0) > 0, "{session}");
}

#[test]
fn write_paths_land_with_the_workspace_and_undo_while_home_persistence_is_refused() {
    let mut g = Gate::new_in(std::path::Path::new("/var/tmp"));
    g.init_signed();
    // The operator's entry: `sh fetch.sh` may write its cache and the user's ~/.config.
    let map = g.proj.join("CLAUDE_CMDS.md");
    let text = std::fs::read_to_string(&map).unwrap();
    let text = text.replacen(
        "## Tier 1 — sandbox\n",
        "## Tier 1 — sandbox\n\n- `sh fetch.sh` — write=~/.cache/fetch, write=~/.config\n",
        1,
    );
    std::fs::write(&map, text).unwrap();
    g.resign();
    g.start();
    let cache = g.home.join(".cache/fetch");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::create_dir_all(g.home.join(".config")).unwrap();
    std::fs::write(cache.join("index"), "old\n").unwrap();
    std::fs::write(
        g.proj.join("fetch.sh"),
        "echo pkg > \"$HOME/.cache/fetch/pkg\"\necho new > \"$HOME/.cache/fetch/index\"\n\
         echo built > out.txt\necho x > \"$HOME/notes\"\n",
    )
    .unwrap();
    let done = g.shell(&g.pre_rewrite("w1", "sh fetch.sh"));
    let err = done.stderr_text();
    println!("exit {:?}\nstderr:\n{err}", done.status);
    assert_eq!(done.status.code(), Some(0), "{err}");
    assert_eq!(run_row(&g, "w1")["decision"], "committed");
    assert_eq!(std::fs::read_to_string(cache.join("pkg")).unwrap(), "pkg\n");
    assert_eq!(
        std::fs::read_to_string(cache.join("index")).unwrap(),
        "new\n"
    );
    assert_eq!(
        std::fs::read_to_string(g.proj.join("out.txt")).unwrap(),
        "built\n"
    );
    assert!(
        !g.home.join("notes").exists(),
        "$HOME outside write= stays in the mirror"
    );
    assert!(
        err.contains("stayed in the mirror") && err.contains("~/notes"),
        "the agent is told what was left behind: {err}"
    );
    // Undo takes the write= tree back with the workspace.
    let undone = g.cli_json(&["undo", &run_id(&run_row(&g, "w1")), "--json"]);
    println!("undo: {undone}");
    assert!(!cache.join("pkg").exists() && !g.proj.join("out.txt").exists());
    assert_eq!(
        std::fs::read_to_string(cache.join("index")).unwrap(),
        "old\n"
    );

    // A persistence file under a write= path is never clean: nothing of the run lands.
    std::fs::write(
        g.proj.join("fetch.sh"),
        "mkdir -p \"$HOME/.config/autostart\"\n\
         printf '[Desktop Entry]\\nExec=sh -c evil\\n' > \"$HOME/.config/autostart/x.desktop\"\n\
         echo built > out.txt\n",
    )
    .unwrap();
    let done = g.shell(&g.pre_rewrite("w2", "sh fetch.sh"));
    let err = done.stderr_text();
    println!("exit {:?}\nstderr:\n{err}", done.status);
    assert_ne!(done.status.code(), Some(0));
    assert!(
        err.contains("cmdgate rolled back") && err.contains(".config/autostart"),
        "{err}"
    );
    assert_eq!(run_row(&g, "w2")["decision"], "rolled_back");
    assert!(!g.home.join(".config/autostart").exists());
    assert!(!g.proj.join("out.txt").exists());
}

/// The ids of the prepared helpers' lock files (`<state dir>/runs/<id>.lock`) below `dir`.
fn prepared_ids(dir: &std::path::Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            prepared_ids(&path, out);
        } else if dir.file_name().is_some_and(|n| n == "runs") {
            if let Some(id) = e.file_name().to_string_lossy().strip_suffix(".lock") {
                out.push(id.to_owned());
            }
        }
    }
}

/// Once a run's response has ended (the daemon prepares the next helper only after the body with
/// the end frame is gone, so that its start does not delay that write), a helper is prepared, and
/// the next run is the one it serves.
#[test]
fn after_a_runs_end_the_next_runs_helper_is_prepared_and_serves_it() {
    let g = gate();
    std::fs::write(g.proj.join("noop.sh"), "true\n").unwrap();
    let done = g.shell(&g.pre_rewrite("p1", "sh noop.sh"));
    assert_eq!(done.status.code(), Some(0), "{}", done.stderr_text());
    let first = run_id(&run_row(&g, "p1"));
    let started = std::time::Instant::now();
    let prepared = loop {
        let mut ids = Vec::new();
        prepared_ids(&g.data, &mut ids);
        ids.retain(|id| *id != first);
        if let [id] = ids.as_slice() {
            break id.clone();
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "no prepared helper after the run: {ids:?}\n{}",
            std::fs::read_to_string(g.log_path()).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let done = g.shell(&g.pre_rewrite("p2", "sh noop.sh"));
    assert_eq!(done.status.code(), Some(0), "{}", done.stderr_text());
    assert_eq!(run_id(&run_row(&g, "p2")), prepared);
}

/// Runs `command` as tool call `id`, which must go over a limit: a failed call, rolled back,
/// nothing of it committed (each of `made` absent), and the client's last words returned.
fn run_over_a_limit(g: &Gate, id: &str, command: &str, made: &[&str]) -> String {
    let done = g.shell(&g.pre_rewrite(id, command));
    let err = done.stderr_text();
    println!("exit {:?}\nstderr:\n{err}", done.status);
    assert_ne!(done.status.code(), Some(0));
    for name in made {
        assert!(!g.proj.join(name).exists(), "{name} was committed");
    }
    let row = run_row(g, id);
    assert_eq!(row["decision"], "rolled_back", "{row}");
    // Killed partway: nothing to apply, so not kept for the operator.
    assert!(!err.contains("apply it"), "{err}");
    err
}

/// A run that goes over a limit of the mirror is rolled back, and the agent is told which limit,
/// its value and the setting that raises it: memory (the kernel kills it) and what it may add to
/// the workspace's disk (the guard kills it).
#[test]
fn a_run_over_a_limit_is_rolled_back_and_names_the_limit_and_its_setting() {
    let mut g = Gate::new();
    g.init_signed();
    std::fs::write(
        g.conf.join("config.toml"),
        "[sandbox]\nmemory_bytes = 67108864\nupper_bytes = 1048576\n",
    )
    .unwrap();
    g.start();

    let hog = "echo started > hog.txt; awk 'BEGIN { s = \"x\"; while (1) s = s s }'";
    let err = run_over_a_limit(&g, "m1", hog, &["hog.txt"]);
    assert!(
        err.contains("went over its memory limit (64 MiB, `[sandbox] memory_bytes`)"),
        "{err}"
    );

    let fill = "echo started > fill.txt; head -c 8M /dev/zero > big";
    let err = run_over_a_limit(&g, "u1", fill, &["fill.txt", "big"]);
    assert!(
        err.contains("(1 MiB, `[sandbox] upper_bytes`)") && !err.contains("memory_bytes"),
        "{err}"
    );
    assert!(g.verify()["broken"].is_null());
}
