//! A run's diff (`commit::diff`) and the operator's apply of a kept run (`commit::apply`): what
//! the operator reads is what the run changed, and an apply commits it like any run — or, on a
//! conflict or when the run is gone, nothing.

use crate::common::{tree_hash, Env};
use crate::mirror::{command, mirrored};
use cmdgate_sandbox::commit::{
    self, ApplyError, CommitConfig, CommitError, DiffLimits, DiffSource, FileChange,
};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

/// Runs `cmd` in the mirror and keeps its upper dir as a rolled-back run would be kept.
fn kept(env: &Env, cmd: &str, ttl: Duration) -> String {
    let (_, err, fin) = mirrored(env, &command(env, cmd));
    assert_eq!(fin.run.exit, Some(0), "{cmd}: {err}");
    let id = fin.kept.run_id().to_owned();
    fin.kept.keep_for(ttl).expect("keep");
    id
}

fn change(d: &commit::RunDiff, path: &str) -> FileChange {
    d.files
        .iter()
        .find(|f| f.path == std::path::Path::new(path))
        .unwrap_or_else(|| panic!("{path} not in {:#?}", d.files))
        .change
}

#[test]
fn a_kept_runs_diff_names_every_kind_of_change_and_apply_commits_it_once() {
    let env = Env::new();
    env.write("a.txt", "one\ntwo\nthree\n");
    env.write("gone.txt", "bye\n");
    env.write("d/x", "x\n");
    env.write("d/y", "y\n");
    env.write("m", "mode\n");
    env.write("f", "becomes a dir\n");
    std::fs::write(env.ws.join("bin.dat"), [0u8, 1, 2, 3]).unwrap();
    std::fs::set_permissions(env.ws.join("m"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::symlink("x-target", env.ws.join("l")).unwrap();
    // A host symlink to a secret: the diff shows the link, never what it points at.
    std::fs::write(env.home.join("secret"), "TOPSECRET\n").unwrap();
    std::os::unix::fs::symlink(env.home.join("secret"), env.ws.join("s")).unwrap();
    let id = kept(
        &env,
        "sed -i 's/two/TWO/' a.txt && echo four >> a.txt && rm gone.txt && rm -rf d && \
         chmod 755 m && ln -sfn y-target l && rm s && printf '\\0\\1\\2\\3\\4' > bin.dat && \
         echo new > new.txt && mkdir -p e/sub && echo z > e/sub/z && rm f && mkdir f && \
         echo in > f/in",
        Duration::from_secs(3600),
    );
    let before = tree_hash(&env.ws);
    let d = commit::run_diff(&env.state, &id, DiffLimits::default()).expect("diff");
    println!("{}\n{:?}", d.text, d.stat);
    assert_eq!(d.source, DiffSource::Kept);
    assert!(!d.truncated, "{:?}", d.note);
    assert!(d.text.contains("--- a/a.txt\n+++ b/a.txt\n"), "{}", d.text);
    assert!(d.text.contains("-two\n+TWO\n"), "{}", d.text);
    assert!(d.text.contains("+four\n"), "{}", d.text);
    assert!(d.text.contains("+++ b/new.txt\n") && d.text.contains("+new\n"));
    assert!(d.text.contains("--- a/gone.txt\n+++ /dev/null\n") && d.text.contains("-bye\n"));
    assert!(
        d.text.contains("-x\n") && d.text.contains("-y\n"),
        "a deleted dir's files"
    );
    assert!(d.text.contains("+++ b/e/sub/z\n"), "a new dir's files");
    assert!(d.text.contains("binary or large file changed: 4 → 5 bytes"));
    assert!(d.text.contains("mode 644 → 755"));
    assert!(d.text.contains("symlink target x-target → y-target"));
    assert!(d.text.contains("deleted symlink (was → "));
    assert!(
        !d.text.contains("TOPSECRET"),
        "a host symlink is never followed"
    );
    assert!(d.text.contains("+in\n") && d.text.contains("-becomes a dir\n"));
    assert_eq!(change(&d, "a.txt"), FileChange::Modified);
    assert_eq!(change(&d, "gone.txt"), FileChange::Deleted);
    assert_eq!(change(&d, "new.txt"), FileChange::Added);
    assert_eq!(change(&d, "m"), FileChange::ModeChanged);
    assert_eq!(change(&d, "d/x"), FileChange::Deleted);
    let a = d.files.iter().find(|f| f.path.ends_with("a.txt")).unwrap();
    assert_eq!((a.insertions, a.deletions), (2, 1));
    assert_eq!(d.stat.files, d.files.len() as u64);
    assert_eq!(tree_hash(&env.ws), before, "a diff changes nothing");

    // Apply: the same commit as any run, journalled.
    let report = commit::apply(&env.state, &id, &CommitConfig::default()).expect("apply");
    assert_eq!(report.run_id, id);
    assert_eq!(
        std::fs::read_to_string(env.ws.join("a.txt")).unwrap(),
        "one\nTWO\nthree\nfour\n"
    );
    assert!(!env.ws.join("gone.txt").exists() && !env.ws.join("d").exists());
    assert_eq!(
        std::fs::read_to_string(env.ws.join("f/in")).unwrap(),
        "in\n"
    );
    // Once: the kept run is spent.
    assert!(matches!(
        commit::apply(&env.state, &id, &CommitConfig::default()),
        Err(ApplyError::Gone(_))
    ));
    // Now the diff comes from the journal, and says the same about the text.
    let j = commit::run_diff(&env.state, &id, DiffLimits::default()).expect("journal diff");
    println!("{}", j.text);
    assert_eq!(j.source, DiffSource::Journal);
    assert!(
        j.text.contains("-two\n+TWO\n") && j.text.contains("+four\n"),
        "{}",
        j.text
    );
    assert!(
        j.text.contains("-bye\n") && j.text.contains("+++ b/new.txt\n"),
        "{}",
        j.text
    );
    assert!(!j.text.contains("TOPSECRET"));
    // And undo works on an applied run.
    commit::undo(&env.state, &id).expect("undo");
    assert_eq!(
        std::fs::read_to_string(env.ws.join("a.txt")).unwrap(),
        "one\ntwo\nthree\n"
    );
    let u = commit::run_diff(&env.state, &id, DiffLimits::default()).expect("undone diff");
    assert_eq!(u.source, DiffSource::Undone);
    assert!(u.files.is_empty() && u.note.is_some());
}

#[test]
fn an_apply_after_a_conflicting_host_edit_commits_nothing_and_keeps_the_run() {
    let env = Env::new();
    env.write("a.txt", "host\n");
    let id = kept(
        &env,
        "echo run > a.txt && echo new > b.txt",
        Duration::from_secs(3600),
    );
    env.write("a.txt", "edited on the host after the run\n");
    let before = tree_hash(&env.ws);
    match commit::apply(&env.state, &id, &CommitConfig::default()) {
        Err(ApplyError::Commit(CommitError::Conflict { problems, .. })) => {
            assert!(
                problems.iter().any(|p| p.path.ends_with("a.txt")),
                "{problems:?}"
            )
        }
        other => panic!("expected a conflict: {other:?}"),
    }
    assert_eq!(
        tree_hash(&env.ws),
        before,
        "nothing of the run was committed"
    );
    assert!(!env.ws.join("b.txt").exists());
    // Still kept (until it expires): the operator can read its diff.
    assert!(commit::run_diff(&env.state, &id, DiffLimits::default()).is_ok());
    assert!(commit::kept_runs(&env.state).iter().any(|k| k.run_id == id));
}

#[test]
fn an_unknown_or_pruned_run_is_gone() {
    let env = Env::new();
    assert!(matches!(
        commit::apply(&env.state, "no-such-run", &CommitConfig::default()),
        Err(ApplyError::Gone(_))
    ));
    assert!(matches!(
        commit::run_diff(&env.state, "no-such-run", DiffLimits::default()),
        Err(commit::DiffError::NotFound(_))
    ));
    // Expired: pruned by the journal's prune.
    let id = kept(&env, "echo x > x", Duration::ZERO);
    commit::prune(&env.state, &commit::JournalLimits::default());
    assert!(matches!(
        commit::apply(&env.state, &id, &CommitConfig::default()),
        Err(ApplyError::Gone(_))
    ));
}

#[test]
fn kept_runs_are_bounded_in_bytes_oldest_first() {
    let env = Env::new();
    let old = kept(
        &env,
        "head -c 200000 /dev/urandom > a",
        Duration::from_secs(3600),
    );
    let new = kept(
        &env,
        "head -c 200000 /dev/urandom > b",
        Duration::from_secs(7200),
    );
    let dropped = commit::prune_kept(&env.state, 300_000);
    assert_eq!(dropped, vec![old.clone()]);
    let left: Vec<String> = commit::kept_runs(&env.state)
        .into_iter()
        .map(|k| k.run_id)
        .collect();
    assert_eq!(left, vec![new]);
}

#[test]
fn the_diff_is_bounded_and_says_what_it_cut() {
    let env = Env::new();
    let id = kept(
        &env,
        "for i in $(seq 1 40); do seq 1 200 > f$i.txt; done",
        Duration::from_secs(3600),
    );
    let limits = DiffLimits {
        max_output: 4096,
        ..DiffLimits::default()
    };
    let d = commit::run_diff(&env.state, &id, limits).expect("diff");
    assert!(d.text.len() <= 4096, "{}", d.text.len());
    assert!(d.truncated);
    assert!(
        d.note
            .as_deref()
            .unwrap_or("")
            .contains("cut at 4096 bytes"),
        "{:?}",
        d.note
    );
    assert_eq!(d.stat.files, 40, "the stat stays complete");
    assert_eq!(d.stat.insertions, 40 * 200);
    let few = DiffLimits {
        max_files: 5,
        ..DiffLimits::default()
    };
    let d = commit::run_diff(&env.state, &id, few).expect("diff");
    assert_eq!(d.files.len(), 5);
    assert!(d.truncated && d.note.as_deref().unwrap_or("").contains("stopped after 5"));
}

#[test]
fn a_runs_write_trees_are_in_its_diff_kept_and_committed() {
    let env = Env::new_in(std::path::Path::new("/var/tmp"));
    let reg = env.home.join(".cargo/registry");
    std::fs::create_dir_all(&reg).unwrap();
    std::fs::write(reg.join("old"), "old\n").unwrap();
    let mut cfg = env.config();
    cfg.extra_writable = vec![reg.clone()];
    let reg = reg.canonicalize().unwrap();
    let (_, err, fin) = crate::mirror::mirrored_with(
        &cfg,
        &command(&env, "echo new > $HOME/.cargo/registry/old && echo b > out"),
    );
    assert_eq!(fin.run.exit, Some(0), "{err}");
    let id = fin.kept.run_id().to_owned();
    fin.kept.keep_for(Duration::from_secs(3600)).expect("keep");
    let d = commit::run_diff(&env.state, &id, DiffLimits::default()).expect("diff");
    println!("{}", d.text);
    let old = reg.join("old").display().to_string();
    assert!(d.text.contains(&format!("--- a/{old}\n")), "{}", d.text);
    assert!(d.text.contains("-old\n+new\n"), "{}", d.text);
    assert!(d.text.contains("+++ b/out\n"), "{}", d.text);
    commit::apply(&env.state, &id, &CommitConfig::default()).expect("apply");
    let j = commit::run_diff(&env.state, &id, DiffLimits::default()).expect("journal diff");
    assert_eq!(j.source, DiffSource::Journal);
    assert!(
        j.text.contains("-old\n+new\n") && j.text.contains(&old),
        "{}",
        j.text
    );
}
