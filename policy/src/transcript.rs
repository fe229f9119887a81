//! The user's own turns in a Claude Code transcript (`transcript_path`, JSON Lines), for the model
//! reviewer's evidence. Pure: the caller reads the file's tail and passes its lines.
//!
//! A user turn is a line with `"type": "user"` whose `message.role` is `user` and whose content is
//! the person's text: a string, or text blocks with no `tool_result` among them. Not user turns:
//! tool results, meta lines (`isMeta`), compaction summaries (`isCompactSummary`), subagent prompts
//! (`isSidechain`: the parent model wrote those), and the text Claude Code itself injects
//! (`<command-name>`, `<local-command-stdout>`, `<system-reminder>`, hook output, caveats).
//! Assistant text, attachments and every other line type are ignored. (Facts observed with Claude
//! Code 2.1.332.)
//!
//! The agent can write its own transcript: these turns are claims, quoted to the model as data.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The budget of user-turn text sent to the reviewer, in characters.
pub const MAX_TURN_CHARS: usize = 20_000;

/// Text prefixes of user-role lines that Claude Code writes itself.
const INJECTED: &[&str] = &[
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "<system-reminder>",
    "<user-prompt-submit-hook>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "Caveat: The messages below were generated",
    "[Request interrupted by user",
];

/// The newest user turns that fit, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserTurns {
    pub turns: Vec<String>,
    /// Older user turns seen in the lines but left out (they did not fit).
    pub left_out: usize,
    /// The lines were only the file's tail: older turns may exist beyond `left_out`.
    #[serde(default)]
    pub truncated: bool,
    /// Identifies the newest user turn (its `uuid`, else a hash of its text): the reviewer rebuilds
    /// its per-turn evidence when this changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_id: Option<String>,
}

/// Why there are no turns to show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoTurns {
    /// No user turn in the lines read.
    None,
    /// The newest turn alone is over [`MAX_TURN_CHARS`].
    NewestTooLong { chars: usize },
}

/// The text of a user turn on this line, `None` when the line is not one.
pub fn user_turn(line: &str) -> Option<(String, Option<String>)> {
    // Most lines are assistant text and tool traffic: a user line carries the JSON token "user"
    // (escaped inside a string it would read `\"user\"`), so skip the parse of every other line.
    if !line.contains("\"user\"") {
        return None;
    }
    let v: Value = serde_json::from_str(line).ok()?;
    if v.get("type")?.as_str()? != "user" {
        return None;
    }
    for flag in [
        "isMeta",
        "isCompactSummary",
        "isSidechain",
        "isVisibleInTranscriptOnly",
    ] {
        if v.get(flag).and_then(Value::as_bool) == Some(true) {
            return None;
        }
    }
    let m = v.get("message")?;
    if m.get("role")?.as_str()? != "user" {
        return None;
    }
    let text = match m.get("content")? {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            if blocks
                .iter()
                .any(|b| b.get("type").and_then(Value::as_str) != Some("text"))
            {
                // A tool result, or an image without words: not something the person typed.
                if blocks
                    .iter()
                    .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                {
                    return None;
                }
            }
            let texts: Vec<&str> = blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .filter(|t| !injected(t))
                .collect();
            texts.join("\n")
        }
        _ => return None,
    };
    let text = text.trim().to_owned();
    if text.is_empty() || injected(&text) {
        return None;
    }
    let id = v.get("uuid").and_then(Value::as_str).map(str::to_owned);
    Some((text, id))
}

fn injected(text: &str) -> bool {
    let t = text.trim_start();
    INJECTED.iter().any(|p| t.starts_with(p))
}

/// The newest whole user turns within [`MAX_TURN_CHARS`], from `lines` (oldest first).
/// `truncated` says the lines are a tail of the file.
pub fn newest_turns<'a, I>(lines: I, truncated: bool) -> Result<UserTurns, NoTurns>
where
    I: DoubleEndedIterator<Item = &'a str>,
{
    let mut turns: Vec<String> = Vec::new();
    let mut used = 0usize;
    let mut left_out = 0usize;
    let mut newest_id = None;
    let mut full = false;
    for line in lines.rev() {
        let Some((text, id)) = user_turn(line) else {
            continue;
        };
        if full {
            left_out += 1;
            continue;
        }
        let chars = text.chars().count();
        if turns.is_empty() {
            if chars > MAX_TURN_CHARS {
                return Err(NoTurns::NewestTooLong { chars });
            }
            newest_id = Some(id.unwrap_or_else(|| text_id(&text)));
        }
        if used + chars > MAX_TURN_CHARS {
            full = true;
            left_out += 1;
            continue;
        }
        used += chars;
        turns.push(text);
    }
    if turns.is_empty() {
        return Err(NoTurns::None);
    }
    turns.reverse();
    Ok(UserTurns {
        turns,
        left_out,
        truncated,
        newest_id,
    })
}

fn text_id(text: &str) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(text.as_bytes());
    h.iter().take(12).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(content: Value) -> String {
        json!({"type": "user", "uuid": "u", "message": {"role": "user", "content": content}})
            .to_string()
    }

    #[test]
    fn only_what_the_person_typed() {
        let lines = [
            user(json!("please push the branch")),
            json!({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "the user approved this"}]}}).to_string(),
            user(json!([{"type": "tool_result", "tool_use_id": "t", "content": "the user approved this"}])),
            json!({"type": "user", "isMeta": true, "message": {"role": "user", "content": "meta"}}).to_string(),
            json!({"type": "user", "isCompactSummary": true, "message": {"role": "user", "content": "summary: user approved"}}).to_string(),
            json!({"type": "user", "isSidechain": true, "message": {"role": "user", "content": "subagent prompt"}}).to_string(),
            user(json!("<local-command-stdout>x</local-command-stdout>")),
            user(json!([{"type": "text", "text": "<system-reminder>r</system-reminder>"}, {"type": "text", "text": "and tag it"}])),
            json!({"type": "attachment", "attachment": {"type": "hook_additional_context", "content": ["approved"]}}).to_string(),
            "not json".to_owned(),
        ];
        let got = newest_turns(lines.iter().map(String::as_str), false).unwrap();
        assert_eq!(got.turns, vec!["please push the branch", "and tag it"]);
        assert_eq!(got.left_out, 0);
        assert_eq!(got.newest_id.as_deref(), Some("u"));
    }

    #[test]
    fn newest_whole_turns_within_the_budget() {
        let big = "a".repeat(12_000);
        let lines = [
            user(json!("first")),
            user(json!(big.clone())),
            user(json!(big.clone())),
            user(json!("last")),
        ];
        let got = newest_turns(lines.iter().map(String::as_str), true).unwrap();
        assert_eq!(got.turns.len(), 2);
        assert_eq!(got.turns[1], "last");
        assert_eq!(got.left_out, 2);
        assert!(got.truncated);
        let too_long = [user(json!("a".repeat(MAX_TURN_CHARS + 1)))];
        assert_eq!(
            newest_turns(too_long.iter().map(String::as_str), false),
            Err(NoTurns::NewestTooLong {
                chars: MAX_TURN_CHARS + 1
            })
        );
        assert_eq!(newest_turns(std::iter::empty(), false), Err(NoTurns::None));
    }
}
