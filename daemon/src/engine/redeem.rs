//! Redeeming a run ticket (`POST /v1/run` from `cmdgate-run`): check it, run its command in the
//! mirror with output streamed (`runs.rs`), then record the run — one `run` audit row with its
//! effects, commit or rollback and undo id, the breaker signal (dirty runs and conflicts count),
//! the learning events — and send the end frame. Also: the integrity check of an outcome that
//! reports a routed call without its client, crash recovery at start, and `cmdgate undo`.
//!
//! A refused redemption runs nothing and is audited; a ticket tried by another uid or from another
//! directory is an integrity event for the ticket's session.

use std::path::PathBuf;
use std::time::Instant;

use cmdgate_policy::breaker::{Integrity, Signal};
use cmdgate_policy::learn::{LearnEvent, PromotionContext};
use cmdgate_policy::wire::run::{ran_through_client, Frame, RunEnd, RunRequest, RunStatus};
use cmdgate_policy::wire::{OutcomeReport, WIRE_VERSION};
use cmdgate_sandbox::commit::RecoverReport;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::clock;
use crate::engine::accept::{self, RunAcceptance};
use crate::engine::breakers::persist_breakers;
use crate::engine::decide::off_runtime;
use crate::engine::learning::{apply_learning_events, with_id};
use crate::engine::runs::{Outcome, StartHere, Started};
use crate::engine::tickets::{ticket_name, Issued, Refusal};
use crate::engine::{Engine, Peer};
use crate::store::audit::{self, Entry, IntegrityEvent, Kind, RunEvent};
use crate::store::{Store, StoreError};

/// Why a ticket was not redeemed (the api maps each to a status).
/// A redeemed run's response: its frames as produced (the end frame last), and `written`, to be
/// dropped with the response body — once the server has taken the last frame for the client, or
/// the client went away. The next run's helper is prepared only then (see [`Engine::redeem`]).
pub struct RunStream {
    pub frames: mpsc::Receiver<Vec<u8>>,
    pub written: oneshot::Sender<()>,
}

/// How long a prepared helper waits for a response body that is not consumed (a client that
/// stopped reading): the next run then finds one ready anyway.
const PREPARE_AFTER_MAX: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum RedeemError {
    /// The ticket is not redeemable by this caller (unknown, used, expired, another uid or
    /// directory, a changed tier map, an open breaker). Nothing ran.
    #[error("{0}")]
    Refused(String),
    /// The daemon cannot run it now (mirror unavailable, shutting down). Nothing ran.
    #[error("{0}")]
    Unavailable(String),
    #[error("the audit could not be written: {0}")]
    Store(#[from] StoreError),
}

/// `cmdgate undo RUN`'s failure.
#[derive(Debug, thiserror::Error)]
pub enum UndoError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Refused(String),
    #[error("the audit could not be written: {0}")]
    Store(#[from] StoreError),
}

/// The `run` row written at start when recovery repaired something.
pub(crate) async fn record_recovery(
    store: &Store,
    report: &RecoverReport,
) -> Result<(), StoreError> {
    if report.rolled_back.is_empty()
        && report.undo_finished.is_empty()
        && report.discarded.is_empty()
        && report.failed.is_empty()
    {
        return Ok(());
    }
    let reason = format!(
        "recovered at start: commits interrupted by a crash rolled back {:?}; undos finished {:?}; \
         orphaned runs discarded {:?}; could not repair {:?}",
        report.rolled_back, report.undo_finished, report.discarded, report.failed
    );
    eprintln!("cmdgated: {reason}");
    store
        .append(Entry {
            at_ms: clock::now_ms(),
            kind: Kind::Run,
            decision: Some(RunEvent::Recovered.into()),
            reason: Some(reason),
            sandbox: serde_json::to_string(report).ok(),
            ..Entry::default()
        })
        .await?;
    Ok(())
}

fn refusal_entry(peer: Peer, req: &RunRequest, issued: Option<&Issued>, why: &str) -> Entry {
    Entry {
        at_ms: clock::now_ms(),
        kind: Kind::Run,
        session: issued.map(|i| i.session.clone()),
        tool_use_id: issued.map(|i| i.tool_use_id.clone()),
        project: issued.map(|i| i.project.to_string_lossy().into_owned()),
        cwd: Some(req.cwd.clone()),
        tool: Some("Bash".into()),
        command: issued.map(|i| i.command.clone()),
        decision: Some(RunEvent::Refused.into()),
        reason: Some(why.to_owned()),
        peer: Some(peer.to_string()),
        decision_id: issued.map(|i| i.decision_id),
        note: Some(format!("ticket {}", ticket_name(&req.ticket))),
        ..Entry::default()
    }
}

/// What [`Engine::check_ticket`] found, in one trip off the runtime: the redemption, and for a
/// redeemed ticket what the checks after it read ([`Redeemed`]).
type Checked = Result<Redeemed, (Refusal, Option<Box<Issued>>)>;

/// A redeemed ticket and, read in the same trip, the map's stamps and its cached snapshot
/// (`None`: changed, or a load in progress — the caller loads it), the breaker (`None`: its
/// lock was busy — the caller waits for it) and the command's learning record (its operator's
/// acceptance); and the run, when every check passed in the trip ([`Start::Now`]).
struct Redeemed {
    issued: Issued,
    stamps: crate::engine::tiermaps::Stamps,
    snapshot: Option<std::sync::Arc<cmdgate_policy::tiermap::Snapshot>>,
    breaker: Option<(bool, Vec<crate::engine::breakers::Changed>)>,
    record: Result<Option<cmdgate_policy::learn::Record>, StoreError>,
    start: Start,
}

/// Whether the trip started the run.
enum Start {
    /// Every check after the redemption passed on what the trip read — the cached map at the
    /// decision's revision, the breaker closed with nothing to persist, the learning record
    /// read, the decision's row durable — so the run was started in the same trip: the
    /// operator's acceptance it runs under, and when it started (the run row's time).
    Now {
        started: Box<Started>,
        accepted: Vec<cmdgate_policy::learn::accept::Accepting>,
        at_ms: i64,
    },
    /// A check needs the runtime (a map to load, a busy breaker, changes to persist, a sync to
    /// wait for, a refusal to audit) or no run slot was free: the caller checks, then starts.
    Later(Vec<(String, String)>),
}

/// How the redemption's task begins the run.
enum Begin {
    /// Started in the checks' trip, at this time (ms).
    Started(Box<Started>, i64),
    /// To start, with this environment.
    Start(Vec<(String, String)>),
}

/// The revision of a map snapshot (`None`: read-only).
fn revision_of(snapshot: &cmdgate_policy::tiermap::Snapshot) -> Option<u64> {
    match snapshot {
        cmdgate_policy::tiermap::Snapshot::Verified(v) => Some(v.revision),
        cmdgate_policy::tiermap::Snapshot::ReadOnly { .. } => None,
    }
}

impl Engine {
    /// The redemption's blocking part (run it through `off_runtime`): the directory resolved, the
    /// ticket redeemed (used up, whatever follows), and what the checks after it read. Reads
    /// only: every refusal is the caller's, in the order it always had.
    fn check_ticket(
        &self,
        ticket: &str,
        uid: u32,
        cwd: PathBuf,
        env: Vec<(String, String)>,
    ) -> Checked {
        let cwd = std::fs::canonicalize(&cwd).unwrap_or(cwd);
        let issued = self.tickets.redeem(ticket, uid, &cwd, Instant::now())?;
        let stamps = self.tiermaps.stamps(&issued.project);
        let snapshot = self.tiermaps.cached(&issued.project, &stamps);
        let breaker = self.breakers.try_is_open(&issued.session, clock::now());
        let (project, key) = (issued.project.to_string_lossy(), &issued.plan.key);
        let record = self
            .store
            .read_here(|c| crate::store::state::learn_record(c, &project, key));
        // The checks `redeem` makes after this trip, on what it read: when none would refuse
        // or wait, the run starts here (the same checks, in the same order, none skipped).
        let passes = snapshot
            .as_deref()
            .is_some_and(|s| revision_of(s) == issued.revision)
            && matches!(&breaker, Some((false, changes)) if changes.is_empty())
            && record.is_ok()
            && issued
                .durable
                .is_none_or(|d| matches!(self.store.is_durable(d), Some(Ok(()))));
        let start = match passes {
            true => {
                let accepted = crate::engine::accept::accepted(
                    record.as_ref().ok().and_then(Option::as_ref),
                    issued.classification.as_deref(),
                    self.config.promotion.accept_k,
                );
                let at_ms = clock::now_ms();
                match self.runs.start_here(&issued, env) {
                    StartHere::Started(started) => Start::Now {
                        started,
                        accepted,
                        at_ms,
                    },
                    StartHere::Later(env) => Start::Later(env),
                }
            }
            false => Start::Later(env),
        };
        Ok(Redeemed {
            issued,
            stamps,
            snapshot,
            breaker,
            record,
            start,
        })
    }

    /// Redeems a ticket: on success the run is started and its frames arrive on the returned
    /// channel (the last one is the end frame).
    pub async fn redeem(&self, peer: Peer, mut req: RunRequest) -> Result<RunStream, RedeemError> {
        let Some(engine) = self.me.upgrade() else {
            return Err(RedeemError::Unavailable("the daemon is stopping".into()));
        };
        // One trip off the runtime's workers for everything that reads the file system or the
        // store before the run (`Engine::check_ticket`), instead of one pool hop each.
        let (ticket, cwd, uid) = (req.ticket.clone(), PathBuf::from(&req.cwd), peer.uid);
        let env = std::mem::take(&mut req.env);
        let checked = {
            let engine = engine.clone();
            off_runtime(move || engine.check_ticket(&ticket, uid, cwd, env))
                .await
                .map_err(|e| {
                    RedeemError::Unavailable(format!("the ticket could not be checked ({e})"))
                })?
        };
        let Redeemed {
            issued,
            stamps,
            snapshot,
            breaker,
            record,
            start,
        } = match checked {
            Ok(r) => r,
            Err((refusal, issued)) => {
                let why = format!("ticket refused: {refusal}");
                let mut changes = Vec::new();
                if let (Refusal::WrongUid { .. } | Refusal::WrongCwd { .. }, Some(i)) =
                    (&refusal, &issued)
                {
                    changes = self
                        .breakers
                        .record(
                            &i.session,
                            Signal::Integrity(Integrity::TicketMisuse),
                            clock::now(),
                        )
                        .await;
                }
                let entry = refusal_entry(peer, &req, issued.as_deref(), &why);
                self.store
                    .write(move |c| {
                        let row = audit::append(c, entry)?;
                        persist_breakers(c, &changes, Some(row.id))
                    })
                    .await?;
                return Err(RedeemError::Refused(why));
            }
        };
        // Started in the trip: every check below passed there, on what it read.
        let (start, accepted) = match start {
            Start::Now {
                started,
                accepted,
                at_ms,
            } => (Begin::Started(started, at_ms), accepted),
            Start::Later(env) => {
                let accepted = self
                    .check_then(peer, &req, &issued, stamps, snapshot, breaker, record)
                    .await?;
                (Begin::Start(env), accepted)
            }
        };
        let (tx, rx) = mpsc::channel(64);
        let (written, body_gone) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let (started, outcome) = match start {
                Begin::Started(run, at_ms) => (
                    at_ms,
                    engine
                        .runs
                        .run_started(&issued, *run, tx.clone(), &accepted)
                        .await,
                ),
                Begin::Start(env) => (
                    clock::now_ms(),
                    engine.runs.run(&issued, env, tx.clone(), &accepted).await,
                ),
            };
            let end = RunEnd {
                v: WIRE_VERSION,
                run_id: outcome.run_id.clone(),
                exit: outcome.exit,
                signal: outcome.signal,
                status: outcome.status,
                message: outcome.message.clone(),
            };
            if let Err(e) = engine.record_run(peer, &issued, &outcome, started).await {
                // The effects are already decided; the client still learns them.
                engine
                    .audit_integrity
                    .failed(&format!("mirrored run {}", outcome.run_id), &e);
            }
            engine.announce_kept(&issued, &outcome);
            let _ = tx.send(Frame::End(end).encode()).await;
            drop(tx);
            // The next run's helper is prepared once the response body is gone (the server drops
            // it after handing the end frame to the socket, or when the client went away): its
            // start forks this process, which takes the memory map's lock and a core, and had
            // delayed the write of the end frame the client waits for by ~0.5–2 ms in a trace
            // of the runs bench. Bounded, for a client that stops reading.
            let _ = tokio::time::timeout(PREPARE_AFTER_MAX, body_gone).await;
            engine.runs.after_run(&issued);
        });
        Ok(RunStream {
            frames: rx,
            written,
        })
    }

    /// The checks after the redemption that its trip could not settle (see [`Start::Later`]),
    /// in their order: the map (loaded when changed or busy) at the decision's revision, the
    /// breaker closed (its changes persisted), the learning record read, the decision's row
    /// durable. A refusal is audited. The operator's acceptance the run runs under.
    #[allow(clippy::too_many_arguments)]
    async fn check_then(
        &self,
        peer: Peer,
        req: &RunRequest,
        issued: &Issued,
        stamps: crate::engine::tiermaps::Stamps,
        snapshot: Option<std::sync::Arc<cmdgate_policy::tiermap::Snapshot>>,
        breaker: Option<(bool, Vec<crate::engine::breakers::Changed>)>,
        record: Result<Option<cmdgate_policy::learn::Record>, StoreError>,
    ) -> Result<Vec<cmdgate_policy::learn::accept::Accepting>, RedeemError> {
        // The decision holds only under the map and breaker it was made with.
        let refuse = |why: String| async {
            let entry = refusal_entry(peer, req, Some(issued), &why);
            self.store.append(entry).await?;
            Err::<Vec<cmdgate_policy::learn::accept::Accepting>, RedeemError>(RedeemError::Refused(
                why,
            ))
        };
        // The map as the trip found it; a changed or busy one is loaded here, as `get` would.
        let snapshot = match snapshot {
            Some(s) => s,
            None => {
                self.tiermaps
                    .get_stamped(&issued.project, stamps, &self.store)
                    .await?
                    .snapshot
            }
        };
        let revision = revision_of(&snapshot);
        if revision != issued.revision {
            return refuse(format!(
                "the tier map changed since the decision (revision {:?} then, {revision:?} now); \
                 run the command again to have it decided under the current map",
                issued.revision
            ))
            .await;
        }
        let (open, changes) = match breaker {
            Some(b) => b,
            None => self.breakers.is_open(&issued.session, clock::now()).await,
        };
        if !changes.is_empty() {
            if let Err(e) = self
                .store
                .write(move |c| persist_breakers(c, &changes, None))
                .await
            {
                self.audit_integrity.failed("breaker transition", &e);
            }
        }
        if open {
            return refuse(
                "the circuit breaker opened since the decision (read-only mode)".to_owned(),
            )
            .await;
        }
        // The operator's acceptance of the command's dirty runs, as classified now.
        let accepted = crate::engine::accept::accepted(
            record?.as_ref(),
            issued.classification.as_deref(),
            self.config.promotion.accept_k,
        );
        // Nothing runs before the decision's row is on disk (it was answered before its fsync:
        // `decide`'s step 8); the sync overlapped the hook's exit and the client's start. A row
        // that could not be made durable refuses the run.
        if let Some(durable) = issued.durable {
            if let Err(e) = self.store.durable(durable).await {
                return Err(RedeemError::Unavailable(format!(
                    "the decision's audit row could not be made durable ({e}); nothing ran"
                )));
            }
        }
        Ok(accepted)
    }

    /// The run's audit row, its breaker signal and its learning, in one transaction.
    async fn record_run(
        &self,
        peer: Peer,
        issued: &Issued,
        outcome: &Outcome,
        started_ms: i64,
    ) -> Result<(), crate::engine::EngineError> {
        let now = clock::now();
        let signal = match outcome.status {
            RunStatus::RolledBack | RunStatus::Conflict => Some(Signal::DirtyTestRun),
            RunStatus::Committed => Some(Signal::Success),
            RunStatus::Failed => None,
        };
        let changes = match signal {
            Some(s) => self.breakers.record(&issued.session, s, now).await,
            None => Vec::new(),
        };
        let (breaker_open, ticked) = self.breakers.is_open(&issued.session, now).await;
        let changes = [changes, ticked].concat();
        // Learning: a clean, committed run is a clean test-run, and its exit status the real
        // run's success or failure; a dirty one is a dirty test-run.
        let key = issued.plan.key.clone();
        let events: Vec<LearnEvent> = match (outcome.judged, outcome.status) {
            (Some(true), RunStatus::Committed) => vec![
                LearnEvent::CleanTestRun(0),
                if outcome.exit == Some(0) {
                    LearnEvent::RealSuccess(0)
                } else {
                    LearnEvent::RealFailure(0)
                },
            ],
            (Some(false), _) => vec![LearnEvent::DirtyTestRun(0)],
            _ => Vec::new(),
        };
        let classification = issued.classification.clone();
        let promotion = self.config.promotion.clone();
        let project = issued.project.to_string_lossy().into_owned();
        // The operator's acceptance: a conflict forgets it, a dirty run with another signature
        // (or none) withdraws what was accepted, an accepted run changes nothing.
        let acceptance_event = match (&outcome.acceptance, outcome.status) {
            (_, RunStatus::Conflict) => Some(accept::Event::Refused),
            (RunAcceptance::Signature(_) | RunAcceptance::NotAcceptable(_), _) => {
                Some(accept::Event::Differed)
            }
            (RunAcceptance::None | RunAcceptance::Accepted { .. }, _) => None,
        };
        let accepted = matches!(outcome.acceptance, RunAcceptance::Accepted { .. })
            && outcome.status == RunStatus::Committed;
        let entry = Entry {
            at_ms: started_ms,
            kind: Kind::Run,
            session: Some(issued.session.clone()),
            agent_id: issued.agent_id.clone(),
            tool_use_id: Some(issued.tool_use_id.clone()),
            project: Some(project.clone()),
            cwd: Some(issued.cwd.to_string_lossy().into_owned()),
            tool: Some("Bash".into()),
            command: Some(issued.command.clone()),
            // A run committed by the operator's acceptance is told apart in the audit and the
            // export: its own decision, and the learned source.
            decision: Some(match accepted {
                true => RunEvent::AcceptedRun.into(),
                false => RunEvent::from(outcome.status).into(),
            }),
            source: Some(match accepted {
                true => cmdgate_policy::wire::Source::Learned.into(),
                false => cmdgate_policy::wire::Source::Sandbox.into(),
            }),
            rule: (!issued.plan.rules.is_empty()).then(|| issued.plan.rules.join(", ")),
            reason: (!outcome.message.is_empty()).then(|| outcome.message.clone()),
            tiermap_revision: issued.revision.and_then(|r| i64::try_from(r).ok()),
            sandbox: Some(outcome.detail.to_string()),
            exit_code: outcome.exit.map(i64::from),
            success: Some(outcome.status == RunStatus::Committed && outcome.exit == Some(0)),
            duration_ms: Some(clock::now_ms() - started_ms),
            peer: Some(peer.to_string()),
            decision_id: Some(issued.decision_id),
            note: Some(crate::engine::runs::run_note(&outcome.run_id)),
            ..Entry::default()
        };
        // A committed run's row is committed before the end frame and synced right after it
        // (`Store::write_deferred`; the writer thread syncs before its next group): the agent
        // does not wait for the fsync. Power lost in that window loses the row as it did when
        // the fsync came first (the workspace's commit was already durable either way); the
        // client's exit status is not audit. Every other outcome (a rollback, a conflict, a
        // failure, an acceptance change) may open the breaker or demote: synced first.
        let defer = outcome.status == RunStatus::Committed && acceptance_event.is_none();
        let job = move |c: &rusqlite::Connection| {
            let row = audit::append(c, entry)?;
            persist_breakers(c, &changes, Some(row.id))?;
            let mut learned = false;
            if let Some(event) = acceptance_event {
                accept::record(c, &project, &key, None, event, row.id, &promotion)?;
            }
            // A committed run's two events: one read and one write of the record.
            if !events.is_empty() {
                learned |= apply_learning_events(
                    c,
                    &project,
                    &key,
                    events.into_iter().map(|e| with_id(e, row.id)),
                    PromotionContext {
                        needs_person_or_denied: false,
                        breaker_open,
                        classification: classification.as_deref(),
                    },
                    &promotion,
                )?;
            }
            Ok(learned)
        };
        let learned = match defer {
            true => self.store.write_deferred(job).await?.0,
            false => self.store.write(job).await?,
        };
        if learned {
            self.reload_rules().await?;
        }
        Ok(())
    }

    /// An outcome for a call the daemon routed through the client, reporting another command:
    /// Claude Code ran the original on the host (it ignored `updatedInput`). Audited as an
    /// integrity event that trips the breaker. `true` when it was one.
    pub(crate) async fn check_rewrite(&self, report: &OutcomeReport) -> Result<bool, StoreError> {
        let (Some(command), Some(routed)) = (
            report.command.as_deref(),
            self.tickets.routed(&report.tool_use_id),
        ) else {
            return Ok(false);
        };
        if ran_through_client(command, &routed.ticket) {
            return Ok(false);
        }
        let changes = self
            .breakers
            .record(
                &routed.session,
                Signal::Integrity(Integrity::RewriteIgnored),
                clock::now(),
            )
            .await;
        let reason = format!(
            "integrity: the call was routed through cmdgate-run (decision #{}), but Claude Code \
             reports having run `{command}`: the rewrite was ignored and the command ran on the \
             host unjudged (check the Claude Code version with `cmdgate doctor`, and for another \
             PreToolUse hook that rewrites Bash)",
            routed.decision_id
        );
        eprintln!("cmdgated: {reason}");
        let entry = Entry {
            at_ms: clock::now_ms(),
            kind: Kind::Integrity,
            session: Some(routed.session.clone()),
            tool_use_id: Some(report.tool_use_id.clone()),
            tool: Some(report.tool_name.clone()),
            command: Some(command.to_owned()),
            decision: Some(IntegrityEvent::RewriteIgnored.into()),
            reason: Some(reason),
            decision_id: Some(routed.decision_id),
            ..Entry::default()
        };
        self.store
            .write(move |c| {
                let row = audit::append(c, entry)?;
                persist_breakers(c, &changes, Some(row.id))
            })
            .await?;
        Ok(true)
    }

    /// `cmdgate undo RUN`: restores the workspace to before a committed run, audited.
    pub async fn undo_run(&self, run_id: String) -> Result<serde_json::Value, UndoError> {
        let _one_at_a_time = self.runs.undo_lock.lock().await;
        let state = self.runs.state_dir().to_path_buf();
        let id = run_id.clone();
        let keeper = self.runs.keeper();
        let result = tokio::task::spawn_blocking(move || keeper.undo(&state, &id))
            .await
            .map_err(|e| UndoError::Refused(format!("the undo thread failed: {e}")))?;
        let (decision, reason, value, err) = match result {
            Ok(report) => (
                RunEvent::Undone,
                format!(
                    "undid run {run_id}: restored {} paths",
                    report.restored.len()
                ),
                json!({"run_id": run_id, "undone": true, "restored": report.restored}),
                None,
            ),
            Err(cmdgate_sandbox::commit::UndoError::NotFound(id)) => {
                return Err(UndoError::NotFound(format!("no committed run {id}")))
            }
            Err(e) => {
                let why = e.to_string();
                (
                    RunEvent::UndoRefused,
                    format!("undo of run {run_id} refused: {why}"),
                    json!({}),
                    Some(why),
                )
            }
        };
        // An undo is the person refusing what was committed: the command's acceptance is forgotten.
        let acceptance = match err {
            None => self.acceptance_of_run(&run_id).await,
            Some(_) => None,
        };
        let promotion = self.config.promotion.clone();
        let entry = Entry {
            at_ms: clock::now_ms(),
            kind: Kind::Run,
            decision: Some(decision.into()),
            reason: Some(reason),
            note: Some(crate::engine::runs::run_note(&run_id)),
            ..Entry::default()
        };
        self.store
            .write(move |c| {
                let row = audit::append(c, entry)?;
                if let Some((project, key)) = acceptance {
                    accept::record(
                        c,
                        &project,
                        &key,
                        None,
                        accept::Event::Refused,
                        row.id,
                        &promotion,
                    )?;
                }
                Ok(())
            })
            .await?;
        match err {
            None => Ok(value),
            Some(why) => Err(UndoError::Refused(why)),
        }
    }

    /// The project and learning key of run `run_id` (from its own run row), if still audited.
    async fn acceptance_of_run(&self, run_id: &str) -> Option<(String, String)> {
        self.find_run_row(run_id, |e| {
            let (key, _, _) = accept::of_row(e.sandbox.as_deref())?;
            Some((e.project?, key))
        })
        .await
    }

    /// `cmdgate runs`: recent run rows (newest first) with the journal's undo state.
    pub async fn runs_list(&self, limit: u32) -> Result<serde_json::Value, StoreError> {
        // The query gives the newest `limit` rows in the chain's order (oldest of them first).
        let mut rows = self
            .store
            .read(move |c| {
                audit::query(
                    c,
                    &audit::Query {
                        kind: Some(Kind::Run.as_str().into()),
                        limit: Some(limit),
                        newest: true,
                        ..Default::default()
                    },
                )
            })
            .await?;
        rows.reverse();
        let state = self.runs.state_dir().to_path_buf();
        let keeper = self.runs.keeper();
        // A journal that cannot be read (the helper failed) shows no undo state, never a wrong one.
        let journal = tokio::task::spawn_blocking(move || keeper.runs(&state))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let runs: Vec<serde_json::Value> = rows
            .into_iter()
            .map(|row| {
                let id = row
                    .entry
                    .note
                    .as_deref()
                    .and_then(crate::engine::runs::run_of_note)
                    .unwrap_or_default()
                    .to_owned();
                let undo = journal
                    .iter()
                    .find(|j| !id.is_empty() && j.run_id == id)
                    .map(|j| json!(j.state));
                json!({"run_id": id, "undo_state": undo, "row": row})
            })
            .collect();
        Ok(json!(runs))
    }
}
