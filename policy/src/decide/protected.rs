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
                && !c.env.iter().any(|a| a.name == "PATH")
                && match c.argv.first() {
                    Some(Word::Static(w)) if is_git(w) => true,
                    // `cd` changes where git runs, nothing else.
                    Some(Word::Static(w)) if w == "cd" => c.redirects.is_empty(),
                    _ => false,
                }
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
