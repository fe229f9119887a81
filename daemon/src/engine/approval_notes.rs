//! Operator notes on human decisions: how a person's answer (approve/reject, with an optional
//! free-text note) is written to `command_audit`, read back, and worded for the model.
//!
//! The note lives in the audit row's existing `note` column (covered by the hash chain) of a
//! `decision` row whose `source` is `human`; a remembered rule keeps its own note in `rules.note`.
//! Whatever path answers a pending approval or records Claude Code's prompt answer builds its row
//! with [`human_decision`], so `cmdgate audit show`, `cmdgate export` and the model all see the same
//! note. The row repeats the request's `tool_use_id`: the exporter takes the last decision row per
//! `tool_use_id`, so the person's answer supersedes the `ask` that preceded it.

use cmdgate_policy::decide::RuleRef;
use cmdgate_policy::wire::{Source, Verdict};

use crate::store::audit::{Entry, Kind};

/// Longest note kept, in characters (the reason the model reads must stay short).
pub const MAX_NOTE_CHARS: usize = 2000;

/// A note as stored: trimmed, control characters (newlines included) turned into spaces, at most
/// [`MAX_NOTE_CHARS`] characters; `None` when nothing is left.
pub fn clean_note(note: &str) -> Option<String> {
    let cleaned: String = note
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_NOTE_CHARS)
        .collect();
    let cleaned = cleaned.trim_end().to_owned();
    (!cleaned.is_empty()).then_some(cleaned)
}

/// The reason the model reads for a person's answer, with the note when there is one (the same
/// `Operator's note: …` wording the engine uses for a remembered rejection).
pub fn reason_for_model(verdict: Verdict, note: Option<&str>) -> String {
    let base = match verdict {
        Verdict::Allow => "the operator approved this request.",
        Verdict::Deny => "the operator rejected this request; do not retry it.",
        Verdict::Ask => "the operator has not answered this request.",
    };
    match note.and_then(clean_note) {
        Some(n) => format!("{base} Operator's note: {n}"),
        None => base.to_owned(),
    }
}

/// The audit row of a person's answer to `request` (the request's own decision row): the same
/// request and context, `source = human`, the verdict, the reason with the note, and the note.
pub fn human_decision(request: &Entry, verdict: Verdict, note: Option<&str>, at_ms: i64) -> Entry {
    Entry {
        at_ms,
        kind: Kind::Decision,
        decision: Some(verdict.into()),
        source: Some(Source::Human.into()),
        rule: None,
        reason: Some(reason_for_model(verdict, note)),
        note: note.and_then(clean_note),
        // Not this row's: the test-run and the latency belong to the request's own row.
        sandbox: None,
        latency_us: None,
        peer: None,
        success: None,
        exit_code: None,
        interrupted: None,
        duration_ms: None,
        error: None,
        decision_id: None,
        ..request.clone()
    }
}

/// The operator's note a decision row carries: its `note` when a person decided it (on other rows
/// `note` holds the hook's or the daemon's remarks, not a person's).
pub fn human_note(entry: &Entry) -> Option<&str> {
    (entry.source == Some(Source::Human.into()))
        .then_some(entry.note.as_deref())
        .flatten()
}

/// The id in a rule reference as decisions name it (`rule #12`).
pub fn rule_id(rule: &str) -> Option<i64> {
    RuleRef::parse(rule).map(|r| r.0)
}
