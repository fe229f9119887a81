//! Versioned schema migrations for the store, applied in order and recorded in `user_version`.
//!
//! Each entry is applied once, inside one transaction together with the `user_version` bump, so a
//! crash mid-migration leaves the previous version intact. Never edit a shipped entry: append one.

/// The migrations, oldest first; `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: the audit chain, rules with provenance, learning records, tier map revisions seen, breaker.
    r#"
    CREATE TABLE command_audit (
        id               INTEGER PRIMARY KEY,
        at_ms            INTEGER NOT NULL,
        -- decision | outcome | local_allow | escape_hatch | refused_peer | tiermap | breaker | learn | rule
        kind             TEXT NOT NULL,
        session          TEXT,
        agent_id         TEXT,
        agent_type       TEXT,
        permission_mode  TEXT,
        tool_use_id      TEXT,
        cwd              TEXT,
        project          TEXT,
        tool             TEXT,
        command          TEXT,
        tool_input       TEXT,
        parts            TEXT,
        tier             TEXT,
        decision         TEXT,
        source           TEXT,
        rule             TEXT,
        reason           TEXT,
        tiermap_revision INTEGER,
        sandbox          TEXT,
        latency_us       INTEGER,
        success          INTEGER,
        exit_code        INTEGER,
        interrupted      INTEGER,
        duration_ms      INTEGER,
        error            TEXT,
        decision_id      INTEGER,
        peer             TEXT,
        note             TEXT,
        prev_hash        TEXT NOT NULL,
        hash             TEXT NOT NULL
    );
    CREATE INDEX command_audit_tool_use ON command_audit(tool_use_id);
    CREATE INDEX command_audit_session ON command_audit(session);
    CREATE INDEX command_audit_project ON command_audit(project, at_ms);

    CREATE TABLE rules (
        id          INTEGER PRIMARY KEY,
        kind        TEXT NOT NULL,
        project     TEXT NOT NULL,
        key         TEXT NOT NULL,
        enabled     INTEGER NOT NULL DEFAULT 1,
        note        TEXT,
        created_ms  INTEGER NOT NULL,
        created_by  TEXT NOT NULL,
        provenance  TEXT NOT NULL DEFAULT '[]',
        updated_ms  INTEGER NOT NULL
    );
    CREATE INDEX rules_lookup ON rules(project, key);

    CREATE TABLE learn_records (
        project     TEXT NOT NULL,
        key         TEXT NOT NULL,
        record      TEXT NOT NULL,
        updated_ms  INTEGER NOT NULL,
        PRIMARY KEY (project, key)
    );

    CREATE TABLE tiermap_revisions (
        project       TEXT NOT NULL,
        key           TEXT NOT NULL,
        revision      INTEGER NOT NULL,
        content_hash  TEXT NOT NULL,
        first_seen_ms INTEGER NOT NULL,
        PRIMARY KEY (project, key)
    );

    CREATE TABLE breaker_state (
        scope       TEXT PRIMARY KEY,
        state       TEXT NOT NULL,
        updated_ms  INTEGER NOT NULL
    );

    CREATE TABLE breaker_events (
        id          INTEGER PRIMARY KEY,
        at_ms       INTEGER NOT NULL,
        scope       TEXT NOT NULL,
        transition  TEXT NOT NULL,
        audit_id    INTEGER
    );
    "#,
    // 2: a revision for the rules as a whole, raised in the same transaction as every rule insert,
    // update or delete, so an operator edit can say which state it was made against (two CLIs
    // editing at once then conflict instead of silently overwriting each other); and an index to
    // find the decisions a rule matched (`rule = 'rule #ID'`). The rules table is rebuilt with
    // AUTOINCREMENT: rules can now be removed, and a reused id would make the audit rows of a
    // removed rule (`rule #7`) look like the provenance and matches of a new one.
    r#"
    CREATE TABLE rules_v2 (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        kind        TEXT NOT NULL,
        project     TEXT NOT NULL,
        key         TEXT NOT NULL,
        enabled     INTEGER NOT NULL DEFAULT 1,
        note        TEXT,
        created_ms  INTEGER NOT NULL,
        created_by  TEXT NOT NULL,
        provenance  TEXT NOT NULL DEFAULT '[]',
        updated_ms  INTEGER NOT NULL
    );
    INSERT INTO rules_v2 (id, kind, project, key, enabled, note, created_ms, created_by, provenance, updated_ms)
        SELECT id, kind, project, key, enabled, note, created_ms, created_by, provenance, updated_ms FROM rules;
    DROP TABLE rules;
    ALTER TABLE rules_v2 RENAME TO rules;
    CREATE INDEX rules_lookup ON rules(project, key);

    CREATE TABLE rules_revision (
        id          INTEGER PRIMARY KEY CHECK (id = 1),
        revision    INTEGER NOT NULL
    );
    INSERT INTO rules_revision (id, revision) VALUES (1, 0);
    CREATE INDEX command_audit_rule ON command_audit(rule);
    "#,
    // System mode: escape-hatch grants and session bindings survive a restart (a restart must not
    // end an operator's grant early, nor free a session for another uid).
    r#"
    CREATE TABLE escape_hatches (
        id            INTEGER PRIMARY KEY,
        scope_uid     INTEGER,
        scope_session TEXT,
        reason        TEXT NOT NULL,
        granted_ms    INTEGER NOT NULL,
        until_ms      INTEGER NOT NULL,
        granted_by    TEXT NOT NULL,
        revoked_ms    INTEGER,
        CHECK ((scope_uid IS NULL) <> (scope_session IS NULL))
    );
    CREATE TABLE session_owners (
        session     TEXT PRIMARY KEY,
        uid         INTEGER NOT NULL,
        seen_ms     INTEGER NOT NULL
    );
    "#,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_migration_applies_to_an_empty_database() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        for m in MIGRATIONS {
            conn.execute_batch(m).unwrap();
        }
    }

    #[test]
    fn rules_keep_their_ids_across_migration_2_and_removed_ids_are_never_reused() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.execute_batch(
            "INSERT INTO rules (id, kind, project, key, created_ms, created_by, updated_ms) \
             VALUES (4, 'reject', '/p', 'rm -rf build', 1, 'operator', 1)",
        )
        .unwrap();
        for m in &MIGRATIONS[1..] {
            conn.execute_batch(m).unwrap();
        }
        let key: String = conn
            .query_row("SELECT key FROM rules WHERE id = 4", [], |r| r.get(0))
            .unwrap();
        assert_eq!(key, "rm -rf build");
        conn.execute_batch("DELETE FROM rules WHERE id = 4")
            .unwrap();
        conn.execute_batch(
            "INSERT INTO rules (kind, project, key, created_ms, created_by, updated_ms) \
             VALUES ('approve', '/p', 'ls', 2, 'operator', 2)",
        )
        .unwrap();
        assert_eq!(conn.last_insert_rowid(), 5);
    }
}
