//! `command_audit`: one append-only, hash-chained row per request, outcome and notable event.
//!
//! Rows are never updated. An outcome (PostToolUse) is its own row that names its decision's row
//! (`decision_id`, found by `tool_use_id`), so the chain stays a plain list: each row's `hash` is
//! SHA-256 over the previous row's hash, the row's id, and the canonical JSON of its content.
//! [`verify`] walks the chain; changing, inserting or deleting any row (except a truncated tail,
//! which the caller detects by comparing with the last id it acknowledged) breaks it.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use cmdgate_policy::tiermap::Tier;
use cmdgate_policy::wire::{Source, Verdict};

use super::StoreError;

/// The hash the first row chains from.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What a row records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A PreToolUse decision by the daemon.
    #[default]
    Decision,
    /// A PostToolUse / PostToolUseFailure outcome.
    Outcome,
    /// A read the hook allowed locally (ingested from its spool: a claim, not authority).
    LocalAllow,
    /// The operator's escape hatch was active for a call (from the spool).
    EscapeHatch,
    /// A connection from a peer that is not allowed on that socket.
    RefusedPeer,
    /// A request that named a session another uid opened.
    SessionRefused,
    /// A tier map was accepted or rejected.
    Tiermap,
    /// A circuit breaker transition.
    Breaker,
    /// A learned allowlist promotion or demotion.
    Learn,
    /// An operator change to the rules.
    Rule,
    /// A mirrored run (issue 19): its effects, commit or rollback, undo id; also a refused
    /// ticket redemption and an undo.
    Run,
    /// An integrity event outside a decision: a routed call Claude Code ran without its client.
    Integrity,
    /// The operator pruned the rows before a date: the row names the last pruned row
    /// (`decision_id`) and its hash (`note`), where the remaining chain continues.
    Checkpoint,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Decision => "decision",
            Kind::Outcome => "outcome",
            Kind::LocalAllow => "local_allow",
            Kind::EscapeHatch => "escape_hatch",
            Kind::RefusedPeer => "refused_peer",
            Kind::SessionRefused => "session_refused",
            Kind::Tiermap => "tiermap",
            Kind::Breaker => "breaker",
            Kind::Learn => "learn",
            Kind::Rule => "rule",
            Kind::Run => "run",
            Kind::Integrity => "integrity",
            Kind::Checkpoint => "checkpoint",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Every kind.
    pub const ALL: [Kind; 13] = [
        Kind::Decision,
        Kind::Outcome,
        Kind::LocalAllow,
        Kind::EscapeHatch,
        Kind::RefusedPeer,
        Kind::SessionRefused,
        Kind::Tiermap,
        Kind::Breaker,
        Kind::Learn,
        Kind::Rule,
        Kind::Run,
        Kind::Integrity,
        Kind::Checkpoint,
    ];
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Declares a closed set stored as text (the `tier` column, the `decision` of one kind of row):
/// its names, `as_str`/`parse`, `Display`, serde with the same names (so the hashed content and
/// the column agree), and `ToSql`/`FromSql` (an unknown name is an error, never a guess).
macro_rules! text_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            pub fn parse(s: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl rusqlite::types::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(rusqlite::types::ToSqlOutput::from(self.as_str()))
            }
        }

        impl rusqlite::types::FromSql for $name {
            fn column_result(
                v: rusqlite::types::ValueRef<'_>,
            ) -> rusqlite::types::FromSqlResult<Self> {
                let text = v.as_str()?;
                $name::parse(text).ok_or_else(|| {
                    rusqlite::types::FromSqlError::Other(
                        format!(concat!("unknown ", stringify!($name), " {:?}"), text).into(),
                    )
                })
            }
        }
    };
}

text_enum! {
    /// The `decision` of a `tiermap` row: what loading a project's map found.
    TiermapEvent {
        /// A new revision verified and took effect.
        Accepted => "accepted",
        /// The file on disk failed verification: the project is read-only until it is fixed.
        Rejected => "rejected",
    }
}

text_enum! {
    /// The `decision` of a `learn` row.
    LearnChange {
        /// A command earned a learned allowlist entry.
        Promoted => "promoted",
        /// A learned entry was disabled (a failed outcome, a changed map).
        Demoted => "demoted",
        /// The operator applied a command's dirty runs with one effect signature K times: its
        /// runs with exactly that signature commit from now on (`engine/accept.rs`).
        AcceptanceLearned => "acceptance_learned",
        /// Accepted signatures withdrawn (a conflict, an undo, a run with another signature,
        /// a changed map).
        AcceptanceWithdrawn => "acceptance_withdrawn",
    }
}

text_enum! {
    /// The `decision` of a `run` row: how a mirrored run ended, or what the operator's undo,
    /// apply and the daemon's start-up recovery did with one.
    RunEvent {
        /// Clean: its effects are in the workspace.
        Committed => "committed",
        /// Dirty, but committed by the operator's acceptance of exactly these refused effects
        /// (source `learned`; `engine/accept.rs`).
        AcceptedRun => "accepted_run",
        /// Dirty: nothing it did reached the host.
        RolledBack => "rolled_back",
        /// Clean, but a target changed on the host meanwhile: nothing committed.
        Conflict => "conflict",
        /// Could not be finished or judged: nothing committed.
        Failed => "failed",
        /// A ticket redemption was refused (unknown, used, expired, another peer, …).
        Refused => "refused",
        /// Start-up recovery of interrupted commits and undos.
        Recovered => "recovered",
        /// The operator undid a committed run.
        Undone => "undone",
        /// The operator's undo was refused.
        UndoRefused => "undo_refused",
        /// The operator applied a kept rolled-back run.
        Applied => "applied",
        /// The operator's apply was refused.
        ApplyRefused => "apply_refused",
    }
}

impl From<cmdgate_policy::wire::run::RunStatus> for RunEvent {
    fn from(s: cmdgate_policy::wire::run::RunStatus) -> RunEvent {
        use cmdgate_policy::wire::run::RunStatus;
        match s {
            RunStatus::Committed => RunEvent::Committed,
            RunStatus::RolledBack => RunEvent::RolledBack,
            RunStatus::Conflict => RunEvent::Conflict,
            RunStatus::Failed => RunEvent::Failed,
        }
    }
}

text_enum! {
    /// The `decision` of a `rule` row: what the operator (or a person's answer that remembered
    /// it) did to a rule.
    RuleChange {
        /// A remembered approval was added.
        Approve => "approve",
        /// A remembered rejection was added.
        Reject => "reject",
        /// An always-ask rule was added.
        AlwaysAsk => "always_ask",
        Enable => "enable",
        Disable => "disable",
        Remove => "remove",
    }
}

text_enum! {
    /// The `decision` of an `escape_hatch` row written by the operator's grant or revocation
    /// (the hook's spooled escape-hatch rows carry a verdict).
    HatchChange {
        Granted => "granted",
        Revoked => "revoked",
    }
}

text_enum! {
    /// The `decision` of an `integrity` row.
    IntegrityEvent {
        /// A routed call Claude Code ran without cmdgate's client (the rewrite was ignored).
        RewriteIgnored => "rewrite_ignored",
    }
}

/// The `decision` column: what a row says happened, one closed set per kind of row, stored as
/// the same text it always was (so old rows read back and every hash still verifies):
///
/// - `allow`/`deny`/`ask` ([`Verdict`]): decisions, local allows, a person's answer, refused
///   peers and sessions, the hook's escape-hatch rows;
/// - `run` ([`AuditDecision::Mirrored`]): a decision row whose command went to a mirrored run;
/// - [`RunEvent`], [`TiermapEvent`], [`LearnChange`], [`BreakerDecision`], [`RuleChange`],
///   [`HatchChange`], [`IntegrityEvent`]: the rows of those kinds.
///
/// The texts of the sets are disjoint (a test checks it), so the text alone names the value.
///
/// Text no set knows reads back as [`AuditDecision::Unknown`], not as an error: the audit is
/// evidence, and a row written by another build (older, newer, or a helper's branch) must still
/// be shown, exported and verified — an error would make `cmdgate audit` and `verify` fail on the
/// whole chain because of one row. An unknown decision keeps its exact text (so its hash
/// verifies), is never read as a verdict (`Entry::verdict` is `None`) and is counted nowhere;
/// nothing in the daemon can write one ([`UnknownDecision`] has no public constructor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditDecision {
    Verdict(Verdict),
    Mirrored,
    Run(RunEvent),
    Tiermap(TiermapEvent),
    Learn(LearnChange),
    Breaker(BreakerDecision),
    Rule(RuleChange),
    Hatch(HatchChange),
    Integrity(IntegrityEvent),
    Unknown(UnknownDecision),
}

/// A `decision` text no build of this daemon writes, kept byte for byte (see [`AuditDecision`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownDecision(String);

impl UnknownDecision {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

const VERDICTS: [Verdict; 3] = [Verdict::Allow, Verdict::Deny, Verdict::Ask];

impl AuditDecision {
    /// The stored text.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        use std::borrow::Cow;
        match self {
            AuditDecision::Verdict(v) => Cow::Borrowed(v.as_str()),
            AuditDecision::Mirrored => Cow::Borrowed("run"),
            AuditDecision::Run(e) => Cow::Borrowed(e.as_str()),
            AuditDecision::Tiermap(e) => Cow::Borrowed(e.as_str()),
            AuditDecision::Learn(e) => Cow::Borrowed(e.as_str()),
            AuditDecision::Breaker(b) => Cow::Owned(b.encode()),
            AuditDecision::Rule(e) => Cow::Borrowed(e.as_str()),
            AuditDecision::Hatch(e) => Cow::Borrowed(e.as_str()),
            AuditDecision::Integrity(e) => Cow::Borrowed(e.as_str()),
            AuditDecision::Unknown(u) => Cow::Borrowed(u.as_str()),
        }
    }

    /// The value stored as `text`; never fails, and `parse(t).text() == t` for every `t`.
    pub fn parse(text: &str) -> AuditDecision {
        if let Some(v) = VERDICTS.into_iter().find(|v| v.as_str() == text) {
            return AuditDecision::Verdict(v);
        }
        if text == "run" {
            return AuditDecision::Mirrored;
        }
        if let Some(e) = RunEvent::parse(text) {
            return AuditDecision::Run(e);
        }
        if let Some(e) = TiermapEvent::parse(text) {
            return AuditDecision::Tiermap(e);
        }
        if let Some(e) = LearnChange::parse(text) {
            return AuditDecision::Learn(e);
        }
        if let Some(e) = RuleChange::parse(text) {
            return AuditDecision::Rule(e);
        }
        if let Some(e) = HatchChange::parse(text) {
            return AuditDecision::Hatch(e);
        }
        if let Some(e) = IntegrityEvent::parse(text) {
            return AuditDecision::Integrity(e);
        }
        // A breaker row's JSON is typed only when it re-encodes to the same bytes, so no stored
        // text is ever rewritten (its hash covers it).
        if let Some(b) = BreakerDecision::decode(text).filter(|b| b.encode() == text) {
            return AuditDecision::Breaker(b);
        }
        AuditDecision::Unknown(UnknownDecision(text.to_owned()))
    }

    /// The verdict, when the row records one.
    pub fn verdict(&self) -> Option<Verdict> {
        match self {
            AuditDecision::Verdict(v) => Some(*v),
            _ => None,
        }
    }
}

impl From<Verdict> for AuditDecision {
    fn from(v: Verdict) -> AuditDecision {
        AuditDecision::Verdict(v)
    }
}

impl From<RunEvent> for AuditDecision {
    fn from(e: RunEvent) -> AuditDecision {
        AuditDecision::Run(e)
    }
}

impl From<TiermapEvent> for AuditDecision {
    fn from(e: TiermapEvent) -> AuditDecision {
        AuditDecision::Tiermap(e)
    }
}

impl From<LearnChange> for AuditDecision {
    fn from(e: LearnChange) -> AuditDecision {
        AuditDecision::Learn(e)
    }
}

impl From<BreakerDecision> for AuditDecision {
    fn from(b: BreakerDecision) -> AuditDecision {
        AuditDecision::Breaker(b)
    }
}

impl From<RuleChange> for AuditDecision {
    fn from(e: RuleChange) -> AuditDecision {
        AuditDecision::Rule(e)
    }
}

impl From<HatchChange> for AuditDecision {
    fn from(e: HatchChange) -> AuditDecision {
        AuditDecision::Hatch(e)
    }
}

impl From<IntegrityEvent> for AuditDecision {
    fn from(e: IntegrityEvent) -> AuditDecision {
        AuditDecision::Integrity(e)
    }
}

impl std::fmt::Display for AuditDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(&self.text())
    }
}

impl Serialize for AuditDecision {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

impl<'de> Deserialize<'de> for AuditDecision {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(AuditDecision::parse(&String::deserialize(d)?))
    }
}

impl rusqlite::types::ToSql for AuditDecision {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::from(self.text().into_owned()))
    }
}

impl rusqlite::types::FromSql for AuditDecision {
    fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        Ok(AuditDecision::parse(v.as_str()?))
    }
}

text_enum! {
    /// The strictest tier a command's parts matched in the tier map, or `unknown` (some part
    /// matched no entry, or the command could not be analysed). The `tier` column.
    TierSeen {
        Read => "read",
        Sandbox => "sandbox",
        Ask => "ask",
        Deny => "deny",
        Unknown => "unknown",
    }
}

impl From<Tier> for TierSeen {
    fn from(t: Tier) -> TierSeen {
        match t {
            Tier::Read => TierSeen::Read,
            Tier::Sandbox => TierSeen::Sandbox,
            Tier::Ask => TierSeen::Ask,
            Tier::Deny => TierSeen::Deny,
        }
    }
}

/// Every deciding source, as the wire names them.
pub const SOURCES: [Source; 11] = [
    Source::HookFastPath,
    Source::TierRule,
    Source::Builtin,
    Source::Learned,
    Source::Remembered,
    Source::Sandbox,
    Source::Human,
    Source::Breaker,
    Source::FailClosed,
    Source::Reviewer,
    Source::EscapeHatch,
];

/// The wire source's snake_case name: what the `source` column holds (and what serde writes into
/// the hashed content, checked by a test).
pub fn source_name(s: Source) -> &'static str {
    match s {
        Source::HookFastPath => "hook_fast_path",
        Source::TierRule => "tier_rule",
        Source::Builtin => "builtin",
        Source::Learned => "learned",
        Source::Remembered => "remembered",
        Source::Sandbox => "sandbox",
        Source::Human => "human",
        Source::Breaker => "breaker",
        Source::FailClosed => "fail_closed",
        Source::Reviewer => "reviewer",
        Source::EscapeHatch => "escape_hatch",
    }
}

/// The source stored as `name`, if it is one.
pub fn parse_source(name: &str) -> Option<AuditSource> {
    AuditSource::parse(name)
}

/// Who decided what a row records: one of the wire's sources, or the operator acting directly on
/// the admin socket (`operator`: the apply of a kept run). The `source` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuditSource {
    Wire(Source),
    Operator,
}

impl AuditSource {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditSource::Wire(s) => source_name(s),
            AuditSource::Operator => "operator",
        }
    }

    /// The source stored as `name`, if it is one.
    pub fn parse(name: &str) -> Option<AuditSource> {
        AuditSource::all().find(|s| s.as_str() == name)
    }

    /// Every source a row may name.
    pub fn all() -> impl Iterator<Item = AuditSource> {
        SOURCES
            .into_iter()
            .map(AuditSource::Wire)
            .chain([AuditSource::Operator])
    }
}

impl From<Source> for AuditSource {
    fn from(s: Source) -> AuditSource {
        AuditSource::Wire(s)
    }
}

impl std::fmt::Display for AuditSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for AuditSource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for AuditSource {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        AuditSource::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown audit source {name:?}")))
    }
}

impl rusqlite::types::ToSql for AuditSource {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::from(self.as_str()))
    }
}

impl rusqlite::types::FromSql for AuditSource {
    fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let text = v.as_str()?;
        AuditSource::parse(text).ok_or_else(|| {
            rusqlite::types::FromSqlError::Other(format!("unknown audit source {text:?}").into())
        })
    }
}

/// The content of one row: everything the audit holds (ARCHITECTURE.md, `store/`). Optional fields are `None`
/// when they do not apply to the row's kind. JSON-valued fields are kept as their exact text so the
/// hash recomputes byte for byte.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub at_ms: i64,
    pub kind: Kind,
    /// Claude Code's session: the breaker counts per session.
    pub session: Option<String>,
    pub agent_id: Option<String>,
    pub agent_type: Option<String>,
    pub permission_mode: Option<String>,
    /// Joins a decision with its outcome.
    pub tool_use_id: Option<String>,
    pub cwd: Option<String>,
    /// Canonical project root the decision was made for.
    pub project: Option<String>,
    pub tool: Option<String>,
    /// The Bash command, or a one-line summary of another tool's target.
    pub command: Option<String>,
    /// The tool input as JSON, with long string values replaced by their length and hash.
    pub tool_input: Option<String>,
    /// Parsed parts (argv of each simple command) as JSON.
    pub parts: Option<String>,
    /// The strictest tier any part matched in the tier map, or `unknown`.
    pub tier: Option<TierSeen>,
    /// What the row says happened: a verdict, a run's end, a breaker transition, … (typed by
    /// kind of row, stored as text: [`AuditDecision`]).
    pub decision: Option<AuditDecision>,
    /// The deciding source (stored by its name, [`AuditSource::as_str`]).
    pub source: Option<AuditSource>,
    /// The rule or evidence that decided.
    pub rule: Option<String>,
    pub reason: Option<String>,
    pub tiermap_revision: Option<i64>,
    /// The sandbox verdict and effects as JSON, when a test-run happened.
    pub sandbox: Option<String>,
    /// Time from receiving the request to committing this row, in microseconds.
    pub latency_us: Option<i64>,
    /// Outcome rows: did the real run succeed.
    pub success: Option<bool>,
    pub exit_code: Option<i64>,
    pub interrupted: Option<bool>,
    pub duration_ms: Option<i64>,
    pub error: Option<String>,
    /// Outcome rows: the decision row with the same `tool_use_id`, when there is one.
    pub decision_id: Option<i64>,
    /// The socket peer (`uid=.. gid=.. pid=..`).
    pub peer: Option<String>,
    /// Free text: why a peer was refused, what a tier map event was, an operator's note.
    pub note: Option<String>,
}

impl Entry {
    /// The verdict a decision-like row records (`allow`, `deny` or `ask` in `decision`); `None`
    /// for rows whose `decision` says something else (a breaker transition, a run's status, …).
    pub fn verdict(&self) -> Option<Verdict> {
        self.decision.as_ref().and_then(AuditDecision::verdict)
    }
}

/// A stored row: its id, content and chain links.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRow {
    pub id: i64,
    #[serde(flatten)]
    pub entry: Entry,
    pub prev_hash: String,
    pub hash: String,
}

/// The chain hash of a row.
pub fn row_hash(prev_hash: &str, id: i64, entry: &Entry) -> String {
    let content = serde_json::to_vec(entry).unwrap_or_default();
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(b"\n");
    h.update(id.to_string().as_bytes());
    h.update(b"\n");
    h.update(&content);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

const COLUMNS: &str = "id, at_ms, kind, session, agent_id, agent_type, permission_mode, tool_use_id, cwd, project, \
    tool, command, tool_input, parts, tier, decision, source, rule, reason, tiermap_revision, sandbox, latency_us, \
    success, exit_code, interrupted, duration_ms, error, decision_id, peer, note, prev_hash, hash";

/// The insert of one row, every column.
static INSERT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "INSERT INTO command_audit ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, \
         ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32)"
    )
});

/// Appends one row at the end of the chain; returns it. Runs inside the caller's transaction.
pub fn append(conn: &Connection, entry: Entry) -> Result<AuditRow, StoreError> {
    // Both statements come from the connection's cache: parsing a 32-column insert again for
    // every row cost the writer, on the decision's path, more than running it.
    let last: Option<(i64, String)> = conn
        .prepare_cached("SELECT id, hash FROM command_audit ORDER BY id DESC LIMIT 1")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (id, prev_hash) = match last {
        Some((id, hash)) => (id + 1, hash),
        None => (1, GENESIS.to_owned()),
    };
    let hash = row_hash(&prev_hash, id, &entry);
    let e = &entry;
    conn.prepare_cached(&INSERT)?.execute(params![
        id,
        e.at_ms,
        e.kind,
        e.session,
        e.agent_id,
        e.agent_type,
        e.permission_mode,
        e.tool_use_id,
        e.cwd,
        e.project,
        e.tool,
        e.command,
        e.tool_input,
        e.parts,
        e.tier,
        e.decision,
        e.source,
        e.rule,
        e.reason,
        e.tiermap_revision,
        e.sandbox,
        e.latency_us,
        e.success,
        e.exit_code,
        e.interrupted,
        e.duration_ms,
        e.error,
        e.decision_id,
        e.peer,
        e.note,
        prev_hash,
        hash,
    ])?;
    Ok(AuditRow {
        id,
        entry,
        prev_hash,
        hash,
    })
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<AuditRow> {
    Ok(AuditRow {
        id: r.get(0)?,
        entry: Entry {
            at_ms: r.get(1)?,
            kind: r.get(2)?,
            session: r.get(3)?,
            agent_id: r.get(4)?,
            agent_type: r.get(5)?,
            permission_mode: r.get(6)?,
            tool_use_id: r.get(7)?,
            cwd: r.get(8)?,
            project: r.get(9)?,
            tool: r.get(10)?,
            command: r.get(11)?,
            tool_input: r.get(12)?,
            parts: r.get(13)?,
            tier: r.get(14)?,
            decision: r.get(15)?,
            source: r.get(16)?,
            rule: r.get(17)?,
            reason: r.get(18)?,
            tiermap_revision: r.get(19)?,
            sandbox: r.get(20)?,
            latency_us: r.get(21)?,
            success: r.get(22)?,
            exit_code: r.get(23)?,
            interrupted: r.get(24)?,
            duration_ms: r.get(25)?,
            error: r.get(26)?,
            decision_id: r.get(27)?,
            peer: r.get(28)?,
            note: r.get(29)?,
        },
        prev_hash: r.get(30)?,
        hash: r.get(31)?,
    })
}

/// One row by id.
pub fn get(conn: &Connection, id: i64) -> Result<Option<AuditRow>, StoreError> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM command_audit WHERE id = ?1"),
            [id],
            from_row,
        )
        .optional()?)
}

/// The decision row for a `tool_use_id` (the latest, if a hook retried).
pub fn decision_for(conn: &Connection, tool_use_id: &str) -> Result<Option<i64>, StoreError> {
    Ok(conn
        .query_row(
            "SELECT id FROM command_audit WHERE tool_use_id = ?1 AND kind IN ('decision', 'local_allow') \
             ORDER BY id DESC LIMIT 1",
            [tool_use_id],
            |r| r.get(0),
        )
        .optional()?)
}

/// Outcome rows that name `decision_id`.
pub fn outcomes_of(conn: &Connection, decision_id: i64) -> Result<Vec<AuditRow>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM command_audit WHERE decision_id = ?1 ORDER BY id"
    ))?;
    let rows = stmt
        .query_map([decision_id], from_row)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Rows of one of `kinds` whose rule column is exactly `rule` (as decisions name a rule:
/// `rule #12`), newest first, at most `limit` (clamped to 1..=10 000).
pub fn naming_rule(
    conn: &Connection,
    rule: cmdgate_policy::decide::RuleRef,
    kinds: &[Kind],
    limit: u32,
) -> Result<Vec<AuditRow>, StoreError> {
    let mut values: Vec<rusqlite::types::Value> = vec![rule.to_string().into()];
    let mut marks = Vec::new();
    for k in kinds {
        values.push(k.as_str().to_owned().into());
        marks.push(format!("?{}", values.len()));
    }
    let limit = limit.clamp(1, 10_000);
    let sql = format!(
        "SELECT {COLUMNS} FROM command_audit WHERE rule = ?1 AND kind IN ({}) ORDER BY id DESC LIMIT {limit}",
        marks.join(", ")
    );
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(values), from_row)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Filters for [`query`]; every field narrows, `None` does not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Query {
    /// Only rows with an id greater than this (`tail -f` polls with the last id it printed).
    pub after_id: Option<i64>,
    pub kind: Option<String>,
    pub session: Option<String>,
    pub project: Option<String>,
    pub tool: Option<String>,
    pub decision: Option<String>,
    pub source: Option<String>,
    /// Substring of the command.
    pub contains: Option<String>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// At most this many rows (default 50, at most 10 000).
    pub limit: Option<u32>,
    /// Newest rows (returned oldest first), as `tail` wants; else the oldest matching rows.
    pub newest: bool,
}

/// Rows matching `q`, oldest first.
pub fn query(conn: &Connection, q: &Query) -> Result<Vec<AuditRow>, StoreError> {
    let mut clauses: Vec<String> = Vec::new();
    let mut values: Vec<rusqlite::types::Value> = Vec::new();
    let mut add = |clause: &str, v: rusqlite::types::Value| {
        values.push(v);
        clauses.push(clause.replace('?', &format!("?{}", values.len())));
    };
    use rusqlite::types::Value as V;
    if let Some(v) = q.after_id {
        add("id > ?", V::Integer(v));
    }
    for (col, v) in [
        ("kind", &q.kind),
        ("session", &q.session),
        ("project", &q.project),
        ("tool", &q.tool),
        ("decision", &q.decision),
        ("source", &q.source),
    ] {
        if let Some(v) = v {
            add(&format!("{col} = ?"), V::Text(v.clone()));
        }
    }
    if let Some(v) = &q.contains {
        add("instr(command, ?) > 0", V::Text(v.clone()));
    }
    if let Some(v) = q.since_ms {
        add("at_ms >= ?", V::Integer(v));
    }
    if let Some(v) = q.until_ms {
        add("at_ms <= ?", V::Integer(v));
    }
    let filter = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    let limit = q.limit.unwrap_or(50).clamp(1, 10_000);
    let order = if q.newest { "DESC" } else { "ASC" };
    let sql =
        format!("SELECT {COLUMNS} FROM command_audit {filter} ORDER BY id {order} LIMIT {limit}");
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt
        .query_map(rusqlite::params_from_iter(values), from_row)?
        .collect::<Result<Vec<_>, _>>()?;
    if q.newest {
        rows.reverse();
    }
    Ok(rows)
}

/// The result of walking the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainReport {
    /// Rows checked.
    pub rows: u64,
    /// The last row's id and hash (compare with an earlier report to detect a truncated tail).
    pub last_id: Option<i64>,
    pub last_hash: String,
    /// The first broken link, if any.
    pub broken: Option<BrokenLink>,
}

/// Where and how the chain breaks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokenLink {
    pub id: i64,
    pub why: String,
}

impl ChainReport {
    pub fn ok(&self) -> bool {
        self.broken.is_none()
    }
}

/// Walks the whole chain from the first row, recomputing every hash.
pub fn verify(conn: &Connection) -> Result<ChainReport, StoreError> {
    // After a prune the chain starts at the row after the cut, from the hash a checkpoint row
    // (itself inside the verified chain, so it cannot be forged without breaking it) vouches for.
    let (mut prev, mut expected_id) = match cut(conn)? {
        Some((through, head)) => (head, through + 1),
        None => (GENESIS.to_owned(), 1),
    };
    let mut stmt = conn.prepare(&format!("SELECT {COLUMNS} FROM command_audit ORDER BY id"))?;
    let mut rows = stmt.query([])?;
    let mut report = ChainReport {
        rows: 0,
        last_id: None,
        last_hash: GENESIS.to_owned(),
        broken: None,
    };
    while let Some(r) = rows.next()? {
        let row = from_row(r)?;
        let why = if row.id != expected_id {
            Some(format!(
                "row {expected_id} is missing (next row is {})",
                row.id
            ))
        } else if row.prev_hash != prev {
            Some(
                "prev_hash does not match the previous row's hash (a row was removed or replaced)"
                    .to_owned(),
            )
        } else if row_hash(&prev, row.id, &row.entry) != row.hash {
            Some("content does not match its hash (the row was altered)".to_owned())
        } else {
            None
        };
        if let Some(why) = why {
            report.broken = Some(BrokenLink { id: row.id, why });
            return Ok(report);
        }
        report.rows += 1;
        report.last_id = Some(row.id);
        prev = row.hash.clone();
        report.last_hash = row.hash;
        expected_id += 1;
    }
    Ok(report)
}

/// The newest checkpoint: the last pruned row's id and hash, when rows were pruned.
pub fn cut(conn: &Connection) -> Result<Option<(i64, String)>, StoreError> {
    Ok(conn
        .query_row(
            "SELECT decision_id, note FROM command_audit WHERE kind = 'checkpoint' \
             AND decision_id IS NOT NULL AND note IS NOT NULL ORDER BY id DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

/// What [`prune`] removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pruned {
    /// Rows deleted.
    pub rows: u64,
    /// Decision rows among them (what replay and export no longer see).
    pub decisions: u64,
    /// The last pruned row and its hash: the remaining chain continues from it.
    pub through_id: i64,
    pub head_hash: String,
    /// The checkpoint row appended to the chain.
    pub checkpoint_id: i64,
}

/// Deletes every row before `before_ms` — the prefix of the chain up to the last such row — and
/// appends a checkpoint row naming the last pruned row and its hash, so [`verify`] still checks
/// everything kept. `None` when nothing is that old. Call it inside one transaction.
pub fn prune(conn: &Connection, before_ms: i64, at_ms: i64) -> Result<Option<Pruned>, StoreError> {
    let through: Option<(i64, String)> = conn
        .query_row(
            // Never the newest row: the chain (and the ids) continue from it.
            "SELECT id, hash FROM command_audit WHERE id = (SELECT MAX(id) FROM command_audit \
             WHERE at_ms < ?1 AND id < (SELECT MAX(id) FROM command_audit))",
            [before_ms],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((through_id, head_hash)) = through else {
        return Ok(None);
    };
    let decisions: i64 = conn.query_row(
        "SELECT COUNT(*) FROM command_audit WHERE id <= ?1 AND kind = 'decision'",
        [through_id],
        |r| r.get(0),
    )?;
    let decisions = u64::try_from(decisions).unwrap_or(0);
    let rows = conn.execute("DELETE FROM command_audit WHERE id <= ?1", [through_id])? as u64;
    let checkpoint = append(
        conn,
        Entry {
            at_ms,
            kind: Kind::Checkpoint,
            decision_id: Some(through_id),
            note: Some(head_hash.clone()),
            reason: Some(format!(
                "pruned {rows} audit rows through #{through_id} (everything before {before_ms} ms); \
                 the chain continues from that row's hash"
            )),
            ..Entry::default()
        },
    )?;
    Ok(Some(Pruned {
        rows,
        decisions,
        through_id,
        head_hash,
        checkpoint_id: checkpoint.id,
    }))
}

impl rusqlite::types::ToSql for Kind {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::from(self.as_str()))
    }
}

impl rusqlite::types::FromSql for Kind {
    fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let text = v.as_str()?;
        Kind::parse(text).ok_or_else(|| {
            rusqlite::types::FromSqlError::Other(format!("unknown audit kind {text:?}").into())
        })
    }
}

/// What the `decision` of a `breaker` audit row says: a breaker's transition (stored as the
/// policy's tagged JSON, `{"transition":"tripped","score":9}`), or the operator's reset command
/// (`reset`, one row per command; each scope it reset has its own transition row). Read and
/// written through `ToSql`/`FromSql`, never matched as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BreakerDecision {
    Transition(cmdgate_policy::breaker::Transition),
    OperatorReset,
}

impl BreakerDecision {
    /// The stored text.
    pub fn encode(&self) -> String {
        match self {
            BreakerDecision::Transition(t) => {
                serde_json::to_string(t).unwrap_or_else(|_| unreachable_transition_encoding())
            }
            BreakerDecision::OperatorReset => "reset".to_owned(),
        }
    }
}

/// A `Transition` always serializes (a tagged enum of integers); kept total rather than panicking.
fn unreachable_transition_encoding() -> String {
    r#"{"transition":"unencodable"}"#.to_owned()
}

impl rusqlite::types::ToSql for BreakerDecision {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::from(self.encode()))
    }
}

impl BreakerDecision {
    /// The value stored as `text`, if it is one.
    pub fn decode(text: &str) -> Option<BreakerDecision> {
        if text == "reset" {
            return Some(BreakerDecision::OperatorReset);
        }
        serde_json::from_str(text)
            .ok()
            .map(BreakerDecision::Transition)
    }
}

impl rusqlite::types::FromSql for BreakerDecision {
    fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let text = v.as_str()?;
        BreakerDecision::decode(text).ok_or_else(|| {
            rusqlite::types::FromSqlError::Other(format!("not a breaker decision {text:?}").into())
        })
    }
}

#[cfg(test)]
mod prune_tests {
    use super::*;

    fn db() -> Connection {
        let mut c = Connection::open_in_memory().unwrap();
        crate::store::migrate(&mut c).unwrap();
        c
    }

    fn row(at_ms: i64) -> Entry {
        Entry {
            at_ms,
            kind: Kind::Decision,
            command: Some(format!("cmd {at_ms}")),
            ..Entry::default()
        }
    }

    #[test]
    fn a_pruned_prefix_leaves_a_verifiable_chain_and_tampering_still_shows() {
        let c = db();
        for t in 1..=10 {
            append(&c, row(t * 100)).unwrap();
        }
        let p = prune(&c, 550, 2000).unwrap().expect("something pruned");
        assert_eq!((p.rows, p.decisions, p.through_id), (5, 5, 5));
        assert_eq!(p.checkpoint_id, 11);
        let report = verify(&c).unwrap();
        assert!(report.ok(), "{report:?}");
        assert_eq!(report.rows, 6, "rows 6..=10 and the checkpoint");
        // New rows continue the chain and the ids.
        assert_eq!(append(&c, row(3000)).unwrap().id, 12);
        assert!(verify(&c).unwrap().ok());
        // Deleting a kept row is still caught, as before.
        c.execute("DELETE FROM command_audit WHERE id = 7", [])
            .unwrap();
        assert_eq!(verify(&c).unwrap().broken.unwrap().id, 8);
    }

    #[test]
    fn the_newest_row_is_never_pruned_and_a_forged_cut_is_caught() {
        let c = db();
        for t in 1..=3 {
            append(&c, row(t)).unwrap();
        }
        let p = prune(&c, 1_000, 2_000).unwrap().unwrap();
        assert_eq!(p.through_id, 2, "row 3 stays");
        assert!(verify(&c).unwrap().ok());
        assert!(prune(&c, 0, 3_000).unwrap().is_none());
        // Deleting the oldest kept row without a checkpoint for it breaks the chain.
        c.execute("DELETE FROM command_audit WHERE id = 3", [])
            .unwrap();
        assert!(verify(&c).unwrap().broken.is_some());
    }
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

    fn entry(cmd: &str) -> Entry {
        Entry {
            at_ms: 1,
            kind: Kind::Decision,
            command: Some(cmd.into()),
            decision: Some(Verdict::Deny.into()),
            tiermap_revision: Some(3),
            success: Some(false),
            ..Entry::default()
        }
    }

    #[test]
    fn chain_verifies_and_detects_each_kind_of_tampering() {
        let conn = db();
        for c in ["a", "b", "c", "d"] {
            append(&conn, entry(c)).unwrap();
        }
        let ok = verify(&conn).unwrap();
        assert!(ok.ok(), "{ok:?}");
        assert_eq!((ok.rows, ok.last_id), (4, Some(4)));
        assert_eq!(get(&conn, 2).unwrap().unwrap().entry, entry("b"));

        conn.execute(
            "UPDATE command_audit SET decision = 'allow' WHERE id = 2",
            [],
        )
        .unwrap();
        let bad = verify(&conn).unwrap();
        assert_eq!(bad.broken.unwrap().id, 2);
        conn.execute(
            "UPDATE command_audit SET decision = 'deny' WHERE id = 2",
            [],
        )
        .unwrap();
        assert!(verify(&conn).unwrap().ok());

        conn.execute("DELETE FROM command_audit WHERE id = 3", [])
            .unwrap();
        let gap = verify(&conn).unwrap();
        assert_eq!(gap.broken.unwrap().id, 4);
    }

    #[test]
    fn query_filters_and_tails() {
        let conn = db();
        for c in ["ls", "rm x", "ls -la"] {
            append(&conn, entry(c)).unwrap();
        }
        let q = Query {
            contains: Some("ls".into()),
            ..Query::default()
        };
        assert_eq!(query(&conn, &q).unwrap().len(), 2);
        let tail = Query {
            limit: Some(2),
            newest: true,
            ..Query::default()
        };
        let ids: Vec<i64> = query(&conn, &tail).unwrap().iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![2, 3]);
        let after = Query {
            after_id: Some(2),
            ..Query::default()
        };
        assert_eq!(query(&conn, &after).unwrap().len(), 1);
    }
}

#[cfg(test)]
mod breaker_decision_tests {
    use super::BreakerDecision;
    use cmdgate_policy::breaker::Transition;

    #[test]
    fn breaker_decisions_round_trip_through_sqlite_and_old_rows_read_the_same() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let cases = [
            BreakerDecision::Transition(Transition::Tripped { score: 9 }),
            BreakerDecision::Transition(Transition::Reopened),
            BreakerDecision::Transition(Transition::HalfOpened),
            BreakerDecision::Transition(Transition::Closed),
            BreakerDecision::Transition(Transition::Reset),
            BreakerDecision::OperatorReset,
        ];
        for d in cases {
            let back: BreakerDecision = conn.query_row("SELECT ?1", [&d], |r| r.get(0)).unwrap();
            assert_eq!(back, d);
        }
        // Rows written before the type existed.
        let old: BreakerDecision = conn
            .query_row(r#"SELECT '{"transition":"tripped","score":5}'"#, [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(
            old,
            BreakerDecision::Transition(Transition::Tripped { score: 5 })
        );
        assert!(conn
            .query_row("SELECT 'tripped'", [], |r| r.get::<_, BreakerDecision>(0))
            .is_err());
    }

    #[test]
    fn typed_columns_keep_the_stored_text_and_the_hashed_json_of_string_columns() {
        use super::{parse_source, source_name, AuditSource, Entry, Kind, TierSeen, SOURCES};
        // The serde name (in the hashed content) is the column's text, for every value.
        for s in SOURCES {
            assert_eq!(serde_json::to_value(s).unwrap(), source_name(s));
            assert_eq!(parse_source(source_name(s)), Some(s.into()));
            assert_eq!(
                serde_json::to_value(AuditSource::from(s)).unwrap(),
                source_name(s)
            );
        }
        assert_eq!(parse_source("operator"), Some(AuditSource::Operator));
        for t in TierSeen::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
        for k in Kind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
        // Byte for byte what the string-typed entry of earlier builds serialized, so every
        // existing row's hash still verifies.
        let e = Entry {
            at_ms: 7,
            kind: Kind::Decision,
            tier: Some(TierSeen::Ask),
            decision: Some(cmdgate_policy::wire::Verdict::Ask.into()),
            source: Some(cmdgate_policy::wire::Source::TierRule.into()),
            ..Entry::default()
        };
        let nulls =
            |names: &[&str]| -> String { names.iter().map(|n| format!(",\"{n}\":null")).collect() };
        let expected = format!(
            "{{\"at_ms\":7,\"kind\":\"decision\"{}{},\"tier\":\"ask\",\"decision\":\"ask\",\
             \"source\":\"tier_rule\"{}}}",
            nulls(&[
                "session",
                "agent_id",
                "agent_type",
                "permission_mode",
                "tool_use_id",
                "cwd"
            ]),
            nulls(&["project", "tool", "command", "tool_input", "parts"]),
            nulls(&[
                "rule",
                "reason",
                "tiermap_revision",
                "sandbox",
                "latency_us",
                "success",
                "exit_code",
                "interrupted",
                "duration_ms",
                "error",
                "decision_id",
                "peer",
                "note"
            ]),
        );
        assert_eq!(serde_json::to_string(&e).unwrap(), expected);
        // And a row written with those texts reads back typed; an unknown source is an error.
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        crate::store::migrations::MIGRATIONS
            .iter()
            .for_each(|m| conn.execute_batch(m).unwrap());
        let row = super::append(&conn, e.clone()).unwrap();
        assert_eq!(super::get(&conn, row.id).unwrap().unwrap().entry, e);
        assert!(super::verify(&conn).unwrap().ok());
        conn.execute("UPDATE command_audit SET source = 'tier_map'", [])
            .unwrap();
        assert!(super::get(&conn, row.id).is_err());
    }

    #[test]
    fn audit_kinds_round_trip_through_sqlite_and_unknown_ones_are_refused() {
        use super::Kind;
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        for k in [
            Kind::Decision,
            Kind::Outcome,
            Kind::LocalAllow,
            Kind::EscapeHatch,
            Kind::RefusedPeer,
            Kind::Tiermap,
            Kind::Breaker,
            Kind::Learn,
            Kind::Rule,
        ] {
            let text: String = conn.query_row("SELECT ?1", [&k], |r| r.get(0)).unwrap();
            assert_eq!(text, k.as_str());
            let back: Kind = conn.query_row("SELECT ?1", [&k], |r| r.get(0)).unwrap();
            assert_eq!(back, k);
        }
        assert!(conn
            .query_row("SELECT 'decisions'", [], |r| r.get::<_, Kind>(0))
            .is_err());
    }
}

#[cfg(test)]
mod audit_decision_tests {
    use super::*;
    use cmdgate_policy::breaker::Transition;

    /// Every value the daemon writes.
    fn every_written() -> Vec<AuditDecision> {
        let mut all: Vec<AuditDecision> = VERDICTS.into_iter().map(Into::into).collect();
        all.push(AuditDecision::Mirrored);
        all.extend(RunEvent::ALL.iter().map(|&e| AuditDecision::from(e)));
        all.extend(TiermapEvent::ALL.iter().map(|&e| AuditDecision::from(e)));
        all.extend(LearnChange::ALL.iter().map(|&e| AuditDecision::from(e)));
        all.extend(RuleChange::ALL.iter().map(|&e| AuditDecision::from(e)));
        all.extend(HatchChange::ALL.iter().map(|&e| AuditDecision::from(e)));
        all.extend(IntegrityEvent::ALL.iter().map(|&e| AuditDecision::from(e)));
        all.extend(
            [
                Transition::Tripped { score: 9 },
                Transition::Reopened,
                Transition::HalfOpened,
                Transition::Closed,
                Transition::Reset,
            ]
            .map(|t| AuditDecision::from(BreakerDecision::Transition(t))),
        );
        all.push(BreakerDecision::OperatorReset.into());
        all
    }

    #[test]
    fn every_written_decision_reads_back_as_itself_and_the_texts_are_disjoint() {
        let all = every_written();
        let texts: std::collections::HashSet<String> =
            all.iter().map(|d| d.text().into_owned()).collect();
        assert_eq!(texts.len(), all.len(), "two values share a stored text");
        let conn = Connection::open_in_memory().unwrap();
        for d in all {
            assert_eq!(AuditDecision::parse(&d.text()), d);
            // The column and the hashed JSON hold the same text.
            let stored: String = conn.query_row("SELECT ?1", [&d], |r| r.get(0)).unwrap();
            assert_eq!(stored, d.text());
            assert_eq!(serde_json::to_value(&d).unwrap(), stored.as_str());
            let back: AuditDecision = conn.query_row("SELECT ?1", [&d], |r| r.get(0)).unwrap();
            assert_eq!(back, d);
            let json: AuditDecision =
                serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
            assert_eq!(json, d);
        }
    }

    #[test]
    fn the_texts_of_earlier_builds_keep_their_meaning() {
        // What the string-typed column held, row kind by row kind.
        let cases: [(&str, AuditDecision); 12] = [
            ("allow", Verdict::Allow.into()),
            ("deny", Verdict::Deny.into()),
            ("ask", Verdict::Ask.into()),
            ("run", AuditDecision::Mirrored),
            ("rolled_back", RunEvent::RolledBack.into()),
            ("apply_refused", RunEvent::ApplyRefused.into()),
            ("accepted", TiermapEvent::Accepted.into()),
            ("demoted", LearnChange::Demoted.into()),
            ("always_ask", RuleChange::AlwaysAsk.into()),
            ("revoked", HatchChange::Revoked.into()),
            ("rewrite_ignored", IntegrityEvent::RewriteIgnored.into()),
            (
                r#"{"transition":"tripped","score":5}"#,
                BreakerDecision::Transition(Transition::Tripped { score: 5 }).into(),
            ),
        ];
        for (text, d) in cases {
            assert_eq!(AuditDecision::parse(text), d, "{text}");
        }
    }

    #[test]
    fn unknown_text_reads_back_unchanged_and_is_never_a_verdict() {
        let conn = Connection::open_in_memory().unwrap();
        crate::store::migrations::MIGRATIONS
            .iter()
            .for_each(|m| conn.execute_batch(m).unwrap());
        // A value of another build, a verdict's other spelling, and a breaker transition in a
        // key order this build does not write (re-encoding it would change the hashed bytes).
        for text in [
            "quarantined",
            "ALLOW",
            "allow ",
            "",
            r#"{"score":5,"transition":"tripped"}"#,
            r#"{"transition":"melted"}"#,
        ] {
            let d = AuditDecision::parse(text);
            assert!(matches!(d, AuditDecision::Unknown(_)), "{text:?}: {d:?}");
            assert_eq!(d.text(), text);
            assert_eq!(d.verdict(), None);
            let e = Entry {
                at_ms: 1,
                kind: Kind::Decision,
                decision: Some(d.clone()),
                ..Entry::default()
            };
            let row = append(&conn, e.clone()).unwrap();
            let stored: String = conn
                .query_row(
                    "SELECT decision FROM command_audit WHERE id = ?1",
                    [row.id],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(stored, text);
            let back = get(&conn, row.id).unwrap().unwrap();
            assert_eq!(back.entry, e);
            assert_eq!(back.entry.verdict(), None);
        }
        assert!(verify(&conn).unwrap().ok());
    }
}
