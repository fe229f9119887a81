//! The hook's configuration, read from its environment and argv only (no config file: every call pays
//! for what is read here). Each lookup is documented where it is made and in the README.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use cmdgate_policy::locations::Locations;
use cmdgate_policy::wire::ApprovalMode;

/// Default internal deadline. It must stay below the `timeout` of the hook entry in Claude Code's
/// settings (Claude Code's default is 60 s; `cmdgate hook install` writes 60): a hook that overruns
/// its timeout is ignored and the call proceeds, so the hook answers deny by itself first.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(45_000);
/// Bounds on a configured deadline.
const MIN_DEADLINE_MS: u64 = 50;
const MAX_DEADLINE_MS: u64 = 10 * 60 * 1000;
/// How long a Post event waits for the daemon to take its outcome before spooling it.
pub const DEFAULT_OUTCOME_TIMEOUT: Duration = Duration::from_millis(500);

/// Everything the hook reads from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
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
    /// `$HOME`: secret paths under it are not fast-path reads.
    pub home: Option<PathBuf>,
    /// `$CMDGATE_SECRET_PATHS` (colon-separated absolute paths): more secret paths.
    pub extra_secrets: Vec<PathBuf>,
    /// cmdgate's own files (config, keys, store, sockets, Claude settings): a command naming one is
    /// on the catastrophic list, so the escape hatch never lifts it.
    pub own_paths: Vec<String>,
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
        let mut deadline = millis(
            "CMDGATE_HOOK_DEADLINE_MS",
            env("CMDGATE_HOOK_DEADLINE_MS"),
            MIN_DEADLINE_MS,
            MAX_DEADLINE_MS,
        )?;
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            match arg.to_str() {
                Some("--deadline-ms") => {
                    deadline = millis(
                        "--deadline-ms",
                        it.next().cloned(),
                        MIN_DEADLINE_MS,
                        MAX_DEADLINE_MS,
                    )?;
                }
                _ => {
                    return Err(format!(
                        "unknown argument {arg:?} (the hook takes only --deadline-ms N)"
                    ))
                }
            }
        }
        let deadline = deadline.unwrap_or(DEFAULT_DEADLINE);
        let outcome_timeout = millis(
            "CMDGATE_HOOK_OUTCOME_MS",
            env("CMDGATE_HOOK_OUTCOME_MS"),
            10,
            5_000,
        )?
        .unwrap_or(DEFAULT_OUTCOME_TIMEOUT)
        .min(deadline);

        // Socket: $CMDGATE_SOCKET; system mode (CMDGATE_MODE=system) /run/cmdgate/cmdgate.sock;
        // $XDG_RUNTIME_DIR/cmdgate/cmdgate.sock; <data dir>/cmdgate.sock. Pinned keys:
        // <config dir>/trusted-keys, config dir $CMDGATE_CONFIG_DIR; system mode /etc/cmdgate;
        // $XDG_CONFIG_HOME/cmdgate; ~/.config/cmdgate.
        let locations = Locations::from_env(|k| env(k).and_then(|v| v.into_string().ok()));
        let socket = PathBuf::from(&locations.socket);
        let keys_path = Some(PathBuf::from(locations.trusted_keys()));
        // Accepted revisions: <data dir>/tiermap-revisions, data dir $CMDGATE_HOME; system mode
        // /var/lib/cmdgate; $XDG_DATA_HOME/cmdgate; ~/.local/share/cmdgate.
        let revisions_path = Some(PathBuf::from(locations.tiermap_revisions()));

        let home = nonempty(env("HOME")).map(PathBuf::from);
        let own_paths = locations.own_paths(
            &home
                .as_ref()
                .map_or_else(|| "/nonexistent".into(), |h| h.display().to_string()),
        );
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

        let escape_hatch = match nonempty(env("CMDGATE_ESCAPE_HATCH")) {
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
        let project_dir = nonempty(env("CLAUDE_PROJECT_DIR")).and_then(|p| p.into_string().ok());
        let extra_secrets = nonempty(env("CMDGATE_SECRET_PATHS"))
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|p| p.is_absolute())
                    .collect()
            })
            .unwrap_or_default();

        Ok(Config {
            socket,
            keys_path,
            revisions_path,
            spool_dir,
            deadline,
            outcome_timeout,
            escape_hatch,
            attended,
            approval_mode,
            project_dir,
            home,
            extra_secrets,
            own_paths,
        })
    }
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
    fn system_mode_paths_are_out_of_the_agents_home_and_explicit_ones_win() {
        let c = load(
            &[
                ("HOME", "/h"),
                ("XDG_RUNTIME_DIR", "/r"),
                ("CMDGATE_MODE", "system"),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(c.socket, PathBuf::from("/run/cmdgate/cmdgate.sock"));
        assert_eq!(
            c.keys_path,
            Some(PathBuf::from("/etc/cmdgate/trusted-keys"))
        );
        let c = load(
            &[
                ("CMDGATE_SOCKET", "/s"),
                ("CMDGATE_CONFIG_DIR", "/c"),
                ("CMDGATE_MODE", "system"),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(c.socket, PathBuf::from("/s"));
        assert_eq!(c.keys_path, Some(PathBuf::from("/c/trusted-keys")));
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
}
