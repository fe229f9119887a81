//! The clean/dirty verdict (README, "Container mirror"), as a pure function of the run's outcome and config.

use crate::config::RunConfig;
use crate::model::{Area, Effect};
use crate::tracked::Tracked;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What the command did, before judging.
#[derive(Clone, Debug)]
pub struct Outcome<'a> {
    /// Exit code of `bash -c`.
    pub exit: Option<i32>,
    /// Terminating signal.
    pub signal: Option<i32>,
    /// Whether the timeout fired.
    pub timed_out: bool,
    /// All effects.
    pub effects: &'a [Effect],
    /// A mirrored run (issue 19): the run is the real run, so its exit status is ordinary work
    /// (a failing test suite) and never makes it dirty, and writes to the scratch trees (/tmp,
    /// /run, /dev/shm) and to `$HOME` outside the kept `write=` trees are simply not committed
    /// (the caller refuses the persistence files among them: `policy::decide::protected`).
    pub mirrored: bool,
}

/// Workspace-relative paths whose tracked status matters (pre-existing paths that changed).
pub fn paths_to_check(effects: &[Effect]) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for e in effects {
        match e {
            Effect::Modified {
                area: Area::Workspace,
                path,
                ..
            }
            | Effect::MetadataChanged {
                area: Area::Workspace,
                path,
                ..
            }
            | Effect::Deleted {
                area: Area::Workspace,
                path,
                ..
            }
            | Effect::ReplacedDir {
                area: Area::Workspace,
                path,
            }
            | Effect::Replaced {
                area: Area::Workspace,
                path,
                ..
            }
            | Effect::Renamed {
                area: Area::Workspace,
                from: path,
                ..
            } => paths.push(path.clone()),
            _ => {}
        }
    }
    paths
}

fn protected(cfg: &RunConfig, path: &Path) -> bool {
    cfg.protected.iter().any(|p| path.starts_with(p)) && !git_bookkeeping(cfg, path)
}

/// Is `path` git's own bookkeeping under the workspace's `.git/`, written by a command that is git
/// itself? Never what the policy protects in a git directory (config, hooks, info, modules, the
/// `.git` entry), never a path that is not UTF-8.
fn git_bookkeeping(cfg: &RunConfig, path: &Path) -> bool {
    cfg.git_bookkeeping
        && path.starts_with(".git")
        && path
            .to_str()
            .is_some_and(|rel| cmdgate_policy::decide::protected::protected(rel).is_none())
}

fn under_extra(cfg: &RunConfig, abs: &Path) -> bool {
    cfg.extra_writable.iter().any(|p| abs.starts_with(p))
}

/// Every reason the run is not clean; empty means clean.
pub fn judge(outcome: &Outcome<'_>, cfg: &RunConfig, tracked: &Tracked) -> Vec<String> {
    judge_each(outcome, cfg, tracked)
        .into_iter()
        .map(|(_, why)| why)
        .collect()
}

/// [`judge`] with each reason's rule and effect (for the operator's acceptance, which may only
/// learn changes to pre-existing workspace files: `Refusal`).
pub fn judge_each(
    outcome: &Outcome<'_>,
    cfg: &RunConfig,
    tracked: &Tracked,
) -> Vec<(Refusal, String)> {
    let mut why = Vec::new();
    let whole = |rule| Refusal { rule, effect: None };
    if outcome.timed_out {
        why.push((
            whole(Rule::TimedOut),
            format!(
                "timed out after {} s (everything in the run was killed)",
                cfg.limits.timeout.as_secs_f64()
            ),
        ));
    }
    if !outcome.mirrored {
        if let Some(sig) = outcome.signal {
            why.push((whole(Rule::ExitStatus), format!("killed by signal {sig}")));
        }
        match outcome.exit {
            Some(0) => {}
            Some(code) => why.push((whole(Rule::ExitStatus), format!("exit status {code}"))),
            None if outcome.timed_out || outcome.signal.is_some() => {}
            None => why.push((whole(Rule::ExitStatus), "no exit status".into())),
        }
    }
    for (i, e) in outcome.effects.iter().enumerate() {
        if outcome.mirrored
            && e.location()
                .is_some_and(|(area, _)| matches!(area, Area::Scratch | Area::Home))
        {
            continue;
        }
        let reason = match e {
            Effect::LimitHit { .. } => Some((Rule::Other, "over a limit")),
            Effect::BackgroundProcess { .. } => Some((Rule::Other, "left a background process")),
            Effect::Network { allowed: false, .. } => Some((Rule::Other, "network attempted")),
            Effect::Network { allowed: true, .. } => None,
            Effect::Blocked { .. } => Some((Rule::Other, "refused by the syscall filter")),
            Effect::ReadOnlyWrite { .. } => {
                Some((Rule::Other, "tried to write outside the writable trees"))
            }
            // The mask answered it (an empty file or directory): opaque code that tries to read
            // a secret simply finds nothing. Named in the audit, never a reason to roll back.
            Effect::MaskedOpen { .. } => None,
            _ => fs_reason(e, cfg, tracked),
        };
        if let Some((rule, reason)) = reason {
            why.push((
                Refusal {
                    rule,
                    effect: Some(i),
                },
                format!("{reason}: {e}"),
            ));
        }
    }
    why
}

/// Which rule of "clean" a reason broke, as far as the operator's acceptance cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// A pre-existing workspace file tracked by git changed (the only rule an operator's
    /// acceptance may learn).
    TrackedChange,
    /// A protected path (tier map, `.claude/`, git internals) was touched.
    Protected,
    /// The run timed out.
    TimedOut,
    /// The exit status of a test-run (never of a mirrored run).
    ExitStatus,
    /// Anything else: tracked status unknown, network, syscalls, limits, background processes,
    /// writes outside the workspace.
    Other,
}

/// One reason a run is not clean: its rule and the effect (an index into the run's effects).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub rule: Rule,
    pub effect: Option<usize>,
}

fn fs_reason(e: &Effect, cfg: &RunConfig, tracked: &Tracked) -> Option<(Rule, &'static str)> {
    let (area, path) = e.location()?;
    match area {
        Area::Workspace => {
            let from = match e {
                Effect::Renamed { from, .. } => Some(from),
                _ => None,
            };
            if !cfg.allow_protected
                && (protected(cfg, path) || from.is_some_and(|f| protected(cfg, f)))
            {
                return Some((Rule::Protected, "touched a protected path"));
            }
            let check = match e {
                Effect::Created { .. } => None,
                Effect::Renamed { from, .. } => Some(from),
                _ => Some(path),
            };
            match check {
                Some(p) if !cfg.allow_tracked_changes && tracked.covers(p) => Some(match tracked {
                    Tracked::Known(_) => (Rule::TrackedChange, "changed a file tracked by git"),
                    Tracked::Unknown(_) => (
                        Rule::Other,
                        "changed a pre-existing file (tracked status unknown)",
                    ),
                }),
                _ => None,
            }
        }
        Area::Home => {
            let abs = cfg.home.as_deref().unwrap_or(Path::new("/")).join(path);
            (!under_extra(cfg, &abs)).then_some((Rule::Other, "wrote outside the workspace"))
        }
        Area::Scratch | Area::Extra => {
            (!under_extra(cfg, path)).then_some((Rule::Other, "wrote outside the workspace"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HelperCommand;
    use crate::model::FileKind;

    fn cfg() -> RunConfig {
        let mut c = RunConfig::new(
            PathBuf::from("/ws"),
            PathBuf::from("/state"),
            HelperCommand {
                program: PathBuf::from("/x"),
                args: vec![],
            },
        );
        c.home = Some(PathBuf::from("/home/u"));
        c.extra_writable = vec![PathBuf::from("/home/u/.cargo")];
        c
    }

    fn created(area: Area, p: &str) -> Effect {
        Effect::Created {
            area,
            path: PathBuf::from(p),
            kind: FileKind::File,
            size: 1,
        }
    }
    fn modified(p: &str) -> Effect {
        Effect::Modified {
            area: Area::Workspace,
            path: PathBuf::from(p),
            old_size: 1,
            new_size: 2,
        }
    }

    fn verdict(effects: &[Effect], tracked: &[&str]) -> Vec<String> {
        let t = Tracked::Known(tracked.iter().map(PathBuf::from).collect());
        judge(
            &Outcome {
                exit: Some(0),
                signal: None,
                timed_out: false,
                effects,
                mirrored: false,
            },
            &cfg(),
            &t,
        )
    }

    macro_rules! clean {
        ($($e:expr),* ; tracked $($t:expr),*) => {
            assert_eq!(verdict(&[$($e),*], &[$($t),*]), Vec::<String>::new());
        };
    }
    macro_rules! dirty {
        ($($e:expr),* ; tracked $($t:expr),* => $why:expr) => {
            let why = verdict(&[$($e),*], &[$($t),*]);
            assert!(why.iter().any(|w| w.contains($why)), "{why:?}");
        };
    }

    #[test]
    fn rules() {
        clean!(; tracked "src/a.rs");
        clean!(created(Area::Workspace, "target/x"); tracked "src/a.rs");
        clean!(modified("target/x"); tracked "src/a.rs");
        clean!(created(Area::Home, ".cargo/registry/x"); tracked);
        dirty!(modified("src/a.rs"); tracked "src/a.rs" => "tracked by git");
        dirty!(Effect::Deleted { area: Area::Workspace, path: "src".into(), kind: FileKind::Dir, size: 0 }; tracked "src/a.rs" => "tracked by git");
        dirty!(created(Area::Workspace, ".git/hooks/pre-commit"); tracked => "protected");
        dirty!(created(Area::Workspace, "CLAUDE_CMDS.md"); tracked => "protected");
        dirty!(created(Area::Home, ".bashrc"); tracked => "outside the workspace");
        dirty!(created(Area::Scratch, "/tmp/x"); tracked => "outside the workspace");
        dirty!(Effect::Network { target: "inet 1.1.1.1:53".into(), allowed: false }; tracked => "network");
        dirty!(Effect::BackgroundProcess { pid: 7, command: "sleep".into() }; tracked => "background");
    }

    #[test]
    fn git_bookkeeping_is_clean_only_for_git_and_never_config_hooks_info_modules() {
        let judge_git = |effects: &[Effect], git: bool| {
            let mut c = cfg();
            c.git_bookkeeping = git;
            judge(
                &Outcome {
                    exit: Some(0),
                    signal: None,
                    timed_out: false,
                    effects,
                    mirrored: true,
                },
                &c,
                &Tracked::Known(["src/a.rs"].iter().map(PathBuf::from).collect()),
            )
        };
        let deleted = |p: &str| Effect::Deleted {
            area: Area::Workspace,
            path: p.into(),
            kind: FileKind::File,
            size: 1,
        };
        for e in [
            modified(".git/index"),
            created(Area::Workspace, ".git/objects/ab/cdef"),
            modified(".git/refs/heads/main"),
            created(Area::Workspace, ".git/refs/heads/feature"),
            created(Area::Workspace, ".git/refs/tags/v1"),
            created(Area::Workspace, ".git/refs/stash"),
            modified(".git/logs/HEAD"),
            modified(".git/HEAD"),
            created(Area::Workspace, ".git/ORIG_HEAD"),
            created(Area::Workspace, ".git/COMMIT_EDITMSG"),
            modified(".git/packed-refs"),
            deleted(".git/refs/heads/old"),
        ] {
            assert_eq!(
                judge_git(std::slice::from_ref(&e), true),
                Vec::<String>::new(),
                "{e}"
            );
            assert!(
                !judge_git(std::slice::from_ref(&e), false).is_empty(),
                "{e}"
            );
        }
        for e in [
            modified(".git/config"),
            created(Area::Workspace, ".git/config.worktree"),
            created(Area::Workspace, ".git/hooks/pre-commit"),
            modified(".git/info/exclude"),
            created(Area::Workspace, ".git/modules/sub/config"),
            Effect::ReplacedDir {
                area: Area::Workspace,
                path: ".git".into(),
            },
            deleted(".git"),
            created(Area::Workspace, ".claude/settings.json"),
            created(Area::Workspace, "CLAUDE_CMDS.md"),
            modified("src/a.rs"),
        ] {
            assert!(!judge_git(std::slice::from_ref(&e), true).is_empty(), "{e}");
        }
    }

    #[test]
    fn each_reason_names_its_rule_and_effect() {
        let e = [
            created(Area::Workspace, "new.txt"),
            modified("src/a.rs"),
            created(Area::Workspace, ".git/hooks/pre-commit"),
            Effect::Network {
                target: "inet 1.1.1.1:53".into(),
                allowed: false,
            },
            modified("notes.txt"),
        ];
        let outcome = Outcome {
            exit: Some(3),
            signal: None,
            timed_out: false,
            effects: &e,
            mirrored: true,
        };
        let tracked = Tracked::Known(vec![PathBuf::from("src/a.rs")].into_iter().collect());
        let each = judge_each(&outcome, &cfg(), &tracked);
        let rules: Vec<(Rule, Option<usize>)> =
            each.iter().map(|(r, _)| (r.rule, r.effect)).collect();
        assert_eq!(
            rules,
            [
                (Rule::TrackedChange, Some(1)),
                (Rule::Protected, Some(2)),
                (Rule::Other, Some(3)),
            ]
        );
        assert_eq!(
            each.into_iter().map(|(_, w)| w).collect::<Vec<_>>(),
            judge(&outcome, &cfg(), &tracked)
        );
        // Tracked status unknown: a pre-existing file's change is never the acceptable rule.
        let unknown = Tracked::Unknown("no git".into());
        let each = judge_each(&outcome, &cfg(), &unknown);
        assert!(
            each.iter().all(|(r, _)| r.rule != Rule::TrackedChange),
            "{each:?}"
        );
    }

    #[test]
    fn unknown_index_counts_pre_existing_files_as_tracked() {
        let e = [modified("notes.txt"), created(Area::Workspace, "new.txt")];
        let why = judge(
            &Outcome {
                exit: Some(0),
                signal: None,
                timed_out: false,
                mirrored: false,
                effects: &e,
            },
            &cfg(),
            &Tracked::Unknown("not a git repository".into()),
        );
        assert_eq!(why.len(), 1, "{why:?}");
    }

    #[test]
    fn a_mirrored_run_is_judged_by_its_effects_not_its_exit_status() {
        let e = [
            created(Area::Scratch, "/tmp/x"),
            created(Area::Workspace, "target/x"),
        ];
        let outcome = |exit, effects| Outcome {
            exit,
            signal: None,
            timed_out: false,
            effects,
            mirrored: true,
        };
        let outcome_test = |effects| Outcome {
            exit: Some(0),
            signal: None,
            timed_out: false,
            effects,
            mirrored: false,
        };
        let tracked = Tracked::Known(Default::default());
        assert_eq!(
            judge(&outcome(Some(101), &e), &cfg(), &tracked),
            Vec::<String>::new()
        );
        // $HOME outside the write= trees is never committed, so it does not make the run dirty
        // here (the daemon refuses persistence files such as this one by the policy's table).
        let home = [created(Area::Home, ".bashrc")];
        assert!(judge(&outcome(Some(0), &home), &cfg(), &tracked).is_empty());
        // A test-run's host run would write it: dirty.
        let why = judge(&outcome_test(&home), &cfg(), &tracked);
        assert!(why[0].contains("outside the workspace"), "{why:?}");
    }

    #[test]
    fn failure_and_timeout_are_dirty() {
        let why = judge(
            &Outcome {
                exit: Some(3),
                signal: None,
                timed_out: false,
                mirrored: false,
                effects: &[],
            },
            &cfg(),
            &Tracked::Unknown(String::new()),
        );
        assert_eq!(why, vec!["exit status 3".to_string()]);
        let why = judge(
            &Outcome {
                exit: None,
                signal: None,
                timed_out: true,
                mirrored: false,
                effects: &[],
            },
            &cfg(),
            &Tracked::Unknown(String::new()),
        );
        assert!(why[0].starts_with("timed out"));
    }
}
