//! Packs for developer CLIs: `gh`, git's remote reads, `npm`/`pnpm`/`yarn`, `pip`/`uv`, `cargo`,
//! `brew`, `systemctl`/`journalctl`.

use super::{not_read, read, secret, unknown_global, unsafe_, Grammar, Line, PackVerdict};

/// Does a word name a secret-looking setting (`_authToken`, `//registry/:_password`)?
fn secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "auth", "token", "password", "_pass", "secret", "cert", "key",
    ]
    .iter()
    .any(|m| k.contains(m))
}

// ---- gh (GitHub CLI manual: cli.github.com/manual) ----

const GH: Grammar = Grammar {
    valued: &[
        "-R",
        "--repo",
        "-L",
        "--limit",
        "-s",
        "--state",
        "-A",
        "--author",
        "-a",
        "--assignee",
        "-l",
        "--label",
        "-B",
        "--base",
        "-H",
        "--head",
        "-S",
        "--search",
        "-q",
        "--jq",
        "-t",
        "--template",
        "--json",
        "-b",
        "--branch",
        "-w",
        "--workflow",
        "-u",
        "--user",
        "-e",
        "--event",
        "-c",
        "--commit",
        "--hostname",
        "-X",
        "--method",
        "-f",
        "--raw-field",
        "-F",
        "--field",
        "--input",
        "-j",
        "--job",
        "--attempt",
        "--cache",
        "-p",
        "--preview",
        "--sort",
        "--order",
        "--language",
        "--owner",
        "--visibility",
        "--topic",
        "-i",
        "--interval",
        "-k",
        "--key",
        "--created",
        "--status",
    ],
    global: &["-R", "--repo", "--help", "-h", "--version"],
};

pub(super) fn gh(args: &[&str]) -> PackVerdict {
    let line = match Line::parse(args, &GH) {
        Ok(l) => l,
        Err(o) => return unknown_global("gh", &o),
    };
    if line.has(&["-w", "--web"]) {
        return unsafe_(
            "--web",
            "opens a browser, a program of the system's choosing",
        );
    }
    let (Some(group), sub) = (line.pos(0), line.pos(1)) else {
        return if line.has(&["--version", "--help", "-h"]) {
            read("gh --version")
        } else {
            not_read("gh")
        };
    };
    match (group, sub) {
        ("auth", Some("token")) => secret("`gh auth token` prints the GitHub token"),
        ("auth", Some("status")) if line.has(&["-t", "--show-token"]) => {
            secret("`gh auth status --show-token` prints the GitHub token")
        }
        ("auth", Some("status")) => read("gh auth status"),
        ("api", _) => gh_api(&line),
        ("pr", Some("list" | "view" | "diff" | "checks" | "status")) => {
            read("gh pr list/view/diff/checks/status")
        }
        ("issue", Some("list" | "view" | "status")) => read("gh issue list/view/status"),
        ("run", Some("list" | "view" | "watch")) => read("gh run list/view/watch"),
        ("workflow", Some("list" | "view")) => read("gh workflow list/view"),
        ("repo", Some("view" | "list")) => read("gh repo view/list"),
        ("release", Some("list" | "view")) => read("gh release list/view"),
        ("search", Some("repos" | "issues" | "prs" | "code" | "commits")) => read("gh search"),
        ("status", None) => read("gh status"),
        ("browse", _) if line.has(&["-n", "--no-browser"]) => read("gh browse --no-browser"),
        (
            "label" | "cache" | "ruleset" | "org" | "secret" | "variable" | "extension" | "alias"
            | "gpg-key" | "ssh-key",
            Some("list"),
        ) => read("gh … list (names only; secret values are never listed)"),
        ("ruleset", Some("view" | "check")) => read("gh ruleset view/check"),
        ("gist", Some("list" | "view")) => read("gh gist list/view"),
        ("variable", Some("get")) => read("gh variable get (variables are not secrets)"),
        ("config", Some("get" | "list")) => {
            if line.positionals.iter().skip(2).any(|k| secret_key(k)) {
                secret("`gh config get` of a token setting")
            } else {
                read("gh config get/list")
            }
        }
        ("project", Some("list" | "view" | "field-list" | "item-list")) => {
            read("gh project list/view")
        }
        _ => not_read(format!(
            "gh {group}{}",
            sub.map(|s| format!(" {s}")).unwrap_or_default()
        )),
    }
}

/// `gh api`: GET only. `-f/-F/--input` turn the request into a POST; `-X` must say GET; GraphQL is a
/// POST that may carry a mutation.
fn gh_api(line: &Line<'_>) -> PackVerdict {
    if let Some(f) = line.find(&["-f", "--raw-field", "-F", "--field", "--input"]) {
        return unsafe_(f, "sends a request body (gh api then POSTs)");
    }
    for m in line.values(&["-X", "--method"]) {
        if !m.eq_ignore_ascii_case("GET") && !m.eq_ignore_ascii_case("HEAD") {
            return unsafe_(m, "is a method that changes remote state");
        }
    }
    if line.has(&["-X", "--method"]) && line.values(&["-X", "--method"]).is_empty() {
        return unsafe_("-X", "without a method");
    }
    match line.pos(1) {
        Some("graphql") => not_read("gh api graphql (a POST that may carry a mutation)"),
        Some(endpoint) if endpoint.contains("/actions/secrets/public-key") => read("gh api GET"),
        Some(_) => read("gh api GET"),
        None => not_read("gh api without an endpoint"),
    }
}

// ---- git remote reads (git-ls-remote(1), git-remote(1)) ----

/// `git ls-remote` and `git remote show` reach the network and write nothing. Only claimed when
/// the subcommand is the first word (git's global options are the built-in list's business).
pub(super) fn git_remote(args: &[&str]) -> Option<PackVerdict> {
    match args {
        ["ls-remote", rest @ ..] => Some(ls_remote(rest)),
        ["remote", "show", rest @ ..] => {
            Some(if rest.iter().any(|a| a.starts_with('-') && *a != "-n") {
                not_read("git remote show with options")
            } else {
                read("git remote show")
            })
        }
        _ => None,
    }
}

fn ls_remote(rest: &[&str]) -> PackVerdict {
    for a in rest {
        if a.starts_with("--upload-pack") || *a == "-u" || a.starts_with("--exec") {
            return unsafe_(a, "runs a program as the remote's upload-pack");
        }
        if a.starts_with("ext::") || a.starts_with("fd::") {
            return unsafe_(a, "is a transport that runs a command");
        }
    }
    read("git ls-remote")
}

// ---- npm (docs.npmjs.com/cli/commands), pnpm (pnpm.io/cli), yarn (yarnpkg.com/cli) ----

const NPM: Grammar = Grammar {
    valued: &[
        "--registry",
        "--depth",
        "--prefix",
        "-C",
        "--dir",
        "--filter",
        "-F",
        "--workspace",
        "-w",
        "--userconfig",
        "--omit",
        "--include",
    ],
    global: &[
        "--version",
        "-v",
        "--help",
        "-h",
        "--json",
        "--prefix",
        "-C",
        "--dir",
        "--filter",
        "-F",
        "-w",
        "--workspace",
        "--workspaces",
        "-r",
        "--recursive",
        "--silent",
        "-s",
        "--registry",
    ],
};

pub(super) fn npm(name: &str, args: &[&str]) -> PackVerdict {
    let line = match Line::parse(args, &NPM) {
        Ok(l) => l,
        Err(o) => return unknown_global(name, &o),
    };
    let Some(sub) = line.pos(0) else {
        return if line.has(&["--version", "-v", "--help", "-h"]) {
            read("npm --version")
        } else {
            not_read(name)
        };
    };
    let rest = &line.positionals[1..];
    match (name, sub) {
        (_, "config") => match rest.first().copied() {
            Some("get") if rest[1..].iter().any(|k| secret_key(k)) => {
                secret(format!("`{name} config get` of a token setting"))
            }
            Some("get" | "list" | "ls") => read("config get/list (tokens are masked in lists)"),
            _ => not_read(format!("{name} config")),
        },
        ("npm", "token") => secret("`npm token list` shows registry tokens"),
        ("npm", "view" | "info" | "show" | "v") => read("npm view"),
        ("npm", "ls" | "list" | "ll" | "la") => read("npm ls"),
        (
            "npm",
            "outdated" | "explain" | "why" | "query" | "fund" | "search" | "s" | "find" | "root"
            | "prefix" | "ping" | "whoami" | "help" | "help-search",
        ) => read("npm read commands"),
        ("npm", "audit") => match rest.first().copied() {
            None | Some("signatures") => read("npm audit (no fix)"),
            _ => not_read("npm audit fix"),
        },
        ("npm", "version") if rest.is_empty() => read("npm version (no bump)"),
        ("pnpm", "list" | "ls" | "ll" | "outdated" | "why" | "root" | "view" | "info" | "show") => {
            read("pnpm list/outdated/why/view")
        }
        ("pnpm", "audit") if !line.has(&["--fix"]) => read("pnpm audit (no fix)"),
        ("pnpm", "licenses") if rest.first() == Some(&"list") => read("pnpm licenses list"),
        ("pnpm", "store") if matches!(rest.first().copied(), Some("path" | "status")) => {
            read("pnpm store path/status")
        }
        ("yarn", "info" | "list" | "why" | "outdated") => read("yarn info/list/why/outdated"),
        ("yarn", "licenses") if rest.first() == Some(&"list") => read("yarn licenses list"),
        ("yarn", "workspaces") if rest.first() == Some(&"list") => read("yarn workspaces list"),
        ("yarn", "npm") if rest.first() == Some(&"info") => read("yarn npm info"),
        _ => not_read(format!(
            "{name} {sub} (scripts, installs and unknown commands run code)"
        )),
    }
}

// ---- pip (pip.pypa.io/en/stable/cli), uv (docs.astral.sh/uv/reference/cli) ----

const PIP: Grammar = Grammar {
    valued: &[
        "--python",
        "-p",
        "--format",
        "--path",
        "--directory",
        "--project",
        "--depth",
        "-d",
    ],
    global: &[
        "--version",
        "-V",
        "--help",
        "-h",
        "-q",
        "--quiet",
        "-v",
        "--verbose",
        "--python",
        "--no-color",
        "--offline",
        "--directory",
        "--project",
        "--isolated",
        "--no-cache",
    ],
};

pub(super) fn pip(name: &str, args: &[&str]) -> PackVerdict {
    let line = match Line::parse(args, &PIP) {
        Ok(l) => l,
        Err(o) => return unknown_global(name, &o),
    };
    let Some(sub) = line.pos(0) else {
        return if line.has(&["--version", "-V", "--help", "-h"]) {
            read("pip/uv --version")
        } else {
            not_read(name)
        };
    };
    let rest = &line.positionals[1..];
    if name == "uv" {
        return match (sub, rest.first().copied()) {
            ("pip", Some("list" | "show" | "freeze" | "tree" | "check")) => {
                read("uv pip list/show/freeze/tree/check")
            }
            ("tree", _) if line.has(&["--frozen", "--locked"]) => read("uv tree --frozen/--locked"),
            ("tree", _) => not_read("uv tree without --frozen or --locked (it may write uv.lock)"),
            ("python", Some("list" | "find" | "dir")) => read("uv python list/find/dir"),
            ("tool", Some("list" | "dir")) => read("uv tool list/dir"),
            ("cache", Some("dir")) => read("uv cache dir"),
            ("version", None) if !line.has(&["--bump"]) => read("uv version (no bump)"),
            _ => not_read(format!("uv {sub}")),
        };
    }
    match sub {
        "show" | "list" | "freeze" | "check" | "inspect" => {
            read("pip show/list/freeze/check/inspect")
        }
        "index" if rest.first() == Some(&"versions") => read("pip index versions"),
        "cache" if matches!(rest.first().copied(), Some("dir" | "list" | "info")) => {
            read("pip cache dir/list/info")
        }
        "config" => secret("`pip config` prints index URLs, which may carry credentials"),
        _ => not_read(format!("{name} {sub}")),
    }
}

// ---- cargo (doc.rust-lang.org/cargo/commands) ----

const CARGO: Grammar = Grammar {
    valued: &[
        "--manifest-path",
        "-p",
        "--package",
        "-e",
        "--edges",
        "-i",
        "--invert",
        "--format",
        "--depth",
        "--prune",
        "--target",
        "--features",
        "-F",
        "--format-version",
        "--color",
        "--limit",
        "--index",
        "--registry",
    ],
    global: &[
        "--version",
        "-V",
        "--help",
        "-h",
        "-q",
        "--quiet",
        "-v",
        "--verbose",
        "--color",
        "--offline",
        "--frozen",
        "--locked",
        "--list",
    ],
};

pub(super) fn cargo(args: &[&str]) -> PackVerdict {
    if let Some(t) = args.iter().find(|a| a.starts_with('+')) {
        return unsafe_(t, "picks a toolchain, which rustup may install");
    }
    if let Some(c) = args
        .iter()
        .find(|a| a.starts_with("--config") || a.starts_with("-Z"))
    {
        return unsafe_(
            c,
            "changes cargo's configuration (runners, wrappers) or unstable behaviour",
        );
    }
    let line = match Line::parse(args, &CARGO) {
        Ok(l) => l,
        Err(o) => return unknown_global("cargo", &o),
    };
    let locked = line.has(&["--locked", "--frozen"]);
    match line.pos(0) {
        None if line.has(&["--version", "-V", "--help", "-h", "--list"]) => {
            read("cargo --version/--list")
        }
        Some(
            "version" | "pkgid" | "locate-project" | "verify-project" | "read-manifest" | "help"
            | "search" | "info",
        ) => read("cargo version/pkgid/locate-project/search/info"),
        Some("metadata") if locked || line.has(&["--no-deps"]) => {
            read("cargo metadata --locked/--frozen/--no-deps")
        }
        Some("tree") if locked => read("cargo tree --locked/--frozen"),
        Some(sub @ ("metadata" | "tree")) => not_read(format!(
            "cargo {sub} without --locked or --frozen (it may rewrite Cargo.lock)"
        )),
        Some(sub) => not_read(format!(
            "cargo {sub} (builds run code; unknown commands are plugins)"
        )),
        None => not_read("cargo"),
    }
}

// ---- brew (docs.brew.sh/Manpage) ----

pub(super) fn brew(args: &[&str]) -> PackVerdict {
    let sub = args.iter().copied().find(|a| !a.starts_with('-'));
    let before: Vec<&&str> = args.iter().take_while(|a| a.starts_with('-')).collect();
    if before.iter().any(|a| {
        !matches!(
            **a,
            "--version"
                | "--prefix"
                | "--cellar"
                | "--repository"
                | "--cache"
                | "--env"
                | "-v"
                | "--verbose"
                | "-q"
                | "--quiet"
                | "-d"
                | "--debug"
                | "--help"
                | "-h"
        )
    }) {
        return not_read("brew with an unknown option before its command");
    }
    let rest: Vec<&str> = args
        .iter()
        .copied()
        .skip_while(|a| Some(*a) != sub)
        .skip(1)
        .collect();
    let location = before.iter().any(|a| {
        matches!(
            **a,
            "--prefix" | "--cellar" | "--repository" | "--cache" | "--env"
        )
    });
    match sub {
        None if !before.is_empty() => read("brew --version/--prefix/--cellar"),
        Some(_) if location && rest.is_empty() => read("brew --prefix/--cellar FORMULA"),
        Some(
            "info" | "abv" | "list" | "ls" | "search" | "-S" | "outdated" | "deps" | "uses"
            | "leaves" | "config" | "doctor" | "dr" | "desc" | "cat" | "log" | "commands"
            | "options" | "formulae" | "casks" | "missing" | "--env",
        ) => read("brew info/list/search/outdated/deps/uses/config/doctor/desc/cat/log"),
        Some("tap") if rest.is_empty() => read("brew tap (lists taps)"),
        Some("services") if matches!(rest.first().copied(), Some("list" | "info") | None) => {
            read("brew services list/info")
        }
        Some(sub) => not_read(format!("brew {sub}")),
        None => not_read("brew"),
    }
}

// ---- systemctl (systemctl(1)), journalctl (journalctl(1)) ----

pub(super) fn systemd(name: &str, args: &[&str]) -> PackVerdict {
    if let Some(h) = args.iter().find(|a| **a == "-H" || a.starts_with("--host")) {
        return unsafe_(h, "runs ssh to reach another host");
    }
    if name == "journalctl" {
        const WRITES: &[&str] = &[
            "--vacuum-size",
            "--vacuum-time",
            "--vacuum-files",
            "--rotate",
            "--flush",
            "--sync",
            "--relinquish-var",
            "--smart-relinquish-var",
            "--setup-keys",
            "--update-catalog",
            "--cursor-file",
            "--new-id128",
        ];
        if let Some(w) = args
            .iter()
            .find(|a| WRITES.contains(&a.split('=').next().unwrap_or(a)))
        {
            return unsafe_(w, "removes, rotates or writes journal files");
        }
        return read("journalctl (no vacuum/rotate/flush/setup)");
    }
    let sub = args.iter().copied().find(|a| !a.starts_with('-'));
    match sub {
        Some(
            "status" | "list-units" | "list-unit-files" | "list-timers" | "list-sockets"
            | "list-jobs" | "list-dependencies" | "list-machines" | "list-paths" | "is-active"
            | "is-enabled" | "is-failed" | "is-system-running" | "cat" | "get-default" | "help",
        ) => read("systemctl status/list-*/is-*/cat"),
        Some("show") => {
            let props: Vec<&str> = args
                .windows(2)
                .filter(|w| w[0] == "-p" || w[0] == "--property")
                .map(|w| w[1])
                .chain(args.iter().filter_map(|a| a.strip_prefix("--property=")))
                .collect();
            if props.is_empty()
                || props
                    .iter()
                    .any(|p| p.to_ascii_lowercase().contains("environment"))
            {
                secret("`systemctl show` prints units' Environment= values")
            } else {
                read("systemctl show -p PROPERTY")
            }
        }
        None if args
            .iter()
            .any(|a| *a == "--version" || *a == "--help" || *a == "-h") =>
        {
            read("systemctl --version")
        }
        None => read("systemctl (lists units)"),
        Some(sub) => not_read(format!("systemctl {sub}")),
    }
}
