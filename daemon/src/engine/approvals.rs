//! Background mode: an "ask" held as a pending approval (see `pending`), announced on the desktop,
//! answered by `cmdgate approve|reject ID [--remember] [--note TEXT]`, denied at its deadline.
//!
//! Every way out of a hold is audited as a `decision` row with the request's `tool_use_id`, after
//! the "ask" row that opened it: the operator's answer (`source = human`, see `approval_notes`), or a
//! fail-closed deny (no answer in time, the daemon stopping, the answer not recordable). The exporter
//! and the outcome join take the last decision row per `tool_use_id`, so the answer supersedes the ask.

use std::time::{Duration, Instant};

use cmdgate_policy::breaker::Signal;
use cmdgate_policy::decide::canonical_key;
use cmdgate_policy::decide::RuleRef;
use cmdgate_policy::learn::{LearnEvent, PromotionContext};
use cmdgate_policy::shell::{self, Analysis, Limits};
use cmdgate_policy::wire::{self, ApprovalMode, DecideRequest, DecideResponse, Verdict};
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::config::HOOK_DEADLINE;
use crate::engine::approval_notes::{clean_note, human_decision, reason_for_model};
use crate::engine::breakers::persist_breakers;
use crate::engine::learning::apply_learning;
use crate::engine::notify::Note;
use crate::engine::pending::{Answer, Outcome, PendingInfo};
use crate::engine::record::summarize_tool;
use crate::engine::Engine;
use crate::store::audit::{self, Entry, Kind, RuleChange};
use crate::store::{state, StoreError};

/// The deny of a held request must reach the hook before its own deadline: this much earlier
/// (it covers an operator's answer that is being written at the deadline, and the write of the deny).
const HOOK_MARGIN: Duration = Duration::from_secs(4);
/// How long a waiter whose request the operator already took waits for that answer to be written.
const ANSWER_GRACE: Duration = Duration::from_secs(3);
/// Below this there is no point in holding: the operator could not answer.
const MIN_HOLD: Duration = Duration::from_secs(1);

/// `POST /admin/pending/{id}/approve|reject`: the answer as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    pub id: i64,
    pub decision: Verdict,
    /// The `decision` row of the answer.
    pub audit_id: i64,
    /// The rule remembered with it.
    pub rule: Option<i64>,
    pub note: Option<String>,
    /// What the agent was told.
    pub reason: String,
    /// Whether the waiting hook got it (it may have left at its deadline).
    pub delivered: bool,
}

/// Why an operator's answer to a pending request was not taken.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error(
        "no pending request #{0}: it was answered, denied at its deadline, withdrawn by its \
         agent, or it was waiting before the daemon restarted (pending requests never survive \
         a restart). `cmdgate pending` lists what waits now."
    )]
    Gone(i64),
    #[error(
        "#{id} ({tool}) cannot be remembered: rules hold exact Bash commands of one project. \
         Answer it without --remember."
    )]
    NotRememberable { id: i64, tool: String },
    #[error("the answer could not be recorded ({0}); the request was denied")]
    NotRecorded(#[source] StoreError),
}

impl Engine {
    /// Whether an "ask" for this request is held for the operator instead of returned.
    pub(crate) fn holds_asks(&self, req: &DecideRequest) -> bool {
        req.approval_mode.unwrap_or(self.config.approvals.mode) == ApprovalMode::Background
    }

    /// Holds `asked` (an audited "ask") until the operator answers or its deadline passes.
    pub(crate) async fn hold(
        &self,
        req: &DecideRequest,
        asked: DecideResponse,
        received: Instant,
    ) -> DecideResponse {
        let Some(ask_id) = asked.audit_id.and_then(|id| i64::try_from(id).ok()) else {
            // Not audited: nothing to answer against. The ask stands (a denial under `claude -p`).
            return asked;
        };
        let hook_wait = req
            .wait_ms
            .map_or(HOOK_DEADLINE, Duration::from_millis)
            .saturating_sub(received.elapsed())
            .saturating_sub(HOOK_MARGIN);
        let wait = hook_wait.min(Duration::from_millis(self.config.approvals.wait_ms));
        if wait < MIN_HOLD {
            return self
                .unanswered(
                    ask_id,
                    &asked,
                    "the hook's deadline leaves no time to wait for the operator (raise it with \
                     `cmdgate hook install --deadline-ms`)"
                        .to_owned(),
                )
                .await;
        }
        let now_ms = clock::now_ms();
        let (command, key) = match (req.tool_name.as_str(), req.tool_input.get("command")) {
            ("Bash", Some(c)) => {
                let c = c.as_str().unwrap_or_default().to_owned();
                let key = match shell::analyze(&c, &Limits::default()) {
                    Analysis::Parsed(script) => Some(canonical_key(&script)),
                    Analysis::Unanalyzable(_) => None,
                };
                (Some(c), key)
            }
            (tool, _) => (Some(summarize_tool(tool, &req.tool_input)), None),
        };
        let project = self
            .store
            .read(move |c| Ok(audit::get(c, ask_id)?.and_then(|r| r.entry.project)))
            .await
            .ok()
            .flatten();
        let info = PendingInfo {
            id: ask_id,
            at_ms: now_ms,
            deadline_ms: now_ms.saturating_add(i64::try_from(wait.as_millis()).unwrap_or(0)),
            session: req.agent.session_id.clone(),
            tool_use_id: req.tool_use_id.clone(),
            project: project.clone(),
            cwd: Some(req.cwd.clone()),
            tool: req.tool_name.clone(),
            command: command.clone(),
            reason: asked.reason.clone(),
            rememberable: key.is_some() && project.is_some(),
        };
        let Some(mut ticket) = self.pending.hold(info, key) else {
            return self
                .unanswered(ask_id, &asked, "the daemon is stopping".into())
                .await;
        };
        let _ = self.notifier.notify(Note {
            summary: format!("cmdgate: approval needed (#{ask_id})"),
            body: format!(
                "{}{}: {}\n`cmdgate approve {ask_id}` or `cmdgate reject {ask_id}` within {} s, else it is denied.",
                command.as_deref().unwrap_or(&req.tool_name),
                project.map(|p| format!(" in {p}")).unwrap_or_default(),
                asked.reason,
                wait.as_secs()
            ),
            urgent: true,
        });
        let outcome = match tokio::time::timeout(wait, &mut ticket.rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Outcome::Cancelled("the operator's answer was lost".into()),
            Err(_) if ticket.withdraw() => Outcome::Cancelled(format!(
                "nobody answered pending approval #{ask_id} within {} s",
                wait.as_secs()
            )),
            // The operator took it at the deadline: its answer is being written.
            Err(_) => match tokio::time::timeout(ANSWER_GRACE, &mut ticket.rx).await {
                Ok(Ok(outcome)) => outcome,
                _ => Outcome::Cancelled(
                    "the operator's answer could not be completed before the deadline".into(),
                ),
            },
        };
        match outcome {
            Outcome::Answered(a) => DecideResponse {
                v: wire::WIRE_VERSION,
                decision: a.verdict,
                reason: a.reason,
                source: wire::Source::Human,
                rule: a.rule,
                tiermap_revision: asked.tiermap_revision,
                audit_id: u64::try_from(a.audit_id).ok(),
                context: a.context,
                run: None,
                step_aside: false,
            },
            Outcome::Cancelled(why) => self.unanswered(ask_id, &asked, why).await,
        }
    }

    /// The fail-closed deny of a held request nobody answered, audited after its ask.
    async fn unanswered(&self, ask_id: i64, asked: &DecideResponse, why: String) -> DecideResponse {
        let reason = format!(
            "{why}. It needed the operator's approval ({}). Nothing was run. Do not retry it now: tell the \
             user it needs their approval (they answer the next attempt with `cmdgate approve`, or allow it \
             for good with `cmdgate rules remember approve`), and go on with other work.",
            asked.reason.trim_end_matches('.')
        );
        let at = clock::now_ms();
        let row_reason = reason.clone();
        let written = tokio::time::timeout(
            Duration::from_secs(2),
            self.store.write(move |c| {
                let ask = audit::get(c, ask_id)?.ok_or(StoreError::MissingAuditRow(ask_id))?;
                let mut entry = human_decision(&ask.entry, Verdict::Deny, None, at);
                entry.source = Some(cmdgate_policy::wire::Source::FailClosed.into());
                entry.reason = Some(row_reason);
                entry.note = Some(format!("pending approval #{ask_id} not answered"));
                Ok(audit::append(c, entry)?.id)
            }),
        )
        .await;
        let audit_id = match written {
            Ok(Ok(id)) => u64::try_from(id).ok(),
            Ok(Err(e)) => {
                self.audit_integrity
                    .failed("unanswered pending approval", &e);
                None
            }
            Err(_) => {
                self.audit_integrity
                    .failed("unanswered pending approval", &"no commit within 2 s");
                None
            }
        };
        DecideResponse::fail_closed(reason, asked.tiermap_revision, audit_id)
    }

    /// `cmdgate approve|reject ID`: records the operator's answer (and the remembered rule) and
    /// hands it to the waiting hook.
    pub async fn answer_pending(
        &self,
        id: i64,
        approve: bool,
        remember: bool,
        note: Option<&str>,
    ) -> Result<Answered, AnswerError> {
        let verdict = if approve {
            Verdict::Allow
        } else {
            Verdict::Deny
        };
        let Some(info) = self.pending.peek(id) else {
            return Err(AnswerError::Gone(id));
        };
        if remember && !info.rememberable {
            return Err(AnswerError::NotRememberable {
                id,
                tool: info.tool,
            });
        }
        let Some(taken) = self.pending.take(id) else {
            return Err(AnswerError::Gone(id));
        };
        let note = note.and_then(clean_note);
        let key = taken.key.clone();
        let session = taken.info.session.clone();
        let promotion = self.config.promotion.clone();
        let at = clock::now_ms();
        let row_note = note.clone();
        // A person's rejection counts against the session like any denial.
        let changes = if verdict == Verdict::Deny {
            self.breakers
                .record(&session, Signal::Denial, clock::now())
                .await
        } else {
            Vec::new()
        };
        let written = self
            .store
            .write(move |c| {
                let ask = audit::get(c, id)?.ok_or(StoreError::MissingAuditRow(id))?;
                let mut entry = human_decision(&ask.entry, verdict, row_note.as_deref(), at);
                let project = ask.entry.project.clone();
                let rule = match (remember, &key, &project) {
                    (true, Some(key), Some(project)) => {
                        let kind = if verdict == Verdict::Allow {
                            "approve"
                        } else {
                            "reject"
                        };
                        let rule_id = state::add_rule(
                            c,
                            &state::NewRule {
                                kind: kind.into(),
                                project: project.clone(),
                                key: key.clone(),
                                note: row_note.clone(),
                                created_by: "operator".into(),
                                provenance: vec![id],
                            },
                            at,
                        )?;
                        Some(rule_id)
                    }
                    _ => None,
                };
                if let Some(r) = rule {
                    entry.rule = Some(RuleRef(r).to_string());
                    entry.reason = Some(format!(
                        "{} Remembered as {} for this exact command in this project.{}",
                        reason_for_model(verdict, None),
                        RuleRef(r),
                        row_note
                            .as_deref()
                            .map(|n| format!(" Operator's note: {n}"))
                            .unwrap_or_default()
                    ));
                }
                let row = audit::append(c, entry)?;
                persist_breakers(c, &changes, Some(row.id))?;
                if let Some(r) = rule {
                    audit::append(
                        c,
                        Entry {
                            at_ms: at,
                            kind: Kind::Rule,
                            project: project.clone(),
                            command: ask.entry.command.clone(),
                            decision: Some(
                                if verdict == Verdict::Allow {
                                    RuleChange::Approve
                                } else {
                                    RuleChange::Reject
                                }
                                .into(),
                            ),
                            rule: Some(RuleRef(r).to_string()),
                            note: row_note.clone(),
                            decision_id: Some(row.id),
                            ..Entry::default()
                        },
                    )?;
                }
                if let (Verdict::Deny, Some(key), Some(project)) = (verdict, &key, &project) {
                    apply_learning(
                        c,
                        project,
                        key,
                        LearnEvent::Rejected(row.id),
                        // A rejection counts whatever the map or the breaker say.
                        PromotionContext::default(),
                        &promotion,
                    )?;
                }
                Ok((row.id, rule, row.entry.reason.unwrap_or_default()))
            })
            .await;
        let (row, rule, reason) = match written {
            Ok(w) => w,
            Err(e) => {
                taken.answer(Outcome::Cancelled(
                    "the operator's answer could not be recorded".into(),
                ));
                return Err(AnswerError::NotRecorded(e));
            }
        };
        if rule.is_some() {
            if let Err(e) = self.reload_rules().await {
                eprintln!("cmdgated: rules reload after a remembered answer: {e}");
            }
        }
        let delivered = taken.answer(Outcome::Answered(Answer {
            verdict,
            reason: reason.clone(),
            rule: rule.map(|r| RuleRef(r).to_string()),
            audit_id: row,
            // An allow's reason never reaches the model; `additionalContext` does.
            context: match (verdict, &note) {
                (Verdict::Allow, Some(n)) => Some(format!(
                    "cmdgate: the operator approved this call with a note for you: {n}"
                )),
                _ => None,
            },
        }));
        Ok(Answered {
            id,
            decision: verdict,
            audit_id: row,
            rule,
            note,
            reason,
            delivered,
        })
    }
}
