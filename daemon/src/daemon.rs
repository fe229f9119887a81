//! The daemon's state and its request handling: the decision pipeline (decide → test-run →
//! answer, on one coherent snapshot, audited before it is answered), outcomes, the hook's spool,
//! and the operator's admin requests.
//!
//! Every error path ends in deny: a request that cannot be read, a store that cannot commit, a
//! deadline that passes. The only answers that allow are `decide`'s, after their audit row is
//! committed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use cmdgate_policy::breaker::{BreakerConfig, Integrity, Signal, Transition};
use cmdgate_policy::decide::{
    self, after_test_run, canonical_key, Context, Decision, Request, Rule, RuleKind, RuleSet,
    SandboxVerdict, Source, Step, Tool,
};
use cmdgate_policy::learn::{LearnEvent, LearnTransition, PromotionContext, Record};
use cmdgate_policy::shell::read::{ReadPolicy, SecretPaths, DEFAULT_SECRET_PATTERNS};
use cmdgate_policy::shell::{self, Analysis, Limits, Word};
use cmdgate_policy::tiermap::{Snapshot, Tier};
use cmdgate_policy::time::UnixMillis;
use cmdgate_policy::wire::{self, DecideRequest, DecideResponse, OutcomeReport, Verdict};
use cmdgate_sandbox::{HelperCommand, RunAs};
use rusqlite::Connection;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::breakers::{self, Breakers, Changed};
use crate::clock;
use crate::config::{Config, Paths};
use crate::learning;
use crate::notify::{Note, Notifier, NotifyConfig};
use crate::pending::Pending;
use crate::server::api::{Rejection, ResetBreaker};
use crate::server::{ApiRequest, ApiResponse, Handler, Peer, Role};
use crate::store::audit::{self, Entry, Kind};
use crate::store::{state, Store, StoreError};
use crate::testrun::{Target, TestRunner};
use crate::tiermaps::{MapEvent, TierMaps};

/// Longest string kept verbatim in an audited tool input (Write contents are hashed instead).
const MAX_AUDIT_STRING: usize = 4096;
/// Largest spool file ingested at once; the rest waits for the next round.
const MAX_SPOOL_BYTES: u64 = 16 << 20;

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the store")]
    Store(#[from] StoreError),
    #[error("stored rule {id} has an unknown kind {kind:?}")]
    Rule { id: i64, kind: String },
}

/// What the binary hands the daemon.
pub struct Options {
    pub config: Config,
    pub paths: Paths,
    /// How the sandbox library starts its helper (`cmdgated __sandbox-helper`, `cmdgate sandbox __helper`).
    pub helper: HelperCommand,
    /// The daemon's own uid: the default allowed peer.
    pub uid: u32,
}

/// The daemon.
pub struct Daemon {
    pub config: Config,
    pub paths: Paths,
    pub(crate) store: Store,
    pub(crate) tiermaps: TierMaps,
    /// Swapped whole when a rule changes; a decision holds one `Arc` for its whole run.
    pub(crate) rules: RwLock<Arc<RuleSet>>,
    /// Serialises `reload_rules` (see there).
    rules_reload: Mutex<()>,
    /// The rules in memory may be older than the store (a reload failed after a committed change):
    /// routed calls are refused until a reload succeeds.
    rules_stale: std::sync::atomic::AtomicBool,
    pub(crate) breakers: Mutex<Breakers>,
    pub(crate) testruns: TestRunner,
    started: Instant,
    uid: u32,
    decisions: AtomicU64,
    refused: AtomicU64,
    /// Desktop notifications (breaker trips); never delays a decision.
    pub(crate) notifier: Arc<Notifier>,
    /// Asks held for the operator (background mode); in memory only.
    pub(crate) pending: Pending,
    /// Serialises spool ingestion (a timer and requests may both trigger it).
    spool_lock: Mutex<()>,
}

pub(crate) fn rule_kind(kind: &str) -> Option<RuleKind> {
    match kind {
        "approve" => Some(RuleKind::Approve),
        "reject" => Some(RuleKind::Reject),
        "always_ask" => Some(RuleKind::AlwaysAsk),
        "learned" => Some(RuleKind::Learned),
        _ => None,
    }
}

fn load_rules(conn: &Connection) -> Result<Result<RuleSet, (i64, String)>, StoreError> {
    let mut rules = Vec::new();
    for r in state::rules(conn)? {
        let Some(kind) = rule_kind(&r.kind) else {
            return Ok(Err((r.id, r.kind)));
        };
        rules.push(Rule {
            id: r.id,
            kind,
            project: r.project,
            key: r.key,
            enabled: r.enabled,
            note: r.note,
        });
    }
    Ok(Ok(RuleSet::new(rules)))
}

/// The global breaker trips at five times the session threshold: one runaway session should not
/// stop every other, many should.
fn global_breaker(session: &BreakerConfig) -> BreakerConfig {
    BreakerConfig {
        threshold: session.threshold.max(1).saturating_mul(5),
        ..session.clone()
    }
}

impl Daemon {
    /// Opens the store, restores rules and breakers, prepares test-runs.
    pub async fn open(options: Options) -> Result<Arc<Daemon>, StartError> {
        let Options {
            config,
            paths,
            helper,
            uid,
        } = options;
        let store = Store::open(&paths.db)?;
        let rules = match store.read(load_rules).await? {
            Ok(r) => r,
            Err((id, kind)) => return Err(StartError::Rule { id, kind }),
        };
        let rows = store.read(state::breakers).await?;
        let (mut breakers, problems) = Breakers::restore(
            config.breaker.clone(),
            global_breaker(&config.breaker),
            rows,
        );
        breakers.restore_last(store.read(breakers::last_transitions).await?);
        for p in problems {
            eprintln!("cmdgated: breaker state: {p} (starting that breaker fresh)");
        }
        let notifier = Notifier::new(NotifyConfig {
            enabled: config.notify.enabled,
            ..NotifyConfig::default()
        });
        let testruns = TestRunner::new(helper, paths.sandbox_state.clone(), config.sandbox.clone());
        if let Some(why) = testruns.unavailable() {
            eprintln!("cmdgated: test-runs unavailable: {why}; tier 1 and unknown commands will be asked, never allowed");
        }
        // Publish the accepted revisions before serving, so the hook's replay check is right
        // from the first call.
        let tiermaps = TierMaps::new(PathBuf::from(paths.locations.trusted_keys()))
            .publishing(PathBuf::from(paths.locations.tiermap_revisions()));
        tiermaps.publish(&store).await?;
        Ok(Arc::new(Daemon {
            tiermaps,
            config,
            paths,
            store,
            rules: RwLock::new(Arc::new(rules)),
            rules_reload: Mutex::new(()),
            rules_stale: std::sync::atomic::AtomicBool::new(false),
            breakers: Mutex::new(breakers),
            testruns,
            started: Instant::now(),
            uid,
            decisions: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            spool_lock: Mutex::new(()),
            pending: Pending::default(),
            notifier,
        }))
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Denies every pending approval and refuses new ones (shutdown begins): their hooks get an
    /// answer before the connections close, and nothing waits into the next run.
    pub fn stop_holding(&self) -> usize {
        self.pending.cancel_all("the cmdgate daemon is stopping")
    }

    /// Commits everything queued and stops the store writer (graceful shutdown).
    pub async fn close(&self) {
        self.store.close().await;
    }

    pub(crate) fn rules(&self) -> Arc<RuleSet> {
        match self.rules.read() {
            Ok(r) => r.clone(),
            // A poisoned lock: no rules at all is safe (rules only allow by approval or learning;
            // the rejections lost make nothing run that the tier map and sandbox would not allow).
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    pub(crate) async fn reload_rules(&self) -> Result<(), StoreError> {
        // One reload at a time, read and install together: a reload that read the rules before a
        // later change committed must not install its older set after that change's own reload
        // (a just-remembered rejection would silently stop matching).
        let _one_at_a_time = self.rules_reload.lock().await;
        let result = match self.store.read(load_rules).await {
            Ok(Ok(set)) => match self.rules.write() {
                Ok(mut r) => {
                    *r = Arc::new(set);
                    Ok(())
                }
                Err(_) => Err(StoreError::Corrupt("the rules lock is poisoned".into())),
            },
            Ok(Err((id, kind))) => Err(StoreError::Corrupt(format!(
                "rule {id} has unknown kind {kind:?}"
            ))),
            Err(e) => Err(e),
        };
        // Neither the old set (a disabled approval would still allow) nor an empty one (a
        // remembered rejection would stop matching) is safe to decide with: refuse until it loads.
        self.rules_stale.store(result.is_err(), Ordering::Release);
        result
    }

    /// Records a breaker signal for a session and announces a trip on the desktop.
    pub(crate) async fn record_signal(
        &self,
        session: &str,
        signal: Signal,
        now: UnixMillis,
    ) -> Vec<Changed> {
        let changes = self.breakers.lock().await.record(session, signal, now);
        self.announce(&changes);
        changes
    }

    async fn record_global_signal(&self, signal: Signal, now: UnixMillis) -> Vec<Changed> {
        let changes = self.breakers.lock().await.record_global(signal, now);
        self.announce(&changes);
        changes
    }

    /// A desktop notification for every breaker transition; an opening one is urgent (never
    /// waits: see `notify`).
    pub(crate) fn announce(&self, changes: &[Changed]) {
        for c in changes {
            let (summary, what, urgent) = match &c.transition {
                Some(Transition::Tripped { score }) => (
                    "cmdgate: read-only mode",
                    format!("tripped (score {score}): only reads run until it cools down or the operator runs `cmdgate breaker reset`"),
                    true,
                ),
                Some(Transition::Reopened) => (
                    "cmdgate: read-only mode",
                    "re-opened while half-open: only reads run until it cools down again or the operator runs `cmdgate breaker reset`".to_owned(),
                    true,
                ),
                Some(Transition::HalfOpened) => (
                    "cmdgate: breaker half-open",
                    "is half-open after its cooldown: calls flow again, the next bad signal re-opens it".to_owned(),
                    false,
                ),
                Some(Transition::Closed) => (
                    "cmdgate: breaker closed",
                    "closed again after good calls while half-open".to_owned(),
                    false,
                ),
                Some(Transition::Reset) => (
                    "cmdgate: breaker reset",
                    "was reset by the operator".to_owned(),
                    false,
                ),
                None => continue,
            };
            let _ = self.notifier.notify(Note {
                summary: summary.into(),
                body: format!("The circuit breaker for {} {what}.", c.scope),
                urgent,
            });
        }
    }

    // ----- decide -------------------------------------------------------------------------------

    async fn decide(&self, peer: Peer, req: DecideRequest) -> ApiResponse {
        let started = Instant::now();
        let budget = self.config.decide_deadline();
        let result = tokio::time::timeout(budget, self.decide_within(peer, &req, started)).await;
        let response = match result {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                self.fail_closed(
                    peer,
                    &req,
                    started,
                    format!("the audit could not be written ({e})"),
                )
                .await
            }
            Err(_) => {
                self.fail_closed(
                    peer,
                    &req,
                    started,
                    format!(
                        "no decision within the daemon's {} ms deadline",
                        budget.as_millis()
                    ),
                )
                .await
            }
        };
        // Background mode: the ask waits for the operator (outside the pipeline's deadline, inside
        // the hook's).
        let response = if response.decision == Verdict::Ask && self.holds_asks(&req) {
            self.hold(&req, response, started).await
        } else {
            response
        };
        self.decisions.fetch_add(1, Ordering::Relaxed);
        ApiResponse::json(200, &response)
    }

    /// A deny for a request the pipeline could not finish, audited if the store still takes it.
    async fn fail_closed(
        &self,
        peer: Peer,
        req: &DecideRequest,
        started: Instant,
        why: String,
    ) -> DecideResponse {
        let reason = format!("cmdgate could not decide, so it refuses: {why}");
        let mut entry = request_entry(peer, req);
        entry.decision = Some("deny".into());
        entry.source = Some(wire_source_name(wire::Source::FailClosed).into());
        entry.reason = Some(reason.clone());
        entry.latency_us = Some(micros(started));
        let audit_id =
            match tokio::time::timeout(Duration::from_secs(2), self.store.append(entry)).await {
                Ok(Ok(row)) => Some(row.id as u64),
                _ => None,
            };
        DecideResponse::fail_closed(reason, None, audit_id)
    }

    async fn decide_within(
        &self,
        peer: Peer,
        req: &DecideRequest,
        started: Instant,
    ) -> Result<DecideResponse, StoreError> {
        let now = clock::now();
        let mut entry = request_entry(peer, req);
        let deny_early = |entry: Entry, why: String| Early { entry, why };
        // The request's facts, validated.
        let cwd = Path::new(&req.cwd);
        if !cwd.is_absolute() {
            return self
                .finish_early(
                    deny_early(entry, format!("cwd {:?} is not an absolute path", req.cwd)),
                    started,
                )
                .await;
        }
        let tool = match Tool::from_claude(&req.tool_name, &req.tool_input) {
            Ok(t) => t,
            Err(e) => {
                return self
                    .finish_early(
                        deny_early(entry, format!("unreadable tool call: {e}")),
                        started,
                    )
                    .await
            }
        };
        let claude_dir = (!req.project_dir.is_empty()).then(|| PathBuf::from(&req.project_dir));
        if claude_dir.as_deref().is_some_and(|d| !d.is_absolute()) {
            return self
                .finish_early(
                    deny_early(
                        entry,
                        format!("project_dir {:?} is not an absolute path", req.project_dir),
                    ),
                    started,
                )
                .await;
        }
        let (root, _) = crate::project::project_root(cwd, claude_dir.as_deref());
        let cwd = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
        let root_s = root.to_string_lossy().into_owned();
        let cwd_s = cwd.to_string_lossy().into_owned();
        entry.project = Some(root_s.clone());
        entry.cwd = Some(cwd_s.clone());

        // One coherent snapshot: map, rules, breaker.
        let loaded = self.tiermaps.get(&root, &self.store).await?;
        if let Some(event) = loaded.event {
            self.map_event(&req.agent.session_id, event, &root_s, &loaded.snapshot)
                .await?;
        }
        let snapshot = loaded.snapshot;
        if self.rules_stale.load(Ordering::Acquire) {
            if let Err(e) = self.reload_rules().await {
                return self
                    .finish_early(
                        deny_early(
                            entry,
                            format!(
                                "the remembered and learned rules could not be reloaded after a change ({e}); \
                                 cmdgate refuses every routed call until they load (`cmdgate status`, the daemon's log)"
                            ),
                        ),
                        started,
                    )
                    .await;
            }
        }
        let rules = self.rules();
        let (breaker_open, breaker_changes) = self
            .breakers
            .lock()
            .await
            .is_open(&req.agent.session_id, now);
        let home = agent_home(peer.uid);
        let own_paths = self.paths.locations.own_paths(&home);
        let mut secrets: Vec<String> = DEFAULT_SECRET_PATTERNS
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        secrets.extend(self.config.secret_paths.iter().cloned());
        let step = {
            // The read policy holds a non-Sync trait object: keep it out of the awaits below.
            let read_policy = ReadPolicy {
                home: home.clone(),
                cwd: None,
                project: None,
                secrets: SecretPaths::new(&secrets, &home),
                extension: None,
                // Lists the cwd / project root for a recursive search of it (only when asked).
                listing: Some(&crate::listing::list_dir),
            };
            let ctx = Context {
                snapshot: &snapshot,
                rules: &rules,
                breaker_open,
                read_policy: &read_policy,
                limits: Limits::default(),
                home: &home,
                own_paths: &own_paths,
            };
            let request = Request {
                tool: &tool,
                project_root: &root_s,
                cwd: &cwd_s,
            };
            let step = decide::decide(request, ctx);
            // The policy judges a read tool's path as spelled (no IO); a symbolic link can lead
            // elsewhere (`notes.txt -> ~/.ssh/id_rsa`). An allow must hold where it resolves too.
            match (&step, resolved_read_tool(&tool, &cwd_s)) {
                (Step::Decided(Decision::Allow(_)), Some(real)) => match decide::decide(
                    Request {
                        tool: &real,
                        ..request
                    },
                    ctx,
                ) {
                    Step::Decided(Decision::Allow(_)) => step,
                    stricter => stricter,
                },
                _ => step,
            }
        };
        describe_parts(&mut entry, &tool, &snapshot);

        let mut learn: Option<(String, LearnEvent)> = None;
        let mut classified: Option<String> = None;
        let decision = match step {
            Step::Decided(d) => d,
            Step::TestRun(plan) => {
                let target = Target {
                    root: &root,
                    cwd: &cwd,
                    home: Some(PathBuf::from(&home)),
                    run_as: Some(RunAs {
                        uid: peer.uid,
                        gid: peer.gid,
                    }),
                };
                let ran = self
                    .testruns
                    .run(&plan, target, self.config.test_run_deadline())
                    .await;
                entry.sandbox = Some(ran.detail.to_string());
                classified = Some(learning::classification_of(&plan.command, &snapshot));
                learn = match &ran.verdict {
                    SandboxVerdict::Clean => Some((plan.key.clone(), LearnEvent::CleanTestRun(0))),
                    SandboxVerdict::Dirty { .. } => {
                        Some((plan.key.clone(), LearnEvent::DirtyTestRun(0)))
                    }
                    SandboxVerdict::Failed { .. } => None,
                };
                after_test_run(&plan, &ran.verdict)
            }
        };
        let (verdict, ev) = match &decision {
            Decision::Allow(e) => (Verdict::Allow, e),
            Decision::Deny(e) => (Verdict::Deny, e),
            Decision::Ask(e) => (Verdict::Ask, e),
        };
        if let (Decision::Deny(e), Tool::Bash { command }) = (&decision, &tool) {
            if e.source == Source::Remembered {
                learn = learning::key_of(command).map(|k| (k, LearnEvent::Rejected(0)));
            }
        }
        let source = wire_source(ev.source);
        entry.decision = Some(verdict.as_str().into());
        entry.source = Some(wire_source_name(source).into());
        entry.rule = ev.rule.clone();
        entry.reason = Some(ev.reason.clone());
        entry.tiermap_revision = ev.revision.and_then(|r| i64::try_from(r).ok());

        // Breaker signals.
        let signal = match (&decision, &learn) {
            (_, Some((_, LearnEvent::DirtyTestRun(_)))) => Some(Signal::DirtyTestRun),
            (Decision::Deny(_), _) => Some(Signal::Denial),
            (_, Some((_, LearnEvent::CleanTestRun(_)))) => Some(Signal::Success),
            _ => None,
        };
        let mut changes = breaker_changes;
        if let Some(s) = signal {
            changes.extend(self.record_signal(&req.agent.session_id, s, now).await);
        }

        // Commit the row (with breaker state and learning) before answering.
        let promotion = self.config.promotion.clone();
        let project = root_s.clone();
        entry.latency_us = Some(micros(started));
        let (row, learned) = self
            .store
            .write(move |c| {
                let row = audit::append(c, entry)?;
                persist_breakers(c, &changes, Some(row.id))?;
                let learned = match learn {
                    Some((key, event)) => {
                        let event = with_id(event, row.id);
                        apply_learning(
                            c,
                            &project,
                            &key,
                            event,
                            PromotionContext {
                                needs_person_or_denied: false,
                                breaker_open,
                                classification: classified.as_deref(),
                            },
                            &promotion,
                        )?
                    }
                    None => false,
                };
                Ok((row, learned))
            })
            .await?;
        if learned {
            self.reload_rules().await?;
        }
        Ok(DecideResponse {
            v: wire::WIRE_VERSION,
            decision: verdict,
            reason: ev.reason.clone(),
            source,
            rule: ev.rule.clone(),
            tiermap_revision: ev.revision,
            audit_id: u64::try_from(row.id).ok(),
        })
    }

    async fn finish_early(
        &self,
        early: Early,
        started: Instant,
    ) -> Result<DecideResponse, StoreError> {
        let Early { mut entry, why } = early;
        let reason = format!("refused: {why}");
        entry.decision = Some("deny".into());
        entry.source = Some(wire_source_name(wire::Source::FailClosed).into());
        entry.reason = Some(reason.clone());
        entry.latency_us = Some(micros(started));
        let row = self.store.append(entry).await?;
        Ok(DecideResponse::fail_closed(
            reason,
            None,
            u64::try_from(row.id).ok(),
        ))
    }

    async fn map_event(
        &self,
        session: &str,
        event: MapEvent,
        root: &str,
        snapshot: &Arc<Snapshot>,
    ) -> Result<(), StoreError> {
        let now = clock::now();
        let changes = match event.integrity {
            Some(i) => self.record_signal(session, Signal::Integrity(i), now).await,
            None => Vec::new(),
        };
        if event.what == "rejected" {
            eprintln!("cmdgated: {}: {}", event.project, event.detail);
        }
        let entry = Entry {
            at_ms: clock::now_ms(),
            kind: Kind::Tiermap.as_str().into(),
            session: Some(session.to_owned()),
            project: Some(event.project.clone()),
            decision: Some(event.what.into()),
            reason: Some(event.detail.clone()),
            tiermap_revision: event.revision.and_then(|r| i64::try_from(r).ok()),
            note: event.integrity.map(|i| format!("integrity: {i:?}")),
            ..Entry::default()
        };
        // A newly accepted revision demotes the learned entries it reclassifies (in the same
        // transaction as its audit row, before this decision reads the rules).
        let review = (event.what == "accepted").then(|| {
            (
                root.to_owned(),
                Arc::clone(snapshot),
                self.config.promotion.clone(),
            )
        });
        let changed = self
            .store
            .write(move |c| {
                let row = audit::append(c, entry)?;
                persist_breakers(c, &changes, Some(row.id))?;
                match review {
                    Some((root, snapshot, promotion)) => {
                        learning::review(c, &root, &snapshot, row.id, &promotion)
                    }
                    None => Ok(false),
                }
            })
            .await?;
        if changed {
            self.reload_rules().await?;
        }
        Ok(())
    }

    // ----- outcomes and the spool ---------------------------------------------------------------

    async fn outcome(
        &self,
        peer: Option<Peer>,
        report: OutcomeReport,
        spooled: Option<String>,
    ) -> Result<i64, StoreError> {
        let now = clock::now();
        // An interrupted call says nothing about the command: the person stopped it.
        let signal = match (report.success, report.interrupted) {
            (true, _) => Some(Signal::Success),
            (false, false) => Some(Signal::FailedOutcome),
            (false, true) => None,
        };
        let changes = match signal {
            Some(s) => self.record_signal(&report.agent.session_id, s, now).await,
            None => Vec::new(),
        };
        let (breaker_open, ticked) = self
            .breakers
            .lock()
            .await
            .is_open(&report.agent.session_id, now);
        let changes = [changes, ticked].concat();
        let promotion = self.config.promotion.clone();
        let entry = Entry {
            at_ms: clock::now_ms(),
            kind: Kind::Outcome.as_str().into(),
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
                    let earned = e.decision.as_deref() == Some("allow")
                        && matches!(e.source.as_deref(), Some("sandbox") | Some("learned"))
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
                                            e.tier.as_deref(),
                                            Some("ask" | "deny")
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

    /// Ingests the hook's spool: renames `hook.jsonl` aside, records each line, deletes the copy.
    /// Spool lines come from the agent's uid: claims for the audit, never authority.
    pub async fn ingest_spool(&self) -> Result<Value, StoreError> {
        let Some(dir) = self.paths.spool_dir.clone() else {
            return Ok(json!({"ingested": 0, "skipped": 0, "spool_dir": null}));
        };
        let _guard = self.spool_lock.lock().await;
        let live = dir.join(wire::SPOOL_FILE);
        // A fixed name: a copy left by a crash is found (and ingested first) by the next daemon.
        let taken = dir.join(format!("{}.ingesting", wire::SPOOL_FILE));
        // A copy left by a crash is ingested first; otherwise take the live file.
        if !taken.exists() {
            match std::fs::symlink_metadata(&live) {
                Ok(m) if m.file_type().is_file() => {
                    if let Err(e) = std::fs::rename(&live, &taken) {
                        return Err(StoreError::Reader(format!(
                            "cannot take the spool {}: {e}",
                            live.display()
                        )));
                    }
                }
                Ok(_) => {
                    return Err(StoreError::Reader(format!(
                        "{} is not a regular file; not ingested",
                        live.display()
                    )))
                }
                Err(_) => return Ok(json!({"ingested": 0, "skipped": 0})),
            }
        }
        let text = read_bounded(&taken)
            .map_err(|e| StoreError::Reader(format!("cannot read the spool copy: {e}")))?;
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
                wire::SpoolEntry::LocalAllow {
                    agent,
                    tool_use_id,
                    cwd,
                    project_dir,
                    tool_name,
                    tool_input,
                    rule,
                    tiermap_revision,
                } => {
                    entries.push(Entry {
                        at_ms,
                        kind: Kind::LocalAllow.as_str().into(),
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
                        decision: Some("allow".into()),
                        source: Some(wire_source_name(wire::Source::HookFastPath).into()),
                        rule: Some(rule),
                        tiermap_revision: tiermap_revision.and_then(|r| i64::try_from(r).ok()),
                        note: Some("claimed by the hook's spool".into()),
                        ..Entry::default()
                    });
                }
                wire::SpoolEntry::EscapeHatch {
                    agent,
                    tool_use_id,
                    cwd,
                    tool_name,
                    tool_input,
                    reason,
                    verdict,
                } => {
                    let changes = self
                        .record_signal(
                            &agent.session_id,
                            Signal::Integrity(Integrity::EscapeHatch),
                            clock::now(),
                        )
                        .await;
                    let entry = Entry {
                        at_ms,
                        kind: Kind::EscapeHatch.as_str().into(),
                        session: Some(agent.session_id),
                        agent_id: agent.agent_id,
                        tool_use_id: Some(tool_use_id),
                        cwd: Some(cwd),
                        command: Some(summarize_tool(&tool_name, &tool_input)),
                        tool: Some(tool_name),
                        tool_input: Some(sanitize(&tool_input).to_string()),
                        decision: verdict.map(|v| v.as_str().to_owned()),
                        source: Some(wire_source_name(wire::Source::EscapeHatch).into()),
                        reason: Some(reason),
                        note: Some("claimed by the hook's spool".into()),
                        ..Entry::default()
                    };
                    self.store
                        .write(move |c| {
                            let row = audit::append(c, entry)?;
                            persist_breakers(c, &changes, Some(row.id))
                        })
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
        let _ = std::fs::remove_file(&taken);
        Ok(json!({"ingested": ingested, "skipped": skipped}))
    }

    // ----- admin --------------------------------------------------------------------------------

    async fn status(&self) -> Value {
        let now = clock::now();
        let breakers = self.breakers.lock().await.summary(now);
        let last = self
            .store
            .read(|c| {
                audit::query(
                    c,
                    &audit::Query {
                        limit: Some(1),
                        newest: true,
                        ..Default::default()
                    },
                )
            })
            .await;
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "uptime_s": self.started.elapsed().as_secs(),
            "mode": self.paths.mode,
            "paths": {
                "config": self.paths.config_file,
                "store": self.paths.db,
                "decide_socket": self.paths.decide_socket,
                "admin_socket": self.paths.admin_socket,
                "spool": self.paths.spool_dir,
                "trusted_keys": self.paths.locations.trusted_keys(),
            },
            "decisions_served": self.decisions.load(Ordering::Relaxed),
            "peers_refused": self.refused.load(Ordering::Relaxed),
            "last_audit_id": last.ok().and_then(|rows| rows.last().map(|r| r.id)),
            "test_runs": match self.testruns.unavailable() { None => json!("available"), Some(why) => json!(format!("unavailable: {why}")) },
            "deadlines_ms": {"decide": self.config.deadlines.decide_ms, "test_run": self.config.deadlines.test_run_ms},
            "breakers": breakers,
            "projects": self.tiermaps.status().await,
            "rules": self.rules().rules().len(),
            "rules_stale": self.rules_stale.load(Ordering::Acquire),
            "approvals": {"mode": self.config.approvals.mode, "wait_ms": self.config.approvals.wait_ms, "pending": self.pending.len()},
            "notifications": {"enabled": self.config.notify.enabled, "delivered": self.notifier.delivered(), "last_error": self.notifier.last_error()},
        })
    }

    async fn admin(&self, request: ApiRequest) -> ApiResponse {
        let internal = |e: StoreError| ApiResponse::error(500, &e.to_string());
        match request {
            ApiRequest::Status => ApiResponse::json(200, &self.status().await),
            ApiRequest::AuditQuery(q) => {
                match self.store.read(move |c| audit::query(c, &q)).await {
                    Ok(rows) => ApiResponse::json(200, &rows),
                    Err(e) => internal(e),
                }
            }
            ApiRequest::AuditShow(id) => {
                let found = self
                    .store
                    .read(move |c| {
                        Ok(audit::get(c, id)?.map(|row| (row, audit::outcomes_of(c, id))))
                    })
                    .await;
                match found {
                    Ok(Some((row, Ok(outcomes)))) => {
                        ApiResponse::json(200, &json!({"row": row, "outcomes": outcomes}))
                    }
                    Ok(Some((_, Err(e)))) | Err(e) => internal(e),
                    Ok(None) => ApiResponse::error(404, &format!("no audit row {id}")),
                }
            }
            ApiRequest::AuditVerify => match self.store.read(audit::verify).await {
                Ok(report) => ApiResponse::json(200, &report),
                Err(e) => internal(e),
            },
            // The rule verbs live in rules_admin.rs.
            ApiRequest::Rules => self.rules_list().await,
            ApiRequest::RuleShow(id) => self.rule_show(id).await,
            ApiRequest::AddRule(add) => self.rules_add(add).await,
            ApiRequest::SetRuleEnabled { id, enabled, edit } => {
                self.rules_set_enabled(id, enabled, edit).await
            }
            ApiRequest::RemoveRule { id, edit } => self.rules_remove(id, edit).await,
            ApiRequest::ResetBreaker(ResetBreaker { scope }) => {
                let changes = self
                    .breakers
                    .lock()
                    .await
                    .reset(scope.as_deref(), clock::now());
                self.announce(&changes);
                let scopes: Vec<String> = changes.iter().map(|c| c.scope.clone()).collect();
                let entry = Entry {
                    at_ms: clock::now_ms(),
                    kind: Kind::Breaker.as_str().into(),
                    decision: Some("reset".into()),
                    reason: Some(format!("operator reset: {}", scopes.join(", "))),
                    ..Entry::default()
                };
                match self
                    .store
                    .write(move |c| {
                        let row = audit::append(c, entry)?;
                        persist_breakers(c, &changes, Some(row.id))
                    })
                    .await
                {
                    Ok(()) => ApiResponse::json(200, &json!({"reset": scopes})),
                    Err(e) => internal(e),
                }
            }
            ApiRequest::Pending => ApiResponse::json(200, &self.pending.list()),
            ApiRequest::AnswerPending(a) => self.answer_pending(a).await,
            ApiRequest::IngestSpool => match self.ingest_spool().await {
                Ok(v) => ApiResponse::json(200, &v),
                Err(e) => internal(e),
            },
            ApiRequest::Health => ApiResponse::json(
                200,
                &json!({"ok": true, "version": env!("CARGO_PKG_VERSION")}),
            ),
            ApiRequest::Decide(_) | ApiRequest::Outcome(_) => {
                ApiResponse::error(404, "not on the admin socket")
            }
        }
    }
}

/// A request refused before the engine ran.
struct Early {
    entry: Entry,
    why: String,
}

impl Handler for Daemon {
    fn allowed(&self, role: Role, peer: &Peer) -> bool {
        let p = &self.config.peers;
        let (uids, gids) = match role {
            Role::Agent => (&p.decide_uids, &p.decide_gids),
            Role::Admin => (&p.admin_uids, &p.admin_gids),
        };
        if uids.is_empty() && gids.is_empty() {
            return peer.uid == self.uid;
        }
        uids.contains(&peer.uid) || gids.contains(&peer.gid)
    }

    async fn refused(&self, role: Role, peer: Peer) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        eprintln!("cmdgated: refused {peer} on the {} socket", role.as_str());
        let changes = self
            .record_global_signal(Signal::Integrity(Integrity::RefusedPeer), clock::now())
            .await;
        let entry = Entry {
            at_ms: clock::now_ms(),
            kind: Kind::RefusedPeer.as_str().into(),
            decision: Some("deny".into()),
            peer: Some(peer.to_string()),
            note: Some(format!("peer not allowed on the {} socket", role.as_str())),
            ..Entry::default()
        };
        let _ = self
            .store
            .write(move |c| {
                let row = audit::append(c, entry)?;
                persist_breakers(c, &changes, Some(row.id))
            })
            .await;
    }

    async fn handle(&self, role: Role, peer: Peer, request: ApiRequest) -> ApiResponse {
        match (role, request) {
            (Role::Agent, ApiRequest::Decide(req)) => self.decide(peer, *req).await,
            (Role::Agent, ApiRequest::Outcome(report)) => {
                match self.outcome(Some(peer), *report, None).await {
                    Ok(_) => ApiResponse::no_content(),
                    Err(e) => ApiResponse::error(500, &e.to_string()),
                }
            }
            (Role::Agent, ApiRequest::IngestSpool) => match self.ingest_spool().await {
                Ok(v) => ApiResponse::json(200, &v),
                Err(e) => ApiResponse::error(500, &e.to_string()),
            },
            (Role::Agent, ApiRequest::Health) => ApiResponse::json(
                200,
                &json!({"ok": true, "version": env!("CARGO_PKG_VERSION")}),
            ),
            (Role::Agent, other) => {
                ApiResponse::error(404, &format!("{other:?} is not served on the agent socket"))
            }
            (Role::Admin, request) => self.admin(request).await,
        }
    }

    async fn rejected(&self, role: Role, peer: Peer, rejection: Rejection) -> ApiResponse {
        // Audit refused agent requests too: a malformed decide is worth knowing about.
        if role == Role::Agent {
            let entry = Entry {
                at_ms: clock::now_ms(),
                kind: Kind::Decision.as_str().into(),
                decision: Some("deny".into()),
                source: Some(wire_source_name(wire::Source::FailClosed).into()),
                reason: Some(format!(
                    "request refused ({}): {}",
                    rejection.status, rejection.message
                )),
                peer: Some(peer.to_string()),
                ..Entry::default()
            };
            let _ = self.store.append(entry).await;
        }
        ApiResponse::error(rejection.status, &rejection.message)
    }
}

// ----- helpers ------------------------------------------------------------------------------------

fn micros(started: Instant) -> i64 {
    i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX)
}

fn with_id(event: LearnEvent, id: i64) -> LearnEvent {
    match event {
        LearnEvent::CleanTestRun(_) => LearnEvent::CleanTestRun(id),
        LearnEvent::DirtyTestRun(_) => LearnEvent::DirtyTestRun(id),
        LearnEvent::RealSuccess(_) => LearnEvent::RealSuccess(id),
        LearnEvent::RealFailure(_) => LearnEvent::RealFailure(id),
        LearnEvent::Rejected(_) => LearnEvent::Rejected(id),
        LearnEvent::Reclassified(_) => LearnEvent::Reclassified(id),
    }
}

/// Applies a learning event inside the audit row's transaction; `true` when the rules changed.
pub(crate) fn apply_learning(
    c: &Connection,
    project: &str,
    key: &str,
    event: LearnEvent,
    ctx: PromotionContext,
    config: &cmdgate_policy::learn::PromotionConfig,
) -> Result<bool, StoreError> {
    let now = clock::now();
    let mut record = state::learn_record(c, project, key)?.unwrap_or_else(Record::default);
    let transition = record.apply(event, ctx, config, now);
    state::put_learn_record(c, project, key, &record, clock::now_ms())?;
    let at = clock::now_ms();
    match transition {
        None => Ok(false),
        Some(LearnTransition::Promoted { provenance }) => {
            let rule = state::NewRule {
                kind: "learned".into(),
                project: project.to_owned(),
                key: key.to_owned(),
                note: None,
                created_by: "learned".into(),
                provenance: provenance.clone(),
            };
            let id = state::add_rule(c, &rule, at)?;
            audit::append(
                c,
                Entry {
                    at_ms: at,
                    kind: Kind::Learn.as_str().into(),
                    project: Some(project.to_owned()),
                    command: Some(key.to_owned()),
                    decision: Some("promoted".into()),
                    rule: Some(format!("rule #{id}")),
                    note: Some(format!("evidence: audit rows {provenance:?}")),
                    ..Entry::default()
                },
            )?;
            Ok(true)
        }
        Some(LearnTransition::Demoted { because }) => {
            state::disable_learned(c, project, key, at)?;
            audit::append(
                c,
                Entry {
                    at_ms: at,
                    kind: Kind::Learn.as_str().into(),
                    project: Some(project.to_owned()),
                    command: Some(key.to_owned()),
                    decision: Some("demoted".into()),
                    note: Some(format!("because of audit row {because}")),
                    ..Entry::default()
                },
            )?;
            Ok(true)
        }
    }
}

pub(crate) fn persist_breakers(
    c: &Connection,
    changes: &[Changed],
    audit_id: Option<i64>,
) -> Result<(), StoreError> {
    let at = clock::now_ms();
    for ch in changes {
        if !ch.state.is_empty() {
            state::put_breaker(c, &ch.scope, &ch.state, at)?;
        }
        if let Some(t) = &ch.transition {
            let t_json = serde_json::to_string(t).unwrap_or_default();
            state::breaker_event(c, &ch.scope, &t_json, audit_id, at)?;
            audit::append(
                c,
                Entry {
                    at_ms: at,
                    kind: Kind::Breaker.as_str().into(),
                    session: ch.scope.strip_prefix("session:").map(str::to_owned),
                    decision: Some(t_json.clone()),
                    reason: Some(format!("breaker {}: {t_json}", ch.scope)),
                    note: audit_id.map(|id| format!("after audit row {id}")),
                    ..Entry::default()
                },
            )?;
            if ch.scope == breakers::GLOBAL || t_json.contains("tripped") {
                eprintln!("cmdgated: breaker {}: {t_json}", ch.scope);
            }
        }
    }
    Ok(())
}

/// The audit row of a decide request, before the decision.
fn request_entry(peer: Peer, req: &DecideRequest) -> Entry {
    Entry {
        at_ms: clock::now_ms(),
        kind: Kind::Decision.as_str().into(),
        session: Some(req.agent.session_id.clone()),
        agent_id: req.agent.agent_id.clone(),
        agent_type: req.agent.agent_type.clone(),
        permission_mode: req.agent.permission_mode.clone(),
        tool_use_id: Some(req.tool_use_id.clone()),
        cwd: Some(req.cwd.clone()),
        project: Some(req.project_dir.clone()),
        tool: Some(req.tool_name.clone()),
        command: Some(summarize_tool(&req.tool_name, &req.tool_input)),
        tool_input: Some(sanitize(&req.tool_input).to_string()),
        peer: Some(peer.to_string()),
        note: match (&req.hook_note, &req.escape_hatch) {
            (Some(n), Some(h)) => Some(format!("{n}; escape hatch set: {h}")),
            (Some(n), None) => Some(n.clone()),
            (None, Some(h)) => Some(format!("escape hatch set: {h}")),
            (None, None) => None,
        },
        ..Entry::default()
    }
}

/// A read tool (`Read`, `Glob`, `Grep`, `LS`) with its path as the file system resolves it
/// (symbolic links followed), when that differs from how it is spelled; `None` otherwise, or when
/// it does not resolve (nothing there to read through a link).
fn resolved_read_tool(tool: &Tool, cwd: &str) -> Option<Tool> {
    let real = |path: &str| -> Option<String> {
        let spelled = Path::new(cwd).join(path);
        let real = std::fs::canonicalize(&spelled).ok()?;
        (real != spelled).then(|| real.to_string_lossy().into_owned())
    };
    match tool {
        Tool::Read { tool, path } => Some(Tool::Read {
            tool: tool.clone(),
            path: real(path)?,
        }),
        Tool::Search {
            tool,
            path,
            pattern,
        } => Some(Tool::Search {
            tool: tool.clone(),
            path: Some(real(path.as_deref().unwrap_or("."))?),
            pattern: pattern.clone(),
        }),
        _ => None,
    }
}

/// The command (Bash) or a one-line summary of what another tool touches.
pub(crate) fn summarize_tool(tool: &str, input: &Value) -> String {
    let field = |k: &str| input.get(k).and_then(Value::as_str);
    match tool {
        "Bash" => field("command").unwrap_or_default().to_owned(),
        _ => {
            let target = [
                "file_path",
                "notebook_path",
                "path",
                "url",
                "query",
                "pattern",
            ]
            .iter()
            .find_map(|k| field(k));
            match target {
                Some(t) => format!("{tool} {t}"),
                None => tool.to_owned(),
            }
        }
    }
}

/// The tool input with long strings replaced by their size and hash (file contents for Write).
fn sanitize(v: &Value) -> Value {
    match v {
        Value::String(s) if s.len() > MAX_AUDIT_STRING => {
            use sha2::Digest;
            let h = sha2::Sha256::digest(s.as_bytes());
            let hex: String = h.iter().take(16).map(|b| format!("{b:02x}")).collect();
            Value::String(format!("<{} bytes, sha256 {hex}…>", s.len()))
        }
        Value::Array(a) => Value::Array(a.iter().map(sanitize).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), sanitize(v))).collect())
        }
        other => other.clone(),
    }
}

/// Parsed parts and the strictest tier for the audit.
fn describe_parts(entry: &mut Entry, tool: &Tool, snapshot: &Snapshot) {
    let Tool::Bash { command } = tool else { return };
    match shell::analyze(command, &Limits::default()) {
        Analysis::Unanalyzable(u) => {
            entry.parts = serde_json::to_string(&json!({"unanalyzable": u})).ok();
            entry.tier = Some("unknown".into());
        }
        Analysis::Parsed(script) => {
            let mut strictest: Option<Tier> = None;
            let mut unknown = false;
            let parts: Vec<Vec<String>> = script
                .commands
                .iter()
                .map(|c| {
                    let argv: Vec<&str> = c
                        .argv
                        .iter()
                        .map(|w| match w {
                            Word::Static(s) | Word::Dynamic(s) => s.as_str(),
                        })
                        .collect();
                    match snapshot.tier_map().and_then(|m| m.classify(&argv)) {
                        Some((t, _)) => {
                            strictest = Some(strictest.map_or(t, |s| {
                                if t.number() > s.number() {
                                    t
                                } else {
                                    s
                                }
                            }))
                        }
                        None => unknown = true,
                    }
                    c.argv
                        .iter()
                        .map(|w| match w {
                            Word::Static(s) => s.clone(),
                            Word::Dynamic(raw) => format!("{raw} (dynamic)"),
                        })
                        .collect()
                })
                .collect();
            entry.parts = serde_json::to_string(&parts).ok();
            entry.tier = Some(match (strictest, unknown) {
                (Some(t), false) => t.name().to_owned(),
                (Some(t), true) if t.number() >= 2 => t.name().to_owned(),
                _ => "unknown".to_owned(),
            });
        }
    }
}

/// The engine's source as the wire names it.
fn wire_source(s: Source) -> wire::Source {
    match s {
        Source::Unanalyzable => wire::Source::FailClosed,
        Source::Catastrophic | Source::ReadOnlyMap | Source::BuiltinRead | Source::ToolPolicy => {
            wire::Source::Builtin
        }
        Source::TierMap => wire::Source::TierRule,
        Source::Breaker => wire::Source::Breaker,
        Source::Remembered => wire::Source::Remembered,
        Source::Learned => wire::Source::Learned,
        Source::Sandbox => wire::Source::Sandbox,
    }
}

/// The wire source's snake_case name (what the audit stores).
fn wire_source_name(s: wire::Source) -> &'static str {
    match s {
        wire::Source::HookFastPath => "hook_fast_path",
        wire::Source::TierRule => "tier_rule",
        wire::Source::Builtin => "builtin",
        wire::Source::Learned => "learned",
        wire::Source::Remembered => "remembered",
        wire::Source::Sandbox => "sandbox",
        wire::Source::Human => "human",
        wire::Source::Breaker => "breaker",
        wire::Source::FailClosed => "fail_closed",
        wire::Source::EscapeHatch => "escape_hatch",
    }
}

/// The agent's home: from the password database for its uid, else the daemon's `$HOME`.
fn agent_home(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.dir.to_string_lossy().into_owned())
        .or_else(|| std::env::var("HOME").ok())
        .unwrap_or_else(|| "/".into())
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
