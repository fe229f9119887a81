//! Protected names inside a project, at any depth: what changes the gate itself or a repository's
//! behaviour. A write to one asks a person (the Write family here; Bash writes through the mirror's
//! verdict, which judges the same places).

use crate::shell::{Analysis, Word};

/// Entries of a `.git` directory whose change makes git run code or changes what it trusts.
const GIT_DIR_ENTRIES: &[&str] = &["config", "config.worktree", "hooks", "info", "modules"];

/// Why `rel` (a path relative to the project root, `/`-separated, normalised) is protected, or
/// `None`.
///
/// - every `.git` directory's `config`, `config.worktree`, `hooks/`, `info/`, `modules/`, at any
///   depth (a nested repository's `core.fsmonitor` runs on its next `git status`), and a `.git`
///   entry itself (a `.git` *file* can point git at a directory of the agent's choosing);
/// - `.claude/` at any depth (Claude Code's settings, hooks, commands and agents);
/// - `CLAUDE_CMDS.md` at the project root (the signed tier map).
pub fn protected(rel: &str) -> Option<String> {
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    if parts == ["CLAUDE_CMDS.md"] {
        return Some("the project's signed tier map (CLAUDE_CMDS.md)".into());
    }
    for (i, part) in parts.iter().enumerate() {
        let at = parts[..=i].join("/");
        if *part == ".claude" {
            return Some(format!("Claude Code's settings and hooks ({at}/)"));
        }
        if *part == ".git" {
            match parts.get(i + 1) {
                None => {
                    return Some(format!(
                        "a repository's git directory itself ({at}): a `.git` file redirects git"
                    ))
                }
                Some(next) if GIT_DIR_ENTRIES.contains(next) => {
                    return Some(format!(
                        "a repository's git {next} ({at}/{next}), which can make git run code"
                    ))
                }
                Some(_) => {}
            }
        }
    }
    None
}

/// Is the command git itself, and nothing else: every simple command it would run (substitutions
/// and `bash -c` re-entries included) is `git` (by name, without a `PATH=` of its own, or at a
/// system path) or `cd`, with no wrapper (`sudo`, `env -S`, …) and no function of the string's
/// own? Then the mirror may take
/// git's bookkeeping under `.git/` as a clean effect (`RunConfig::git_bookkeeping` in the sandbox);
/// what [`protected`] names in a git directory never is. An unanalysable string is not git.
pub fn git_only(analysis: &Analysis) -> bool {
    /// git by name (found on the mirror's `PATH`, which the string may not change) or at the
    /// places distributions install it; not a `git` the agent wrote somewhere.
    const GIT_PROGRAMS: &[&str] = &["git", "/usr/bin/git", "/bin/git", "/usr/local/bin/git"];
    let Analysis::Parsed(script) = analysis else {
        return false;
    };
    let is_git = |w: &str| GIT_PROGRAMS.contains(&w);
    script.functions.is_empty()
        && script.commands.iter().any(|c| {
            c.argv
                .first()
                .is_some_and(|w| matches!(w, Word::Static(w) if is_git(w)))
        })
        && script.commands.iter().all(|c| {
            c.wrappers.is_empty()
                && match c.argv.first() {
                    Some(Word::Static(w)) if is_git(w) => {
                        c.env.iter().all(harmless_git_env) && runs_no_code_of_its_own(&c.argv)
                    }
                    // `cd` changes where git runs, nothing else.
                    Some(Word::Static(w)) if w == "cd" => {
                        c.redirects.is_empty() && c.env.is_empty()
                    }
                    _ => false,
                }
        })
}

/// An environment prefix of a git command that neither runs code nor moves git elsewhere: the
/// identity and dates of a commit, locale, and an editor that does nothing (`GIT_EDITOR=true`).
/// `GIT_DIR`, `GIT_CONFIG_*`, `GIT_SSH_COMMAND`, `GIT_EXTERNAL_DIFF`, `PAGER`, `HOME`,
/// `XDG_CONFIG_HOME` (where the user's git config is read), `PATH`, … are not.
fn harmless_git_env(a: &crate::shell::Assignment) -> bool {
    const IDENTITY: &[&str] = &[
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_AUTHOR_DATE",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_COMMITTER_DATE",
        "GIT_MERGE_AUTOEDIT",
        "GIT_TERMINAL_PROMPT",
        "LANG",
        "LC_ALL",
        "TZ",
    ];
    const EDITORS: &[&str] = &["GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "EDITOR", "VISUAL"];
    IDENTITY.contains(&a.name.as_str())
        || EDITORS.contains(&a.name.as_str())
            && matches!(&a.value, Word::Static(v) if v == "true" || v == ":")
}

/// git without an option that makes it run a program of the command's choosing or read another
/// configuration: the global `-c`, `--config-env`, `--exec-path`, `--git-dir`, `--work-tree`;
/// `rebase --exec`/`-x`; `--upload-pack`/`--receive-pack`/`--exec` of the transports; and
/// subcommands that exist to run commands (`bisect run`, `submodule foreach`, `filter-branch`,
/// `difftool`, `mergetool`, …). Such a git still runs in the mirror — its writes under `.git/`
/// are then judged like anyone's (protected), not as git's bookkeeping.
fn runs_no_code_of_its_own(argv: &[Word]) -> bool {
    const RUNNERS: &[&str] = &[
        "bisect",
        "submodule",
        "filter-branch",
        "difftool",
        "mergetool",
        "daemon",
        "instaweb",
        "send-email",
        "credential",
        "config",
        "var",
        "help",
        "web--browse",
    ];
    let mut words = argv.iter().skip(1);
    // Global options before the subcommand; only `-C DIR` and harmless flags pass.
    let sub = loop {
        match words.next() {
            Some(Word::Static(w)) if w == "-C" => {
                if !matches!(words.next(), Some(Word::Static(_))) {
                    return false;
                }
            }
            Some(Word::Static(w)) if w.starts_with('-') => {
                let flag = w.split('=').next().unwrap_or(w);
                if !["--no-pager", "--no-replace-objects", "--literal-pathspecs"].contains(&flag) {
                    return false;
                }
            }
            Some(Word::Static(w)) => break w.as_str(),
            _ => return false,
        }
    };
    if RUNNERS.contains(&sub) {
        return false;
    }
    let refused = |w: &str| -> bool {
        let name = w.split('=').next().unwrap_or(w);
        match sub {
            // `-x CMD`, `-xCMD`, or a cluster of short options holding `x` (`-ix CMD`).
            "rebase" => {
                name == "--exec" || (!w.starts_with("--") && w.starts_with('-') && w.contains('x'))
            }
            "push" => name == "--receive-pack" || name == "--exec",
            "archive" => name == "--exec" || name == "--remote",
            "fetch" | "pull" | "clone" | "ls-remote" => {
                name == "--upload-pack" || (sub != "fetch" && sub != "pull" && w == "-u")
            }
            _ => false,
        }
    };
    words.all(|w| match w {
        Word::Static(w) => !refused(w),
        // An unknown word could be any of the options above.
        Word::Dynamic(_) => !matches!(
            sub,
            "rebase" | "push" | "archive" | "fetch" | "pull" | "clone" | "ls-remote"
        ),
    })
}

/// How a mirrored run touched a workspace path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    /// The path did not exist before the run.
    Created,
    /// An existing path was changed, replaced, renamed or deleted.
    Changed,
}

/// Why a mirrored run's change to `rel` (workspace-relative) is not clean, or `None`: a persistence
/// file or `.claude/` at any depth, or an existing repository's `config`, `hooks/`, `info/` or
/// `modules/` below the root (the root's `.git` the mirror protects itself). A repository the run
/// creates (`git init sub`, `git clone … sub`) may create its own; a hook that is not git's
/// `*.sample` may not.
pub fn effect_refusal(rel: &str, touch: Touch) -> Option<String> {
    if let Some(p) = super::persistence::persistence(rel) {
        return Some(format!("changed {rel}, which runs later: {}", p.reason));
    }
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    if parts.contains(&".claude") {
        return Some(format!("changed {rel}: Claude Code's settings and hooks"));
    }
    let git = parts.iter().position(|p| *p == ".git")?;
    let entry = parts.get(git + 1)?;
    if !GIT_DIR_ENTRIES.contains(entry) {
        return None;
    }
    let sample = *entry == "hooks" && parts.last().is_some_and(|n| n.ends_with(".sample"));
    match touch {
        Touch::Created if *entry != "hooks" || sample || parts.len() == git + 2 => None,
        Touch::Created | Touch::Changed => Some(format!(
            "changed {rel}: a repository's git {entry}, which can make git run code"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{effect_refusal, git_only, protected, Touch};
    use crate::shell::{analyze, Limits};

    #[test]
    fn git_only_is_git_and_nothing_else() {
        for cmd in [
            "git add f && git commit -m x",
            "git switch -c topic",
            "git stash && git stash pop",
            "/usr/bin/git tag v1",
            "GIT_EDITOR=true git rebase main",
            "cd sub && git restore --staged f",
            "git merge --ff-only topic",
            "git -C sub --no-pager commit -m x",
            "GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b git commit -m x",
            "git add -u && git commit -m \"$MSG\"",
            "git fetch -u . topic:topic",
            "git tag v1 && git stash && git checkout -b topic",
        ] {
            assert!(git_only(&analyze(cmd, &Limits::default())), "{cmd}");
        }
        for cmd in [
            "git add f && python3 -c 'x'",
            "git commit -m \"$(cat msg)\"",
            "sudo git commit -m x",
            "git() { rm -rf .; }; git status",
            "echo x > .git/refs/heads/main",
            "gitx status",
            "/tmp/evil/git status",
            // git made to run the command's own program, or to read another configuration.
            "git -c core.fsmonitor='python3 evil.py' status",
            "git -c alias.x='!rm -rf .' x",
            "git --config-env=core.hooksPath=H commit -m x",
            "git --exec-path=./bin commit -m x",
            "git --git-dir=../other/.git commit -m x",
            "git rebase --exec 'python3 evil.py' main",
            "git rebase -x make main",
            "git rebase -xmake main",
            "git rebase -ix make main",
            "git fetch --upload-pack='sh evil.sh' .",
            "git clone -u 'sh evil.sh' . copy",
            "git push --receive-pack=./evil .",
            "git bisect run ./evil.sh",
            "git submodule foreach ./evil.sh",
            "git filter-branch --tree-filter ./evil.sh",
            "git difftool -x ./evil.sh",
            "GIT_EXTERNAL_DIFF=./evil.sh git diff",
            "GIT_SSH_COMMAND=./evil.sh git fetch",
            "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=h git commit",
            "GIT_EDITOR=./evil.sh git commit",
            "HOME=. git commit -m x",
            "XDG_CONFIG_HOME=. git commit -m x",
            "git rebase \"$X\" main",
            "PATH=./bin:$PATH git status",
            "cd sub",
            "",
            "git commit -m 'unterminated",
        ] {
            assert!(!git_only(&analyze(cmd, &Limits::default())), "{cmd}");
        }
    }

    #[test]
    fn mirrored_effects() {
        for (rel, touch) in [
            (".mcp.json", Touch::Created),
            ("sub/.claude/settings.json", Touch::Created),
            ("sub/.git/config", Touch::Changed),
            ("sub/.git/hooks/pre-commit", Touch::Created),
            (".husky/pre-commit", Touch::Changed),
        ] {
            assert!(effect_refusal(rel, touch).is_some(), "{rel}");
        }
        for (rel, touch) in [
            ("sub/.git/config", Touch::Created),
            ("sub/.git/hooks/pre-commit.sample", Touch::Created),
            ("sub/.git/hooks", Touch::Created),
            ("sub/.git/objects/ab/cd", Touch::Changed),
            ("target/debug/x", Touch::Created),
        ] {
            assert!(effect_refusal(rel, touch).is_none(), "{rel}");
        }
    }

    #[test]
    fn protected_at_any_depth() {
        for p in [
            "CLAUDE_CMDS.md",
            ".git",
            ".git/config",
            ".git/hooks/pre-commit",
            "sub/.git/config",
            "a/b/.git/hooks/post-checkout",
            "sub/.git/info/attributes",
            "vendor/x/.git/modules/y/config",
            "sub/.git/config.worktree",
            ".claude/settings.json",
            "pkg/.claude/commands/x.md",
            "sub/.git",
        ] {
            assert!(protected(p).is_some(), "{p}");
        }
        for p in [
            "src/main.rs",
            "docs/CLAUDE_CMDS.md",
            ".git/objects/ab/cd",
            ".git/HEAD",
            "sub/.gitignore",
            "claude/x",
        ] {
            assert!(protected(p).is_none(), "{p}");
        }
    }
}
