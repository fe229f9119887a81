//! Learning the operator's acceptance, end to end (issue 19; real hook, `cmdgate-run`, daemon,
//! sandbox and CLI): a command that rewrites a tracked file is rolled back each time, and the
//! operator applies it (`cmdgate apply`); after the K-th apply (the default, 3) its next run with
//! exactly the same refused effects commits without asking, audited as `accepted_run` with the
//! learned source, shown by `cmdgate status` and `cmdgate explain`. The same command refusing
//! one more path is rolled back and withdraws the acceptance, so the next plain run is rolled
//! back again; an undo of an accepted run forgets it too.

use cmdgate_tests::gate::Gate;
use serde_json::Value;

const COMMAND: &str = "sh gen.sh";

fn gate() -> Gate {
    let mut g = Gate::new();
    g.init_signed();
    // A generated file the project tracks: the command's rewrite of it is a refused effect.
    std::fs::write(g.proj.join("gen.txt"), "generated 0\n").unwrap();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(&g.proj)
            .output()
            .unwrap();
        assert!(ok.status.success(), "git {args:?}");
    };
    git(&["add", "gen.txt"]);
    git(&[
        "-c",
        "user.email=t@t",
        "-c",
        "user.name=t",
        "commit",
        "-qm",
        "gen",
    ]);
    std::fs::write(
        g.proj.join("gen.sh"),
        "n=$(cat gen.txt | tr -dc 0-9); echo \"generated $((n + 1))\" > gen.txt\n",
    )
    .unwrap();
    g.start();
    g
}

/// The newest `run` row for a tool_use_id (the run itself, not an apply or undo).
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

/// Runs the command through the hook and the client: (exit code, stderr, run row).
fn run(g: &Gate, tool_use_id: &str) -> (Option<i32>, String, Value) {
    let done = g.shell(&g.pre_rewrite(tool_use_id, COMMAND));
    let err = done.stderr_text();
    let row = run_row(g, tool_use_id);
    println!(
        "{tool_use_id}: exit {:?}, {} ({})\n{err}",
        done.status.code(),
        row["decision"],
        row["source"]
    );
    (done.status.code(), err, row)
}

fn learn_rows(g: &Gate, decision: &str) -> Vec<Value> {
    g.audit("learn")
        .into_iter()
        .filter(|r| r["decision"] == decision)
        .collect()
}

fn gen(g: &Gate) -> String {
    std::fs::read_to_string(g.proj.join("gen.txt")).unwrap()
}

/// K applies of one signature, then the run that commits by acceptance.
fn accept_k_times(g: &Gate) {
    for i in 1..=3 {
        let (code, err, row) = run(g, &format!("a{i}"));
        assert_ne!(code, Some(0), "{err}");
        assert_eq!(row["decision"], "rolled_back", "{row}");
        assert_eq!(gen(g), format!("generated {}\n", i - 1), "rolled back");
        let sandbox: Value = serde_json::from_str(row["sandbox"].as_str().unwrap()).unwrap();
        assert_eq!(
            sandbox["acceptance"]["signature"],
            serde_json::json!(["modified gen.txt"]),
            "{sandbox}"
        );
        let applied = g.cli_json(&["apply", &run_id(&row), "--json"]);
        println!("apply {i}: {applied}");
        assert_eq!(gen(g), format!("generated {i}\n"), "applied");
        let learned = learn_rows(g, "acceptance_learned");
        assert_eq!(learned.len(), usize::from(i == 3), "{learned:?}");
    }
}

#[test]
fn k_applies_make_the_same_effects_commit_and_one_more_effect_is_rolled_back() {
    let g = gate();
    accept_k_times(&g);
    let learned = &learn_rows(&g, "acceptance_learned")[0];
    println!("learned: {learned}");
    assert!(
        learned["note"]
            .as_str()
            .is_some_and(|n| n.contains("modified gen.txt")),
        "{learned}"
    );
    // `cmdgate explain` shows what is accepted for the command.
    let explained = g.cli_json(&["explain", "--json", "--", COMMAND]);
    let acceptance = &explained["outcome"]["acceptance"];
    println!("explain: {acceptance}");
    assert_eq!(acceptance["k"], 3, "{explained}");
    assert_eq!(
        acceptance["accepted"][0]["signature"], "modified gen.txt",
        "{explained}"
    );

    // The 4th run: the same refused effect, committed without asking.
    let (code, err, row) = run(&g, "a4");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(row["decision"], "accepted_run", "{row}");
    assert_eq!(row["source"], "learned", "{row}");
    assert!(
        err.contains("committed by the operator's acceptance"),
        "{err}"
    );
    assert_eq!(gen(&g), "generated 4\n");
    let status = g.cli_json(&["status", "--json"]);
    assert_eq!(status["runs"]["accepted"], 1, "{}", status["runs"]);
    let text = g.cli(&["status"]).stdout_text();
    assert!(
        text.contains("1 committed by the operator's acceptance"),
        "{text}"
    );

    // The export tells the runs apart: a rolled-back one is `sandbox_dirty`, the accepted one
    // has the learned source, and its record names the applies it rode on.
    let out = g.dir.path().join("export.jsonl");
    let exported = g.cli(&["export", "--out", out.to_str().unwrap()]);
    assert!(exported.status.success(), "{}", exported.stderr_text());
    let lines: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_tool = |id: &str| {
        let decision_id = g
            .decision_row(id)
            .unwrap_or_else(|| panic!("no decision row for {id}"))["id"]
            .clone();
        lines
            .iter()
            .find(|l| l["audit_id"] == decision_id)
            .unwrap_or_else(|| panic!("{id} not exported: {lines:?}"))
            .clone()
    };
    let a1 = by_tool("a1");
    let a4 = by_tool("a4");
    println!("export a1: {a1}\nexport a4: {a4}");
    assert_eq!(a1["decision"]["verdict"], "allow", "{a1}");
    assert_eq!(a1["label_basis"], "sandbox_dirty", "{a1}");
    assert_eq!(a1["decision"]["sandbox"]["status"], "rolled_back", "{a1}");
    assert_eq!(a4["decision"]["verdict"], "allow", "{a4}");
    assert_eq!(a4["decision"]["source"], "learned", "{a4}");
    assert_eq!(a4["label_basis"], "learned", "{a4}");
    assert!(
        a4["decision"]["sandbox"]["acceptance"]["accepted"].is_array(),
        "{a4}"
    );

    // A hostile turn: the same command now also deletes a tracked file. One more refused effect
    // is another signature: rolled back, and the acceptance is withdrawn.
    std::fs::write(
        g.proj.join("gen.sh"),
        "echo 'generated 99' > gen.txt; rm tracked.txt\n",
    )
    .unwrap();
    let (code, err, row) = run(&g, "h1");
    assert_ne!(code, Some(0), "{err}");
    assert_eq!(row["decision"], "rolled_back", "{row}");
    assert!(err.contains("cmdgate rolled back"), "{err}");
    assert_eq!(gen(&g), "generated 4\n");
    assert_eq!(
        std::fs::read_to_string(g.proj.join("tracked.txt")).unwrap(),
        "precious\n"
    );
    let withdrawn = learn_rows(&g, "acceptance_withdrawn");
    assert_eq!(withdrawn.len(), 1, "{withdrawn:?}");
    // And the well-behaved command needs the person again.
    std::fs::write(g.proj.join("gen.sh"), "echo 'generated 5' > gen.txt\n").unwrap();
    let (code, err, row) = run(&g, "a5");
    assert_ne!(code, Some(0), "{err}");
    assert_eq!(row["decision"], "rolled_back", "{row}");
    assert_eq!(gen(&g), "generated 4\n");
}

#[test]
fn an_undo_of_an_accepted_run_forgets_the_acceptance() {
    let g = gate();
    accept_k_times(&g);
    let (code, err, row) = run(&g, "a4");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(row["decision"], "accepted_run", "{row}");
    let undone = g.cli(&["undo", &run_id(&row)]);
    assert!(undone.status.success(), "{}", undone.stderr_text());
    assert_eq!(gen(&g), "generated 3\n");
    assert_eq!(learn_rows(&g, "acceptance_withdrawn").len(), 1);
    let (code, err, row) = run(&g, "a5");
    assert_ne!(code, Some(0), "{err}");
    assert_eq!(row["decision"], "rolled_back", "{row}");
    assert_eq!(gen(&g), "generated 3\n");
}
