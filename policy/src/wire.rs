//! Wire types shared by hook and daemon (versioned, serde): the decide and outcome requests the hook
//! sends over the daemon's Unix socket, the decide response, and the records of the hook's spool.
//!
//! # Transport (the daemon implements exactly this)
//!
//! HTTP/1.1 over the daemon's Unix socket, one request per connection (`Connection: close`):
//!
//! | method and path | body | answer |
//! |---|---|---|
//! | `POST` [`DECIDE_PATH`] (`/v1/decide`) | [`DecideRequest`] | `200` + [`DecideResponse`] |
//! | `POST` [`OUTCOME_PATH`] (`/v1/outcome`) | [`OutcomeReport`] | `204` (or `200`, body ignored) |
//! | `POST` [`RECORD_PATH`] (`/v1/record`) | [`SpoolRecord`] | `204` (system mode: what the hook did by itself) |
//! | `POST` [`run::RUN_PATH`] (`/v1/run`) | [`run::RunRequest`] | `200` + a chunked stream of [`run::Frame`]s (the `cmdgate-run` client; see [`run`]) |
//!
//! Bodies are JSON (`Content-Type: application/json`) with a `Content-Length` header; the hook sends
//! no chunked bodies and accepts none (a response without `Content-Length` is garbage to it, and garbage
//! is a deny). Responses larger than [`MAX_RESPONSE_BYTES`] are refused. Any status other than 200 on
//! `/v1/decide` is a deny whose reason quotes the status and the start of the body, which should be
//! an [`ErrorBody`].
//!
//! Every body carries `v` = [`WIRE_VERSION`]. A receiver refuses a body whose `v` it does not know
//! (the daemon answers 400; the hook denies). Unknown fields are ignored so that a newer sender can add
//! optional information; a field whose meaning changes gets a new version instead.
//!
//! Socket lookup: `crate::locations::Locations::socket` (`$CMDGATE_SOCKET`; system mode
//! `/run/cmdgate/cmdgate.sock`; `$XDG_RUNTIME_DIR/cmdgate/cmdgate.sock`; `<data dir>/cmdgate.sock`).
//!
//! # Spool
//!
//! What the hook decides or learns without the daemon (local allows, outcomes the daemon could not
//! take, escape-hatch use) is appended to `hook.jsonl` in the spool directory, one [`SpoolRecord`] per
//! line, each line written with a single `write(2)` on an `O_APPEND` descriptor (so concurrent hooks do
//! not interleave). The daemon ingests it by renaming the file aside and reading the renamed copy.
//! Spool records come from the agent's uid: the daemon treats them as claims for the audit, never as
//! authority. In system mode the daemon cannot read the agent's spool (it lives in the agent's
//! runtime dir), so the hook sends each local allow and escape-hatch record to [`RECORD_PATH`]
//! right after printing its answer and spools only what the daemon did not take. Directory lookup: `$CMDGATE_SPOOL_DIR`; `$XDG_RUNTIME_DIR/cmdgate/spool`;
//! `$XDG_STATE_HOME/cmdgate/spool`; `~/.local/state/cmdgate/spool`.

use serde::{Deserialize, Serialize};

pub mod run;

/// The version of every body and spool record defined here.
pub const WIRE_VERSION: u32 = 1;

/// `POST` a [`DecideRequest`], get a [`DecideResponse`].
pub const DECIDE_PATH: &str = "/v1/decide";
/// `POST` an [`OutcomeReport`]; the answer body is ignored.
pub const OUTCOME_PATH: &str = "/v1/outcome";
/// `POST` a [`SpoolRecord`] the hook made by itself (system mode): the daemon audits it with the
/// peer's uid, as a claim.
pub const RECORD_PATH: &str = "/v1/record";
/// The largest response body the hook reads: a decision is a few hundred bytes.
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024;
/// The largest request body the daemon must accept: the hook refuses bigger tool inputs itself.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// The spool file name inside the spool directory.
pub const SPOOL_FILE: &str = "hook.jsonl";

/// The Claude Code hook events cmdgate is registered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HookEvent {
    /// Before a tool runs: the only event that carries a decision.
    PreToolUse,
    /// After a tool ran and succeeded.
    PostToolUse,
    /// After a tool ran and failed (a non-zero Bash exit lands here, not in `PostToolUse`).
    PostToolUseFailure,
}

impl HookEvent {
    /// The name Claude Code uses in `hook_event_name` and `hookSpecificOutput.hookEventName`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::PostToolUseFailure => "PostToolUseFailure",
        }
    }

    /// Parses Claude Code's `hook_event_name`; `None` for events cmdgate does not handle.
    pub fn from_name(name: &str) -> Option<HookEvent> {
        match name {
            "PreToolUse" => Some(HookEvent::PreToolUse),
            "PostToolUse" => Some(HookEvent::PostToolUse),
            "PostToolUseFailure" => Some(HookEvent::PostToolUseFailure),
            _ => None,
        }
    }
}

/// Which agent asked: the main session or a subagent inside it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRef {
    /// Claude Code's `session_id`: the breaker counts per session.
    pub session_id: String,
    /// Claude Code's `agent_id`, present inside subagents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Claude Code's `agent_type` (the subagent's name), present inside subagents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
    /// Claude Code's `permission_mode` (`default`, `acceptEdits`, `bypassPermissions`, `plan`, ...):
    /// recorded, and the daemon may refuse to "ask" in modes where nobody is prompted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
}

/// `POST /v1/decide`: may this tool call run?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecideRequest {
    /// [`WIRE_VERSION`].
    pub v: u32,
    /// Always [`HookEvent::PreToolUse`] today; carried so the audit row says where it came from.
    pub event: HookEvent,
    #[serde(flatten)]
    pub agent: AgentRef,
    /// Claude Code's `tool_use_id`: joins this decision with the outcome reported later.
    pub tool_use_id: String,
    /// The agent's working directory when it made the call (Bash runs there).
    pub cwd: String,
    /// The project root (`$CLAUDE_PROJECT_DIR`, else `cwd`): where `CLAUDE_CMDS.md` is looked up.
    pub project_dir: String,
    /// `Bash`, `Write`, `Edit`, `Read`, `mcp__server__tool`, ...
    pub tool_name: String,
    /// The tool's input exactly as Claude Code sent it (for Bash: `{"command": ..., ...}`).
    pub tool_input: serde_json::Value,
    /// Why the hook did not allow this locally (e.g. "not a read: `rm`"); for the audit only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_note: Option<String>,
    /// `$CLAUDE_CODE_SESSION_ATTENDED` as Claude Code sets it in the hook's environment (`false` under
    /// `claude -p`, observed with 2.1.332): whether a person can answer an "ask" prompt. `None` when
    /// Claude Code does not say. The daemon may turn an ask into a pending approval when `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attended: Option<bool>,
    /// `$CMDGATE_APPROVAL_MODE` on the agent's environment: this session's override of the
    /// operator's `approvals.mode` (whether an "ask" is returned to Claude Code or held as a pending
    /// approval for the operator to answer from `cmdgate approve|reject`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_mode: Option<ApprovalMode>,
    /// How long, in milliseconds from sending, the hook waits for this answer. The daemon holds a
    /// pending approval no longer than this (less a margin), so its deny arrives before the hook's own.
    /// `None` from an older hook: the daemon assumes the hook's default deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Set when the operator's escape hatch is active; the daemon records it (the hook does not route
    /// calls while it is active, but a future hook may ask the daemon for tier 3 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escape_hatch: Option<String>,
    /// `$CMDGATE_REVIEWER` on the agent's environment: this session's override of the operator's
    /// `reviewer.enabled` (`off` always wins; `on` only enables a reviewer the operator configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<ReviewerMode>,
    /// The user's own turns from Claude Code's transcript, read by the hook (it runs as the agent,
    /// who can read the transcript; the daemon may not) on routed calls only, for the model
    /// reviewer's evidence. Claims from the agent's uid: quoted to the model as data, never authority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<TranscriptTurns>,
    /// The agent's `$HOME` as the hook saw it: how the agent's shell expands `~` and `$HOME` in
    /// its commands (it may differ from the password database's home). `None` from an older hook
    /// or when unset: the daemon uses the peer's home from the password database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
}

/// `on` or `off`: a session's override of whether the model reviewer answers its asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewerMode {
    On,
    Off,
}

impl ReviewerMode {
    /// `on` or `off`, as written in `$CMDGATE_REVIEWER`.
    pub fn parse(s: &str) -> Option<ReviewerMode> {
        match s {
            "on" => Some(ReviewerMode::On),
            "off" => Some(ReviewerMode::Off),
            _ => None,
        }
    }
}

/// What the hook found in the transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TranscriptTurns {
    /// The newest user turns (see [`crate::transcript`]).
    Turns(crate::transcript::UserTurns),
    /// Why there are none to show (no transcript, unreadable, no user turn, newest turn too long).
    Unavailable(String),
}

/// What happens to an "ask": returned to Claude Code (a person at the terminal answers), or held
/// by the daemon as a pending approval the operator answers from the CLI (nobody at the terminal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    Interactive,
    Background,
}

impl ApprovalMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::Interactive => "interactive",
            ApprovalMode::Background => "background",
        }
    }

    /// `interactive` or `background`, as written in config and in `$CMDGATE_APPROVAL_MODE`.
    pub fn parse(s: &str) -> Option<ApprovalMode> {
        match s {
            "interactive" => Some(ApprovalMode::Interactive),
            "background" => Some(ApprovalMode::Background),
            _ => None,
        }
    }
}

/// The three answers Claude Code understands.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    Deny,
    /// A person decides (interactive prompt). Claude Code in `-p` mode treats it as a denial.
    Ask,
}

impl Verdict {
    /// The value of Claude Code's `permissionDecision`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
            Verdict::Ask => "ask",
        }
    }
}

/// What produced a decision: the audit's "deciding source", and the first words of the reason the
/// model reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The hook allowed a read locally, without the daemon.
    HookFastPath,
    /// A tier-map entry (tier 0..3) of the verified `CLAUDE_CMDS.md`.
    TierRule,
    /// The built-in defaults (no verified map) or the built-in catastrophic list.
    Builtin,
    /// A learned allowlist entry.
    Learned,
    /// A remembered approval or rejection by the operator.
    Remembered,
    /// The test-run in the container mirror.
    Sandbox,
    /// A person answered (pending approval or Claude Code's prompt).
    Human,
    /// The circuit breaker is open (read-only mode).
    Breaker,
    /// Something failed or was unknown, so the answer is no.
    FailClosed,
    /// The operator's model reviewer answered an "ask" (allow once, or deny).
    Reviewer,
    /// The operator's escape hatch: cmdgate stepped aside.
    EscapeHatch,
}

impl Source {
    /// Short human name used in reasons.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::HookFastPath => "hook fast path",
            Source::TierRule => "tier map rule",
            Source::Builtin => "built-in policy",
            Source::Learned => "learned allowlist",
            Source::Remembered => "remembered operator decision",
            Source::Sandbox => "sandbox test-run",
            Source::Human => "operator",
            Source::Breaker => "circuit breaker",
            Source::FailClosed => "fail-closed",
            Source::Reviewer => "model reviewer",
            Source::EscapeHatch => "escape hatch",
        }
    }
}

/// The daemon's answer to `POST /v1/decide`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecideResponse {
    /// [`WIRE_VERSION`].
    pub v: u32,
    pub decision: Verdict,
    /// Shown to the model on deny/ask: what was refused, why, and what would be allowed.
    pub reason: String,
    pub source: Source,
    /// The rule or evidence that decided (a tier-map entry, a learned rule id, the effects of a
    /// dirty test-run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The revision of the tier map the decision was made against; `None` without a verified map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiermap_revision: Option<u64>,
    /// The `command_audit` row, so a person can look the decision up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_id: Option<u64>,
    /// Words for the model alongside an allow (Claude Code shows a PreToolUse answer's
    /// `additionalContext` to the model; an allow's reason it does not): the operator's note on an
    /// approval. The hook passes it on as `additionalContext`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Run the call in cmdgate's mirror through the `cmdgate-run` client with this ticket (see
    /// [`run`]). `decision` is then `ask`: what a hook that does not know `run` falls back to, so
    /// an older hook never runs the command on the host unjudged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<run::RunTicket>,
    /// The operator's escape hatch (system mode: a grant the daemon holds) covers this call: the
    /// hook steps aside (no decision; Claude Code's own rules apply). Sent with `decision: ask` and
    /// `source: escape_hatch`, so a hook that does not know the field asks a person instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub step_aside: bool,
}

impl DecideResponse {
    /// A fail-closed deny: cmdgate could not decide (an error, a deadline, a request nobody
    /// answered), so the answer is no.
    pub fn fail_closed(
        reason: String,
        tiermap_revision: Option<u64>,
        audit_id: Option<u64>,
    ) -> DecideResponse {
        DecideResponse {
            v: WIRE_VERSION,
            decision: Verdict::Deny,
            reason,
            source: Source::FailClosed,
            rule: None,
            tiermap_revision,
            audit_id,
            context: None,
            run: None,
            step_aside: false,
        }
    }
}

/// `POST /v1/outcome`: what happened when an allowed call ran (from PostToolUse/PostToolUseFailure).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeReport {
    /// [`WIRE_VERSION`].
    pub v: u32,
    /// [`HookEvent::PostToolUse`] or [`HookEvent::PostToolUseFailure`].
    pub event: HookEvent,
    #[serde(flatten)]
    pub agent: AgentRef,
    /// Joins the outcome with its decision.
    pub tool_use_id: String,
    pub tool_name: String,
    /// `true` for PostToolUse, `false` for PostToolUseFailure.
    pub success: bool,
    /// The exit code when Claude Code says it (`"Exit code N"` in a Bash failure); `None` when unknown
    /// (a success is exit 0 for Bash, but the hook does not invent numbers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The call was interrupted (Bash `tool_response.interrupted`, or the failure's `is_interrupt`).
    pub interrupted: bool,
    /// Claude Code's `duration_ms`, when it sends one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The failure's `error` text, truncated to [`MAX_ERROR_CHARS`] characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For Bash, the command Claude Code says it ran (`tool_input.command` of the Post event): a
    /// call the daemon routed through `cmdgate-run` must show the client here, or Claude Code ran
    /// the original command on the host (an integrity event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// The body of a 4xx/5xx answer: what was wrong with the request, in words a person can act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// [`WIRE_VERSION`].
    pub v: u32,
    pub error: String,
}

/// Outcome error texts are truncated to this many characters: the audit needs the gist, not a log.
pub const MAX_ERROR_CHARS: usize = 2000;

/// One line of the hook's spool (`hook.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpoolRecord {
    /// [`WIRE_VERSION`].
    pub v: u32,
    /// Milliseconds since the Unix epoch, by the hook's clock.
    pub at_ms: u64,
    #[serde(flatten)]
    pub entry: SpoolEntry,
}

/// What a spool line records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SpoolEntry {
    /// The hook allowed a read without asking the daemon.
    LocalAllow {
        #[serde(flatten)]
        agent: AgentRef,
        tool_use_id: String,
        cwd: String,
        project_dir: String,
        tool_name: String,
        tool_input: serde_json::Value,
        /// Which list made it a read: `tiermap rev N` or `built-in`.
        rule: String,
        /// Tier map revision when tier 0 came from a verified map.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tiermap_revision: Option<u64>,
    },
    /// An outcome the daemon did not take (down, slow, or refused it).
    Outcome {
        report: OutcomeReport,
        /// Why it was spooled rather than delivered.
        undelivered: String,
    },
    /// The escape hatch was active for a call: cmdgate stepped aside (or still denied tier 3).
    EscapeHatch {
        #[serde(flatten)]
        agent: AgentRef,
        tool_use_id: String,
        cwd: String,
        tool_name: String,
        tool_input: serde_json::Value,
        /// The operator's `CMDGATE_ESCAPE_HATCH` value.
        reason: String,
        /// `None` when cmdgate stepped aside; `Some(deny)` when tier 3 / catastrophic still denied.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        verdict: Option<Verdict>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn agent() -> AgentRef {
        AgentRef {
            session_id: "s1".into(),
            agent_id: None,
            agent_type: None,
            permission_mode: Some("default".into()),
        }
    }

    #[test]
    fn decide_request_is_flat_and_round_trips() {
        let req = DecideRequest {
            v: WIRE_VERSION,
            event: HookEvent::PreToolUse,
            agent: agent(),
            tool_use_id: "toolu_1".into(),
            cwd: "/w".into(),
            project_dir: "/w".into(),
            tool_name: "Bash".into(),
            tool_input: json!({"command": "rm x"}),
            hook_note: None,
            attended: None,
            approval_mode: None,
            wait_ms: None,
            escape_hatch: None,
            reviewer: None,
            transcript: None,
            home: None,
        };
        let text = serde_json::to_value(&req).unwrap();
        assert_eq!(
            text,
            json!({"v": 1, "event": "PreToolUse", "session_id": "s1", "permission_mode": "default",
                   "tool_use_id": "toolu_1", "cwd": "/w", "project_dir": "/w", "tool_name": "Bash",
                   "tool_input": {"command": "rm x"}})
        );
        assert_eq!(serde_json::from_value::<DecideRequest>(text).unwrap(), req);
    }

    #[test]
    fn decide_response_minimal_and_unknown_fields() {
        let r: DecideResponse = serde_json::from_str(
            r#"{"v":1,"decision":"deny","reason":"no","source":"tier_rule","future":true}"#,
        )
        .unwrap();
        assert_eq!(r.decision, Verdict::Deny);
        assert_eq!(r.source, Source::TierRule);
        assert_eq!(r.rule, None);
        assert!(serde_json::from_str::<DecideResponse>(
            r#"{"v":1,"decision":"maybe","reason":"","source":"tier_rule"}"#
        )
        .is_err());
    }

    #[test]
    fn spool_records_are_tagged_lines() {
        let rec = SpoolRecord {
            v: WIRE_VERSION,
            at_ms: 5,
            entry: SpoolEntry::Outcome {
                report: OutcomeReport {
                    v: WIRE_VERSION,
                    event: HookEvent::PostToolUseFailure,
                    agent: agent(),
                    tool_use_id: "t".into(),
                    tool_name: "Bash".into(),
                    success: false,
                    exit_code: Some(1),
                    interrupted: false,
                    duration_ms: Some(3),
                    error: Some("Exit code 1".into()),
                    command: None,
                },
                undelivered: "daemon down".into(),
            },
        };
        let line = serde_json::to_string(&rec).unwrap();
        assert!(!line.contains('\n'));
        assert!(
            line.starts_with(r#"{"v":1,"at_ms":5,"kind":"outcome""#),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<SpoolRecord>(&line).unwrap(), rec);
    }

    #[test]
    fn event_names() {
        for e in [
            HookEvent::PreToolUse,
            HookEvent::PostToolUse,
            HookEvent::PostToolUseFailure,
        ] {
            assert_eq!(HookEvent::from_name(e.as_str()), Some(e));
            assert_eq!(serde_json::to_value(e).unwrap(), json!(e.as_str()));
        }
        assert_eq!(HookEvent::from_name("Stop"), None);
    }
}
