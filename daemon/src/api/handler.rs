//! The engine behind the server: each parsed request goes to the engine, and the engine's domain
//! result (or error) becomes an HTTP answer here — the one place that knows status codes.

use crate::api::routes::Rejection;
use crate::api::stream::Streamed;
use crate::api::types::{
    AuditShown, BreakerReset, ErrorReply, Health, PendingAnswer, ResetBreaker, RulesList,
};
use crate::api::{ApiRequest, ApiResponse, Handler, Peer, Role};
use crate::engine::apply::{ApplyError, DiffError};
use crate::engine::approvals::AnswerError;
use crate::engine::redeem::{RedeemError, UndoError};
use crate::engine::rules_admin::{NewRuleRequest, RuleError};
use crate::engine::Engine;
use crate::store::audit;

fn internal(e: impl std::fmt::Display) -> ApiResponse {
    ApiResponse::error(500, &e.to_string())
}

fn health() -> ApiResponse {
    ApiResponse::json(
        200,
        &Health {
            ok: true,
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
    )
}

/// A rule verb's result: 200 with its JSON, or the error's status.
fn rule_answer<T: serde::Serialize>(result: Result<T, RuleError>) -> ApiResponse {
    match result {
        Ok(v) => ApiResponse::json(200, &v),
        Err(e) => rule_error(e),
    }
}

fn rule_error(e: RuleError) -> ApiResponse {
    match e {
        RuleError::Invalid(why) => ApiResponse::error(400, &why),
        RuleError::NotFound(_) => ApiResponse::error(404, &e.to_string()),
        // Nothing changed; the answer names the current revision.
        RuleError::Conflict(c) => ApiResponse::json(
            409,
            &ErrorReply {
                error: c.to_string(),
                revision: Some(c.current),
                expected: Some(c.expected),
            },
        ),
        RuleError::Store(e) => internal(e),
        RuleError::NotReloaded { .. } => ApiResponse::error(500, &e.to_string()),
    }
}

fn answer_error(e: AnswerError) -> ApiResponse {
    let status = match e {
        AnswerError::Gone(_) => 404,
        AnswerError::NotRememberable { .. } => 400,
        AnswerError::NotRecorded(_) => 500,
    };
    ApiResponse::error(status, &e.to_string())
}

impl Handler for Engine {
    fn allowed(&self, role: Role, peer: &Peer, groups: &[u32]) -> bool {
        self.peer_allowed(role, peer, groups)
    }

    async fn refused(&self, role: Role, peer: Peer) {
        self.peer_refused(role, peer).await
    }

    async fn handle(&self, role: Role, peer: Peer, request: ApiRequest) -> ApiResponse {
        match (role, request) {
            (Role::Agent, ApiRequest::Decide(req)) => {
                ApiResponse::json(200, &self.decide(peer, *req).await)
            }
            (Role::Agent, ApiRequest::Outcome(report)) => {
                if let Err(why) = self.claim_session(peer, &report.agent.session_id).await {
                    return ApiResponse::error(403, &why);
                }
                match self.outcome(Some(peer), *report, None).await {
                    Ok(_) => ApiResponse::no_content(),
                    Err(e) => internal(e),
                }
            }
            (Role::Agent, ApiRequest::Record(record)) => match self.record(peer, *record).await {
                Ok(Ok(())) => ApiResponse::no_content(),
                Ok(Err(why)) => ApiResponse::error(403, &why),
                Err(e) => internal(e),
            },
            (Role::Agent, ApiRequest::IngestSpool) => match self.ingest_spool().await {
                Ok(v) => ApiResponse::json(200, &v),
                Err(e) => internal(e),
            },
            (Role::Agent, ApiRequest::Health) => health(),
            (Role::Agent, ApiRequest::Run(req)) => match self.redeem(peer, *req).await {
                Ok(run) => ApiResponse::stream(Streamed::new(run.frames, run.written)),
                Err(e @ RedeemError::Refused(_)) => ApiResponse::error(403, &e.to_string()),
                Err(e @ RedeemError::Unavailable(_)) => ApiResponse::error(503, &e.to_string()),
                Err(RedeemError::Store(e)) => internal(e),
            },
            (Role::Agent, other) => {
                ApiResponse::error(404, &format!("{other:?} is not served on the agent socket"))
            }
            (Role::Admin, request) => admin(self, peer, request).await,
        }
    }

    async fn rejected(&self, role: Role, peer: Peer, rejection: Rejection) -> ApiResponse {
        // Audit refused agent requests too: a malformed decide is worth knowing about.
        if role == Role::Agent {
            self.request_refused(
                peer,
                format!(
                    "request refused ({}): {}",
                    rejection.status, rejection.message
                ),
            )
            .await;
        }
        ApiResponse::error(rejection.status, &rejection.message)
    }
}

/// The operator's requests.
async fn admin(engine: &Engine, peer: Peer, request: ApiRequest) -> ApiResponse {
    match request {
        ApiRequest::Hatches => ApiResponse::json(200, &engine.hatches.list(crate::clock::now())),
        ApiRequest::GrantHatch(g) => match engine
            .grant_hatch(peer, g.scope, &g.reason, g.minutes)
            .await
        {
            Ok(Ok(grant)) => ApiResponse::json(200, &grant),
            Ok(Err(e)) => ApiResponse::error(400, &e.to_string()),
            Err(e) => internal(e),
        },
        ApiRequest::RevokeHatch(id) => match engine.revoke_hatch(peer, id).await {
            Ok(Some(grant)) => ApiResponse::json(200, &grant),
            Ok(None) => ApiResponse::error(404, &format!("no escape hatch grant {id}")),
            Err(e) => internal(e),
        },
        ApiRequest::Status => ApiResponse::json(200, &engine.status().await),
        ApiRequest::AuditQuery(q) => {
            match engine.store().read(move |c| audit::query(c, &q)).await {
                Ok(rows) => ApiResponse::json(200, &rows),
                Err(e) => internal(e),
            }
        }
        ApiRequest::AuditShow(id) => {
            let found = engine
                .store()
                .read(move |c| Ok(audit::get(c, id)?.map(|row| (row, audit::outcomes_of(c, id)))))
                .await;
            match found {
                Ok(Some((row, Ok(outcomes)))) => {
                    ApiResponse::json(200, &AuditShown { row, outcomes })
                }
                Ok(Some((_, Err(e)))) | Err(e) => internal(e),
                Ok(None) => ApiResponse::error(404, &format!("no audit row {id}")),
            }
        }
        ApiRequest::AuditVerify => match engine.store().read(audit::verify).await {
            Ok(report) => ApiResponse::json(200, &report),
            Err(e) => internal(e),
        },
        ApiRequest::AuditPrune(p) => {
            let now = crate::clock::now_ms();
            match engine
                .store()
                .write(move |c| audit::prune(c, p.before_ms, now))
                .await
            {
                Ok(pruned) => ApiResponse::json(200, &pruned),
                Err(e) => internal(e),
            }
        }
        ApiRequest::Rules => match engine.rules_list().await {
            Ok((revision, rules)) => ApiResponse::json(200, &RulesList { revision, rules }),
            Err(e) => internal(e),
        },
        ApiRequest::RuleShow(id) => match engine.rule_show(id).await {
            Ok(shown) => ApiResponse::json(200, &shown),
            Err(e) => rule_error(e),
        },
        ApiRequest::AddRule(add) => rule_answer(
            engine
                .rules_add(NewRuleRequest {
                    kind: add.kind,
                    project: add.project,
                    command: add.command,
                    note: add.note,
                    if_revision: add.if_revision,
                })
                .await,
        ),
        ApiRequest::SetRuleEnabled { id, enabled, edit } => rule_answer(
            engine
                .rules_set_enabled(id, enabled, edit.if_revision)
                .await,
        ),
        ApiRequest::RemoveRule { id, edit } => {
            rule_answer(engine.rules_remove(id, edit.if_revision).await)
        }
        ApiRequest::ResetBreaker(ResetBreaker { scope }) => {
            match engine.reset_breakers(scope.as_deref()).await {
                Ok(reset) => ApiResponse::json(200, &BreakerReset { reset }),
                Err(e) => internal(e),
            }
        }
        ApiRequest::Pending => ApiResponse::json(200, &engine.pending.list()),
        ApiRequest::AnswerPending(PendingAnswer { id, approve, body }) => {
            match engine
                .answer_pending(id, approve, body.remember, body.note.as_deref())
                .await
            {
                Ok(v) => ApiResponse::json(200, &v),
                Err(e) => answer_error(e),
            }
        }
        ApiRequest::IngestSpool => match engine.ingest_spool().await {
            Ok(v) => ApiResponse::json(200, &v),
            Err(e) => internal(e),
        },
        ApiRequest::Health => health(),
        ApiRequest::Runs => match engine.runs_list(200).await {
            Ok(v) => ApiResponse::json(200, &v),
            Err(e) => internal(e),
        },
        ApiRequest::RunShow(id) => match engine.runs_list(10_000).await {
            Ok(serde_json::Value::Array(runs)) => {
                match runs.into_iter().find(|r| r["run_id"] == id.as_str()) {
                    Some(run) => ApiResponse::json(200, &run),
                    None => ApiResponse::error(404, &format!("no run {id}")),
                }
            }
            Ok(_) => ApiResponse::error(500, "runs are not a list"),
            Err(e) => internal(e),
        },
        ApiRequest::Undo(id) => match engine.undo_run(id).await {
            Ok(v) => ApiResponse::json(200, &v),
            Err(e @ UndoError::NotFound(_)) => ApiResponse::error(404, &e.to_string()),
            Err(e @ UndoError::Refused(_)) => ApiResponse::error(409, &e.to_string()),
            Err(UndoError::Store(e)) => internal(e),
        },
        ApiRequest::RunDiff(id) => match engine.run_diff(id).await {
            Ok(d) => ApiResponse::json(200, &d),
            Err(e @ DiffError::NotFound(_)) => ApiResponse::error(404, &e.to_string()),
            Err(e @ DiffError::Failed(_)) => ApiResponse::error(500, &e.to_string()),
        },
        ApiRequest::Apply(id, req) => match engine.apply_run(peer, id, req).await {
            Ok(a) => ApiResponse::json(200, &a),
            Err(e @ ApplyError::Gone(_)) => ApiResponse::error(404, &e.to_string()),
            Err(e @ ApplyError::Refused(_)) => ApiResponse::error(409, &e.to_string()),
            Err(ApplyError::Store(e)) => internal(e),
        },
        ApiRequest::Decide(_)
        | ApiRequest::Outcome(_)
        | ApiRequest::Run(_)
        | ApiRequest::Record(_) => ApiResponse::error(404, "not on the admin socket"),
        // Answered by `console::WithConsole` in front of the engine when the console runs.
        ApiRequest::ConsoleLogin => ApiResponse::error(
            404,
            "the web console is off (`[console] enabled = false` in config.toml)",
        ),
    }
}
