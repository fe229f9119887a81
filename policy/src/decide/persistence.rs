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
    fn every_entry_says_why() {
        for e in super::PERSISTENCE {
            assert!(e.reason.len() > 20, "{e:?}");
        }
    }
}
