//! A daemon killed with SIGKILL in the middle of committing a mirrored run, end to end (real hook,
//! `cmdgate-run`, `cmdgated`, sandbox): the run writes many files into an existing directory, so
//! its commit is one journaled rename per file and takes a while; the test waits for the commit
//! journal's manifest (`<store>/journal/<run id>/manifest.json`, written before the first rename)
//! and the first rename, kills the daemon, starts it again and checks the invariant — the
//! workspace holds all of the run's files or none, never a part — and that the restart reports
//! what it repaired. Whether the kill landed inside the commit or after it is not under the
//! test's control; both cases are checked, and the test prints which one happened.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cmdgate_tests::gate::Gate;
use serde_json::Value;

/// Files the run creates: enough that committing them takes much longer than the poll below.
const FILES: usize = 30_000;

/// `<run dir>` of a mirrored run from a path in its upper dir (`…/mirror/runs/<id>/upper/<name>`):
/// (store root, run id).
fn store_and_run(in_upper: &Path, name: &str) -> (PathBuf, String) {
    let mut run_dir = in_upper.to_path_buf();
    for _ in 0..Path::new(name).components().count() + 1 {
        run_dir.pop();
    }
    let id = run_dir.file_name().unwrap().to_string_lossy().into_owned();
    let store = run_dir.parent().unwrap().parent().unwrap().to_path_buf();
    (store, id)
}

/// How many of the run's files are in the workspace.
fn landed(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('f'))
        .count()
}

#[test]
fn a_daemon_killed_mid_commit_leaves_all_of_the_run_or_none_and_the_restart_says_so() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    // An existing directory: new files in it are committed one rename each (a new directory
    // would be one rename for everything below it).
    std::fs::create_dir(g.proj.join("many")).unwrap();
    std::fs::write(g.proj.join("many/keep"), "k\n").unwrap();
    std::fs::write(
        g.proj.join("gen.py"),
        format!(
            "for i in range(1, {FILES} + 1):\n    open('many/f%05d' % i, 'w').close()\n\
             print('made')\n"
        ),
    )
    .unwrap();
    let cmd = g.pre_rewrite("t1", "python3 gen.py");
    let mut child = g.spawn_shell(&cmd);
    // The run is in the mirror once its last file is in the upper dir; the commit starts after
    // the command has ended and its effects are judged.
    let last = format!("many/f{FILES:05}");
    let in_upper = g.wait_in_mirror(&last);
    let (store, run_id) = store_and_run(&in_upper, &last);
    let journal = store.join("journal").join(&run_id);
    let manifest = journal.join("manifest.json");
    // The manifest is written (and synced) before the first rename; the first rename into
    // `many` changes its mtime. Kill then (or once the commit is complete, if it was quicker).
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let before = mtime(&g.proj.join("many"));
    let started = Instant::now();
    loop {
        let renaming = manifest.exists() && mtime(&g.proj.join("many")) != before;
        if renaming || journal.join("committed").exists() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no commit journal for run {run_id} at {}: {}",
            manifest.display(),
            std::fs::read_to_string(g.log_path()).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    g.kill9();
    // What the dead daemon left on disk decides which case this is.
    let committed = journal.join("committed").exists();
    let in_workspace_at_kill = landed(&g.proj.join("many"));
    println!(
        "killed with the manifest of run {run_id} written; committed marker: {committed}; \
         files in the workspace at the kill: {in_workspace_at_kill} of {FILES}"
    );
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let client = child.wait().unwrap();
    println!("client: exit {client:?}\n{err}");
    g.start();
    let after = landed(&g.proj.join("many"));
    assert!(
        g.proj.join("many/keep").exists(),
        "the host's own file stays"
    );
    assert!(
        after == 0 || after == FILES,
        "half-applied: {after} of {FILES} files after the restart"
    );
    let recovered: Vec<Value> = g
        .audit("run")
        .into_iter()
        .filter(|r| r["decision"] == "recovered")
        .collect();
    let status = g.cli_json(&["status", "--json"]);
    println!(
        "recovered rows: {recovered:?}\nstatus runs: {}",
        status["runs"]
    );
    if committed {
        println!("case: the kill came after the commit was complete: all {FILES} files landed");
        assert_eq!(after, FILES);
        assert!(
            !recovered
                .iter()
                .any(|r| r["reason"].as_str().is_some_and(|t| t.contains(&run_id))),
            "a complete commit is not rolled back: {recovered:?}"
        );
        // The journal still holds it, so `cmdgate undo` can take it back.
        let undone = g.cli(&["undo", &run_id]);
        assert!(undone.status.success(), "{}", undone.stderr_text());
        assert_eq!(landed(&g.proj.join("many")), 0);
    } else {
        println!(
            "case: the kill came inside the commit ({in_workspace_at_kill} files renamed in): \
             the restart rolled it back"
        );
        assert_eq!(after, 0, "an interrupted commit is rolled back");
        // The client never saw an end frame: it says the daemon went away.
        assert_eq!(client.code(), Some(125), "{err}");
        assert!(err.contains("went away"), "{err}");
        let row = recovered
            .iter()
            .find(|r| r["reason"].as_str().is_some_and(|t| t.contains(&run_id)))
            .unwrap_or_else(|| panic!("no recovery row names run {run_id}: {recovered:?}"));
        assert!(
            row["reason"]
                .as_str()
                .is_some_and(|r| r.contains("rolled back") && r.contains("could not repair []")),
            "{row}"
        );
        assert!(
            status["runs"]["recovered"].as_u64().is_some_and(|n| n >= 1),
            "status counts the recovery: {}",
            status["runs"]
        );
        // Nothing is left to undo: the journal of the rolled-back commit is gone.
        let undo = g.cli(&["undo", &run_id]);
        assert!(!undo.status.success(), "{}", undo.stdout_text());
    }
}
