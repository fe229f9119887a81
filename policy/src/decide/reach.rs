//! What a Bash command's words reach on disk, as the kernel resolves them ([`kernel`](super::kernel)),
//! and the repository each `git` in it runs in.
//!
//! Two questions the read classifier cannot answer from the text alone:
//!
//! - a word that names a link to a secret (`cat notes.txt`, `notes.txt -> ~/.ssh/id_rsa`), a regular
//!   file with other hard links, or a path that cannot be resolved is not a read on its spelling;
//! - `git` reads run code a repository configured (`core.fsmonitor`, `core.pager`, hooks, filters,
//!   `diff.external`, textconv drivers, aliases, `core.sshCommand`, …). cmdgate's choice: a `git`
//!   command is only judged a read inside the project's own repository, whose `.git/config`,
//!   `hooks/` and `info/` are protected (writes ask a person, the mirror's verdict is dirty). In any
//!   other repository — nested (`git -C sub status`), bare, behind a `.git` file, outside the
//!   project — or where the repository cannot be told, the command is asked, never allowed: no
//!   read runs code a repository in the agent's reach configured.

use crate::shell::{Script, SimpleCommand, Word};

use super::kernel::{join, Kind, PathResolver, Resolution, Seen};
use super::paths::{self, Base};
use crate::shell::read::SecretPaths;

/// Why a Bash command must not be allowed on the strength of its words, or `None`.
pub fn bash_risk(
    script: &Script,
    base: Base<'_>,
    project_root: &str,
    secrets: &SecretPaths,
    kernel: &dyn PathResolver,
) -> Option<String> {
    link_risk(script, base, secrets, kernel)
        .or_else(|| foreign_repository(script, base, project_root, kernel))
}

/// Static words (arguments, `--opt=value` values, redirect targets) that exist or cannot be
/// resolved: a link into a secret, another name of a hard-linked file, an unresolvable path.
fn link_risk(
    script: &Script,
    base: Base<'_>,
    secrets: &SecretPaths,
    kernel: &dyn PathResolver,
) -> Option<String> {
    for cmd in &script.commands {
        for text in path_words(cmd) {
            let seen = Seen::of(text, base, kernel);
            if let Some(doubt) = seen.doubt() {
                // A word that does not resolve only matters when it looks like a path.
                if matches!(seen.resolution, Resolution::Unknown { .. }) && !text.contains('/') {
                    continue;
                }
                return Some(doubt);
            }
            if let Some(real) = seen.real().filter(|r| *r != seen.spelled) {
                if matches!(seen.resolution, Resolution::Exists { .. })
                    && secrets.matches(real, &[], false)
                {
                    return Some(format!("{} reads a secret path", seen.shown()));
                }
            }
        }
    }
    None
}

/// The words of one command that may name files.
fn path_words(cmd: &SimpleCommand) -> Vec<&str> {
    let mut out = Vec::new();
    let program = cmd
        .argv
        .first()
        .filter(|w| matches!(w, Word::Static(s) if s.contains('/')));
    let words =
        program
            .into_iter()
            .chain(cmd.argv.iter().skip(1))
            .chain(cmd.redirects.iter().filter_map(|r| {
                (!matches!(
                    r.kind,
                    crate::shell::RedirectKind::HereDoc
                        | crate::shell::RedirectKind::HereString
                        | crate::shell::RedirectKind::Duplicate
                ))
                .then_some(&r.target)
            }));
    for w in words {
        if let Word::Static(s) = w {
            if s.is_empty() {
                continue;
            }
            out.push(s.as_str());
            if let Some((_, value)) = s.split_once('=') {
                if !value.is_empty() {
                    out.push(value);
                }
            }
        }
    }
    out
}

/// The first `git` invocation that runs outside the project's own repository, with why.
fn foreign_repository(
    script: &Script,
    base: Base<'_>,
    project_root: &str,
    kernel: &dyn PathResolver,
) -> Option<String> {
    // The working directory as static `cd`s move it; `None` once a `cd` is not static.
    let mut cwd: Option<String> = Some(base.cwd.to_owned());
    let project_git = Seen::absolute(&format!("{project_root}/.git"), kernel);
    let own_gitdir = match &project_git.resolution {
        Resolution::Exists {
            kind: Kind::Dir,
            real,
            ..
        } => Some(real.clone()),
        _ => None,
    };
    for cmd in &script.commands {
        let name = cmd
            .argv
            .first()
            .and_then(Word::as_static)
            .map(|s| s.rsplit('/').next().unwrap_or(s));
        match name {
            Some("cd" | "pushd") => {
                cwd = match (cmd.argv.get(1), &cwd) {
                    (Some(Word::Static(d)), Some(c)) if d != "-" => Some(join(
                        d,
                        Base {
                            home: base.home,
                            cwd: c,
                        },
                    )),
                    (None, _) => Some(base.home.to_owned()),
                    _ => None,
                };
            }
            Some("git") => {
                let Some(mut dir) = cwd.clone() else {
                    return Some("`git` runs in a directory only known at run time".into());
                };
                let mut args = cmd.argv.iter().skip(1);
                while let Some(a) = args.next() {
                    match a.as_static() {
                        Some("-C") => match args.next().and_then(Word::as_static) {
                            Some(d) => {
                                dir = join(
                                    d,
                                    Base {
                                        home: base.home,
                                        cwd: &dir,
                                    },
                                )
                            }
                            None => {
                                return Some(
                                    "`git -C` names a directory only known at run time".into(),
                                )
                            }
                        },
                        Some(s) if s.starts_with('-') => {}
                        _ => break,
                    }
                }
                // The agent's own working directory missing: git fails, nothing runs.
                let here = dir == base.cwd;
                if let Some(why) = repository_of(&dir, here, own_gitdir.as_deref(), kernel) {
                    return Some(why);
                }
            }
            _ => {}
        }
    }
    None
}

/// `None` when git started in `dir` finds the project's own repository, or none at all; else why
/// not. Follows git's discovery: at each level a `.git` entry first, then the directory itself as
/// a bare repository.
fn repository_of(
    dir: &str,
    here: bool,
    own_gitdir: Option<&str>,
    kernel: &dyn PathResolver,
) -> Option<String> {
    let start = Seen::absolute(dir, kernel);
    let mut at = match start.resolution {
        Resolution::Exists {
            kind: Kind::Dir,
            real,
            ..
        } => real,
        // Not there yet: an earlier part of the command may create a repository there
        // (`git init sub && git -C sub config core.fsmonitor … && git -C sub status`).
        Resolution::Missing { .. } if here => return None,
        Resolution::Missing { .. } => {
            return Some(format!(
                "`git` runs in {dir}, which does not exist yet, so its repository cannot be told"
            ))
        }
        // Not a directory: git fails before it reads any configuration.
        Resolution::Exists { .. } => return None,
        Resolution::Unknown { why } => {
            return Some(format!(
                "`git` runs in {dir}, which cannot be resolved ({why})"
            ))
        }
    };
    loop {
        let dot_git = Seen::absolute(&format!("{at}/.git"), kernel);
        match &dot_git.resolution {
            Resolution::Exists {
                kind: Kind::Dir,
                real,
                ..
            } => {
                return (Some(real.as_str()) != own_gitdir).then(|| {
                    format!(
                        "`git` in {dir} uses the repository {at}, not the project's own, and a read \
                         there could run code its configuration names (fsmonitor, pager, hooks, filters)"
                    )
                })
            }
            Resolution::Exists { .. } => {
                return Some(format!(
                    "`git` in {dir} finds a `.git` file at {at}, which points git at another directory"
                ))
            }
            Resolution::Unknown { why } => {
                return Some(format!("`git` in {dir}: {at}/.git cannot be resolved ({why})"))
            }
            Resolution::Missing { .. } => {}
        }
        // A bare repository: `HEAD` and `objects/` in the directory itself.
        let head = kernel.resolve(&format!("{at}/HEAD"));
        let objects = kernel.resolve(&format!("{at}/objects"));
        let is =
            |r: &Resolution, k: Kind| matches!(r, Resolution::Exists { kind, .. } if *kind == k);
        if is(&head, Kind::File) && is(&objects, Kind::Dir) {
            return (Some(at.as_str()) != own_gitdir).then(|| {
                format!(
                    "`git` in {dir} uses the bare repository {at}, not the project's own, and a read \
                     there could run code its configuration names"
                )
            });
        }
        if matches!(head, Resolution::Unknown { .. })
            || matches!(objects, Resolution::Unknown { .. })
        {
            return Some(format!("`git` in {dir}: {at} cannot be inspected"));
        }
        if at == "/" {
            return None;
        }
        at = paths::normalise(&format!("{at}/.."));
    }
}
