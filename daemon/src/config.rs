//! The operator's configuration: one TOML file, `config.toml` in the config dir, every key optional
//! (documented with its default in docs/config.md). A file that does not parse, or names a key this
//! build does not know, is an error listing every problem: the daemon refuses to start rather than
//! run with a half-understood policy.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cmdgate_policy::breaker::BreakerConfig;
use cmdgate_policy::learn::PromotionConfig;
use cmdgate_policy::locations::{Locations, Mode};
use cmdgate_policy::wire::ApprovalMode;
use serde::{Deserialize, Serialize};

/// The config file's name inside the config dir.
pub const CONFIG_FILE: &str = "config.toml";

/// The hook's own deadline default (hook/src/config.rs); the daemon's must stay below it.
pub const HOOK_DEADLINE: Duration = Duration::from_millis(45_000);

/// Why the config could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// Everything the operator can set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub sockets: Sockets,
    pub peers: Peers,
    pub deadlines: Deadlines,
    pub sandbox: SandboxConfig,
    /// More paths whose reads need a person (added to the built-in secret paths).
    pub secret_paths: Vec<String>,
    /// Read packs switched off (`gh`, `kubectl`, `aws`, …; see docs/reads.md): their commands
    /// are then not reads, here and in the hook registered by `cmdgate hook install`.
    pub read_packs_off: Vec<String>,
    /// Where the hook spools local allows and undelivered outcomes (default: the hook's own lookup).
    pub spool_dir: Option<PathBuf>,
    pub breaker: BreakerConfig,
    pub promotion: PromotionConfig,
    pub notify: NotifySettings,
    pub approvals: Approvals,
    /// The web console (`docs/console.md`).
    pub console: ConsoleConfig,
    /// The optional model reviewer (docs/reviewer.md).
    pub reviewer: crate::engine::reviewer::ReviewerConfig,
    /// Retention of the audit (`cmdgate audit prune`).
    pub audit: AuditConfig,
    /// Network by domain: the proxy of mirrored runs whose entry lists hosts (docs/tiermap.md).
    pub network: crate::engine::proxy::NetworkConfig,
}

/// Retention of `command_audit`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// What `cmdgate audit prune` without `--before` keeps: the rows of the last N days (0: every
    /// row; such a prune is refused).
    pub retain_days: u32,
}

/// The web console: served on loopback only (`docs/console.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    pub enabled: bool,
    /// Loopback address and port; port 0 picks a free one at each start (`cmdgate console` knows it).
    pub listen: std::net::SocketAddr,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            enabled: true,
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }
}

/// What an "ask" becomes (README, "Background mode"; docs/config.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Approvals {
    /// `interactive`: the ask goes back to Claude Code, whose prompt a person answers.
    /// `background`: the daemon holds it as a pending approval (a desktop notification, `cmdgate
    /// pending`, `cmdgate approve|reject ID`) and denies it when nobody answers in time. A session
    /// overrides this with `CMDGATE_APPROVAL_MODE` in the agent's environment.
    pub mode: ApprovalMode,
    /// Longest wait for the operator's answer. The hook's own deadline (45 s by default; raise it
    /// with `cmdgate hook install --deadline-ms`) bounds it too: the daemon answers deny a little
    /// before the hook would give up.
    pub wait_ms: u64,
}

impl Default for Approvals {
    fn default() -> Self {
        Approvals {
            mode: ApprovalMode::Interactive,
            wait_ms: 300_000,
        }
    }
}

/// Desktop notifications (D-Bus) when a circuit breaker opens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifySettings {
    /// Off for headless servers that want no desktop.
    pub enabled: bool,
}

impl Default for NotifySettings {
    fn default() -> Self {
        NotifySettings { enabled: true }
    }
}

/// Socket paths and modes. Paths default to `policy::locations` (env `CMDGATE_SOCKET`,
/// `CMDGATE_ADMIN_SOCKET`, the runtime dir).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Sockets {
    pub decide: Option<PathBuf>,
    pub admin: Option<PathBuf>,
    /// Mode of the decide socket (octal in TOML: `0o660`). The agent must be able to connect.
    pub decide_mode: u32,
    /// Mode of the admin socket: the operator only.
    pub admin_mode: u32,
}

impl Default for Sockets {
    fn default() -> Self {
        Sockets {
            decide: None,
            admin: None,
            decide_mode: 0o660,
            admin_mode: 0o600,
        }
    }
}

/// Who may connect (checked with `SO_PEERCRED` on every connection). A peer passes when its uid is
/// listed or its gid is listed. Empty lists mean "the daemon's own uid" (user mode); root is never
/// implied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Peers {
    pub decide_uids: Vec<u32>,
    pub decide_gids: Vec<u32>,
    pub admin_uids: Vec<u32>,
    pub admin_gids: Vec<u32>,
    /// The group `tiermap-revisions` is published to (mode 0640): the agents' group, whose hooks
    /// read it. Unset: the file is 0600, for the daemon's own uid (user mode, where the hook runs
    /// as that uid too). The daemon must be a member to give the file to it.
    pub publish_gid: Option<u32>,
}

/// Time budgets. The decide deadline must stay below the hook's (45 s by default), and the test-run
/// deadline below the decide deadline, so every answer arrives before anyone gives up on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Deadlines {
    /// Whole decision, from request to committed audit row.
    pub decide_ms: u64,
    /// Waiting for a sandbox slot plus the test-run itself.
    pub test_run_ms: u64,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            decide_ms: 30_000,
            test_run_ms: 25_000,
        }
    }
}

/// Container mirror settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// Test-runs at once; more wait for a slot (inside the test-run deadline).
    pub max_concurrent: usize,
    /// Default test-run timeout when the tier-map entry sets none (capped by the test-run deadline).
    pub timeout_ms: u64,
    /// A run's memory (cgroup); 0 (the default): three quarters of the machine's.
    pub memory_bytes: u64,
    /// A run's processes and threads together (cgroup).
    pub pids: u64,
    /// Thousandths of one CPU; 0 (the default): no quota, every CPU as on the host.
    pub cpu_millis: u64,
    /// The scratch tmpfs of a run: /tmp, /run, /dev/shm and the home's writes outside `write=`.
    pub scratch_bytes: u64,
    /// Bytes a mirrored run may add to the disk of the workspace (and of each kept `write=`
    /// tree), where its upper dir is: past it, or below 256 MiB (or 1 %) free space there, the
    /// run is killed and rolled back.
    pub upper_bytes: u64,
    /// Run bookkeeping (mount points, locks); default `<data dir>/sandbox`.
    pub state_dir: Option<PathBuf>,
    /// System mode: the mirror helper program with file capabilities
    /// (`cmdgate-mirror-helper`, systemd/README.md), so the daemon itself needs none. Unset: the
    /// daemon re-executes itself as the helper, which works only when the daemon is root.
    pub helper: Option<PathBuf>,
    /// How long a rolled-back mirrored run's upper dir is kept for `cmdgate runs show --diff` and
    /// `cmdgate apply` (0: discarded at once, nothing to apply).
    pub keep_rolled_back_secs: u64,
    /// Bytes all kept rolled-back runs may hold together; the oldest go first past it.
    pub keep_rolled_back_bytes: u64,
    /// How long a mirrored run may run when its tier-map entry sets no `timeout=` (seconds). The
    /// Bash tool's own `timeout` is not a limit: Claude Code moves a command still running at its
    /// `timeout` to the background (the run goes on and commits when it ends).
    pub run_limit_secs: u64,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        let l = cmdgate_sandbox::Limits::default();
        SandboxConfig {
            max_concurrent: 2,
            timeout_ms: 20_000,
            memory_bytes: l.memory_bytes,
            pids: l.pids,
            cpu_millis: l.cpu_millis,
            scratch_bytes: l.scratch_bytes,
            upper_bytes: l.upper_bytes,
            state_dir: None,
            helper: None,
            keep_rolled_back_secs: 24 * 3600,
            keep_rolled_back_bytes: 1 << 30,
            run_limit_secs: 600,
        }
    }
}

impl Config {
    /// The read packs that are on: all but `read_packs_off`.
    pub fn read_packs(&self) -> Result<cmdgate_policy::shell::read::PackSet, String> {
        cmdgate_policy::shell::read::PackSet::all().without_named(&self.read_packs_off.join(","))
    }

    /// Reads `path`; a missing file is the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(source) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Parses and checks the text of a config file.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Invalid {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let problems = config.problems();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                message: problems.join("; "),
            })
        }
    }

    /// Every inconsistency, so the operator fixes them in one go.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let d = &self.deadlines;
        if d.decide_ms == 0 || Duration::from_millis(d.decide_ms) >= HOOK_DEADLINE {
            p.push(format!(
                "deadlines.decide_ms = {} must be above 0 and below the hook's {} ms",
                d.decide_ms,
                HOOK_DEADLINE.as_millis()
            ));
        }
        if d.test_run_ms == 0 || d.test_run_ms >= d.decide_ms {
            p.push(format!(
                "deadlines.test_run_ms = {} must be above 0 and below deadlines.decide_ms",
                d.test_run_ms
            ));
        }
        if self.console.enabled && !self.console.listen.ip().is_loopback() {
            p.push(format!(
                "console.listen = {}: the console listens on loopback only (127.0.0.1 or [::1])",
                self.console.listen
            ));
        }
        if self.approvals.wait_ms == 0 {
            p.push("approvals.wait_ms must be above 0".into());
        }
        p.extend(self.reviewer.problems());
        p.extend(self.network.problems());
        if self.sandbox.max_concurrent == 0 {
            p.push("sandbox.max_concurrent must be at least 1".into());
        }
        if self.sandbox.timeout_ms == 0 {
            p.push("sandbox.timeout_ms must be above 0".into());
        }
        if let Err(e) = self.read_packs() {
            p.push(format!("read_packs_off: {e}"));
        }
        for s in &self.secret_paths {
            if !s.starts_with('/') && !s.starts_with("~/") {
                p.push(format!(
                    "secret_paths entry {s:?} must be absolute or start with ~/"
                ));
            }
        }
        for (name, mode) in [
            ("sockets.decide_mode", self.sockets.decide_mode),
            ("sockets.admin_mode", self.sockets.admin_mode),
        ] {
            if mode & !0o777 != 0 || mode & 0o007 != 0 {
                p.push(format!(
                    "{name} = {mode:#o}: permission bits only, and never for others"
                ));
            }
        }
        p
    }

    pub fn decide_deadline(&self) -> Duration {
        Duration::from_millis(self.deadlines.decide_ms)
    }

    pub fn test_run_deadline(&self) -> Duration {
        Duration::from_millis(self.deadlines.test_run_ms)
    }
}

/// Where everything is, after the config's overrides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Paths {
    pub mode: Mode,
    pub config_dir: PathBuf,
    pub config_file: PathBuf,
    pub data_dir: PathBuf,
    pub db: PathBuf,
    pub decide_socket: PathBuf,
    pub admin_socket: PathBuf,
    pub spool_dir: Option<PathBuf>,
    pub sandbox_state: PathBuf,
    pub locations: Locations,
}

impl Paths {
    /// Resolves from the environment (through `var`) and the config.
    pub fn resolve(var: &dyn Fn(&str) -> Option<String>, config: &Config) -> Paths {
        let locations = Locations::from_env(var);
        let data_dir = PathBuf::from(&locations.data_dir);
        let config_dir = PathBuf::from(&locations.config_dir);
        let nonempty = |k: &str| var(k).filter(|v| !v.is_empty());
        let spool_dir = config.spool_dir.clone().or_else(|| {
            if let Some(d) = nonempty("CMDGATE_SPOOL_DIR") {
                Some(PathBuf::from(d))
            } else if let Some(rt) = nonempty("XDG_RUNTIME_DIR") {
                Some(Path::new(&rt).join("cmdgate/spool"))
            } else if let Some(x) = nonempty("XDG_STATE_HOME") {
                Some(Path::new(&x).join("cmdgate/spool"))
            } else {
                nonempty("HOME").map(|h| Path::new(&h).join(".local/state/cmdgate/spool"))
            }
        });
        Paths {
            mode: locations.mode,
            config_file: config_dir.join(CONFIG_FILE),
            config_dir,
            db: data_dir.join(crate::store::DB_FILE),
            decide_socket: config
                .sockets
                .decide
                .clone()
                .unwrap_or_else(|| PathBuf::from(&locations.socket)),
            admin_socket: config
                .sockets
                .admin
                .clone()
                .unwrap_or_else(|| PathBuf::from(&locations.admin_socket)),
            sandbox_state: config
                .sandbox
                .state_dir
                .clone()
                .unwrap_or_else(|| data_dir.join("sandbox")),
            spool_dir,
            data_dir,
            locations,
        }
    }

    /// The config file's path before the config is read (it decides the rest).
    pub fn config_file_from_env(var: &dyn Fn(&str) -> Option<String>) -> PathBuf {
        PathBuf::from(Locations::from_env(var).config_dir).join(CONFIG_FILE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("config.toml"))
    }

    #[test]
    fn the_documented_example_is_exactly_the_defaults() {
        let doc = include_str!("../../docs/config.md");
        let start = doc
            .find("```toml\n")
            .expect("a toml block in docs/config.md")
            + 8;
        let end = start + doc[start..].find("```").expect("closed");
        assert_eq!(parse(&doc[start..end]).unwrap(), Config::default());
    }

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
        assert!(Config::default().problems().is_empty());
    }

    #[test]
    fn every_section_parses() {
        let c = parse(
            "secret_paths = [\"~/.kube\"]\n[sockets]\ndecide = \"/run/x.sock\"\ndecide_mode = 0o660\n\
             [peers]\ndecide_uids = [1000]\nadmin_gids = [50]\n[deadlines]\ndecide_ms = 10000\ntest_run_ms = 8000\n\
             [sandbox]\nmax_concurrent = 4\n[breaker]\nthreshold = 3\n[promotion]\nk = 5\n",
        )
        .unwrap();
        assert_eq!(c.peers.decide_uids, vec![1000]);
        assert_eq!(c.breaker.threshold, 3);
        assert_eq!(c.promotion.k, 5);
        assert_eq!(c.sandbox.max_concurrent, 4);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_with_every_problem() {
        assert!(parse("sokets = {}").is_err());
        let e = parse(
            "[deadlines]\ndecide_ms = 50000\ntest_run_ms = 60000\n[sandbox]\nmax_concurrent = 0\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("decide_ms") && e.contains("test_run_ms") && e.contains("max_concurrent"),
            "{e}"
        );
        assert!(parse("[sockets]\nadmin_mode = 0o666\n").is_err());
    }
}
