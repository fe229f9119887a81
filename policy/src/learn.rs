//! Promotion and demotion of learned allowlist entries.
//!
//! A command (exact canonical form, one project) that test-ran clean K times and then succeeded for
//! real K times, with no rejection in between, is promoted: later calls skip the test-run. A dirty
//! test-run, a failed real run or a rejection demotes it (or resets a candidate's progress). It is
//! never promoted while it would be tier 2/3 or while the breaker is open. Every step keeps the audit
//! ids that earned it, so an entry can always show its provenance.

use serde::{Deserialize, Serialize};

use crate::time::UnixMillis;

/// Tunables, from operator configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PromotionConfig {
    /// Clean test-runs needed, and real successes needed (each). Zero is treated as one: nothing is
    /// promoted without evidence.
    pub k: u32,
}

impl Default for PromotionConfig {
    fn default() -> Self {
        PromotionConfig { k: 3 }
    }
}

/// An audit row id: the evidence behind a step.
pub type AuditId = i64;

/// What happened to the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", content = "audit_id", rename_all = "snake_case")]
pub enum LearnEvent {
    CleanTestRun(AuditId),
    DirtyTestRun(AuditId),
    RealSuccess(AuditId),
    RealFailure(AuditId),
    /// The operator (or an interactive person) refused it.
    Rejected(AuditId),
}

/// The circumstances at the time of the event that can forbid promotion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PromotionContext {
    /// The current tier map classifies the command as tier 2 or 3: never promoted.
    pub needs_person_or_denied: bool,
    /// The breaker is open: nothing is learned in read-only mode.
    pub breaker_open: bool,
}

/// Where a command stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "standing", rename_all = "snake_case")]
pub enum Standing {
    /// Collecting evidence.
    Candidate,
    /// On the learned allowlist.
    Promoted { at: UnixMillis },
    /// Was promoted, lost it; collecting evidence again.
    Demoted { at: UnixMillis, because: AuditId },
}

/// A change worth auditing.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transition", rename_all = "snake_case")]
pub enum LearnTransition {
    Promoted { provenance: Vec<AuditId> },
    Demoted { because: AuditId },
}

/// The learning record of one command in one project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub standing: Standing,
    /// Clean test-runs since the last reset.
    pub clean_runs: Vec<AuditId>,
    /// Successful real runs since the last reset.
    pub successes: Vec<AuditId>,
    /// The evidence that earned the current promotion (empty unless promoted).
    pub provenance: Vec<AuditId>,
}

impl Default for Record {
    fn default() -> Self {
        Record {
            standing: Standing::Candidate,
            clean_runs: Vec::new(),
            successes: Vec::new(),
            provenance: Vec::new(),
        }
    }
}

impl Record {
    pub fn is_promoted(&self) -> bool {
        match self.standing {
            Standing::Promoted { .. } => true,
            Standing::Candidate | Standing::Demoted { .. } => false,
        }
    }

    /// Apply one event; returns the promotion or demotion it caused.
    pub fn apply(
        &mut self,
        event: LearnEvent,
        ctx: PromotionContext,
        config: &PromotionConfig,
        now: UnixMillis,
    ) -> Option<LearnTransition> {
        match event {
            LearnEvent::CleanTestRun(id) => {
                self.clean_runs.push(id);
                self.maybe_promote(ctx, config, now)
            }
            LearnEvent::RealSuccess(id) => {
                // A real success only counts once a clean test-run vouched for it: "test-ran clean
                // K times and then succeeded for real K times".
                if self.clean_runs.len() > self.successes.len() || self.is_promoted() {
                    self.successes.push(id);
                }
                self.maybe_promote(ctx, config, now)
            }
            LearnEvent::DirtyTestRun(id)
            | LearnEvent::RealFailure(id)
            | LearnEvent::Rejected(id) => {
                self.clean_runs.clear();
                self.successes.clear();
                if self.is_promoted() {
                    self.provenance.clear();
                    self.standing = Standing::Demoted {
                        at: now,
                        because: id,
                    };
                    Some(LearnTransition::Demoted { because: id })
                } else {
                    None
                }
            }
        }
    }

    fn maybe_promote(
        &mut self,
        ctx: PromotionContext,
        config: &PromotionConfig,
        now: UnixMillis,
    ) -> Option<LearnTransition> {
        let k = config.k.max(1) as usize;
        let eligible = !ctx.needs_person_or_denied && !ctx.breaker_open;
        if self.is_promoted() || !eligible || self.clean_runs.len() < k || self.successes.len() < k
        {
            return None;
        }
        self.provenance = self
            .clean_runs
            .iter()
            .chain(&self.successes)
            .copied()
            .collect();
        self.provenance.sort_unstable();
        self.standing = Standing::Promoted { at: now };
        Some(LearnTransition::Promoted {
            provenance: self.provenance.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: UnixMillis = UnixMillis(1_700_000_000_000);
    const OK: PromotionContext = PromotionContext {
        needs_person_or_denied: false,
        breaker_open: false,
    };

    fn run(
        record: &mut Record,
        events: &[LearnEvent],
        ctx: PromotionContext,
    ) -> Vec<LearnTransition> {
        let config = PromotionConfig { k: 2 };
        events
            .iter()
            .filter_map(|e| record.apply(*e, ctx, &config, NOW))
            .collect()
    }

    use LearnEvent::*;

    #[test]
    fn k_clean_runs_then_k_successes_promote() {
        let mut r = Record::default();
        let t = run(
            &mut r,
            &[
                CleanTestRun(1),
                RealSuccess(2),
                CleanTestRun(3),
                RealSuccess(4),
            ],
            OK,
        );
        assert_eq!(
            t,
            vec![LearnTransition::Promoted {
                provenance: vec![1, 2, 3, 4]
            }]
        );
        assert!(r.is_promoted());
    }

    #[test]
    fn successes_without_clean_runs_do_not_count() {
        let mut r = Record::default();
        let t = run(
            &mut r,
            &[
                RealSuccess(1),
                RealSuccess(2),
                CleanTestRun(3),
                CleanTestRun(4),
            ],
            OK,
        );
        assert!(t.is_empty());
        assert!(!r.is_promoted());
        let t = run(&mut r, &[RealSuccess(5), RealSuccess(6)], OK);
        assert_eq!(
            t,
            vec![LearnTransition::Promoted {
                provenance: vec![3, 4, 5, 6]
            }]
        );
    }

    #[test]
    fn a_rejection_in_between_resets_progress() {
        let mut r = Record::default();
        let t = run(
            &mut r,
            &[
                CleanTestRun(1),
                RealSuccess(2),
                Rejected(3),
                CleanTestRun(4),
                RealSuccess(5),
            ],
            OK,
        );
        assert!(t.is_empty());
        assert_eq!(r.clean_runs, vec![4]);
    }

    #[test]
    fn dirty_run_or_failure_demotes_a_promoted_command() {
        for bad in [DirtyTestRun(9), RealFailure(9), Rejected(9)] {
            let mut r = Record::default();
            let _ = run(
                &mut r,
                &[
                    CleanTestRun(1),
                    RealSuccess(2),
                    CleanTestRun(3),
                    RealSuccess(4),
                ],
                OK,
            );
            assert_eq!(
                run(&mut r, &[bad], OK),
                vec![LearnTransition::Demoted { because: 9 }]
            );
            assert!(!r.is_promoted());
            assert!(r.provenance.is_empty());
        }
    }

    #[test]
    fn never_promoted_when_tier_2_or_3_or_breaker_open() {
        for ctx in [
            PromotionContext {
                needs_person_or_denied: true,
                breaker_open: false,
            },
            PromotionContext {
                needs_person_or_denied: false,
                breaker_open: true,
            },
        ] {
            let mut r = Record::default();
            let t = run(
                &mut r,
                &[
                    CleanTestRun(1),
                    RealSuccess(2),
                    CleanTestRun(3),
                    RealSuccess(4),
                ],
                ctx,
            );
            assert!(t.is_empty());
        }
    }

    #[test]
    fn a_demoted_command_can_earn_it_again() {
        let mut r = Record::default();
        let _ = run(
            &mut r,
            &[
                CleanTestRun(1),
                RealSuccess(2),
                CleanTestRun(3),
                RealSuccess(4),
                RealFailure(5),
            ],
            OK,
        );
        let t = run(
            &mut r,
            &[
                CleanTestRun(6),
                RealSuccess(7),
                CleanTestRun(8),
                RealSuccess(9),
            ],
            OK,
        );
        assert_eq!(
            t,
            vec![LearnTransition::Promoted {
                provenance: vec![6, 7, 8, 9]
            }]
        );
    }

    #[test]
    fn k_zero_is_treated_as_one() {
        let mut r = Record::default();
        let config = PromotionConfig { k: 0 };
        assert_eq!(r.apply(RealSuccess(1), OK, &config, NOW), None);
        assert_eq!(r.apply(CleanTestRun(2), OK, &config, NOW), None);
        assert!(matches!(
            r.apply(RealSuccess(3), OK, &config, NOW),
            Some(LearnTransition::Promoted { .. })
        ));
    }
}
