//! The operator and a run's effects: `cmdgate runs show RUN --diff` (the diff of a kept
//! rolled-back run, or of a committed run from its journal) and `cmdgate apply RUN` (commit a
//! kept rolled-back run after reading it).
//!
//! An apply is the operator's decision, audited as such (a `run` row, decision `applied`, source
//! `operator`, the admin peer), committed by the same code as any run (`commit::apply` →
//! `commit::commit`: the same refusals and conflict check against the run's start, the same
//! journal, so `cmdgate undo` works on it). What it does not do on its own: place a change to a
//! protected path — the signed tier map, `.claude/`, a repository's config/hooks/info/modules, a
//! `.git` entry itself, a persistence file (`.mcp.json`, `.vscode/`, shell rc files, …). Those run
//! code later or change the gate; the diff shows them, and the apply refuses naming them unless
//! the operator passes `--include-protected` (recorded on the row).

use std::path::Path;

use cmdgate_policy::decide::protected::{effect_refusal, protected, Touch};
use cmdgate_sandbox::commit::{self, DiffLimits, FileChange, RunDiff};
use cmdgate_sandbox::keeper::KeeperApplyError;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::engine::notify::Note;
use crate::engine::{Engine, Peer};
use crate::store::audit::{self, AuditSource, Entry, Kind, RunEvent};
use crate::store::StoreError;

/// Limits for a diff stat only (notifications, the protected-path check reads the file list):
/// no text kept, small files compared, every entry listed up to a bound.
pub(crate) const STAT_LIMITS: DiffLimits = cmdgate_sandbox::keeper::STAT_LIMITS;

/// `POST /admin/runs/{run}/apply`'s body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApplyRequest {
    /// Also place changes to protected paths (tier map, `.claude/`, git config/hooks,
    /// persistence files); without it such a run is refused, naming them.
    pub include_protected: bool,
}

/// `POST /admin/runs/{run}/apply`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub run_id: String,
    /// The audit row of the decision.
    pub audit_id: i64,
    /// What the commit changed (workspace-relative, lossy text).
    pub changed: Vec<String>,
    /// `cmdgate undo RUN` restores the workspace to before the apply.
    pub undo: String,
}

/// Why an apply committed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// No kept run by that id (never kept, already applied, pruned).
    #[error("{0}")]
    Gone(String),
    /// Conflict, a refused entry, or protected paths without `include_protected`: nothing
    /// committed; the reason names the paths.
    #[error("{0}")]
    Refused(String),
    #[error("the audit could not be written: {0}")]
    Store(#[from] StoreError),
}

/// Why no diff.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Failed(String),
}

/// The masked paths a run opened (`Effect::MaskedOpen`), `~/`-relative under the agent's home.
pub(crate) fn masked_opens(effects: &[cmdgate_sandbox::Effect], home: &str) -> Vec<String> {
    let home = Path::new(home);
    effects
        .iter()
        .filter_map(|e| match e {
            cmdgate_sandbox::Effect::MaskedOpen { path } => Some(match path.strip_prefix(home) {
                Ok(rest) if !home.as_os_str().is_empty() => format!("~/{}", rest.display()),
                _ => path.display().to_string(),
            }),
            _ => None,
        })
        .collect()
}

/// Protected paths a diff would place, each with its reason.
fn protected_paths(diff: &RunDiff) -> Vec<String> {
    let mut out = Vec::new();
    for f in &diff.files {
        let rel = f.path.to_string_lossy();
        let touch = match f.change {
            FileChange::Added => Touch::Created,
            _ => Touch::Changed,
        };
        if let Some(why) = protected(&rel).or_else(|| effect_refusal(&rel, touch)) {
            out.push(format!("{rel}: {why}"));
        }
    }
    out
}

impl Engine {
    /// The diff of run `run_id` (kept, else from the journal).
    pub async fn run_diff(&self, run_id: String) -> Result<RunDiff, DiffError> {
        let state = self.runs.state_dir().to_path_buf();
        let id = run_id.clone();
        // Through the mirror helper when the daemon is not root (`keeper`).
        let keeper = self.runs.keeper();
        let result =
            tokio::task::spawn_blocking(move || keeper.diff(&state, &id, DiffLimits::default()))
                .await
                .map_err(|e| DiffError::Failed(format!("the diff thread failed: {e}")))?;
        result.map_err(|e| match e {
            commit::DiffError::NotFound(_) => DiffError::NotFound(e.to_string()),
            commit::DiffError::Io(..) => DiffError::Failed(e.to_string()),
        })
    }

    /// `cmdgate apply RUN`: commit a kept rolled-back run, as the operator's decision.
    pub async fn apply_run(
        &self,
        peer: Peer,
        run_id: String,
        req: ApplyRequest,
    ) -> Result<Applied, ApplyError> {
        // One journal operation at a time (undo, apply, keep+prune).
        let _one_at_a_time = self.runs.undo_lock.lock().await;
        let state = self.runs.state_dir().to_path_buf();
        let id = run_id.clone();
        let include_protected = req.include_protected;
        // Diff and commit where the store's privileges are: in this process when it is root,
        // else in the mirror helper (system mode), with the same checks either way.
        let keeper = self.runs.keeper();
        let result = tokio::task::spawn_blocking(move || {
            match keeper.diff(&state, &id, STAT_LIMITS) {
                Err(commit::DiffError::NotFound(_)) => {
                    return Err(KeeperApplyError::Gone(id));
                }
                Ok(d) if d.source != commit::DiffSource::Kept => {
                    // Committed (or undone) already: its journal, not a kept run.
                    return Err(KeeperApplyError::Gone(id));
                }
                Ok(d) if !d.complete => {
                    return Ok(Err(format!(
                        "the run is too large to check for protected paths ({})",
                        d.note.unwrap_or_default()
                    )))
                }
                Ok(d) if !include_protected => {
                    let protected = protected_paths(&d);
                    if !protected.is_empty() {
                        return Ok(Err(format!(
                            "it changes protected paths, which run code later or change the gate: \
                             {}. Pass --include-protected to apply them too",
                            protected.join("; ")
                        )));
                    }
                }
                Ok(_) => {}
                Err(e) => return Ok(Err(format!("cannot read the run: {e}"))),
            }
            keeper.apply(&state, &id).map(Ok)
        })
        .await
        .map_err(|e| ApplyError::Refused(format!("the apply thread failed: {e}")))?;
        let original = self.run_row(&run_id).await;
        let mut entry = Entry {
            at_ms: clock::now_ms(),
            kind: Kind::Run,
            source: Some(AuditSource::Operator),
            peer: Some(peer.to_string()),
            note: Some(crate::engine::runs::run_note(&run_id)),
            session: original.as_ref().and_then(|r| r.session.clone()),
            project: original.as_ref().and_then(|r| r.project.clone()),
            cwd: original.as_ref().and_then(|r| r.cwd.clone()),
            tool: Some("Bash".into()),
            command: original.as_ref().and_then(|r| r.command.clone()),
            ..Entry::default()
        };
        let refused = |why: String| {
            let mut e = entry.clone();
            e.decision = Some(RunEvent::ApplyRefused.into());
            e.reason = Some(format!("apply of run {run_id} refused: {why}"));
            e
        };
        let (report, workspace) = match result {
            Ok(Ok(done)) => done,
            Ok(Err(why)) => {
                self.store.append(refused(why.clone())).await?;
                return Err(ApplyError::Refused(why));
            }
            Err(KeeperApplyError::Gone(_)) => {
                let why = format!(
                    "run {run_id} is not kept: it was committed, already applied, never kept \
                     (killed, timed out, conflicted), or pruned (`[sandbox] keep_rolled_back_secs`)"
                );
                self.store.append(refused(why.clone())).await?;
                return Err(ApplyError::Gone(why));
            }
            Err(KeeperApplyError::NotCommitted(why)) => {
                self.store.append(refused(why.clone())).await?;
                return Err(ApplyError::Refused(why));
            }
        };
        let changed: Vec<String> = report
            .changes
            .iter()
            .map(|c| c.path.to_string_lossy().into_owned())
            .collect();
        entry.decision = Some(RunEvent::Applied.into());
        entry.project = entry
            .project
            .or_else(|| Some(workspace.to_string_lossy().into_owned()));
        entry.reason = Some(format!(
            "the operator applied rolled-back run {run_id}: {} paths changed{}; `cmdgate undo \
             {run_id}` restores them",
            changed.len(),
            if include_protected {
                " (protected paths included)"
            } else {
                ""
            }
        ));
        entry.sandbox = serde_json::to_string(&serde_json::json!({
            "run_id": run_id,
            "status": "applied",
            "commit": report,
            "undo": run_id,
            "include_protected": include_protected,
        }))
        .ok();
        // The operator's acceptance: this apply counts towards accepting the run's signature for
        // its command (when it has one: `engine/accept.rs`).
        let counted = original
            .as_ref()
            .and_then(|o| crate::engine::accept::of_row(o.sandbox.as_deref()))
            .zip(entry.project.clone());
        let promotion = self.config.promotion.clone();
        let row = self
            .store
            .write(move |c| {
                let row = audit::append(c, entry)?;
                if let Some(((key, class, Some(signature)), project)) = counted {
                    crate::engine::accept::record(
                        c,
                        &project,
                        &key,
                        Some(class.as_deref().unwrap_or_default()),
                        crate::engine::accept::Event::Applied(signature),
                        row.id,
                        &promotion,
                    )?;
                }
                Ok(row)
            })
            .await?;
        Ok(Applied {
            undo: run_id.clone(),
            run_id,
            audit_id: row.id,
            changed,
        })
    }

    /// In background mode a rolled-back run kept for the operator becomes a notification: its
    /// run id, diff stat and the two commands (never blocks: `Notifier::notify`).
    pub(crate) fn announce_kept(
        &self,
        issued: &crate::engine::tickets::Issued,
        outcome: &crate::engine::runs::Outcome,
    ) {
        let (true, Some(kept)) = (issued.background, &outcome.kept) else {
            return;
        };
        let id = &outcome.run_id;
        let stat = kept
            .stat
            .map_or_else(|| "diff not computed".to_owned(), |s| s.to_string());
        let _ = self.notifier.notify(Note {
            summary: format!("cmdgate: run {id} rolled back ({stat})"),
            body: format!(
                "`{}` in {}: {}\n{stat}; cmdgate runs show {id} --diff; cmdgate apply {id}",
                issued.command,
                issued.project.display(),
                outcome.message,
            ),
            urgent: false,
        });
    }

    /// The run's own `run` row (the mirrored run, not an apply or undo), if still in the audit.
    async fn run_row(&self, run_id: &str) -> Option<Entry> {
        self.find_run_row(run_id, |e| {
            (e.source == Some(cmdgate_policy::wire::Source::Sandbox.into())).then_some(e)
        })
        .await
    }

    /// The first of the newest run rows of run `run_id` (its note) that `pick` takes, if any is
    /// still in the audit.
    pub(super) async fn find_run_row<T: Send + 'static>(
        &self,
        run_id: &str,
        pick: impl Fn(Entry) -> Option<T> + Send + 'static,
    ) -> Option<T> {
        let note = crate::engine::runs::run_note(run_id);
        self.store
            .read(move |c| {
                let rows = audit::query(
                    c,
                    &audit::Query {
                        kind: Some(Kind::Run.as_str().into()),
                        limit: Some(10_000),
                        newest: true,
                        ..Default::default()
                    },
                )?;
                Ok(rows.into_iter().find_map(|r| {
                    (r.entry.note.as_deref() == Some(note.as_str()))
                        .then_some(r.entry)
                        .and_then(&pick)
                }))
            })
            .await
            .ok()
            .flatten()
    }
}
