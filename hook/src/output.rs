//! The hook's answer to Claude Code, and the single place that writes it to stdout (at most once per
//! process, whoever gets there first: the logic, the watchdog or the panic hook).

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use cmdgate_policy::wire::{HookEvent, Verdict};
use serde_json::json;

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
        let v = match self {
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

/// The answer when something went wrong: deny for PreToolUse (and for an input whose event is
/// unknown), nothing for the Post events (the tool already ran; there is nothing to decide).
pub fn fail_closed(why: &str) -> Answer {
    match EVENT.load(Ordering::SeqCst) {
        2 | 3 => Answer::Nothing,
        _ => Answer::deny(format!(
            "cmdgate refused this tool call because the hook could not decide safely: {why}. \
             Nothing was run. Reads (ls, cat, git status/log/diff, Read, Glob, Grep) are allowed \
             when the hook works; if this persists, the operator should check the cmdgate install \
             (`cmdgate status`)."
        )),
    }
}

/// Guards stdout: `true` once an answer was written.
static ANSWERED: Mutex<bool> = Mutex::new(false);

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

/// Writes `answer` unless one was written already. Holding the lock for the whole write means a
/// watchdog that fires mid-write waits for it to finish instead of exiting half way.
pub fn emit(answer: &Answer) -> Emitted {
    let mut done = ANSWERED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if *done {
        return Emitted::Already;
    }
    *done = true;
    let Some(line) = answer.render() else {
        return Emitted::Wrote;
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Emitted::Wrote,
        Err(_) => Emitted::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
