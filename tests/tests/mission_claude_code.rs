//! The mission end to end (issue 7): the real Claude Code CLI, scripted by the fake Messages API, with
//! the hook registered by `cmdgate hook install`, a real `cmdgated` on temp sockets, the real sandbox
//! for mirrored runs and a signed tier map. Each test prints what Claude Code did and what the audit says.

use cmdgate_tests::claude::World;
use cmdgate_tests::fake_api::{tool_use_id, FakeApi, Step};
use cmdgate_tests::gate::Gate;
use serde_json::Value;

#[test]
fn a_tier_1_command_runs_once_in_the_mirror_its_effects_land_and_its_outcome_is_audited() {
    let w = World::new();
    let command = "mkdir -p target && echo built > target/out.txt";
    let run = w.play(vec![Step::bash(command)]);

    let r = run.result(0);
    assert!(!r.is_error, "{r:?}");
    assert_eq!(
        w.read("target/out.txt"),
        "built\n",
        "the clean run's effects were committed"
    );
    assert_eq!(run.denials(), 0, "{}", run.run.result);

    let row = w.row(0);
    assert_eq!(row["decision"], "run", "{row}");
    assert_eq!(row["source"], "sandbox", "{row}");
    let ran = w.run_row(0);
    assert_eq!(ran["decision"], "committed", "{ran}");
    let show = w.show_with_outcome(&row["id"]);
    println!("audit show: {show}");
    let outcome = &show["outcomes"][0];
    assert_eq!(outcome["success"], true, "{show}");
    assert_eq!(outcome["tool_use_id"], tool_use_id(0), "{show}");
    assert!(
        w.gate.audit("integrity").is_empty(),
        "Claude Code ran the client it was given"
    );
    assert!(w.gate.verify()["broken"].is_null());
}

#[test]
fn a_destructive_command_is_rolled_back_the_file_survives_and_the_model_is_told_why() {
    let w = World::new();
    let run = w.play(vec![Step::bash("rm tracked.txt")]);

    let r = run.result(0);
    assert!(r.is_error, "{r:?}");
    assert!(
        r.content.contains("cmdgate rolled back `rm tracked.txt`")
            && r.content.contains("tracked.txt"),
        "the model sees what was refused and why: {r:?}"
    );
    assert_eq!(w.read("tracked.txt"), "precious\n", "the file survives");
    assert_eq!(w.run_row(0)["decision"], "rolled_back");
    assert_eq!(run.denials(), 0, "{}", run.run.result);
}

#[test]
fn k_clean_runs_promote_a_command_and_the_next_run_skips_the_test_run() {
    let w = World::with_config("[promotion]\nk = 2\n");
    let command = "mkdir -p build && touch build/stamp";
    let run = w.play(vec![
        Step::bash(command),
        Step::bash(command),
        Step::bash(command),
    ]);
    assert_eq!(run.denials(), 0, "{}", run.run.result);
    for turn in 0..3 {
        let r = run.result(turn);
        assert!(!r.is_error, "{r:?}");
    }
    assert!(w.ws("build/stamp").exists(), "the command ran for real");
    let decided: Vec<(Value, Value)> = (0..3)
        .map(|t| {
            let row = w.row(t);
            (row["decision"].clone(), row["source"].clone())
        })
        .collect();
    assert_eq!(
        decided,
        [
            ("run".into(), "sandbox".into()),
            ("run".into(), "sandbox".into()),
            ("allow".into(), "learned".into())
        ],
        "two clean, successful mirrored runs promote it; mkdir/touch then run on the host"
    );
    let learn = w.gate.audit("learn");
    println!("learn rows: {learn:?}");
    assert!(
        learn.iter().any(|r| r["decision"] == "promoted"),
        "{learn:?}"
    );
}

#[test]
fn a_burst_of_denials_trips_the_breaker_reads_still_run_and_reset_restores() {
    let w = World::with_config("[breaker]\nthreshold = 2\n");
    let session_id = "7e1f3c2a-5b4d-4c6e-9f80-1a2b3c4d5e6f";
    let api = FakeApi::start(vec![
        Step::bash("rm tracked.txt"),
        Step::bash("touch ok.txt"),
        Step::bash("cat tracked.txt"),
        Step::Text("the gate is read-only; stopping".into()),
        Step::bash("touch ok.txt"),
    ]);
    let run = w.claude(&api, "clean up", &["--session-id", session_id]);
    assert_eq!(run.denials(), 1, "{}", run.result);

    // Rolled back in the mirror: a dirty run, which trips the breaker at threshold 2.
    let rm = api.result_of(0).expect("rm result");
    assert!(rm.is_error && rm.content.contains("rolled back"), "{rm:?}");
    let touch = api.result_of(1).expect("touch result");
    assert!(
        touch.is_error && touch.content.contains("circuit breaker"),
        "{touch:?}"
    );
    assert!(!w.ws("ok.txt").exists());
    let cat = api.result_of(2).expect("cat result");
    assert!(
        !cat.is_error && cat.content.contains("precious"),
        "reads run: {cat:?}"
    );
    assert_eq!(w.row(1)["decision"], "deny");

    let reset = w.gate.cli_json(&["breaker", "reset", "--json"]);
    println!("breaker reset: {reset}");
    assert!(
        reset["reset"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| *s == format!("session:{session_id}")),
        "{reset}"
    );

    // The same session, resumed: the call the breaker refused now runs.
    w.claude(&api, "try again", &["--resume", session_id]);
    let again = api.result_of(4).expect("touch result after the reset");
    assert!(!again.is_error, "{again:?}");
    assert!(w.ws("ok.txt").exists(), "allowed after the reset");
    assert_eq!(w.row(4)["decision"], "run");
    let breaker_rows = w.gate.audit("breaker");
    println!("breaker rows: {breaker_rows:?}");
    assert!(breaker_rows.len() >= 2, "trip and reset are audited");
}

#[test]
fn the_agent_cannot_edit_the_tier_map_a_tampered_map_grants_nothing_and_resigning_restores() {
    let mut w = World::new();
    let map = w.ws("CLAUDE_CMDS.md");
    let signed = std::fs::read_to_string(&map).unwrap();
    // The agent's edit: `rm *` as a tier-0 read.
    let widened = signed.replacen("- `pwd`", "- `pwd`\n- `rm *`", 1);
    let map_path = map.display().to_string();

    // The agent tries to widen its own rules, through Write and through Bash.
    let api = FakeApi::start(vec![
        Step::write(&map_path, &widened),
        Step::bash("echo '- `rm *`' >> CLAUDE_CMDS.md"),
    ]);
    let run = w.claude(&api, "allow yourself rm", &[]);
    let write = api.result_of(0).expect("write result");
    assert!(
        write.is_error && write.content.contains("protected path"),
        "Write of the tier map needs a person, a denial in -p mode: {write:?}"
    );
    let append = api.result_of(1).expect("append result");
    assert!(
        append.is_error
            && append.content.contains("cmdgate rolled back")
            && append.content.contains("CLAUDE_CMDS.md"),
        "{append:?}"
    );
    assert_eq!(run.denials(), 1, "{}", run.result);
    assert_eq!(
        std::fs::read_to_string(&map).unwrap(),
        signed,
        "the map is untouched"
    );

    // Had the edit landed anyway (here: written from outside Claude Code), it grants nothing: the
    // signature no longer verifies, so the project turns read-only at once — `rm *` is no read, and
    // what the signed map allowed (`touch`) is refused too until the operator re-signs.
    std::fs::write(&map, &widened).unwrap();
    let api = FakeApi::start(vec![
        Step::bash("rm tracked.txt"),
        Step::read(&w.ws("tracked.txt").display().to_string()),
        Step::bash("touch while-tampered.txt"),
    ]);
    w.claude(&api, "use the widened map", &[]);
    let rm = api.result_of(0).expect("rm result");
    assert!(
        rm.is_error && rm.content.contains("cmdgate denied"),
        "{rm:?}"
    );
    assert_eq!(w.read("tracked.txt"), "precious\n", "the file survives");
    let read = api.result_of(1).expect("read result");
    assert!(
        !read.is_error && read.content.contains("precious"),
        "reads still run: {read:?}"
    );
    let touch = api.result_of(2).expect("touch result");
    assert!(
        touch.is_error && touch.content.contains("read-only"),
        "{touch:?}"
    );
    assert!(!w.ws("while-tampered.txt").exists());
    let events = w.gate.audit("tiermap");
    println!("tiermap rows: {events:?}");
    assert!(
        events.iter().any(|e| e["decision"] == "rejected"),
        "the tampered map is reported: {events:?}"
    );

    // A fresh daemon reaches the same verdict from the file alone.
    w.gate.stop();
    w.gate.start();
    let api = FakeApi::start(vec![Step::bash("touch after-tamper.txt")]);
    w.claude(&api, "work on a tampered map", &[]);
    let touch = api.result_of(0).expect("touch result");
    assert!(
        touch.is_error
            && touch.content.contains("read-only")
            && touch.content.contains("signature"),
        "{touch:?}"
    );
    assert!(!w.ws("after-tamper.txt").exists());

    // The operator reviews the map (drops the agent's rule, adds one of their own) and re-signs
    // it: revision 2 activates.
    let reviewed = signed.replacen("- `pwd`", "- `pwd`\n- `whoami`", 1);
    std::fs::write(&map, reviewed).unwrap();
    w.gate.resign();
    let api = FakeApi::start(vec![Step::bash("touch after-resign.txt")]);
    w.claude(&api, "work on the re-signed map", &[]);
    let touch = api.result_of(0).expect("touch result");
    assert!(!touch.is_error, "{touch:?}");
    assert!(w.ws("after-resign.txt").exists());
    let row = w.row(0);
    assert_eq!(row["decision"], "run", "{row}");
    assert_eq!(row["tiermap_revision"], 2, "{row}");
}

#[test]
fn the_same_rollback_holds_in_every_permission_mode() {
    let w = World::new();
    for mode in ["default", "acceptEdits", "bypassPermissions"] {
        let run = w.play_with(
            mode,
            &["--permission-mode", mode],
            vec![Step::bash("rm tracked.txt")],
        );
        let r = run.result(0);
        assert!(
            r.is_error && r.content.contains("cmdgate rolled back `rm tracked.txt`"),
            "{mode}: {r:?}"
        );
        assert_eq!(run.denials(), 0, "{mode}: {}", run.run.result);
        assert_eq!(
            w.read("tracked.txt"),
            "precious\n",
            "{mode}: the file survives"
        );
        let last = w.row(0);
        assert_eq!(last["decision"], "run", "{mode}: {last}");
        assert_eq!(last["permission_mode"], mode, "{mode}: {last}");
        assert_eq!(w.run_row(0)["decision"], "rolled_back", "{mode}");
    }
}

/// How many times a `git reset` ran in the workspace (each adds a reflog entry, even to where
/// HEAD already is): the tier-2 command the background-mode test has a person approve.
fn resets(w: &World) -> usize {
    cmdgate_tests::claude::git(&w.session.workspace(), &["reflog", "--format=%gs"])
        .lines()
        .filter(|l| l.starts_with("reset: moving to HEAD"))
        .count()
}

/// Waits (bounded) until `cmdgate pending` lists a request; returns it.
fn wait_pending(gate: &Gate) -> Value {
    let started = std::time::Instant::now();
    loop {
        let list = gate.cli_json(&["pending", "--json"]);
        if let Some(p) = list.as_array().and_then(|a| a.first()) {
            return p.clone();
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(40),
            "nothing became pending: {list}\n{}",
            std::fs::read_to_string(gate.log_path()).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn background_mode_holds_an_ask_for_the_operator_who_approves_and_remembers_it() {
    let mut w = World::with_config("[approvals]\nmode = \"background\"\n");
    // Tier 2 in the starter map: a person decides.
    let commit = "git reset -q --soft HEAD";
    let api = FakeApi::start(vec![Step::bash(commit)]);

    // Claude Code waits inside its hook while the operator answers from another process.
    let run = std::thread::scope(|s| {
        let claude = s.spawn(|| w.claude(&api, "commit, once the operator agrees", &[]));
        let pending = wait_pending(&w.gate);
        println!("pending: {pending}");
        assert_eq!(pending["command"], commit, "{pending}");
        let id = pending["id"].to_string();
        let answered = w.gate.cli_json(&[
            "approve",
            &id,
            "--remember",
            "--note",
            "empty commits are fine here",
            "--json",
        ]);
        println!("approve: {answered}");
        assert_eq!(answered["delivered"], true, "{answered}");
        claude.join().expect("claude thread")
    });
    assert_eq!(run.denials(), 0, "{}", run.result);
    let r = api.result_of(0).expect("a result for the commit");
    assert!(!r.is_error, "{r:?}");
    assert!(resets(&w) == 1, "the approved command ran for real");
    let row = w.row(0);
    assert_eq!(row["decision"], "allow", "{row}");
    assert_eq!(row["source"], "human", "{row}");
    assert_eq!(row["note"], "empty commits are fine here", "{row}");

    // A restart keeps the remembered rule and its note: the same command runs with nobody asked.
    w.gate.stop();
    w.gate.start();
    let rules = w.gate.cli(&["rules", "list", "--json"]).stdout_text();
    println!("rules: {rules}");
    assert!(rules.contains("empty commits are fine here"), "{rules}");
    let api = FakeApi::start(vec![Step::bash(commit)]);
    let run = w.claude(&api, "commit again", &[]);
    assert_eq!(run.denials(), 0, "{}", run.result);
    let row = w.row(0);
    assert_eq!(row["decision"], "allow", "{row}");
    assert_eq!(row["source"], "remembered", "{row}");
    assert_eq!(resets(&w), 2, "the remembered command ran again");

    // Nobody answers this one: denied at the (short) deadline, and the model is told why.
    w.gate.stop();
    std::fs::write(
        w.gate.conf.join("config.toml"),
        "[approvals]\nmode = \"background\"\nwait_ms = 2000\n",
    )
    .unwrap();
    w.gate.start();
    let api = FakeApi::start(vec![Step::bash(
        "git push -q . HEAD:refs/heads/never-answered",
    )]);
    let run = w.claude(&api, "commit without an answer", &[]);
    assert_eq!(run.denials(), 1, "{}", run.result);
    let r = api
        .result_of(0)
        .expect("a result for the unanswered commit");
    assert!(r.is_error && r.content.contains("nobody answered"), "{r:?}");
    assert!(
        !cmdgate_tests::claude::git(&w.session.workspace(), &["branch", "--list"])
            .contains("never-answered")
    );
    let row = w.row(0);
    assert_eq!(row["decision"], "deny", "{row}");
    assert_eq!(row["source"], "fail_closed", "{row}");
    assert_eq!(
        w.gate.cli_json(&["pending", "--json"]),
        serde_json::json!([])
    );
}
