//! Persistence files inside a project: files a tool runs, or an agent obeys, later — when a person
//! opens the project, commits, pushes, enters the directory, or starts the next agent session. A
//! write to one asks a person; each entry says why.
//!
//! This is data, kept apart from the protected names (`protected.rs`, which guard the gate and
//! git itself) and from the secret-path list (what may not be *read*).

/// How an entry matches a project-relative path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// A file or directory with this name, at any depth (a directory covers what is below it).
    Name(&'static str),
    /// This relative path (or what is below it), at any depth: `.github/workflows`.
    Tail(&'static str),
}

/// One persistence place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Persistence {
    pub matches: Match,
    /// What runs it, and when.
    pub reason: &'static str,
}

const fn name(n: &'static str, reason: &'static str) -> Persistence {
    Persistence {
        matches: Match::Name(n),
        reason,
    }
}

const fn tail(t: &'static str, reason: &'static str) -> Persistence {
    Persistence {
        matches: Match::Tail(t),
        reason,
    }
}

/// The table. Names match at any depth: monorepos and nested repositories have their own.
pub const PERSISTENCE: &[Persistence] = &[
    name(".mcp.json", "Claude Code starts the MCP servers it names (any command) when a session opens the project"),
    name("CLAUDE.md", "Claude Code loads it as instructions at the start of every session"),
    name("CLAUDE.local.md", "Claude Code loads it as instructions at the start of every session"),
    name(".husky", "husky's git hooks run on the next commit, checkout or push"),
    name(".githooks", "the usual `core.hooksPath` directory: its hooks run on the next commit"),
    name(".pre-commit-config.yaml", "pre-commit runs the hooks it names on the next commit"),
    name("lefthook.yml", "lefthook runs the commands it names on the next commit"),
    name(".lefthook.yml", "lefthook runs the commands it names on the next commit"),
    name("lefthook-local.yml", "lefthook runs the commands it names on the next commit"),
    name(".lefthook", "lefthook's scripts run on the next commit"),
    name(".vscode", "VS Code runs tasks on folder open (`runOn: folderOpen`) and takes interpreters, terminal profiles and launch commands from here"),
    name(".devcontainer", "dev containers run `initializeCommand` on the host and the other lifecycle commands when the project is opened"),
    name(".devcontainer.json", "dev containers run `initializeCommand` on the host when the project is opened"),
    name(".idea", "JetBrains IDEs run configured startup tasks and external tools from here"),
    name(".envrc", "direnv runs it in the person's shell on entering the directory"),
    name("mise.toml", "mise runs its `[hooks]` and `[env]` scripts on entering the directory"),
    name(".mise.toml", "mise runs its `[hooks]` and `[env]` scripts on entering the directory"),
    tail(".cargo/config.toml", "cargo runs its `runner`, `rustc-wrapper` and aliases on the next build"),
    tail(".cargo/config", "cargo runs its `runner`, `rustc-wrapper` and aliases on the next build"),
    name(".npmrc", "npm takes `script-shell`, `node-options` and registries from it on the next install"),
    name(".yarnrc.yml", "yarn runs the `yarnPath` script it names on every yarn command"),
    tail(".github/workflows", "CI runs the workflows with the repository's secrets on the next push"),
    name(".gitmodules", "`git submodule update` clones the URLs it names into the paths it names (crafted submodule paths and URLs have made git run code)"),
    name(".gitlab-ci.yml", "CI runs its jobs with the repository's secrets on the next push"),
];

/// Files directly in `$HOME` (paths relative to it, or below them) that run code later or tell an
/// agent what to do: a mirrored run's `write=` path may contain one (`write=~` , `write=~/.config`)
/// and is still never allowed to change it; the project table above applies below `$HOME` too.
pub const HOME_PERSISTENCE: &[(&str, &str)] = &[
    (".bashrc", "bash runs it in every interactive shell"),
    (".bash_profile", "bash runs it in every login shell"),
    (".bash_login", "bash runs it in every login shell"),
    (".bash_logout", "bash runs it when a login shell exits"),
    (
        ".bash_aliases",
        "the usual .bashrc sources it in every interactive shell",
    ),
    (".profile", "login shells run it"),
    (".zshrc", "zsh runs it in every interactive shell"),
    (".zshenv", "zsh runs it in every shell"),
    (".zprofile", "zsh runs it in every login shell"),
    (".zlogin", "zsh runs it in every login shell"),
    (".zlogout", "zsh runs it when a login shell exits"),
    (
        ".inputrc",
        "readline reads it in every interactive program (key bindings can run commands)",
    ),
    (".envrc", "direnv runs it on entering the directory"),
    (
        ".pam_environment",
        "PAM sets its variables (LD_PRELOAD, PATH) at every login",
    ),
    (
        ".xprofile",
        "the display manager runs it at every graphical login",
    ),
    (".xinitrc", "startx runs it"),
    (
        ".xsessionrc",
        "the X session runs it at every graphical login",
    ),
    (
        ".ssh",
        "sshd runs `command=` and `~/.ssh/rc` and trusts authorized_keys; ssh runs `ProxyCommand`",
    ),
    (
        ".gitconfig",
        "git runs the hooks, aliases, pagers and filters it names in every repository",
    ),
    (
        ".config/git",
        "git runs the hooks, aliases, pagers and filters it names in every repository",
    ),
    (
        ".config/autostart",
        "the desktop session starts what it names at every login",
    ),
    (
        ".config/systemd",
        "systemd --user starts the units it holds",
    ),
    (
        ".config/environment.d",
        "systemd --user sets its variables for every user service",
    ),
    (".config/fish", "fish runs its config in every shell"),
    (
        ".local/bin",
        "its programs come first on the usual PATH, before the system's",
    ),
    (
        ".claude",
        "Claude Code's user settings, hooks and instructions for every project",
    ),
    (
        ".claude.json",
        "Claude Code's user configuration (MCP servers it starts)",
    ),
    (
        ".cargo/bin",
        "its programs come first on a Rust user's PATH",
    ),
    (
        ".cargo/config.toml",
        "cargo runs its `runner`, `rustc-wrapper` and aliases in every project",
    ),
    (
        ".cargo/config",
        "cargo runs its `runner`, `rustc-wrapper` and aliases in every project",
    ),
    (
        ".npmrc",
        "npm takes `script-shell`, `node-options` and registries from it on every install",
    ),
    (".config/cmdgate", "cmdgate's own configuration"),
    (".local/share/cmdgate", "cmdgate's own state"),
];

/// Why a change to `rel` (relative to `$HOME`, normalised) is never clean: a file in
/// [`HOME_PERSISTENCE`] or below one, or a project persistence file at any depth (a project kept
/// under `$HOME`). `None` for the rest (caches, registries, toolchains).
pub fn home_persistence(rel: &str) -> Option<String> {
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    for (path, reason) in HOME_PERSISTENCE {
        let want: Vec<&str> = path.split('/').collect();
        if parts.len() >= want.len() && parts[..want.len()] == want[..] {
            return Some(format!("changed ~/{rel}, which runs later: {reason}"));
        }
    }
    persistence(rel).map(|p| format!("changed ~/{rel}, which runs later: {}", p.reason))
}

/// The persistence entry `rel` (project-relative, normalised) falls under, if any.
pub fn persistence(rel: &str) -> Option<&'static Persistence> {
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    PERSISTENCE.iter().find(|e| match e.matches {
        Match::Name(n) => parts.contains(&n),
        Match::Tail(t) => {
            let want: Vec<&str> = t.split('/').collect();
            parts.windows(want.len()).any(|w| w == want.as_slice())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::persistence;

    #[test]
    fn table() {
        for p in [
            ".mcp.json",
            ".husky/pre-commit",
            ".pre-commit-config.yaml",
            ".vscode/tasks.json",
            ".devcontainer/devcontainer.json",
            ".envrc",
            "services/api/.envrc",
            "CLAUDE.md",
            ".github/workflows/ci.yml",
            "pkg/.cargo/config.toml",
        ] {
            assert!(persistence(p).is_some(), "{p}");
        }
        for p in [
            "src/main.rs",
            "README.md",
            "github/workflows/x",
            "cargo/config.toml",
        ] {
            assert!(persistence(p).is_none(), "{p}");
        }
    }

    #[test]
    fn home_table() {
        use super::home_persistence;
        for p in [
            ".bashrc",
            ".ssh/authorized_keys",
            ".config/systemd/user/x.service",
            ".local/bin/cargo",
            ".cargo/config.toml",
            ".claude/settings.json",
            "src/proj/.envrc",
            "src/proj/.git/../.vscode/tasks.json",
        ] {
            assert!(home_persistence(p).is_some(), "{p}");
        }
        for p in [
            ".cargo/registry/cache/x.crate",
            ".cache/pip/x",
            ".rustup/toolchains/x",
            ".bashrc.d.bak/x/y".trim_end_matches("/x/y"),
            "src/proj/src/main.rs",
            ".local/share/x",
        ] {
            assert!(home_persistence(p).is_none(), "{p}");
        }
    }

    #[test]
    fn every_entry_says_why() {
        for (p, why) in super::HOME_PERSISTENCE {
            assert!(why.len() > 10 && !p.starts_with('/'), "{p}");
        }
        for e in super::PERSISTENCE {
            assert!(e.reason.len() > 20, "{e:?}");
        }
    }
}
