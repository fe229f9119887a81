//! cmdgate-hook: Claude Code's PreToolUse/PostToolUse hook. Until the real hook lands it answers
//! every PreToolUse with a deny, so an early install can never fail open.

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let answer = serde_json::json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "cmdgate-hook: this build has no decision logic yet; denying (fail-closed)",
        }
    });
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{answer}").is_err() {
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}
