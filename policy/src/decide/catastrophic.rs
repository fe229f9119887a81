//! Built-in catastrophic patterns: denied whatever the tier map, remembered rules or the escape hatch
//! say. These are the commands whose single wrong "yes" is unrecoverable: wiping a home directory or
//! a disk, a fork bomb, force-pushing over main, piping a download into a shell, and touching
//! cmdgate's own files.

use crate::shell::{Context, Script, SimpleCommand, Word};

use super::kernel::{OwnPaths, PathResolver, Seen, Spelling};
use super::paths::{self, Base};

/// Why a command is catastrophic, for the reason shown to the model and the audit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catastrophe {
    /// Index into `Script::commands` of the command that matched.
    pub command_index: usize,
    /// Short stable name of the built-in rule (`rm-critical-path`, `force-push-main`, ...).
    pub rule: &'static str,
    /// What it would have done, in words.
    pub what: String,
}

/// Paths that cmdgate itself depends on (config, pinned keys, store, sockets, hook binary, Claude
/// Code settings), plus the values catastrophic checks resolve against.
#[derive(Debug, Clone, Copy)]
pub struct Guarded<'a> {
    pub base: Base<'a>,
    /// The project root: deleting it, or an ancestor of it, is catastrophic.
    pub project_root: &'a str,
    /// cmdgate's own paths, normalised: any command naming one is refused.
    pub own_paths: &'a [String],
}

/// Top-level system directories: a recursive delete/chmod/chown of one is never a development step.
const SYSTEM_DIRS: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc", "/root",
    "/sbin", "/srv", "/sys", "/usr", "/var",
];

/// Block-device prefixes: writing to one destroys a filesystem.
const BLOCK_DEVICES: &[&str] = &[
    "/dev/sd",
    "/dev/hd",
    "/dev/vd",
    "/dev/xvd",
    "/dev/nvme",
    "/dev/mmcblk",
    "/dev/mapper/",
    "/dev/dm-",
    "/dev/disk/",
    "/dev/md",
    "/dev/loop",
];

/// Programs that fetch from the network.
const DOWNLOADERS: &[&str] = &["curl", "wget", "fetch", "aria2c", "http", "https", "xh"];

/// Programs that execute what they read on stdin when given no script argument.
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "fish", "busybox", "python", "python2", "python3",
    "perl", "ruby", "node", "php", "lua", "pwsh",
];

/// The first built-in catastrophic pattern the script matches, if any.
pub fn find(script: &Script, g: Guarded<'_>) -> Option<Catastrophe> {
    find_with(script, g, &Spelling)
}

/// [`find`], with every word that may name a file also judged where `kernel` resolves it (a link or
/// a hard link to one of cmdgate's own files is that file).
pub fn find_with(
    script: &Script,
    g: Guarded<'_>,
    kernel: &dyn PathResolver,
) -> Option<Catastrophe> {
    let own = OwnPaths::resolve(g.own_paths, g.project_root, kernel);
    let has_downloader = script
        .commands
        .iter()
        .any(|c| c.argv.first().is_some_and(|w| is_one_of(w, DOWNLOADERS)));
    // `cd` moves where relative targets point: follow static `cd`s in order; after a dynamic one the
    // directory is unknown and any relative target that climbs (`..`) is treated as critical.
    let mut cwd: Option<String> = Some(g.base.cwd.to_owned());
    for (i, cmd) in script.commands.iter().enumerate() {
        let hit = |rule, what: String| {
            Some(Catastrophe {
                command_index: i,
                rule,
                what,
            })
        };
        if let Some(Word::Static(c)) = cmd.argv.first() {
            if c == "cd" || c == "pushd" {
                cwd = match (cmd.argv.get(1), &cwd) {
                    (None, _) => Some(g.base.home.to_owned()),
                    (Some(Word::Static(d)), Some(cur)) if d != "-" => Some(paths::resolve_str(
                        d,
                        Base {
                            home: g.base.home,
                            cwd: cur,
                        },
                    )),
                    _ => None,
                };
                continue;
            }
        }
        let g = match &cwd {
            Some(c) => Guarded {
                base: Base {
                    home: g.base.home,
                    cwd: c,
                },
                ..g
            },
            // Unknown directory: resolving against `/` makes every climbing target critical.
            None => Guarded {
                base: Base {
                    home: g.base.home,
                    cwd: "/",
                },
                ..g
            },
        };
        if let Some(path) = touches_own_path(cmd, g, &own, kernel) {
            return hit(
                "cmdgate-own-path",
                format!("touches cmdgate's own file {path}"),
            );
        }
        for r in &cmd.redirects {
            if r.kind.writes() && resolve(&r.target, g).is_some_and(|p| is_block_device(&p)) {
                return hit(
                    "write-block-device",
                    format!("writes to the block device {}", text(&r.target)),
                );
            }
        }
        if cmd.context == Context::FunctionBody
            && cmd
                .argv
                .first()
                .is_some_and(|w| matches!(w, Word::Static(n) if script.functions.contains(n)))
        {
            return hit(
                "fork-bomb",
                "defines a function that calls itself (fork-bomb shape)".into(),
            );
        }
        let Some(Word::Static(prog)) = cmd.argv.first() else {
            if has_downloader && !cmd.argv.is_empty() {
                return hit(
                    "download-exec",
                    "runs a command whose text is computed while something is downloaded (e.g. `bash -c \"$(curl …)\"`)".into(),
                );
            }
            continue;
        };
        let prog = basename(prog);
        let args = &cmd.argv[1..];
        let found = match prog {
            "rm" => rm(args, g),
            "find" => find_delete(args, g),
            "chmod" | "chown" | "chgrp" | "setfacl" => recursive_on_critical(prog, args, g),
            "dd" => dd(args, g),
            "shred" | "wipefs" | "blkdiscard" | "sgdisk" | "fdisk" | "sfdisk" | "parted" => {
                args.iter().find(|a| resolve(a, g).is_some_and(|p| is_block_device(&p))).map(|a| {
                    ("destroy-block-device", format!("`{prog}` on the block device {}", text(a)))
                })
            }
            p if p.starts_with("mkfs") => Some(("mkfs", format!("`{p}` formats a filesystem"))),
            "shutdown" | "reboot" | "halt" | "poweroff" => {
                Some(("power-off", format!("`{prog}` stops the machine")))
            }
            "init" | "telinit" if matches!(args.first(), Some(Word::Static(a)) if a == "0" || a == "6") => {
                Some(("power-off", format!("`{prog} 0/6` halts or reboots the machine")))
            }
            "systemctl"
                if args.iter().any(|a| {
                    matches!(a, Word::Static(s) if matches!(s.as_str(), "poweroff" | "reboot" | "halt" | "kexec"))
                }) =>
            {
                Some(("power-off", "`systemctl poweroff/reboot/halt/kexec` stops the machine".into()))
            }
            "git" => force_push(args),
            "cmdgate" | "cmdgated" => operator_action(prog, args),
            p if has_downloader && INTERPRETERS.contains(&p) && reads_program_from_stdin_or_fd(p, args) => Some((
                "download-exec",
                format!("pipes or feeds a download into `{p}`: run the script from a reviewed file instead"),
            )),
            _ => None,
        };
        if let Some((rule, what)) = found {
            return hit(rule, what);
        }
    }
    None
}

/// `cmdgate` verbs an agent may run: they only read (status, the audit, what waits, explanations).
/// Everything else — answering or remembering approvals, editing rules, resetting breakers, trusting
/// keys, signing maps, installing hooks, starting a daemon — is the operator's, and an agent doing it
/// would be approving itself.
const AGENT_VERBS: &[&str] = &[
    "status",
    "audit",
    "explain",
    "pending",
    "doctor",
    "help",
    "--help",
    "-h",
    "--version",
    "-V",
];

fn operator_action(prog: &str, args: &[Word]) -> Option<(&'static str, String)> {
    let verb = |i: usize| match args.get(i) {
        Some(Word::Static(s)) => Some(s.as_str()),
        _ => None,
    };
    let what = || {
        Some((
            "cmdgate-operator-action",
            format!(
                "`{prog} {}` is the operator's action (answering approvals, rules, breakers, keys, signing): \
                 an agent never decides about its own requests. Ask the user to run it.",
                args.first().map_or("", text)
            ),
        ))
    };
    if prog == "cmdgated" {
        return what();
    }
    match (verb(0), verb(1)) {
        (None, _) if args.is_empty() => None,
        (Some(v), _) if AGENT_VERBS.contains(&v) => None,
        (Some("rules"), Some("list" | "show"))
        | (Some("breaker"), Some("status"))
        | (Some("trust"), Some("list"))
        | (Some("tiermap"), Some("verify")) => None,
        _ => what(),
    }
}

fn touches_own_path(
    cmd: &SimpleCommand,
    g: Guarded<'_>,
    own: &OwnPaths,
    kernel: &dyn PathResolver,
) -> Option<String> {
    // A bare command word (`ls`) is looked up in PATH, not a path; `./x` and `/x` are paths.
    let program = cmd
        .argv
        .first()
        .filter(|w| matches!(w, Word::Static(s) if s.contains('/')));
    let words = program
        .into_iter()
        .chain(cmd.argv.iter().skip(1))
        .chain(cmd.wrappers.iter().flatten())
        .chain(cmd.redirects.iter().map(|r| &r.target));
    for w in words {
        // `--config=/etc/cmdgate/x`: look at the value after `=` too.
        let candidates: Vec<Word> = match w {
            Word::Static(s) => {
                let mut v = vec![Word::Static(s.clone())];
                if let Some((_, value)) = s.split_once('=') {
                    v.push(Word::Static(value.to_owned()));
                }
                v
            }
            Word::Dynamic(_) => vec![w.clone()],
        };
        for c in candidates {
            // A static word as the kernel will walk it (`link/..` is the link's parent); a
            // `$HOME/…` word as the shell expands it.
            let seen = match &c {
                Word::Static(s) if !s.is_empty() => Seen::of(s, g.base, kernel),
                Word::Static(_) => continue,
                Word::Dynamic(_) => match resolve(&c, g) {
                    Some(p) => Seen::absolute(&p, kernel),
                    None => continue,
                },
            };
            if own.hit(&seen).is_some() {
                return Some(seen.shown());
            }
        }
    }
    None
}

fn rm(args: &[Word], g: Guarded<'_>) -> Option<(&'static str, String)> {
    let mut recursive = false;
    let mut targets = Vec::new();
    let mut options_done = false;
    for a in args {
        match a {
            Word::Static(s) if !options_done && s == "--" => options_done = true,
            Word::Static(s) if !options_done && s == "--no-preserve-root" => {
                return Some(("rm-critical-path", "`rm --no-preserve-root`".into()));
            }
            Word::Static(s) if !options_done && s == "--recursive" => recursive = true,
            Word::Static(s) if !options_done && s.starts_with("--") => {}
            Word::Static(s) if !options_done && s.starts_with('-') && s.len() > 1 => {
                recursive |= s.contains(['r', 'R']);
            }
            other => targets.push(other),
        }
    }
    if !recursive {
        return None;
    }
    targets
        .into_iter()
        .find(|t| is_critical_target(t, g))
        .map(|t| ("rm-critical-path", format!("`rm -r` of {}", describe(t, g))))
}

fn find_delete(args: &[Word], g: Guarded<'_>) -> Option<(&'static str, String)> {
    let deletes = args
        .iter()
        .any(|a| matches!(a, Word::Static(s) if s == "-delete"))
        || args.windows(2).any(|w| {
            matches!(&w[0], Word::Static(s) if s.starts_with("-exec") || s.starts_with("-ok"))
                && matches!(&w[1], Word::Static(p) if basename(p) == "rm")
        });
    if !deletes {
        return None;
    }
    // `find . -name '*.pyc' -delete` deletes what matches a test; only an unfiltered delete (every
    // file under the start point) is catastrophic. `-type`, `-user`, `-perm` are not filters here:
    // `find ~ -type f -delete` still empties a home directory.
    const TESTS: &[&str] = &[
        "-name",
        "-iname",
        "-path",
        "-ipath",
        "-wholename",
        "-iwholename",
        "-regex",
        "-iregex",
        "-newer",
        "-mtime",
        "-mmin",
        "-atime",
        "-amin",
        "-ctime",
        "-cmin",
        "-size",
        "-empty",
        "-links",
        "-inum",
        "-samefile",
        "-lname",
        "-ilname",
    ];
    if args
        .iter()
        .any(|a| matches!(a, Word::Static(s) if TESTS.contains(&s.as_str())))
    {
        return None;
    }
    args.iter()
        .take_while(|a| !matches!(a, Word::Static(s) if s.starts_with('-') || s == "(" || s == "!"))
        .find(|t| is_critical_target(t, g))
        .map(|t| {
            (
                "rm-critical-path",
                format!("`find … -delete` over {}", describe(t, g)),
            )
        })
}

fn recursive_on_critical(
    prog: &str,
    args: &[Word],
    g: Guarded<'_>,
) -> Option<(&'static str, String)> {
    let recursive = args.iter().any(|a| {
        matches!(a, Word::Static(s) if s == "--recursive" || (s.starts_with('-') && !s.starts_with("--") && s.contains('R')))
    });
    if !recursive {
        return None;
    }
    args.iter()
        .filter(|a| !matches!(a, Word::Static(s) if s.starts_with('-')))
        .skip(1) // the mode / owner operand
        .find(|t| is_critical_target(t, g))
        .map(|t| {
            (
                "recursive-critical-path",
                format!("`{prog} -R` of {}", describe(t, g)),
            )
        })
}

fn dd(args: &[Word], g: Guarded<'_>) -> Option<(&'static str, String)> {
    args.iter().find_map(|a| match a {
        Word::Static(s) => s.strip_prefix("of=").and_then(|target| {
            let p = paths::resolve_str(target, g.base);
            is_block_device(&p).then(|| {
                (
                    "write-block-device",
                    format!("`dd of={target}` overwrites a disk"),
                )
            })
        }),
        Word::Dynamic(_) => None,
    })
}

/// `git push --force` (or `-f`, `--force-with-lease`, `+refspec`, `--mirror`, deleting a branch)
/// to main/master, or with no refspec (which may be main).
fn force_push(args: &[Word]) -> Option<(&'static str, String)> {
    // Skip git's global options to find the subcommand.
    let mut i = 0;
    while let Some(Word::Static(s)) = args.get(i) {
        if matches!(
            s.as_str(),
            "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace"
        ) {
            i += 2;
        } else if s.starts_with('-') {
            i += 1;
        } else {
            break;
        }
    }
    if !matches!(args.get(i), Some(Word::Static(s)) if s == "push") {
        return None;
    }
    let rest = &args[i + 1..];
    let mut force = false;
    let mut delete = false;
    let mut positional: Vec<&Word> = Vec::new();
    for a in rest {
        match a {
            Word::Static(s)
                if s == "--force" || s.starts_with("--force-with-lease") || s == "--mirror" =>
            {
                force = true
            }
            Word::Static(s) if s == "--delete" => delete = true,
            Word::Static(s) if s.starts_with("--") => {}
            Word::Static(s) if s.starts_with('-') => {
                force |= s.contains('f');
                delete |= s.contains('d');
            }
            other => positional.push(other),
        }
    }
    let refspecs = positional.get(1..).unwrap_or_default();
    let plus = refspecs
        .iter()
        .any(|r| matches!(r, Word::Static(s) if s.starts_with('+')));
    let colon_delete = refspecs
        .iter()
        .any(|r| matches!(r, Word::Static(s) if s.starts_with(':')));
    if !(force || plus || delete || colon_delete) {
        return None;
    }
    let names_main = refspecs.iter().any(|r| match r {
        Word::Static(s) => {
            let dst = s.rsplit(':').next().unwrap_or(s).trim_start_matches('+');
            let dst = dst.strip_prefix("refs/heads/").unwrap_or(dst);
            matches!(dst, "main" | "master")
        }
        Word::Dynamic(_) => true,
    });
    if refspecs.is_empty() || names_main {
        Some((
            "force-push-main",
            "force-pushes (or deletes) main/master, or the current branch which may be main".into(),
        ))
    } else {
        None
    }
}

/// `bash` / `python` reading its program from stdin (`curl … | bash`, `bash -s`, `bash -`) or from
/// a computed path such as a process substitution (`bash <(curl …)`).
fn reads_program_from_stdin_or_fd(prog: &str, args: &[Word]) -> bool {
    if prog == "busybox" {
        return false;
    }
    let mut it = args.iter();
    for a in it.by_ref() {
        match a {
            Word::Static(s) if s == "-" || s == "-s" => return true,
            Word::Static(s) if s == "-c" || s == "-e" || s == "-m" || s == "--command" => {
                return false
            }
            Word::Static(s) if s.starts_with('-') => {}
            Word::Static(_) => return false,
            Word::Dynamic(_) => return true,
        }
    }
    true
}

fn is_critical_target(word: &Word, g: Guarded<'_>) -> bool {
    if let Word::Dynamic(raw) = word {
        // `$DIR/`, `"$X"/*`, `${X}`: an unset variable turns these into `/` or `/*`.
        if let Some(after) = after_lone_var(raw) {
            if matches!(after, "" | "/" | "/*" | "/.*") {
                return true;
            }
        }
        if raw.starts_with('~') && !raw.starts_with("~/") {
            return true; // `~user`: someone's home directory
        }
    }
    let Some(p) = resolve(word, g) else {
        return false;
    };
    let p = p
        .strip_suffix("/*")
        .or_else(|| p.strip_suffix("/.*"))
        .map(str::to_owned)
        .unwrap_or(p);
    let p = if p.is_empty() { "/".to_owned() } else { p };
    p == "/"
        || SYSTEM_DIRS
            .iter()
            .any(|d| paths::is_within(&p, d) && p.matches('/').count() <= 2)
        || paths::is_within(g.base.home, &p)
        || paths::is_within(g.project_root, &p)
}

/// For `$X…` / `${X}…` / `"$X"…` returns the text after the variable reference.
fn after_lone_var(raw: &str) -> Option<&str> {
    let s = raw.strip_prefix('"').unwrap_or(raw);
    let s = s.strip_prefix('$')?;
    let rest = if let Some(inner) = s.strip_prefix('{') {
        &inner[inner.find('}')? + 1..]
    } else {
        s.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_')
    };
    Some(rest.strip_prefix('"').unwrap_or(rest))
}

fn resolve(word: &Word, g: Guarded<'_>) -> Option<String> {
    paths::resolve(word, g.base)
}

fn is_block_device(path: &str) -> bool {
    BLOCK_DEVICES.iter().any(|d| path.starts_with(d))
}

fn is_one_of(word: &Word, names: &[&str]) -> bool {
    matches!(word, Word::Static(s) if names.contains(&basename(s)))
}

fn basename(prog: &str) -> &str {
    prog.rsplit('/').next().unwrap_or(prog)
}

fn text(word: &Word) -> &str {
    match word {
        Word::Static(s) | Word::Dynamic(s) => s,
    }
}

fn describe(word: &Word, g: Guarded<'_>) -> String {
    match resolve(word, g) {
        Some(p) if p != text(word) => format!("`{}` ({p})", text(word)),
        _ => format!("`{}`", text(word)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::{analyze, Analysis, Limits};

    fn rule_of(command: &str) -> Option<&'static str> {
        let Analysis::Parsed(script) = analyze(command, &Limits::default()) else {
            panic!("{command} does not parse");
        };
        let g = Guarded {
            base: Base {
                home: "/home/agent",
                cwd: "/home/agent/proj",
            },
            project_root: "/home/agent/proj",
            own_paths: &[],
        };
        find(&script, g).map(|c| c.rule)
    }

    #[test]
    fn an_agent_cannot_run_the_operators_verbs() {
        for c in [
            "cmdgate approve 12",
            "cmdgate reject 12 --remember",
            "cmdgate approve 12 --note 'fine'",
            "/usr/local/bin/cmdgate approve 12",
            "cd /tmp && cmdgate approve 3",
            "sudo cmdgate breaker reset",
            "env X=1 cmdgate rules remember approve -- git push",
            "cmdgate rules disable 4",
            "cmdgate rules remove 4",
            "cmdgate apply 17-ab12-0",
            "cmdgate apply 17-ab12-0 --include-protected",
            "cmdgate undo 17-ab12-0",
            "cmdgate breaker reset --session s1",
            "cmdgate trust add --dev",
            "cmdgate tiermap sign CLAUDE_CMDS.md",
            "cmdgate hook install --project .",
            "cmdgate init --sign --force",
            "cmdgate up",
            "cmdgate $VERB 12",
            "cmdgated --config /tmp/c.toml",
            "bash -c 'cmdgate approve 1'",
        ] {
            assert_eq!(rule_of(c), Some("cmdgate-operator-action"), "{c}");
        }
        for c in [
            "cmdgate status",
            "cmdgate audit tail",
            "cmdgate pending --json",
            "cmdgate explain -- rm -rf target",
            "cmdgate rules list --json",
            "cmdgate rules show 3",
            "cmdgate breaker status",
            "cmdgate trust list",
            "cmdgate tiermap verify CLAUDE_CMDS.md",
            "cmdgate --version",
            "cmdgate",
        ] {
            assert_eq!(rule_of(c), None, "{c}");
        }
    }

    #[test]
    fn lone_var() {
        assert_eq!(after_lone_var("$DIR/"), Some("/"));
        assert_eq!(after_lone_var("${DIR}/*"), Some("/*"));
        assert_eq!(after_lone_var("\"$DIR\"/"), Some("/"));
        assert_eq!(after_lone_var("$DIR/build"), Some("/build"));
        assert_eq!(after_lone_var("x$DIR"), None);
    }
}
