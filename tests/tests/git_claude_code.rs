//! Local git work of an unattended agent (issue 14) with the real Claude Code CLI (`claude -p`,
//! scripted by the fake Messages API), the hook `cmdgate hook install` registered, a real
//! `cmdgated` in background mode, the signed starter map and the real mirror: `git add` and
//! `git commit` run in the mirror and land in the real repository with nobody asked; a git command
//! that writes `.git/config`, or a script that writes `.git/hooks/pre-commit`, is rolled back and
//! the model is told why.

use cmdgate_tests::claude::{git, World};
use cmdgate_tests::fake_api::Step;

const BACKGROUND: &str = "[approvals]\nmode = \"background\"\n";

#[test]
fn an_unattended_agents_add_and_commit_land_in_the_real_repository_with_nobody_asked() {
    let w = World::with_config(BACKGROUND);
    let run = w.play(vec![
        Step::bash("echo 'first notes' > notes.txt"),
        Step::bash("git add notes.txt"),
        Step::bash("git commit -qm 'agent: notes'"),
        Step::bash("git switch -qc topic && git tag v0.1"),
    ]);
    for turn in 0..4 {
        let r = run.result(turn);
        assert!(!r.is_error, "turn {turn}: {r:?}");
        let ran = w.run_row(turn);
        assert_eq!(ran["decision"], "committed", "turn {turn}: {ran}");
    }
    assert_eq!(run.denials(), 0, "{}", run.run.result);
    let ws = w.session.workspace();
    assert_eq!(
        git(&ws, &["log", "-1", "--format=%s", "--name-only"]),
        "agent: notes\n\nnotes.txt\n",
        "the agent's commit is in the real repository"
    );
    assert_eq!(git(&ws, &["status", "--porcelain", "--", "notes.txt"]), "");
    assert_eq!(git(&ws, &["branch", "--show-current"]), "topic\n");
    assert_eq!(git(&ws, &["tag", "--list"]), "v0.1\n");
    assert_eq!(
        git(&ws, &["fsck", "--no-progress"]),
        "",
        "a sound repository"
    );
    assert!(
        !ws.join(".git/index.lock").exists(),
        "cmdgate's lock is gone"
    );
    // Nobody was asked: no pending request, no ask in the audit.
    assert_eq!(
        w.gate.cli_json(&["pending", "--json"]),
        serde_json::json!([])
    );
    assert!(
        !w.gate
            .audit("decision")
            .iter()
            .any(|r| r["decision"] == "ask"),
        "an ask was audited"
    );
}

#[test]
fn writing_git_config_or_a_hook_is_rolled_back_and_the_model_is_told_why() {
    let hook = "#!/bin/sh\necho pwned > pwned.txt\n";
    let w = World::builder()
        .config(BACKGROUND)
        .file(
            "setup.sh",
            format!(
                "mkdir -p .git/hooks\nprintf '{}' > .git/hooks/pre-commit\n\
                 chmod +x .git/hooks/pre-commit\n",
                hook.replace('\n', "\\n")
            ),
        )
        .start();
    let ws = w.session.workspace();
    let config_before = std::fs::read(ws.join(".git/config")).unwrap();
    let run = w.play(vec![
        Step::bash("git config core.fsmonitor 'touch pwned.txt'"),
        Step::bash("sh setup.sh"),
    ]);
    for (turn, named) in [(0, ".git/config"), (1, ".git/hooks/pre-commit")] {
        let r = run.result(turn);
        assert!(r.is_error, "turn {turn}: {r:?}");
        assert!(
            r.content.contains("cmdgate rolled back") && r.content.contains(named),
            "turn {turn}: the model sees what was refused and why: {r:?}"
        );
        assert_eq!(w.run_row(turn)["decision"], "rolled_back", "turn {turn}");
    }
    assert_eq!(
        std::fs::read(ws.join(".git/config")).unwrap(),
        config_before
    );
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert!(!ws.join("pwned.txt").exists());
    // A commit afterwards runs no hook and no fsmonitor of the agent's.
    let run = w.play(vec![Step::bash("git commit -q --allow-empty -m after")]);
    assert!(!run.result(0).is_error, "{:?}", run.result(0));
    assert_eq!(git(&ws, &["log", "-1", "--format=%s"]), "after\n");
    assert!(!ws.join("pwned.txt").exists());
}
