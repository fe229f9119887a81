//! Read classification: is a parsed command string a *pure read* the hook may allow on its own?
//!
//! A call is a pure read only if **every** simple command is on the built-in enumerated read list
//! (or the operator's extension vouches for its argv) and none of its flags, wrappers or environment
//! prefixes executes code or writes, no redirection writes (except to `/dev/null` and fd
//! duplication), no command word is dynamic, dynamic arguments appear only where they cannot turn
//! into a dangerous flag or a secret path, and no argument names a secret path.
//!
//! Decisions documented here because they are judgement calls:
//! - **Dynamic arguments.** Commands are in three classes ([`commands`]): `echo`-like commands take
//!   anything; plain file readers (`cat`, `ls`, `grep`, `wc`, …) take globs (checked against the
//!   secret list as every file they could match) but no `$VAR`/`$(…)` values, since those could name
//!   a secret; commands with dangerous flags (`find`, `git`, `sed`, `sort`, `rg`, …) take no dynamic
//!   word at all — a glob can expand to a file named `--pre=evil`.
//! - **Pagers** (`less`, `more`, `man`): under an agent stdout is not a terminal, so they behave
//!   like `cat`; they are reads unless given `+cmd` start commands, log files or key files.
//! - **`cd`** is a read; later relative paths are checked against every directory the string
//!   could be in. `cd` with a dynamic target or `-` is not a read.
//! - **Assignments** without a command (`x=1`) are reads only for lower-case names that no program
//!   reads from the environment (`http_proxy` & co. excluded) and for the safe environment list.
//! - **Repository configuration** (`.git/config` drivers, fsmonitor) is trusted: writes to `.git/`
//!   never pass as reads and are protected in the sandbox.
//! - **Recursive readers** (`grep -r`, `rg`, `ag`, `diff -r`, `git grep --no-index`) read every
//!   file under the places they are given: see [`recursive`] for the rule (never above a secret
//!   path; below the working directory inside the project, or limited to non-secret names).
//!   Names-only listings (`ls -R`, `find`, `tree`, `du`, `fd`, `rg --files`) stay reads: they show
//!   names, not contents, and a listing that *names* a secret (`ls ~/.ssh`, `find ~ -name '*.pem'`)
//!   is refused by the argument check like any other command.

mod awk;
mod commands;
mod env;
pub mod packs;
pub mod recursive;
mod secrets;
mod sed;

use std::borrow::Cow;
use std::fmt;

pub use packs::{Pack, PackSet, PackVerdict};
pub use recursive::{DirListing, SearchSite, TreeRisk, MAX_LISTING};
pub use secrets::{Bases, Comp, SecretPaths};

use super::types::{Analysis, RedirectKind, Script, SimpleCommand, Word};
use commands::{Dyn, Refusal};

/// The operator's extension to the read list: "tier 0 of the verified tier map matches this argv".
pub trait ReadExtension {
    /// Is this fully static argv (wrappers removed) a read according to the operator?
    fn is_read(&self, argv: &[&str]) -> bool;
}

impl<F: Fn(&[&str]) -> bool> ReadExtension for F {
    fn is_read(&self, argv: &[&str]) -> bool {
        self(argv)
    }
}

/// Everything classification needs besides the script. Built once per process; no IO.
pub struct ReadPolicy<'a> {
    /// The agent's home directory: resolves `~` and `$HOME`.
    pub home: String,
    /// The directory the command runs in, when known: resolves relative paths.
    pub cwd: Option<String>,
    /// The project root, when known: a recursive search below the working directory inside it
    /// may be a read ([`recursive`]); unknown, only searches limited to non-secret names are.
    pub project: Option<String>,
    /// Paths whose contents must not be read: owned, or borrowed from a table compiled once
    /// (the daemon keeps one per home; `decide` lends the caller's to its own policy).
    pub secrets: Cow<'a, SecretPaths>,
    /// Tier 0 of the verified tier map, if any.
    pub extension: Option<&'a dyn ReadExtension>,
    /// Lists the working directory or project root for a recursive search of it
    /// ([`recursive`], rule 3), or the directory of a glob that could name a secret; `None`: such
    /// a search or glob is never a read.
    pub listing: Option<&'a dyn DirListing>,
    /// The read packs that are on ([`packs`]): remote and package CLIs' read-only forms.
    pub packs: PackSet,
}

impl<'a> ReadPolicy<'a> {
    /// The default secret list for `home`, no cwd, no extension.
    pub fn new(home: &str) -> ReadPolicy<'a> {
        ReadPolicy {
            home: home.trim_end_matches('/').to_owned(),
            cwd: None,
            project: None,
            secrets: Cow::Owned(SecretPaths::builtin::<&str>(home, &[])),
            extension: None,
            listing: None,
            packs: PackSet::all(),
        }
    }
}

/// Whether a script is a pure read.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadVerdict {
    /// Every command only reads, and nothing secret is named.
    PureRead,
    /// Command number `command_index` (in [`Script::commands`]) is not a read, because `reason`.
    NotRead {
        command_index: usize,
        reason: NotReadReason,
    },
}

/// Why a command is not a pure read. `Display` says what was refused and why, for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReadReason {
    /// The string could not be analysed.
    Unanalyzable { why: String },
    /// The command word is not known before it runs.
    DynamicCommand { text: String },
    /// The command is not on the read list.
    NotAReadCommand { command: String },
    /// A wrapper that is not allowed for reads (`sudo`, `nohup`, `watch`, …) or its options.
    Wrapper { wrapper: String, why: &'static str },
    /// An environment prefix that changes what a program runs or where it writes.
    EnvPrefix { name: String },
    /// A shell variable assignment that could change what later commands do.
    Assignment { name: String },
    /// A flag, subcommand or script that executes code or writes.
    UnsafeArgument {
        command: String,
        argument: String,
        why: &'static str,
    },
    /// An argument whose value is unknown where a value could be dangerous.
    DynamicArgument { command: String, argument: String },
    /// A redirection that writes a file.
    RedirectWrite { target: String },
    /// An argument or redirection names a secret path.
    SecretPath { command: String, path: String },
    /// A read pack's form that prints a secret (`gh auth token`, `kubectl get secret -o yaml`,
    /// `aws secretsmanager get-secret-value`).
    SecretCommand {
        pack: Pack,
        command: String,
        what: String,
    },
    /// The command prints the environment, or a variable that looks like it holds a secret
    /// (`env`, `printenv`, `export -p`, `declare -x`, `set`, `ps e`, `echo $GITHUB_TOKEN`).
    EnvironmentDump { command: String, what: String },
    /// A recursive content search of a place that holds, or may hold, secret files.
    RecursiveSecret {
        command: String,
        root: String,
        risk: TreeRisk,
    },
}

impl NotReadReason {
    /// Would the command read a secret (named, or inside a searched tree)? The daemon asks a
    /// person for these instead of test-running them: a test-run cannot see what was read.
    pub fn reads_secret(&self) -> bool {
        matches!(
            self,
            NotReadReason::SecretPath { .. }
                | NotReadReason::RecursiveSecret { .. }
                | NotReadReason::EnvironmentDump { .. }
                | NotReadReason::SecretCommand { .. }
        )
    }
}

impl fmt::Display for NotReadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotReadReason::Unanalyzable { why } => {
                write!(f, "the command could not be analysed ({why})")
            }
            NotReadReason::DynamicCommand { text } => {
                write!(f, "the command name `{text}` is only known at run time")
            }
            NotReadReason::NotAReadCommand { command } => {
                write!(f, "`{command}` is not on the read-only command list")
            }
            NotReadReason::Wrapper { wrapper, why } => write!(f, "wrapper `{wrapper}`: {why}"),
            NotReadReason::EnvPrefix { name } => write!(
                f,
                "the environment prefix `{name}=` can change what a program runs or where it writes"
            ),
            NotReadReason::Assignment { name } => {
                write!(f, "assigning `{name}` can change what later commands do")
            }
            NotReadReason::UnsafeArgument {
                command,
                argument,
                why,
            } => {
                write!(f, "`{command}` with `{argument}` {why}")
            }
            NotReadReason::DynamicArgument { command, argument } => write!(
                f,
                "`{command}` gets the argument `{argument}` whose value is only known at run time \
                 and could be a dangerous option or a secret path"
            ),
            NotReadReason::RedirectWrite { target } => {
                write!(f, "the redirection writes to `{target}`")
            }
            NotReadReason::SecretPath { command, path } => {
                write!(
                    f,
                    "`{command}` would read `{path}`, which is on the secret-path list"
                )
            }
            NotReadReason::SecretCommand {
                pack,
                command,
                what,
            } => write!(f, "`{command}` reads a secret ({what}; read pack `{pack}`)"),
            NotReadReason::EnvironmentDump { command, what } => write!(
                f,
                "`{command}` {what}; agents run with tokens in their environment"
            ),
            NotReadReason::RecursiveSecret {
                command,
                root,
                risk,
            } => {
                write!(
                    f,
                    "`{command}` searches `{root}` recursively, which {}",
                    risk.why()
                )
            }
        }
    }
}

/// Classify an analysis: an unanalyzable string is never a read.
pub fn classify_analysis(analysis: &Analysis, policy: &ReadPolicy<'_>) -> ReadVerdict {
    match analysis {
        Analysis::Parsed(script) => classify(script, policy),
        Analysis::Unanalyzable(u) => ReadVerdict::NotRead {
            command_index: 0,
            reason: NotReadReason::Unanalyzable {
                why: format!("{u:?}"),
            },
        },
    }
}

/// Is every command of `script` a pure read under `policy`?
pub fn classify(script: &Script, policy: &ReadPolicy<'_>) -> ReadVerdict {
    let cwds: Vec<String> = policy.cwd.iter().cloned().collect();
    let mut ctx = Ctx {
        policy,
        script,
        bases: policy.secrets.bases(&cwds),
        cwds,
    };
    for (i, cmd) in script.commands.iter().enumerate() {
        if let Err(reason) = ctx.command(cmd) {
            return ReadVerdict::NotRead {
                command_index: i,
                reason,
            };
        }
    }
    ReadVerdict::PureRead
}

/// Environment variables that only change formatting, language or time zone.
fn safe_env(name: &str) -> bool {
    name.starts_with("LC_")
        || matches!(
            name,
            "LANG"
                | "LANGUAGE"
                | "TZ"
                | "NO_COLOR"
                | "CLICOLOR"
                | "CLICOLOR_FORCE"
                | "FORCE_COLOR"
                | "COLUMNS"
                | "LINES"
                | "TERM"
                | "COLORTERM"
                | "POSIXLY_CORRECT"
                | "TIME_STYLE"
                | "QUOTING_STYLE"
                | "GREP_COLOR"
                | "GREP_COLORS"
                | "LS_COLORS"
        )
}

/// Shell variables an assignment-only command may set.
fn safe_assignment(name: &str) -> bool {
    if safe_env(name) {
        return true;
    }
    let lower = name
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_');
    lower
        && !name.is_empty()
        && !matches!(
            name,
            "http_proxy" | "https_proxy" | "ftp_proxy" | "all_proxy" | "no_proxy" | "rsync_proxy"
        )
}

/// Directories whose programs are the system's: `/usr/bin/ls` is `ls`, `./ls` is not.
const SYSTEM_DIRS: &[&str] = &[
    "/bin/",
    "/usr/bin/",
    "/usr/local/bin/",
    "/sbin/",
    "/usr/sbin/",
];

/// Redirect targets that are not files.
fn harmless_target(t: &str) -> bool {
    matches!(
        t,
        "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/fd/1" | "/dev/fd/2"
    )
}

/// A dynamic word that is a process substitution: a `/dev/fd/N` pipe whose command is classified
/// on its own.
fn is_process_substitution(raw: &str) -> bool {
    raw.starts_with("<(") || raw.starts_with(">(")
}

struct Ctx<'p, 's> {
    policy: &'p ReadPolicy<'p>,
    script: &'s Script,
    /// Every directory relative paths may be relative to (the cwd, then each `cd` target).
    cwds: Vec<String>,
    /// `cwds` prepared for the secret list (`SecretPaths::bases`), made again when they change.
    bases: Bases,
}

/// The path a word stands for, as far as the secret check is concerned.
enum PathArg {
    /// A known path (or glob with wildcards widened to `*`/`?`), `~` resolved.
    Known(String),
    /// A value we cannot know.
    Unknown,
}

impl Ctx<'_, '_> {
    fn command(&mut self, cmd: &SimpleCommand) -> Result<(), NotReadReason> {
        // An unquoted glob that matches nothing reaches the program as typed (`--include=*.py`):
        // judge the command with the word as that text, and without it (under `nullglob` it
        // vanishes); both must be reads.
        if let Some(literal) = self.literal_globs(cmd) {
            let mut as_text = cmd.clone();
            let mut vanished = cmd.clone();
            as_text.argv = cmd
                .argv
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    if literal[i] {
                        Word::Static(w.text().to_owned())
                    } else {
                        w.clone()
                    }
                })
                .collect();
            vanished.argv = cmd
                .argv
                .iter()
                .enumerate()
                .filter(|(i, _)| !literal[*i])
                .map(|(_, w)| w.clone())
                .collect();
            self.command(&as_text)?;
            return self.command(&vanished);
        }
        for r in &cmd.redirects {
            self.redirect(cmd, r)?;
        }
        let Some(first) = cmd.argv.first() else {
            // Only assignments (and redirections).
            for a in &cmd.env {
                if !safe_assignment(&a.name) {
                    return Err(NotReadReason::Assignment {
                        name: a.name.clone(),
                    });
                }
            }
            return Ok(());
        };
        for a in &cmd.env {
            if !safe_env(&a.name) {
                return Err(NotReadReason::EnvPrefix {
                    name: a.name.clone(),
                });
            }
        }
        for w in &cmd.wrappers {
            self.wrapper(w)?;
        }
        let Word::Static(path) = first else {
            return Err(NotReadReason::DynamicCommand {
                text: first.text().to_owned(),
            });
        };
        let name = if path.contains('/') {
            match SYSTEM_DIRS.iter().find_map(|d| path.strip_prefix(d)) {
                Some(n) if !n.contains('/') => n,
                _ => {
                    return Err(NotReadReason::NotAReadCommand {
                        command: path.clone(),
                    })
                }
            }
        } else {
            path.as_str()
        };
        let args = &cmd.argv[1..];
        if let Some(what) = env::dump(name, args) {
            return Err(NotReadReason::EnvironmentDump {
                command: name.to_owned(),
                what,
            });
        }
        if name == "cd" || name == "pushd" {
            return self.cd(name, args);
        }
        // A function defined in this string: its body is classified where it is listed.
        if !path.contains('/') && self.script.functions.iter().any(|f| f == name) {
            return self.secret_args(name, args, Dyn::Globs);
        }
        let texts: Vec<&str> = args.iter().map(Word::text).collect();
        let pack = packs::judge(name, &texts);
        // A secret form is never a read, whatever tier 0 says.
        if let Some((p, PackVerdict::Secret { what })) = &pack {
            return Err(NotReadReason::SecretCommand {
                pack: *p,
                command: format!("{name} {}", texts.join(" ")).trim_end().to_owned(),
                what: what.clone(),
            });
        }
        if let Some(ext) = self.policy.extension {
            let statics: Option<Vec<&str>> = cmd.argv.iter().map(Word::as_static).collect();
            if let Some(statics) = statics {
                if ext.is_read(&statics) {
                    self.secret_args(name, args, Dyn::Never)?;
                    return self.recursive(name, args);
                }
            }
        }
        if let Some((p, verdict)) = pack {
            return self.pack_command(name, args, p, verdict);
        }
        let Some(rule) = commands::rule(name) else {
            return Err(NotReadReason::NotAReadCommand {
                command: name.to_owned(),
            });
        };
        if let Some(check) = rule.check {
            if rule.dynamic == Dyn::Never {
                if let Some(d) = args
                    .iter()
                    .find(|w| w.is_dynamic() && !is_process_substitution(w.text()))
                {
                    return Err(NotReadReason::DynamicArgument {
                        command: name.to_owned(),
                        argument: d.text().to_owned(),
                    });
                }
            }
            check(name, args).map_err(|r| refusal(name, r))?;
        }
        self.secret_args(name, args, rule.dynamic)?;
        self.recursive(name, args)
    }

    /// A command a read pack covers: its verdict, then the dynamic-word and secret-path checks
    /// every reader gets (a pack's command takes no run-time word: a glob can expand to a flag).
    fn pack_command(
        &self,
        name: &str,
        args: &[Word],
        pack: Pack,
        verdict: PackVerdict,
    ) -> Result<(), NotReadReason> {
        if !self.policy.packs.contains(pack) {
            return Err(NotReadReason::NotAReadCommand {
                command: format!("{name} (read pack `{pack}` is switched off)"),
            });
        }
        match verdict {
            PackVerdict::Read { .. } => {
                if let Some(d) = args
                    .iter()
                    .find(|w| w.is_dynamic() && !is_process_substitution(w.text()))
                {
                    return Err(NotReadReason::DynamicArgument {
                        command: name.to_owned(),
                        argument: d.text().to_owned(),
                    });
                }
                self.secret_args(name, args, Dyn::Never)
            }
            PackVerdict::NotRead { what } => Err(NotReadReason::NotAReadCommand {
                command: format!("{what}; read pack `{pack}`"),
            }),
            PackVerdict::Unsafe { argument, why } => Err(NotReadReason::UnsafeArgument {
                command: format!("{name} (read pack `{pack}`)"),
                argument,
                why,
            }),
            PackVerdict::Secret { what } => Err(NotReadReason::SecretCommand {
                pack,
                command: name.to_owned(),
                what,
            }),
        }
    }

    /// A recursive content search: every place it searches is judged by [`recursive`]'s rule.
    fn recursive(&self, name: &str, args: &[Word]) -> Result<(), NotReadReason> {
        let Some(search) = commands::search(name, args) else {
            return Ok(());
        };
        let site = SearchSite {
            secrets: &self.policy.secrets,
            project: self.policy.project.as_deref(),
            cwds: &self.cwds,
            listing: self.policy.listing,
        };
        let filtered = site.filtered(&search.only);
        let dot = Word::Static(".".to_owned());
        // Every place is judged; the reason names the worst (a secret above the others).
        let mut worst: Option<NotReadReason> = None;
        let mut note = |r: NotReadReason| {
            let rank = |r: &NotReadReason| match r {
                NotReadReason::RecursiveSecret { risk, .. } => match risk {
                    TreeRisk::HoldsSecret => 0,
                    TreeRisk::SecretEntry(_) => 1,
                    TreeRisk::Unknown => 2,
                    TreeRisk::Unlisted(_) => 3,
                    TreeRisk::MayHoldSecretFiles => 4,
                },
                _ => 5,
            };
            if worst.as_ref().is_none_or(|w| rank(&r) < rank(w)) {
                worst = Some(r);
            }
        };
        let roots = search
            .roots
            .iter()
            .copied()
            .chain(&search.more_roots)
            .chain(search.cwd.then_some(&dot));
        for root in roots {
            let refuse = |risk| NotReadReason::RecursiveSecret {
                command: name.to_owned(),
                root: root.text().to_owned(),
                risk,
            };
            let (path, glob) = match root {
                Word::Static(s) => (self.expand_tilde(s), false),
                Word::Dynamic(raw) => match self.dynamic_path(raw) {
                    PathArg::Known(p) => (p, true),
                    PathArg::Unknown => {
                        note(refuse(TreeRisk::Unknown));
                        continue;
                    }
                },
            };
            let places: Vec<String> = if path.starts_with('/') {
                vec![path]
            } else if self.cwds.is_empty() {
                note(refuse(TreeRisk::Unknown));
                continue;
            } else {
                self.cwds.iter().map(|c| format!("{c}/{path}")).collect()
            };
            for place in places {
                if let Err(risk) = site.judge(&place, glob, filtered, search.follows) {
                    note(refuse(risk));
                }
            }
        }
        worst.map_or(Ok(()), Err)
    }

    /// Check every argument against the secret list and the dynamic-argument rule.
    fn secret_args(&self, name: &str, args: &[Word], dynamic: Dyn) -> Result<(), NotReadReason> {
        for a in args {
            match a {
                Word::Static(s) => self.secret_static(name, s)?,
                Word::Dynamic(raw) => {
                    if is_process_substitution(raw) {
                        continue;
                    }
                    match dynamic {
                        Dyn::Any => {
                            if let Some(var) = env::secret_reference(raw) {
                                return Err(NotReadReason::EnvironmentDump {
                                    command: name.to_owned(),
                                    what: format!("prints `${var}`, which looks like a secret"),
                                });
                            }
                        }
                        Dyn::Never => {
                            return Err(NotReadReason::DynamicArgument {
                                command: name.to_owned(),
                                argument: raw.clone(),
                            })
                        }
                        Dyn::Globs => match self.dynamic_path(raw) {
                            PathArg::Known(p) if !p.starts_with('-') => {
                                if self.is_secret_glob(&p) && self.glob_reaches_secret(&p) {
                                    return Err(NotReadReason::SecretPath {
                                        command: name.to_owned(),
                                        path: raw.clone(),
                                    });
                                }
                            }
                            _ => {
                                return Err(NotReadReason::DynamicArgument {
                                    command: name.to_owned(),
                                    argument: raw.clone(),
                                })
                            }
                        },
                    }
                }
            }
        }
        Ok(())
    }

    fn secret_static(&self, name: &str, s: &str) -> Result<(), NotReadReason> {
        let secret = |p: &str| self.is_secret(&self.expand_tilde(p));
        let mut hit = secret(s);
        // `--file=PATH`, `-fPATH` are not worth splitting precisely: check the value after `=`,
        // and `REV:path` (git show HEAD:.env).
        if !hit {
            if let Some((_, v)) = s.split_once('=') {
                hit = secret(v);
            }
        }
        if !hit {
            if let Some((_, v)) = s.split_once(':') {
                hit = secret(v);
            }
        }
        if hit {
            return Err(NotReadReason::SecretPath {
                command: name.to_owned(),
                path: s.to_owned(),
            });
        }
        Ok(())
    }

    /// Which arguments are unquoted globs that match no entry of their directory (one listing
    /// each), so bash passes them on as typed; `None` when there are none (or no listing).
    fn literal_globs(&self, cmd: &SimpleCommand) -> Option<Vec<bool>> {
        let listing = self.policy.listing?;
        let mut any = false;
        let mut out = vec![false; cmd.argv.len()];
        for (i, w) in cmd.argv.iter().enumerate().skip(1) {
            let Word::Dynamic(raw) = w else { continue };
            let pure = raw.bytes().all(|c| {
                c.is_ascii_alphanumeric()
                    || matches!(
                        c,
                        b'/' | b'.'
                            | b'_'
                            | b'-'
                            | b'+'
                            | b'*'
                            | b'?'
                            | b','
                            | b':'
                            | b'='
                            | b'%'
                            | b'@'
                    )
            });
            if !pure || !raw.contains(['*', '?']) || raw.starts_with('~') {
                continue;
            }
            let (dir, last) = match raw.rsplit_once('/') {
                Some((d, l)) => (d, l),
                None => ("", raw.as_str()),
            };
            if dir.contains(['*', '?']) || last.is_empty() {
                continue;
            }
            let dirs: Vec<String> = if raw.starts_with('/') {
                vec![if dir.is_empty() {
                    "/".to_owned()
                } else {
                    dir.to_owned()
                }]
            } else if self.cwds.is_empty() {
                continue;
            } else {
                self.cwds
                    .iter()
                    .map(|c| match dir {
                        "" => c.clone(),
                        d => format!("{c}/{d}"),
                    })
                    .collect()
            };
            let matches_nothing = dirs.iter().all(|d| {
                listing.list(d).is_some_and(|entries| {
                    !entries.iter().any(|e| secrets::may_match(last, e, true))
                })
            });
            if matches_nothing {
                out[i] = true;
                any = true;
            }
        }
        any.then_some(out)
    }

    /// A glob argument that could match a secret name (`*.json` ⇒ `credentials.json`): does it,
    /// here? Answered from one listing of its directory when its wildcards are all in the last
    /// component; otherwise, or without a listing, it may.
    fn glob_reaches_secret(&self, glob: &str) -> bool {
        let Some(listing) = self.policy.listing else {
            return true;
        };
        let (dir, last) = match glob.rsplit_once('/') {
            Some((d, l)) => (d, l),
            None => ("", glob),
        };
        if dir.contains(['*', '?']) || last.is_empty() {
            return true;
        }
        let dirs: Vec<String> = if dir.starts_with('/') {
            vec![dir.to_owned()]
        } else if glob.starts_with('/') {
            vec!["/".to_owned()]
        } else if self.cwds.is_empty() {
            return true;
        } else {
            self.cwds
                .iter()
                .map(|c| match dir {
                    "" => c.clone(),
                    d => format!("{c}/{d}"),
                })
                .collect()
        };
        dirs.iter().any(|d| {
            let Some(entries) = listing.list(d) else {
                return true;
            };
            entries.iter().any(|e| {
                secrets::may_match(last, e, true)
                    && self.policy.secrets.matches(
                        &format!("{}/{e}", d.trim_end_matches('/')),
                        &[],
                        false,
                    )
            })
        })
    }

    fn expand_tilde(&self, p: &str) -> String {
        if p == "~" {
            return self.policy.home.clone();
        }
        match p.strip_prefix("~/") {
            Some(rest) => format!("{}/{rest}", self.policy.home),
            None => p.to_owned(),
        }
    }

    fn is_secret(&self, p: &str) -> bool {
        self.policy.secrets.matches_from(p, &self.bases, false)
    }

    fn is_secret_glob(&self, p: &str) -> bool {
        self.policy.secrets.matches_from(p, &self.bases, true)
    }

    /// What path a dynamic word could stand for: a glob, or `$HOME/…`.
    fn dynamic_path(&self, raw: &str) -> PathArg {
        let mut s = raw;
        let mut prefix = String::new();
        for home in ["\"$HOME\"", "\"${HOME}\"", "${HOME}", "$HOME"] {
            if let Some(rest) = s.strip_prefix(home) {
                if rest.is_empty() || rest.starts_with('/') {
                    prefix = self.policy.home.clone();
                    s = rest;
                }
                break;
            }
        }
        let plain = s.bytes().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(
                    c,
                    b'/' | b'.'
                        | b'_'
                        | b'-'
                        | b'+'
                        | b'*'
                        | b'?'
                        | b'['
                        | b']'
                        | b'!'
                        | b'^'
                        | b','
                        | b'{'
                        | b'}'
                        | b'~'
                        | b':'
                        | b'='
                        | b'%'
                        | b'@'
                )
        });
        let tilde_ok = !s.starts_with('~') || s == "~" || s.starts_with("~/");
        if !plain || !tilde_ok || s.contains("@(") {
            return PathArg::Unknown;
        }
        // Widen bracket and brace groups to wildcards.
        let mut out = prefix;
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            match c {
                '[' => {
                    for d in chars.by_ref() {
                        if d == ']' {
                            break;
                        }
                    }
                    out.push('?');
                }
                '{' => {
                    for d in chars.by_ref() {
                        if d == '}' {
                            break;
                        }
                    }
                    out.push('*');
                }
                c => out.push(c),
            }
        }
        if out.starts_with('~') {
            out = self.expand_tilde(&out);
        }
        PathArg::Known(out)
    }

    fn redirect(
        &self,
        cmd: &SimpleCommand,
        r: &super::types::Redirect,
    ) -> Result<(), NotReadReason> {
        let name = cmd
            .argv
            .first()
            .map(|w| w.text().to_owned())
            .unwrap_or_default();
        // bash itself connects for /dev/tcp/HOST/PORT and /dev/udp/… redirections.
        if let Some(t) = r.target.as_static() {
            if t.starts_with("/dev/tcp/") || t.starts_with("/dev/udp/") {
                return Err(NotReadReason::UnsafeArgument {
                    command: name,
                    argument: t.to_owned(),
                    why: "makes the shell open a network connection",
                });
            }
        }

        match r.kind {
            RedirectKind::Duplicate | RedirectKind::HereDoc | RedirectKind::HereString => Ok(()),
            RedirectKind::Read => match &r.target {
                Word::Static(s) => self.secret_static(&name, s),
                Word::Dynamic(raw) if is_process_substitution(raw) => Ok(()),
                Word::Dynamic(raw) => match self.dynamic_path(raw) {
                    PathArg::Known(p) if !self.is_secret_glob(&p) => Ok(()),
                    PathArg::Known(_) => Err(NotReadReason::SecretPath {
                        command: name,
                        path: raw.clone(),
                    }),
                    PathArg::Unknown => Err(NotReadReason::DynamicArgument {
                        command: name,
                        argument: raw.clone(),
                    }),
                },
            },
            RedirectKind::Write
            | RedirectKind::Append
            | RedirectKind::WriteBoth
            | RedirectKind::AppendBoth
            | RedirectKind::ReadWrite => match &r.target {
                Word::Static(s) if harmless_target(s) && r.kind != RedirectKind::ReadWrite => {
                    Ok(())
                }
                Word::Dynamic(raw)
                    if is_process_substitution(raw) && r.kind != RedirectKind::ReadWrite =>
                {
                    Ok(())
                }
                t => Err(NotReadReason::RedirectWrite {
                    target: t.text().to_owned(),
                }),
            },
        }
    }

    fn wrapper(&self, w: &[Word]) -> Result<(), NotReadReason> {
        let Some(first) = w.first() else {
            return Ok(());
        };
        let name = match first {
            Word::Static(p) if !p.contains('/') => p.as_str(),
            Word::Static(p) => match SYSTEM_DIRS.iter().find_map(|d| p.strip_prefix(d)) {
                Some(n) if !n.contains('/') => n,
                _ => {
                    return Err(NotReadReason::Wrapper {
                        wrapper: p.clone(),
                        why: "not a system program",
                    })
                }
            },
            Word::Dynamic(t) => return Err(NotReadReason::DynamicCommand { text: t.clone() }),
        };
        let bad = |why: &'static str| {
            Err(NotReadReason::Wrapper {
                wrapper: name.to_owned(),
                why,
            })
        };
        let statics: Vec<&str> = w[1..].iter().map(Word::text).collect();
        let has = |opts: &[&str]| {
            statics.iter().any(|a| {
                opts.iter().any(|o| {
                    if o.starts_with("--") {
                        a.split('=').next() == Some(*o)
                    } else {
                        a.starts_with('-') && !a.starts_with("--") && a[1..].contains(&o[1..])
                    }
                })
            })
        };
        match name {
            "env" => {
                if has(&["-P"]) {
                    return bad("-P changes where programs are found");
                }
            }
            "time" => {
                if has(&["-o", "--output", "-a", "--append"]) {
                    return bad("-o writes its report to a file");
                }
            }
            "command" | "builtin" | "exec" | "nice" | "timeout" | "stdbuf" | "ionice"
            | "setsid" | "chrt" | "taskset" | "busybox" | "xargs" | "eval" => {}
            n if ["bash", "sh", "zsh", "dash", "ksh", "mksh", "ash"].contains(&n) => {
                if statics
                    .iter()
                    .any(|a| a.starts_with("--rcfile") || a.starts_with("--init-file"))
                {
                    return bad("--rcfile runs a file");
                }
            }
            "sudo" | "doas" => return bad("runs the command with other privileges"),
            "nohup" => return bad("may write nohup.out"),
            "watch" => return bad("runs the command repeatedly, forever"),
            "flock" => return bad("creates a lock file"),
            "trap" => return bad("runs code when the shell exits or gets a signal"),
            _ => return bad("not allowed for reads"),
        }
        for a in &w[1..] {
            if let Word::Static(s) = a {
                self.secret_static(name, s)?;
            }
        }
        Ok(())
    }

    fn cd(&mut self, name: &str, args: &[Word]) -> Result<(), NotReadReason> {
        let args: Vec<&Word> = args
            .iter()
            .filter(|a| !matches!(a, Word::Static(s) if s == "-P" || s == "-L" || s == "--"))
            .collect();
        let target = match args.as_slice() {
            [] => self.policy.home.clone(),
            [Word::Static(s)] if s != "-" && !s.starts_with('-') => self.expand_tilde(s),
            [Word::Dynamic(raw)] => match self.dynamic_path(raw) {
                PathArg::Known(p) if !p.contains(['*', '?']) => p,
                _ => {
                    return Err(NotReadReason::DynamicArgument {
                        command: name.to_owned(),
                        argument: raw.clone(),
                    })
                }
            },
            other => {
                let text = other.iter().map(|w| w.text()).collect::<Vec<_>>().join(" ");
                return Err(NotReadReason::DynamicArgument {
                    command: name.to_owned(),
                    argument: text,
                });
            }
        };
        if self.is_secret(&target) {
            return Err(NotReadReason::SecretPath {
                command: name.to_owned(),
                path: target,
            });
        }
        let mut new = Vec::new();
        if target.starts_with('/') {
            new.push(target);
        } else if self.cwds.is_empty() {
            // Unknown starting directory: later relative paths are checked by name and tail only.
        } else {
            for c in &self.cwds {
                new.push(format!("{c}/{target}"));
            }
        }
        for n in new {
            if !self.cwds.contains(&n) {
                self.cwds.push(n);
            }
        }
        self.bases = self.policy.secrets.bases(&self.cwds);
        Ok(())
    }
}

fn refusal(command: &str, r: Refusal) -> NotReadReason {
    match r {
        Refusal::Unsafe { argument, why } => NotReadReason::UnsafeArgument {
            command: command.to_owned(),
            argument,
            why,
        },
        Refusal::NotRead { what } => NotReadReason::NotAReadCommand {
            command: format!("{command} {what}"),
        },
    }
}
