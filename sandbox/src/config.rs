//! What a test-run is asked to do: the workspace, the limits, and what counts as allowed.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// How the library starts the single-threaded helper process that does the namespace work.
///
/// The daemon is async and must never fork from its threads, so each run execs a fresh helper
/// (`cmdgate sandbox __helper`, or the `cmdgate-sandbox-helper` binary) that calls
/// [`crate::helper_main`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelperCommand {
    /// Executable to run (absolute path; usually `std::env::current_exe()`).
    pub program: PathBuf,
    /// Arguments that route that executable to `helper_main` (e.g. `["sandbox", "__helper"]`).
    pub args: Vec<String>,
}

/// The uid/gid the command runs as inside the mirror (the agent's own, ideally).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    /// Numeric user id (not a name: no NSS lookups in the helper).
    pub uid: u32,
    /// Numeric primary group id; supplementary groups are dropped.
    pub gid: u32,
}

/// Resource limits of one run, enforced by the kernel (cgroups, tmpfs size, timeout).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Wall-clock budget; past it pid 1 of the run's pid namespace is SIGKILLed (every descendant dies).
    pub timeout: Duration,
    /// Memory cgroup limit in bytes; tmpfs pages (the scratch upper dirs, /tmp) are charged here
    /// too. 0, the default: three quarters of the machine's memory ([`memory_limit`]), so a
    /// mirrored build — the real run — has what it would have on the host, and the host keeps
    /// a quarter when a command runs away.
    pub memory_bytes: u64,
    /// Maximum number of tasks (processes and threads) in the run's pids cgroup (stops fork
    /// bombs).
    pub pids: u64,
    /// CPU share as a fraction of one CPU in thousandths (1000 = one full CPU); 0, the default,
    /// sets no quota: the run has every CPU, as the command would on the host.
    pub cpu_millis: u64,
    /// Size of the scratch tmpfs holding every upper dir and /tmp (copy-up is whole-file).
    pub scratch_bytes: u64,
    /// Bytes of stdout and of stderr kept each; the rest is drained and counted, never stored.
    pub output_bytes: usize,
    /// Bytes a mirrored run may add to the workspace's filesystem (its upper dir is there, not
    /// on the scratch tmpfs): past it — or below 5 % free space — the run is killed and is not
    /// clean (`LimitHit` "upper"). Approximate: measured with statvfs every 250 ms and at the
    /// end, so other writers on that filesystem count too.
    #[serde(default = "default_upper_bytes")]
    pub upper_bytes: u64,
}

fn default_upper_bytes() -> u64 {
    8 << 30
}

/// The memory limit `configured` stands for: itself, or for 0 three quarters of the machine's
/// memory (`MemTotal`; 2 GiB when it cannot be read).
pub fn memory_limit(configured: u64) -> u64 {
    if configured != 0 {
        return configured;
    }
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|kb| kb.trim().parse::<u64>().ok())
        })
        .map(|kb| kb.saturating_mul(1024));
    match total {
        Some(bytes) if bytes > 0 => bytes / 4 * 3,
        _ => 2 << 30,
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(60),
            memory_bytes: 0,
            pids: 4096,
            cpu_millis: 0,
            scratch_bytes: 1 << 30,
            output_bytes: 64 << 10,
            upper_bytes: default_upper_bytes(),
        }
    }
}

/// Everything a test-run needs: what to mirror, how to launch the helper, limits and verdict rules.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunConfig {
    /// The real workspace (absolute). It is the overlay's read-only lower layer and the cwd.
    pub workspace: PathBuf,
    /// The agent's home (absolute), mirrored by its own overlay; `None` leaves it read-only.
    pub home: Option<PathBuf>,
    /// Directory for run bookkeeping (lock files, mount points); swept by [`crate::sweep_stale`].
    pub state_dir: PathBuf,
    /// How to start the helper process.
    pub helper: HelperCommand,
    /// Kernel-enforced limits.
    pub limits: Limits,
    /// Keep the host network namespace (tier-map entry says `network`); otherwise an empty one.
    pub network: bool,
    /// Network by domain (a mirrored run only; not with `network`): the run's own network
    /// namespace gets loopback up and one listening socket on 127.0.0.1, made inside it during
    /// setup and handed to the caller ([`crate::mirror::MirrorRun::take_proxy`]), whose proxy
    /// decides what the command reaches. The command's environment points `HTTP_PROXY`,
    /// `HTTPS_PROXY`, `ALL_PROXY` (both cases) at it; TCP connects go there and nowhere else
    /// (Landlock, seccomp supervisor). See [`crate::net`].
    #[serde(default)]
    pub proxy: bool,
    /// Run the command as this uid/gid instead of the caller's; recommended: the agent's.
    pub run_as: Option<RunAs>,
    /// Paths outside the workspace whose changes do not make a run dirty (e.g. a build cache
    /// under $HOME). Paths outside $HOME get their own overlay so they are writable in the mirror.
    pub extra_writable: Vec<PathBuf>,
    /// Whether changing or deleting files tracked by git keeps a run clean (e.g. a formatter).
    pub allow_tracked_changes: bool,
    /// Whether touching protected paths keeps a run clean (never by default).
    pub allow_protected: bool,
    /// Workspace-relative paths that a clean run never touches (`.git`, `.claude`, `CLAUDE_CMDS.md`).
    pub protected: Vec<PathBuf>,
    /// Environment of the command (the helper does not inherit the caller's environment).
    pub env: Vec<(String, String)>,
    /// Host paths made unreachable inside the mirror: a directory becomes an empty read-only
    /// tmpfs, anything else (file, socket) `/dev/null`. cmdgate's own sockets, config and state
    /// belong here (a command must not talk to the admin socket or read the audit); secrets can
    /// be added the same way. Missing paths are skipped; a mask that contains the workspace or the
    /// home is applied to its entries instead, down to the kept path (which stays visible); a mask
    /// that is the workspace is refused. [`RunConfig::new`] starts it with the state dir.
    #[serde(default)]
    pub masks: Vec<PathBuf>,
    /// Mask the secrets of `cmdgate_policy::secrets` too (see [`crate::secrets`]): on unless the
    /// caller turns it off for one run.
    #[serde(default = "yes")]
    pub mask_secrets: bool,
    /// The operator's own secret patterns (config `secret_paths`, same syntax as the table),
    /// masked like the table's when `mask_secrets` is on.
    #[serde(default)]
    pub secret_paths: Vec<String>,
    /// The command is git itself (the caller decided it from the parse:
    /// `cmdgate_policy::decide::protected::git_only`): its bookkeeping under the workspace's
    /// `.git/` (index, objects, refs, logs, `HEAD`, `ORIG_HEAD`, `COMMIT_EDITMSG`, `packed-refs`,
    /// …) is a clean effect. What `protected::protected` names (`.git/config`, `hooks/`, `info/`,
    /// `modules/`, the `.git` entry itself) never is, for any command.
    #[serde(default)]
    pub git_bookkeeping: bool,
    /// Secret paths this run may read after all (a tier-map entry's `unmask=`): a secret mask at
    /// or below one is not mounted, and a masked secret directory holding one masks its other
    /// entries instead. Never applies to [`RunConfig::masks`] (cmdgate's own paths).
    #[serde(default)]
    pub unmask: Vec<PathBuf>,
}

fn yes() -> bool {
    true
}

impl RunConfig {
    /// A config with the defaults: no network, default limits, the standard protected paths, and an
    /// environment made of `PATH`, `HOME`, `USER`, `LANG`, `TMPDIR=/tmp` and `SHELL=/bin/bash`.
    pub fn new(workspace: PathBuf, state_dir: PathBuf, helper: HelperCommand) -> Self {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let mut env = vec![(
            "PATH".to_string(),
            std::env::var("PATH")
                .unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into()),
        )];
        for key in ["USER", "LOGNAME", "LANG"] {
            if let Ok(value) = std::env::var(key) {
                env.push((key.to_string(), value));
            }
        }
        if let Some(home) = &home {
            env.push(("HOME".to_string(), home.display().to_string()));
        }
        env.push(("TMPDIR".to_string(), "/tmp".to_string()));
        // With SHELL set, bash does not look its user up at startup (no passwd/nscd probes).
        env.push(("SHELL".to_string(), "/bin/bash".to_string()));
        RunConfig {
            workspace,
            home,
            state_dir: state_dir.clone(),
            helper,
            limits: Limits::default(),
            network: false,
            proxy: false,
            run_as: None,
            extra_writable: Vec::new(),
            allow_tracked_changes: false,
            allow_protected: false,
            protected: default_protected(),
            env,
            masks: vec![state_dir.clone()],
            mask_secrets: true,
            secret_paths: Vec::new(),
            git_bookkeeping: false,
            unmask: Vec::new(),
        }
    }
}

impl RunConfig {
    /// The command's environment: `env`, and for a git command (`git_bookkeeping`) git's
    /// automatic maintenance turned off through `GIT_CONFIG_COUNT` (appended after any the
    /// caller set): `git commit` otherwise starts `git maintenance run --auto --detach`, a
    /// background process the run would be judged for, and repacks the object store.
    pub fn command_env(&self) -> Vec<(String, String)> {
        let mut env = self.env.clone();
        if !self.git_bookkeeping {
            return env;
        }
        let count_at = env.iter().position(|(k, _)| k == "GIT_CONFIG_COUNT");
        let mut n: usize = count_at.and_then(|i| env[i].1.parse().ok()).unwrap_or(0);
        if let Some(i) = count_at {
            env.remove(i);
        }
        for (key, value) in [("maintenance.auto", "false"), ("gc.auto", "0")] {
            env.push((format!("GIT_CONFIG_KEY_{n}"), key.to_string()));
            env.push((format!("GIT_CONFIG_VALUE_{n}"), value.to_string()));
            n += 1;
        }
        env.push(("GIT_CONFIG_COUNT".to_string(), n.to_string()));
        env
    }
}

/// The paths a clean run never touches (docs/tiermap.md, protected paths).
pub fn default_protected() -> Vec<PathBuf> {
    [".git", ".claude", "CLAUDE_CMDS.md"]
        .iter()
        .map(PathBuf::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_git_command_runs_without_background_maintenance() {
        let helper = HelperCommand {
            program: PathBuf::from("/x"),
            args: vec![],
        };
        let mut c = RunConfig::new(PathBuf::from("/ws"), PathBuf::from("/s"), helper);
        c.env = vec![
            ("GIT_CONFIG_COUNT".into(), "1".into()),
            ("GIT_CONFIG_KEY_0".into(), "core.pager".into()),
            ("GIT_CONFIG_VALUE_0".into(), "cat".into()),
        ];
        assert_eq!(c.command_env(), c.env);
        c.git_bookkeeping = true;
        let env = c.command_env();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("GIT_CONFIG_COUNT"), Some("3"));
        assert_eq!(get("GIT_CONFIG_KEY_0"), Some("core.pager"));
        assert_eq!(get("GIT_CONFIG_KEY_1"), Some("maintenance.auto"));
        assert_eq!(get("GIT_CONFIG_VALUE_2"), Some("0"));
        assert_eq!(
            env.iter().filter(|(k, _)| k == "GIT_CONFIG_COUNT").count(),
            1
        );
    }
}
