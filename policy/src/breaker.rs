//! The circuit breaker state machine: sliding-window counts, weights, open / half-open / closed.
//!
//! One [`Breaker`] per agent session plus a global one (with its own, higher threshold) live in the
//! daemon. Each bad signal adds its weight to a sliding window; when the window's score reaches the
//! threshold the breaker **opens**: the project turns read-only (tier 0 only) until the operator
//! resets it, or until the cooldown passes and it goes **half-open**: calls flow again, the next bad
//! signal re-opens at once, and enough good signals close it. Time is an argument; the whole state is
//! serde so it survives a daemon restart.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::time::UnixMillis;

/// Tunables, from operator configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BreakerConfig {
    /// Length of the sliding window over which weights add up.
    pub window_ms: u64,
    /// Score at which the breaker trips. Zero is treated as one: a breaker that can never be
    /// closed would be a misconfiguration, not a policy.
    pub threshold: u32,
    /// How long an open breaker stays open before it goes half-open by itself. `None`: only an
    /// operator reset closes it.
    pub cooldown_ms: Option<u64>,
    /// Good signals needed while half-open to close again.
    pub half_open_successes: u32,
    /// Weight of each kind of bad signal.
    pub weights: Weights,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window_ms: 10 * 60 * 1000,
            threshold: 10,
            cooldown_ms: Some(15 * 60 * 1000),
            half_open_successes: 3,
            weights: Weights::default(),
        }
    }
}

/// How much each kind of bad signal counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Weights {
    pub denial: u32,
    pub dirty_test_run: u32,
    pub failed_outcome: u32,
    /// Bad signature, replayed map, refused socket peer, escape-hatch use: an attack or an
    /// operator override, not a mistake, so it weighs more.
    pub integrity: u32,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            denial: 1,
            dirty_test_run: 2,
            failed_outcome: 1,
            integrity: 5,
        }
    }
}

/// What happened that the breaker should know about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    Denial,
    DirtyTestRun,
    FailedOutcome,
    Integrity(Integrity),
    /// A clean test-run or a successful real run: counts toward closing a half-open breaker.
    Success,
}

/// Integrity events: someone tried to get around the gate, or the operator stepped around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Integrity {
    BadSignature,
    ReplayedMap,
    RefusedPeer,
    EscapeHatch,
    /// A run ticket redeemed by another uid or from another directory than it was issued for
    /// (a stolen or replayed ticket).
    TicketMisuse,
    /// A call the daemon routed through `cmdgate-run` was reported run without it: Claude Code
    /// ignored the rewrite, so the original command ran on the host unjudged.
    RewriteIgnored,
}

/// Where the breaker stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum State {
    Closed,
    /// Read-only mode.
    Open {
        since: UnixMillis,
        /// The score that tripped it (or that re-opened it from half-open).
        score: u32,
        /// When it goes half-open by itself; `None` ⇒ operator reset only.
        half_open_at: Option<UnixMillis>,
    },
    /// Calls flow; one bad signal re-opens, `half_open_successes` good ones close.
    HalfOpen {
        since: UnixMillis,
        successes: u32,
    },
}

/// A change of state, to be audited and announced.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transition", rename_all = "snake_case")]
pub enum Transition {
    Tripped { score: u32 },
    Reopened,
    HalfOpened,
    Closed,
    Reset,
}

/// One circuit breaker. Serialize it to persist it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breaker {
    config: BreakerConfig,
    state: State,
    /// Weighted bad signals inside the window, oldest first.
    window: VecDeque<(UnixMillis, u32)>,
}

impl Breaker {
    pub fn new(config: BreakerConfig) -> Self {
        Breaker {
            config,
            state: State::Closed,
            window: VecDeque::new(),
        }
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// Is the agent confined to reads? Call [`Breaker::tick`] first so an expired cooldown counts.
    pub fn is_read_only(&self) -> bool {
        match self.state {
            State::Open { .. } => true,
            State::Closed | State::HalfOpen { .. } => false,
        }
    }

    /// The weighted score of the bad signals inside the window ending at `now`.
    pub fn score(&self, now: UnixMillis) -> u32 {
        let start = now.minus(self.config.window_ms);
        self.window
            .iter()
            .filter(|(t, _)| *t > start)
            .map(|(_, w)| *w)
            .fold(0u32, u32::saturating_add)
    }

    /// Let time pass: an open breaker whose cooldown has ended goes half-open.
    pub fn tick(&mut self, now: UnixMillis) -> Option<Transition> {
        self.expire(now);
        match self.state {
            State::Open {
                half_open_at: Some(at),
                ..
            } if now >= at => {
                self.state = State::HalfOpen {
                    since: now,
                    successes: 0,
                };
                Some(Transition::HalfOpened)
            }
            State::Open { .. } | State::Closed | State::HalfOpen { .. } => None,
        }
    }

    /// Record a signal at `now`; returns the transition it caused, if any.
    pub fn record(&mut self, signal: Signal, now: UnixMillis) -> Option<Transition> {
        let ticked = self.tick(now);
        let weight = match signal {
            Signal::Denial => self.config.weights.denial,
            Signal::DirtyTestRun => self.config.weights.dirty_test_run,
            Signal::FailedOutcome => self.config.weights.failed_outcome,
            Signal::Integrity(_) => self.config.weights.integrity,
            Signal::Success => return self.success().or(ticked),
        };
        if weight == 0 {
            return ticked;
        }
        self.window.push_back((now, weight));
        let score = self.score(now);
        match self.state {
            State::Closed if score >= self.config.threshold.max(1) => {
                self.state = self.open(now, score);
                Some(Transition::Tripped { score })
            }
            State::HalfOpen { .. } => {
                self.state = self.open(now, score);
                Some(Transition::Reopened)
            }
            State::Closed | State::Open { .. } => ticked,
        }
    }

    /// The operator's reset: closed, window cleared.
    pub fn reset(&mut self) -> Transition {
        self.state = State::Closed;
        self.window.clear();
        Transition::Reset
    }

    fn success(&mut self) -> Option<Transition> {
        match self.state {
            State::HalfOpen { since, successes } => {
                let successes = successes.saturating_add(1);
                if successes >= self.config.half_open_successes {
                    self.state = State::Closed;
                    self.window.clear();
                    Some(Transition::Closed)
                } else {
                    self.state = State::HalfOpen { since, successes };
                    None
                }
            }
            State::Closed | State::Open { .. } => None,
        }
    }

    fn open(&self, now: UnixMillis, score: u32) -> State {
        State::Open {
            since: now,
            score,
            half_open_at: self.config.cooldown_ms.map(|c| now.plus(c)),
        }
    }

    fn expire(&mut self, now: UnixMillis) {
        let start = now.minus(self.config.window_ms);
        while self.window.front().is_some_and(|(t, _)| *t <= start) {
            self.window.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    fn t(minutes: u64) -> UnixMillis {
        UnixMillis(1_000_000_000 + minutes * MIN)
    }

    fn breaker() -> Breaker {
        Breaker::new(BreakerConfig {
            window_ms: 10 * MIN,
            threshold: 5,
            cooldown_ms: Some(15 * MIN),
            half_open_successes: 2,
            weights: Weights {
                denial: 1,
                dirty_test_run: 2,
                failed_outcome: 1,
                integrity: 5,
            },
        })
    }

    #[test]
    fn trips_when_the_window_score_reaches_the_threshold() {
        let mut b = breaker();
        for minute in 0..4 {
            assert_eq!(b.record(Signal::Denial, t(minute)), None);
        }
        assert_eq!(
            b.record(Signal::Denial, t(4)),
            Some(Transition::Tripped { score: 5 })
        );
        assert!(b.is_read_only());
    }

    #[test]
    fn old_signals_slide_out_of_the_window() {
        let mut b = breaker();
        for minute in [0, 1, 2, 3] {
            let _ = b.record(Signal::Denial, t(minute));
        }
        // 11 minutes later the first ones are gone: 4 old ones expired, 1 new one.
        assert_eq!(b.record(Signal::Denial, t(11)), None);
        assert_eq!(b.score(t(11)), 3);
        assert!(!b.is_read_only());
    }

    #[test]
    fn one_integrity_event_trips_at_once() {
        let mut b = breaker();
        let tr = b.record(Signal::Integrity(Integrity::BadSignature), t(0));
        assert_eq!(tr, Some(Transition::Tripped { score: 5 }));
    }

    #[test]
    fn weights_differ_by_kind() {
        let mut b = breaker();
        let _ = b.record(Signal::DirtyTestRun, t(0));
        let _ = b.record(Signal::DirtyTestRun, t(0));
        assert_eq!(b.score(t(0)), 4);
        assert_eq!(
            b.record(Signal::FailedOutcome, t(1)),
            Some(Transition::Tripped { score: 5 })
        );
    }

    #[test]
    fn cooldown_goes_half_open_then_successes_close() {
        let mut b = breaker();
        let _ = b.record(Signal::Integrity(Integrity::ReplayedMap), t(0));
        assert_eq!(b.tick(t(14)), None);
        assert!(b.is_read_only());
        assert_eq!(b.tick(t(15)), Some(Transition::HalfOpened));
        assert!(!b.is_read_only());
        assert_eq!(b.record(Signal::Success, t(16)), None);
        assert_eq!(b.record(Signal::Success, t(17)), Some(Transition::Closed));
        assert_eq!(b.score(t(17)), 0);
    }

    #[test]
    fn a_bad_signal_while_half_open_reopens() {
        let mut b = breaker();
        let _ = b.record(Signal::Integrity(Integrity::RefusedPeer), t(0));
        let _ = b.tick(t(20));
        assert_eq!(b.record(Signal::Denial, t(21)), Some(Transition::Reopened));
        assert!(b.is_read_only());
        assert!(matches!(b.state(), State::Open { half_open_at: Some(at), .. } if *at == t(36)));
    }

    #[test]
    fn without_cooldown_only_reset_closes() {
        let mut b = Breaker::new(BreakerConfig {
            cooldown_ms: None,
            threshold: 1,
            ..BreakerConfig::default()
        });
        let _ = b.record(Signal::Denial, t(0));
        assert_eq!(b.tick(t(100_000)), None);
        assert!(b.is_read_only());
        assert_eq!(b.reset(), Transition::Reset);
        assert!(!b.is_read_only());
        assert_eq!(b.score(t(100_000)), 0);
    }

    #[test]
    fn success_while_closed_does_not_erase_bad_signals() {
        let mut b = breaker();
        for minute in 0..4 {
            let _ = b.record(Signal::Denial, t(minute));
        }
        let _ = b.record(Signal::Success, t(4));
        assert_eq!(
            b.record(Signal::Denial, t(5)),
            Some(Transition::Tripped { score: 5 })
        );
    }

    #[test]
    fn zero_threshold_is_treated_as_one() {
        let mut b = Breaker::new(BreakerConfig {
            threshold: 0,
            ..BreakerConfig::default()
        });
        assert_eq!(b.record(Signal::Success, t(0)), None);
        assert!(!b.is_read_only());
        assert_eq!(
            b.record(Signal::Denial, t(0)),
            Some(Transition::Tripped { score: 1 })
        );
    }

    #[test]
    fn state_survives_a_serde_round_trip() {
        let mut b = breaker();
        let _ = b.record(Signal::Integrity(Integrity::EscapeHatch), t(0));
        let json = serde_json::to_string(&b).unwrap();
        let back: Breaker = serde_json::from_str(&json).unwrap();
        assert_eq!(back, b);
        assert!(back.is_read_only());
    }
}
