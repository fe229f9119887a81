//! The store's state tables besides the audit: remembered and learned rules (with provenance),
//! learning records, the highest tier map revision seen per project and key, breaker state.

use cmdgate_policy::learn::Record;
use cmdgate_policy::tiermap::{ContentHash, SeenRevision};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

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

/// Every rule, enabled or not.
pub fn rules(conn: &Connection) -> Result<Vec<StoredRule>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT id, kind, project, key, enabled, note, created_ms, created_by, provenance, updated_ms FROM rules ORDER BY id",
    )?;
    let mut out = Vec::new();
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let provenance: String = r.get(8)?;
        let id: i64 = r.get(0)?;
        out.push(StoredRule {
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
        });
    }
    Ok(out)
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

/// Adds a rule; returns its id.
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
    Ok(conn.last_insert_rowid())
}

/// Enables or disables a rule; `false` when there is no such rule.
pub fn set_rule_enabled(
    conn: &Connection,
    id: i64,
    enabled: bool,
    now_ms: i64,
) -> Result<bool, StoreError> {
    Ok(conn.execute(
        "UPDATE rules SET enabled = ?2, updated_ms = ?3 WHERE id = ?1",
        params![id, enabled, now_ms],
    )? > 0)
}

/// Disables the learned entries for a command (demotion).
pub fn disable_learned(
    conn: &Connection,
    project: &str,
    key: &str,
    now_ms: i64,
) -> Result<usize, StoreError> {
    Ok(conn.execute(
        "UPDATE rules SET enabled = 0, updated_ms = ?3 WHERE kind = 'learned' AND project = ?1 AND key = ?2 AND enabled = 1",
        params![project, key, now_ms],
    )?)
}

/// The learning record of a command, if it has one.
pub fn learn_record(
    conn: &Connection,
    project: &str,
    key: &str,
) -> Result<Option<Record>, StoreError> {
    let text: Option<String> = conn
        .query_row(
            "SELECT record FROM learn_records WHERE project = ?1 AND key = ?2",
            params![project, key],
            |r| r.get(0),
        )
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
    let text = serde_json::to_string(record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    conn.execute(
        "INSERT INTO learn_records (project, key, record, updated_ms) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT(project, key) DO UPDATE SET record = excluded.record, updated_ms = excluded.updated_ms",
        params![project, key, text, now_ms],
    )?;
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
    transition_json: &str,
    audit_id: Option<i64>,
    now_ms: i64,
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO breaker_events (at_ms, scope, transition, audit_id) VALUES (?1, ?2, ?3, ?4)",
        params![now_ms, scope, transition_json, audit_id],
    )?;
    Ok(())
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
}
