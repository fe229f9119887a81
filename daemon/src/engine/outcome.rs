//! What happened after a decision: the hook's outcome reports (PostToolUse/PostToolUseFailure),
//! which feed the breaker and the learned allowlist, and the hook's spool of reports and local
//! allows it could not deliver. Spool lines come from the agent's uid: claims for the audit, never
//! authority.

use std::path::{Path, PathBuf};

use cmdgate_policy::breaker::{Integrity, Signal};
use cmdgate_policy::decide::canonical_key;
use cmdgate_policy::learn::{LearnEvent, PromotionContext};
use cmdgate_policy::shell::{self, Analysis, Limits};
use cmdgate_policy::wire::{self, OutcomeReport};
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::engine::breakers::persist_breakers;
use crate::engine::learning::apply_learning;
use crate::engine::record::{sanitize, summarize_tool};
use crate::engine::{Engine, EngineError, Peer};
use crate::store::audit::{self, AuditSource, Entry, Kind, TierSeen};
use crate::store::StoreError;

/// `POST /v1/spool/ingest`: how many spool lines were recorded and how many skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpoolIngested {
    pub ingested: u64,
    pub skipped: u64,
    /// `"spool_dir": null` says no spool directory is configured; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spool_dir: Option<Option<PathBuf>>,
}

/// Why the hook's spool could not be ingested.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("cannot take the spool {path}: {source}")]
    Take {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} is not a regular file; not ingested")]
    NotAFile(PathBuf),
    #[error("cannot read the spool copy {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the spool file could not be handled off the async runtime: {0}")]
    Aborted(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl From<StoreError> for SpoolError {
    fn from(e: StoreError) -> SpoolError {
        SpoolError::Engine(EngineError::Store(e))
    }
}

/// Takes the spool aside (a copy left by a crash first) and reads it; `None` when there is none.
/// File-system IO: runs on the blocking pool.
fn take_spool(live: PathBuf, taken: PathBuf) -> Result<Option<String>, SpoolError> {
    // A copy left by a crash is ingested first; otherwise take the live file.
    if !taken.exists() {
        match std::fs::symlink_metadata(&live) {
            Ok(m) if m.file_type().is_file() => {
                std::fs::rename(&live, &taken)
                    .map_err(|source| SpoolError::Take { path: live, source })?;
            }
            Ok(_) => return Err(SpoolError::NotAFile(live)),
            Err(_) => return Ok(None),
        }
    }
    read_bounded(&taken)
        .map(Some)
        .map_err(|source| SpoolError::Read {
            path: taken,
            source,
        })
}

/// Largest spool file ingested at once; the rest waits for the next round.
const MAX_SPOOL_BYTES: u64 = 16 << 20;

impl Engine {
    /// Records an outcome report (from the hook, or from its spool with why it was undelivered).
    pub(crate) async fn outcome(
        &self,
        peer: Option<Peer>,
        report: OutcomeReport,
        spooled: Option<String>,
    ) -> Result<i64, EngineError> {
        let now = clock::now();
        // A call routed through `cmdgate-run`: its run row already carried the breaker signal
        // (from its effects; a failing test suite is ordinary work), unless Claude Code reports
        // having run something else — an integrity event.
        let routed = self.tickets.routed(&report.tool_use_id).is_some();
        self.check_rewrite(&report).await?;
        // An interrupted call says nothing about the command: the person stopped it.
        let signal = match (report.success, report.interrupted) {
            _ if routed => None,
            (true, _) => Some(Signal::Success),
            (false, false) => Some(Signal::FailedOutcome),
            (false, true) => None,
        };
        let changes = match signal {
            Some(s) => self.breakers.record(&report.agent.session_id, s, now).await,
            None => Vec::new(),
        };
        let (breaker_open, ticked) = self.breakers.is_open(&report.agent.session_id, now).await;
        let changes = [changes, ticked].concat();
        let promotion = self.config.promotion.clone();
        let entry = Entry {
            at_ms: clock::now_ms(),
            kind: Kind::Outcome,
            session: Some(report.agent.session_id.clone()),
            agent_id: report.agent.agent_id.clone(),
            agent_type: report.agent.agent_type.clone(),
            permission_mode: report.agent.permission_mode.clone(),
            tool_use_id: Some(report.tool_use_id.clone()),
            tool: Some(report.tool_name.clone()),
            success: Some(report.success),
            exit_code: report.exit_code.map(i64::from),
            interrupted: Some(report.interrupted),
            duration_ms: report.duration_ms.and_then(|d| i64::try_from(d).ok()),
            error: report.error.clone(),
            peer: peer.map(|p| p.to_string()),
            note: spooled.map(|why| format!("from the hook's spool (undelivered: {why})")),
            ..Entry::default()
        };
        let (row_id, learned) = self
            .store
            .write(move |c| {
                let mut entry = entry;
                let decision = audit::decision_for(c, &report.tool_use_id)?;
                entry.decision_id = decision;
                let row = audit::append(c, entry)?;
                persist_breakers(c, &changes, Some(row.id))?;
                let mut learned = false;
                if let Some(decision_row) =
                    decision.map(|id| audit::get(c, id)).transpose()?.flatten()
                {
                    let e = &decision_row.entry;
                    let earned = e.verdict() == Some(wire::Verdict::Allow)
                        && matches!(
                            e.source,
                            Some(AuditSource::Wire(
                                wire::Source::Sandbox | wire::Source::Learned
                            ))
                        )
                        && e.tool.as_deref() == Some("Bash");
                    if let (true, Some(project), Some(command)) = (earned, &e.project, &e.command) {
                        if let Analysis::Parsed(script) =
                            shell::analyze(command, &Limits::default())
                        {
                            let key = canonical_key(&script);
                            let event = if report.success {
                                LearnEvent::RealSuccess(row.id)
                            } else {
                                LearnEvent::RealFailure(row.id)
                            };
                            if report.success || !report.interrupted {
                                learned = apply_learning(
                                    c,
                                    project,
                                    &key,
                                    event,
                                    PromotionContext {
                                        needs_person_or_denied: matches!(
                                            e.tier,
                                            Some(TierSeen::Ask | TierSeen::Deny)
                                        ),
                                        breaker_open,
                                        classification: None,
                                    },
                                    &promotion,
                                )?;
                            }
                        }
                    }
                }
                Ok((row.id, learned))
            })
            .await?;
        if learned {
            self.reload_rules().await?;
        }
        Ok(row_id)
    }

    /// `POST /v1/record`: what a system-mode hook did by itself (a local allow), sent right after
    /// its answer because the daemon cannot read the agent's spool. Audited with the peer's uid,
    /// as a claim. A record naming another uid's session is refused like a decide would be.
    pub(crate) async fn record(
        &self,
        peer: Peer,
        record: wire::SpoolRecord,
    ) -> Result<Result<(), String>, EngineError> {
        let session = match &record.entry {
            wire::SpoolEntry::LocalAllow { agent, .. }
            | wire::SpoolEntry::EscapeHatch { agent, .. } => agent.session_id.clone(),
            wire::SpoolEntry::Outcome { report, .. } => report.agent.session_id.clone(),
        };
        if let Err(why) = self.claim_session(peer, &session).await {
            return Ok(Err(why));
        }
        let at_ms = i64::try_from(record.at_ms).unwrap_or(0);
        match record.entry {
            wire::SpoolEntry::Outcome {
                report,
                undelivered,
            } => {
                self.outcome(Some(peer), report, Some(undelivered)).await?;
            }
            entry @ wire::SpoolEntry::LocalAllow { .. } => {
                if let Some(e) = local_allow_entry(at_ms, entry, Some(peer), "sent by the hook") {
                    self.store.append(e).await?;
                }
            }
            entry @ wire::SpoolEntry::EscapeHatch { .. } => {
                self.escape_hatch_claim(at_ms, entry, Some(peer), "sent by the hook")
                    .await?;
            }
        }
        Ok(Ok(()))
    }

    /// A user-mode hook's escape-hatch use: audited, and an integrity signal for its session.
    async fn escape_hatch_claim(
        &self,
        at_ms: i64,
        entry: wire::SpoolEntry,
        peer: Option<Peer>,
        note: &str,
    ) -> Result<(), EngineError> {
        let wire::SpoolEntry::EscapeHatch {
            agent,
            tool_use_id,
            cwd,
            tool_name,
            tool_input,
            reason,
            verdict,
        } = entry
        else {
            return Ok(());
        };
        let changes = self
            .breakers
            .record(
                &agent.session_id,
                Signal::Integrity(Integrity::EscapeHatch),
                clock::now(),
            )
            .await;
        let entry = Entry {
            at_ms,
            kind: Kind::EscapeHatch,
            session: Some(agent.session_id),
            agent_id: agent.agent_id,
            tool_use_id: Some(tool_use_id),
            cwd: Some(cwd),
            command: Some(summarize_tool(&tool_name, &tool_input)),
            tool: Some(tool_name),
            tool_input: Some(sanitize(&tool_input).to_string()),
            decision: verdict.map(Into::into),
            source: Some(wire::Source::EscapeHatch.into()),
            reason: Some(reason),
            peer: peer.map(|p| p.to_string()),
            note: Some(note.to_owned()),
            ..Entry::default()
        };
        self.store
            .write(move |c| {
                let row = audit::append(c, entry)?;
                persist_breakers(c, &changes, Some(row.id))
            })
            .await?;
        Ok(())
    }

    /// Ingests the hook's spool: renames `hook.jsonl` aside, records each line, deletes the copy.
    /// Spool lines come from the agent's uid: claims for the audit, never authority.
    pub async fn ingest_spool(&self) -> Result<SpoolIngested, SpoolError> {
        let Some(dir) = self.paths.spool_dir.clone() else {
            return Ok(SpoolIngested {
                ingested: 0,
                skipped: 0,
                spool_dir: Some(None),
            });
        };
        let _guard = self.spool_lock.lock().await;
        let live = dir.join(wire::SPOOL_FILE);
        // A fixed name: a copy left by a crash is found (and ingested first) by the next daemon.
        let taken = dir.join(format!("{}.ingesting", wire::SPOOL_FILE));
        let text = match tokio::task::spawn_blocking({
            let taken = taken.clone();
            move || take_spool(live, taken)
        })
        .await
        {
            Ok(Ok(Some(text))) => text,
            Ok(Ok(None)) => return Ok(SpoolIngested::default()),
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(SpoolError::Aborted(e.to_string())),
        };
        let mut ingested = 0u64;
        let mut skipped = 0u64;
        let mut entries = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let record: wire::SpoolRecord = match serde_json::from_str(line) {
                Ok(r) => r,
                Err(_) => {
                    skipped += 1;
                    continue;
                }
            };
            if record.v != wire::WIRE_VERSION {
                skipped += 1;
                continue;
            }
            let at_ms = i64::try_from(record.at_ms).unwrap_or(0);
            match record.entry {
                wire::SpoolEntry::Outcome {
                    report,
                    undelivered,
                } => {
                    self.outcome(None, report, Some(undelivered)).await?;
                    ingested += 1;
                }
                wire::SpoolEntry::LocalAllow { .. } => {
                    if let Some(e) =
                        local_allow_entry(at_ms, record.entry, None, "claimed by the hook's spool")
                    {
                        entries.push(e);
                    }
                }
                wire::SpoolEntry::EscapeHatch { .. } => {
                    self.escape_hatch_claim(
                        at_ms,
                        record.entry,
                        None,
                        "claimed by the hook's spool",
                    )
                    .await?;
                    ingested += 1;
                }
            }
        }
        if !entries.is_empty() {
            ingested += entries.len() as u64;
            self.store
                .write(move |c| {
                    for e in entries {
                        audit::append(c, e)?;
                    }
                    Ok(())
                })
                .await?;
        }
        // Off the async runtime; a copy left behind is ingested (again: rows are claims, and a
        // copy is taken only when none is left) by the next run.
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_file(&taken)).await;
        Ok(SpoolIngested {
            ingested,
            skipped,
            spool_dir: None,
        })
    }
}

fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    let mut text = String::new();
    file.take(MAX_SPOOL_BYTES).read_to_string(&mut text)?;
    Ok(text)
}

/// The audit row of a local allow the hook claims (`None` for any other entry).
fn local_allow_entry(
    at_ms: i64,
    entry: wire::SpoolEntry,
    peer: Option<Peer>,
    note: &str,
) -> Option<Entry> {
    let wire::SpoolEntry::LocalAllow {
        agent,
        tool_use_id,
        cwd,
        project_dir,
        tool_name,
        tool_input,
        rule,
        tiermap_revision,
    } = entry
    else {
        return None;
    };
    Some(Entry {
        at_ms,
        kind: Kind::LocalAllow,
        session: Some(agent.session_id),
        agent_id: agent.agent_id,
        agent_type: agent.agent_type,
        permission_mode: agent.permission_mode,
        tool_use_id: Some(tool_use_id),
        cwd: Some(cwd),
        project: Some(project_dir),
        command: Some(summarize_tool(&tool_name, &tool_input)),
        tool: Some(tool_name),
        tool_input: Some(sanitize(&tool_input).to_string()),
        decision: Some(wire::Verdict::Allow.into()),
        source: Some(wire::Source::HookFastPath.into()),
        rule: Some(rule),
        tiermap_revision: tiermap_revision.and_then(|r| i64::try_from(r).ok()),
        peer: peer.map(|p| p.to_string()),
        note: Some(note.to_owned()),
        ..Entry::default()
    })
}
