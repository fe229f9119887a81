//! The effects diff through real overlay runs: each kind of change is reported as what it is,
//! and the real workspace is byte-identical afterwards.

use super::common::{self, Env};
use cmdgate_sandbox::{Area, Effect, FileKind};
use std::path::PathBuf;

/// Run `cmd` in a workspace holding `a.txt` ("one\n"), `a.sh` (0644) and `d/{x,y}`; return the
/// effects in the workspace after checking the host tree did not change.
fn effects_of(cmd: &str) -> Vec<Effect> {
    let env = Env::new();
    env.write("a.txt", "one\n");
    env.write("a.sh", "echo\n");
    env.write("d/x", "x\n");
    env.write("d/y", "y\n");
    let before = common::tree_hash(&env.ws);
    let run = env.run(cmd);
    assert_eq!(run.exit, Some(0), "{}", common::show(&run));
    assert_eq!(before, common::tree_hash(&env.ws), "host workspace changed");
    run.effects
        .into_iter()
        .filter(|e| e.location().is_some_and(|(a, _)| a == Area::Workspace))
        .collect()
}

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

#[test]
fn create() {
    let e = effects_of("echo hello > new.txt && mkdir -p out/sub");
    assert_eq!(
        e,
        vec![
            Effect::Created {
                area: Area::Workspace,
                path: p("new.txt"),
                kind: FileKind::File,
                size: 6
            },
            Effect::Created {
                area: Area::Workspace,
                path: p("out"),
                kind: FileKind::Dir,
                size: 0
            },
            Effect::Created {
                area: Area::Workspace,
                path: p("out/sub"),
                kind: FileKind::Dir,
                size: 0
            },
        ]
    );
}

#[test]
fn modify() {
    let e = effects_of("echo two >> a.txt");
    assert_eq!(
        e,
        vec![Effect::Modified {
            area: Area::Workspace,
            path: p("a.txt"),
            old_size: 4,
            new_size: 8
        }]
    );
}

#[test]
fn modify_same_size_is_content_not_metadata() {
    let e = effects_of("printf 'two\\n' > a.txt");
    assert_eq!(
        e,
        vec![Effect::Modified {
            area: Area::Workspace,
            path: p("a.txt"),
            old_size: 4,
            new_size: 4
        }]
    );
}

#[test]
fn chmod_only() {
    let e = effects_of("chmod 700 a.sh");
    assert_eq!(
        e,
        vec![Effect::MetadataChanged {
            area: Area::Workspace,
            path: p("a.sh"),
            old_mode: 0o644,
            new_mode: 0o700
        }]
    );
}

#[test]
fn touch_without_change_is_not_an_effect() {
    assert_eq!(effects_of("touch a.txt && cat a.txt >/dev/null"), vec![]);
}

#[test]
fn delete() {
    let e = effects_of("rm a.txt");
    assert_eq!(
        e,
        vec![Effect::Deleted {
            area: Area::Workspace,
            path: p("a.txt"),
            kind: FileKind::File,
            size: 4
        }]
    );
}

#[test]
fn delete_dir() {
    let e = effects_of("rm -r d");
    assert_eq!(
        e,
        vec![Effect::Deleted {
            area: Area::Workspace,
            path: p("d"),
            kind: FileKind::Dir,
            size: 4
        }]
    );
}

#[test]
fn rename() {
    let e = effects_of("mv a.txt b.txt");
    assert_eq!(
        e,
        vec![Effect::Renamed {
            area: Area::Workspace,
            from: p("a.txt"),
            to: p("b.txt"),
            size: 4
        }]
    );
}

#[test]
fn delete_then_recreate() {
    let e = effects_of("rm a.txt && echo fresh > a.txt");
    assert_eq!(
        e,
        vec![Effect::Modified {
            area: Area::Workspace,
            path: p("a.txt"),
            old_size: 4,
            new_size: 6
        }]
    );
}

#[test]
fn replaced_dir() {
    let e = effects_of("rm -r d && mkdir d && echo z > d/z");
    assert_eq!(
        e,
        vec![
            Effect::ReplacedDir {
                area: Area::Workspace,
                path: p("d")
            },
            Effect::Created {
                area: Area::Workspace,
                path: p("d/z"),
                kind: FileKind::File,
                size: 2
            },
        ]
    );
}

#[test]
fn file_replaced_by_dir() {
    let e = effects_of("rm a.txt && mkdir a.txt");
    assert_eq!(
        e,
        vec![Effect::Replaced {
            area: Area::Workspace,
            path: p("a.txt"),
            old: FileKind::File,
            new: FileKind::Dir
        }]
    );
}

#[test]
fn ten_thousand_changes_are_all_reported() {
    let e = effects_of("mkdir many && cd many && for i in $(seq 1 10000); do : > f$i; done");
    assert_eq!(e.len(), 10_001);
}

#[test]
fn tracked_changes_are_dirty_untracked_are_clean() {
    let env = Env::new();
    env.write("src/lib.rs", "fn main() {}\n");
    env.write(".gitignore", "target/\n");
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(&env.ws)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .output()
            .expect("git runs");
        assert!(
            ok.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&ok.stderr)
        );
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "init"]);
    env.write("notes.txt", "untracked\n");
    env.write("target/old", "built\n");

    let run = env.run(
        "mkdir -p target && echo x > target/new && echo y >> target/old && echo z >> notes.txt",
    );
    assert!(run.clean, "{}", common::show(&run));

    let run = env.run("echo '// edit' >> src/lib.rs");
    assert!(!run.clean);
    assert!(
        run.why
            .iter()
            .any(|w| w.contains("tracked by git") && w.contains("src/lib.rs")),
        "{:?}",
        run.why
    );

    let run = env.run("rm -rf src");
    assert!(
        run.why.iter().any(|w| w.contains("tracked by git")),
        "{:?}",
        run.why
    );

    let run = env.run("echo evil > .git/hooks/post-checkout");
    assert!(
        run.why.iter().any(|w| w.contains("protected")),
        "{:?}",
        run.why
    );
}
