//! Where cmdgate keeps things: config, state, sockets. One pure function of the environment, shared
//! by the hook (which must not spend time on it) and the daemon/CLI, so they never disagree.

use serde::{Deserialize, Serialize};

/// User mode (everything under the agent's own home: the embedded default) or system mode
/// (config under /etc, state under /var/lib, sockets under /run: out of the agent's reach).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    User,
    System,
}

/// Resolved locations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Locations {
    pub mode: Mode,
    /// Operator configuration: `config.toml`, `trusted-keys`, the development signing key.
    pub config_dir: String,
    /// State: the SQLite store, the spool.
    pub data_dir: String,
    /// The agent-facing decide socket.
    pub socket: String,
    /// The operator's admin socket.
    pub admin_socket: String,
}

/// System mode's configuration directory (root-owned).
pub const SYSTEM_CONFIG_DIR: &str = "/etc/cmdgate";
/// System mode's state directory (the daemon user's).
pub const SYSTEM_DATA_DIR: &str = "/var/lib/cmdgate";
/// System mode's socket directory (created by systemd for the socket units).
pub const SYSTEM_RUNTIME_DIR: &str = "/run/cmdgate";

/// What a root-owned source (the hook's registered command line, written by `cmdgate hook install
/// --system`) may say about system mode's locations; `None` keeps the default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemOverrides {
    pub config_dir: Option<String>,
    pub data_dir: Option<String>,
    pub socket: Option<String>,
}

/// The pinned-keys file inside the config dir.
pub const TRUSTED_KEYS_FILE: &str = "trusted-keys";

/// The tier map revisions the daemon accepted, inside the data dir (format: `docs/tiermap.md`,
/// "Replay protection"): the hook reads it before it uses a project map's tier 0 by itself.
pub const TIERMAP_REVISIONS_FILE: &str = "tiermap-revisions";

impl Locations {
    /// Resolves locations from environment values (passed in: no IO here).
    ///
    /// - `CMDGATE_MODE=system` ⇒ `/etc/cmdgate`, `/var/lib/cmdgate`, `/run/cmdgate/…`.
    /// - else config `CMDGATE_CONFIG_DIR`, `$XDG_CONFIG_HOME/cmdgate`, `~/.config/cmdgate`;
    ///   data `CMDGATE_HOME`, `$XDG_DATA_HOME/cmdgate`, `~/.local/share/cmdgate`;
    ///   socket `CMDGATE_SOCKET`, `$XDG_RUNTIME_DIR/cmdgate/cmdgate.sock`, `<data>/cmdgate.sock`.
    ///
    /// Explicit `CMDGATE_*` variables win in both modes. This is for the daemon and the operator's
    /// CLI, whose environment the operator (or the unit file) sets. The hook in system mode must not
    /// use it: its environment is the agent's, so it takes [`Locations::system`] from its
    /// root-written command line instead.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Locations {
        let var = |k: &str| var(k).filter(|v| !v.is_empty());
        let mode = match var("CMDGATE_MODE").as_deref() {
            Some("system") => Mode::System,
            _ => Mode::User,
        };
        let home = var("HOME").unwrap_or_else(|| "/nonexistent".into());
        let (config_dir, data_dir, runtime) = match mode {
            Mode::System => (
                SYSTEM_CONFIG_DIR.to_owned(),
                SYSTEM_DATA_DIR.to_owned(),
                Some(SYSTEM_RUNTIME_DIR.to_owned()),
            ),
            Mode::User => (
                var("XDG_CONFIG_HOME")
                    .map(|x| format!("{x}/cmdgate"))
                    .unwrap_or_else(|| format!("{home}/.config/cmdgate")),
                var("XDG_DATA_HOME")
                    .map(|x| format!("{x}/cmdgate"))
                    .unwrap_or_else(|| format!("{home}/.local/share/cmdgate")),
                var("XDG_RUNTIME_DIR").map(|x| format!("{x}/cmdgate")),
            ),
        };
        let config_dir = var("CMDGATE_CONFIG_DIR").unwrap_or(config_dir);
        let data_dir = var("CMDGATE_HOME").unwrap_or(data_dir);
        let runtime = runtime.unwrap_or_else(|| data_dir.clone());
        let socket = var("CMDGATE_SOCKET").unwrap_or_else(|| format!("{runtime}/cmdgate.sock"));
        let admin_socket =
            var("CMDGATE_ADMIN_SOCKET").unwrap_or_else(|| format!("{runtime}/admin.sock"));
        Locations {
            mode,
            config_dir,
            data_dir,
            socket,
            admin_socket,
        }
    }

    /// System mode's locations from root-owned sources only: the defaults (`/etc/cmdgate`,
    /// `/var/lib/cmdgate`, `/run/cmdgate/…`) or what the caller read from such a source (the hook's
    /// registered command line). No environment variable is consulted, so nothing the agent can set
    /// moves them.
    pub fn system(overrides: &SystemOverrides) -> Locations {
        let config_dir = overrides
            .config_dir
            .clone()
            .unwrap_or_else(|| SYSTEM_CONFIG_DIR.to_owned());
        let data_dir = overrides
            .data_dir
            .clone()
            .unwrap_or_else(|| SYSTEM_DATA_DIR.to_owned());
        let socket = overrides
            .socket
            .clone()
            .unwrap_or_else(|| format!("{SYSTEM_RUNTIME_DIR}/cmdgate.sock"));
        let admin_socket = format!("{SYSTEM_RUNTIME_DIR}/admin.sock");
        Locations {
            mode: Mode::System,
            config_dir,
            data_dir,
            socket,
            admin_socket,
        }
    }

    pub fn trusted_keys(&self) -> String {
        format!("{}/{TRUSTED_KEYS_FILE}", self.config_dir)
    }

    /// The daemon's published record of the highest tier map revision accepted per project
    /// (written by the daemon, read by the hook's fast path).
    pub fn tiermap_revisions(&self) -> String {
        format!("{}/{TIERMAP_REVISIONS_FILE}", self.data_dir)
    }

    /// Paths an agent's command must never touch: whoever can write them can widen the gate.
    /// `home` adds the user-level Claude Code settings (where the hook is registered).
    pub fn own_paths(&self, home: &str) -> Vec<String> {
        // The sockets themselves, not their directories: `CMDGATE_SOCKET` may sit in any directory
        // (a test's temp dir that also holds the workspace), and that directory is not cmdgate's.
        let mut v = vec![
            self.config_dir.clone(),
            self.data_dir.clone(),
            // Inside the data dir, so already covered; named so it survives a data dir change.
            self.tiermap_revisions(),
            self.socket.clone(),
            self.admin_socket.clone(),
            format!("{home}/.claude/settings.json"),
            format!("{home}/.claude/settings.local.json"),
            // The files themselves, inside the dirs above: the policy also knows them by inode,
            // so a hard link to one under another name is still recognised.
            format!("{}/{TRUSTED_KEYS_FILE}", self.config_dir),
            format!("{}/dev-signing-key", self.config_dir),
            format!("{}/config.toml", self.config_dir),
            format!("{}/cmdgate.db", self.data_dir),
            format!("{}/cmdgate.db-wal", self.data_dir),
            format!("{}/cmdgate.db-shm", self.data_dir),
            // The default spool (the hook's and daemon's spool settings add the one in use).
            format!("{home}/.local/state/cmdgate"),
            // Claude Code's managed settings, where system mode registers the hook.
            "/etc/claude-code".to_owned(),
        ];
        v.retain(|p| !p.is_empty() && p != "/");
        v.sort();
        v.dedup();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn user_mode_defaults_follow_xdg() {
        let l = Locations::from_env(env(&[
            ("HOME", "/home/a"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
        ]));
        assert_eq!(l.mode, Mode::User);
        assert_eq!(l.config_dir, "/home/a/.config/cmdgate");
        assert_eq!(l.data_dir, "/home/a/.local/share/cmdgate");
        assert_eq!(l.socket, "/run/user/1000/cmdgate/cmdgate.sock");
        assert_eq!(l.trusted_keys(), "/home/a/.config/cmdgate/trusted-keys");
        assert_eq!(
            l.tiermap_revisions(),
            "/home/a/.local/share/cmdgate/tiermap-revisions"
        );
        assert!(l
            .own_paths("/home/a")
            .contains(&"/home/a/.local/share/cmdgate/tiermap-revisions".to_owned()));
    }

    #[test]
    fn without_runtime_dir_sockets_live_in_the_data_dir() {
        let l = Locations::from_env(env(&[("HOME", "/home/a"), ("CMDGATE_HOME", "/tmp/cg")]));
        assert_eq!(l.socket, "/tmp/cg/cmdgate.sock");
        assert_eq!(l.admin_socket, "/tmp/cg/admin.sock");
    }

    #[test]
    fn system_mode_and_explicit_overrides() {
        let l = Locations::from_env(env(&[
            ("CMDGATE_MODE", "system"),
            ("CMDGATE_SOCKET", "/x/s.sock"),
        ]));
        assert_eq!(l.config_dir, "/etc/cmdgate");
        assert_eq!(l.data_dir, "/var/lib/cmdgate");
        assert_eq!(l.socket, "/x/s.sock");
        assert_eq!(l.admin_socket, "/run/cmdgate/admin.sock");
        assert!(l.own_paths("/root").contains(&"/etc/cmdgate".to_owned()));
    }

    #[test]
    fn system_locations_take_only_what_the_caller_passes() {
        let l = Locations::system(&SystemOverrides::default());
        assert_eq!(l.mode, Mode::System);
        assert_eq!(l.config_dir, "/etc/cmdgate");
        assert_eq!(l.data_dir, "/var/lib/cmdgate");
        assert_eq!(l.socket, "/run/cmdgate/cmdgate.sock");
        assert_eq!(l.tiermap_revisions(), "/var/lib/cmdgate/tiermap-revisions");
        let l = Locations::system(&SystemOverrides {
            config_dir: Some("/opt/cg/etc".into()),
            data_dir: Some("/opt/cg/var".into()),
            socket: Some("/opt/cg/run/d.sock".into()),
        });
        assert_eq!(l.trusted_keys(), "/opt/cg/etc/trusted-keys");
        assert_eq!(l.tiermap_revisions(), "/opt/cg/var/tiermap-revisions");
        assert_eq!(l.socket, "/opt/cg/run/d.sock");
    }
}
