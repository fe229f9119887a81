//! The learned allowlist's ties to the tier map: the classification a command's evidence was
//! gathered under, and the review that demotes entries a newly accepted revision reclassifies
//! ("same tier-map revision or one that does not reclassify it"). The state machine itself is
//! `cmdgate_policy::learn`; promotion and demotion rows are written by `daemon::apply_learning`.

use cmdgate_policy::decide::canonical_key;
use cmdgate_policy::decide::RuleRef;
use cmdgate_policy::learn::{
    classification, LearnEvent, LearnTransition, PromotionConfig, PromotionContext, Record,
};
use cmdgate_policy::shell::{self, Analysis, Limits};
use cmdgate_policy::tiermap::Snapshot;
use rusqlite::Connection;

use crate::clock;
use crate::store::audit::{self, Entry, Kind, LearnChange};
use crate::store::{state, StoreError};

/// What a command that cannot be analysed is classified as: never equal to a real classification,
/// so such a record is always reset rather than kept.
const UNANALYZABLE: &str = "unanalyzable";

/// The command's classification under the snapshot's map (`unknown` parts in a read-only project).
pub(crate) fn classification_of(command: &str, snapshot: &Snapshot) -> String {
    match shell::analyze(command, &Limits::default()) {
        Analysis::Parsed(script) => classification(&script, snapshot.tier_map()),
        Analysis::Unanalyzable(_) => UNANALYZABLE.to_owned(),
    }
}

/// The rule key of a command, if it can be analysed.
pub(crate) fn key_of(command: &str) -> Option<String> {
    match shell::analyze(command, &Limits::default()) {
        Analysis::Parsed(script) => Some(canonical_key(&script)),
        Analysis::Unanalyzable(_) => None,
    }
}

/// Applies a newly accepted map revision (audit row `audit_id`) to every learning record of the
/// project: a record whose evidence was gathered under another classification loses its progress,
/// and a promoted one is demoted (its learned rule disabled, audited). `true` when rules changed.
pub(crate) fn review(
    c: &Connection,
    project: &str,
    snapshot: &Snapshot,
    audit_id: i64,
    config: &PromotionConfig,
) -> Result<bool, StoreError> {
    let mut changed = false;
    for key in state::learn_keys(c, project)? {
        // The key is the canonical, shell-quoted form: it parses back to the same argv. One that
        // does not parse is classified as unanalysable, so it is reset, never kept.
        let class = classification_of(&key, snapshot);
        changed |= apply_learning(
            c,
            project,
            &key,
            LearnEvent::Reclassified(audit_id),
            PromotionContext {
                classification: Some(&class),
                ..PromotionContext::default()
            },
            config,
        )?;
    }
    Ok(changed)
}

/// The event with the audit row id that carries it.
pub(crate) fn with_id(event: LearnEvent, id: i64) -> LearnEvent {
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
    apply_learning_events(c, project, key, [event], ctx, config)
}

/// [`apply_learning`] of several events of one command in order, with one read and one write of
/// its record (a committed run's clean test-run and real outcome): each event meets the record as
/// the one before left it, and each promotion or demotion is audited in that order, as one call
/// per event would have done in the same transaction.
pub(crate) fn apply_learning_events(
    c: &Connection,
    project: &str,
    key: &str,
    events: impl IntoIterator<Item = LearnEvent>,
    ctx: PromotionContext,
    config: &cmdgate_policy::learn::PromotionConfig,
) -> Result<bool, StoreError> {
    let now = clock::now();
    let mut record = state::learn_record(c, project, key)?.unwrap_or_else(Record::default);
    let transitions: Vec<LearnTransition> = events
        .into_iter()
        .filter_map(|event| record.apply(event, ctx, config, now))
        .collect();
    state::put_learn_record(c, project, key, &record, clock::now_ms())?;
    let mut changed = false;
    for transition in transitions {
        changed |= audit_transition(c, project, key, transition)?;
    }
    Ok(changed)
}

/// A promotion's rule and audit row, or a demotion's disabled rule and audit row.
fn audit_transition(
    c: &Connection,
    project: &str,
    key: &str,
    transition: LearnTransition,
) -> Result<bool, StoreError> {
    let at = clock::now_ms();
    match transition {
        LearnTransition::Promoted { provenance } => {
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
                    kind: Kind::Learn,
                    project: Some(project.to_owned()),
                    command: Some(key.to_owned()),
                    decision: Some(LearnChange::Promoted.into()),
                    rule: Some(RuleRef(id).to_string()),
                    note: Some(format!("evidence: audit rows {provenance:?}")),
                    ..Entry::default()
                },
            )?;
            Ok(true)
        }
        LearnTransition::Demoted { because } => {
            state::disable_learned(c, project, key, at)?;
            audit::append(
                c,
                Entry {
                    at_ms: at,
                    kind: Kind::Learn,
                    project: Some(project.to_owned()),
                    command: Some(key.to_owned()),
                    decision: Some(LearnChange::Demoted.into()),
                    note: Some(format!("because of audit row {because}")),
                    ..Entry::default()
                },
            )?;
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cmdgate_policy::shell::{analyze, Analysis};

    #[test]
    fn a_canonical_key_classifies_like_the_command_it_came_from() {
        let snapshot = Snapshot::ReadOnly {
            reason: "test".into(),
        };
        for command in [
            "make all && ./run.sh --flag 'two words'",
            "FOO=1 cargo test -- --nocapture > out.txt",
        ] {
            let key = key_of(command).unwrap();
            assert_eq!(
                classification_of(&key, &snapshot),
                classification_of(command, &snapshot)
            );
            let Analysis::Parsed(again) = analyze(&key, &Limits::default()) else {
                panic!("{key}")
            };
            assert_eq!(canonical_key(&again), key, "the key is stable");
        }
        assert_eq!(classification_of("echo $(", &snapshot), UNANALYZABLE);
    }

    /// What learning left in a store: the record (without its times), the rules, the audit rows.
    /// A record without its times: promoted, clean runs, successes, provenance.
    type Progress = (bool, Vec<i64>, Vec<i64>, Vec<i64>);

    fn learned(c: &Connection) -> (Option<Progress>, Vec<String>) {
        let record = state::learn_record(c, "/p", "make")
            .unwrap()
            .map(|r| (r.is_promoted(), r.clean_runs, r.successes, r.provenance));
        let mut rows: Vec<String> = Vec::new();
        for sql in [
            "SELECT kind || ' ' || key || ' ' || enabled FROM rules ORDER BY id",
            "SELECT kind || ' ' || ifnull(decision, '') || ' ' || ifnull(rule, '') || ' ' || \
             ifnull(note, '') FROM command_audit ORDER BY id",
        ] {
            let mut stmt = c.prepare(sql).unwrap();
            let found = stmt.query_map([], |r| r.get::<_, String>(0)).unwrap();
            rows.extend(found.map(Result::unwrap));
        }
        (record, rows)
    }

    #[test]
    fn several_events_at_once_learn_what_one_call_each_learns() {
        let open = || {
            let mut c = Connection::open_in_memory().unwrap();
            crate::store::migrate(&mut c).unwrap();
            c
        };
        let (one_each, at_once) = (open(), open());
        let config = PromotionConfig {
            k: 2,
            ..PromotionConfig::default()
        };
        let ctx = PromotionContext {
            classification: Some("tier1"),
            ..PromotionContext::default()
        };
        // Two committed runs (promoted by the second's real success), a committed run that
        // failed for real (demoted), a dirty one (progress cleared).
        let runs: [&[LearnEvent]; 4] = [
            &[LearnEvent::CleanTestRun(1), LearnEvent::RealSuccess(1)],
            &[LearnEvent::CleanTestRun(2), LearnEvent::RealSuccess(2)],
            &[LearnEvent::CleanTestRun(3), LearnEvent::RealFailure(3)],
            &[LearnEvent::DirtyTestRun(4)],
        ];
        let mut changed = Vec::new();
        for events in runs {
            let mut each = false;
            for e in events {
                each |= apply_learning(&one_each, "/p", "make", *e, ctx, &config).unwrap();
            }
            let once =
                apply_learning_events(&at_once, "/p", "make", events.iter().copied(), ctx, &config)
                    .unwrap();
            assert_eq!(each, once, "rules changed after {events:?}");
            changed.push(once);
            assert_eq!(learned(&one_each), learned(&at_once), "after {events:?}");
        }
        assert_eq!(
            changed,
            [false, true, true, false],
            "promoted, then demoted"
        );
    }
}
