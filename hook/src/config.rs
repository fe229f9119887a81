//! The hook's configuration, read from its environment and argv only (no config file: every call pays
//! for what is read here). Each lookup is documented where it is made and in the README.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cmdgate_policy::wire::{SYSTEM_SOCKET, USER_SOCKET};

/// Default internal deadline. It must stay below the `timeout` of the hook entry in Claude Code's
/// settings (Claude Code's default is 60 s; `cmdgate hook install` writes 60): a hook that overruns
/// its timeout is ignored and the call proceeds, so the hook answers deny by itself first.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(45_000);
/// Bounds on a configured deadline.
const MIN_DEADLINE_MS: u64 = 50;
const MAX_DEADLINE_MS: u64 = 10 * 60 * 1000;
/// How long a Post event waits for the daemon to take its outcome before spooling it.
pub const DEFAULT_OUTCOME_TIMEOUT: Duration = Duration::from_millis(500);
/// System-mode pinned keys (root-owned; when present they win over the user's file, which the agent
/// could rewrite).
pub const SYSTEM_KEYS: &str = "/etc/cmdgate/trusted-keys";

/// Everything the hook reads from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The daemon's decide socket.
    pub socket: PathBuf,
    /// The pinned tier-map keys file; `None` when no candidate location is known. A file that does
    /// not exist means "no keys", so no project map verifies and the built-in list applies.
    pub keys_path: Option<PathBuf>,
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
    /// `$HOME`: secret paths under it are not fast-path reads.
    pub home: Option<PathBuf>,
    /// `$CMDGATE_SECRET_PATHS` (colon-separated absolute paths): more secret paths.
    pub extra_secrets: Vec<PathBuf>,
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
    /// arguments (`--deadline-ms N` overrides `CMDGATE_HOOK_DEADLINE_MS`). `exists` tells whether a
    /// system-mode path is present (normally `Path::exists`). An unusable value is an error, which
    /// the caller turns into a deny.
    pub fn load(
        env: impl Fn(&str) -> Option<OsString>,
        args: &[OsString],
        exists: impl Fn(&Path) -> bool,
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

        let home = nonempty(env("HOME")).map(PathBuf::from);
        let runtime = nonempty(env("XDG_RUNTIME_DIR")).map(PathBuf::from);

        // Socket: $CMDGATE_SOCKET; system mode when /run/cmdgate/cmdgate.sock exists (the agent cannot
        // create it, and must not be able to shadow it with a socket of its own in its runtime dir);
        // else $XDG_RUNTIME_DIR/cmdgate/cmdgate.sock; else the system path (so the error names it).
        let socket = if let Some(s) = nonempty(env("CMDGATE_SOCKET")) {
            PathBuf::from(s)
        } else if exists(Path::new(SYSTEM_SOCKET)) {
            PathBuf::from(SYSTEM_SOCKET)
        } else if let Some(rt) = &runtime {
            rt.join(USER_SOCKET)
        } else {
            PathBuf::from(SYSTEM_SOCKET)
        };

        // Pinned keys: $CMDGATE_CONFIG_DIR/trusted-keys; /etc/cmdgate/trusted-keys when it exists
        // (system mode); $XDG_CONFIG_HOME/cmdgate/trusted-keys; ~/.config/cmdgate/trusted-keys.
        let keys_path = if let Some(dir) = nonempty(env("CMDGATE_CONFIG_DIR")) {
            Some(PathBuf::from(dir).join("trusted-keys"))
        } else if exists(Path::new(SYSTEM_KEYS)) {
            Some(PathBuf::from(SYSTEM_KEYS))
        } else if let Some(x) = nonempty(env("XDG_CONFIG_HOME")) {
            Some(PathBuf::from(x).join("cmdgate/trusted-keys"))
        } else {
            home.as_ref()
                .map(|h| h.join(".config/cmdgate/trusted-keys"))
        };

        // Spool: $CMDGATE_SPOOL_DIR; $XDG_RUNTIME_DIR/cmdgate/spool; $XDG_STATE_HOME/cmdgate/spool;
        // ~/.local/state/cmdgate/spool.
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
            spool_dir,
            deadline,
            outcome_timeout,
            escape_hatch,
            attended,
            project_dir,
            home,
            extra_secrets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(vars: &[(&str, &str)], args: &[&str], system: bool) -> Result<Config, String> {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        Config::load(|k| map.get(k).cloned(), &args, |_| system)
    }

    #[test]
    fn user_mode_defaults() {
        let c = load(
            &[("HOME", "/h"), ("XDG_RUNTIME_DIR", "/run/user/1")],
            &[],
            false,
        )
        .unwrap();
        assert_eq!(c.socket, PathBuf::from("/run/user/1/cmdgate/cmdgate.sock"));
        assert_eq!(
            c.keys_path,
            Some(PathBuf::from("/h/.config/cmdgate/trusted-keys"))
        );
        assert_eq!(
            c.spool_dir,
            Some(PathBuf::from("/run/user/1/cmdgate/spool"))
        );
        assert_eq!(c.deadline, DEFAULT_DEADLINE);
        assert_eq!(c.escape_hatch, None);
    }

    #[test]
    fn system_mode_wins_over_user_paths_but_not_explicit_ones() {
        let c = load(&[("HOME", "/h"), ("XDG_RUNTIME_DIR", "/r")], &[], true).unwrap();
        assert_eq!(c.socket, PathBuf::from(SYSTEM_SOCKET));
        assert_eq!(c.keys_path, Some(PathBuf::from(SYSTEM_KEYS)));
        let c = load(
            &[("CMDGATE_SOCKET", "/s"), ("CMDGATE_CONFIG_DIR", "/c")],
            &[],
            true,
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
            false,
        )
        .unwrap();
        assert_eq!(c.deadline, Duration::from_millis(700));
        let c = load(&[("CMDGATE_HOOK_DEADLINE_MS", "1")], &[], false).unwrap();
        assert_eq!(c.deadline, Duration::from_millis(MIN_DEADLINE_MS));
        assert!(load(&[("CMDGATE_HOOK_DEADLINE_MS", "soon")], &[], false).is_err());
        assert!(load(&[], &["--fail-open"], false).is_err());
    }
}
