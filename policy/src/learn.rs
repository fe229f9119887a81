//! Promotion and demotion of learned allowlist entries.
//!
//! A command (exact canonical form, one project) that test-ran clean K times and then succeeded for
//! real K times, with no rejection in between, is promoted: later calls skip the test-run. A dirty
//! test-run, a failed real run or a rejection demotes it (or resets a candidate's progress). It is
//! never promoted while it would be tier 2/3 or while the breaker is open. Every step keeps the audit
//! ids that earned it, so an entry can always show its provenance.
//!
//! The evidence only counts under one classification of the command ([`classification`]: tier,
//! pattern and test-run options of each part): a tier map revision that reclassifies it resets a
//! candidate's progress and demotes a promoted entry; a revision that does not leaves it alone.

pub mod accept;
pub mod host;

use serde::{Deserialize, Serialize};

use crate::shell::{Script, Word};
use crate::tiermap::TierMap;
use crate::time::UnixMillis;

/// How the tier map classifies each part of a command, one line per part: tier, pattern and
/// test-run options, or `unknown`. The line number is left out, so an edit elsewhere in the map is
/// not a reclassification; a different tier, pattern or option is.
pub fn classification(script: &Script, map: Option<&TierMap>) -> String {
    script
        .commands
        .iter()
        .map(|cmd| {
            let argv: Vec<&str> = cmd
                .argv
                .iter()
                .map(|w| match w {
                    Word::Static(s) | Word::Dynamic(s) => s.as_str(),
                })
                .collect();
            match map.and_then(|m| m.classify(&argv)) {
                Some((tier, entry)) => {
                    format!("{} `{}` {:?}", tier.name(), entry.pattern, entry.options)
                }
                None => "unknown".to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Tunables, from operator configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PromotionConfig {
    /// Clean test-runs needed, and real successes needed (each). Zero is treated as one: nothing is
    /// promoted without evidence.
    pub k: u32,
    /// The evidence window, in ms: a command that has not earned its promotion within this long of
    /// its first piece of evidence starts again (old clean runs say little about today's command).
    pub window_ms: u64,
    /// The operator's acceptance ([`accept`]): dirty runs of one command with one effect
    /// signature that a person applied this many times (within `window_ms`) commit without
    /// asking from then on. Zero switches it off.
    pub accept_k: u32,
}

/// Seven days.
pub const DEFAULT_WINDOW_MS: u64 = 7 * 24 * 60 * 60 * 1000;

impl Default for PromotionConfig {
    fn default() -> Self {
        PromotionConfig {
            k: 3,
            window_ms: DEFAULT_WINDOW_MS,
            accept_k: 3,
        }
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
    /// A new tier map revision was accepted (the audit row of that event); whether it reclassifies
    /// the command is [`PromotionContext::classification`]'s say.
    Reclassified(AuditId),
}

/// The circumstances at the time of the event that can forbid promotion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PromotionContext<'a> {
    /// The current tier map classifies the command as tier 2 or 3: never promoted.
    pub needs_person_or_denied: bool,
    /// The breaker is open: nothing is learned in read-only mode.
    pub breaker_open: bool,
    /// The command's [`classification`] under the current map, when the caller knows it (a
    /// test-run, a new map); `None` (a real run's outcome) keeps the recorded one.
    pub classification: Option<&'a str>,
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
    /// The [`classification`] the evidence was gathered under (`None` in records written before
    /// it was kept: the next classification seen is adopted without a reset).
    #[serde(default)]
    pub classification: Option<String>,
    /// When the evidence since the last reset began (`None`: none yet).
    #[serde(default)]
    pub since: Option<UnixMillis>,
    /// The operator's acceptance of the command's dirty runs, by effect signature ([`accept`]):
    /// counted under the same classification, cleared when it changes.
    #[serde(default, skip_serializing_if = "accept::Acceptances::is_empty")]
    pub acceptance: accept::Acceptances,
}

impl Default for Record {
    fn default() -> Self {
        Record {
            standing: Standing::Candidate,
            clean_runs: Vec::new(),
            successes: Vec::new(),
            provenance: Vec::new(),
            classification: None,
            since: None,
            acceptance: accept::Acceptances::default(),
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
        // Evidence gathered under another classification does not count under this one.
        if let Some(current) = ctx.classification {
            let changed = self
                .classification
                .as_deref()
                .is_some_and(|old| old != current);
            self.classification = Some(current.to_owned());
            if changed {
                // What a person accepted was accepted for the command as classified then.
                self.acceptance = accept::Acceptances::default();
                let id = match event {
                    LearnEvent::CleanTestRun(id)
                    | LearnEvent::DirtyTestRun(id)
                    | LearnEvent::RealSuccess(id)
                    | LearnEvent::RealFailure(id)
                    | LearnEvent::Rejected(id)
                    | LearnEvent::Reclassified(id) => id,
                };
                let demoted = self.forget(id, now);
                if let LearnEvent::Reclassified(_) = event {
                    return demoted;
                }
                // A clean test-run under the new classification starts the count again.
                let again = self.apply(
                    event,
                    PromotionContext {
                        classification: None,
                        ..ctx
                    },
                    config,
                    now,
                );
                return demoted.or(again);
            }
        }
        // Evidence older than the window no longer counts towards a promotion.
        if let (false, Some(since)) = (self.is_promoted(), self.since) {
            if now.0.saturating_sub(since.0) > config.window_ms {
                self.clean_runs.clear();
                self.successes.clear();
                self.since = None;
            }
        }
        if matches!(event, LearnEvent::CleanTestRun(_)) && self.since.is_none() {
            self.since = Some(now);
        }
        match event {
            LearnEvent::Reclassified(_) => None,
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
            | LearnEvent::Rejected(id) => self.forget(id, now),
        }
    }

    /// Progress cleared; a promoted entry demoted because of audit row `id`.
    fn forget(&mut self, id: AuditId, now: UnixMillis) -> Option<LearnTransition> {
        self.clean_runs.clear();
        self.successes.clear();
        self.since = None;
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
        classification: None,
    };

    fn run(
        record: &mut Record,
        events: &[LearnEvent],
        ctx: PromotionContext,
    ) -> Vec<LearnTransition> {
        let config = PromotionConfig {
            k: 2,
            ..PromotionConfig::default()
        };
        events
            .iter()
            .filter_map(|e| record.apply(*e, ctx, &config, NOW))
            .collect()
    }

    use LearnEvent::*;

    #[test]
    fn evidence_older_than_the_window_no_longer_counts() {
        let config = PromotionConfig {
            k: 2,
            window_ms: 1000,
            ..PromotionConfig::default()
        };
        let mut r = Record::default();
        let at = |ms| UnixMillis(ms);
        assert_eq!(r.apply(CleanTestRun(1), OK, &config, at(0)), None);
        assert_eq!(r.apply(RealSuccess(2), OK, &config, at(500)), None);
        // Past the window: the two above are forgotten, this clean run starts a new count.
        assert_eq!(r.apply(CleanTestRun(3), OK, &config, at(1600)), None);
        assert_eq!(r.clean_runs, vec![3]);
        assert!(r.successes.is_empty());
        assert_eq!(r.apply(RealSuccess(4), OK, &config, at(1700)), None);
        assert_eq!(r.apply(CleanTestRun(5), OK, &config, at(1800)), None);
        assert_eq!(
            r.apply(RealSuccess(6), OK, &config, at(1900)),
            Some(LearnTransition::Promoted {
                provenance: vec![3, 4, 5, 6]
            })
        );
        // A promoted entry does not expire by age (demotion is by evidence).
        assert_eq!(r.apply(RealSuccess(7), OK, &config, at(1_000_000)), None);
        assert!(r.is_promoted());
    }

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
                ..OK
            },
            PromotionContext {
                breaker_open: true,
                ..OK
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
        let config = PromotionConfig {
            k: 0,
            ..PromotionConfig::default()
        };
        assert_eq!(r.apply(RealSuccess(1), OK, &config, NOW), None);
        assert_eq!(r.apply(CleanTestRun(2), OK, &config, NOW), None);
        assert!(matches!(
            r.apply(RealSuccess(3), OK, &config, NOW),
            Some(LearnTransition::Promoted { .. })
        ));
    }

    fn ctx(classification: &str) -> PromotionContext<'_> {
        PromotionContext {
            classification: Some(classification),
            ..OK
        }
    }

    #[test]
    fn a_map_that_does_not_reclassify_keeps_the_entry() {
        let config = PromotionConfig {
            k: 1,
            ..PromotionConfig::default()
        };
        let mut r = Record::default();
        let _ = r.apply(CleanTestRun(1), ctx("sandbox `make *`"), &config, NOW);
        let t = r.apply(RealSuccess(2), OK, &config, NOW);
        assert!(matches!(t, Some(LearnTransition::Promoted { .. })));
        assert_eq!(
            r.apply(Reclassified(3), ctx("sandbox `make *`"), &config, NOW),
            None
        );
        assert!(r.is_promoted());
        assert_eq!(r.provenance, vec![1, 2]);
    }

    #[test]
    fn a_map_that_reclassifies_demotes_and_resets_progress() {
        let config = PromotionConfig {
            k: 2,
            ..PromotionConfig::default()
        };
        let mut r = Record::default();
        for e in [
            CleanTestRun(1),
            RealSuccess(2),
            CleanTestRun(3),
            RealSuccess(4),
        ] {
            let _ = r.apply(e, ctx("unknown"), &config, NOW);
        }
        assert!(r.is_promoted());
        assert_eq!(
            r.apply(
                Reclassified(5),
                ctx("sandbox `make *` network"),
                &config,
                NOW
            ),
            Some(LearnTransition::Demoted { because: 5 })
        );
        assert!(!r.is_promoted());
        // A candidate's clean runs under the old classification are forgotten too.
        let mut c = Record::default();
        let _ = c.apply(CleanTestRun(1), ctx("unknown"), &config, NOW);
        let _ = c.apply(RealSuccess(2), OK, &config, NOW);
        let _ = c.apply(CleanTestRun(3), ctx("sandbox `make *`"), &config, NOW);
        assert_eq!(c.clean_runs, vec![3]);
        assert!(c.successes.is_empty());
        assert_eq!(c.classification.as_deref(), Some("sandbox `make *`"));
    }

    #[test]
    fn a_reclassification_clears_the_acceptance_and_a_dirty_run_does_not() {
        use accept::{Change, Refused, Signature};
        let config = PromotionConfig::default();
        let sig = Signature::of(
            &[Refused::Change {
                change: Change::Modified,
                path: "gen.rs".into(),
                to: None,
            }],
            |_| false,
        )
        .unwrap();
        let mut r = Record::default();
        let _ = r.apply(DirtyTestRun(1), ctx("unknown"), &config, NOW);
        for id in 2..5 {
            let _ = r
                .acceptance
                .applied(sig.clone(), id, config.accept_k, config.window_ms, NOW);
        }
        assert!(r.acceptance.accepts(&sig, config.accept_k).is_some());
        // A dirty run under the same classification resets learning, not the acceptance.
        let _ = r.apply(DirtyTestRun(5), ctx("unknown"), &config, NOW);
        assert!(r.acceptance.accepts(&sig, config.accept_k).is_some());
        let _ = r.apply(Reclassified(6), ctx("sandbox `gen *`"), &config, NOW);
        assert!(r.acceptance.is_empty());
    }

    #[test]
    fn the_classification_ignores_the_line_but_not_the_tier_or_options() {
        use crate::shell::{analyze, Analysis, Limits};
        let map = |body: &str| {
            crate::tiermap::parse(&format!("---\nrevision: 1\n---\n\n# m\n\n{body}")).unwrap()
        };
        let Analysis::Parsed(script) = analyze("make all && ./run.sh", &Limits::default()) else {
            panic!()
        };
        let a = map("## Tier 1 — sandbox\n- `make *`\n");
        let b = map("Some prose.\n\n## Tier 1 — sandbox\n- `make *`\n");
        let c = map("## Tier 1 — sandbox\n- `make *` — network\n");
        let d = map("## Tier 2 — ask\n- `make *`\n");
        let fa = classification(&script, Some(&a));
        assert_eq!(fa, classification(&script, Some(&b)));
        assert_ne!(fa, classification(&script, Some(&c)));
        assert_ne!(fa, classification(&script, Some(&d)));
        assert!(fa.ends_with("\nunknown"), "{fa}");
        assert_eq!(classification(&script, None), "unknown\nunknown");
    }
}
