//! Recursive searches of the project root end to end: the real hook and the real daemon list the
//! searched directory (one level) and treat the search as a read only when nothing there is on the
//! secret-path list (`policy::shell::read::recursive`).

use cmdgate_tests::gate::Gate;
use serde_json::json;

#[test]
fn a_search_of_a_clean_project_root_is_a_read_and_a_secret_there_needs_a_person() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    // Claude Code's Grep with no path searches its cwd, the project root: nothing secret there,
    // so the hook allows it without the daemon.
    let (d, reason) = g.pre_tool("grep-clean", "Grep", json!({"pattern": "precious"}));
    assert_eq!(d, "allow", "{reason}");
    assert!(
        g.decision_row("grep-clean").is_none(),
        "it reached the daemon"
    );
    // A command whose other part is not a read reaches the daemon, which lists the root itself and
    // judges the search a read (the rest is test-run).
    let (d, reason) = g.pre("mixed-clean", "grep -r precious . && touch searched.txt");
    assert_eq!(d, "allow", "{reason}");
    let row = g
        .decision_row("mixed-clean")
        .expect("decided by the daemon");
    assert_eq!(row["source"], "sandbox", "{row}");

    // A `.env` at the root: the search would print it. Neither the hook nor the daemon lets it
    // through without a person, and both name the file.
    std::fs::write(g.proj.join(".env"), "DB_PASSWORD=hunter2\n").unwrap();
    let (d, reason) = g.pre_tool("grep-env", "Grep", json!({"pattern": "PASSWORD"}));
    assert_eq!(d, "ask", "{reason}");
    assert!(reason.contains(".env"), "{reason}");
    let row = g.decision_row("grep-env").expect("decided by the daemon");
    assert_eq!(row["decision"], "ask", "{row}");
    let (d, reason) = g.pre("bash-env", "grep -r PASSWORD . && touch searched.txt");
    assert_eq!(d, "ask", "{reason}");
    assert!(reason.contains(".env"), "{reason}");
    // A subdirectory the agent names is still a read (a secret deep inside it is the documented
    // limit; `secret_paths` covers such places).
    std::fs::create_dir_all(g.proj.join("src")).unwrap();
    let (d, reason) = g.pre("sub", "grep -r TODO src");
    assert_eq!(d, "allow", "{reason}");
}

#[test]
fn a_symlink_the_hook_routes_is_not_allowed_by_the_daemon_on_its_spelling() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    // Secrets outside the project, reached through links inside it.
    let outside = g.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join(".env"), "DB_PASSWORD=hunter2\n").unwrap();
    std::os::unix::fs::symlink(outside.join(".env"), g.proj.join("notes.txt")).unwrap();
    std::os::unix::fs::symlink(&outside, g.proj.join("docs")).unwrap();
    // The hook sees through the links and routes both; the daemon must not allow them on the
    // name the link has in the project.
    let read = g.proj.join("notes.txt").display().to_string();
    let (d, reason) = g.pre_tool("read-link", "Read", json!({"file_path": read}));
    assert_ne!(d, "allow", "{reason}");
    let (d, reason) = g.pre_tool(
        "grep-link",
        "Grep",
        json!({"pattern": "PASSWORD", "path": "docs"}),
    );
    assert_ne!(d, "allow", "{reason}");
    // A plain file and directory in the project stay reads.
    std::fs::write(g.proj.join("plain.txt"), "x\n").unwrap();
    std::fs::create_dir_all(g.proj.join("src")).unwrap();
    let plain = g.proj.join("plain.txt").display().to_string();
    let (d, reason) = g.pre_tool("read-plain", "Read", json!({"file_path": plain}));
    assert_eq!(d, "allow", "{reason}");
    let (d, reason) = g.pre_tool("grep-src", "Grep", json!({"pattern": "x", "path": "src"}));
    assert_eq!(d, "allow", "{reason}");
}
