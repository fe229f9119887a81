//! Git's lock discipline at commit (issue 14): a git command's bookkeeping under `.git/` is
//! committed only while cmdgate holds the repository's `index.lock`; a host git that holds it (or
//! the lock of a ref the commit changes) past the wait is a conflict, and nothing is applied; a
//! run that leaves a lock file behind is refused. An undo that puts back files under `.git/` takes
//! the same lock: a host git holding it makes the undo a conflict that undoes nothing.

use crate::common::Env;
use crate::mirror::{command, mirrored_with};
use cmdgate_sandbox::commit::{self, CommitConfig, CommitError};
use cmdgate_sandbox::mirror::Finished;
use cmdgate_sandbox::RunConfig;

const GIT_ID: &str = "git -c user.name=agent -c user.email=agent@example.invalid";

fn git(env: &Env, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(&env.ws)
        .env("HOME", &env.home)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn repo() -> (Env, RunConfig) {
    let env = Env::new();
    env.write("README", "hello\n");
    git(&env, &["init", "-q", "-b", "main"]);
    git(&env, &["add", "README"]);
    git(&env, &["commit", "-q", "-m", "first"]);
    let mut config = env.config();
    config.git_bookkeeping = true;
    (env, config)
}

fn add_commit(env: &Env, config: &RunConfig, msg: &str) -> Finished {
    let cmd = format!("echo {msg} > {msg} && {GIT_ID} add {msg} && {GIT_ID} commit -q -m {msg}");
    let (_, err, fin) = mirrored_with(config, &command(env, &cmd));
    assert_eq!(fin.run.exit, Some(0), "{err}");
    assert!(fin.run.clean, "{:?}", fin.run.why);
    fin
}

fn subjects(env: &Env) -> String {
    git(env, &["log", "--format=%s"])
}

#[test]
fn a_host_git_holding_the_index_lock_makes_the_commit_a_conflict_and_nothing_lands() {
    let (env, config) = repo();
    let fin = add_commit(&env, &config, "x");
    let lock = env.ws.join(".git/index.lock");
    std::fs::write(&lock, "a host git's new index").expect("lock");
    match commit::commit(fin.kept, &CommitConfig::default()) {
        Err(CommitError::Conflict { problems, kept }) => {
            let named: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
            assert!(
                named
                    .iter()
                    .any(|p| p.contains(".git/index.lock") && p.contains("another git")),
                "{named:?}"
            );
            kept.discard().expect("discard");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(&lock).expect("the host's lock"),
        "a host git's new index",
        "the host git's lock is never touched"
    );
    assert_eq!(subjects(&env), "first\n", "nothing of the run was applied");
    assert!(!env.ws.join("x").exists());

    // Once that git is done, the same work commits, and cmdgate's own lock is gone again.
    std::fs::remove_file(&lock).expect("unlock");
    let fin = add_commit(&env, &config, "y");
    commit::commit(fin.kept, &CommitConfig::default()).expect("commit");
    assert_eq!(subjects(&env), "y\nfirst\n");
    assert!(!lock.exists());
    assert_eq!(git(&env, &["status", "--porcelain"]), "");
}

#[test]
fn a_host_git_holding_a_ref_the_run_moves_is_waited_for_then_a_conflict() {
    let (env, config) = repo();
    let fin = add_commit(&env, &config, "x");
    let ref_lock = env.ws.join(".git/refs/heads/main.lock");
    std::fs::write(&ref_lock, "0000\n").expect("lock");
    match commit::commit(fin.kept, &CommitConfig::default()) {
        Err(CommitError::Conflict { problems, kept }) => {
            assert!(
                problems
                    .iter()
                    .any(|p| p.path.ends_with("refs/heads/main.lock")),
                "{problems:?}"
            );
            kept.discard().expect("discard");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(subjects(&env), "first\n");
    assert!(
        !env.ws.join(".git/index.lock").exists(),
        "cmdgate let go of the index lock"
    );
}

#[test]
fn a_run_that_leaves_a_git_lock_behind_is_refused() {
    let (env, config) = repo();
    let cmd = format!("echo x > x && {GIT_ID} add x && echo half > .git/index.lock");
    let (_, err, fin) = mirrored_with(&config, &command(&env, &cmd));
    assert_eq!(fin.run.exit, Some(0), "{err}");
    match commit::commit(fin.kept, &CommitConfig::default()) {
        Err(CommitError::Refused { problems, kept }) => {
            assert!(
                problems.iter().any(|p| p.path.ends_with(".git/index.lock")),
                "{problems:?}"
            );
            kept.discard().expect("discard");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!env.ws.join(".git/index.lock").exists());
    assert_eq!(git(&env, &["status", "--porcelain"]), "");
}

#[test]
fn an_undo_of_git_changes_waits_for_a_host_gits_lock_then_undoes_nothing() {
    let (env, config) = repo();
    let fin = add_commit(&env, &config, "x");
    let run_id = fin.kept.run_id().to_owned();
    commit::commit(fin.kept, &CommitConfig::default()).expect("commit");
    assert_eq!(subjects(&env), "x\nfirst\n");
    let lock = env.ws.join(".git/index.lock");
    std::fs::write(&lock, "a host git's new index").expect("lock");
    match commit::undo(&config.state_dir, &run_id) {
        Err(commit::UndoError::Conflict(problems)) => assert!(
            problems
                .iter()
                .any(|p| p.path.ends_with(".git/index.lock") && p.why.contains("another git")),
            "{problems:?}"
        ),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(&lock).expect("the host's lock"),
        "a host git's new index",
        "the host git's lock is never touched"
    );
    assert_eq!(subjects(&env), "x\nfirst\n", "nothing was undone");
    assert!(env.ws.join("x").exists());

    // Once that git is done, the undo goes through, and cmdgate's own lock is gone again.
    std::fs::remove_file(&lock).expect("unlock");
    commit::undo(&config.state_dir, &run_id).expect("undo");
    assert_eq!(subjects(&env), "first\n");
    assert!(!env.ws.join("x").exists());
    assert!(!lock.exists());
    assert_eq!(git(&env, &["status", "--porcelain"]), "");
}
