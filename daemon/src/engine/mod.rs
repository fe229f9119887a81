//! The engine: the daemon's state and what it does with a request — the decision pipeline
//! (`decide.rs`: validate → canonicalise → snapshot → decide → test-run → learn → breaker signal →
//! commit, audited before it is answered), outcomes and the hook's spool (`outcome.rs`), and the
//! operator's actions, each in the component that owns its state: rules (`rules.rs`,
//! `rules_admin.rs`), breakers (`breakers.rs`), approvals (`approvals.rs`, `pending.rs`), tier maps
//! (`tiermaps.rs`), test-runs (`testrun.rs`), notifications (`notify.rs`).
//!
//! No HTTP here: the engine returns domain results and `crate::api` maps them to status codes.
//! Every error path ends in deny: a request that cannot be read, a store that cannot commit, a
//! deadline that passes. The only answers that allow are `decide`'s, after their audit row is
//! committed.

pub mod accept;
pub mod apply;
pub mod approval_notes;
pub mod approvals;
pub mod breakers;
mod decide;
pub mod escape_hatch;
pub mod export;
pub mod integrity;
// The one resolver of paths as the kernel sees them, shared with the hook (std only).
#[path = "../../../hook/src/kernel.rs"]
pub mod kernel;
// The kernel-paths table, shared with the policy's, the hook's and the end-to-end tests.
#[cfg(test)]
#[path = "../../../policy/tests/kernel_table/mod.rs"]
mod kernel_table;
pub mod learning;
pub mod listing;
mod lookups;
mod memo;
pub mod notify;
pub mod outcome;
pub mod peers;
pub mod pending;
pub mod preview;
pub mod project;
pub mod proxy;
mod record;
pub mod redeem;
pub mod reviewer;
pub mod rules;
pub mod rules_admin;
pub mod runs;
pub mod scope;
mod secret_tables;
pub mod status;
pub mod testrun;
pub mod tickets;
pub mod tiermaps;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use cmdgate_policy::breaker::BreakerConfig;
use cmdgate_sandbox::HelperCommand;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::clock;
use crate::config::{Config, Paths};
use crate::store::audit::{self, Entry, Kind};
use crate::store::{state, Store, StoreError};
use breakers::{persist_breakers, BreakerBoard, Breakers};
use notify::{Notifier, NotifyConfig};
use pending::Pending;
use rules::Rules;
use runs::Runs;
use status::{Status, StatusApprovals, StatusDeadlines, StatusNotifications, StatusPaths};
use testrun::TestRunner;
use tickets::Tickets;
use tiermaps::TierMaps;

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the store")]
    Store(#[from] StoreError),
    #[error("stored rule {id} has an unknown kind {kind:?}")]
    Rule { id: i64, kind: String },
    #[error("a start-up step on the blocking pool failed: {0}")]
    Blocking(String),
}

/// Why a request could not be completed: the store failed, or a committed change could not be
/// loaded into the engine. Either ends a decision in deny.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the store failed: {0}")]
    Store(#[from] StoreError),
    #[error("a committed rule change could not be loaded: {0}")]
    RulesReload(#[from] rules::ReloadError),
}

/// What the binary hands the engine.
pub struct Options {
    pub config: Config,
    pub paths: Paths,
    /// How the sandbox library starts its helper (`cmdgated __sandbox-helper`, `cmdgate sandbox __helper`).
    pub helper: HelperCommand,
    /// The daemon's own uid: the default allowed peer.
    pub uid: u32,
}

/// Which socket a caller came in on: the agent's (decide, outcome) or the operator's (admin). The
/// allowed peers differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Agent,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Admin => "admin",
        }
    }
}

/// The connecting process, as the kernel reports it (`SO_PEERCRED`): it cannot be forged by the
/// client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "uid={} gid={}", self.uid, self.gid)?;
        if let Some(pid) = self.pid {
            write!(f, " pid={pid}")?;
        }
        Ok(())
    }
}

/// The engine: configuration and the components, each owning its state.
pub struct Engine {
    pub config: Config,
    pub paths: Paths,
    pub(crate) store: Store,
    pub(crate) tiermaps: TierMaps,
    /// Remembered and learned rules, swapped whole on a change.
    pub(crate) rules: Rules,
    /// Per-session and global circuit breakers (announced on the desktop when they move).
    pub(crate) breakers: BreakerBoard,
    pub(crate) testruns: TestRunner,
    /// Mirrored runs (issue 19): the run is the test-run; clean effects are committed.
    pub(crate) runs: Runs,
    /// One-use tickets for mirrored runs, issued by decide and redeemed by `cmdgate-run`.
    pub(crate) tickets: Tickets,
    started: Instant,
    uid: u32,
    decisions: AtomicU64,
    /// Refused connections per uid (audited sparsely; never a breaker signal).
    pub(crate) refusals: peers::Refusals,
    /// Which uid opened each session: a request naming another uid's session is refused.
    pub(crate) sessions: peers::SessionOwners,
    /// The operator's escape-hatch grants (system mode's hatch), in memory only.
    pub(crate) hatches: escape_hatch::EscapeHatches,
    /// Desktop notifications (breaker trips, held asks); never delays a decision.
    pub(crate) notifier: Arc<Notifier>,
    /// Asks held for the operator (background mode); in memory only.
    pub(crate) pending: Pending,
    /// Serialises spool ingestion (a timer and requests may both trigger it).
    spool_lock: Mutex<()>,
    /// Audit writes that failed (never silent: logged, counted, in `status`).
    pub(crate) audit_integrity: integrity::AuditIntegrity,
    /// The operator's model reviewer (`[reviewer]`; off by default). Its key comes from the
    /// daemon's environment at start and stays in memory.
    pub(crate) reviewer: reviewer::Reviewer,
    /// cmdgate's own paths the shared list does not know (`decide::own_extras`), found once at
    /// start: the binaries' directory is a file-system read, not one per decision.
    pub(crate) own_extras: Vec<String>,
    /// The secret table compiled once per set of homes (`secret_tables.rs`), not per decision.
    pub(crate) secret_tables: Arc<secret_tables::SecretTables>,
    /// `lstat` answers kept across decisions while the kernel reports no change to them
    /// (`lookups.rs`).
    pub(crate) lookups: Arc<lookups::Lookups>,
    /// The engine itself, for work that outlives a request handler (a mirrored run streams after
    /// the handler returned its response).
    me: std::sync::Weak<Engine>,
}

/// Mirrored runs at once, at least (each is a command the agent is waiting on; more wait for a
/// slot, showing nothing). `sandbox.max_concurrent` raises it.
const MIN_CONCURRENT_RUNS: usize = 4;

/// The global breaker trips at five times the session threshold: one runaway session should not
/// stop every other, many should.
fn global_breaker(session: &BreakerConfig) -> BreakerConfig {
    BreakerConfig {
        threshold: session.threshold.max(1).saturating_mul(5),
        ..session.clone()
    }
}

impl Engine {
    /// Opens the store, restores rules and breakers, prepares test-runs.
    pub async fn open(options: Options) -> Result<Arc<Engine>, StartError> {
        let Options {
            config,
            paths,
            helper,
            uid,
        } = options;
        let store = Store::open(&paths.db)?;
        let rules = match store.read(rules::load).await? {
            Ok(r) => Rules::new(r),
            Err((id, kind)) => return Err(StartError::Rule { id, kind }),
        };
        let rows = store.read(state::breakers).await?;
        let (mut breakers, problems) = Breakers::restore(
            config.breaker.clone(),
            global_breaker(&config.breaker),
            rows,
        );
        breakers.restore_last(store.read(state::last_breaker_transitions).await?);
        for p in problems {
            eprintln!("cmdgated: breaker state: {p} (starting that breaker fresh)");
        }
        let notifier = Notifier::new(NotifyConfig {
            enabled: config.notify.enabled,
            ..NotifyConfig::default()
        });
        // Mirrored runs first: a crash mid-commit is rolled back (or an interrupted undo finished)
        // before anything is served, and before the test-run sweep looks at the state dir.
        // What every mirror hides (cmdgate's own paths, the operator's secret paths) and how it
        // judges git: the same for mirrored runs and test-runs.
        let scope = scope::MirrorScope::new(&paths, &config);
        let runs = Runs::new(
            helper.clone(),
            paths.sandbox_state.clone(),
            config.sandbox.clone(),
            config.sandbox.max_concurrent.max(MIN_CONCURRENT_RUNS),
        )
        .scoped(scope.clone())
        .with_network(config.network.clone());
        if let Some(why) = runs.unavailable() {
            eprintln!("cmdgated: mirrored runs unavailable: {why}; tier-1 and unknown commands that are not `direct` will be denied");
        }
        if runs.unavailable().is_none() {
            let state = paths.sandbox_state.clone();
            let keeper = runs.keeper();
            let report = tokio::task::spawn_blocking(move || keeper.recover(&state))
                .await
                .unwrap_or_default();
            redeem::record_recovery(&store, &report).await?;
        }
        let testruns = TestRunner::new(helper, paths.sandbox_state.clone(), config.sandbox.clone())
            .scoped(scope);
        if let Some(why) = testruns.unavailable() {
            eprintln!("cmdgated: test-runs unavailable: {why}; tier-1 and unknown commands of `direct` entries will be asked, never allowed");
        }
        // Publish the accepted revisions before serving, so the hook's replay check is right
        // from the first call.
        let tiermaps = TierMaps::new(PathBuf::from(paths.locations.trusted_keys())).publishing(
            PathBuf::from(paths.locations.tiermap_revisions()),
            config.peers.publish_gid,
        );
        tiermaps.publish(&store).await?;
        let reviewer = reviewer::Reviewer::new(config.reviewer.clone(), |k| std::env::var(k).ok());
        if let (true, Some(p)) = (config.reviewer.enabled, reviewer.unavailable()) {
            eprintln!(
                "cmdgated: the model reviewer is unavailable ({p}); a person decides every ask"
            );
        }
        // Escape-hatch grants in force and session bindings survive a restart.
        let hatches = escape_hatch::EscapeHatches::default();
        let now = clock::now();
        let now_ms = clock::now_ms();
        let (grants, max_grant) = store
            .read(move |c| crate::store::state::hatches_in_force(c, now_ms))
            .await?;
        hatches.restore(grants, max_grant);
        let sessions = peers::SessionOwners::default();
        let since = now_ms.saturating_sub(
            i64::try_from(peers::SESSION_IDLE_MS + peers::SESSION_TOUCH_MS).unwrap_or(i64::MAX),
        );
        let bound = store
            .write(move |c| crate::store::state::session_owners(c, since))
            .await?;
        sessions.restore(bound, now);
        let own_extras = {
            let paths = paths.clone();
            tokio::task::spawn_blocking(move || decide::own_extras(&paths))
                .await
                .map_err(|e| StartError::Blocking(format!("finding cmdgate's own paths: {e}")))?
        };
        Ok(Arc::new_cyclic(|me| Engine {
            me: me.clone(),
            own_extras,
            secret_tables: Arc::new(secret_tables::SecretTables::new(
                config.secret_paths.clone(),
            )),
            lookups: Arc::new(lookups::Lookups::default()),
            reviewer,
            tiermaps,
            config,
            paths,
            store,
            rules,
            breakers: BreakerBoard::new(breakers, Arc::clone(&notifier)),
            testruns,
            runs,
            tickets: Tickets::new(std::time::Duration::from_millis(
                cmdgate_policy::wire::run::DEFAULT_TICKET_TTL_MS,
            )),
            started: Instant::now(),
            uid,
            decisions: AtomicU64::new(0),
            refusals: peers::Refusals::default(),
            sessions,
            hatches,
            spool_lock: Mutex::new(()),
            pending: Pending::default(),
            notifier,
            audit_integrity: integrity::AuditIntegrity::default(),
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

    /// Reloads the rules from the store (after a committed change).
    pub(crate) async fn reload_rules(&self) -> Result<(), rules::ReloadError> {
        self.rules.reload(&self.store).await
    }

    /// Prunes quiet session breakers and their rows (called from the spool timer).
    pub async fn prune_breakers(&self) -> Result<usize, StoreError> {
        self.breakers.prune(&self.store).await
    }

    // ----- peers --------------------------------------------------------------------------------

    /// May this peer use this socket? Its uid, primary gid or one of its supplementary `groups`
    /// (`SO_PEERGROUPS`) listed in `[peers]`, else the daemon's own uid only.
    pub fn peer_allowed(&self, role: Role, peer: &Peer, groups: &[u32]) -> bool {
        peers::allows(
            &self.config.peers,
            self.uid,
            role,
            peer.uid,
            peer.gid,
            groups,
        )
    }

    /// A peer was refused: counted per uid and audited as an integrity event (the first refusal of
    /// a uid and each power of ten after it, so a flood cannot fill the disk). Never a breaker
    /// signal: any local user who can reach a socket could otherwise make every agent read-only.
    pub async fn peer_refused(&self, role: Role, peer: Peer) {
        let (count, audited) = self.refusals.count(peer.uid);
        if !audited {
            return;
        }
        eprintln!(
            "cmdgated: refused {peer} on the {} socket ({count} refusal(s) of uid {})",
            role.as_str(),
            peer.uid
        );
        let entry = Entry {
            at_ms: clock::now_ms(),
            kind: Kind::RefusedPeer,
            decision: Some(cmdgate_policy::wire::Verdict::Deny.into()),
            peer: Some(peer.to_string()),
            note: Some(format!(
                "peer not allowed on the {} socket (refusal {count} of uid {})",
                role.as_str(),
                peer.uid
            )),
            ..Entry::default()
        };
        if let Err(e) = self.store.append(entry).await {
            self.audit_integrity.failed("refused peer", &e);
        }
    }

    /// Binds `session` to the peer's uid, or says whose it is: a request naming another uid's
    /// session is refused and audited (`session_refused`) before anything else sees it, so it
    /// cannot trip that session's breaker or use its escape hatch.
    pub(crate) async fn claim_session(&self, peer: Peer, session: &str) -> Result<(), String> {
        let now = clock::now();
        let owner = match self.sessions.claim(session, peer.uid, now) {
            Ok(peers::Claimed { store: false }) => return Ok(()),
            Ok(peers::Claimed { store: true }) => {
                // Stored so a restart keeps the binding; a failed write is an integrity event
                // (the binding holds in memory until the restart).
                let (s, uid, at) = (session.to_owned(), peer.uid, clock::now_ms());
                let stored = self
                    .store
                    .write(move |c| crate::store::state::put_session_owner(c, &s, uid, at))
                    .await;
                if let Err(e) = stored {
                    self.audit_integrity.failed("session binding", &e);
                }
                return Ok(());
            }
            Err(owner) => owner,
        };
        let why = format!(
            "session {session:?} was opened by another user (uid {owner}); a request may only name \
             its own sessions"
        );
        let entry = Entry {
            at_ms: clock::now_ms(),
            kind: Kind::SessionRefused,
            session: Some(session.to_owned()),
            decision: Some(cmdgate_policy::wire::Verdict::Deny.into()),
            reason: Some(why.clone()),
            peer: Some(peer.to_string()),
            ..Entry::default()
        };
        if let Err(e) = self.store.append(entry).await {
            self.audit_integrity.failed("refused session", &e);
        }
        Err(why)
    }

    /// An agent request that could not be parsed: audited as a fail-closed deny (a malformed
    /// decide is worth knowing about).
    pub async fn request_refused(&self, peer: Peer, why: String) {
        let entry = Entry {
            at_ms: clock::now_ms(),
            kind: Kind::Decision,
            decision: Some(cmdgate_policy::wire::Verdict::Deny.into()),
            source: Some(cmdgate_policy::wire::Source::FailClosed.into()),
            reason: Some(why),
            peer: Some(peer.to_string()),
            ..Entry::default()
        };
        if let Err(e) = self.store.append(entry).await {
            self.audit_integrity.failed("refused request", &e);
        }
    }

    // ----- admin --------------------------------------------------------------------------------

    /// `cmdgate breaker reset [--session ID | --global]`: the scopes reset, audited.
    pub async fn reset_breakers(&self, scope: Option<&str>) -> Result<Vec<String>, StoreError> {
        let changes = self.breakers.reset(scope, clock::now()).await;
        let scopes: Vec<String> = changes.iter().map(|c| c.scope.clone()).collect();
        let entry = Entry {
            at_ms: clock::now_ms(),
            kind: Kind::Breaker,
            decision: Some(audit::BreakerDecision::OperatorReset.into()),
            reason: Some(format!("operator reset: {}", scopes.join(", "))),
            ..Entry::default()
        };
        self.store
            .write(move |c| {
                let row = audit::append(c, entry)?;
                persist_breakers(c, &changes, Some(row.id))
            })
            .await?;
        Ok(scopes)
    }

    /// The runs section of `cmdgate status`: the newest `run` rows and the undo journal.
    async fn runs_status(&self) -> crate::engine::status::StatusRuns {
        use crate::engine::status::{runs_summary, StatusRuns, RUNS_COUNTED};
        let rows = self
            .store
            .read(|c| {
                audit::query(
                    c,
                    &audit::Query {
                        kind: Some(Kind::Run.as_str().into()),
                        limit: Some(RUNS_COUNTED),
                        newest: true,
                        ..Default::default()
                    },
                )
            })
            .await;
        let state = self.runs.state_dir().to_path_buf();
        let keeper = self.runs.keeper();
        let journal =
            tokio::task::spawn_blocking(move || keeper.runs(&state).unwrap_or_default()).await;
        let undoable: Vec<String> = journal
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter(|j| j.state == cmdgate_sandbox::commit::JournalState::Committed)
            .map(|j| j.run_id.clone())
            .collect();
        match rows {
            Ok(rows) => {
                let mut s = runs_summary(&rows, &undoable);
                if let Err(e) = journal {
                    s.problem = Some(format!("the undo journal could not be read: {e}"));
                }
                s
            }
            Err(e) => StatusRuns {
                undoable: undoable.len() as u64,
                problem: Some(format!("the audit could not be read: {e}")),
                ..StatusRuns::default()
            },
        }
    }

    /// What the running daemon is doing (`GET /admin/status`).
    pub async fn status(&self) -> Status {
        let now = clock::now();
        let breakers = self.breakers.summary(now).await;
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
        let runs = self.runs_status().await;
        Status {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pid: std::process::id(),
            uptime_s: self.started.elapsed().as_secs(),
            mode: self.paths.mode,
            paths: StatusPaths {
                config: self.paths.config_file.clone(),
                store: self.paths.db.clone(),
                decide_socket: self.paths.decide_socket.clone(),
                admin_socket: self.paths.admin_socket.clone(),
                spool: self.paths.spool_dir.clone(),
                trusted_keys: self.paths.locations.trusted_keys(),
            },
            decisions_served: self.decisions.load(Ordering::Relaxed),
            peers_refused: self.refusals.total(),
            peers_refused_by_uid: self
                .refusals
                .snapshot()
                .into_iter()
                .map(|(uid, n)| (uid.to_string(), n))
                .collect(),
            last_audit_id: last.ok().and_then(|rows| rows.last().map(|r| r.id)),
            test_runs: match self.testruns.unavailable() {
                None => "available".to_owned(),
                Some(why) => format!("unavailable: {why}"),
            },
            deadlines_ms: StatusDeadlines {
                decide: self.config.deadlines.decide_ms,
                test_run: self.config.deadlines.test_run_ms,
            },
            breakers,
            projects: self.tiermaps.status().await,
            rules: self.rules.current().rules().len(),
            rules_stale: self.rules.is_stale(),
            audit_failures: self.audit_integrity.summary(),
            reviewer: self.reviewer.status(),
            approvals: StatusApprovals {
                mode: self.config.approvals.mode,
                wait_ms: self.config.approvals.wait_ms,
                pending: self.pending.len(),
            },
            notifications: StatusNotifications {
                enabled: self.config.notify.enabled,
                delivered: self.notifier.delivered(),
                last_error: self.notifier.last_error(),
            },
            runs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_audit_write_is_counted_and_shown_in_status() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_string_lossy().into_owned();
        let var = |k: &str| match k {
            "CMDGATE_HOME" => Some(format!("{root}/data")),
            "CMDGATE_CONFIG_DIR" => Some(format!("{root}/config")),
            "XDG_RUNTIME_DIR" => Some(format!("{root}/run")),
            "HOME" => Some(root.clone()),
            _ => None,
        };
        let config = Config::default();
        let paths = Paths::resolve(&var, &config);
        let engine = Engine::open(Options {
            config,
            paths,
            helper: HelperCommand {
                program: "/nonexistent/cmdgated".into(),
                args: Vec::new(),
            },
            uid: 0,
        })
        .await
        .unwrap();
        assert_eq!(
            serde_json::to_value(engine.status().await).unwrap()["audit_failures"]["count"],
            0
        );
        // The writer stops: every later audit write fails.
        engine.close().await;
        let peer = Peer {
            uid: 4242,
            gid: 4242,
            pid: None,
        };
        engine.peer_refused(Role::Admin, peer).await;
        engine
            .request_refused(peer, "request refused (400): test".into())
            .await;
        let status = serde_json::to_value(engine.status().await).unwrap();
        assert_eq!(status["audit_failures"]["count"], 2, "{status}");
        assert_eq!(status["audit_failures"]["last"]["what"], "refused request");
        assert!(status["audit_failures"]["last"]["error"]
            .as_str()
            .unwrap()
            .contains("writer"));
    }
}
