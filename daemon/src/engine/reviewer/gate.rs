//! The reviewer's place in the pipeline: after the deterministic decision, before a person is asked.
//! Only an audited "ask" that is not an always-ask rule reaches it (denials, integrity failures and
//! allows never do). Its answer is applied only when a fresh judgement on the current snapshot
//! still asks the same way; a now-applicable deny wins; anything else changed goes to the person.
//! Every way out is audited as a `reviewer` row after the ask (raw evidence and replies are not
//! stored: the row keeps the model, the latency, the token counts and the evidence digest).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cmdgate_policy::breaker::Signal;
use cmdgate_policy::decide::{canonical_key, Decision, RuleSet, Step, Tool};
use cmdgate_policy::locations::Mode;
use cmdgate_policy::shell::{self, Analysis, Limits};
use cmdgate_policy::tiermap::Snapshot;
use cmdgate_policy::wire::{
    self, DecideRequest, DecideResponse, ReviewerMode, TranscriptTurns, Verdict,
};
use serde_json::Value;

use super::evidence::{
    self, CallEvidence, CallFacts, Classification, Prompt, SessionRule, TurnEvidence, UserTurns,
};
use super::{contract, Outcome, ReviewDecision};
use crate::clock;
use crate::config::HOOK_DEADLINE;
use crate::engine::approval_notes::{human_decision, human_note};
use crate::engine::breakers::persist_breakers;
use crate::engine::decide::{judge, Judge};
use crate::engine::{Engine, Peer};
use crate::store::audit::{self, AuditRow, Query};
use crate::store::StoreError;

/// The reviewer's answer must reach the hook this much before its deadline.
const HOOK_MARGIN: Duration = Duration::from_secs(4);
/// Below this there is no point asking.
const MIN_BUDGET: Duration = Duration::from_millis(500);
/// Session rows read to find the session's rules.
const SESSION_ROWS: u32 = 500;

/// What the reviewer's part came to.
enum Reviewed {
    /// The model answered and the answer stands (allow once, or deny).
    Decided {
        verdict: Verdict,
        reason: String,
        outcome: Outcome,
    },
    /// The person decides; `why` says why (and what the model said, if anything).
    Person {
        why: String,
        outcome: Option<Outcome>,
    },
}

/// What the reviewer is asked about: the checks passed, the inputs gathered.
struct Question {
    /// Time left for the model before the hook's deadline (less a margin).
    hook_wait: Duration,
    turns: cmdgate_policy::transcript::UserTurns,
    project: String,
    cwd: String,
    tool: Tool,
    /// The snapshot and rules the ask was decided under.
    asked_under: (Arc<Snapshot>, Arc<RuleSet>),
}

/// The call as the model sees it: the request, how the policy classified it, its test-run, and
/// the session's rules that would match it.
fn call_evidence(req: &DecideRequest, e: &audit::Entry, q: &Question) -> CallEvidence {
    let candidates = match &q.tool {
        Tool::Bash { command } => match shell::analyze(command, &Limits::default()) {
            Analysis::Parsed(script) => evidence::candidates(
                q.asked_under.1.rules(),
                &q.project,
                command,
                &canonical_key(&script),
            ),
            Analysis::Unanalyzable(_) => Vec::new(),
        },
        _ => Vec::new(),
    };
    CallEvidence {
        call: CallFacts {
            tool: req.tool_name.clone(),
            input: req.tool_input.clone(),
            cwd: q.cwd.clone(),
            project: q.project.clone(),
            session: req.agent.session_id.clone(),
            agent_id: req.agent.agent_id.clone(),
            agent_type: req.agent.agent_type.clone(),
        },
        classification: Classification {
            tier: e.tier,
            rule: e.rule.clone(),
            reason: e.reason.clone().unwrap_or_default(),
            tiermap_revision: e.tiermap_revision.and_then(|r| u64::try_from(r).ok()),
        },
        mirror: e
            .sandbox
            .as_deref()
            .map(|s| serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_owned()))),
        candidates,
    }
}

impl Engine {
    /// Whether this answer goes to the reviewer first: an audited ask, not an always-ask rule
    /// (source `remembered`: the operator insisted on a person), reviewer enabled for the session.
    pub(crate) fn reviews(&self, req: &DecideRequest, asked: &DecideResponse) -> bool {
        let eligible = match asked.source {
            wire::Source::TierRule | wire::Source::Builtin | wire::Source::Sandbox => true,
            wire::Source::Remembered
            | wire::Source::HookFastPath
            | wire::Source::Learned
            | wire::Source::Human
            | wire::Source::Breaker
            | wire::Source::FailClosed
            | wire::Source::EscapeHatch
            | wire::Source::Reviewer => false,
        };
        asked.decision == Verdict::Ask
            && eligible
            && asked.audit_id.is_some()
            && self
                .reviewer
                .enabled_for(session_override(self.paths.mode, req.reviewer))
    }

    /// Lets the reviewer answer `asked`; returns the answer for the hook (an ask goes on to the
    /// person, with the reviewer's words).
    pub(crate) async fn review(
        &self,
        peer: Peer,
        req: &DecideRequest,
        asked: DecideResponse,
        received: Instant,
    ) -> DecideResponse {
        let Some(ask_id) = asked.audit_id.and_then(|id| i64::try_from(id).ok()) else {
            return asked;
        };
        let row = match self.store.read(move |c| audit::get(c, ask_id)).await {
            Ok(Some(row)) => row,
            _ => return with_reviewer_note(asked, "the ask's audit row could not be read"),
        };
        let reviewed = self.reviewed(peer, req, &row, received).await;
        let (verdict, reason, outcome) = match reviewed {
            Reviewed::Decided {
                verdict,
                reason,
                outcome,
            } => (verdict, reason, Some(outcome)),
            Reviewed::Person { why, outcome } => (Verdict::Ask, why, outcome),
        };
        let audit_id = self
            .record_review(&row, req, verdict, &reason, outcome.as_ref(), received)
            .await;
        match verdict {
            Verdict::Ask => with_reviewer_note(asked, &reason),
            Verdict::Allow => DecideResponse {
                v: wire::WIRE_VERSION,
                decision: Verdict::Allow,
                reason: format!(
                    "cmdgate's model reviewer allowed this one call (no rule was made; the same call \
                     later is asked again): {reason}"
                ),
                source: wire::Source::Reviewer,
                rule: None,
                tiermap_revision: asked.tiermap_revision,
                audit_id: audit_id.or(asked.audit_id),
                context: None,
                run: None,
                step_aside: false,
            },
            Verdict::Deny => DecideResponse {
                v: wire::WIRE_VERSION,
                decision: Verdict::Deny,
                reason: format!(
                    "cmdgate's model reviewer denied it in the person's seat: {reason}. If the user \
                     does want it, they can approve it themselves."
                ),
                source: wire::Source::Reviewer,
                rule: None,
                tiermap_revision: asked.tiermap_revision,
                audit_id: audit_id.or(asked.audit_id),
                context: None,
                run: None,
                step_aside: false,
            },
        }
    }

    /// The reviewer's part, in steps: what the question is asked about ([`Engine::question`]:
    /// time left, the reviewer, the user's turns, the ask's project and tool, the snapshot) →
    /// the prompt ([`Engine::prompt`]) → the model → its answer applied ([`Engine::answered`]).
    async fn reviewed(
        &self,
        peer: Peer,
        req: &DecideRequest,
        row: &AuditRow,
        received: Instant,
    ) -> Reviewed {
        let question = match self.question(req, row, received).await {
            Ok(q) => q,
            Err(why) => return Reviewed::Person { why, outcome: None },
        };
        let prompt = self.prompt(req, &row.entry, &question).await;
        let outcome = self.reviewer.ask(&prompt, question.hook_wait).await;
        let answer = match &outcome.answer {
            Ok(a) => a.clone(),
            Err(d) => {
                let why = match &d.said {
                    Some(said) => format!("{}; it said: {said}", d.why),
                    None => d.why.clone(),
                };
                return Reviewed::Person {
                    why,
                    outcome: Some(outcome),
                };
            }
        };
        self.answered(peer, req, &row.entry, &question, answer, outcome)
            .await
    }

    /// Everything the question needs, or why the reviewer is skipped (a person decides).
    async fn question(
        &self,
        req: &DecideRequest,
        row: &AuditRow,
        received: Instant,
    ) -> Result<Question, String> {
        let hook_wait = req
            .wait_ms
            .map_or(HOOK_DEADLINE, Duration::from_millis)
            .saturating_sub(received.elapsed())
            .saturating_sub(HOOK_MARGIN);
        if hook_wait < MIN_BUDGET {
            return Err(
                "the reviewer was skipped: no time was left before the hook's deadline".into(),
            );
        }
        if let Some(p) = self.reviewer.unavailable() {
            return Err(format!("the reviewer is unavailable: {p}"));
        }
        let turns =
            match &req.transcript {
                Some(TranscriptTurns::Turns(t)) => t.clone(),
                Some(TranscriptTurns::Unavailable(why)) => {
                    return Err(format!(
                        "the reviewer was skipped: the user's own turns are not available ({why})"
                    ))
                }
                None => return Err(
                    "the reviewer was skipped: the hook sent no transcript turns (an older hook?)"
                        .into(),
                ),
            };
        let e = &row.entry;
        let (Some(project), Some(cwd)) = (e.project.clone(), e.cwd.clone()) else {
            return Err("the reviewer was skipped: the ask has no project".into());
        };
        let Ok(tool) = Tool::from_claude(&req.tool_name, &req.tool_input) else {
            return Err("the reviewer was skipped: the tool call could not be read".into());
        };
        // The snapshot the question is asked under.
        let asked_under = self
            .current(&project)
            .await
            .map_err(|e| format!("the reviewer was skipped: {e}"))?;
        if asked_under.0.revision().and_then(|r| i64::try_from(r).ok()) != e.tiermap_revision {
            return Err("the tier map changed before the reviewer was asked".into());
        }
        Ok(Question {
            hook_wait,
            turns,
            project,
            cwd,
            tool,
            asked_under,
        })
    }

    /// The prompt: the turn's prefix (the same bytes for every call of a user turn while the
    /// session's rules stay the same; a person's decision mid-turn rebuilds it), then the call.
    async fn prompt(&self, req: &DecideRequest, e: &audit::Entry, q: &Question) -> Prompt {
        let session = req.agent.session_id.clone();
        let turn_id = q.turns.newest_id.clone().unwrap_or_default();
        let turn = TurnEvidence {
            user_turns: UserTurns {
                turns: q.turns.turns.clone(),
                left_out: q.turns.left_out,
            },
            session_rules: self.session_rules(&session).await,
        };
        let prefix = self.reviewer.prefix(&session, &turn_id, &turn);
        Prompt {
            prefix: (*prefix).clone(),
            call: evidence::render_call(&call_evidence(req, e, q)),
        }
    }

    /// The model's answer applied: ask ⇒ the person; deny stands; allow once only when a fresh
    /// judgement on the current snapshot still asks the same way.
    async fn answered(
        &self,
        peer: Peer,
        req: &DecideRequest,
        e: &audit::Entry,
        q: &Question,
        answer: contract::Answer,
        outcome: Outcome,
    ) -> Reviewed {
        match answer.decision {
            ReviewDecision::Ask => Reviewed::Person {
                why: format!("the model reviewer left it to a person: {}", answer.reason),
                outcome: Some(outcome),
            },
            ReviewDecision::Deny => Reviewed::Decided {
                verdict: Verdict::Deny,
                reason: answer.reason,
                outcome,
            },
            ReviewDecision::AllowOnce => {
                // Re-check on the snapshot as it is now.
                match self
                    .recheck(
                        peer,
                        &req.agent.session_id,
                        &q.tool,
                        &q.project,
                        &q.cwd,
                        &q.asked_under,
                        e,
                        req.home.clone(),
                    )
                    .await
                {
                    Recheck::Same => Reviewed::Decided {
                        verdict: Verdict::Allow,
                        reason: answer.reason,
                        outcome,
                    },
                    Recheck::Deny(why) => Reviewed::Decided {
                        verdict: Verdict::Deny,
                        reason: format!(
                            "the reviewer would have allowed it, but the policy now denies it: {why}"
                        ),
                        outcome,
                    },
                    Recheck::Changed(why) => Reviewed::Person {
                        why: format!(
                            "the reviewer would have allowed it ({}), but {why}, so a person decides",
                            answer.reason
                        ),
                        outcome: Some(outcome),
                    },
                }
            }
        }
    }

    /// The project's snapshot and the rules, as they are now.
    async fn current(&self, project: &str) -> Result<(Arc<Snapshot>, Arc<RuleSet>), String> {
        let loaded = self
            .tiermaps
            .get(Path::new(project), &self.store)
            .await
            .map_err(|e| format!("the tier map could not be loaded ({e})"))?;
        if self.rules.is_stale() {
            return Err("the rules are stale".into());
        }
        Ok((loaded.snapshot, self.rules.current()))
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the facts of one re-check, named"
    )]
    async fn recheck(
        &self,
        peer: Peer,
        session: &str,
        tool: &Tool,
        project: &str,
        cwd: &str,
        asked_under: &(Arc<Snapshot>, Arc<RuleSet>),
        asked: &audit::Entry,
        home: Option<String>,
    ) -> Recheck {
        let now_state = match self.current(project).await {
            Ok(s) => s,
            Err(e) => return Recheck::Changed(e),
        };
        let (breaker_open, _) = self.breakers.is_open(session, clock::now()).await;
        let j = Judge {
            tool: tool.clone(),
            place_root: project.to_owned(),
            place_cwd: cwd.to_owned(),
            snapshot: Arc::clone(&now_state.0),
            rules: Arc::clone(&now_state.1),
            breaker_open,
            uid: peer.uid,
            agent_home: home,
            locations: self.paths.locations.clone(),
            extra_own: self.own_extras.clone(),
            secret_tables: Arc::clone(&self.secret_tables),
            lookups: Arc::clone(&self.lookups),
            packs: self
                .config
                .read_packs()
                .unwrap_or_else(|_| cmdgate_policy::shell::read::PackSet::none()),
        };
        let step = match tokio::task::spawn_blocking(move || judge(j).0).await {
            Ok(s) => s,
            Err(e) => return Recheck::Changed(format!("the re-check failed ({e})")),
        };
        if let Step::Decided(Decision::Deny(e)) = &step {
            return Recheck::Deny(e.reason.clone());
        }
        let same_state =
            Arc::ptr_eq(&asked_under.0, &now_state.0) && Arc::ptr_eq(&asked_under.1, &now_state.1);
        if !same_state {
            return Recheck::Changed("the tier map or the rules changed while it decided".into());
        }
        let same_answer = match &step {
            Step::Decided(Decision::Ask(e)) => e.rule == asked.rule,
            // A failed test-run asked; judged again, it would be test-run again.
            Step::TestRun(_) => asked.source == Some(wire::Source::Sandbox.into()),
            Step::Decided(Decision::Allow(_) | Decision::Deny(_)) => false,
        };
        if same_answer {
            Recheck::Same
        } else {
            Recheck::Changed("the policy no longer asks the same way".into())
        }
    }

    /// This session's people's decisions: answers with a note and remembered ones, newest first,
    /// one per stable id, at most [`evidence::MAX_SESSION_RULES`]. A subagent's calls carry its
    /// parent's session id, so the parent session's rules are these too.
    async fn session_rules(&self, session: &str) -> Vec<SessionRule> {
        let q = Query {
            session: Some(session.to_owned()),
            source: Some(audit::source_name(wire::Source::Human).to_owned()),
            kind: Some("decision".to_owned()),
            limit: Some(SESSION_ROWS),
            newest: true,
            ..Query::default()
        };
        let rows = self
            .store
            .read(move |c| audit::query(c, &q))
            .await
            .unwrap_or_default();
        let mut out: Vec<SessionRule> = Vec::new();
        for r in rows.iter().rev() {
            let e = &r.entry;
            let note = human_note(e).map(str::to_owned);
            if note.is_none() && e.rule.is_none() {
                continue;
            }
            let id = e.rule.clone().unwrap_or_else(|| format!("audit #{}", r.id));
            if out.iter().any(|s| s.id == id) {
                continue;
            }
            let approved = e.verdict() == Some(Verdict::Allow);
            out.push(SessionRule {
                id,
                decision: match (approved, e.rule.is_some()) {
                    (true, false) => "approved",
                    (false, false) => "rejected",
                    (true, true) => "remembered approval",
                    (false, true) => "remembered rejection",
                }
                .into(),
                command: e.command.clone().unwrap_or_default(),
                note,
                agent: e.agent_type.clone().or_else(|| e.agent_id.clone()),
            });
            if out.len() >= evidence::MAX_SESSION_RULES {
                break;
            }
        }
        out
    }

    /// The reviewer's audit row after the ask; a deny counts against the session's breaker.
    async fn record_review(
        &self,
        ask: &AuditRow,
        req: &DecideRequest,
        verdict: Verdict,
        reason: &str,
        outcome: Option<&Outcome>,
        received: Instant,
    ) -> Option<u64> {
        let at = clock::now_ms();
        let mut entry = human_decision(&ask.entry, verdict, None, at);
        entry.source = Some(wire::Source::Reviewer.into());
        entry.reason = Some(contract::bounded(reason, 1000));
        entry.note = Some(match outcome {
            Some(o) => format!(
                "model {}; {} ms; evidence {}; tokens prompt {} reply {} cached {}",
                o.model,
                o.latency.as_millis(),
                o.digest,
                count(o.usage.prompt_tokens),
                count(o.usage.reply_tokens),
                count(o.usage.cached_tokens),
            ),
            None => "the model was not asked".into(),
        });
        entry.latency_us = Some(i64::try_from(received.elapsed().as_micros()).unwrap_or(i64::MAX));
        let changes = if verdict == Verdict::Deny {
            self.breakers
                .record(&req.agent.session_id, Signal::Denial, clock::now())
                .await
        } else {
            Vec::new()
        };
        let written = tokio::time::timeout(
            Duration::from_secs(2),
            self.store.write(move |c| {
                let row = audit::append(c, entry)?;
                persist_breakers(c, &changes, Some(row.id))?;
                Ok::<_, StoreError>(row.id)
            }),
        )
        .await;
        match written {
            Ok(Ok(id)) => u64::try_from(id).ok(),
            _ => None,
        }
    }
}

/// The session's override as the daemon honours it. In system mode the agent's uid can write its
/// own decide requests, so only `off` (which tightens) counts; `on` would let the agent hand its
/// asks to a model the operator left off.
fn session_override(mode: Mode, asked: Option<ReviewerMode>) -> Option<ReviewerMode> {
    match (mode, asked) {
        (Mode::System, Some(ReviewerMode::On)) => None,
        (_, m) => m,
    }
}

enum Recheck {
    Same,
    Deny(String),
    Changed(String),
}

fn count(n: Option<u64>) -> String {
    n.map_or_else(|| "?".into(), |n| n.to_string())
}

/// The ask as it goes on to the person, with why the reviewer did not decide it.
fn with_reviewer_note(mut asked: DecideResponse, why: &str) -> DecideResponse {
    asked.reason = format!(
        "{}. cmdgate's model reviewer did not decide it: {}",
        asked.reason.trim_end_matches('.'),
        contract::bounded(why, 600)
    );
    asked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_mode_honours_only_off_from_a_request() {
        use ReviewerMode::{Off, On};
        assert_eq!(session_override(Mode::System, Some(On)), None);
        assert_eq!(session_override(Mode::System, Some(Off)), Some(Off));
        assert_eq!(session_override(Mode::User, Some(On)), Some(On));
        assert_eq!(session_override(Mode::User, None), None);
    }
}
