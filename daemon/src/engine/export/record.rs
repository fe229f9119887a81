//! One exported example: a decided request with its context, decision, deciding source, sandbox
//! evidence, human note, real outcome and a label. The JSON shape is the dataset's contract
//! (`docs/export.md`, `docs/export.schema.json`, schema id [`SCHEMA_ID`]): add optional fields,
//! never rename or retype one without a new schema id.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::redact::SecretKind;
use super::split::Split;

/// The `schema` field of every example.
pub const SCHEMA_ID: &str = "cmdgate.export/1";

/// One line of the dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Example {
    /// Always [`SCHEMA_ID`]: readers can refuse a shape they do not know.
    pub schema: String,
    /// The `command_audit` row of the decision: joins the example back to the audit.
    pub audit_id: i64,
    /// When the request was decided (milliseconds since the Unix epoch).
    pub at_ms: i64,
    pub request: ExampleRequest,
    pub context: ExampleContext,
    pub decision: ExampleDecision,
    /// What happened when the call ran for real (PostToolUse); `None` when no outcome was reported
    /// (denied, still running, or the agent stopped).
    pub outcome: Option<ExampleOutcome>,
    /// The training target, derived from the decision and who made it ([`label_for`]).
    pub label: Label,
    /// Why the label is what it is (`human_rejected`, `sandbox_dirty`, `policy_deny`, ...).
    pub label_basis: String,
    /// SHA-256 (hex) of the normalised, redacted command: groups examples of one command.
    pub command_key: String,
    /// Present when the export was asked for a split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Split>,
    /// Which fields had secrets replaced, and of what kind (empty with `--no-redact`).
    pub redactions: Vec<RedactedField>,
}

/// The request as the agent made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExampleRequest {
    /// Claude Code's tool name (`Bash`, `Write`, `mcp__server__tool`, ...).
    pub tool: String,
    /// The Bash command, or a one-line summary of another tool's target.
    pub command: String,
    /// The normalised command the split and dedup keys hash (canonical key for Bash).
    pub normalized: String,
    /// The argv of each simple command the analyser found; `None` when the command could not be
    /// analysed or the tool is not Bash.
    pub parts: Option<Vec<Vec<String>>>,
    /// Whether the shell analyser could parse the command (Bash only; other tools: `true`).
    pub analyzable: bool,
    /// The tool input for non-Bash tools (long strings replaced by size and hash at audit time).
    pub input: Option<Value>,
    /// The working directory relative to the project root (`.` at the root); `None` when outside
    /// the project or unknown, so absolute paths of other trees do not leak into the dataset.
    pub cwd: Option<String>,
}

/// Who asked, where, under which tier map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExampleContext {
    /// The project root the decision was made for.
    pub project: Option<String>,
    /// Claude Code's session id.
    pub session: Option<String>,
    /// The subagent's id, when a subagent made the call.
    pub agent_id: Option<String>,
    /// The subagent's type (`general-purpose`, a custom agent name, ...).
    pub agent_type: Option<String>,
    /// Claude Code's permission mode (`default`, `acceptEdits`, `bypassPermissions`, `plan`).
    pub permission_mode: Option<String>,
    /// The tier map revision in force; `None` when the project had no valid map.
    pub tiermap_revision: Option<i64>,
    /// The strictest tier any part matched (`read`, `sandbox`, `ask`, `deny`, `unknown`).
    pub tier: Option<String>,
}

/// The decision and what made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExampleDecision {
    /// `allow`, `deny` or `ask`.
    pub verdict: String,
    /// The deciding source: `hook_fast_path`, `tier_rule`, `builtin`, `learned`, `remembered`,
    /// `sandbox`, `human`, `breaker`, `fail_closed`, `escape_hatch`.
    pub source: String,
    /// The rule or evidence that decided (a tier-map line, `built-in:…`, `rule #12`).
    pub rule: Option<String>,
    /// The reason shown to the model.
    pub reason: Option<String>,
    /// Time to decide, in microseconds (request received to audit row committed).
    pub latency_us: Option<i64>,
    /// The sandbox test-run report (`clean`, `why`, `exit`, `effects`, ...) when one ran.
    pub sandbox: Option<Value>,
    /// The person behind the decision: an operator's answer, or a remembered operator rule.
    pub human: Option<HumanDecision>,
}

/// A person's part in a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanDecision {
    /// `true` when a remembered rule decided (the person answered earlier), `false` for an answer
    /// to this very request.
    pub remembered: bool,
    /// The remembered rule's id, if any.
    pub rule_id: Option<i64>,
    /// The operator's free-text note.
    pub note: Option<String>,
}

/// What happened when the call ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExampleOutcome {
    /// PostToolUse (`true`) or PostToolUseFailure (`false`).
    pub success: Option<bool>,
    pub exit_code: Option<i64>,
    /// The user interrupted the call.
    pub interrupted: Option<bool>,
    pub duration_ms: Option<i64>,
    pub error: Option<String>,
}

/// The training target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Label {
    /// A person, the signed policy, a clean test-run or the learned allowlist let it run.
    Safe,
    /// A person, the signed policy, a built-in catastrophic rule or a dirty test-run refused it.
    Unsafe,
    /// The decision says nothing about the command itself (breaker, read-only project, failure,
    /// an unanswered ask).
    Unknown,
}

/// A field whose text had a secret replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactedField {
    /// JSON-pointer-like path of the field in the example (`request.command`, `request.parts`).
    pub field: String,
    pub kind: SecretKind,
}

/// The label of a decision and its basis, from the verdict, the deciding source and the rule.
///
/// | source | allow | deny | ask |
/// |---|---|---|---|
/// | `human` | safe `human_approved` | unsafe `human_rejected` | unknown `unanswered` |
/// | `remembered` | safe `remembered_approval` | unsafe `remembered_rejection` | unknown `always_ask` |
/// | `tier_rule` | safe `policy_allow` | unsafe `policy_deny` | unknown `needs_person` |
/// | `builtin` | safe `builtin_read` | unsafe `builtin_catastrophic` (rule `built-in:…`) / unknown `read_only_project` | unknown `needs_person` |
/// | `sandbox` | safe `sandbox_clean` | unsafe `sandbox_dirty` | unknown `sandbox_failed` |
/// | `learned` | safe `learned` | — | — |
/// | `hook_fast_path` | safe `hook_read` | — | — |
/// | `reviewer` (a model, not a person) | unknown `model_allowed_once` | unknown `model_denied` | unknown `model_deferred` |
/// | other (`breaker`, `fail_closed`, `escape_hatch`, unknown) | unknown `not_about_the_command` | | |
pub fn label_for(verdict: &str, source: &str, rule: Option<&str>) -> (Label, &'static str) {
    use Label::*;
    match (source, verdict) {
        ("human", "allow") => (Safe, "human_approved"),
        ("human", "deny") => (Unsafe, "human_rejected"),
        ("human", _) => (Unknown, "unanswered"),
        ("remembered", "allow") => (Safe, "remembered_approval"),
        ("remembered", "deny") => (Unsafe, "remembered_rejection"),
        ("remembered", _) => (Unknown, "always_ask"),
        ("tier_rule", "allow") => (Safe, "policy_allow"),
        ("tier_rule", "deny") => (Unsafe, "policy_deny"),
        ("builtin", "allow") => (Safe, "builtin_read"),
        ("builtin", "deny") if rule.is_some_and(|r| r.starts_with("built-in:")) => {
            (Unsafe, "builtin_catastrophic")
        }
        ("builtin", "deny") => (Unknown, "read_only_project"),
        ("tier_rule" | "builtin", _) => (Unknown, "needs_person"),
        ("sandbox", "allow") => (Safe, "sandbox_clean"),
        ("sandbox", "deny") => (Unsafe, "sandbox_dirty"),
        ("sandbox", _) => (Unknown, "sandbox_failed"),
        ("learned", "allow") => (Safe, "learned"),
        ("hook_fast_path", "allow") => (Safe, "hook_read"),
        // A model's answer is never a training label: it is marked apart from people's.
        ("reviewer", "allow") => (Unknown, "model_allowed_once"),
        ("reviewer", "deny") => (Unknown, "model_denied"),
        ("reviewer", _) => (Unknown, "model_deferred"),
        _ => (Unknown, "not_about_the_command"),
    }
}

/// `cwd` relative to `project` (`.` when equal); `None` when it is outside or either is missing.
/// Compares whole path components, so `/p/app2` is not inside `/p/app`.
pub fn relative_cwd(project: Option<&str>, cwd: Option<&str>) -> Option<String> {
    let project = project?.trim_end_matches('/');
    let cwd = cwd?.trim_end_matches('/');
    if cwd == project {
        return Some(".".into());
    }
    let rest = cwd.strip_prefix(project)?.strip_prefix('/')?;
    if rest.split('/').any(|c| c == "..") {
        return None;
    }
    Some(rest.to_owned())
}
