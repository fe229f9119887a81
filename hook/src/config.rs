//! The hook's configuration, read from its environment and argv only (no config file: every call pays
//! for what is read here). Each lookup is documented where it is made and in the README.
//!
//! System mode (`--system` on the registered command line, which `cmdgate hook install --system`
//! or `--managed` writes into settings only root can change) takes the mode, the sockets, the
//! pinned keys, the revisions record and the deadline from that command line and the fixed system
//! locations only: the environment is the agent's (a settings file's `env` block sets it), so no
//! `CMDGATE_*` variable that could loosen the gate is read. The escape hatch there is the daemon's
//! (an operator grant), never an environment variable. What the environment may still set only
//! tightens: more secret paths, the approval mode, the attended flag.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use cmdgate_policy::locations::{Locations, Mode, SystemOverrides};
use cmdgate_policy::shell::read::PackSet;
use cmdgate_policy::wire::{ApprovalMode, ReviewerMode};

/// Default internal deadline. It must stay below the `timeout` of the hook entry in Claude Code's
/// settings (Claude Code's default is 60 s; `cmdgate hook install` writes 60): a hook that overruns
/// its timeout is ignored and the call proceeds, so the hook answers deny by itself first.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(45_000);
/// Bounds on a configured deadline.
const MIN_DEADLINE_MS: u64 = 50;
const MAX_DEADLINE_MS: u64 = 10 * 60 * 1000;
/// How long a Post event waits for the daemon to take its outcome before spooling it.
pub const DEFAULT_OUTCOME_TIMEOUT: Duration = Duration::from_millis(500);

/// Variables user mode reads that could loosen the gate (move the keys, the record, the socket, the
/// deadline, or step aside): system mode reads none of them.
const LOOSENING_VARS: [&str; 7] = [
    "CMDGATE_SOCKET",
    "CMDGATE_CONFIG_DIR",
    "CMDGATE_HOME",
    "CMDGATE_ADMIN_SOCKET",
    "CMDGATE_ESCAPE_HATCH",
    "CMDGATE_HOOK_DEADLINE_MS",
    "CMDGATE_HOOK_OUTCOME_MS",
];

/// Everything the hook reads from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// User mode (everything from the environment) or system mode (`--system`: root-owned
    /// sources only, see the module docs).
    pub mode: Mode,
    /// The `CMDGATE_*` variables set in the environment that system mode did not read (the
    /// daemon's audit gets their names: an agent that tries them is worth knowing about).
    pub ignored_env: Vec<String>,
    /// The daemon's decide socket.
    pub socket: PathBuf,
    /// The pinned tier-map keys file (`<config dir>/trusted-keys`); `None` only in unit tests that
    /// want no keys. A file that does not exist means "no keys", so no project map verifies and the
    /// built-in list applies.
    pub keys_path: Option<PathBuf>,
    /// The daemon's published record of accepted tier map revisions
    /// (`<data dir>/tiermap-revisions`): a project map whose revision it shows to be replayed is
    /// not used for local allows. `None` only in unit tests.
    pub revisions_path: Option<PathBuf>,
    /// System mode: a missing revisions record is not "nothing accepted yet" but a reason not to
    /// use a project map's tier 0 locally (an agent that points the hook at an empty data dir
    /// must not turn a replayed map into local allows).
    pub revisions_required: bool,
    /// Where spool records go; `None` when no location is known (records are then dropped).
    pub spool_dir: Option<PathBuf>,
    /// The internal deadline for PreToolUse: past it the watchdog prints deny and exits 0.
    pub deadline: Duration,
    /// The budget of a Post event's outcome report.
    pub outcome_timeout: Duration,
    /// The operator's escape hatch reason (`CMDGATE_ESCAPE_HATCH`, non-empty).
    pub escape_hatch: Option<String>,
    /// `$CLAUDE_PROJECT_DIR`, set by Claude Code for hooks: the project root.
    pub project_dir: Option<String>,
    /// `$CLAUDE_CODE_SESSION_ATTENDED` (`1`/`0`): can a person answer a prompt? Passed to the daemon.
    pub attended: Option<bool>,
    /// `$CMDGATE_APPROVAL_MODE` (`interactive` or `background`): this session's override of the
    /// operator's `approvals.mode`. Any other value is an error (so a typo never silently picks one).
    pub approval_mode: Option<ApprovalMode>,
    /// `$CMDGATE_REVIEWER` (`on` or `off`): this session's override of the operator's model
    /// reviewer (`on` only in user mode, and only for a reviewer the operator configured).
    pub reviewer: Option<ReviewerMode>,
    /// `$HOME`: secret paths under it are not fast-path reads.
    pub home: Option<PathBuf>,
    /// System mode: this uid's home in `/etc/passwd` when `$HOME` names another directory. The
    /// agent's environment says how its shell expands `~`, never where its keys are not: secret
    /// paths under this home are secret too.
    pub passwd_home: Option<PathBuf>,
    /// `$CMDGATE_SECRET_PATHS` (colon-separated absolute paths): more secret paths.
    pub extra_secrets: Vec<PathBuf>,
    /// cmdgate's own files (config, keys, store, sockets, Claude settings): a command naming one is
    /// on the catastrophic list, so the escape hatch never lifts it.
    pub own_paths: Vec<String>,
    /// The read packs that are on: all, less `--read-packs-off` (from the operator's config, on
    /// the registered command line) and `$CMDGATE_READ_PACKS_OFF`.
    pub read_packs: PackSet,
}

fn nonempty(v: Option<OsString>) -> Option<OsString> {
    v.filter(|s| !s.is_empty())
}

fn millis(
    name: &str,
    raw: Option<OsString>,
    min: u64,
    max: u64,
) -> Result<Option<Duration>, String> {
    let Some(raw) = nonempty(raw) else {
        return Ok(None);
    };
    let text = raw.to_str().ok_or_else(|| format!("{name} is not UTF-8"))?;
    let ms: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{name}={text:?} is not a number of milliseconds"))?;
    Ok(Some(Duration::from_millis(ms.clamp(min, max))))
}

impl Config {
    /// Reads the configuration through `env` (normally `std::env::var_os`) and the process
    /// arguments (`--deadline-ms N` overrides `CMDGATE_HOOK_DEADLINE_MS`). Socket and config dir come
    /// from `cmdgate_policy::locations::Locations`, the lookup the daemon and CLI share. An unusable
    /// value is an error, which the caller turns into a deny.
    pub fn load(
        env: impl Fn(&str) -> Option<OsString>,
        args: &[OsString],
    ) -> Result<Config, String> {
        let mut arg_deadline = None;
        let mut read_packs = PackSet::all();
        let mut system = false;
        let mut overrides = SystemOverrides::default();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| -> Result<String, String> {
                it.next()
                    .and_then(|v| v.to_str())
                    .filter(|v| !v.is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match arg.to_str() {
                Some("--deadline-ms") => {
                    let v = value("--deadline-ms")?;
                    arg_deadline = millis(
                        "--deadline-ms",
                        Some(v.into()),
                        MIN_DEADLINE_MS,
                        MAX_DEADLINE_MS,
                    )?;
                }
                Some("--system") => system = true,
                // Written by `cmdgate hook install` from the operator's `read_packs_off`.
                Some("--read-packs-off") => {
                    read_packs = read_packs.without_named(&value("--read-packs-off")?)?;
                }
                Some(flag @ ("--config-dir" | "--data-dir" | "--socket")) => {
                    let v = value(flag)?;
                    if !v.starts_with('/') {
                        return Err(format!("{flag} {v:?} is not an absolute path"));
                    }
                    let slot = match flag {
                        "--config-dir" => &mut overrides.config_dir,
                        "--data-dir" => &mut overrides.data_dir,
                        _ => &mut overrides.socket,
                    };
                    *slot = Some(v);
                }
                _ => {
                    return Err(format!(
                        "unknown argument {arg:?} (the hook takes --system, --config-dir DIR, \
                         --data-dir DIR, --socket PATH, --read-packs-off LIST and --deadline-ms N)"
                    ))
                }
            }
        }
        if !system && overrides != SystemOverrides::default() {
            return Err(
                "--config-dir, --data-dir and --socket are system-mode arguments: add --system"
                    .into(),
            );
        }
        // `CMDGATE_MODE=system` in the environment can only tighten: it selects system mode (and
        // with it ignores the other variables), while its absence never leaves a `--system` hook.
        let mode = if system
            || nonempty(env("CMDGATE_MODE")).is_some_and(|m| m.to_str() == Some("system"))
        {
            Mode::System
        } else {
            Mode::User
        };
        let trusted = |name: &str| match mode {
            Mode::User => env(name),
            Mode::System => None,
        };
        let mut ignored_env: Vec<String> = Vec::new();
        if mode == Mode::System {
            ignored_env.extend(
                LOOSENING_VARS
                    .iter()
                    .filter(|k| nonempty(env(k)).is_some())
                    .map(|k| (*k).to_owned()),
            );
            if nonempty(env("CMDGATE_MODE")).is_some_and(|m| m.to_str() != Some("system")) {
                ignored_env.push("CMDGATE_MODE".to_owned());
            }
        }
        let deadline = match arg_deadline {
            Some(d) => Some(d),
            None => millis(
                "CMDGATE_HOOK_DEADLINE_MS",
                trusted("CMDGATE_HOOK_DEADLINE_MS"),
                MIN_DEADLINE_MS,
                MAX_DEADLINE_MS,
            )?,
        };
        let deadline = deadline.unwrap_or(DEFAULT_DEADLINE);
        let outcome_timeout = millis(
            "CMDGATE_HOOK_OUTCOME_MS",
            trusted("CMDGATE_HOOK_OUTCOME_MS"),
            10,
            5_000,
        )?
        .unwrap_or(DEFAULT_OUTCOME_TIMEOUT)
        .min(deadline);

        // Socket: $CMDGATE_SOCKET; system mode (CMDGATE_MODE=system) /run/cmdgate/cmdgate.sock;
        // $XDG_RUNTIME_DIR/cmdgate/cmdgate.sock; <data dir>/cmdgate.sock. Pinned keys:
        // <config dir>/trusted-keys, config dir $CMDGATE_CONFIG_DIR; system mode /etc/cmdgate;
        // $XDG_CONFIG_HOME/cmdgate; ~/.config/cmdgate.
        // System mode: the fixed locations or the command line's, never the environment's.
        let locations = match mode {
            Mode::User => Locations::from_env(|k| env(k).and_then(|v| v.into_string().ok())),
            Mode::System => Locations::system(&overrides),
        };
        let socket = PathBuf::from(&locations.socket);
        let keys_path = Some(PathBuf::from(locations.trusted_keys()));
        // Accepted revisions: <data dir>/tiermap-revisions, data dir $CMDGATE_HOME; system mode
        // /var/lib/cmdgate; $XDG_DATA_HOME/cmdgate; ~/.local/share/cmdgate.
        let revisions_path = Some(PathBuf::from(locations.tiermap_revisions()));

        let home = nonempty(env("HOME")).map(PathBuf::from);
        let passwd_home = match mode {
            Mode::System => own_passwd_home().filter(|h| Some(h) != home.as_ref()),
            Mode::User => None,
        };
        let mut own_paths = locations.own_paths(
            &home
                .as_ref()
                .map_or_else(|| "/nonexistent".into(), |h| h.display().to_string()),
        );
        if let Some(other) = &passwd_home {
            own_paths.extend(locations.own_paths(&other.display().to_string()));
        }
        let runtime = nonempty(env("XDG_RUNTIME_DIR")).map(PathBuf::from);
        // Spool: $CMDGATE_SPOOL_DIR; $XDG_RUNTIME_DIR/cmdgate/spool; $XDG_STATE_HOME/cmdgate/spool;
        // ~/.local/state/cmdgate/spool (the daemon's `Paths::resolve` reads the same list).
        let spool_dir = if let Some(d) = nonempty(env("CMDGATE_SPOOL_DIR")) {
            Some(PathBuf::from(d))
        } else if let Some(rt) = &runtime {
            Some(rt.join("cmdgate/spool"))
        } else if let Some(x) = nonempty(env("XDG_STATE_HOME")) {
            Some(PathBuf::from(x).join("cmdgate/spool"))
        } else {
            home.as_ref().map(|h| h.join(".local/state/cmdgate/spool"))
        };

        // System mode: the escape hatch is an operator grant the daemon holds, never a variable.
        let escape_hatch = match nonempty(trusted("CMDGATE_ESCAPE_HATCH")) {
            None => None,
            Some(v) => Some(
                v.into_string()
                    .map_err(|_| "CMDGATE_ESCAPE_HATCH is not UTF-8".to_string())?,
            ),
        };
        let attended = match nonempty(env("CLAUDE_CODE_SESSION_ATTENDED"))
            .as_deref()
            .and_then(|v| v.to_str())
        {
            Some("1" | "true") => Some(true),
            Some("0" | "false") => Some(false),
            _ => None,
        };
        let approval_mode = match nonempty(env("CMDGATE_APPROVAL_MODE")) {
            None => None,
            Some(v) => {
                let text = v.to_string_lossy().into_owned();
                Some(ApprovalMode::parse(text.trim()).ok_or_else(|| {
                    format!(
                        "CMDGATE_APPROVAL_MODE={text:?} is neither \"interactive\" nor \"background\""
                    )
                })?)
            }
        };
        // `off` tightens and is always read; `on` loosens (a model may then allow what a person
        // would decide), so system mode ignores it like the other loosening variables.
        let reviewer = match nonempty(env("CMDGATE_REVIEWER")) {
            None => None,
            Some(v) => {
                let text = v.to_string_lossy().into_owned();
                match ReviewerMode::parse(text.trim()) {
                    Some(ReviewerMode::On) if mode == Mode::System => {
                        ignored_env.push("CMDGATE_REVIEWER".to_owned());
                        None
                    }
                    Some(m) => Some(m),
                    None => {
                        return Err(format!(
                            "CMDGATE_REVIEWER={text:?} is neither \"on\" nor \"off\""
                        ))
                    }
                }
            }
        };
        let project_dir = nonempty(env("CLAUDE_PROJECT_DIR")).and_then(|p| p.into_string().ok());
        let extra_secrets = nonempty(env("CMDGATE_SECRET_PATHS"))
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|p| p.is_absolute())
                    .collect()
            })
            .unwrap_or_default();
        // `CMDGATE_READ_PACKS_OFF` only switches packs off (it tightens), so every mode reads it.
        if let Some(v) = nonempty(env("CMDGATE_READ_PACKS_OFF")) {
            read_packs = read_packs.without_named(&v.to_string_lossy())?;
        }

        Ok(Config {
            mode,
            ignored_env,
            revisions_required: mode == Mode::System,
            socket,
            keys_path,
            revisions_path,
            spool_dir,
            deadline,
            outcome_timeout,
            escape_hatch,
            attended,
            approval_mode,
            reviewer,
            project_dir,
            home,
            passwd_home,
            extra_secrets,
            own_paths,
            read_packs,
        })
    }
}

/// This process's uid's home directory in `/etc/passwd` (std only: the owner of `/proc/self` is
/// our effective uid). `None` when the file cannot be read or has no such line.
fn own_passwd_home() -> Option<PathBuf> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let mut text = String::new();
    std::fs::File::open("/etc/passwd")
        .ok()?
        .take(4 << 20)
        .read_to_string(&mut text)
        .ok()?;
    passwd_home_of(&text, uid)
}

/// The home field of `uid`'s line in passwd(5) text.
fn passwd_home_of(text: &str, uid: u32) -> Option<PathBuf> {
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 7 && fields[2].parse() == Ok(uid) && fields[5].starts_with('/'))
            .then(|| PathBuf::from(fields[5]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(vars: &[(&str, &str)], args: &[&str]) -> Result<Config, String> {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        Config::load(|k| map.get(k).cloned(), &args)
    }

    #[test]
    fn user_mode_defaults() {
        let c = load(&[("HOME", "/h"), ("XDG_RUNTIME_DIR", "/run/user/1")], &[]).unwrap();
        assert_eq!(c.socket, PathBuf::from("/run/user/1/cmdgate/cmdgate.sock"));
        assert_eq!(
            c.keys_path,
            Some(PathBuf::from("/h/.config/cmdgate/trusted-keys"))
        );
        assert_eq!(
            c.revisions_path,
            Some(PathBuf::from("/h/.local/share/cmdgate/tiermap-revisions"))
        );
        assert_eq!(
            c.spool_dir,
            Some(PathBuf::from("/run/user/1/cmdgate/spool"))
        );
        assert_eq!(c.deadline, DEFAULT_DEADLINE);
        assert_eq!(c.escape_hatch, None);
        let c = load(&[("HOME", "/h")], &[]).unwrap();
        assert_eq!(
            c.socket,
            PathBuf::from("/h/.local/share/cmdgate/cmdgate.sock")
        );
        assert_eq!(
            c.spool_dir,
            Some(PathBuf::from("/h/.local/state/cmdgate/spool"))
        );
    }

    #[test]
    fn system_mode_paths_are_out_of_the_agents_home() {
        let c = load(
            &[
                ("HOME", "/h"),
                ("XDG_RUNTIME_DIR", "/r"),
                ("CMDGATE_MODE", "system"),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(c.mode, Mode::System);
        assert_eq!(c.socket, PathBuf::from("/run/cmdgate/cmdgate.sock"));
        assert_eq!(
            c.keys_path,
            Some(PathBuf::from("/etc/cmdgate/trusted-keys"))
        );
        assert!(c.revisions_required);
    }

    /// Every variable an agent could set to loosen the gate (its own keys and record, a socket it
    /// answers itself, a deadline past Claude Code's timeout, the escape hatch) is ignored in
    /// system mode, whether the mode comes from the command line or the environment, and named
    /// for the audit.
    #[test]
    fn a_uids_home_comes_from_its_passwd_line() {
        let text = "root:x:0:0:root:/root:/bin/bash\nbad line\nal:x:1001:1001::/home/al:/bin/sh\n";
        assert_eq!(passwd_home_of(text, 1001), Some(PathBuf::from("/home/al")));
        assert_eq!(passwd_home_of(text, 0), Some(PathBuf::from("/root")));
        assert_eq!(passwd_home_of(text, 7), None);
        assert_eq!(passwd_home_of("x:x:5:5::relative:/bin/sh", 5), None);
    }

    #[test]
    fn system_mode_reads_nothing_from_the_agents_environment_that_loosens() {
        let agent_env = [
            ("HOME", "/h"),
            ("CMDGATE_SOCKET", "/h/fake.sock"),
            ("CMDGATE_CONFIG_DIR", "/h/cfg"),
            ("CMDGATE_HOME", "/h/data"),
            ("CMDGATE_ESCAPE_HATCH", "let me"),
            ("CMDGATE_HOOK_DEADLINE_MS", "600000"),
            ("CMDGATE_HOOK_OUTCOME_MS", "5000"),
            ("CMDGATE_MODE", "user"),
        ];
        for args in [
            &["--system"][..],
            &[
                "--system",
                "--config-dir",
                "/etc/cg",
                "--data-dir",
                "/var/lib/cg",
                "--socket",
                "/run/cg/d.sock",
            ][..],
        ] {
            let c = load(&agent_env, args).unwrap();
            assert_eq!(c.mode, Mode::System);
            assert_eq!(c.escape_hatch, None);
            assert_eq!(c.deadline, DEFAULT_DEADLINE);
            assert_eq!(c.outcome_timeout, DEFAULT_OUTCOME_TIMEOUT);
            let keys = c.keys_path.unwrap();
            let record = c.revisions_path.unwrap();
            assert!(!keys.starts_with("/h") && !record.starts_with("/h"));
            assert!(!c.socket.starts_with("/h"));
            assert_eq!(c.ignored_env.len(), 7, "{:?}", c.ignored_env);
            // `HOME=/h` is not this uid's home: secrets under the real one stay secret.
            assert_eq!(c.passwd_home, own_passwd_home());
            assert!(c.passwd_home.is_some(), "the test's uid has a passwd line");
        }
        assert_eq!(
            load(&agent_env, &[]).unwrap().passwd_home,
            None,
            "user mode"
        );
        let c = load(
            &agent_env,
            &[
                "--system",
                "--config-dir",
                "/etc/cg",
                "--data-dir",
                "/var/lib/cg",
                "--socket",
                "/run/cg/d.sock",
                "--deadline-ms",
                "9000",
            ],
        )
        .unwrap();
        assert_eq!(c.keys_path, Some(PathBuf::from("/etc/cg/trusted-keys")));
        assert_eq!(
            c.revisions_path,
            Some(PathBuf::from("/var/lib/cg/tiermap-revisions"))
        );
        assert_eq!(c.socket, PathBuf::from("/run/cg/d.sock"));
        assert_eq!(c.deadline, Duration::from_millis(9000));
        // User mode still honours them (the user owns everything there anyway).
        let c = load(&agent_env, &[]).unwrap();
        assert_eq!(c.mode, Mode::User);
        assert_eq!(c.socket, PathBuf::from("/h/fake.sock"));
        assert_eq!(c.escape_hatch.as_deref(), Some("let me"));
        assert!(!c.revisions_required);
    }

    #[test]
    fn system_arguments_are_checked() {
        let e = load(&[], &["--config-dir", "/etc/cg"]).unwrap_err();
        assert!(e.contains("add --system"), "{e}");
        let e = load(&[], &["--system", "--data-dir", "rel"]).unwrap_err();
        assert!(e.contains("not an absolute path"), "{e}");
        let e = load(&[], &["--system", "--socket"]).unwrap_err();
        assert!(e.contains("needs a value"), "{e}");
    }

    #[test]
    fn deadline_from_env_and_args() {
        let c = load(
            &[("CMDGATE_HOOK_DEADLINE_MS", "900")],
            &["--deadline-ms", "700"],
        )
        .unwrap();
        assert_eq!(c.deadline, Duration::from_millis(700));
        let c = load(&[("CMDGATE_HOOK_DEADLINE_MS", "1")], &[]).unwrap();
        assert_eq!(c.deadline, Duration::from_millis(MIN_DEADLINE_MS));
        assert!(load(&[("CMDGATE_HOOK_DEADLINE_MS", "soon")], &[]).is_err());
        assert!(load(&[], &["--fail-open"]).is_err());
    }

    #[test]
    fn attended_flag() {
        assert_eq!(
            load(&[("CLAUDE_CODE_SESSION_ATTENDED", "0")], &[])
                .unwrap()
                .attended,
            Some(false)
        );
        assert_eq!(
            load(&[("CLAUDE_CODE_SESSION_ATTENDED", "1")], &[])
                .unwrap()
                .attended,
            Some(true)
        );
        assert_eq!(load(&[], &[]).unwrap().attended, None);
    }

    #[test]
    fn approval_mode_override() {
        assert_eq!(
            load(&[("CMDGATE_APPROVAL_MODE", "background")], &[])
                .unwrap()
                .approval_mode,
            Some(ApprovalMode::Background)
        );
        assert_eq!(
            load(&[("CMDGATE_APPROVAL_MODE", "interactive")], &[])
                .unwrap()
                .approval_mode,
            Some(ApprovalMode::Interactive)
        );
        assert_eq!(load(&[], &[]).unwrap().approval_mode, None);
        let e = load(&[("CMDGATE_APPROVAL_MODE", "backgroud")], &[]).unwrap_err();
        assert!(e.contains("CMDGATE_APPROVAL_MODE"), "{e}");
    }

    #[test]
    fn reviewer_override_system_mode_reads_only_off() {
        let on = [("CMDGATE_REVIEWER", "on")];
        assert_eq!(load(&on, &[]).unwrap().reviewer, Some(ReviewerMode::On));
        let system = load(&on, &["--system"]).unwrap();
        assert_eq!(system.reviewer, None, "on loosens: ignored in system mode");
        assert!(system.ignored_env.contains(&"CMDGATE_REVIEWER".to_owned()));
        let off = load(&[("CMDGATE_REVIEWER", "off")], &["--system"]).unwrap();
        assert_eq!(off.reviewer, Some(ReviewerMode::Off));
        assert!(load(&[("CMDGATE_REVIEWER", "yes")], &[]).is_err());
    }
}
