//! Who touches the mirror store after a run: this process when it is root, else the mirror helper.
//!
//! In system mode the daemon runs as its own unprivileged user and holds no capability
//! (systemd/README.md). A run's kept upper dir then holds the agent's files (the command ran as the
//! agent) and overlay markers in `trusted.overlay.*` xattrs (only readable with `CAP_SYS_ADMIN`),
//! and a commit renames them into the agent's workspace, which the daemon's user may not write.
//! So every operation on the store after the run — commit, discard, keep, diff, apply, undo,
//! recover, prune, the journal listing — is done by the same helper program that ran the mirror (with its file
//! capabilities), one process per operation, speaking [`ParentMessage::Store`] /
//! [`HelperReply::Store`]. A root caller does them itself (the helper would be itself).
//!
//! The helper acts only on stores listed in the state dir's `mirror-roots` (as in-process
//! operations do) and on run ids of the store's own shape ([`crate::mirror::load_kept`]).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::commit::{
    self, ApplyError, CommitConfig, CommitError, CommitReport, DiffError, DiffLimits, DiffStat,
    JournalEntry, JournalLimits, Problem, RecoverReport, RunDiff, UndoError, UndoReport,
};
use crate::config::HelperCommand;
use crate::mirror::{load_kept, KeptUpper};
use crate::protocol::{HelperReply, ParentMessage};

/// One operation on a state dir's mirror stores.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum StoreOp {
    /// Commit a kept run (`commit::commit`).
    Commit { state_dir: PathBuf, run_id: String },
    /// Remove a kept run's upper dir.
    Discard { state_dir: PathBuf, run_id: String },
    /// `commit::undo`.
    Undo { state_dir: PathBuf, run_id: String },
    /// `commit::recover`.
    Recover { state_dir: PathBuf },
    /// `commit::prune`.
    Prune {
        state_dir: PathBuf,
        limits: JournalLimits,
    },
    /// `commit::runs`.
    Runs { state_dir: PathBuf },
    /// Keep a rolled-back run for `ttl_secs` (`KeptUpper::keep_for`), then bound the store
    /// (`commit::prune`, then `commit::prune_kept` to `max_bytes`); with `stat`, its diff stat.
    Keep {
        state_dir: PathBuf,
        run_id: String,
        ttl_secs: u64,
        max_bytes: u64,
        limits: JournalLimits,
        stat: bool,
    },
    /// `commit::run_diff`.
    Diff {
        state_dir: PathBuf,
        run_id: String,
        limits: DiffLimits,
    },
    /// `commit::apply` of a kept run.
    Apply { state_dir: PathBuf, run_id: String },
}

/// Why a commit done by the helper committed nothing (the kept run stays in the store; the
/// caller discards it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotCommitted {
    Killed,
    Conflict,
    Refused,
    Io,
    Journal,
}

/// The helper's answer to a [`StoreOp`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum StoreReply {
    Committed(CommitReport),
    NotCommitted {
        kind: NotCommitted,
        problems: Vec<Problem>,
        path: PathBuf,
        message: String,
    },
    Undone(UndoReport),
    UndoFailed(UndoError),
    Recovered(RecoverReport),
    Pruned(Vec<String>),
    Runs(Vec<JournalEntry>),
    Discarded,
    /// The run is kept (`dropped`: `prune_kept` removed it at once, the store being full).
    Kept {
        dropped: bool,
        stat: Option<DiffStat>,
    },
    Diff(Box<RunDiff>),
    /// No kept or committed run by that id.
    DiffNotFound(String),
    /// A kept run was committed; `workspace` is the one it was committed to.
    Applied {
        report: CommitReport,
        workspace: PathBuf,
    },
    /// No kept run by that id (never kept, pruned, already applied).
    ApplyGone(String),
    /// The operation could not be done (a bad id, no such kept run, IO).
    Failed(String),
}

/// The helper that does store operations for a non-root caller; `None` when this process is
/// root and does them itself.
pub fn privileged(helper: &HelperCommand) -> Option<HelperCommand> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    (!root).then(|| helper.clone())
}

/// Runs one store operation in the helper: one process, one request line, one answer line.
pub fn call(helper: &HelperCommand, op: StoreOp) -> Result<StoreReply, String> {
    let name = helper.program.display().to_string();
    let mut child = Command::new(&helper.program)
        .args(&helper.args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the mirror helper {name}: {e}"))?;
    let mut line =
        serde_json::to_vec(&ParentMessage::Store(op)).map_err(|e| format!("request: {e}"))?;
    line.push(b'\n');
    let sent = child
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(&line).and_then(|()| stdin.flush()));
    let mut answer = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut answer);
    }
    let reply = serde_json::from_str::<HelperReply>(&answer);
    let output = match reply {
        // Answered: the operation is done. What the helper does before it exits — removing
        // the spent dirs it moved to the store's trash (`trash`) — need not hold up the
        // caller: it is reaped (and its stderr drained) on a thread.
        Ok(_) => {
            let reaped = std::thread::Builder::new()
                .name("store-helper-reap".into())
                .spawn(move || child.wait_with_output());
            if let Err(e) = reaped {
                eprintln!("cmdgate: reaping the mirror helper {name}: {e}");
            }
            None
        }
        Err(_) => Some(
            child
                .wait_with_output()
                .map_err(|e| format!("the mirror helper {name}: {e}"))?,
        ),
    };
    match reply {
        Ok(HelperReply::Store(reply)) => Ok(reply),
        Ok(HelperReply::Failed { stage, message }) => Err(format!("{stage}: {message}")),
        Ok(other) => Err(format!(
            "the mirror helper answered {other:?} to a store operation"
        )),
        Err(_) => {
            let (status, stderr) = output
                .map(|o| (o.status.to_string(), o.stderr))
                .unwrap_or_default();
            Err(format!(
                "the mirror helper {name} gave no answer (sent: {}, status {status}, stderr: {})",
                sent.map_or("no stdin".into(), |r| format!("{r:?}")),
                String::from_utf8_lossy(&stderr).trim()
            ))
        }
    }
}

/// The helper's side: does `op` (it runs with the helper's privileges).
pub fn serve(op: StoreOp) -> StoreReply {
    match op {
        StoreOp::Commit { state_dir, run_id } => match load_kept(&state_dir, &run_id) {
            Err(e) => StoreReply::Failed(e.to_string()),
            Ok(kept) => match commit::commit(kept, &CommitConfig::default()) {
                Ok(report) => StoreReply::Committed(report),
                Err(e) => not_committed(e),
            },
        },
        StoreOp::Discard { state_dir, run_id } => match load_kept(&state_dir, &run_id) {
            Err(e) => StoreReply::Failed(e.to_string()),
            Ok(kept) => match kept.discard() {
                Ok(()) => StoreReply::Discarded,
                Err(e) => StoreReply::Failed(format!("discarding run {run_id}: {e}")),
            },
        },
        StoreOp::Undo { state_dir, run_id } => match commit::undo(&state_dir, &run_id) {
            Ok(report) => StoreReply::Undone(report),
            Err(e) => StoreReply::UndoFailed(e),
        },
        StoreOp::Recover { state_dir } => StoreReply::Recovered(commit::recover(&state_dir)),
        StoreOp::Prune { state_dir, limits } => {
            StoreReply::Pruned(commit::prune(&state_dir, &limits))
        }
        StoreOp::Runs { state_dir } => StoreReply::Runs(commit::runs(&state_dir)),
        StoreOp::Keep {
            state_dir,
            run_id,
            ttl_secs,
            max_bytes,
            limits,
            stat,
        } => keep_here(&state_dir, &run_id, ttl_secs, max_bytes, &limits, stat),
        StoreOp::Diff {
            state_dir,
            run_id,
            limits,
        } => match commit::run_diff(&state_dir, &run_id, limits) {
            Ok(diff) => StoreReply::Diff(Box::new(diff)),
            Err(DiffError::NotFound(id)) => StoreReply::DiffNotFound(id),
            Err(e) => StoreReply::Failed(e.to_string()),
        },
        StoreOp::Apply { state_dir, run_id } => apply_here(&state_dir, &run_id),
    }
}

/// [`StoreOp::Keep`] in this process.
fn keep_here(
    state_dir: &Path,
    run_id: &str,
    ttl_secs: u64,
    max_bytes: u64,
    limits: &JournalLimits,
    stat: bool,
) -> StoreReply {
    match load_kept(state_dir, run_id) {
        Ok(kept) => keep_loaded(kept, ttl_secs, max_bytes, limits, stat),
        Err(e) => StoreReply::Failed(e.to_string()),
    }
}

/// Keeps `kept` and bounds its store (see [`StoreOp::Keep`]).
fn keep_loaded(
    kept: KeptUpper,
    ttl_secs: u64,
    max_bytes: u64,
    limits: &JournalLimits,
    stat: bool,
) -> StoreReply {
    let (state_dir, run_id) = (kept.state_dir.clone(), kept.run_id().to_owned());
    if let Err(e) = kept.keep_for(std::time::Duration::from_secs(ttl_secs)) {
        return StoreReply::Failed(format!("keeping run {run_id}: {e}"));
    }
    commit::prune(&state_dir, limits);
    if commit::prune_kept(&state_dir, max_bytes).contains(&run_id) {
        return StoreReply::Kept {
            dropped: true,
            stat: None,
        };
    }
    let stat = stat
        .then(|| {
            commit::run_diff(&state_dir, &run_id, STAT_LIMITS)
                .ok()
                .map(|d| d.stat)
        })
        .flatten();
    StoreReply::Kept {
        dropped: false,
        stat,
    }
}

/// Limits for a diff stat only: no text kept, small files compared, every entry listed up to a
/// bound.
pub const STAT_LIMITS: DiffLimits = DiffLimits {
    max_output: 0,
    max_file_bytes: 256 << 10,
    max_files: 100_000,
};

/// [`StoreOp::Apply`] in this process: the kept run's workspace, then `commit::apply`.
fn apply_here(state_dir: &Path, run_id: &str) -> StoreReply {
    let Some(kept) = commit::kept_runs(state_dir)
        .into_iter()
        .find(|k| k.run_id == run_id)
    else {
        return StoreReply::ApplyGone(run_id.to_owned());
    };
    match commit::apply(state_dir, run_id, &CommitConfig::default()) {
        Ok(report) => StoreReply::Applied {
            report,
            workspace: kept.workspace,
        },
        Err(ApplyError::Gone(id)) => StoreReply::ApplyGone(id),
        Err(ApplyError::Commit(e)) => not_committed(e),
    }
}

fn not_committed(e: CommitError) -> StoreReply {
    let message = e.to_string();
    let (kind, problems, path) = match e {
        CommitError::Killed(_) => (NotCommitted::Killed, Vec::new(), PathBuf::new()),
        CommitError::Conflict { problems, .. } => {
            (NotCommitted::Conflict, problems, PathBuf::new())
        }
        CommitError::Refused { problems, .. } => (NotCommitted::Refused, problems, PathBuf::new()),
        CommitError::Io { path, .. } => (NotCommitted::Io, Vec::new(), path),
        CommitError::Stopped(_) | CommitError::Journal(_) => {
            (NotCommitted::Journal, Vec::new(), PathBuf::new())
        }
    };
    // Whatever was not committed stays in the store until the caller discards it.
    StoreReply::NotCommitted {
        kind,
        problems,
        path,
        message,
    }
}

/// The caller's side of the store: in this process, or through the helper.
#[derive(Clone, Debug)]
pub struct Keeper {
    helper: Option<HelperCommand>,
}

impl Keeper {
    /// Store operations through `helper` unless this process is root.
    pub fn new(helper: &HelperCommand) -> Keeper {
        Keeper {
            helper: privileged(helper),
        }
    }

    /// Whether operations go through the helper.
    pub fn through_helper(&self) -> bool {
        self.helper.is_some()
    }

    /// `commit::commit`, where the store's privileges are. On an error the kept run is handed
    /// back as `commit::commit` does.
    pub fn commit(
        &self,
        kept: KeptUpper,
        config: &CommitConfig,
    ) -> Result<CommitReport, CommitError> {
        self.commit_spent(kept, config)
            .map(|(report, _spent)| report)
    }

    /// [`Keeper::commit`], handing back what is left of the kept dirs (`commit::Spent`: dropped,
    /// it disposes of them) for a caller that disposes of it later; through the helper, the
    /// helper disposed of it and nothing is left here.
    pub fn commit_spent(
        &self,
        kept: KeptUpper,
        config: &CommitConfig,
    ) -> Result<(CommitReport, commit::Spent), CommitError> {
        let Some(helper) = &kept.helper else {
            return commit::commit_spent(kept, config);
        };
        let op = StoreOp::Commit {
            state_dir: kept.state_dir.clone(),
            run_id: kept.run_id().to_owned(),
        };
        let io = |path: PathBuf, why: String, kept: KeptUpper| CommitError::Io {
            path,
            source: std::io::Error::other(why),
            kept: Box::new(kept),
        };
        match call(helper, op) {
            Ok(StoreReply::Committed(report)) => {
                let mut kept = kept;
                kept.done = true; // the helper removed it
                Ok((report, commit::Spent::none()))
            }
            Ok(StoreReply::NotCommitted {
                kind,
                problems,
                path,
                message,
            }) => Err(match kind {
                NotCommitted::Killed => CommitError::Killed(Box::new(kept)),
                NotCommitted::Conflict => CommitError::Conflict {
                    problems,
                    kept: Box::new(kept),
                },
                NotCommitted::Refused => CommitError::Refused {
                    problems,
                    kept: Box::new(kept),
                },
                NotCommitted::Io => io(path, message, kept),
                NotCommitted::Journal => {
                    let mut kept = kept;
                    kept.done = true; // the journal holds it; `recover` repairs
                    CommitError::Journal(message)
                }
            }),
            Ok(other) => Err(io(
                kept.workspace().to_path_buf(),
                format!("the mirror helper answered {other:?}"),
                kept,
            )),
            Err(why) => Err(io(kept.workspace().to_path_buf(), why, kept)),
        }
    }

    /// `commit::undo`.
    pub fn undo(&self, state_dir: &Path, run_id: &str) -> Result<UndoReport, UndoError> {
        let Some(helper) = &self.helper else {
            return commit::undo(state_dir, run_id);
        };
        let op = StoreOp::Undo {
            state_dir: state_dir.to_path_buf(),
            run_id: run_id.to_owned(),
        };
        match call(helper, op) {
            Ok(StoreReply::Undone(report)) => Ok(report),
            Ok(StoreReply::UndoFailed(e)) => Err(e),
            Ok(other) => Err(UndoError::Io(format!(
                "the mirror helper answered {other:?}"
            ))),
            Err(why) => Err(UndoError::Io(why)),
        }
    }

    /// `commit::recover`; a helper that cannot be asked reports nothing recovered (the journal
    /// stays for the next start) and says why on stderr.
    pub fn recover(&self, state_dir: &Path) -> RecoverReport {
        let Some(helper) = &self.helper else {
            return commit::recover(state_dir);
        };
        let op = StoreOp::Recover {
            state_dir: state_dir.to_path_buf(),
        };
        match call(helper, op) {
            Ok(StoreReply::Recovered(report)) => report,
            other => {
                eprintln!("cmdgate: recovering the mirror store through the helper: {other:?}");
                RecoverReport::default()
            }
        }
    }

    /// `commit::prune`.
    pub fn prune(&self, state_dir: &Path, limits: &JournalLimits) -> Vec<String> {
        let Some(helper) = &self.helper else {
            return commit::prune(state_dir, limits);
        };
        let op = StoreOp::Prune {
            state_dir: state_dir.to_path_buf(),
            limits: *limits,
        };
        match call(helper, op) {
            Ok(StoreReply::Pruned(pruned)) => pruned,
            _ => Vec::new(),
        }
    }

    /// Keeps rolled-back run `kept` for `ttl_secs` and bounds the store ([`StoreOp::Keep`]),
    /// where the store's privileges are: `Ok(None)` when the byte bound dropped it at once, else
    /// its diff stat (with `stat`). On an error the run is discarded (dropped).
    pub fn keep(
        &self,
        kept: KeptUpper,
        ttl_secs: u64,
        max_bytes: u64,
        limits: &JournalLimits,
        stat: bool,
    ) -> Result<Option<Option<DiffStat>>, String> {
        let reply = match kept.helper.clone() {
            None => keep_loaded(kept, ttl_secs, max_bytes, limits, stat),
            Some(helper) => {
                let reply = call(
                    &helper,
                    StoreOp::Keep {
                        state_dir: kept.state_dir.clone(),
                        run_id: kept.run_id().to_owned(),
                        ttl_secs,
                        max_bytes,
                        limits: *limits,
                        stat,
                    },
                )?;
                if matches!(reply, StoreReply::Kept { .. }) {
                    let mut kept = kept;
                    kept.done = true; // the helper kept it
                }
                reply
            }
        };
        match reply {
            StoreReply::Kept { dropped: true, .. } => Ok(None),
            StoreReply::Kept { stat, .. } => Ok(Some(stat)),
            StoreReply::Failed(why) => Err(why),
            other => Err(format!("the mirror helper answered {other:?}")),
        }
    }

    /// `commit::run_diff`, where the store's privileges are (a kept upper holds the agent's
    /// files and overlay markers the daemon's user cannot read).
    pub fn diff(
        &self,
        state_dir: &Path,
        run_id: &str,
        limits: DiffLimits,
    ) -> Result<RunDiff, DiffError> {
        let Some(helper) = &self.helper else {
            return commit::run_diff(state_dir, run_id, limits);
        };
        let op = StoreOp::Diff {
            state_dir: state_dir.to_path_buf(),
            run_id: run_id.to_owned(),
            limits,
        };
        match call(helper, op) {
            Ok(StoreReply::Diff(diff)) => Ok(*diff),
            Ok(StoreReply::DiffNotFound(id)) => Err(DiffError::NotFound(id)),
            Ok(StoreReply::Failed(why)) => Err(DiffError::Io(run_id.to_owned(), why)),
            Ok(other) => Err(DiffError::Io(
                run_id.to_owned(),
                format!("the mirror helper answered {other:?}"),
            )),
            Err(why) => Err(DiffError::Io(run_id.to_owned(), why)),
        }
    }

    /// `commit::apply` of kept run `run_id`: what it committed and to which workspace.
    pub fn apply(
        &self,
        state_dir: &Path,
        run_id: &str,
    ) -> Result<(CommitReport, PathBuf), KeeperApplyError> {
        let reply = match &self.helper {
            None => apply_here(state_dir, run_id),
            Some(helper) => call(
                helper,
                StoreOp::Apply {
                    state_dir: state_dir.to_path_buf(),
                    run_id: run_id.to_owned(),
                },
            )
            .map_err(KeeperApplyError::NotCommitted)?,
        };
        match reply {
            StoreReply::Applied { report, workspace } => Ok((report, workspace)),
            StoreReply::ApplyGone(id) => Err(KeeperApplyError::Gone(id)),
            StoreReply::NotCommitted { message, .. } | StoreReply::Failed(message) => {
                Err(KeeperApplyError::NotCommitted(message))
            }
            other => Err(KeeperApplyError::NotCommitted(format!(
                "the mirror helper answered {other:?}"
            ))),
        }
    }

    /// `commit::runs`.
    pub fn runs(&self, state_dir: &Path) -> Result<Vec<JournalEntry>, String> {
        let Some(helper) = &self.helper else {
            return Ok(commit::runs(state_dir));
        };
        let op = StoreOp::Runs {
            state_dir: state_dir.to_path_buf(),
        };
        match call(helper, op)? {
            StoreReply::Runs(runs) => Ok(runs),
            other => Err(format!("the mirror helper answered {other:?}")),
        }
    }
}

/// Why [`Keeper::apply`] committed nothing.
#[derive(Debug, thiserror::Error)]
pub enum KeeperApplyError {
    /// No kept run by that id.
    #[error("run {0} is not kept (it was committed, already applied, never kept, or pruned)")]
    Gone(String),
    /// The commit refused, conflicted or failed (the message says which); the kept run stays.
    #[error("{0}")]
    NotCommitted(String),
}

/// Discards a kept run through the helper (`KeptUpper::discard` and its drop, non-root).
pub(crate) fn discard_through(
    helper: &HelperCommand,
    state_dir: &Path,
    run_id: &str,
) -> std::io::Result<()> {
    let op = StoreOp::Discard {
        state_dir: state_dir.to_path_buf(),
        run_id: run_id.to_owned(),
    };
    match call(helper, op) {
        Ok(StoreReply::Discarded) => Ok(()),
        Ok(other) => Err(std::io::Error::other(format!(
            "the mirror helper answered {other:?}"
        ))),
        Err(why) => Err(std::io::Error::other(why)),
    }
}
