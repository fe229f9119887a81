//! The circuit breakers the daemon keeps: one per agent session and a global one, persisted in the
//! store so their state survives a restart.

use std::collections::HashMap;

use cmdgate_policy::breaker::{Breaker, BreakerConfig, Signal, Transition};
use cmdgate_policy::time::UnixMillis;
use serde::Serialize;

/// The global breaker's scope name; sessions are `session:<id>`.
pub const GLOBAL: &str = "global";

/// A breaker whose state must be written (after a signal), with the transition it made.
#[derive(Debug, Clone, Serialize)]
pub struct Changed {
    pub scope: String,
    /// The serialized `Breaker`.
    pub state: String,
    pub transition: Option<Transition>,
}

/// All breakers.
pub struct Breakers {
    session_config: BreakerConfig,
    global: Breaker,
    sessions: HashMap<String, Breaker>,
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

    /// Is this session in read-only mode (its own breaker or the global one open)? Lets time pass
    /// first, so an ended cooldown counts; the returned changes must be persisted.
    pub fn is_open(&mut self, session: &str, now: UnixMillis) -> (bool, Vec<Changed>) {
        let mut changed = Vec::new();
        if let Some(t) = self.global.tick(now) {
            changed.push(self.changed(GLOBAL.to_owned(), Some(t)));
        }
        let mut open = self.global.is_read_only();
        if let Some(b) = self.sessions.get_mut(session) {
            let t = b.tick(now);
            open |= b.is_read_only();
            if t.is_some() {
                changed.push(self.changed(scope_of(session), t));
            }
        }
        (open, changed)
    }

    /// Records a signal for a session (and globally); returns what to persist.
    pub fn record(&mut self, session: &str, signal: Signal, now: UnixMillis) -> Vec<Changed> {
        let config = self.session_config.clone();
        let t = self
            .sessions
            .entry(session.to_owned())
            .or_insert_with(|| Breaker::new(config))
            .record(signal, now);
        let g = self.global.record(signal, now);
        vec![
            self.changed(scope_of(session), t),
            self.changed(GLOBAL.to_owned(), g),
        ]
    }

    /// Records a signal that belongs to no session (a refused peer): global only.
    pub fn record_global(&mut self, signal: Signal, now: UnixMillis) -> Vec<Changed> {
        let g = self.global.record(signal, now);
        vec![self.changed(GLOBAL.to_owned(), g)]
    }

    /// The operator's reset of one scope (`global`, `session:ID`) or, with `None`, of all.
    pub fn reset(&mut self, scope: Option<&str>) -> Vec<Changed> {
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
                out.push(self.changed(scope, t));
            }
        }
        out
    }

    fn changed(&self, scope: String, transition: Option<Transition>) -> Changed {
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

    /// The breakers that are not closed, plus the global one, for `status`.
    pub fn summary(&self, now: UnixMillis) -> serde_json::Value {
        let sessions: Vec<serde_json::Value> = self
            .sessions
            .iter()
            .filter(|(_, b)| b.is_read_only() || b.score(now) > 0)
            .map(|(s, b)| serde_json::json!({"session": s, "state": b.state(), "score": b.score(now)}))
            .collect();
        serde_json::json!({
            "global": {"state": self.global.state(), "score": self.global.score(now)},
            "sessions": sessions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(again.reset(Some("session:s1")).len(), 1);
        assert!(!again.is_open("s1", now).0);
    }
}
