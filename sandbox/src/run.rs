//! The library side of a test-run: start the helper, send the request, read the answer, judge.
//!
//! Blocking, and safe to call from any thread (the daemon calls it from `spawn_blocking`): the
//! helper is started with `std::process::Command` (fork+exec, nothing else in the child).

use crate::cgroup::remove_dirs;
use crate::config::RunConfig;
use crate::model::TestRun;
use crate::protocol::{HelperReply, HelperRequest};
use crate::tracked::{self, Tracked};
use crate::verdict::{self, Outcome};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
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
/// happened (never an unsandboxed one).
pub fn run(config: &RunConfig, command: &str) -> Result<TestRun, SandboxError> {
    let workspace = config.workspace.canonicalize().map_err(|e| {
        SandboxError::Config(format!("workspace {}: {e}", config.workspace.display()))
    })?;
    let mut config = config.clone();
    config.workspace = workspace;
    if let Some(home) = &config.home {
        config.home = home.canonicalize().ok();
    }
    let request = HelperRequest {
        run_id: run_id(),
        command: command.to_string(),
        config: config.clone(),
    };
    let raw = call_helper(&config, &request)?;

    let check = verdict::paths_to_check(&raw.effects);
    let tracked = if check.is_empty() || config.allow_tracked_changes {
        Tracked::Known(Default::default())
    } else {
        tracked::query(&config.workspace, &check, GIT_TIMEOUT)
    };
    let why = verdict::judge(
        &Outcome {
            exit: raw.exit,
            signal: raw.signal,
            timed_out: raw.timed_out,
            effects: &raw.effects,
        },
        &config,
        &tracked,
    );
    Ok(TestRun {
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
    })
}

fn call_helper(
    config: &RunConfig,
    request: &HelperRequest,
) -> Result<crate::protocol::RawRun, SandboxError> {
    let helper = &config.helper;
    let name = helper.program.display().to_string();
    let mut child = Command::new(&helper.program)
        .args(&helper.args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| SandboxError::Helper(name.clone(), e))?;
    let mut line = serde_json::to_vec(request)
        .map_err(|e| SandboxError::Helper(name.clone(), std::io::Error::other(e)))?;
    line.push(b'\n');
    // Keep stdin open until the answer arrives: its hang-up tells the helper we are gone.
    let mut stdin = child.stdin.take();
    if let Some(s) = stdin.as_mut() {
        s.write_all(&line)
            .and_then(|()| s.flush())
            .map_err(|e| SandboxError::Helper(name.clone(), e))?;
    }
    let mut stderr = child.stderr.take();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = stderr.as_mut() {
            let _ = e.take(64 << 10).read_to_string(&mut s);
        }
        s
    });
    let mut answer = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut answer);
    }
    drop(stdin);
    let status = child.wait();
    let helper_stderr = err_reader.join().unwrap_or_default();
    // Whatever happened to the helper, its bookkeeping must not outlive it.
    cleanup_run(&config.state_dir, &request.run_id);
    match serde_json::from_str::<HelperReply>(&answer) {
        Ok(HelperReply::Done(raw)) => Ok(raw),
        Ok(HelperReply::Failed { stage, message }) => Err(SandboxError::Setup { stage, message }),
        Err(_) => Err(SandboxError::NoAnswer(format!(
            "status {status:?}, stderr: {}",
            helper_stderr.trim()
        ))),
    }
}

/// Remove what a run left in `state_dir` if its helper is gone (idempotent).
fn cleanup_run(state_dir: &Path, run_id: &str) {
    let runs = state_dir.join("runs");
    let lock = runs.join(format!("{run_id}.lock"));
    if let Ok(text) = std::fs::read_to_string(&lock) {
        if let Ok(cg) = serde_json::from_str::<crate::cgroup::RunCgroup>(&text) {
            remove_dirs(cg.dirs.iter().map(|(_, _, d)| d.as_path()));
        }
    }
    let _ = std::fs::remove_dir(runs.join(run_id));
    let _ = std::fs::remove_file(lock);
}

/// Sweep runs left by crashed processes: every lock file whose helper is dead (its flock is
/// free) loses its cgroups (killing anything still in them), scratch dir and lock file.
/// Returns the run ids swept. Call at daemon start (and any time: live runs are skipped).
pub fn sweep_stale(state_dir: &Path) -> std::io::Result<Vec<String>> {
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
        use std::os::fd::AsRawFd;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            continue; // a live helper holds it
        }
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
