//! Committing mirrored runs (issue 19): every kind of change an overlay upper dir can record
//! reaches the workspace exactly; conflicts, refusals and crashes commit nothing; undo restores.

use crate::common::{tree_hash, Env};
use crate::mirror::{command, mirrored, mirrored_with};
use cmdgate_sandbox::commit::{
    self, ChangeKind, CommitConfig, CommitError, JournalState, UndoError,
};
use cmdgate_sandbox::mirror::Finished;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn run(env: &Env, cmd: &str) -> Finished {
    let (_, err, fin) = mirrored(env, &command(env, cmd));
    assert!(fin.run.exit == Some(0), "{cmd}: {err} {:?}", fin.run);
    fin
}

fn commit_ok(fin: Finished) -> commit::CommitReport {
    match commit::commit(fin.kept, &CommitConfig::default()) {
        Ok(r) => r,
        Err(e) => panic!("commit failed: {e}"),
    }
}

fn read(env: &Env, rel: &str) -> String {
    std::fs::read_to_string(env.ws.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn new_files_and_directories_land_and_undo_removes_them() {
    let env = Env::new();
    env.write("src/keep.rs", "keep\n");
    let before = tree_hash(&env.ws);
    let fin = run(
        &env,
        "mkdir -p out/sub && echo a > out/sub/a && echo b > src/new.rs",
    );
    let upper_dir = fin.kept.dir();
    let report = commit_ok(fin);
    assert_eq!(read(&env, "out/sub/a"), "a\n");
    assert_eq!(read(&env, "src/new.rs"), "b\n");
    assert!(
        report.changes.iter().all(|c| c.what == ChangeKind::Created),
        "{report:?}"
    );
    assert_eq!(
        report.changes.len(),
        2,
        "a new directory is one change: {report:?}"
    );
    assert!(!upper_dir.exists(), "the spent upper dir is removed");
    let listed = commit::runs(&env.state);
    assert_eq!(listed[0].run_id, report.run_id);
    assert_eq!(listed[0].state, JournalState::Committed);
    commit::undo(&env.state, &report.run_id).expect("undo");
    assert_eq!(tree_hash(&env.ws), before);
    assert_eq!(commit::runs(&env.state)[0].state, JournalState::Undone);
    assert!(matches!(
        commit::undo(&env.state, &report.run_id),
        Err(UndoError::AlreadyUndone(_))
    ));
}

#[test]
fn replaced_directories_type_changes_deletions_and_modes() {
    let env = Env::new();
    env.write("d/a", "a");
    env.write("d/b", "b");
    env.write("f", "file");
    env.write("g/child", "c");
    env.write("del", "gone");
    env.write("deldir/x/y", "gone");
    env.write("m", "mode");
    env.write("md/x", "x");
    env.write("mod", "old\n");
    std::fs::set_permissions(env.ws.join("m"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(env.ws.join("md"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = tree_hash(&env.ws);
    let fin = run(
        &env,
        "rm -rf d && mkdir d && echo n > d/new && \
         rm f && mkdir f && echo in > f/in && \
         rm -rf g && echo now-a-file > g && \
         rm del && rm -rf deldir && \
         chmod 755 m && chmod 700 md && echo new >> mod",
    );
    let report = commit_ok(fin);
    let names = |d: &str| {
        let mut v: Vec<_> = std::fs::read_dir(env.ws.join(d))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names("d"), ["new"], "the opaque dir hid the old entries");
    assert_eq!(read(&env, "f/in"), "in\n");
    assert_eq!(read(&env, "g"), "now-a-file\n");
    assert!(!env.ws.join("del").exists() && !env.ws.join("deldir").exists());
    let mode = |p: &str| std::fs::metadata(env.ws.join(p)).unwrap().mode() & 0o7777;
    assert_eq!(mode("m"), 0o755);
    assert_eq!(mode("md"), 0o700);
    assert_eq!(
        read(&env, "md/x"),
        "x",
        "a mode change keeps the directory's entries"
    );
    assert_eq!(read(&env, "mod"), "old\nnew\n");
    assert!(report.journal_bytes > 0);
    commit::undo(&env.state, &report.run_id).expect("undo");
    assert_eq!(tree_hash(&env.ws), before, "undo restores every pre-image");
}

#[test]
fn symlinks_are_created_and_changed_never_followed() {
    let env = Env::new();
    env.write("a", "a");
    std::os::unix::fs::symlink("a", env.ws.join("l2")).unwrap();
    let fin = run(
        &env,
        "ln -s target l1 && ln -sfn b l2 && mkdir -p dir && echo x > dir/new",
    );
    commit_ok(fin);
    assert_eq!(
        std::fs::read_link(env.ws.join("l1")).unwrap(),
        Path::new("target")
    );
    assert_eq!(
        std::fs::read_link(env.ws.join("l2")).unwrap(),
        Path::new("b")
    );
    assert_eq!(read(&env, "a"), "a", "the old link's target is untouched");
}

#[test]
fn a_host_directory_swapped_for_a_symlink_before_the_commit_is_not_written_through() {
    let env = Env::new();
    env.write("dir/old", "o");
    let outside = tempfile::tempdir().unwrap();
    let fin = run(&env, "echo x > dir/new");
    // After the run, the host's dir becomes a symlink to a directory outside the workspace.
    std::fs::rename(env.ws.join("dir"), env.ws.join("dir.moved")).unwrap();
    std::os::unix::fs::symlink(outside.path(), env.ws.join("dir")).unwrap();
    match commit::commit(fin.kept, &CommitConfig::default()) {
        Err(CommitError::Conflict { problems, kept }) => {
            assert!(
                problems.iter().any(|p| p.path == Path::new("dir")),
                "{problems:?}"
            );
            kept.discard().unwrap();
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn hard_links_are_never_split() {
    let env = Env::new();
    env.write("h1", "old\n");
    std::fs::hard_link(env.ws.join("h1"), env.ws.join("h2")).unwrap();
    // Appending to one name copies it up alone (index=off): committing would split the link.
    let fin = run(&env, "echo more >> h1");
    match commit::commit(fin.kept, &CommitConfig::default()) {
        Err(CommitError::Refused { problems, kept }) => {
            assert!(problems[0].why.contains("hard-linked"), "{problems:?}");
            kept.discard().unwrap();
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(read(&env, "h2"), "old\n");
    // Replacing every name (as cargo re-links its outputs) commits, link kept.
    let fin = run(&env, "rm h1 h2 && echo new > h1 && ln h1 h2");
    commit_ok(fin);
    let (a, b) = (
        std::fs::metadata(env.ws.join("h1")).unwrap(),
        std::fs::metadata(env.ws.join("h2")).unwrap(),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
    assert_eq!(read(&env, "h2"), "new\n");
}

#[test]
fn names_with_newlines_and_non_utf8_bytes() {
    let env = Env::new();
    let before = tree_hash(&env.ws);
    let fin = run(
        &env,
        "printf x > \"$(printf 'a\\nb')\" && printf y > $'\\xff\\xfe' && mkdir $'d\\x01' && printf z > $'d\\x01/%41'",
    );
    let report = commit_ok(fin);
    let at = |raw: &[u8]| env.ws.join(OsStr::from_bytes(raw));
    assert_eq!(std::fs::read(at(b"a\nb")).unwrap(), b"x");
    assert_eq!(std::fs::read(at(b"\xff\xfe")).unwrap(), b"y");
    assert_eq!(std::fs::read(at(b"d\x01/%41")).unwrap(), b"z");
    commit::undo(&env.state, &report.run_id).expect("undo");
    assert_eq!(tree_hash(&env.ws), before);
}

#[test]
fn a_hundred_thousand_new_files() {
    let env = Env::new();
    env.write("target/existing", "");
    // Every create passes the seccomp supervisor: give a loaded machine time.
    let mut config = env.config();
    config.limits.timeout = std::time::Duration::from_secs(600);
    let cmd = "mkdir gen && cd gen && seq 1 100000 | sed 's/^/f/' | xargs touch && \
               cd ../target && seq 1 2000 | sed 's/^/o/' | xargs touch";
    let (_, err, fin) = mirrored_with(&config, &command(&env, cmd));
    assert_eq!(fin.run.exit, Some(0), "{err}");
    let report = commit_ok(fin);
    assert_eq!(
        std::fs::read_dir(env.ws.join("gen")).unwrap().count(),
        100_000
    );
    assert_eq!(
        std::fs::read_dir(env.ws.join("target")).unwrap().count(),
        2001
    );
    assert_eq!(report.changes.len(), 2001, "gen/ moves with one rename");
}

#[test]
fn a_host_change_after_the_run_started_commits_nothing() {
    let env = Env::new();
    env.write("f", "host\n");
    env.write("g", "g\n");
    let before = tree_hash(&env.ws);
    let fin = run(&env, "echo mirror > f && echo new > created && echo x >> g");
    // The agent's own Edit tool writes f, and something creates `created`, after the run.
    std::fs::write(env.ws.join("f"), "edited\n").unwrap();
    std::fs::write(env.ws.join("created"), "host\n").unwrap();
    match commit::commit(fin.kept, &CommitConfig::default()) {
        Err(CommitError::Conflict { problems, kept }) => {
            let paths: Vec<_> = problems.iter().map(|p| p.path.clone()).collect();
            assert_eq!(
                paths,
                [Path::new("created"), Path::new("f")],
                "{problems:?}"
            );
            kept.discard().unwrap();
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(read(&env, "g"), "g\n", "nothing of the run was committed");
    assert_ne!(tree_hash(&env.ws), before); // only the host's own edits
    assert!(commit::runs(&env.state).is_empty());
}

#[test]
fn undo_is_refused_after_a_later_change() {
    let env = Env::new();
    env.write("f", "one\n");
    let fin = run(&env, "echo two > f && echo n > new");
    let report = commit_ok(fin);
    std::fs::write(env.ws.join("new"), "edited after the commit\n").unwrap();
    match commit::undo(&env.state, &report.run_id) {
        Err(UndoError::Conflict(problems)) => {
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert_eq!(problems[0].path, Path::new("new"));
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(read(&env, "f"), "two\n", "nothing was undone");
    assert_eq!(read(&env, "new"), "edited after the commit\n");
}

#[test]
fn a_crash_mid_commit_is_rolled_back_by_recover() {
    let env = Env::new();
    for i in 0..5 {
        env.write(&format!("t/f{i}"), "old\n");
    }
    let before = tree_hash(&env.ws);
    for stop in 1..=6 {
        let fin = run(
            &env,
            "for i in 0 1 2 3 4; do echo new > t/f$i; done; rm t/f4; echo n > t/z",
        );
        let err = commit::commit(
            fin.kept,
            &CommitConfig {
                stop_after: Some(stop),
            },
        );
        assert!(matches!(err, Err(CommitError::Stopped(_))), "{err:?}");
        assert_ne!(tree_hash(&env.ws), before, "stopped half-way (stop {stop})");
        let report = commit::recover(&env.state);
        assert_eq!(report.rolled_back.len(), 1, "{report:?}");
        assert!(report.failed.is_empty(), "{report:?}");
        assert_eq!(tree_hash(&env.ws), before, "rolled back (stop {stop})");
        assert!(commit::runs(&env.state).is_empty());
    }
    // After recovery the same change commits normally.
    commit_ok(run(&env, "echo new > t/f0"));
    assert_eq!(read(&env, "t/f0"), "new\n");
}

#[test]
fn special_files_set_id_bits_and_killed_runs_are_refused() {
    let env = Env::new();
    let before = tree_hash(&env.ws);
    for cmd in ["mkfifo p && echo ok > ok", "echo x > s && chmod u+s s"] {
        let fin = run(&env, cmd);
        match commit::commit(fin.kept, &CommitConfig::default()) {
            Err(CommitError::Refused { kept, .. }) => kept.discard().unwrap(),
            other => panic!("{cmd}: expected a refusal, got {other:?}"),
        }
    }
    let mut r =
        cmdgate_sandbox::mirror::start(&env.config(), &command(&env, "echo x > k; exec sleep 600"))
            .expect("start");
    drop(r.take_stdout());
    r.killer().kill();
    let fin = r.wait().expect("wait");
    assert!(matches!(
        commit::commit(fin.kept, &CommitConfig::default()),
        Err(CommitError::Killed(_))
    ));
    assert_eq!(tree_hash(&env.ws), before);
}

#[test]
fn a_user_namespace_overlay_marker_set_by_the_command_is_only_data() {
    let env = Env::new();
    env.write("dir/host-file", "keep\n");
    // The command marks a merged directory "opaque" in the user.* namespace (allowed to it);
    // read as an overlay marker it would delete the host's entries at commit.
    let fin = run(
        &env,
        "echo n > dir/new && /usr/bin/python3 -c \
         'import os; os.setxattr(\"dir\", \"user.overlay.opaque\", b\"y\")'",
    );
    commit_ok(fin);
    assert_eq!(read(&env, "dir/host-file"), "keep\n");
    assert_eq!(read(&env, "dir/new"), "n\n");
}

#[test]
fn a_kept_run_can_be_applied_later_and_orphans_are_swept() {
    let env = Env::new();
    // Kept for an operator: survives recover(), loads by id, commits later.
    let fin = run(&env, "echo later > applied-later");
    let id = fin.kept.run_id().to_string();
    fin.kept
        .keep_for(std::time::Duration::from_secs(3600))
        .expect("keep");
    // An orphan: finished, never committed, owner gone (std::mem::forget stands for the crash).
    let orphan = run(&env, "echo x > orphan");
    let orphan_dir = orphan.kept.dir();
    std::mem::forget(orphan);
    let report = commit::recover(&env.state);
    assert!(
        report.discarded.iter().any(|d| orphan_dir.ends_with(d)),
        "{report:?}"
    );
    assert!(!orphan_dir.exists());
    let kept = cmdgate_sandbox::mirror::load_kept(&env.state, &id).expect("load");
    commit_ok_kept(kept);
    assert_eq!(read(&env, "applied-later"), "later\n");
    assert!(!env.ws.join("orphan").exists());
    // An expired keep is pruned; the journal is bounded by age and bytes.
    let fin = run(&env, "echo y > expired");
    let dir = fin.kept.dir();
    fin.kept.keep_for(std::time::Duration::ZERO).expect("keep");
    let limits = commit::JournalLimits {
        max_age: std::time::Duration::ZERO,
        max_bytes: 1 << 30,
    };
    let dropped = commit::prune(&env.state, &limits);
    assert!(!dir.exists(), "{dropped:?}");
    assert!(
        dropped.contains(&id),
        "the journal entry of the applied run: {dropped:?}"
    );
    assert!(commit::runs(&env.state).is_empty());
}

fn commit_ok_kept(kept: cmdgate_sandbox::mirror::KeptUpper) -> commit::CommitReport {
    match commit::commit(kept, &CommitConfig::default()) {
        Ok(r) => r,
        Err(e) => panic!("commit failed: {e}"),
    }
}

#[test]
fn an_undo_interrupted_by_a_crash_is_finished_by_recover() {
    let env = Env::new();
    env.write("a", "old a\n");
    env.write("b", "old b\n");
    let before = tree_hash(&env.ws);
    let report = commit_ok(run(&env, "echo new > a && rm b && echo c > c"));
    // The crash: undo wrote its `undoing` marker and restored `b` (the last step, done first),
    // then died. The journal's layout is the store's: <state>/mirror/journal/<id>.
    let jdir = env.state.join("mirror/journal").join(&report.run_id);
    std::fs::write(jdir.join("undoing"), b"").unwrap();
    let slot = report
        .changes
        .iter()
        .position(|c| c.path == Path::new("b"))
        .unwrap();
    std::fs::rename(jdir.join("pre").join(slot.to_string()), env.ws.join("b")).unwrap();
    assert_eq!(commit::runs(&env.state)[0].state, JournalState::Undoing);
    let rec = commit::recover(&env.state);
    assert_eq!(
        rec.undo_finished,
        std::slice::from_ref(&report.run_id),
        "{rec:?}"
    );
    assert_eq!(tree_hash(&env.ws), before);
    assert_eq!(commit::runs(&env.state)[0].state, JournalState::Undone);
}

#[test]
fn a_directory_the_host_deleted_while_the_run_changed_it_is_not_resurrected() {
    let env = Env::new();
    env.write("d/f", "f\n");
    env.write("d/g", "g\n");
    env.write("a", "a\n");
    env.write("l", "l\n");
    // The run edits d/f, renames a file it changed, and hard-links one (both keep their origin).
    let fin = run(&env, "echo more >> d/f && echo x >> a && mv a b && ln l l2");
    // The host removes d entirely after the run started.
    std::fs::remove_dir_all(env.ws.join("d")).unwrap();
    match commit::commit(fin.kept, &CommitConfig::default()) {
        Err(CommitError::Conflict { problems, kept }) => {
            let paths: Vec<_> = problems.iter().map(|p| p.path.clone()).collect();
            assert_eq!(paths, [Path::new("d")], "{problems:?}");
            kept.discard().unwrap();
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(!env.ws.join("d").exists());
    // Without the host's deletion, the rename and the link commit.
    let report = commit_ok(run(&env, "echo x >> a && mv a b && ln l l2"));
    assert_eq!(read(&env, "b"), "a\nx\n");
    assert!(!env.ws.join("a").exists());
    assert_eq!(
        std::fs::metadata(env.ws.join("l2")).unwrap().ino(),
        std::fs::metadata(env.ws.join("l")).unwrap().ino()
    );
    assert!(!report.changes.is_empty());
}

/// A host repository with one commit, made by the test (as the run would see it).
fn git_repo(env: &Env) {
    env.write("README", "hello\n");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(&env.ws)
            .env("HOME", &env.home)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "README"]);
    git(&["commit", "-q", "-m", "first"]);
}

const GIT_ID: &str = "git -c user.name=agent -c user.email=agent@example.invalid";

#[test]
fn git_bookkeeping_of_a_git_command_is_clean_and_commits_into_the_real_repository() {
    let env = Env::new();
    git_repo(&env);
    let mut config = env.config();
    config.git_bookkeeping = true;
    let add_commit = format!("echo f > f && {GIT_ID} add f && {GIT_ID} commit -q -m x");
    // The verdict (a test-run judges with the same code and no disk-space guard).
    let run = crate::common::run_with(&config, &add_commit);
    assert!(run.clean, "{:?} {}", run.why, run.stderr);
    assert!(
        run.effects
            .iter()
            .any(|e| e.to_string().contains(".git/index")),
        "{:?}",
        run.effects
    );
    // Without the git flag the same effects are protected.
    let run = crate::common::run_with(&env.config(), &add_commit);
    assert!(
        run.why.iter().any(|w| w.contains("protected")),
        "{:?}",
        run.why
    );
    // Never clean, even for git: config, hooks.
    for cmd in [
        format!("{GIT_ID} config core.hooksPath /tmp/h"),
        "echo 'echo pwned' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit".to_string(),
        "echo '[core]' >> .git/config".to_string(),
    ] {
        let run = crate::common::run_with(&config, &cmd);
        assert!(
            run.why.iter().any(|w| w.contains("protected")),
            "{cmd}: {:?}",
            run.why
        );
    }

    // The mirrored run's .git changes commit like any other: the commit is in the host repo.
    let (_, err, fin) = mirrored_with(&config, &command(&env, &add_commit));
    assert_eq!(fin.run.exit, Some(0), "{err}");
    assert!(
        !fin.run.why.iter().any(|w| w.contains(".git")),
        "{:?}",
        fin.run.why
    );
    commit_ok(fin);
    let log = std::process::Command::new("git")
        .args(["log", "--format=%s", "--name-only"])
        .current_dir(&env.ws)
        .output()
        .expect("git log");
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(log.starts_with("x\n\nf\n"), "{log}");
    let status = std::process::Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(&env.ws)
        .output()
        .expect("git status");
    assert_eq!(
        String::from_utf8_lossy(&status.stdout),
        "",
        "clean tree after commit"
    );
}

/// A config whose `write=` path is `$HOME/.cargo/registry` (existing, with one old file).
fn with_registry(env: &Env) -> (cmdgate_sandbox::RunConfig, std::path::PathBuf) {
    assert!(!env.home.starts_with("/tmp"), "use Env::new_in(/var/tmp)");
    let reg = env.home.join(".cargo/registry");
    std::fs::create_dir_all(&reg).unwrap();
    std::fs::write(reg.join("old"), "old\n").unwrap();
    let mut cfg = env.config();
    cfg.extra_writable = vec![reg.clone()];
    (cfg, reg.canonicalize().unwrap())
}

fn run_with(env: &Env, cfg: &cmdgate_sandbox::RunConfig, cmd: &str) -> Finished {
    let (_, err, fin) = mirrored_with(cfg, &command(env, cmd));
    assert!(fin.run.exit == Some(0), "{cmd}: {err} {:?}", fin.run);
    fin
}

#[test]
fn write_paths_commit_with_the_workspace_and_undo_with_the_run_home_writes_do_not() {
    let env = Env::new_in(std::path::Path::new("/var/tmp"));
    let (cfg, reg) = with_registry(&env);
    let before = (tree_hash(&env.ws), tree_hash(&env.home));
    let fin = run_with(
        &env,
        &cfg,
        "mkdir $HOME/.cargo/registry/cache && echo crate > $HOME/.cargo/registry/cache/a.crate \
         && echo new > $HOME/.cargo/registry/old && echo b > out && echo h > $HOME/elsewhere",
    );
    assert!(fin.run.clean, "{:?}", fin.run.why);
    assert_eq!(fin.kept.kept_writes().collect::<Vec<_>>(), [reg.as_path()]);
    let left: Vec<String> = fin.uncommitted_writes().map(|e| e.to_string()).collect();
    assert!(
        left.len() == 1 && left[0].contains("~/elsewhere"),
        "only the $HOME write outside write= stays behind: {left:?}"
    );
    let kept_dirs = [fin.kept.dir()];
    let report = commit_ok(fin);
    assert_eq!(read(&env, "out"), "b\n");
    assert_eq!(
        std::fs::read_to_string(reg.join("cache/a.crate")).unwrap(),
        "crate\n"
    );
    assert_eq!(std::fs::read_to_string(reg.join("old")).unwrap(), "new\n");
    assert!(
        !env.home.join("elsewhere").exists(),
        "$HOME outside write= is never committed"
    );
    let paths: Vec<_> = report.changes.iter().map(|c| c.path.clone()).collect();
    assert!(paths.contains(&reg.join("cache")), "{paths:?}");
    assert!(paths.contains(&reg.join("old")), "{paths:?}");
    assert!(paths.contains(&"out".into()), "{paths:?}");
    assert!(kept_dirs.iter().all(|d| !d.exists()));
    assert_eq!(commit::runs(&env.state)[0].changes.len(), 3);
    commit::undo(&env.state, &report.run_id).expect("undo");
    assert_eq!((tree_hash(&env.ws), tree_hash(&env.home)), before);
}

#[test]
fn a_write_path_conflict_or_refusal_commits_nothing_anywhere() {
    let env = Env::new_in(std::path::Path::new("/var/tmp"));
    let (cfg, reg) = with_registry(&env);
    let before = (tree_hash(&env.ws), tree_hash(&env.home));
    // The host changes the write= tree while the run runs: nothing of the run lands.
    let fin = run_with(
        &env,
        &cfg,
        "echo b > out && echo new > $HOME/.cargo/registry/old",
    );
    std::fs::write(reg.join("old"), "host edit\n").unwrap();
    match commit::commit(fin.kept, &CommitConfig::default()) {
        Err(CommitError::Conflict { problems, kept }) => {
            assert_eq!(problems[0].path, reg.join("old"), "{problems:?}");
            kept.discard().unwrap();
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(!env.ws.join("out").exists());
    std::fs::write(reg.join("old"), "old\n").unwrap();
    // A fifo in the write= tree is refused like one in the workspace.
    let fin = run_with(&env, &cfg, "echo b > out && mkfifo $HOME/.cargo/registry/p");
    match commit::commit(fin.kept, &CommitConfig::default()) {
        Err(CommitError::Refused { problems, kept }) => {
            assert_eq!(problems[0].path, reg.join("p"), "{problems:?}");
            kept.discard().unwrap();
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!env.ws.join("out").exists());
    let _ = before;
}

#[test]
fn a_write_path_behind_a_symlink_is_never_committed_through_it() {
    let env = Env::new_in(std::path::Path::new("/var/tmp"));
    let (cfg, reg) = with_registry(&env);
    let elsewhere = env._dir.path().join("elsewhere");
    std::fs::create_dir_all(elsewhere.join("registry")).unwrap();
    // Swapped after the run: `~/.cargo` becomes a link to another tree with a `registry`.
    let fin = run_with(
        &env,
        &cfg,
        "echo b > out && echo x > $HOME/.cargo/registry/new",
    );
    std::fs::rename(env.home.join(".cargo"), env.home.join(".cargo.x")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, env.home.join(".cargo")).unwrap();
    match commit::commit(fin.kept, &CommitConfig::default()) {
        Err(CommitError::Io { path, kept, .. }) => {
            assert_eq!(path, reg);
            kept.discard().unwrap();
        }
        other => panic!("expected the tree to be refused, got {other:?}"),
    }
    assert!(
        !elsewhere.join("registry/new").exists(),
        "nothing through the link"
    );
    assert!(!env.ws.join("out").exists(), "nothing anywhere");
    // A write= path that is behind a link when the run starts is not kept at all.
    let fin = run_with(&env, &cfg, "echo x > $HOME/.cargo/registry/new2; true");
    assert_eq!(fin.kept.kept_writes().count(), 0);
    commit_ok(fin);
    assert!(!elsewhere.join("registry/new2").exists());
}

#[test]
fn a_crash_mid_commit_of_a_write_path_is_rolled_back_everywhere() {
    let env = Env::new_in(std::path::Path::new("/var/tmp"));
    let (cfg, reg) = with_registry(&env);
    env.write("t/f0", "old\n");
    let before = (tree_hash(&env.ws), tree_hash(&env.home));
    for stop in 1..=4 {
        let fin = run_with(
            &env,
            &cfg,
            "echo new > t/f0 && echo n > t/z && echo new > $HOME/.cargo/registry/old && \
             echo x > $HOME/.cargo/registry/y",
        );
        let err = commit::commit(
            fin.kept,
            &CommitConfig {
                stop_after: Some(stop),
            },
        );
        assert!(matches!(err, Err(CommitError::Stopped(_))), "{err:?}");
        let report = commit::recover(&env.state);
        assert_eq!(report.rolled_back.len(), 1, "{report:?}");
        assert!(report.failed.is_empty(), "{report:?}");
        assert_eq!(
            (tree_hash(&env.ws), tree_hash(&env.home)),
            before,
            "rolled back (stop {stop})"
        );
    }
    let left: Vec<_> = std::fs::read_dir(&env.state)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let _ = (left, reg);
}

#[test]
fn spent_dirs_leave_the_run_at_once_and_what_a_crash_left_in_the_trash_goes_at_start() {
    let env = Env::new();
    let store = cmdgate_sandbox::store::for_workspace(&env.ws.canonicalize().unwrap(), &env.state)
        .expect("store");
    let trash = store.trash();
    // The run dir holds what a commit reads (the upper dir; a root caller needs no record on
    // disk) and the overlay's work dir, which goes with it.
    let fin = run(&env, "echo new > landed");
    let dir = fin.kept.dir();
    let mut left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(left, ["upper", "work"], "{}", dir.display());
    // What is left after the commit stays until the caller drops it (the daemon: after the
    // run's end frame), then leaves runs/ at once.
    let (report, spent) = commit::commit_spent(fin.kept, &CommitConfig::default()).expect("commit");
    assert_eq!(report.changes.len(), 1, "{report:?}");
    assert_eq!(read(&env, "landed"), "new\n");
    assert!(dir.exists(), "held by the caller");
    drop(spent);
    assert!(!dir.exists(), "the spent run dir left runs/ when dropped");
    // This process's reaper removes what it moved to the trash.
    cmdgate_sandbox::trash::wait_idle();
    assert_eq!(std::fs::read_dir(&trash).unwrap().count(), 0);
    // A rolled-back run's upper dir goes the same way.
    let fin = run(&env, "echo no > discarded");
    let dir = fin.kept.dir();
    fin.kept.discard().expect("discard");
    assert!(!dir.exists());
    cmdgate_sandbox::trash::wait_idle();
    assert_eq!(std::fs::read_dir(&trash).unwrap().count(), 0);
    assert!(!env.ws.join("discarded").exists());
    // What a process that died before its reaper was done left (named as `trash` names, with
    // another pid: 2^22 is above any pid Linux hands out): a whole kept run, record and all,
    // kept "for an hour". It is nobody's run:
    // not listed, not loadable, never committed; the next start removes it.
    let id = "r-left-by-a-crash";
    let left = trash.join(format!("{id}.4194304.0"));
    std::fs::create_dir_all(left.join("upper/sub")).unwrap();
    std::fs::write(left.join("upper/sub/file"), "never committed\n").unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let meta = serde_json::json!({
        "run_id": id,
        "workspace": env.ws.canonicalize().unwrap(),
        "started": [0, 0],
        "killed": false,
        "keep_until": now.as_secs() + 3600,
        "extra": [],
    });
    std::fs::write(left.join("meta.json"), meta.to_string()).unwrap();
    // The same record in `runs/` is a kept run (what makes the one in the trash nobody's).
    let fin = run(&env, "echo kept > kept");
    let kept_id = fin.kept.run_id().to_string();
    let kept_dir = fin.kept.dir();
    fin.kept
        .keep_for(std::time::Duration::from_secs(3600))
        .expect("keep");
    // A kept run keeps its upper dir, not its overlay's work dir.
    assert!(kept_dir.join("upper").is_dir() && !kept_dir.join("work").exists());
    assert!(commit::kept_runs(&env.state)
        .iter()
        .any(|k| k.run_id == kept_id));
    assert!(cmdgate_sandbox::mirror::load_kept(&env.state, id).is_err());
    assert!(commit::kept_runs(&env.state).iter().all(|k| k.run_id != id));
    // A crash after a commit, before the caller dropped what was left of the run's dirs: the
    // commit stands (journaled, undoable), and the next start discards the run dir.
    let fin = run(&env, "echo late > late");
    let (late_id, late_dir) = (fin.kept.run_id().to_string(), fin.kept.dir());
    let (_, spent) = commit::commit_spent(fin.kept, &CommitConfig::default()).expect("commit");
    std::mem::forget(spent);
    assert!(late_dir.exists());
    cmdgate_sandbox::trash::wait_idle();
    let report = commit::recover(&env.state);
    assert_eq!(report.trash, [format!("{id}.4194304.0")], "{report:?}");
    assert_eq!(
        report.discarded,
        std::slice::from_ref(&late_id),
        "{report:?}"
    );
    assert!(report.rolled_back.is_empty(), "{report:?}");
    assert!(!late_dir.exists());
    assert_eq!(read(&env, "late"), "late\n");
    assert!(commit::runs(&env.state).iter().any(|j| j.run_id == late_id));
    assert_eq!(std::fs::read_dir(&trash).unwrap().count(), 0);
    assert!(!env.ws.join("sub").exists());
}

/// The caller's start of the run (`MirrorCommand::since`, the daemon's decision) is the run's
/// boundary when it is earlier than the helper's receipt of the `Run`: a host change between
/// the two is counted as after the run started (a conflict when the run writes the same path).
#[test]
fn a_host_change_after_the_callers_start_of_the_run_is_a_conflict() {
    let env = Env::new();
    env.write("f", "before\n");
    // The boundary, then a change stamped after it (the coarse clock has passed it), then the
    // run: without the caller's start, the run's boundary is after the change.
    let since = cmdgate_sandbox::clock::settle();
    env.write("f", "host\n");
    let mut cmd = command(&env, "echo mirror > f");
    cmd.since = Some(since);
    let (_, err, fin) = mirrored(&env, &cmd);
    assert_eq!(fin.run.exit, Some(0), "{err}");
    conflict_on_f(&env, fin);
}

/// A caller's start later than the helper's receipt of the `Run` (a clock set back, a wrong
/// caller) is not the boundary: a host change after the run really started is still a
/// conflict, never overwritten by the commit.
#[test]
fn a_start_of_the_run_after_its_receipt_is_not_its_boundary() {
    let env = Env::new();
    env.write("f", "before\n");
    let now = cmdgate_sandbox::clock::precise_now();
    let mut cmd = command(&env, "echo mirror > f");
    cmd.since = Some([now[0] + 3600, now[1]]);
    let (_, err, fin) = mirrored(&env, &cmd);
    assert_eq!(fin.run.exit, Some(0), "{err}");
    env.write("f", "host\n");
    conflict_on_f(&env, fin);
}

/// The commit of `fin` is a conflict naming `f`, and the host's `f` stays as the host wrote it.
fn conflict_on_f(env: &Env, fin: Finished) {
    match commit::commit(fin.kept, &CommitConfig::default()) {
        Err(CommitError::Conflict { problems, kept }) => {
            assert!(
                problems.iter().any(|p| p.path == Path::new("f")),
                "{problems:?}"
            );
            kept.discard().unwrap();
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(read(env, "f"), "host\n");
}
