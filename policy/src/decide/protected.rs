//! Protected names inside a project, at any depth: what changes the gate itself or a repository's
//! behaviour. A write to one asks a person (the Write family here; Bash writes through the mirror's
//! verdict, which judges the same places).

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
    use super::{effect_refusal, protected, Touch};

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
