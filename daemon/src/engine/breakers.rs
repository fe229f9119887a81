//! The circuit breakers the daemon keeps: one per agent session and a global one, persisted in the
//! store so their state survives a restart. A session breaker that is closed and has had no bad
//! signal (and no transition) for a whole window is pruned, row and all: it is indistinguishable from
//! a fresh one, and a daemon that runs for weeks must not keep one per session it ever saw.

use std::collections::HashMap;
use std::sync::Arc;

use cmdgate_policy::breaker::{Breaker, BreakerConfig, Signal, State, Transition};
use cmdgate_policy::time::UnixMillis;
use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::clock;
use crate::engine::notify::{Note, Notifier};
use crate::store::audit::{self, BreakerDecision, Entry, Kind};
use crate::store::{state, Store, StoreError};

/// The global breaker's scope name; sessions are `session:<id>`.
pub const GLOBAL: &str = "global";

/// Pruning runs at most this often (it is called from the spool timer).
const PRUNE_EVERY_MS: u64 = 60_000;

/// A breaker whose state must be written (after a signal), with the transition it made.
#[derive(Debug, Clone, Serialize)]
pub struct Changed {
    pub scope: String,
    /// The serialized `Breaker`.
    pub state: String,
    pub transition: Option<Transition>,
}

/// Every breaker that is not quiet (`cmdgate breaker status`, the `breakers` of `cmdgate status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakersSummary {
    pub global: BreakerView,
    /// Sessions whose breaker is not closed, has a score, or made a transition; by scope.
    pub sessions: Vec<BreakerView>,
}

/// One breaker as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerView {
    /// `global` or `session:<id>`.
    pub scope: String,
    /// The session id (session breakers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    pub state: State,
    pub score: u32,
    pub threshold: u32,
    pub opened_at_ms: Option<UnixMillis>,
    pub half_open_at_ms: Option<UnixMillis>,
    pub half_open_since_ms: Option<UnixMillis>,
    pub last_transition: Option<LastTransition>,
}

/// A breaker's latest transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastTransition {
    pub at_ms: UnixMillis,
    pub transition: Transition,
}

/// All breakers.
pub struct Breakers {
    session_config: BreakerConfig,
    global: Breaker,
    sessions: HashMap<String, Breaker>,
    /// The last transition of each scope, for `cmdgate breaker status`.
    last: HashMap<String, (UnixMillis, Transition)>,
    /// When pruning may run next.
    next_prune: UnixMillis,
}

fn scope_of(session: &str) -> String {
    format!("session:{session}")
}

impl Breakers {
    /// Fresh breakers, then every persisted one restored (a row that no longer parses, say after an
    /// upgrade, is replaced by a fresh breaker with the current config and reported).
    pub fn restore(
        session_config: BreakerConfig,
        global_config: BreakerConfig,
        rows: Vec<(String, String)>,
    ) -> (Breakers, Vec<String>) {
        let mut b = Breakers {
            session_config,
            global: Breaker::new(global_config),
            sessions: HashMap::new(),
            last: HashMap::new(),
            next_prune: UnixMillis(0),
        };
        let mut problems = Vec::new();
        for (scope, json) in rows {
            match serde_json::from_str::<Breaker>(&json) {
                Ok(breaker) if scope == GLOBAL => b.global = breaker,
                Ok(breaker) => match scope.strip_prefix("session:") {
                    Some(s) => {
                        b.sessions.insert(s.to_owned(), breaker);
                    }
                    None => problems.push(format!("unknown breaker scope {scope:?}")),
                },
                Err(e) => problems.push(format!("breaker {scope}: {e}")),
            }
        }
        (b, problems)
    }

    /// The last transition of each scope, from the store's `breaker_events` (rows that no longer
    /// parse, or of scopes no longer kept, are skipped: they only feed `status`).
    pub fn restore_last(&mut self, rows: Vec<(String, Option<Transition>, i64)>) {
        for (scope, transition, at) in rows {
            let kept = scope == GLOBAL
                || scope
                    .strip_prefix("session:")
                    .is_some_and(|s| self.sessions.contains_key(s));
            if let (true, Some(t)) = (kept, transition) {
                self.last
                    .insert(scope, (UnixMillis(u64::try_from(at).unwrap_or(0)), t));
            }
        }
    }

    /// Is this session in read-only mode (its own breaker or the global one open)? Lets time pass
    /// first, so an ended cooldown counts; the returned changes must be persisted.
    pub fn is_open(&mut self, session: &str, now: UnixMillis) -> (bool, Vec<Changed>) {
        let mut changed = Vec::new();
        if let Some(t) = self.global.tick(now) {
            changed.push(self.changed(GLOBAL.to_owned(), Some(t), now));
        }
        let mut open = self.global.is_read_only();
        if let Some(b) = self.sessions.get_mut(session) {
            let t = b.tick(now);
            open |= b.is_read_only();
            if t.is_some() {
                changed.push(self.changed(scope_of(session), t, now));
            }
        }
        (open, changed)
    }

    /// Records a signal for a session (and globally); returns what to persist. An ended cooldown
    /// is its own transition (half-open), before the one the signal makes (re-opened, closed).
    pub fn record(&mut self, session: &str, signal: Signal, now: UnixMillis) -> Vec<Changed> {
        let config = self.session_config.clone();
        let scope = scope_of(session);
        let b = self
            .sessions
            .entry(session.to_owned())
            .or_insert_with(|| Breaker::new(config));
        let ticked = b.tick(now);
        let t = b.record(signal, now);
        let mut out = Vec::new();
        if ticked.is_some() {
            out.push(self.changed(scope.clone(), ticked, now));
        }
        out.push(self.changed(scope, t, now));
        out.extend(self.record_global(signal, now));
        out
    }

    /// Records a signal for the global breaker only (every session signal also lands here).
    fn record_global(&mut self, signal: Signal, now: UnixMillis) -> Vec<Changed> {
        let mut out = Vec::new();
        if let Some(t) = self.global.tick(now) {
            out.push(self.changed(GLOBAL.to_owned(), Some(t), now));
        }
        let g = self.global.record(signal, now);
        out.push(self.changed(GLOBAL.to_owned(), g, now));
        out
    }

    /// Forgets session breakers that are closed, with no bad signal in their window and no
    /// transition within a window: a fresh breaker would behave the same. At most once a minute;
    /// returns the scopes whose persisted rows should go.
    pub fn prune(&mut self, now: UnixMillis) -> Vec<String> {
        if now < self.next_prune {
            return Vec::new();
        }
        self.next_prune = now.plus(PRUNE_EVERY_MS);
        let window = self.session_config.window_ms;
        let quiet: Vec<String> = self
            .sessions
            .iter()
            .filter(|(s, b)| {
                let recent = self
                    .last
                    .get(&scope_of(s))
                    .is_some_and(|(at, _)| *at > now.minus(window));
                matches!(b.state(), State::Closed) && b.score(now) == 0 && !recent
            })
            .map(|(s, _)| s.clone())
            .collect();
        quiet
            .into_iter()
            .map(|s| {
                self.sessions.remove(&s);
                let scope = scope_of(&s);
                self.last.remove(&scope);
                scope
            })
            .collect()
    }

    /// How many session breakers are kept.
    pub fn sessions_kept(&self) -> usize {
        self.sessions.len()
    }

    /// The operator's reset of one scope (`global`, `session:ID`) or, with `None`, of all.
    pub fn reset(&mut self, scope: Option<&str>, now: UnixMillis) -> Vec<Changed> {
        let scopes: Vec<String> = match scope {
            Some(s) => vec![s.to_owned()],
            None => std::iter::once(GLOBAL.to_owned())
                .chain(self.sessions.keys().map(|s| scope_of(s)))
                .collect(),
        };
        let mut out = Vec::new();
        for scope in scopes {
            let t = if scope == GLOBAL {
                Some(self.global.reset())
            } else {
                scope
                    .strip_prefix("session:")
                    .and_then(|s| self.sessions.get_mut(s))
                    .map(Breaker::reset)
            };
            if t.is_some() {
                out.push(self.changed(scope, t, now));
            }
        }
        out
    }

    fn changed(
        &mut self,
        scope: String,
        transition: Option<Transition>,
        now: UnixMillis,
    ) -> Changed {
        if let Some(t) = &transition {
            self.last.insert(scope.clone(), (now, t.clone()));
        }
        let breaker = if scope == GLOBAL {
            Some(&self.global)
        } else {
            scope
                .strip_prefix("session:")
                .and_then(|s| self.sessions.get(s))
        };
        Changed {
            state: breaker
                .and_then(|b| serde_json::to_string(b).ok())
                .unwrap_or_default(),
            scope,
            transition,
        }
    }

    /// The global breaker and every session breaker that is not closed, has a score, or made a
    /// transition, for `status` and `breaker status`: state (the tagged `State`), score and
    /// threshold, when it opened and when it goes half-open, the last transition.
    pub fn summary(&self, now: UnixMillis) -> BreakersSummary {
        let mut sessions: Vec<BreakerView> = self
            .sessions
            .iter()
            .filter(|(s, b)| {
                !matches!(b.state(), State::Closed)
                    || b.score(now) > 0
                    || self.last.contains_key(&scope_of(s))
            })
            .map(|(s, b)| BreakerView {
                session: Some(s.clone()),
                ..self.describe(&scope_of(s), b, now)
            })
            .collect();
        sessions.sort_by(|a, b| a.scope.cmp(&b.scope));
        BreakersSummary {
            global: self.describe(GLOBAL, &self.global, now),
            sessions,
        }
    }

    fn describe(&self, scope: &str, b: &Breaker, now: UnixMillis) -> BreakerView {
        let (opened_at, half_open_at, half_open_since) = match b.state() {
            State::Closed => (None, None, None),
            State::Open {
                since,
                half_open_at,
                ..
            } => (Some(*since), *half_open_at, None),
            State::HalfOpen { since, .. } => (None, None, Some(*since)),
        };
        BreakerView {
            scope: scope.to_owned(),
            session: None,
            state: b.state().clone(),
            score: b.score(now),
            threshold: b.config().threshold.max(1),
            opened_at_ms: opened_at,
            half_open_at_ms: half_open_at,
            half_open_since_ms: half_open_since,
            last_transition: self.last.get(scope).map(|(at, t)| LastTransition {
                at_ms: *at,
                transition: t.clone(),
            }),
        }
    }
}

/// The breakers as a component: the state machines behind one lock, and the notifier that
/// announces every transition.
pub(crate) struct BreakerBoard {
    breakers: Mutex<Breakers>,
    notifier: Arc<Notifier>,
}

impl BreakerBoard {
    pub(crate) fn new(breakers: Breakers, notifier: Arc<Notifier>) -> BreakerBoard {
        BreakerBoard {
            breakers: Mutex::new(breakers),
            notifier,
        }
    }

    /// Records a breaker signal for a session and announces a trip on the desktop.
    pub(crate) async fn record(
        &self,
        session: &str,
        signal: Signal,
        now: UnixMillis,
    ) -> Vec<Changed> {
        let changes = self.breakers.lock().await.record(session, signal, now);
        self.announce(&changes);
        changes
    }

    /// Whether the session (or the global breaker) is open, with the transitions time made.
    pub(crate) async fn is_open(&self, session: &str, now: UnixMillis) -> (bool, Vec<Changed>) {
        self.breakers.lock().await.is_open(session, now)
    }

    /// `is_open` without waiting: `None` when the lock is held (a signal or a prune in progress),
    /// and the caller then takes the waiting path. Never blocks, so it may run on any thread.
    pub(crate) fn try_is_open(
        &self,
        session: &str,
        now: UnixMillis,
    ) -> Option<(bool, Vec<Changed>)> {
        Some(self.breakers.try_lock().ok()?.is_open(session, now))
    }

    /// The operator's reset (`None`: every breaker), announced.
    pub(crate) async fn reset(&self, scope: Option<&str>, now: UnixMillis) -> Vec<Changed> {
        let changes = self.breakers.lock().await.reset(scope, now);
        self.announce(&changes);
        changes
    }

    /// `cmdgate breaker status`.
    pub(crate) async fn summary(&self, now: UnixMillis) -> BreakersSummary {
        self.breakers.lock().await.summary(now)
    }

    /// Prunes quiet session breakers and their rows (called from the spool timer).
    pub(crate) async fn prune(&self, store: &Store) -> Result<usize, StoreError> {
        // The lock is held across the write, so a signal for a pruned session cannot be persisted
        // between the prune and the delete and then be deleted.
        let mut breakers = self.breakers.lock().await;
        let gone = breakers.prune(clock::now());
        if gone.is_empty() {
            return Ok(0);
        }
        let n = gone.len();
        store
            .write(move |c| state::delete_breaker_states(c, &gone))
            .await?;
        drop(breakers);
        Ok(n)
    }

    /// A desktop notification for every breaker transition; an opening one is urgent (never
    /// waits: see `notify`).
    fn announce(&self, changes: &[Changed]) {
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
}

/// Persists breaker changes inside an audit row's transaction: the new state, the transition as a
/// `breaker_events` row and a `breaker` audit row.
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
            let decision = BreakerDecision::Transition(t.clone());
            let t_json = decision.encode();
            state::breaker_event(c, &ch.scope, t, audit_id, at)?;
            audit::append(
                c,
                Entry {
                    at_ms: at,
                    kind: Kind::Breaker,
                    session: ch.scope.strip_prefix("session:").map(str::to_owned),
                    decision: Some(decision.into()),
                    reason: Some(format!("breaker {}: {t_json}", ch.scope)),
                    note: audit_id.map(|id| format!("after audit row {id}")),
                    ..Entry::default()
                },
            )?;
            if ch.scope == GLOBAL || matches!(t, Transition::Tripped { .. }) {
                eprintln!("cmdgated: breaker {}: {t_json}", ch.scope);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(b: &Breakers, now: UnixMillis) -> serde_json::Value {
        serde_json::to_value(b.summary(now)).unwrap()
    }

    #[test]
    fn a_session_trips_alone_and_survives_a_restore() {
        let cfg = BreakerConfig {
            threshold: 2,
            ..BreakerConfig::default()
        };
        let global = BreakerConfig {
            threshold: 100,
            ..BreakerConfig::default()
        };
        let (mut b, problems) = Breakers::restore(cfg.clone(), global.clone(), Vec::new());
        assert!(problems.is_empty());
        let now = UnixMillis(1_000);
        b.record("s1", Signal::Denial, now);
        let changed = b.record("s1", Signal::Denial, now);
        assert!(matches!(
            changed[0].transition,
            Some(Transition::Tripped { .. })
        ));
        assert!(b.is_open("s1", now).0);
        assert!(!b.is_open("s2", now).0);
        let rows: Vec<(String, String)> = changed
            .iter()
            .map(|c| (c.scope.clone(), c.state.clone()))
            .collect();
        let (mut again, problems) = Breakers::restore(cfg, global, rows);
        assert!(problems.is_empty());
        assert!(again.is_open("s1", now).0);
        assert_eq!(again.reset(Some("session:s1"), now).len(), 1);
        assert!(!again.is_open("s1", now).0);
    }

    const MIN: u64 = 60_000;

    fn small() -> Breakers {
        let cfg = BreakerConfig {
            threshold: 2,
            window_ms: 10 * MIN,
            cooldown_ms: Some(5 * MIN),
            half_open_successes: 1,
            ..BreakerConfig::default()
        };
        let global = BreakerConfig {
            threshold: 100,
            ..cfg.clone()
        };
        Breakers::restore(cfg, global, Vec::new()).0
    }

    #[test]
    fn quiet_closed_sessions_are_pruned_and_the_others_kept() {
        let mut b = small();
        let t0 = UnixMillis(1_000_000_000);
        // quiet: one success only; scored: one denial; open: tripped; reset: tripped, then reset.
        let _ = b.record("quiet", Signal::Success, t0);
        let _ = b.record("scored", Signal::Denial, t0);
        let _ = b.record("open", Signal::Denial, t0);
        let _ = b.record("open", Signal::Denial, t0);
        let _ = b.record("reset", Signal::Denial, t0);
        let _ = b.record("reset", Signal::Denial, t0);
        let _ = b.reset(Some("session:reset"), t0);
        // Within the window: only the session with nothing to remember goes.
        assert_eq!(b.prune(t0.plus(MIN)), vec!["session:quiet".to_owned()]);
        assert_eq!(b.sessions_kept(), 3);
        // Rate-limited: nothing happens again within a minute.
        assert!(b.prune(t0.plus(MIN + 1)).is_empty());
        // A window later: the denial slid out and the reset is old; the open breaker stays
        // (no cooldown has been ticked through `is_open`: it is still open).
        let mut gone = b.prune(t0.plus(11 * MIN));
        gone.sort();
        assert_eq!(
            gone,
            vec!["session:reset".to_owned(), "session:scored".to_owned()]
        );
        assert!(b.is_open("open", t0.plus(2 * MIN)).0);
        assert_eq!(b.sessions_kept(), 1);
        // Half-open, then closed by a success: pruned only a window after that transition.
        let _ = b.record("open", Signal::Success, t0.plus(12 * MIN));
        assert!(b.prune(t0.plus(13 * MIN)).is_empty());
        assert_eq!(b.prune(t0.plus(23 * MIN)), vec!["session:open".to_owned()]);
        assert_eq!(b.sessions_kept(), 0);
        // The global breaker is never pruned.
        assert_eq!(summary(&b, t0.plus(23 * MIN))["global"]["scope"], "global");
    }

    #[test]
    fn every_transition_is_reported_and_summarised() {
        let mut b = small();
        let t0 = UnixMillis(1_000_000_000);
        let _ = b.record("s", Signal::Denial, t0);
        let tripped = b.record("s", Signal::Denial, t0);
        assert!(matches!(
            tripped[0].transition,
            Some(Transition::Tripped { score: 2 })
        ));
        let s = summary(&b, t0);
        let sess = &s["sessions"][0];
        assert_eq!(sess["scope"], "session:s");
        assert_eq!(sess["state"]["state"], "open");
        assert_eq!(sess["opened_at_ms"], t0.0);
        assert_eq!(sess["half_open_at_ms"], t0.plus(5 * MIN).0);
        assert_eq!(
            sess["last_transition"]["transition"]["transition"],
            "tripped"
        );
        // The cooldown ends and a bad signal arrives: half-open and re-opened, both reported.
        let changes = b.record("s", Signal::Denial, t0.plus(6 * MIN));
        let ts: Vec<_> = changes
            .iter()
            .filter(|c| c.scope == "session:s")
            .filter_map(|c| c.transition.clone())
            .collect();
        assert_eq!(ts, vec![Transition::HalfOpened, Transition::Reopened]);
        // Cooldown again, then a success: half-open and closed, both reported.
        let changes = b.record("s", Signal::Success, t0.plus(12 * MIN));
        let ts: Vec<_> = changes
            .iter()
            .filter(|c| c.scope == "session:s")
            .filter_map(|c| c.transition.clone())
            .collect();
        assert_eq!(ts, vec![Transition::HalfOpened, Transition::Closed]);
        assert_eq!(
            summary(&b, t0.plus(12 * MIN))["sessions"][0]["last_transition"]["transition"]
                ["transition"],
            "closed"
        );
        // The last transitions survive a restore.
        let mut again = small();
        let rows: Vec<(String, String)> = vec![(
            "session:s".into(),
            serde_json::to_string(&Breaker::new(BreakerConfig::default())).unwrap(),
        )];
        again = {
            let (mut r, _) = Breakers::restore(
                again.session_config.clone(),
                again.global.config().clone(),
                rows,
            );
            r.restore_last(vec![("session:s".into(), Some(Transition::Reset), 7)]);
            r
        };
        let s = summary(&again, t0);
        assert_eq!(s["sessions"][0]["last_transition"]["at_ms"], 7);
        assert_eq!(
            s["sessions"][0]["last_transition"]["transition"]["transition"],
            "reset"
        );
    }
}
