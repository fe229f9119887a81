//! The store's state tables besides the audit: remembered and learned rules (with provenance and
//! a revision raised by every change), learning records, the highest tier map revision seen per
//! project and key, breaker state.

use cmdgate_policy::breaker::Transition;
use cmdgate_policy::decide::RuleRef;
use cmdgate_policy::learn::Record;
use cmdgate_policy::tiermap::{ContentHash, SeenRevision};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::audit::{self, AuditRow, BreakerDecision, Kind};
use super::StoreError;

/// A rule as the operator sees it: what the engine's `decide::Rule` needs plus where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredRule {
    /// Named in decisions (`rule #12`).
    pub id: i64,
    /// One of [`RULE_KINDS`]; the pipeline refuses to start on anything else.
    pub kind: String,
    /// Canonical project root.
    pub project: String,
    /// The engine's canonical command key.
    pub key: String,
    pub enabled: bool,
    pub note: Option<String>,
    pub created_ms: i64,
    /// `operator` or `learned`.
    pub created_by: String,
    /// The audit rows that earned or motivated it.
    pub provenance: Vec<i64>,
    pub updated_ms: i64,
}

/// The rule kinds the store accepts (the engine's `RuleKind`, snake_case).
pub const RULE_KINDS: &[&str] = &["approve", "reject", "always_ask", "learned"];

const RULE_COLUMNS: &str =
    "id, kind, project, key, enabled, note, created_ms, created_by, provenance, updated_ms";

fn rule_from_row(r: &rusqlite::Row<'_>) -> Result<StoredRule, StoreError> {
    let provenance: String = r.get(8)?;
    let id: i64 = r.get(0)?;
    Ok(StoredRule {
        id,
        kind: r.get(1)?,
        project: r.get(2)?,
        key: r.get(3)?,
        enabled: r.get(4)?,
        note: r.get(5)?,
        created_ms: r.get(6)?,
        created_by: r.get(7)?,
        provenance: serde_json::from_str(&provenance)
            .map_err(|e| StoreError::Corrupt(format!("rule {id} provenance: {e}")))?,
        updated_ms: r.get(9)?,
    })
}

/// Every rule, enabled or not.
pub fn rules(conn: &Connection) -> Result<Vec<StoredRule>, StoreError> {
    let mut stmt = conn.prepare(&format!("SELECT {RULE_COLUMNS} FROM rules ORDER BY id"))?;
    let mut out = Vec::new();
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        out.push(rule_from_row(r)?);
    }
    Ok(out)
}

/// One rule by id.
pub fn rule(conn: &Connection, id: i64) -> Result<Option<StoredRule>, StoreError> {
    let mut stmt = conn.prepare(&format!("SELECT {RULE_COLUMNS} FROM rules WHERE id = ?1"))?;
    let mut rows = stmt.query([id])?;
    match rows.next()? {
        Some(r) => Ok(Some(rule_from_row(r)?)),
        None => Ok(None),
    }
}

/// Every rule and the revision they are at, read in one transaction so the two agree.
pub fn rules_at_revision(conn: &Connection) -> Result<(i64, Vec<StoredRule>), StoreError> {
    let tx = conn.unchecked_transaction()?;
    let revision = rules_revision(&tx)?;
    let all = rules(&tx)?;
    tx.finish()?;
    Ok((revision, all))
}

/// The rules' revision. Every insert, update or delete of a rule (operator or learned) raises it
/// by one in the same transaction as the change, so it names one exact state of the rules table.
pub fn rules_revision(conn: &Connection) -> Result<i64, StoreError> {
    conn.query_row(
        "SELECT revision FROM rules_revision WHERE id = 1",
        [],
        |r| r.get(0),
    )
    .optional()?
    .ok_or_else(|| StoreError::Corrupt("the rules revision row is missing".into()))
}

/// Raises the revision; called by every function here that changes the rules table, after the
/// change and on the same connection (so in the same transaction).
fn bump_rules_revision(conn: &Connection) -> Result<i64, StoreError> {
    if conn.execute(
        "UPDATE rules_revision SET revision = revision + 1 WHERE id = 1",
        [],
    )? != 1
    {
        return Err(StoreError::Corrupt(
            "the rules revision row is missing".into(),
        ));
    }
    rules_revision(conn)
}

/// A rules edit made against a revision that is no longer the current one: another edit (an
/// operator's, or a learned promotion or demotion) came first. Nothing was changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error(
    "rules changed: the current revision is {current} (you expected {expected}); list them again and retry"
)]
pub struct RevisionConflict {
    /// The revision the rules are at now.
    pub current: i64,
    /// The revision the edit was made against.
    pub expected: i64,
}

/// A checked edit's result: the edit's own value and the revision after it, or the conflict.
pub type Checked<T> = Result<(T, i64), RevisionConflict>;

/// Runs `edit` only when the rules are still at `if_revision` (`None`: whatever the revision),
/// and returns its value with the revision after it.
///
/// Call it inside one write transaction — one `Store::write` job, whose closure gets the writer's
/// connection inside a savepoint: the store has a single writer, so the check and the edit are
/// atomic with respect to every other change and two edits made against the same revision can
/// never both pass. An `Err` from `edit` rolls the job back as usual; a conflict changes nothing.
pub fn edit_rules<T>(
    conn: &Connection,
    if_revision: Option<i64>,
    edit: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<Checked<T>, StoreError> {
    let current = rules_revision(conn)?;
    if let Some(expected) = if_revision {
        if expected != current {
            return Ok(Err(RevisionConflict { current, expected }));
        }
    }
    let value = edit(conn)?;
    Ok(Ok((value, rules_revision(conn)?)))
}

/// Adds a rule if the rules are still at `if_revision` (see [`edit_rules`]); returns the new
/// rule's id and the new revision. For remembered decisions made elsewhere than `cmdgate rules`
/// (e.g. approving a pending request "and remember"): run it in one `Store::write` job together
/// with the audit row that records it, pass the revision the operator saw (or `None` when the
/// operator did not see the rules), and answer a conflict with its message, changing nothing.
pub fn add_rule_checked(
    conn: &Connection,
    rule: &NewRule,
    if_revision: Option<i64>,
    now_ms: i64,
) -> Result<Checked<i64>, StoreError> {
    edit_rules(conn, if_revision, |c| add_rule(c, rule, now_ms))
}

/// A rule to add.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewRule {
    /// One of [`RULE_KINDS`].
    pub kind: String,
    pub project: String,
    pub key: String,
    pub note: Option<String>,
    /// `operator` or `learned`.
    pub created_by: String,
    pub provenance: Vec<i64>,
}

/// Adds a rule and raises the revision; returns its id.
pub fn add_rule(conn: &Connection, rule: &NewRule, now_ms: i64) -> Result<i64, StoreError> {
    if !RULE_KINDS.contains(&rule.kind.as_str()) {
        return Err(StoreError::Corrupt(format!(
            "unknown rule kind {:?}",
            rule.kind
        )));
    }
    conn.execute(
        "INSERT INTO rules (kind, project, key, enabled, note, created_ms, created_by, provenance, updated_ms) \
         VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?5)",
        params![
            rule.kind,
            rule.project,
            rule.key,
            rule.note,
            now_ms,
            rule.created_by,
            serde_json::to_string(&rule.provenance).unwrap_or_default()
        ],
    )?;
    let id = conn.last_insert_rowid();
    bump_rules_revision(conn)?;
    Ok(id)
}

/// Enables or disables a rule (raising the revision); `false` when there is no such rule.
pub fn set_rule_enabled(
    conn: &Connection,
    id: i64,
    enabled: bool,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = conn.execute(
        "UPDATE rules SET enabled = ?2, updated_ms = ?3 WHERE id = ?1",
        params![id, enabled, now_ms],
    )? > 0;
    if changed {
        bump_rules_revision(conn)?;
    }
    Ok(changed)
}

/// Removes a rule (raising the revision); `false` when there is no such rule. Its audit rows
/// (provenance, the decisions it made) stay: the audit is append-only.
pub fn remove_rule(conn: &Connection, id: i64) -> Result<bool, StoreError> {
    let removed = conn.execute("DELETE FROM rules WHERE id = ?1", [id])? > 0;
    if removed {
        bump_rules_revision(conn)?;
    }
    Ok(removed)
}

/// Disables the learned entries for a command (demotion), raising the revision when any was.
pub fn disable_learned(
    conn: &Connection,
    project: &str,
    key: &str,
    now_ms: i64,
) -> Result<usize, StoreError> {
    let n = conn.execute(
        "UPDATE rules SET enabled = 0, updated_ms = ?3 WHERE kind = 'learned' AND project = ?1 AND key = ?2 AND enabled = 1",
        params![project, key, now_ms],
    )?;
    if n > 0 {
        bump_rules_revision(conn)?;
    }
    Ok(n)
}

/// The learning record of a command, if it has one.
pub fn learn_record(
    conn: &Connection,
    project: &str,
    key: &str,
) -> Result<Option<Record>, StoreError> {
    // Cached: read on every redemption and written with every run's row.
    let text: Option<String> = conn
        .prepare_cached("SELECT record FROM learn_records WHERE project = ?1 AND key = ?2")?
        .query_row(params![project, key], |r| r.get(0))
        .optional()?;
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| StoreError::Corrupt(format!("learn record: {e}")))
    })
    .transpose()
}

pub fn put_learn_record(
    conn: &Connection,
    project: &str,
    key: &str,
    record: &Record,
    now_ms: i64,
) -> Result<(), StoreError> {
    let text = serde_json::to_string(record).map_err(|source| StoreError::Encode {
        what: "a learn record",
        source,
    })?;
    conn.prepare_cached(
        "INSERT INTO learn_records (project, key, record, updated_ms) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT(project, key) DO UPDATE SET record = excluded.record, updated_ms = excluded.updated_ms",
    )?
    .execute(params![project, key, text, now_ms])?;
    Ok(())
}

/// The highest revision accepted for a project and signing key.
pub fn seen_revision(
    conn: &Connection,
    project: &str,
    key: &str,
) -> Result<Option<SeenRevision>, StoreError> {
    let row: Option<(i64, String)> = conn
        .query_row(
            "SELECT revision, content_hash FROM tiermap_revisions WHERE project = ?1 AND key = ?2",
            params![project, key],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    row.map(|(revision, hash)| {
        Ok(SeenRevision {
            revision: u64::try_from(revision)
                .map_err(|_| StoreError::Corrupt(format!("negative revision {revision}")))?,
            content_hash: ContentHash::from_hex(&hash).ok_or_else(|| {
                StoreError::Corrupt(format!("bad content hash {hash:?} for {project}"))
            })?,
        })
    })
    .transpose()
}

/// The highest revision accepted for a project under any key (keys rotate; a map signed by another
/// key must still not go below what was accepted).
pub fn seen_revisions(
    conn: &Connection,
    project: &str,
) -> Result<Vec<(String, SeenRevision)>, StoreError> {
    let mut stmt =
        conn.prepare("SELECT key FROM tiermap_revisions WHERE project = ?1 ORDER BY key")?;
    let keys = stmt
        .query_map([project], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::new();
    for k in keys {
        if let Some(s) = seen_revision(conn, project, &k)? {
            out.push((k, s));
        }
    }
    Ok(out)
}

/// Every project's highest accepted revision under any key (ties: the most recently accepted),
/// sorted by project: what the daemon publishes for the hook (`tiermap-revisions`).
pub fn highest_revisions(conn: &Connection) -> Result<Vec<(String, SeenRevision)>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT project, revision, content_hash FROM tiermap_revisions \
         ORDER BY project, revision DESC, first_seen_ms DESC",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut out: Vec<(String, SeenRevision)> = Vec::new();
    for (project, revision, hash) in rows {
        if out.last().is_some_and(|(p, _)| *p == project) {
            continue;
        }
        let seen = SeenRevision {
            revision: u64::try_from(revision)
                .map_err(|_| StoreError::Corrupt(format!("negative revision {revision}")))?,
            content_hash: ContentHash::from_hex(&hash).ok_or_else(|| {
                StoreError::Corrupt(format!("bad content hash {hash:?} for {project}"))
            })?,
        };
        out.push((project, seen));
    }
    Ok(out)
}

/// Records an accepted revision; only ever raises it (a lower one is ignored: the caller already
/// refused it, and this keeps the invariant even if two loads race).
pub fn record_revision(
    conn: &Connection,
    project: &str,
    key: &str,
    seen: &SeenRevision,
    now_ms: i64,
) -> Result<(), StoreError> {
    let revision = i64::try_from(seen.revision)
        .map_err(|_| StoreError::Corrupt("revision too large".into()))?;
    conn.execute(
        "INSERT INTO tiermap_revisions (project, key, revision, content_hash, first_seen_ms) VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT(project, key) DO UPDATE SET revision = excluded.revision, content_hash = excluded.content_hash, \
         first_seen_ms = excluded.first_seen_ms WHERE excluded.revision > tiermap_revisions.revision",
        params![project, key, revision, seen.content_hash.to_hex(), now_ms],
    )?;
    Ok(())
}

/// Every persisted breaker (scope → serialized `Breaker`).
pub fn breakers(conn: &Connection) -> Result<Vec<(String, String)>, StoreError> {
    let mut stmt = conn.prepare("SELECT scope, state FROM breaker_state ORDER BY scope")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

pub fn put_breaker(
    conn: &Connection,
    scope: &str,
    state_json: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO breaker_state (scope, state, updated_ms) VALUES (?1, ?2, ?3) \
         ON CONFLICT(scope) DO UPDATE SET state = excluded.state, updated_ms = excluded.updated_ms",
        params![scope, state_json, now_ms],
    )?;
    Ok(())
}

pub fn breaker_event(
    conn: &Connection,
    scope: &str,
    transition: &Transition,
    audit_id: Option<i64>,
    now_ms: i64,
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO breaker_events (at_ms, scope, transition, audit_id) VALUES (?1, ?2, ?3, ?4)",
        params![
            now_ms,
            scope,
            BreakerDecision::Transition(transition.clone()),
            audit_id
        ],
    )?;
    Ok(())
}

/// The newest transition of each scope (scope, transition, at_ms); `None` for a row that no longer
/// parses (an older format: it only fed `status`).
pub fn last_breaker_transitions(
    c: &Connection,
) -> Result<Vec<(String, Option<Transition>, i64)>, StoreError> {
    let mut stmt = c.prepare(
        "SELECT e.scope, e.transition, e.at_ms FROM breaker_events e \
         JOIN (SELECT scope, MAX(id) AS id FROM breaker_events GROUP BY scope) m ON e.id = m.id",
    )?;
    let rows = stmt
        .query_map([], |r| {
            let transition = match r.get::<_, BreakerDecision>(1) {
                Ok(BreakerDecision::Transition(t)) => Some(t),
                Ok(BreakerDecision::OperatorReset) | Err(_) => None,
            };
            Ok((r.get(0)?, transition, r.get(2)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Deletes the persisted state of pruned scopes (their `breaker_events` history stays).
pub fn delete_breaker_states(c: &Connection, scopes: &[String]) -> Result<(), StoreError> {
    for scope in scopes {
        c.execute("DELETE FROM breaker_state WHERE scope = ?1", params![scope])?;
    }
    Ok(())
}

/// The keys of every learning record of a project.
pub fn learn_keys(c: &Connection, project: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = c.prepare("SELECT key FROM learn_records WHERE project = ?1 ORDER BY key")?;
    let keys = stmt
        .query_map(params![project], |r| r.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    Ok(keys)
}

/// A rule with the audit rows it came from, its history (oldest first) and the latest decisions it
/// made (`cmdgate rules show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleShown {
    pub rule: StoredRule,
    pub sources: Vec<AuditRow>,
    pub history: Vec<AuditRow>,
    pub matched: Vec<AuditRow>,
}

/// A rule as `cmdgate rules show` presents it; `None` when there is no such rule.
pub fn rule_shown(
    c: &Connection,
    id: i64,
    history_limit: u32,
    matched_limit: u32,
) -> Result<Option<RuleShown>, StoreError> {
    let Some(rule) = rule(c, id)? else {
        return Ok(None);
    };
    let mut sources = Vec::new();
    let pruned_through = audit::cut(c)?.map(|(through, _)| through);
    for a in &rule.provenance {
        match audit::get(c, *a)? {
            Some(row) => sources.push(row),
            // Pruned with the rows before a date (`cmdgate audit prune`): the rule stays.
            None if pruned_through.is_some_and(|t| *a <= t) => {}
            // Any other provenance id with no row would be a corrupt store: say so.
            None => {
                return Err(StoreError::Corrupt(format!(
                    "rule {id} names missing audit row {a}"
                )))
            }
        }
    }
    let reference = RuleRef(id);
    let mut history = audit::naming_rule(c, reference, &[Kind::Rule, Kind::Learn], history_limit)?;
    history.reverse();
    let matched = audit::naming_rule(c, reference, &[Kind::Decision], matched_limit)?;
    Ok(Some(RuleShown {
        rule,
        sources,
        history,
        matched,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        for m in super::super::migrations::MIGRATIONS {
            conn.execute_batch(m).unwrap();
        }
        conn
    }

    #[test]
    fn highest_revisions_take_the_top_of_every_key() {
        let conn = db();
        let h = |b| ContentHash([b; 32]);
        let rec = |p: &str, k: &str, revision, b, at| {
            record_revision(
                &conn,
                p,
                k,
                &SeenRevision {
                    revision,
                    content_hash: h(b),
                },
                at,
            )
            .unwrap();
        };
        assert!(highest_revisions(&conn).unwrap().is_empty());
        rec("/b", "old", 7, 1, 1);
        rec("/b", "new", 3, 2, 2);
        rec("/a", "k", 2, 3, 3);
        rec("/a", "k", 4, 4, 4);
        let got = highest_revisions(&conn).unwrap();
        assert_eq!(
            got,
            vec![
                (
                    "/a".to_string(),
                    SeenRevision {
                        revision: 4,
                        content_hash: h(4)
                    }
                ),
                (
                    "/b".to_string(),
                    SeenRevision {
                        revision: 7,
                        content_hash: h(1)
                    }
                ),
            ]
        );
    }

    #[test]
    fn revisions_only_go_up() {
        let conn = db();
        let h = |b| ContentHash([b; 32]);
        record_revision(
            &conn,
            "/p",
            "k",
            &SeenRevision {
                revision: 5,
                content_hash: h(1),
            },
            1,
        )
        .unwrap();
        record_revision(
            &conn,
            "/p",
            "k",
            &SeenRevision {
                revision: 3,
                content_hash: h(2),
            },
            2,
        )
        .unwrap();
        assert_eq!(
            seen_revision(&conn, "/p", "k").unwrap(),
            Some(SeenRevision {
                revision: 5,
                content_hash: h(1)
            })
        );
        record_revision(
            &conn,
            "/p",
            "k",
            &SeenRevision {
                revision: 6,
                content_hash: h(3),
            },
            3,
        )
        .unwrap();
        assert_eq!(
            seen_revision(&conn, "/p", "k").unwrap().unwrap().revision,
            6
        );
        assert_eq!(seen_revision(&conn, "/q", "k").unwrap(), None);
    }

    #[test]
    fn rules_round_trip_with_provenance() {
        let conn = db();
        let rule = NewRule {
            kind: "learned".into(),
            project: "/p".into(),
            key: "cargo build".into(),
            note: None,
            created_by: "learned".into(),
            provenance: vec![1, 2, 3],
        };
        let id = add_rule(&conn, &rule, 9).unwrap();
        let all = rules(&conn).unwrap();
        assert_eq!(all[0].id, id);
        assert_eq!(all[0].provenance, vec![1, 2, 3]);
        assert_eq!(disable_learned(&conn, "/p", "cargo build", 10).unwrap(), 1);
        assert!(!rules(&conn).unwrap()[0].enabled);
    }

    fn operator_rule(key: &str) -> NewRule {
        NewRule {
            kind: "reject".into(),
            project: "/p".into(),
            key: key.into(),
            note: None,
            created_by: "operator".into(),
            provenance: Vec::new(),
        }
    }

    #[test]
    fn every_change_to_the_rules_raises_the_revision() {
        let conn = db();
        assert_eq!(rules_revision(&conn).unwrap(), 0);
        let id = add_rule(&conn, &operator_rule("rm -rf build"), 1).unwrap();
        assert_eq!(rules_revision(&conn).unwrap(), 1);
        assert!(set_rule_enabled(&conn, id, false, 2).unwrap());
        assert_eq!(rules_revision(&conn).unwrap(), 2);
        // Nothing changed, nothing to raise.
        assert!(!set_rule_enabled(&conn, id + 1, false, 3).unwrap());
        assert_eq!(disable_learned(&conn, "/p", "rm -rf build", 3).unwrap(), 0);
        assert!(!remove_rule(&conn, id + 1).unwrap());
        assert_eq!(rules_revision(&conn).unwrap(), 2);
        // A learned promotion and its demotion count like an operator's edit.
        let learned = NewRule {
            kind: "learned".into(),
            created_by: "learned".into(),
            ..operator_rule("cargo build")
        };
        add_rule(&conn, &learned, 4).unwrap();
        assert_eq!(disable_learned(&conn, "/p", "cargo build", 5).unwrap(), 1);
        assert_eq!(rules_revision(&conn).unwrap(), 4);
        assert!(remove_rule(&conn, id).unwrap());
        assert_eq!(rule(&conn, id).unwrap(), None);
        assert_eq!(rules_at_revision(&conn).unwrap().0, 5);
    }

    #[test]
    fn an_edit_against_an_old_revision_conflicts_and_changes_nothing() {
        let conn = db();
        let (id, rev) = add_rule_checked(&conn, &operator_rule("a"), Some(0), 1)
            .unwrap()
            .unwrap();
        assert_eq!(rev, 1);
        // Two edits made against revision 1: the first passes, the second is told the current one.
        let first = edit_rules(&conn, Some(1), |c| set_rule_enabled(c, id, false, 2)).unwrap();
        assert_eq!(first, Ok((true, 2)));
        let second = edit_rules(&conn, Some(1), |c| remove_rule(c, id)).unwrap();
        let conflict = second.unwrap_err();
        assert_eq!(
            conflict,
            RevisionConflict {
                current: 2,
                expected: 1
            }
        );
        assert_eq!(
            conflict.to_string(),
            "rules changed: the current revision is 2 (you expected 1); list them again and retry"
        );
        assert!(
            rule(&conn, id).unwrap().is_some(),
            "the conflicting removal ran"
        );
        assert_eq!(
            add_rule_checked(&conn, &operator_rule("b"), Some(7), 3).unwrap(),
            Err(RevisionConflict {
                current: 2,
                expected: 7
            })
        );
        assert_eq!(rules(&conn).unwrap().len(), 1);
        // No expectation: applied whatever the revision.
        let (_, rev) = add_rule_checked(&conn, &operator_rule("b"), None, 3)
            .unwrap()
            .unwrap();
        assert_eq!(rev, 3);
    }
}

/// An escape-hatch grant as stored: exactly one of `uid` and `session` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HatchRow {
    pub id: i64,
    pub uid: Option<u32>,
    pub session: Option<String>,
    pub reason: String,
    pub granted_ms: i64,
    pub until_ms: i64,
    pub granted_by: String,
}

/// Stores a new grant (its id chosen by the engine, never reused: see `max_hatch_id`).
pub fn put_hatch(c: &Connection, g: &HatchRow) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO escape_hatches (id, scope_uid, scope_session, reason, granted_ms, until_ms, \
         granted_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        rusqlite::params![
            g.id,
            g.uid,
            g.session,
            g.reason,
            g.granted_ms,
            g.until_ms,
            g.granted_by
        ],
    )?;
    Ok(())
}

/// Marks grant `id` revoked at `now_ms`.
pub fn revoke_hatch(c: &Connection, id: i64, now_ms: i64) -> Result<(), StoreError> {
    c.execute(
        "UPDATE escape_hatches SET revoked_ms = ?2 WHERE id = ?1 AND revoked_ms IS NULL",
        rusqlite::params![id, now_ms],
    )?;
    Ok(())
}

/// Grants neither revoked nor expired at `now_ms`, oldest first; and the highest id ever used.
pub fn hatches_in_force(c: &Connection, now_ms: i64) -> Result<(Vec<HatchRow>, i64), StoreError> {
    let mut stmt = c.prepare(
        "SELECT id, scope_uid, scope_session, reason, granted_ms, until_ms, granted_by \
         FROM escape_hatches WHERE revoked_ms IS NULL AND until_ms > ?1 ORDER BY id",
    )?;
    let mut rows = stmt.query([now_ms])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(HatchRow {
            id: r.get(0)?,
            uid: r.get(1)?,
            session: r.get(2)?,
            reason: r.get(3)?,
            granted_ms: r.get(4)?,
            until_ms: r.get(5)?,
            granted_by: r.get(6)?,
        });
    }
    let max: Option<i64> = c.query_row("SELECT MAX(id) FROM escape_hatches", [], |r| r.get(0))?;
    Ok((out, max.unwrap_or(0)))
}

/// Binds `session` to `uid`, last seen at `seen_ms` (replacing an earlier binding).
pub fn put_session_owner(
    c: &Connection,
    session: &str,
    uid: u32,
    seen_ms: i64,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO session_owners (session, uid, seen_ms) VALUES (?1, ?2, ?3) \
         ON CONFLICT(session) DO UPDATE SET uid = excluded.uid, seen_ms = excluded.seen_ms",
        rusqlite::params![session, uid, seen_ms],
    )?;
    Ok(())
}

/// Session bindings seen at or after `since_ms`; older ones are deleted.
pub fn session_owners(
    c: &Connection,
    since_ms: i64,
) -> Result<Vec<(String, u32, i64)>, StoreError> {
    c.execute("DELETE FROM session_owners WHERE seen_ms < ?1", [since_ms])?;
    let mut stmt = c.prepare("SELECT session, uid, seen_ms FROM session_owners")?;
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push((r.get(0)?, r.get(1)?, r.get(2)?));
    }
    Ok(out)
}
