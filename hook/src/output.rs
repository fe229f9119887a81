//! The hook's answer to Claude Code, and the single place that writes it to stdout (at most once per
//! process, whoever gets there first: the logic, the watchdog's signal handler or the panic hook).

use std::sync::atomic::{AtomicU8, Ordering};

use cmdgate_policy::wire::{HookEvent, Verdict};

/// What the hook tells Claude Code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A PreToolUse decision. Printed as `hookSpecificOutput.permissionDecision`.
    Decision {
        verdict: Verdict,
        /// `permissionDecisionReason`: shown to the model on deny, to the user on allow/ask.
        reason: String,
        /// `systemMessage`: a warning shown to the user.
        system_message: Option<String>,
        /// `additionalContext`: words the model reads with the call (Claude Code 2.1.332 shows a
        /// PreToolUse answer's `additionalContext` to the model; an allow's reason it does not).
        context: Option<String>,
    },
    /// Allow, with the tool input replaced (`updatedInput`): a Bash call the daemon runs in its
    /// mirror becomes `cmdgate-run TICKET`.
    Rewrite {
        /// `permissionDecisionReason`.
        reason: String,
        /// The whole new tool input (Claude Code replaces the input object with it).
        updated_input: serde_json::Value,
    },
    /// The escape hatch: no decision (Claude Code's own rules apply), but a loud message.
    StepAside { system_message: String },
    /// Post events: exit 0 with no output is "nothing to say".
    Nothing,
}

impl Answer {
    /// A deny with `reason`.
    pub fn deny(reason: impl Into<String>) -> Answer {
        Answer::Decision {
            verdict: Verdict::Deny,
            reason: reason.into(),
            system_message: None,
            context: None,
        }
    }

    /// The JSON line to print, or `None` for [`Answer::Nothing`].
    pub fn render(&self) -> Option<String> {
        // Written out, not built as a `serde_json::Value` and displayed (a map per object, a
        // string per key: ~7 k instructions a render, three renders a call): the same bytes, keys
        // in the order a `Value`'s sorted map prints them (`render_as_value` in the tests).
        let mut out = String::with_capacity(256);
        match self {
            Answer::Decision {
                verdict,
                reason,
                system_message,
                context,
            } => {
                out.push_str("{\"hookSpecificOutput\":{");
                if let Some(c) = context {
                    out.push_str("\"additionalContext\":");
                    push_json_str(&mut out, c);
                    out.push(',');
                }
                out.push_str("\"hookEventName\":\"PreToolUse\",\"permissionDecision\":");
                push_json_str(&mut out, verdict.as_str());
                out.push_str(",\"permissionDecisionReason\":");
                push_json_str(&mut out, reason);
                out.push('}');
                if let Some(msg) = system_message {
                    out.push_str(",\"systemMessage\":");
                    push_json_str(&mut out, msg);
                }
                out.push('}');
            }
            Answer::Rewrite {
                reason,
                updated_input,
            } => {
                out.push_str(
                    "{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\
                     \"permissionDecision\":\"allow\",\"permissionDecisionReason\":",
                );
                push_json_str(&mut out, reason);
                out.push_str(",\"updatedInput\":");
                out.push_str(&updated_input.to_string());
                out.push_str("}}");
            }
            Answer::StepAside { system_message } => {
                out.push_str("{\"systemMessage\":");
                push_json_str(&mut out, system_message);
                out.push('}');
            }
            Answer::Nothing => return None,
        }
        out.push('\n');
        Some(out)
    }
}

/// Appends `s` as a JSON string, escaped as `serde_json` escapes it.
fn push_json_str(out: &mut String, s: &str) {
    let mut buf = Vec::with_capacity(s.len() + 2);
    // Writing a `&str` into a `Vec` cannot fail, and what it writes is UTF-8.
    if serde_json::to_writer(&mut buf, s).is_ok() {
        out.push_str(&String::from_utf8_lossy(&buf));
    }
}

/// Which event this process is answering, as far as it is known: picks the fail-closed answer of the
/// watchdog and the panic hook. 0 = unknown (answered like PreToolUse: deny).
static EVENT: AtomicU8 = AtomicU8::new(0);

/// Records the event once the input says it.
pub fn set_event(event: HookEvent) {
    let code = match event {
        HookEvent::PreToolUse => 1,
        HookEvent::PostToolUse => 2,
        HookEvent::PostToolUseFailure => 3,
    };
    EVENT.store(code, Ordering::SeqCst);
}

/// Whether the event being answered is a Post event, whose answer is always "nothing" (the tool
/// already ran). Async-signal-safe: one atomic load.
pub fn answers_nothing() -> bool {
    matches!(EVENT.load(Ordering::SeqCst), 2 | 3)
}

/// The answer when something went wrong: deny for PreToolUse (and for an input whose event is
/// unknown), nothing for the Post events (the tool already ran; there is nothing to decide).
pub fn fail_closed(why: &str) -> Answer {
    if answers_nothing() {
        return Answer::Nothing;
    }
    fail_closed_deny(why)
}

/// The PreToolUse deny of [`fail_closed`], whatever the event (the watchdog renders it before the
/// event is known and prints it only if the event turns out not to be a Post event).
pub fn fail_closed_deny(why: &str) -> Answer {
    Answer::deny(format!(
        "cmdgate refused this tool call because the hook could not decide safely: {why}. \
         Nothing was run. Reads (ls, cat, git status/log/diff, Read, Glob, Grep) are allowed \
         when the hook works; if this persists, the operator should check the cmdgate install \
         (`cmdgate status`)."
    ))
}

/// Who owns stdout: nobody yet, an answer being written, or an answer written. An atomic, not a
/// lock, so that the watchdog's signal handler, which interrupts the same thread, can ask.
static STDOUT: AtomicU8 = AtomicU8::new(FREE);
const FREE: u8 = 0;
const WRITING: u8 = 1;
const WRITTEN: u8 = 2;

/// What [`claim`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// stdout is the caller's: it writes the one answer, then calls [`written`].
    Mine,
    /// An answer is being written (the caller interrupted it).
    Writing,
    /// An answer was written (or there was nothing to write).
    Written,
}

/// Takes stdout for the one answer of this process. Async-signal-safe: one atomic operation.
pub fn claim() -> Claim {
    match STDOUT.compare_exchange(FREE, WRITING, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => Claim::Mine,
        Err(WRITING) => Claim::Writing,
        Err(_) => Claim::Written,
    }
}

/// Marks the answer claimed with [`claim`] as written.
pub fn written() {
    STDOUT.store(WRITTEN, Ordering::SeqCst);
}

/// What [`emit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emitted {
    /// This call wrote the answer (or had nothing to write).
    Wrote,
    /// Another answer was written before (by the watchdog or the panic hook).
    Already,
    /// Writing to stdout failed.
    Failed,
}

/// Writes `answer` unless one was written already. The line is rendered before stdout is
/// claimed, so stdout is "being written" only during the write itself: a deadline that passes
/// then ends the process with exit 2 (Claude Code blocks the call) rather than a second answer.
pub fn emit(answer: &Answer) -> Emitted {
    let line = answer.render();
    if claim() != Claim::Mine {
        return Emitted::Already;
    }
    let Some(line) = line else {
        written();
        return Emitted::Wrote;
    };
    // One raw `write(2)` loop on fd 1, not `std::io::stdout()` (its lazily built, locked and
    // buffered handle cost ~40 k instructions, most of a first allocation of 1 KiB).
    match crate::watchdog::write_stdout(line.as_bytes()) {
        Ok(()) => {
            written();
            Emitted::Wrote
        }
        // Left "being written": the process ends with exit 2 whoever ends it.
        Err(_) => Emitted::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_claude_code_shapes() {
        let a = Answer::deny("no");
        assert_eq!(
            a.render().unwrap(),
            "{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"permissionDecision\":\"deny\",\"permissionDecisionReason\":\"no\"}}\n"
        );
        let s = Answer::StepAside {
            system_message: "hatch".into(),
        };
        assert_eq!(s.render().unwrap(), "{\"systemMessage\":\"hatch\"}\n");
        assert_eq!(Answer::Nothing.render(), None);
    }

    /// The answer as it was printed before it was written out: a `Value`, displayed.
    fn render_as_value(a: &Answer) -> Option<String> {
        let v = match a {
            Answer::Decision {
                verdict,
                reason,
                system_message,
                context,
            } => {
                let mut v = json!({
                    "hookSpecificOutput": {
                        "hookEventName": "PreToolUse",
                        "permissionDecision": verdict.as_str(),
                        "permissionDecisionReason": reason,
                    }
                });
                if let Some(msg) = system_message {
                    v["systemMessage"] = json!(msg);
                }
                if let Some(c) = context {
                    v["hookSpecificOutput"]["additionalContext"] = json!(c);
                }
                v
            }
            Answer::Rewrite {
                reason,
                updated_input,
            } => json!({
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "allow",
                    "permissionDecisionReason": reason,
                    "updatedInput": updated_input,
                }
            }),
            Answer::StepAside { system_message } => json!({ "systemMessage": system_message }),
            Answer::Nothing => return None,
        };
        Some(format!("{v}\n"))
    }

    #[test]
    fn renders_the_bytes_a_value_would() {
        let texts = [
            "",
            "plain",
            "quote \" backslash \\ slash /",
            "new\nline\ttab\r\u{0}\u{1f}\u{7f}",
            "é ✓ \u{2028} \u{feff} 😀",
        ];
        for t in texts {
            for verdict in [Verdict::Allow, Verdict::Deny, Verdict::Ask] {
                for system_message in [None, Some(t.to_owned())] {
                    for context in [None, Some(format!("ctx {t}"))] {
                        let a = Answer::Decision {
                            verdict,
                            reason: t.to_owned(),
                            system_message: system_message.clone(),
                            context,
                        };
                        assert_eq!(a.render(), render_as_value(&a), "{a:?}");
                    }
                }
            }
            let r = Answer::Rewrite {
                reason: t.to_owned(),
                updated_input: json!({"command": t, "description": "d", "z": [1, {"b": t, "a": null}]}),
            };
            assert_eq!(r.render(), render_as_value(&r));
            let s = Answer::StepAside {
                system_message: t.to_owned(),
            };
            assert_eq!(s.render(), render_as_value(&s));
        }
    }
}
