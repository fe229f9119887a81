//! The admin API's request and reply types (serde), shared by the server (`routes.rs`,
//! `handler.rs`) and the CLI's client. The hook's wire types are `cmdgate_policy::wire`'s.

use serde::{Deserialize, Serialize};

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
}
