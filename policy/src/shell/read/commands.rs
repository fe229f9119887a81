//! The enumerated read list: which commands read, which of their flags execute code or write, and
//! how much a dynamic argument may hide.

use super::{awk, sed};
use crate::shell::types::Word;

/// What a dynamic (run-time) argument may be for a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dyn {
    /// Anything: the command has no dangerous flags and does not open files (`echo`).
    Any,
    /// Globs (checked as every file they match) but no `$VAR`/`$(…)`: a plain file reader.
    Globs,
    /// Nothing dynamic: the command has flags that execute or write, and a glob can expand to a
    /// file named like one.
    Never,
}

/// Why a checked command is not a read.
pub(super) enum Refusal {
    /// This argument executes code or writes.
    Unsafe { argument: String, why: &'static str },
    /// This use of the command (a subcommand, a form) is not a read.
    NotRead { what: String },
}

type Check = fn(&str, &[Word]) -> Result<(), Refusal>;

/// How one read command is judged.
pub(super) struct Rule {
    pub(super) dynamic: Dyn,
    /// Flag/subcommand checks; `None` when the command has no dangerous use.
    pub(super) check: Option<Check>,
}

const fn r(dynamic: Dyn, check: Option<Check>) -> Option<Rule> {
    Some(Rule { dynamic, check })
}

/// The rule for a command name, or `None` when it is not on the read list.
pub(super) fn rule(name: &str) -> Option<Rule> {
    match name {
        // Output only, no files.
        "echo" | "true" | "false" | ":" | "basename" | "dirname" | "seq" | "expr" | "sleep"
        | "pwd" | "printenv" | "whoami" | "id" | "groups" | "uname" | "uptime" | "nproc"
        | "arch" | "tty" | "logname" | "users" | "who" | "locale" | "getconf" | "type"
        | "which" | "whereis" | "command" | "help" | "[[" | "free" | "lscpu" | "lsblk"
        | "lsmem" | "hostid" | "dnsdomainname" => r(Dyn::Any, None),
        "printf" => r(Dyn::Any, Some(printf)),
        "test" | "[" => r(Dyn::Any, Some(test)),
        // Plain file readers: no flag that executes or writes.
        "cat" | "tac" | "nl" | "head" | "tail" | "wc" | "ls" | "dir" | "vdir" | "stat" | "du"
        | "df" | "grep" | "egrep" | "fgrep" | "cut" | "tr" | "column" | "fold" | "fmt"
        | "paste" | "rev" | "comm" | "join" | "expand" | "unexpand" | "numfmt" | "tsort" | "od"
        | "hexdump" | "strings" | "base64" | "base32" | "basenc" | "md5sum" | "sha1sum"
        | "sha224sum" | "sha256sum" | "sha384sum" | "sha512sum" | "b2sum" | "cksum" | "sum"
        | "readlink" | "realpath" | "namei" | "lsattr" | "getfacl" | "diff" | "cmp" | "ps"
        | "pgrep" | "pidof" | "jq" | "look" | "wdiff" => r(Dyn::Globs, None),
        // Readers with a dangerous flag or form.
        "find" => r(Dyn::Never, Some(find)),
        "fd" | "fdfind" => r(Dyn::Never, Some(fd)),
        "rg" => r(Dyn::Never, Some(rg)),
        "ag" => r(Dyn::Never, Some(ag)),
        "sort" => r(Dyn::Never, Some(sort)),
        "tree" => r(Dyn::Never, Some(tree)),
        "date" => r(Dyn::Never, Some(date)),
        "hostname" => r(Dyn::Never, Some(hostname)),
        "sed" => r(Dyn::Never, Some(sed_check)),
        "awk" | "gawk" | "mawk" | "nawk" => r(Dyn::Never, Some(awk_check)),
        "git" => r(Dyn::Never, Some(git)),
        "yq" => r(Dyn::Never, Some(yq)),
        "less" | "more" => r(Dyn::Never, Some(pager)),
        "man" => r(Dyn::Never, Some(man)),
        "bat" | "batcat" => r(Dyn::Never, Some(bat)),
        "xxd" | "uniq" => r(Dyn::Never, Some(at_most_one_operand)),
        "shuf" => r(Dyn::Never, Some(shuf)),
        "file" => r(Dyn::Never, Some(file)),
        "env" => r(Dyn::Never, None),
        _ => None,
    }
}

/// A parsed command line: options (name without dashes, value) and operands, in order.
struct Scan {
    opts: Vec<(String, Option<String>)>,
    operands: Vec<String>,
}

/// How to read a command's options. Unknown options are accepted as flags (the commands scanned this
/// way list every dangerous option in `forbid_*`), and long options are matched by prefix, as
/// getopt accepts abbreviations (`--in` is `--in-place`).
struct Opts {
    /// Short options that take a value (attached or the next word).
    short_val: &'static str,
    /// Short options that take an optional attached value.
    short_opt: &'static str,
    /// Long options that take a value (`--x=v` or `--x v`).
    long_val: &'static [&'static str],
    forbid_short: &'static str,
    forbid_long: &'static [&'static str],
    why: &'static str,
}

fn statics(args: &[Word]) -> impl Iterator<Item = &str> {
    args.iter().map(Word::text)
}

fn scan(args: &[Word], o: &Opts) -> Result<Scan, Refusal> {
    let mut out = Scan {
        opts: Vec::new(),
        operands: Vec::new(),
    };
    let mut it = statics(args);
    let unsafe_ = |a: &str| Refusal::Unsafe {
        argument: a.to_owned(),
        why: o.why,
    };
    while let Some(a) = it.next() {
        if a == "--" {
            out.operands.extend(it.by_ref().map(str::to_owned));
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (long, None),
            };
            if !name.is_empty() && o.forbid_long.iter().any(|f| f.starts_with(name)) {
                return Err(unsafe_(a));
            }
            let value = if value.is_none() && o.long_val.contains(&name) {
                it.next().map(str::to_owned)
            } else {
                value
            };
            out.opts.push((name.to_owned(), value));
            continue;
        }
        if a.len() > 1 && a.starts_with('-') {
            let chars: Vec<char> = a[1..].chars().collect();
            for (k, c) in chars.iter().enumerate() {
                if o.forbid_short.contains(*c) {
                    return Err(unsafe_(a));
                }
                if o.short_val.contains(*c) {
                    let rest: String = chars[k + 1..].iter().collect();
                    let value = if rest.is_empty() {
                        it.next().map(str::to_owned)
                    } else {
                        Some(rest)
                    };
                    out.opts.push((c.to_string(), value));
                    break;
                }
                if o.short_opt.contains(*c) {
                    let rest: String = chars[k + 1..].iter().collect();
                    out.opts
                        .push((c.to_string(), (!rest.is_empty()).then_some(rest)));
                    break;
                }
                out.opts.push((c.to_string(), None));
            }
            continue;
        }
        out.operands.push(a.to_owned());
    }
    Ok(out)
}

const fn opts(
    short_val: &'static str,
    forbid_short: &'static str,
    forbid_long: &'static [&'static str],
    why: &'static str,
) -> Opts {
    Opts {
        short_val,
        short_opt: "",
        long_val: &[],
        forbid_short,
        forbid_long,
        why,
    }
}

fn printf(_: &str, args: &[Word]) -> Result<(), Refusal> {
    match args.first() {
        Some(Word::Static(s)) if s == "-v" => Err(Refusal::Unsafe {
            argument: s.clone(),
            why: "assigns a shell variable",
        }),
        Some(Word::Dynamic(s)) => Err(Refusal::Unsafe {
            argument: s.clone(),
            why: "could expand to -v, which assigns a shell variable",
        }),
        _ => Ok(()),
    }
}

fn test(_: &str, args: &[Word]) -> Result<(), Refusal> {
    for w in args.windows(2) {
        if w[0].as_static() == Some("-v") && (w[1].is_dynamic() || w[1].text().contains('[')) {
            return Err(Refusal::Unsafe {
                argument: format!("-v {}", w[1].text()),
                why: "evaluates an array subscript, which can run commands",
            });
        }
    }
    Ok(())
}

fn find(_: &str, args: &[Word]) -> Result<(), Refusal> {
    const BAD: &[&str] = &[
        "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls",
    ];
    for a in statics(args) {
        if BAD.contains(&a) {
            let why = if a.starts_with("-f") {
                "writes to a file"
            } else if a == "-delete" {
                "deletes files"
            } else {
                "runs a command"
            };
            return Err(Refusal::Unsafe {
                argument: a.to_owned(),
                why,
            });
        }
    }
    Ok(())
}

fn fd(_: &str, args: &[Word]) -> Result<(), Refusal> {
    scan(
        args,
        &opts(
            "dteESjcoC",
            "xX",
            &["exec", "exec-batch"],
            "runs a command for each match",
        ),
    )
    .map(|_| ())
}

fn rg(_: &str, args: &[Word]) -> Result<(), Refusal> {
    scan(
        args,
        &opts(
            "ABCEMTdefgjmrt",
            "",
            &["pre", "pre-glob", "hostname-bin"],
            "runs a program on the files searched",
        ),
    )
    .map(|_| ())
}

fn ag(_: &str, args: &[Word]) -> Result<(), Refusal> {
    scan(
        args,
        &opts("ABCGgmnp", "", &["pager"], "runs a pager program"),
    )
    .map(|_| ())
}

fn sort(_: &str, args: &[Word]) -> Result<(), Refusal> {
    scan(
        args,
        &opts(
            "kStT",
            "o",
            &["output", "compress-program"],
            "writes a file or runs a program",
        ),
    )
    .map(|_| ())
}

fn tree(_: &str, args: &[Word]) -> Result<(), Refusal> {
    scan(args, &opts("LPIHT", "oR", &["output"], "writes files")).map(|_| ())
}

fn date(_: &str, args: &[Word]) -> Result<(), Refusal> {
    scan(
        args,
        &Opts {
            short_val: "dfr",
            short_opt: "I",
            long_val: &["date", "file", "reference"],
            forbid_short: "s",
            forbid_long: &["set"],
            why: "sets the system clock",
        },
    )
    .map(|_| ())
}

fn hostname(_: &str, args: &[Word]) -> Result<(), Refusal> {
    let s = scan(
        args,
        &opts("", "Fb", &["file", "boot"], "sets the host name"),
    )?;
    if let Some(name) = s.operands.first() {
        return Err(Refusal::Unsafe {
            argument: name.clone(),
            why: "sets the host name",
        });
    }
    Ok(())
}

fn sed_check(_: &str, args: &[Word]) -> Result<(), Refusal> {
    let s = scan(
        args,
        &Opts {
            short_val: "efl",
            short_opt: "",
            long_val: &["expression", "file", "line-length"],
            forbid_short: "i",
            forbid_long: &["in-place"],
            why: "edits files in place",
        },
    )?;
    let mut scripts: Vec<String> = Vec::new();
    for (name, value) in &s.opts {
        match name.as_str() {
            "e" | "expression" => scripts.push(value.clone().unwrap_or_default()),
            "f" | "file" => {
                return Err(Refusal::Unsafe {
                    argument: format!("-f {}", value.clone().unwrap_or_default()),
                    why: "takes its script from a file that cannot be checked",
                })
            }
            _ => {}
        }
    }
    if scripts.is_empty() {
        match s.operands.first() {
            Some(script) => scripts.push(script.clone()),
            None => return Ok(()),
        }
    }
    for script in &scripts {
        if let Err(why) = sed::check(script) {
            return Err(Refusal::Unsafe {
                argument: script.clone(),
                why,
            });
        }
    }
    Ok(())
}

fn awk_check(_: &str, args: &[Word]) -> Result<(), Refusal> {
    let mut program: Option<String> = None;
    let mut it = statics(args).peekable();
    let allowed_flags = "bcMnNOPrsStV";
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == "-F" || a == "-v" {
            it.next();
            continue;
        }
        if a.starts_with("-F") || a.starts_with("-v") {
            continue;
        }
        if a.starts_with("--field-separator") || a.starts_with("--assign") {
            if !a.contains('=') {
                it.next();
            }
            continue;
        }
        if let Some(p) = a.strip_prefix("--source=") {
            program = Some(p.to_owned());
            continue;
        }
        if a == "-e" || a == "--source" {
            program = it.next().map(str::to_owned);
            continue;
        }
        if matches!(
            a,
            "--posix"
                | "--sandbox"
                | "--characters-as-bytes"
                | "--traditional"
                | "--re-interval"
                | "--bignum"
                | "--use-lc-numeric"
                | "--optimize"
                | "--no-optimize"
                | "--non-decimal-data"
        ) {
            continue;
        }
        if a.len() > 1
            && a.starts_with('-')
            && !a.starts_with("--")
            && a[1..].chars().all(|c| allowed_flags.contains(c))
        {
            continue;
        }
        if a.starts_with('-') && a.len() > 1 {
            return Err(Refusal::Unsafe {
                argument: a.to_owned(),
                why: "loads program files or extensions, or writes dumps or profiles",
            });
        }
        if program.is_none() {
            program = Some(a.to_owned());
        }
        break;
    }
    match program {
        Some(p) => awk::check(&p).map_err(|why| Refusal::Unsafe {
            argument: p.clone(),
            why,
        }),
        None => Ok(()),
    }
}

fn yq(_: &str, args: &[Word]) -> Result<(), Refusal> {
    scan(
        args,
        &opts("", "i", &["inplace", "in-place"], "edits files in place"),
    )
    .map(|_| ())
}

fn pager(_: &str, args: &[Word]) -> Result<(), Refusal> {
    for a in statics(args) {
        if a.starts_with('+') {
            return Err(Refusal::Unsafe {
                argument: a.to_owned(),
                why: "runs pager commands (which include shell escapes)",
            });
        }
    }
    scan(
        args,
        &opts(
            "bhjxyzPpTt",
            "oOk",
            &[
                "log-file",
                "LOG-FILE",
                "lesskey-file",
                "lesskey-src",
                "lesskey-content",
            ],
            "writes a log file or loads key bindings",
        ),
    )
    .map(|_| ())
}

fn man(_: &str, args: &[Word]) -> Result<(), Refusal> {
    for a in statics(args) {
        let ok = if a.starts_with('-') {
            matches!(
                a,
                "-k" | "-f"
                    | "-a"
                    | "-w"
                    | "-W"
                    | "--apropos"
                    | "--whatis"
                    | "--all"
                    | "--where"
                    | "--path"
            )
        } else {
            !a.contains('/')
        };
        if !ok {
            return Err(Refusal::Unsafe {
                argument: a.to_owned(),
                why: "can run a pager, browser or formatter of its choosing",
            });
        }
    }
    Ok(())
}

fn bat(_: &str, args: &[Word]) -> Result<(), Refusal> {
    scan(
        args,
        &opts(
            "lmHrdL",
            "",
            &["pager", "config-file"],
            "runs a pager program",
        ),
    )
    .map(|_| ())
}

fn at_most_one_operand(name: &str, args: &[Word]) -> Result<(), Refusal> {
    let s = scan(args, &opts("cglsfnw", "", &[], ""))?;
    if s.operands.len() > 1 {
        return Err(Refusal::Unsafe {
            argument: s.operands[1].clone(),
            why: if name == "uniq" {
                "is an output file uniq writes"
            } else {
                "is an output file xxd writes"
            },
        });
    }
    Ok(())
}

fn shuf(_: &str, args: &[Word]) -> Result<(), Refusal> {
    scan(args, &opts("inr", "o", &["output"], "writes a file")).map(|_| ())
}

fn file(_: &str, args: &[Word]) -> Result<(), Refusal> {
    scan(
        args,
        &opts("mfFeP", "C", &["compile"], "writes a compiled magic file"),
    )
    .map(|_| ())
}

/// Global options that keep git read-only, and those that take a value.
fn git(_: &str, args: &[Word]) -> Result<(), Refusal> {
    let unsafe_ = |a: &str, why: &'static str| {
        Err(Refusal::Unsafe {
            argument: a.to_owned(),
            why,
        })
    };
    let words: Vec<&str> = statics(args).collect();
    let mut i = 0;
    while i < words.len() {
        let a = words[i];
        match a {
            "-C" | "--namespace" => i += 2,
            "--no-pager"
            | "-P"
            | "--bare"
            | "--no-replace-objects"
            | "--literal-pathspecs"
            | "--glob-pathspecs"
            | "--noglob-pathspecs"
            | "--icase-pathspecs"
            | "--no-optional-locks"
            | "--no-advice"
            | "--version"
            | "--html-path"
            | "--man-path"
            | "--info-path" => i += 1,
            _ if a.starts_with("--namespace=") => i += 1,
            "-c" | "--config-env" => {
                return unsafe_(a, "sets configuration, which can run programs")
            }
            "-p" | "--paginate" => return unsafe_(a, "forces a pager program"),
            _ if a.starts_with("--config-env") => {
                return unsafe_(a, "sets configuration, which can run programs")
            }
            _ if a.starts_with("--exec-path") => {
                return unsafe_(a, "runs git programs from another directory")
            }
            _ if a.starts_with("--git-dir") || a.starts_with("--work-tree") => {
                return unsafe_(
                    a,
                    "points git at a repository whose configuration is not vetted",
                )
            }
            _ if a.starts_with('-') => {
                return unsafe_(a, "is a git option that is not known to be read-only")
            }
            _ => break,
        }
    }
    let Some(&sub) = words.get(i) else {
        return Ok(());
    };
    let rest = &words[i + 1..];
    let not_read = || {
        Err(Refusal::NotRead {
            what: sub.to_owned(),
        })
    };
    // Options that write or run programs in any read subcommand (matched by prefix: git accepts
    // abbreviated long options).
    const FORBID_LONG: &[&str] = &[
        "output",
        "ext-diff",
        "open-files-in-pager",
        "exec",
        "upload-pack",
        "receive-pack",
    ];
    for a in rest {
        if let Some(long) = a.strip_prefix("--") {
            let name = long.split('=').next().unwrap_or(long);
            if name.len() >= 2 && FORBID_LONG.iter().any(|f| f.starts_with(name)) {
                return unsafe_(a, "writes a file or runs a program");
            }
        }
        if sub == "grep" && a.starts_with('-') && !a.starts_with("--") && a.contains('O') {
            return unsafe_(a, "opens the matches in a pager program");
        }
    }
    let first = rest.first().copied();
    match sub {
        "status" | "log" | "show" | "diff" | "shortlog" | "whatchanged" | "diff-tree"
        | "diff-files" | "diff-index" | "range-diff" | "cherry" | "blame" | "annotate"
        | "ls-files" | "ls-tree" | "cat-file" | "rev-parse" | "rev-list" | "describe"
        | "name-rev" | "merge-base" | "show-ref" | "for-each-ref" | "count-objects" | "grep"
        | "var" | "check-ignore" | "check-attr" | "check-mailmap" | "show-branch" | "version"
        | "get-tar-commit-id" | "verify-pack" => Ok(()),
        "reflog" => match first {
            Some("expire" | "delete" | "drop") => not_read(),
            _ => Ok(()),
        },
        "stash" => match first {
            Some("list" | "show") => Ok(()),
            _ => not_read(),
        },
        "worktree" => match first {
            Some("list") => Ok(()),
            _ => not_read(),
        },
        "remote" => match first {
            None | Some("-v" | "--verbose") if rest.len() <= 1 => Ok(()),
            Some("get-url") => Ok(()),
            _ => not_read(),
        },
        "config" => {
            let getter = rest.iter().any(|a| {
                matches!(
                    *a,
                    "--get"
                        | "--get-all"
                        | "--get-regexp"
                        | "--get-urlmatch"
                        | "-l"
                        | "--list"
                        | "--get-color"
                        | "--get-colorbool"
                )
            }) || matches!(first, Some("get" | "list"));
            let setter = rest.iter().any(|a| {
                matches!(
                    *a,
                    "--add"
                        | "--replace-all"
                        | "--unset"
                        | "--unset-all"
                        | "--rename-section"
                        | "--remove-section"
                        | "-e"
                        | "--edit"
                ) || a.starts_with("--edit")
            }) || matches!(
                first,
                Some("set" | "unset" | "rename-section" | "remove-section" | "edit")
            );
            if getter && !setter {
                Ok(())
            } else {
                not_read()
            }
        }
        "branch" => {
            let mut listing = false;
            let mut operands = 0;
            let mut k = 0;
            while k < rest.len() {
                let a = rest[k];
                match a {
                    "--list" | "-l" => listing = true,
                    "--contains" | "--no-contains" | "--merged" | "--no-merged" | "--points-at"
                    | "--sort" | "--format" => {
                        k += 1;
                    }
                    "--all" | "--remotes" | "--verbose" | "--quiet" | "--show-current"
                    | "--ignore-case" | "--no-color" | "--no-column" | "--omit-empty"
                    | "--no-abbrev" => {}
                    _ if a.starts_with("--color")
                        || a.starts_with("--column")
                        || a.starts_with("--abbrev")
                        || a.starts_with("--sort=")
                        || a.starts_with("--format=")
                        || a.starts_with("--contains=")
                        || a.starts_with("--merged=")
                        || a.starts_with("--no-merged=")
                        || a.starts_with("--points-at=") => {}
                    _ if a.starts_with('-')
                        && !a.starts_with("--")
                        && a[1..].chars().all(|c| "arlvqi".contains(c)) =>
                    {
                        if a.contains('l') {
                            listing = true;
                        }
                    }
                    _ if a.starts_with('-') => {
                        return unsafe_(a, "creates, deletes, renames or reconfigures branches")
                    }
                    _ => operands += 1,
                }
                k += 1;
            }
            if operands > 0 && !listing {
                return unsafe_(rest.last().copied().unwrap_or(""), "creates a branch");
            }
            Ok(())
        }
        "tag" => {
            let mut listing = rest.is_empty();
            let mut operands = 0;
            let mut k = 0;
            while k < rest.len() {
                let a = rest[k];
                match a {
                    "-l" | "--list" => listing = true,
                    "--contains" | "--no-contains" | "--merged" | "--no-merged" | "--points-at"
                    | "--sort" | "--format" => k += 1,
                    "-i" | "--ignore-case" | "--no-column" | "--no-color" => {}
                    _ if a.starts_with("-n")
                        || a.starts_with("--sort=")
                        || a.starts_with("--format=")
                        || a.starts_with("--column")
                        || a.starts_with("--color")
                        || a.starts_with("--contains=")
                        || a.starts_with("--points-at=") => {}
                    _ if a.starts_with('-') => {
                        return unsafe_(a, "creates, deletes, signs or verifies tags")
                    }
                    _ => operands += 1,
                }
                k += 1;
            }
            if operands > 0 && !listing {
                return unsafe_(rest.last().copied().unwrap_or(""), "creates a tag");
            }
            Ok(())
        }
        _ => not_read(),
    }
}

/// A recursive content search: the places a command reads every file under, and what limits it.
/// Built by [`search`] for the recursive readers on the read list; judged in `recursive.rs`.
pub(super) struct Search<'w> {
    /// Operands that may be places searched (the pattern too, when it cannot be told apart: an
    /// extra root only makes the answer stricter).
    pub(super) roots: Vec<&'w Word>,
    /// Places given as option values (`diff --from-file=DIR`).
    pub(super) more_roots: Vec<Word>,
    /// The working directory is searched too (no operand names a place).
    pub(super) cwd: bool,
    /// Include globs: when not empty, only files whose names match one of them are read.
    pub(super) only: Vec<String>,
    /// Symbolic links met inside the tree are followed (`grep -R`, `rg -L`, `diff -r`).
    pub(super) follows: bool,
}

/// Options and operands of a search command, as words: the roots must stay words (a glob root is
/// every directory it could match).
struct Words<'w> {
    opts: Vec<(String, Option<String>)>,
    operands: Vec<&'w Word>,
}

/// Splits `args` into options and operands. `short_val` and `long_val` must list only options that
/// *require* a value: a wrong entry would swallow a root, a missing one only adds a root.
fn words<'w>(args: &'w [Word], short_val: &str, long_val: &[&str]) -> Words<'w> {
    let mut out = Words {
        opts: Vec::new(),
        operands: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(w) = it.next() {
        let Word::Static(a) = w else {
            out.operands.push(w);
            continue;
        };
        if a == "--" {
            out.operands.extend(it.by_ref());
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (long, None),
            };
            let value = if value.is_none() && long_val.contains(&name) {
                it.next().map(|v| v.text().to_owned())
            } else {
                value
            };
            out.opts.push((name.to_owned(), value));
            continue;
        }
        if a.len() > 1 && a.starts_with('-') {
            let chars: Vec<char> = a[1..].chars().collect();
            for (k, c) in chars.iter().enumerate() {
                if short_val.contains(*c) {
                    let rest: String = chars[k + 1..].iter().collect();
                    let value = if rest.is_empty() {
                        it.next().map(|v| v.text().to_owned())
                    } else {
                        Some(rest)
                    };
                    out.opts.push((c.to_string(), value));
                    break;
                }
                out.opts.push((c.to_string(), None));
            }
            continue;
        }
        out.operands.push(w);
    }
    out
}

impl Words<'_> {
    fn has(&self, names: &[&str]) -> bool {
        self.opts.iter().any(|(n, _)| names.contains(&n.as_str()))
    }
    /// A long option given by a prefix of `full` (getopt accepts unambiguous abbreviations).
    fn has_long(&self, full: &str, min: usize) -> bool {
        self.opts
            .iter()
            .any(|(n, _)| n.len() >= min && n.len() > 1 && full.starts_with(n.as_str()))
    }
    fn values<'a>(&'a self, names: &'a [&'a str]) -> impl Iterator<Item = &'a str> + 'a {
        self.opts
            .iter()
            .filter(move |(n, _)| names.contains(&n.as_str()))
            .filter_map(|(_, v)| v.as_deref())
    }
}

/// Is this command (already known to be on the read list) a recursive content search, and of what?
/// Names-only listings (`ls -R`, `find`, `tree`, `du`, `fd`, `rg --files`) are not: they show names,
/// not contents. `git grep` searches tracked files only (already readable through `git log -p`)
/// unless `--no-index` or `--untracked` makes it search the working directory's files.
pub(super) fn search<'w>(name: &str, args: &'w [Word]) -> Option<Search<'w>> {
    match name {
        "grep" | "egrep" | "fgrep" => {
            let w = words(
                args,
                "efmABCdD",
                &[
                    "regexp",
                    "file",
                    "max-count",
                    "after-context",
                    "before-context",
                    "context",
                    "directories",
                    "devices",
                    "include",
                    "exclude",
                    "exclude-dir",
                    "exclude-from",
                    "label",
                    "binary-files",
                    "group-separator",
                ],
            );
            // `-d recurse` / `--directories=recurse`, however spelled, recurses too.
            let recurse_value = args.iter().any(|a| {
                let t = a.text();
                t == "recurse" || t.ends_with("=recurse") || t == "-drecurse"
            });
            let follows = w.has(&["R"]) || w.has_long("dereference-recursive", 3);
            let recursive = follows || recurse_value || w.has(&["r"]) || w.has_long("recursive", 3);
            if !recursive {
                return None;
            }
            let pattern_given = w.has(&["e", "f", "regexp", "file"]);
            let only = w
                .opts
                .iter()
                .filter(|(n, _)| n.len() >= 3 && "include".starts_with(n.as_str()))
                .filter_map(|(_, v)| v.clone())
                .collect();
            Some(Search {
                cwd: w.operands.is_empty() || (w.operands.len() == 1 && !pattern_given),
                roots: w.operands,
                more_roots: Vec::new(),
                only,
                follows,
            })
        }
        "rg" => {
            let w = words(
                args,
                "ABCEMTdefgjmrt",
                &[
                    "glob",
                    "iglob",
                    "regexp",
                    "file",
                    "type",
                    "type-not",
                    "type-add",
                    "type-clear",
                    "max-depth",
                    "max-count",
                    "context",
                    "after-context",
                    "before-context",
                    "replace",
                    "encoding",
                    "max-columns",
                    "threads",
                    "sort",
                    "sortr",
                    "color",
                    "colors",
                ],
            );
            // Names only, or no search at all.
            if w.has(&["files", "type-list", "h", "help", "V", "version"]) {
                return None;
            }
            let pattern_given = w.has(&["e", "f", "regexp", "file"]);
            let only = w
                .values(&["g", "glob", "iglob"])
                .filter(|g| !g.starts_with('!'))
                .map(str::to_owned)
                .collect();
            let follows = w.has(&["L", "follow"]);
            Some(Search {
                cwd: w.operands.is_empty() || (w.operands.len() == 1 && !pattern_given),
                roots: w.operands,
                more_roots: Vec::new(),
                only,
                follows,
            })
        }
        "ag" => {
            // Recursive by default; its file filter (`-G`) is a regular expression, not counted.
            let w = words(
                args,
                "ABCGgmp",
                &["file-search-regex", "max-count", "path-to-ignore"],
            );
            let follows = w.has(&["f", "follow"]);
            Some(Search {
                cwd: w.operands.len() <= 1,
                roots: w.operands,
                more_roots: Vec::new(),
                only: Vec::new(),
                follows,
            })
        }
        "diff" => {
            let recursive = args.iter().any(|a| match a.as_static() {
                Some(t) if t.starts_with("--") => {
                    let n = t[2..].split('=').next().unwrap_or("");
                    n.len() >= 3 && "recursive".starts_with(n)
                }
                Some(t) => t.starts_with('-') && t[1..].contains('r'),
                None => false,
            });
            if !recursive {
                return None;
            }
            // Every word that is not an option may be a place (option values too: stricter).
            let roots: Vec<&Word> = args.iter().filter(|a| !a.text().starts_with('-')).collect();
            let more_roots: Vec<Word> = args
                .iter()
                .filter_map(|a| {
                    let t = a.text();
                    let v = t.split_once('=')?.1.to_owned();
                    (t.starts_with("--from") || t.starts_with("--to")).then_some(match a {
                        Word::Static(_) => Word::Static(v),
                        Word::Dynamic(_) => Word::Dynamic(v),
                    })
                })
                .collect();
            Some(Search {
                cwd: roots.is_empty() && more_roots.is_empty(),
                roots,
                more_roots,
                only: Vec::new(),
                // diff follows symbolic links unless told not to.
                follows: !args.iter().any(|a| a.text().starts_with("--no-der")),
            })
        }
        "git" => {
            let grep = args.iter().any(|a| a.as_static() == Some("grep"));
            let worktree = args.iter().any(|a| {
                let t = a.text();
                t.starts_with("--no-in") || t.starts_with("--un")
            });
            (grep && worktree).then(|| Search {
                roots: Vec::new(),
                more_roots: Vec::new(),
                cwd: true,
                only: Vec::new(),
                follows: false,
            })
        }
        _ => None,
    }
}
