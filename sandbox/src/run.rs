//! The library side of a test-run: start the helper, send the request, read the answer, judge.
//!
//! Blocking, and safe to call from any thread (the daemon calls it from `spawn_blocking`): the
//! helper is started with `std::process::Command` (fork+exec, nothing else in the child).

use crate::cgroup::{remove_dirs, RunCgroup};
use crate::config::{HelperCommand, RunConfig};
use crate::model::TestRun;
use crate::protocol::{
    HelperReply, HelperRequest, KeptTree, MirrorSpec, OverlayAhead, ParentMessage, RawRun,
};
use crate::tracked::{self, Tracked};
use crate::verdict::{self, Outcome};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Why a test-run could not happen (the command did not run, or its result was lost).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The config is unusable.
    #[error("invalid run config: {0}")]
    Config(String),
    /// The helper could not be started or talked to.
    #[error("failed to talk to the sandbox helper {0}")]
    Helper(String, #[source] std::io::Error),
    /// The helper said it could not set up the sandbox.
    #[error("sandbox setup failed ({stage}): {message}")]
    Setup {
        /// Stage.
        stage: String,
        /// Error chain.
        message: String,
    },
    /// The helper died or answered nonsense.
    #[error("sandbox helper ended without an answer: {0}")]
    NoAnswer(String),
}

/// How long the git query for tracked files may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(10);

fn run_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}-{:x}-{}",
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Test-run `command` (as `bash -c`) in a mirror of `config.workspace` and judge it.
///
/// Returns `Ok` whenever the command ran, whatever it did; `Err` when no sandboxed run
/// happened (never an unsandboxed one). Same as `prepare(config)?.run(config, command)`.
pub fn run(config: &RunConfig, command: &str) -> Result<TestRun, SandboxError> {
    prepare(config)?.run(config, command)
}

/// A warm helper: started, holding its lock, inside its fresh cgroups, waiting for a command.
///
/// Joining a cgroup costs an RCU grace period on cgroup v1 (several milliseconds per
/// controller); a daemon keeps one `Prepared` ready ([`crate::mirror::Warm`]) so a run does not
/// pay it. A prepared helper is bound to nothing of a run: no project, no mount table (it
/// copies the mount namespace only at `Run`), no limits yet, no pipes (a mirrored run's come
/// over [`Prepared::send_fds`] with its `Run`). Dropping it unused stops the helper and removes
/// its bookkeeping.
pub struct Prepared {
    child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The helper's stderr, read by the reaper thread (`reaper.rs`).
    stderr: crate::reaper::Stderr,
    pub(crate) run_id: String,
    state_dir: PathBuf,
    /// The program that was started (a warm helper serves only configs naming it).
    pub(crate) helper: HelperCommand,
    /// Our end of the socket that is the helper's fd 3: a mirrored run's output pipes (and
    /// proxy hand-off) go over it with SCM_RIGHTS right before its `Run`.
    channel: Option<OwnedFd>,
    done: bool,
    /// The kept dir made for a workspace overlay made ahead ([`prepare_ahead`]) until a run
    /// takes it; removed with an unused helper.
    pub(crate) kept_ahead: Option<PathBuf>,
    /// The kept dirs made for the `write=` trees of a whole mirror built ahead
    /// ([`prepare_ahead`]), in the trees' stores, until a run takes them; removed with an
    /// unused helper.
    pub(crate) extra_ahead: Vec<KeptTree>,
}

/// Start a helper and prepare a run (lock, cgroups) without a command yet. Only
/// `config.helper` and `config.state_dir` are used here. The helper's fd 3 is one end of a Unix
/// socket pair ([`Prepared::send_fds`]).
pub fn prepare(config: &RunConfig) -> Result<Prepared, SandboxError> {
    prepare_ahead(config, None, None)
}

/// [`prepare`], and when `overlay` names a workspace (canonical) and the runs dir of its store,
/// the helper also makes that workspace's overlay ahead in `<runs>/<run id>` (made here, empty:
/// a mirrored run's kept dir), for a next run in the same project (`helper::PreparedOverlay`);
/// with `whole` too (that project's run config as a mirrored run's request has it, and the
/// stores of its kept `write=` trees, `mirror::Warm::fill`), the whole mirror of a run with that
/// config (`helper::Whole`), with each kept tree's dir made here as the run would
/// (`mirror::keep_extra`).
pub(crate) fn prepare_ahead(
    config: &RunConfig,
    overlay: Option<(PathBuf, PathBuf)>,
    whole: Option<(RunConfig, crate::mirror::KeptStores)>,
) -> Result<Prepared, SandboxError> {
    let helper = &config.helper;
    let name = helper.program.display().to_string();
    let io_err = |e| SandboxError::Helper(name.clone(), e);
    let (ours, theirs) =
        crate::init::socket_pair().ok_or_else(|| io_err(std::io::Error::last_os_error()))?;
    let mut command = Command::new(&helper.program);
    command
        .args(&helper.args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let channel = theirs.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl and dup2,
    // which are async-signal-safe; it allocates nothing and touches no lock.
    unsafe {
        command.pre_exec(move || {
            // Out of the way first (it may already be fd 3), then placed; dup2 clears
            // close-on-exec on the copy only.
            let high = libc::fcntl(channel, libc::F_DUPFD_CLOEXEC, 10);
            if high < 0 || libc::dup2(high, FD_CHANNEL) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let spawned = command.spawn();
    // Only the helper holds the other end: its exit is our EOF.
    drop(theirs);
    let mut child = spawned.map_err(io_err)?;
    let stderr = child
        .stderr
        .take()
        .map(crate::reaper::read_stderr)
        .unwrap_or_default();
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(io_err(std::io::Error::other("helper pipes missing")));
    };
    let mut prepared = Prepared {
        child,
        stdin: Some(stdin),
        stdout: BufReader::new(stdout),
        stderr,
        run_id: run_id(),
        state_dir: config.state_dir.clone(),
        helper: helper.clone(),
        channel: Some(ours),
        done: false,
        kept_ahead: None,
        extra_ahead: Vec::new(),
    };
    let overlay = overlay.and_then(|(workspace, runs)| {
        let keep = runs.join(&prepared.run_id);
        std::fs::create_dir(&keep).ok()?;
        prepared.kept_ahead = Some(keep.clone());
        Some(OverlayAhead { workspace, keep })
    });
    // The request of a run with that config, as `mirror::start_with` will send it but for the
    // command, its working directory and environment.
    let whole = match (&overlay, whole) {
        (Some(ahead), Some((config, stores))) if config.workspace == ahead.workspace => {
            // Not made (another process's name in the way): no mirror ahead, as for a proxy.
            let extra = crate::mirror::keep_extra(&stores, &prepared.run_id).ok();
            prepared
                .extra_ahead
                .clone_from(extra.as_ref().unwrap_or(&Vec::new()));
            extra.map(|extra| {
                Box::new(HelperRequest {
                    run_id: prepared.run_id.clone(),
                    command: String::new(),
                    mirror: Some(MirrorSpec {
                        keep: ahead.keep.clone(),
                        cwd: ahead.workspace.clone(),
                        upper_bytes: config.limits.upper_bytes,
                        extra,
                        since: None,
                    }),
                    config,
                })
            })
        }
        _ => None,
    };
    prepared.send(&ParentMessage::Prepare {
        run_id: prepared.run_id.clone(),
        state_dir: prepared.state_dir.clone(),
        overlay,
        whole,
    })?;
    match prepared.receive()? {
        HelperReply::Ready => Ok(prepared),
        HelperReply::Failed { stage, message } => Err(SandboxError::Setup { stage, message }),
        HelperReply::Done(_) | HelperReply::Store(_) => Err(SandboxError::NoAnswer(
            "answered a run or a store operation to Prepare".into(),
        )),
    }
}

/// The helper's fd that carries a mirrored run's pipes ([`Prepared::send_fds`]).
pub(crate) const FD_CHANNEL: i32 = 3;

impl Prepared {
    /// Hand the helper `fds` (a mirrored run's stdout and stderr pipes, then the proxy
    /// hand-off) in one message on its fd 3, to be taken with the next `Run`. Once only.
    pub(crate) fn send_fds(&mut self, fds: &[std::os::fd::RawFd]) -> Result<(), SandboxError> {
        let channel = self
            .channel
            .take()
            .ok_or_else(|| SandboxError::NoAnswer("the helper's fd channel is spent".into()))?;
        crate::init::send_fds(&channel, fds)
            .map_err(|e| SandboxError::Helper("fd channel".into(), e.into()))
    }

    /// The state dir the helper was prepared with.
    pub(crate) fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The helper process has not exited (a warm helper may have been killed while it waited).
    pub(crate) fn alive(&mut self) -> bool {
        !self.done && matches!(self.child.try_wait(), Ok(None))
    }

    pub(crate) fn send(&mut self, msg: &ParentMessage) -> Result<(), SandboxError> {
        let mut line = serde_json::to_vec(msg)
            .map_err(|e| SandboxError::Helper("request".into(), std::io::Error::other(e)))?;
        line.push(b'\n');
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| SandboxError::NoAnswer("helper stdin already closed".into()))?;
        stdin
            .write_all(&line)
            .and_then(|()| stdin.flush())
            .map_err(|e| SandboxError::Helper("stdin".into(), e))
    }

    pub(crate) fn receive(&mut self) -> Result<HelperReply, SandboxError> {
        let mut answer = String::new();
        let _ = self.stdout.read_line(&mut answer);
        serde_json::from_str::<HelperReply>(&answer).map_err(|_| {
            // No (valid) answer: the helper died. Collect its status and stderr for the error.
            drop(self.stdin.take());
            let status = self.child.wait();
            let stderr = self.stderr.wait();
            SandboxError::NoAnswer(format!("status {status:?}, stderr: {}", stderr.trim()))
        })
    }

    /// Run `command` in the prepared mirror and judge it (see [`run`]). `config.state_dir`
    /// must be the one the helper was prepared with.
    pub fn run(mut self, config: &RunConfig, command: &str) -> Result<TestRun, SandboxError> {
        if config.state_dir != self.state_dir {
            return Err(SandboxError::Config(
                "state_dir differs from the prepared helper's".into(),
            ));
        }
        let workspace = config.workspace.canonicalize().map_err(|e| {
            SandboxError::Config(format!("workspace {}: {e}", config.workspace.display()))
        })?;
        let mut config = config.clone();
        config.workspace = workspace;
        if let Some(home) = &config.home {
            config.home = home.canonicalize().ok();
        }
        self.send(&ParentMessage::Run(Box::new(HelperRequest {
            run_id: self.run_id.clone(),
            command: command.to_string(),
            config: config.clone(),
            mirror: None,
        })))?;
        // Stdin stays open until the answer arrives: its hang-up tells the helper we are gone.
        let reply = self.receive();
        self.finish();
        let raw = match reply? {
            HelperReply::Done(raw) => raw,
            HelperReply::Failed { stage, message } => {
                return Err(SandboxError::Setup { stage, message })
            }
            HelperReply::Ready | HelperReply::Store(_) => {
                return Err(SandboxError::NoAnswer(
                    "answered Ready or Store to Run".into(),
                ))
            }
        };
        Ok(judge(&config, raw, false))
    }

    /// [`Prepared::finish`] off the caller's path, once the helper has answered: the helper's
    /// exit tears down its own mount namespace (an RCU grace period) and only then may its
    /// cgroups go; nothing of that concerns the run's result (its pid namespace, mounts and
    /// overlays are gone before the answer). A process that ends before the thread does leaves
    /// the cgroups to the orphaned helper (`helper::orphaned`) and the lock file to
    /// [`sweep_stale`].
    pub(crate) fn finish_later(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        drop(self.stdin.take());
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let (state_dir, run_id) = (self.state_dir.clone(), self.run_id.clone());
        // Our child: reaped by the process's reaper thread once it exited (the `Child` is never
        // waited on once `done`), no thread started here.
        crate::reaper::reap(pid, Box::new(move || cleanup_run(&state_dir, &run_id)));
    }

    /// Close stdin, reap the helper, remove its lock file and cgroups (it sat in them).
    pub(crate) fn finish(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        // The hang-up ends the helper in every state: a prepared one exits, a running one kills
        // its run first, a finished one is exiting anyway.
        drop(self.stdin.take());
        let _ = self.child.wait();
        cleanup_run(&self.state_dir, &self.run_id);
        // Unused: its overlay went with the helper; its upper and work dirs go now.
        if let Some(keep) = self.kept_ahead.take() {
            let _ = crate::mirror::remove_tree(&keep);
        }
        for kept in std::mem::take(&mut self.extra_ahead) {
            let _ = crate::mirror::remove_tree(&kept.keep);
        }
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        self.finish();
    }
}

pub(crate) fn judge(config: &RunConfig, raw: RawRun, mirrored: bool) -> TestRun {
    let check = verdict::paths_to_check(&raw.effects);
    let tracked = if check.is_empty() || config.allow_tracked_changes {
        Tracked::Known(Default::default())
    } else {
        tracked::query(&config.workspace, &check, GIT_TIMEOUT)
    };
    let (refusals, why): (Vec<_>, Vec<_>) = verdict::judge_each(
        &Outcome {
            exit: raw.exit,
            signal: raw.signal,
            timed_out: raw.timed_out,
            effects: &raw.effects,
            mirrored,
        },
        config,
        &tracked,
    )
    .into_iter()
    .unzip();
    TestRun {
        exit: raw.exit,
        signal: raw.signal,
        timed_out: raw.timed_out,
        duration: raw.duration,
        stdout: raw.stdout,
        stderr: raw.stderr,
        output_truncated: raw.output_truncated,
        effects: raw.effects,
        clean: why.is_empty(),
        why,
        refusals,
    }
}

/// Remove what a run left in `state_dir` if its helper is gone (idempotent).
fn cleanup_run(state_dir: &Path, run_id: &str) {
    let runs = state_dir.join("runs");
    let lock = runs.join(format!("{run_id}.lock"));
    // The lock file names the cgroups; if the helper died before writing them, look them up by
    // name under our own cgroups (where the helper, our child, created them).
    let cgroup = std::fs::read_to_string(&lock)
        .ok()
        .and_then(|text| serde_json::from_str::<RunCgroup>(&text).ok())
        .unwrap_or_else(|| RunCgroup::existing_for(run_id));
    let gone = remove_dirs(cgroup.dirs.iter().map(|(_, _, d)| d.as_path()));
    let _ = std::fs::remove_dir(runs.join(run_id));
    if gone {
        let _ = std::fs::remove_file(lock);
    }
    // Otherwise the lock file (unlocked, naming the cgroups) stays for the next sweep_stale.
}

/// Sweep runs left by crashed processes: every lock file whose helper is dead (its flock is
/// free) loses its cgroups (killing anything still in them), scratch dir and lock file.
/// Returns the run ids swept. Call at daemon start (and any time: live runs are skipped).
pub fn sweep_stale(state_dir: &Path) -> std::io::Result<Vec<String>> {
    // Run cgroups no lock file names any more (their creator and its state dir are gone).
    crate::cgroup::reap_orphans();
    let runs = state_dir.join("runs");
    let entries = match std::fs::read_dir(&runs) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut swept = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".lock") else {
            continue;
        };
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(entry.path())
        else {
            continue;
        };
        // Held until the run is cleaned up.
        let Ok(_held) = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        else {
            continue; // a live helper holds it
        };
        cleanup_run(state_dir, id);
        swept.push(id.to_string());
    }
    // Scratch dirs without a lock file (crash between the two creations).
    if let Ok(entries) = std::fs::read_dir(&runs) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && !path.with_extension("lock").exists() {
                let _ = std::fs::remove_dir(&path);
            }
        }
    }
    Ok(swept)
}
