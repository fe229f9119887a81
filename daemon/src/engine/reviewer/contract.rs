//! The reviewer's reply contract: exactly one JSON object `{"decision": "allow-once" | "deny" |
//! "ask", "reason": "…"}` with a non-empty reason, at most [`MAX_REPLY_CHARS`] characters. Anything
//! else is a [`ContractError`], and a broken contract means the person decides.

use serde::Deserialize;

/// Longest reply accepted, in characters (the whole reply text, before parsing).
pub const MAX_REPLY_CHARS: usize = 4096;
/// Longest reason handed to the agent, in characters.
pub const MAX_REASON_CHARS: usize = 500;

/// What the reviewer may answer.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReviewDecision {
    /// Allow this one exact call; no rule, grant or learning evidence.
    AllowOnce,
    /// Deny it, with the reason for the agent.
    Deny,
    /// Leave it to the person.
    Ask,
}

impl ReviewDecision {
    /// As the contract spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewDecision::AllowOnce => "allow-once",
            ReviewDecision::Deny => "deny",
            ReviewDecision::Ask => "ask",
        }
    }

    /// The verb of the audit row (`allow`, `deny`, `ask`).
    pub fn verdict(self) -> cmdgate_policy::wire::Verdict {
        use cmdgate_policy::wire::Verdict;
        match self {
            ReviewDecision::AllowOnce => Verdict::Allow,
            ReviewDecision::Deny => Verdict::Deny,
            ReviewDecision::Ask => Verdict::Ask,
        }
    }
}

/// A reply that kept the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub decision: ReviewDecision,
    /// Trimmed, control characters turned into spaces, at most [`MAX_REASON_CHARS`] characters.
    pub reason: String,
}

/// How a reply broke the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractError {
    #[error("the reply was {chars} characters, over the {MAX_REPLY_CHARS}-character limit")]
    Overlong { chars: usize },
    #[error("the reply was not the JSON object the contract asks for ({0})")]
    Malformed(String),
    #[error("the reply's decision {0:?} is not allow-once, deny or ask")]
    UnknownDecision(String),
    #[error("the reply gave no reason")]
    EmptyReason,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    decision: String,
    reason: String,
}

/// Checks a reply against the contract. Surrounding whitespace is the only slack: no code fences,
/// no prose around the object, no extra fields.
pub fn parse_reply(text: &str) -> Result<Answer, ContractError> {
    let chars = text.chars().count();
    if chars > MAX_REPLY_CHARS {
        return Err(ContractError::Overlong { chars });
    }
    let raw: Raw =
        serde_json::from_str(text.trim()).map_err(|e| ContractError::Malformed(e.to_string()))?;
    let decision = match raw.decision.as_str() {
        "allow-once" => ReviewDecision::AllowOnce,
        "deny" => ReviewDecision::Deny,
        "ask" => ReviewDecision::Ask,
        other => return Err(ContractError::UnknownDecision(bounded(other, 40))),
    };
    let reason = bounded(&raw.reason, MAX_REASON_CHARS);
    if reason.is_empty() {
        return Err(ContractError::EmptyReason);
    }
    Ok(Answer { decision, reason })
}

/// `text` trimmed, control characters as spaces, cut to `max` characters (with `…`).
pub fn bounded(text: &str, max: usize) -> String {
    let clean: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.chars().count() <= max {
        return clean;
    }
    let mut cut: String = clean.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> (ReviewDecision, String) {
        let a = parse_reply(text).expect(text);
        (a.decision, a.reason)
    }

    #[test]
    fn the_three_answers() {
        use ReviewDecision::*;
        assert_eq!(
            ok(r#"{"decision":"allow-once","reason":"the user asked for it"}"#),
            (AllowOnce, "the user asked for it".into())
        );
        assert_eq!(ok(r#" {"decision":"deny","reason":"no"} "#).0, Deny);
        assert_eq!(ok("{\"reason\":\"unsure\",\"decision\":\"ask\"}\n").0, Ask);
    }

    #[test]
    fn anything_off_is_an_error() {
        use ContractError::*;
        type Expect = fn(&ContractError) -> bool;
        let cases: &[(&str, Expect)] = &[
            ("allow", |e| matches!(e, Malformed(_))),
            (
                "```json\n{\"decision\":\"deny\",\"reason\":\"x\"}\n```",
                |e| matches!(e, Malformed(_)),
            ),
            (r#"{"decision":"allow","reason":"x"}"#, |e| {
                matches!(e, UnknownDecision(_))
            }),
            (r#"{"decision":"ALLOW-ONCE","reason":"x"}"#, |e| {
                matches!(e, UnknownDecision(_))
            }),
            (r#"{"decision":"deny","reason":"  "}"#, |e| {
                matches!(e, EmptyReason)
            }),
            (r#"{"decision":"deny"}"#, |e| matches!(e, Malformed(_))),
            (r#"{"decision":"deny","reason":"x","remember":true}"#, |e| {
                matches!(e, Malformed(_))
            }),
            (
                r#"{"decision":"deny","decision":"allow-once","reason":"x"}"#,
                |e| matches!(e, Malformed(_)),
            ),
            (
                r#"{"decision":"deny","reason":"x"} {"decision":"allow-once","reason":"y"}"#,
                |e| matches!(e, Malformed(_)),
            ),
            (r#"[{"decision":"deny","reason":"x"}]"#, |e| {
                matches!(e, Malformed(_))
            }),
        ];
        for (text, expected) in cases {
            let e = parse_reply(text).expect_err(text);
            assert!(expected(&e), "{text}: {e:?}");
        }
        let long = format!(
            r#"{{"decision":"allow-once","reason":"{}"}}"#,
            "a".repeat(5000)
        );
        assert_eq!(
            parse_reply(&long),
            Err(Overlong {
                chars: long.chars().count()
            })
        );
    }

    #[test]
    fn reasons_are_bounded_and_single_line() {
        let r = ok(&format!(
            r#"{{"decision":"deny","reason":"line one\nline two {}"}}"#,
            "x".repeat(900)
        ))
        .1;
        assert_eq!(r.chars().count(), MAX_REASON_CHARS);
        assert!(r.starts_with("line one line two"));
        assert!(r.ends_with('…'));
    }
}
