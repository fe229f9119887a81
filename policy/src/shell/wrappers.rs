//! Wrappers and re-entry: `sudo -u x -- rm y` runs `rm`, `bash -c 'rm y'` runs `rm`, `eval rm y`
//! runs `rm`. Each wrapper's own options are parsed so its option values are not mistaken for the
//! command; an option we do not know makes the wrapped command unknown (a dynamic `argv[0]`), so a
//! command is never lost and never guessed.

use super::analyze::{Frame, Walker};
use super::types::{Assignment, Context, RedirectKind, SimpleCommand, Unanalyzable, Word};

/// What a wrapper invocation runs.
enum Unwrap {
    /// Not a wrapper here (or one used without a command: `env`, `command -v ls`, `sudo -l`).
    NotWrapper,
    /// `argv[..n]` is the wrapper; `argv[n..]` is the command.
    Command {
        n: usize,
        env: Vec<Assignment>,
        input: Input,
    },
    /// `argv[..n]` is the wrapper; it runs the shell code in `script`.
    Script { n: usize, script: Word },
    /// The wrapper reads shell code from its standard input (`bash`, `sh -s`).
    Stdin,
    /// `argv[..n]` is the wrapper and we could not tell where its command starts.
    Unknown { n: usize },
}

/// Arguments a wrapper adds to the command it runs.
enum Input {
    None,
    /// `xargs`: appends words read from standard input.
    Appended,
    /// `xargs -I R`: replaces `R` inside the given arguments.
    Replace(String),
}

/// How one wrapper's options look. Short options are single letters; `short_val` ones take a
/// value (attached or the next word), `short_opt` ones take an optional attached value.
struct Spec {
    short_flag: &'static str,
    short_val: &'static str,
    short_opt: &'static str,
    long_flag: &'static [&'static str],
    long_val: &'static [&'static str],
    /// Long options whose value is optional and only given with `=`.
    long_opt: &'static [&'static str],
}

const NO_LONG: &[&str] = &[];

/// The result of parsing a wrapper's options.
struct Parsed {
    /// Index of the first word after the options.
    next: usize,
    /// Every option seen, as (name, value): short names are one letter, long names without `--`.
    opts: Vec<(String, Option<Word>)>,
}

impl Parsed {
    fn has(&self, name: &str) -> bool {
        self.opts.iter().any(|(n, _)| n == name)
    }
    fn value(&self, name: &str) -> Option<&Word> {
        self.opts
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_ref())
    }
}

/// Parse options from `argv[start..]` in getopt style, stopping at the first operand or `--`.
/// `Err(i)` when `argv[i]` is an option we do not know (or a dynamic word where an option could be).
fn parse_opts(argv: &[Word], start: usize, spec: &Spec) -> Result<Parsed, usize> {
    let mut opts = Vec::new();
    let mut i = start;
    while i < argv.len() {
        let s = match &argv[i] {
            Word::Static(s) => s.as_str(),
            Word::Dynamic(_) => return Err(i),
        };
        if s == "--" {
            return Ok(Parsed { next: i + 1, opts });
        }
        if s == "-" || !s.starts_with('-') {
            break;
        }
        if let Some(long) = s.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(Word::Static(v.to_owned()))),
                None => (long, None),
            };
            if spec.long_val.contains(&name) {
                let value = match value {
                    Some(v) => v,
                    None => {
                        i += 1;
                        match argv.get(i) {
                            Some(v) => v.clone(),
                            None => return Err(i - 1),
                        }
                    }
                };
                opts.push((name.to_owned(), Some(value)));
            } else if spec.long_flag.contains(&name) && value.is_none()
                || spec.long_opt.contains(&name)
            {
                opts.push((name.to_owned(), value));
            } else {
                return Err(i);
            }
            i += 1;
            continue;
        }
        let cluster: Vec<char> = s[1..].chars().collect();
        let mut j = 0;
        while j < cluster.len() {
            let c = cluster[j];
            if spec.short_val.contains(c) {
                let rest: String = cluster[j + 1..].iter().collect();
                let value = if rest.is_empty() {
                    i += 1;
                    match argv.get(i) {
                        Some(v) => v.clone(),
                        None => return Err(i - 1),
                    }
                } else {
                    Word::Static(rest)
                };
                opts.push((c.to_string(), Some(value)));
                break;
            } else if spec.short_opt.contains(c) {
                let rest: String = cluster[j + 1..].iter().collect();
                opts.push((
                    c.to_string(),
                    (!rest.is_empty()).then_some(Word::Static(rest)),
                ));
                break;
            } else if spec.short_flag.contains(c) {
                opts.push((c.to_string(), None));
                j += 1;
            } else {
                return Err(i);
            }
        }
        i += 1;
    }
    Ok(Parsed { next: i, opts })
}

/// The name a static command word invokes, without its directory (`/usr/bin/sudo` → `sudo`).
pub fn command_name(w: &Word) -> Option<&str> {
    match w {
        Word::Static(s) => Some(s.rsplit('/').next().unwrap_or(s)),
        Word::Dynamic(_) => None,
    }
}

/// Shells whose `-c` string we re-enter with the bash grammar.
const SHELLS: &[&str] = &[
    "bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "rbash", "yash", "posh", "lksh", "oksh",
];
/// Shells with a grammar we do not parse: their code is unknown.
const FOREIGN_SHELLS: &[&str] = &[
    "fish", "csh", "tcsh", "nu", "elvish", "xonsh", "pwsh", "rc", "es",
];

fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Decide what `argv` (whose `argv[0]` is the static name `name`) runs.
fn unwrap(name: &str, argv: &[Word]) -> Unwrap {
    let opts = |spec: &Spec| parse_opts(argv, 1, spec);
    let command_at = |r: Result<Parsed, usize>| match r {
        Ok(p) if p.next < argv.len() => Unwrap::Command {
            n: p.next,
            env: Vec::new(),
            input: Input::None,
        },
        Ok(_) => Unwrap::NotWrapper,
        Err(i) => Unwrap::Unknown { n: i },
    };
    match name {
        "sudo" => {
            let r = opts(&Spec {
                short_flag: "AbEHiKklnPSsVvBeN",
                short_val: "ugpCDhrtTUcR",
                short_opt: "",
                long_flag: &[
                    "askpass",
                    "background",
                    "bell",
                    "edit",
                    "set-home",
                    "login",
                    "remove-timestamp",
                    "reset-timestamp",
                    "list",
                    "non-interactive",
                    "preserve-groups",
                    "stdin",
                    "shell",
                    "version",
                    "validate",
                    "help",
                ],
                long_val: &[
                    "user",
                    "group",
                    "prompt",
                    "close-from",
                    "chdir",
                    "host",
                    "role",
                    "type",
                    "command-timeout",
                    "other-user",
                    "login-class",
                    "chroot",
                ],
                long_opt: &["preserve-env"],
            });
            if let Ok(p) = &r {
                // `sudo -e` edits files, `-l`/`-v`/`-k`/`-V` do not run the operand as a command.
                if [
                    "e", "edit", "l", "list", "v", "validate", "V", "version", "K", "h", "help",
                ]
                .iter()
                .any(|o| p.has(o))
                {
                    return Unwrap::NotWrapper;
                }
            }
            command_at(r)
        }
        "doas" => command_at(opts(&Spec {
            short_flag: "nsL",
            short_val: "uC",
            short_opt: "",
            long_flag: NO_LONG,
            long_val: NO_LONG,
            long_opt: NO_LONG,
        })),
        "env" => {
            let r = opts(&Spec {
                short_flag: "i0v",
                short_val: "uCSP",
                short_opt: "",
                long_flag: &[
                    "ignore-environment",
                    "null",
                    "debug",
                    "list-signal-handling",
                    "help",
                    "version",
                ],
                long_val: &["unset", "chdir", "split-string"],
                long_opt: &["block-signal", "default-signal", "ignore-signal"],
            });
            let p = match r {
                Ok(p) => p,
                Err(i) => return Unwrap::Unknown { n: i },
            };
            let mut i = p.next;
            // A lone `-` means `-i`.
            if matches!(argv.get(i), Some(Word::Static(s)) if s == "-") {
                i += 1;
            }
            let mut env = Vec::new();
            while let Some(Word::Static(s)) = argv.get(i) {
                match s.split_once('=') {
                    Some((n, v)) if is_env_name(n) => {
                        env.push(Assignment {
                            name: n.to_owned(),
                            value: Word::Static(v.to_owned()),
                        });
                        i += 1;
                    }
                    _ => break,
                }
            }
            if let Some(Word::Dynamic(s)) = argv.get(i) {
                if s.contains('=') {
                    // Could be an assignment or the command: we cannot tell.
                    return Unwrap::Unknown { n: i };
                }
            }
            if let Some(split) = p.value("S").or_else(|| p.value("split-string")) {
                // `env -S 'cmd args'` splits the string into a command line.
                let script = match split {
                    Word::Static(s) => {
                        let mut text = s.clone();
                        for w in &argv[i..] {
                            match w {
                                Word::Static(a) => {
                                    text.push(' ');
                                    text.push_str(&quote(a));
                                }
                                Word::Dynamic(d) => {
                                    return Unwrap::Script {
                                        n: i,
                                        script: Word::Dynamic(d.clone()),
                                    }
                                }
                            }
                        }
                        Word::Static(text)
                    }
                    d @ Word::Dynamic(_) => d.clone(),
                };
                return Unwrap::Script {
                    n: argv.len(),
                    script,
                };
            }
            if i < argv.len() {
                Unwrap::Command {
                    n: i,
                    env,
                    input: Input::None,
                }
            } else {
                Unwrap::NotWrapper
            }
        }
        "command" => {
            let r = opts(&Spec {
                short_flag: "pvV",
                short_val: "",
                short_opt: "",
                long_flag: NO_LONG,
                long_val: NO_LONG,
                long_opt: NO_LONG,
            });
            if matches!(&r, Ok(p) if p.has("v") || p.has("V")) {
                return Unwrap::NotWrapper;
            }
            command_at(r)
        }
        "builtin" | "nohup" | "unbuffer" => {
            let r = if name == "unbuffer" {
                opts(&Spec {
                    short_flag: "p",
                    short_val: "",
                    short_opt: "",
                    long_flag: NO_LONG,
                    long_val: NO_LONG,
                    long_opt: NO_LONG,
                })
            } else if name == "nohup" {
                opts(&Spec {
                    short_flag: "",
                    short_val: "",
                    short_opt: "",
                    long_flag: &["help", "version"],
                    long_val: NO_LONG,
                    long_opt: NO_LONG,
                })
            } else {
                Ok(Parsed {
                    next: 1,
                    opts: Vec::new(),
                })
            };
            command_at(r)
        }
        "exec" => command_at(opts(&Spec {
            short_flag: "cl",
            short_val: "a",
            short_opt: "",
            long_flag: NO_LONG,
            long_val: NO_LONG,
            long_opt: NO_LONG,
        })),
        "time" => command_at(opts(&Spec {
            short_flag: "pvaq",
            short_val: "fo",
            short_opt: "",
            long_flag: &[
                "portability",
                "verbose",
                "append",
                "quiet",
                "help",
                "version",
            ],
            long_val: &["format", "output"],
            long_opt: NO_LONG,
        })),
        "nice" => {
            // `nice -10 cmd` / `nice --5 cmd` are historical adjustment forms.
            let mut start = 1;
            if let Some(Word::Static(s)) = argv.get(1) {
                let n = s.trim_start_matches('-');
                if s.starts_with('-') && !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) {
                    start = 2;
                }
            }
            command_at(parse_opts(
                argv,
                start,
                &Spec {
                    short_flag: "",
                    short_val: "n",
                    short_opt: "",
                    long_flag: &["help", "version"],
                    long_val: &["adjustment"],
                    long_opt: NO_LONG,
                },
            ))
        }
        "timeout" => {
            let r = opts(&Spec {
                short_flag: "v",
                short_val: "sk",
                short_opt: "",
                long_flag: &[
                    "preserve-status",
                    "foreground",
                    "verbose",
                    "help",
                    "version",
                ],
                long_val: &["signal", "kill-after"],
                long_opt: NO_LONG,
            });
            // After the options: DURATION, then the command.
            match r {
                Ok(p) if p.next + 1 < argv.len() => Unwrap::Command {
                    n: p.next + 1,
                    env: Vec::new(),
                    input: Input::None,
                },
                Ok(_) => Unwrap::NotWrapper,
                Err(i) => Unwrap::Unknown { n: i },
            }
        }
        "stdbuf" => command_at(opts(&Spec {
            short_flag: "",
            short_val: "ioe",
            short_opt: "",
            long_flag: &["help", "version"],
            long_val: &["input", "output", "error"],
            long_opt: NO_LONG,
        })),
        "ionice" => {
            let r = opts(&Spec {
                short_flag: "t",
                short_val: "cnpPu",
                short_opt: "",
                long_flag: &["ignore", "help", "version"],
                long_val: &["class", "classdata", "pid", "pgid", "uid"],
                long_opt: NO_LONG,
            });
            if matches!(&r, Ok(p) if ["p", "P", "u", "pid", "pgid", "uid"].iter().any(|o| p.has(o)))
            {
                return Unwrap::NotWrapper;
            }
            command_at(r)
        }
        "setsid" => command_at(opts(&Spec {
            short_flag: "cfw",
            short_val: "",
            short_opt: "",
            long_flag: &["ctty", "fork", "wait", "help", "version"],
            long_val: NO_LONG,
            long_opt: NO_LONG,
        })),
        "chrt" | "taskset" => {
            let r = if name == "chrt" {
                opts(&Spec {
                    short_flag: "abdfiormRvpe",
                    short_val: "TPD",
                    short_opt: "",
                    long_flag: &[
                        "all-tasks",
                        "batch",
                        "deadline",
                        "fifo",
                        "idle",
                        "other",
                        "rr",
                        "ext",
                        "reset-on-fork",
                        "verbose",
                        "pid",
                        "max",
                        "help",
                        "version",
                    ],
                    long_val: &["sched-runtime", "sched-period", "sched-deadline"],
                    long_opt: NO_LONG,
                })
            } else {
                opts(&Spec {
                    short_flag: "acp",
                    short_val: "",
                    short_opt: "",
                    long_flag: &["all-tasks", "cpu-list", "pid", "help", "version"],
                    long_val: NO_LONG,
                    long_opt: NO_LONG,
                })
            };
            match r {
                Ok(p) if p.has("p") || p.has("pid") || p.has("m") || p.has("max") => {
                    Unwrap::NotWrapper
                }
                // After the options: the priority (chrt) or mask (taskset), then the command.
                Ok(p) if p.next + 1 < argv.len() => Unwrap::Command {
                    n: p.next + 1,
                    env: Vec::new(),
                    input: Input::None,
                },
                Ok(_) => Unwrap::NotWrapper,
                Err(i) => Unwrap::Unknown { n: i },
            }
        }
        "xargs" => {
            let r = opts(&Spec {
                short_flag: "0optrx",
                short_val: "adEILnPs",
                short_opt: "eil",
                long_flag: &[
                    "null",
                    "open-tty",
                    "interactive",
                    "no-run-if-empty",
                    "verbose",
                    "exit",
                    "show-limits",
                    "help",
                    "version",
                ],
                long_val: &[
                    "arg-file",
                    "delimiter",
                    "eof",
                    "max-args",
                    "max-procs",
                    "max-chars",
                    "process-slot-var",
                ],
                long_opt: &["replace", "max-lines"],
            });
            let p = match r {
                Ok(p) => p,
                Err(i) => return Unwrap::Unknown { n: i },
            };
            let replace = if let Some(v) = p.value("I") {
                Some(v.clone())
            } else if p.has("i") || p.has("replace") {
                Some(
                    p.value("i")
                        .or_else(|| p.value("replace"))
                        .cloned()
                        .unwrap_or(Word::Static("{}".to_owned())),
                )
            } else {
                None
            };
            let input = match replace {
                Some(Word::Static(r)) => Input::Replace(r),
                Some(Word::Dynamic(_)) => return Unwrap::Unknown { n: p.next },
                None => Input::Appended,
            };
            // With no command, xargs runs `echo`.
            Unwrap::Command {
                n: p.next,
                env: Vec::new(),
                input,
            }
        }
        "watch" => {
            let r = opts(&Spec {
                short_flag: "bcegtpwxr",
                short_val: "nq",
                short_opt: "d",
                long_flag: &[
                    "beep", "color", "no-color", "errexit", "chgexit", "no-title", "precise",
                    "no-wrap", "exec", "no-rerun", "help", "version",
                ],
                long_val: &["interval", "equexit"],
                long_opt: &["differences"],
            });
            match r {
                Ok(p) if p.next >= argv.len() => Unwrap::NotWrapper,
                Ok(p) if p.has("x") || p.has("exec") => Unwrap::Command {
                    n: p.next,
                    env: Vec::new(),
                    input: Input::None,
                },
                // Without -x, watch joins its arguments and runs them with `sh -c`.
                Ok(p) => Unwrap::Script {
                    n: argv.len(),
                    script: join_words(&argv[p.next..]),
                },
                Err(i) => Unwrap::Unknown { n: i },
            }
        }
        "flock" => {
            let r = opts(&Spec {
                short_flag: "sxunoFv",
                short_val: "wEc",
                short_opt: "",
                long_flag: &[
                    "shared",
                    "exclusive",
                    "unlock",
                    "nonblock",
                    "close",
                    "no-fork",
                    "verbose",
                    "help",
                    "version",
                ],
                long_val: &["timeout", "wait", "conflict-exit-code", "command"],
                long_opt: NO_LONG,
            });
            let p = match r {
                Ok(p) => p,
                Err(i) => return Unwrap::Unknown { n: i },
            };
            if let Some(c) = p.value("c").or_else(|| p.value("command")) {
                return Unwrap::Script {
                    n: argv.len(),
                    script: c.clone(),
                };
            }
            // flock FILE -c CMD | flock FILE CMD ARGS | flock FD
            let after = p.next + 1;
            match argv.get(after) {
                Some(Word::Static(s)) if s == "-c" || s == "--command" => match argv.get(after + 1)
                {
                    Some(script) => Unwrap::Script {
                        n: argv.len(),
                        script: script.clone(),
                    },
                    None => Unwrap::NotWrapper,
                },
                Some(_) => Unwrap::Command {
                    n: after,
                    env: Vec::new(),
                    input: Input::None,
                },
                None => Unwrap::NotWrapper,
            }
        }
        "busybox" => match argv.get(1) {
            Some(Word::Static(s)) if s.starts_with('-') => Unwrap::NotWrapper,
            Some(_) => Unwrap::Command {
                n: 1,
                env: Vec::new(),
                input: Input::None,
            },
            None => Unwrap::NotWrapper,
        },
        "parallel" | "sem" => Unwrap::Unknown { n: 1 },
        "eval" => {
            let args = argv.get(1..).unwrap_or_default();
            let args = match args.first() {
                Some(Word::Static(s)) if s == "--" => &args[1..],
                _ => args,
            };
            if args.is_empty() {
                return Unwrap::NotWrapper;
            }
            Unwrap::Script {
                n: argv.len(),
                script: join_words(args),
            }
        }
        n if SHELLS.contains(&n) => shell(argv),
        n if FOREIGN_SHELLS.contains(&n) => {
            if argv
                .iter()
                .skip(1)
                .any(|w| matches!(w, Word::Static(s) if s.starts_with('-') && s.contains('c')))
            {
                Unwrap::Unknown { n: 1 }
            } else {
                Unwrap::NotWrapper
            }
        }
        _ => Unwrap::NotWrapper,
    }
}

/// `bash [options] -c STRING [name [args]]`, `bash [options] [file]`, `bash -s`.
fn shell(argv: &[Word]) -> Unwrap {
    let mut i = 1;
    let mut c_mode = false;
    let mut s_mode = false;
    while i < argv.len() {
        let s = match &argv[i] {
            Word::Static(s) => s.as_str(),
            // After -c, the first operand is the script, whatever it looks like.
            Word::Dynamic(_) if c_mode => break,
            Word::Dynamic(_) => return Unwrap::Unknown { n: i },
        };
        if s == "--" || s == "-" {
            i += 1;
            break;
        }
        if let Some(long) = s.strip_prefix("--") {
            if matches!(long, "rcfile" | "init-file") {
                i += 2;
            } else {
                i += 1;
            }
            continue;
        }
        if (s.starts_with('-') || s.starts_with('+')) && s.len() > 1 {
            let mut takes_value = 0;
            for ch in s[1..].chars() {
                match ch {
                    'c' => c_mode = true,
                    's' => s_mode = true,
                    'o' | 'O' => takes_value += 1,
                    _ => {}
                }
            }
            i += 1 + takes_value;
            continue;
        }
        break;
    }
    if c_mode {
        return match argv.get(i) {
            Some(script) => Unwrap::Script {
                n: i + 1,
                script: script.clone(),
            },
            None => Unwrap::NotWrapper,
        };
    }
    if s_mode || i >= argv.len() {
        return Unwrap::Stdin;
    }
    // `bash file.sh`: runs a file we cannot see.
    Unwrap::NotWrapper
}

/// Join words with spaces as `eval` and `watch` do; dynamic if any word is.
fn join_words(words: &[Word]) -> Word {
    let mut text = String::new();
    let mut dynamic = false;
    for (k, w) in words.iter().enumerate() {
        if k > 0 {
            text.push(' ');
        }
        match w {
            Word::Static(s) => text.push_str(s),
            Word::Dynamic(s) => {
                dynamic = true;
                text.push_str(s);
            }
        }
    }
    if dynamic {
        Word::Dynamic(text)
    } else {
        Word::Static(text)
    }
}

/// Single-quote a word for re-parsing.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl Walker<'_> {
    /// Peel wrappers off `cmd`, re-enter shell code, and record what finally runs.
    pub(super) fn resolve(
        &mut self,
        mut cmd: SimpleCommand,
        frame: &Frame,
    ) -> Result<(), Unanalyzable> {
        // Each round removes at least one word, so this terminates; the bound is a backstop.
        for _ in 0..=cmd.argv.len() {
            let Some(name) = cmd.argv.first().and_then(command_name) else {
                break;
            };
            let name = name.to_owned();
            if name == "trap" {
                return self.trap(cmd, frame);
            }
            match unwrap(&name, &cmd.argv) {
                Unwrap::NotWrapper => break,
                Unwrap::Command { n, env, input } => {
                    let rest = cmd.argv.split_off(n);
                    let wrapper = std::mem::replace(&mut cmd.argv, rest);
                    cmd.wrappers.push(wrapper);
                    cmd.env.extend(env);
                    match input {
                        Input::None => {}
                        Input::Appended => {
                            if cmd.argv.is_empty() {
                                cmd.argv.push(Word::Static("echo".to_owned()));
                            }
                            cmd.argv.push(Word::Dynamic("<xargs input>".to_owned()));
                        }
                        Input::Replace(r) => {
                            if cmd.argv.is_empty() {
                                cmd.argv.push(Word::Static("echo".to_owned()));
                            }
                            for w in &mut cmd.argv {
                                if let Word::Static(s) = w {
                                    if !r.is_empty() && s.contains(&r) {
                                        *w = Word::Dynamic(s.clone());
                                    }
                                }
                            }
                        }
                    }
                }
                Unwrap::Script { n, script } => {
                    let wrapper: Vec<Word> = cmd.argv[..n.min(cmd.argv.len())].to_vec();
                    return self.reenter(cmd, wrapper, script, frame);
                }
                Unwrap::Stdin => {
                    let body = cmd
                        .redirects
                        .iter()
                        .rev()
                        .find(|r| {
                            matches!(r.kind, RedirectKind::HereDoc | RedirectKind::HereString)
                                && r.fd.is_none_or(|fd| fd == 0)
                        })
                        .map(|r| r.target.clone());
                    match body {
                        Some(script) => {
                            let wrapper = cmd.argv.clone();
                            return self.reenter(cmd, wrapper, script, frame);
                        }
                        // Code from a pipe or a file: unknown, and the shell itself stays the command.
                        None => break,
                    }
                }
                Unwrap::Unknown { n } => {
                    let n = n.min(cmd.argv.len());
                    let rest = cmd.argv.split_off(n);
                    let wrapper = std::mem::take(&mut cmd.argv);
                    cmd.wrappers.push(wrapper);
                    let raw = rest.iter().map(word_text).collect::<Vec<_>>().join(" ");
                    cmd.argv.push(Word::Dynamic(raw));
                    cmd.argv.extend(rest);
                    break;
                }
            }
            if cmd.argv.is_empty() {
                break;
            }
        }
        self.push(cmd)
    }

    /// Run `script` as shell code on behalf of `cmd` (whose wrapper words are `wrapper`).
    fn reenter(
        &mut self,
        cmd: SimpleCommand,
        wrapper: Vec<Word>,
        script: Word,
        frame: &Frame,
    ) -> Result<(), Unanalyzable> {
        let mut wrappers = cmd.wrappers;
        wrappers.push(wrapper);
        match script {
            Word::Static(text) => {
                let inner = Frame {
                    depth: frame.depth + 1,
                    ctx: Context::Reentered,
                    wrappers,
                    env: cmd.env,
                    redirects: cmd
                        .redirects
                        .into_iter()
                        .filter(|r| {
                            !matches!(r.kind, RedirectKind::HereDoc | RedirectKind::HereString)
                        })
                        .collect(),
                };
                self.script(&text, &inner)
            }
            Word::Dynamic(text) => self.push(SimpleCommand {
                argv: vec![Word::Dynamic(text)],
                wrappers,
                env: cmd.env,
                redirects: cmd.redirects,
                context: Context::Reentered,
            }),
        }
    }

    /// `trap 'code' SIGNALS`: the code runs later, in this shell.
    fn trap(&mut self, cmd: SimpleCommand, frame: &Frame) -> Result<(), Unanalyzable> {
        let code = match cmd.argv.get(1) {
            Some(Word::Static(s)) if s.starts_with('-') => None,
            Some(w) if cmd.argv.len() > 2 => Some(w.clone()),
            _ => None,
        };
        let wrappers = cmd.wrappers.clone();
        let env = cmd.env.clone();
        self.push(cmd)?;
        match code {
            Some(script) => {
                let carrier = SimpleCommand {
                    argv: Vec::new(),
                    wrappers,
                    env,
                    redirects: Vec::new(),
                    context: frame.ctx,
                };
                self.reenter(
                    carrier,
                    vec![Word::Static("trap".to_owned())],
                    script,
                    frame,
                )
            }
            None => Ok(()),
        }
    }
}

fn word_text(w: &Word) -> &str {
    match w {
        Word::Static(s) | Word::Dynamic(s) => s,
    }
}
