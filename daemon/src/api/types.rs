//! The admin API's request and reply types (serde), shared by the server (`routes.rs`,
//! `handler.rs`) and the CLI's typed client (`cli::client::call`): the one module both ends import.
//! Replies the engine or store produce are defined there (they carry domain data) and re-exported
//! here. The hook's wire types are `cmdgate_policy::wire`'s.

use serde::{Deserialize, Serialize};

pub use crate::engine::escape_hatch::{Grant, HatchScope};

pub use crate::engine::apply::{Applied, ApplyRequest};
pub use crate::engine::approvals::Answered;
pub use crate::engine::breakers::{BreakerView, BreakersSummary, LastTransition};
pub use crate::engine::integrity::{AuditFailure, AuditFailures};
pub use crate::engine::outcome::SpoolIngested;
pub use crate::engine::pending::PendingInfo;
pub use crate::engine::rules_admin::{RuleAdded, RuleEnabled, RuleRemoved};
pub use crate::engine::status::{
    RecentRun, Status, StatusApprovals, StatusDeadlines, StatusNotifications, StatusPaths,
    StatusRuns,
};
pub use crate::engine::tiermaps::ProjectStatus;
pub use crate::store::audit::{AuditRow, ChainReport, Query};
pub use crate::store::state::{RuleShown, StoredRule};
pub use cmdgate_sandbox::commit::{DiffSource, DiffStat, FileChange, FileDiff, RunDiff};

/// Every error answer: `{"error": …}`; a rule edit made against an old revision (409) also names
/// the current and the expected revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<i64>,
}

/// `GET /v1/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub ok: bool,
    pub version: String,
}

/// `GET /admin/rules`: the rules and the revision they are at, read together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulesList {
    pub revision: i64,
    pub rules: Vec<StoredRule>,
}

/// `GET /admin/audit/{id}`: a row and the outcome rows that joined it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditShown {
    pub row: AuditRow,
    pub outcomes: Vec<AuditRow>,
}

/// `POST /admin/console/login`: a one-time login link to the web console.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsoleLogin {
    pub url: String,
    pub port: u16,
    /// How long the link works.
    pub valid_s: u64,
}

/// `POST /admin/breaker/reset`: the scopes reset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerReset {
    pub reset: Vec<String>,
}

/// `POST /admin/escape-hatch`: step aside for one agent uid or one session, for a while.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantHatch {
    pub scope: HatchScope,
    /// How long, in minutes (1 to 10080).
    pub minutes: u64,
    /// Why: shown to the agent, kept in the audit.
    pub reason: String,
}

/// `POST /admin/rules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddRule {
    /// `approve`, `reject`, `always_ask`.
    pub kind: String,
    /// The project root the rule is scoped to (canonicalised by the daemon).
    pub project: String,
    /// The command exactly as the agent would send it; the daemon computes its canonical key.
    pub command: String,
    #[serde(default)]
    pub note: Option<String>,
    /// Apply only if the rules are still at this revision (`GET /admin/rules`).
    #[serde(default)]
    pub if_revision: Option<i64>,
}

/// The optional body of `POST /admin/rules/{id}/enable|disable|remove` and `DELETE /admin/rules/{id}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleEdit {
    /// Apply only if the rules are still at this revision.
    #[serde(default)]
    pub if_revision: Option<i64>,
}

/// `POST /admin/audit/prune`: delete the audit rows before a time (a checkpoint row keeps the
/// chain verifiable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PruneAudit {
    /// Rows older than this (ms since the epoch) go; the newest row always stays.
    pub before_ms: i64,
}

/// `POST /admin/breaker/reset`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetBreaker {
    /// `global`, `session:ID`; none resets every breaker.
    #[serde(default)]
    pub scope: Option<String>,
}

/// `POST /admin/pending/{id}/approve` and `/reject`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerPending {
    /// Also remember the answer as a rule for this exact command in this project.
    #[serde(default)]
    pub remember: bool,
    /// Shown to the model with the answer, and kept with the rule.
    #[serde(default)]
    pub note: Option<String>,
}

/// One answer to a pending request, as routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingAnswer {
    pub id: i64,
    /// `approve` (else `reject`).
    pub approve: bool,
    pub body: AnswerPending,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_bodies_are_strict() {
        let a: AnswerPending = serde_json::from_str(r#"{"remember":true,"note":"ok"}"#).unwrap();
        assert!(a.remember);
        assert_eq!(a.note.as_deref(), Some("ok"));
        assert_eq!(
            serde_json::from_str::<AnswerPending>("{}").unwrap(),
            AnswerPending::default()
        );
        assert!(serde_json::from_str::<AnswerPending>(r#"{"remeber":true}"#).is_err());
    }

    /// The typed replies keep the bodies the untyped server sent (the CLI's `--json` prints them).
    #[test]
    fn replies_keep_their_wire_shape() {
        fn json<T: Serialize>(v: &T) -> serde_json::Value {
            serde_json::to_value(v).unwrap()
        }
        assert_eq!(
            json(&ErrorReply {
                error: "no rule 4".into(),
                revision: None,
                expected: None
            }),
            serde_json::json!({"error": "no rule 4"})
        );
        assert_eq!(
            json(&SpoolIngested {
                ingested: 0,
                skipped: 0,
                spool_dir: Some(None)
            }),
            serde_json::json!({"ingested": 0, "skipped": 0, "spool_dir": null})
        );
        assert_eq!(
            json(&SpoolIngested {
                ingested: 2,
                skipped: 1,
                spool_dir: None
            }),
            serde_json::json!({"ingested": 2, "skipped": 1})
        );
        assert_eq!(
            json(&BreakerReset {
                reset: vec!["global".into()]
            }),
            serde_json::json!({"reset": ["global"]})
        );
    }
}
