//! The daemon's HTTP API, parsed once into [`ApiRequest`] (handlers never see hyper) and answered
//! with an [`ApiResponse`].
//!
//! Agent socket (the hook is the client; paths and bodies are `cmdgate_policy::wire`'s):
//!
//! | method and path | body | answer |
//! |---|---|---|
//! | `POST /v1/decide` | `DecideRequest` | `200` `DecideResponse` |
//! | `POST /v1/outcome` | `OutcomeReport` | `204` (403: another uid's session) |
//! | `POST /v1/record` | `SpoolRecord` | `204` (system-mode hook: a local allow; 403: another uid's session) |
//! | `POST /v1/spool/ingest` | none | `200` `{"ingested": N, "skipped": M}` |
//! | `GET /v1/health` | none | `200` `{"ok": true, "version": ..}` |
//! | `POST /v1/run` | `RunRequest` (`cmdgate-run` redeems a ticket) | `200` chunked stream of run frames (`cmdgate_policy::wire::run`); `403` refused; `503` unavailable |
//!
//! Admin socket (the operator CLI):
//!
//! | method and path | body | answer |
//! |---|---|---|
//! | `GET /admin/status` | none | status JSON |
//! | `POST /admin/audit/query` | `store::audit::Query` | `[AuditRow]` |
//! | `GET /admin/audit/{id}` | none | `{"row": AuditRow, "outcomes": [AuditRow]}` or 404 |
//! | `GET /admin/audit/verify` | none | `ChainReport` |
//! | `POST /admin/audit/prune` | `{"before_ms"}` | `store::audit::Pruned` or `null` when nothing is that old |
//! | `GET /admin/rules` | none | `{"revision": N, "rules": [StoredRule]}` |
//! | `GET /admin/rules/{id}` | none | `{"rule", "sources": [AuditRow], "history": [AuditRow], "matched": [AuditRow]}` or 404 |
//! | `POST /admin/rules` | `{"kind", "project", "command", "note"?, "if_revision"?}` | `{"id", "key", "project", "revision"}` |
//! | `POST /admin/rules/{id}/enable`, `/disable` | none or `{"if_revision"?}` | `{"id", "enabled", "revision"}` or 404 |
//! | `DELETE /admin/rules/{id}` (or `POST …/{id}/remove`) | none or `{"if_revision"?}` | `{"id", "removed": true, "revision"}` or 404 |
//! | `POST /admin/breaker/reset` | `{"scope"?: "global" or "session:ID"}` | `{"reset": [scopes]}` |
//! | `POST /admin/spool/ingest` | none | as on the agent socket |
//! | `GET /admin/pending` | none | `[PendingInfo]` (held asks, oldest first) |
//! | `POST /admin/pending/{id}/approve`, `/reject` | `{"remember"?: bool, "note"?: text}` | `{"id", "decision", "audit_id", "rule", "delivered", ..}`, 404 when not waiting |
//! | `POST /admin/console/login` | none | `{"url", "port", "valid_s"}`: a one-time login link to the web console, 404 when it is off |
//! | `GET /admin/runs?limit=N` (as `GET /admin/runs`) | none | `[{"run_id", "undo_state", "row": AuditRow}]`, newest first |
//! | `GET /admin/runs/{run}` | none | `{"run_id", "undo_state", "row"}` or 404 |
//! | `POST /admin/runs/{run}/undo` | none | `{"run_id", "undone": true, "restored": [paths]}`; 404 unknown; 409 refused (a later change conflicts) |
//! | `GET /admin/runs/{run}/diff` | none | `RunDiff` (a kept run against the workspace now, or a committed run from its journal); 404 when neither |
//! | `POST /admin/runs/{run}/apply` | none or `ApplyRequest` `{"include_protected"?: bool}` | `Applied` `{"run_id", "audit_id", "changed", "undo"}`; 404 not kept; 409 refused (conflict, protected paths, a refused entry) |
//!
//! A body whose `v` is not `WIRE_VERSION` is a 400 (the hook turns every non-200 into deny).
//!
//! Rule edits carrying `if_revision` are applied only if the rules are still at that revision
//! (checked and applied in one store transaction); otherwise `409` with
//! `{"error": "rules changed: the current revision is N (you expected M); …", "revision": N}`.

use cmdgate_policy::wire::run::{is_ticket, RunRequest, RUN_PATH};
use cmdgate_policy::wire::{
    DecideRequest, OutcomeReport, SpoolRecord, DECIDE_PATH, OUTCOME_PATH, RECORD_PATH, WIRE_VERSION,
};
use serde::{Deserialize, Serialize};

use crate::api::stream::Streamed;
use crate::api::types::{
    AddRule, AnswerPending, GrantHatch, PendingAnswer, PruneAudit, ResetBreaker, RuleEdit,
};
use crate::engine::Role;
use crate::store::audit::Query;

/// One parsed request.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiRequest {
    Decide(Box<DecideRequest>),
    Outcome(Box<OutcomeReport>),
    Record(Box<SpoolRecord>),
    IngestSpool,
    Health,
    Status,
    AuditQuery(Query),
    AuditShow(i64),
    AuditVerify,
    AuditPrune(PruneAudit),
    Rules,
    RuleShow(i64),
    AddRule(AddRule),
    SetRuleEnabled {
        id: i64,
        enabled: bool,
        edit: RuleEdit,
    },
    RemoveRule {
        id: i64,
        edit: RuleEdit,
    },
    ResetBreaker(ResetBreaker),
    Hatches,
    GrantHatch(GrantHatch),
    RevokeHatch(u64),
    Pending,
    AnswerPending(PendingAnswer),
    /// A one-time login link for the web console (answered by `console::WithConsole`).
    ConsoleLogin,
    /// `cmdgate-run` redeems a ticket.
    Run(Box<RunRequest>),
    Runs,
    RunShow(String),
    Undo(String),
    /// `cmdgate runs show RUN --diff`.
    RunDiff(String),
    /// `cmdgate apply RUN`.
    Apply(String, crate::engine::apply::ApplyRequest),
}

/// A request that could not be parsed: its status and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub status: u16,
    pub message: String,
}

fn reject(status: u16, message: impl Into<String>) -> Rejection {
    Rejection {
        status,
        message: message.into(),
    }
}

fn json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, Rejection> {
    serde_json::from_slice(body).map_err(|e| reject(400, format!("bad JSON body: {e}")))
}

fn versioned(v: u32) -> Result<(), Rejection> {
    if v == WIRE_VERSION {
        Ok(())
    } else {
        Err(reject(
            400,
            format!("unsupported wire version {v} (this daemon speaks {WIRE_VERSION})"),
        ))
    }
}

fn rule_id(id: &str) -> Result<i64, Rejection> {
    id.parse()
        .map_err(|_| reject(400, format!("rule id {id:?} is not a number")))
}

fn run_id(id: &str) -> Result<String, Rejection> {
    if !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        Ok(id.to_owned())
    } else {
        Err(reject(400, format!("run id {id:?} is malformed")))
    }
}

fn rule_edit(body: &[u8]) -> Result<RuleEdit, Rejection> {
    if body.is_empty() {
        Ok(RuleEdit::default())
    } else {
        json(body)
    }
}

impl ApiRequest {
    /// Parses method, path and body for the socket `role`.
    pub fn parse(
        role: Role,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<ApiRequest, Rejection> {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (role, method, segments.as_slice()) {
            (Role::Agent, "POST", _) if path == DECIDE_PATH => {
                let r: DecideRequest = json(body)?;
                versioned(r.v)?;
                Ok(ApiRequest::Decide(Box::new(r)))
            }
            (Role::Agent, "POST", _) if path == OUTCOME_PATH => {
                let r: OutcomeReport = json(body)?;
                versioned(r.v)?;
                Ok(ApiRequest::Outcome(Box::new(r)))
            }
            (Role::Agent, "POST", _) if path == RUN_PATH => {
                let r: RunRequest = json(body)?;
                versioned(r.v)?;
                if !is_ticket(&r.ticket) {
                    return Err(reject(400, "the ticket is malformed"));
                }
                Ok(ApiRequest::Run(Box::new(r)))
            }
            (Role::Admin, "GET", ["admin", "runs"]) => Ok(ApiRequest::Runs),
            (Role::Admin, "GET", ["admin", "runs", id]) => Ok(ApiRequest::RunShow(run_id(id)?)),
            (Role::Admin, "POST", ["admin", "runs", id, "undo"]) => {
                Ok(ApiRequest::Undo(run_id(id)?))
            }
            (Role::Admin, "GET", ["admin", "runs", id, "diff"]) => {
                Ok(ApiRequest::RunDiff(run_id(id)?))
            }
            (Role::Admin, "POST", ["admin", "runs", id, "apply"]) => {
                let req = if body.is_empty() {
                    Default::default()
                } else {
                    json(body)?
                };
                Ok(ApiRequest::Apply(run_id(id)?, req))
            }
            (Role::Agent, "POST", _) if path == RECORD_PATH => {
                let r: SpoolRecord = json(body)?;
                versioned(r.v)?;
                Ok(ApiRequest::Record(Box::new(r)))
            }
            (Role::Admin, "GET", ["admin", "escape-hatch"]) => Ok(ApiRequest::Hatches),
            (Role::Admin, "POST", ["admin", "escape-hatch"]) => {
                Ok(ApiRequest::GrantHatch(json(body)?))
            }
            (Role::Admin, "DELETE", ["admin", "escape-hatch", id]) => id
                .parse()
                .map(ApiRequest::RevokeHatch)
                .map_err(|_| reject(400, format!("grant id {id:?} is not a number"))),
            (Role::Agent, "POST", ["v1", "spool", "ingest"])
            | (Role::Admin, "POST", ["admin", "spool", "ingest"]) => Ok(ApiRequest::IngestSpool),
            (_, "GET", ["v1", "health"]) => Ok(ApiRequest::Health),
            (Role::Admin, "GET", ["admin", "status"]) => Ok(ApiRequest::Status),
            (Role::Admin, "POST", ["admin", "audit", "query"]) => {
                Ok(ApiRequest::AuditQuery(if body.is_empty() {
                    Query::default()
                } else {
                    json(body)?
                }))
            }
            (Role::Admin, "GET", ["admin", "audit", "verify"]) => Ok(ApiRequest::AuditVerify),
            (Role::Admin, "POST", ["admin", "audit", "prune"]) => {
                Ok(ApiRequest::AuditPrune(json(body)?))
            }
            (Role::Admin, "GET", ["admin", "audit", id]) => id
                .parse()
                .map(ApiRequest::AuditShow)
                .map_err(|_| reject(400, format!("audit id {id:?} is not a number"))),
            (Role::Admin, "GET", ["admin", "rules"]) => Ok(ApiRequest::Rules),
            (Role::Admin, "GET", ["admin", "rules", id]) => Ok(ApiRequest::RuleShow(rule_id(id)?)),
            (Role::Admin, "POST", ["admin", "rules"]) => Ok(ApiRequest::AddRule(json(body)?)),
            (Role::Admin, "POST", ["admin", "rules", id, action @ ("enable" | "disable")]) => {
                Ok(ApiRequest::SetRuleEnabled {
                    id: rule_id(id)?,
                    enabled: *action == "enable",
                    edit: rule_edit(body)?,
                })
            }
            (Role::Admin, "DELETE", ["admin", "rules", id])
            | (Role::Admin, "POST", ["admin", "rules", id, "remove"]) => {
                Ok(ApiRequest::RemoveRule {
                    id: rule_id(id)?,
                    edit: rule_edit(body)?,
                })
            }
            (Role::Admin, "GET", ["admin", "pending"]) => Ok(ApiRequest::Pending),
            (Role::Admin, "POST", ["admin", "console", "login"]) => Ok(ApiRequest::ConsoleLogin),
            (Role::Admin, "POST", ["admin", "pending", id, action @ ("approve" | "reject")]) => {
                let id = id
                    .parse()
                    .map_err(|_| reject(400, format!("pending id {id:?} is not a number")))?;
                Ok(ApiRequest::AnswerPending(PendingAnswer {
                    id,
                    approve: *action == "approve",
                    body: if body.is_empty() {
                        AnswerPending::default()
                    } else {
                        json(body)?
                    },
                }))
            }
            (Role::Admin, "POST", ["admin", "breaker", "reset"]) => {
                Ok(ApiRequest::ResetBreaker(if body.is_empty() {
                    ResetBreaker::default()
                } else {
                    json(body)?
                }))
            }
            _ => Err(reject(
                404,
                format!("no route {method} {path} on the {} socket", role.as_str()),
            )),
        }
    }
}

/// An answer: a status and an optional JSON body, or a stream (a mirrored run's frames).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiResponse {
    pub status: u16,
    pub body: Option<Vec<u8>>,
    /// Sent instead of `body`, chunk by chunk as it arrives.
    pub stream: Option<Streamed>,
}

impl ApiResponse {
    pub fn json<T: Serialize>(status: u16, value: &T) -> ApiResponse {
        match serde_json::to_vec(value) {
            Ok(body) => ApiResponse {
                status,
                body: Some(body),
                stream: None,
            },
            Err(e) => ApiResponse::error(500, &format!("cannot encode the answer: {e}")),
        }
    }

    pub fn no_content() -> ApiResponse {
        ApiResponse {
            status: 204,
            body: None,
            stream: None,
        }
    }

    pub fn error(status: u16, message: &str) -> ApiResponse {
        let body = serde_json::to_vec(&crate::api::types::ErrorReply {
            error: message.to_owned(),
            revision: None,
            expected: None,
        })
        .unwrap_or_default();
        ApiResponse {
            status,
            body: Some(body),
            stream: None,
        }
    }

    /// `200` with a stream of `application/x-cmdgate-run` frames.
    pub fn stream(stream: Streamed) -> ApiResponse {
        ApiResponse {
            status: 200,
            body: None,
            stream: Some(stream),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(role: Role, method: &str, path: &str, body: &str) -> Result<ApiRequest, Rejection> {
        ApiRequest::parse(role, method, path, body.as_bytes())
    }

    #[test]
    fn routes_are_per_socket() {
        assert_eq!(
            parse(Role::Agent, "GET", "/v1/health", ""),
            Ok(ApiRequest::Health)
        );
        assert_eq!(
            parse(Role::Admin, "GET", "/admin/audit/7", ""),
            Ok(ApiRequest::AuditShow(7))
        );
        assert_eq!(
            parse(Role::Admin, "GET", "/admin/audit/verify", ""),
            Ok(ApiRequest::AuditVerify)
        );
        assert_eq!(
            parse(Role::Admin, "POST", "/admin/rules/3/disable", ""),
            Ok(ApiRequest::SetRuleEnabled {
                id: 3,
                enabled: false,
                edit: RuleEdit::default(),
            })
        );
        assert_eq!(
            parse(
                Role::Admin,
                "POST",
                "/admin/rules/3/enable",
                r#"{"if_revision":4}"#
            ),
            Ok(ApiRequest::SetRuleEnabled {
                id: 3,
                enabled: true,
                edit: RuleEdit {
                    if_revision: Some(4)
                },
            })
        );
        assert_eq!(
            parse(Role::Admin, "DELETE", "/admin/rules/5", ""),
            Ok(ApiRequest::RemoveRule {
                id: 5,
                edit: RuleEdit::default(),
            })
        );
        assert_eq!(
            parse(Role::Admin, "GET", "/admin/rules/5", ""),
            Ok(ApiRequest::RuleShow(5))
        );
        // A misspelt expectation is refused rather than ignored (the edit would go unchecked).
        assert_eq!(
            parse(
                Role::Admin,
                "POST",
                "/admin/rules/3/remove",
                r#"{"revision":4}"#
            )
            .unwrap_err()
            .status,
            400
        );
        assert_eq!(
            parse(Role::Agent, "DELETE", "/admin/rules/5", "")
                .unwrap_err()
                .status,
            404
        );
        // The agent cannot reach the operator's routes, nor the operator the agent's decide.
        assert_eq!(
            parse(Role::Agent, "GET", "/admin/status", "")
                .unwrap_err()
                .status,
            404
        );
        assert_eq!(
            parse(Role::Agent, "POST", "/admin/breaker/reset", "")
                .unwrap_err()
                .status,
            404
        );
        assert_eq!(
            parse(Role::Admin, "POST", "/v1/decide", "{}")
                .unwrap_err()
                .status,
            404
        );
    }

    #[test]
    fn bodies_are_checked() {
        assert_eq!(
            parse(Role::Agent, "POST", "/v1/decide", "not json")
                .unwrap_err()
                .status,
            400
        );
        let body = r#"{"v":2,"event":"PreToolUse","session_id":"s","tool_use_id":"t","cwd":"/","project_dir":"/",
                      "tool_name":"Bash","tool_input":{"command":"ls"}}"#;
        let e = parse(Role::Agent, "POST", "/v1/decide", body).unwrap_err();
        assert!(e.message.contains("wire version 2"), "{e:?}");
        let ok = body.replace("\"v\":2", "\"v\":1");
        assert!(matches!(
            parse(Role::Agent, "POST", "/v1/decide", &ok),
            Ok(ApiRequest::Decide(_))
        ));
    }
}
