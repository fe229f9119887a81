//! What the hook does with one validated call: the fast path for reads, the round trip to the daemon
//! for everything else, the escape hatch, and outcome reports for the Post events. Returns the answer
//! and the spool entries to write after it; it never prints.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cmdgate_policy::decide::RuleRef;
use cmdgate_policy::locations::Mode;
use cmdgate_policy::wire::run::{client_command, RunTicket, CLIENT_NAME};
use cmdgate_policy::wire::{
    DecideRequest, DecideResponse, HookEvent, OutcomeReport, Source, SpoolEntry, SpoolRecord,
    Verdict, DECIDE_PATH, MAX_ERROR_CHARS, MAX_RESPONSE_BYTES, OUTCOME_PATH, RECORD_PATH,
    WIRE_VERSION,
};
use serde_json::Value;

use crate::client::{self, ClientError};
use crate::config::Config;
use crate::input::HookCall;
use crate::output::Answer;
use crate::reads::{self, Local};

/// The answer, and what to append to the spool once it is printed.
#[derive(Debug)]
pub struct Plan {
    pub answer: Answer,
    pub spool: Vec<SpoolEntry>,
}

/// How much earlier than the watchdog the daemon round trip gives up, so its denial (which names
/// the daemon) wins over the watchdog's generic one.
const CLIENT_MARGIN: Duration = Duration::from_millis(30);

/// Handles one call.
pub fn handle(call: &HookCall, cfg: &Config, deadline: Instant) -> Plan {
    match call.event {
        HookEvent::PreToolUse => pre_tool_use(call, cfg, deadline),
        HookEvent::PostToolUse | HookEvent::PostToolUseFailure => post_tool_use(call, cfg),
    }
}

/// A one-line description of the call for reasons: the command, the file, or the tool.
pub fn summary(call: &HookCall) -> String {
    let input = &call.tool_input;
    let text = match (
        call.tool_name.as_str(),
        input.get("command"),
        input.get("file_path"),
    ) {
        ("Bash", Some(Value::String(c)), _) => format!("`{c}`"),
        (tool, _, Some(Value::String(p))) => format!("{tool} of {p}"),
        (tool, _, _) => match input.get("path").or_else(|| input.get("pattern")) {
            Some(Value::String(p)) => format!("{tool} {p}"),
            _ => tool.to_string(),
        },
    };
    truncate(&text, 300)
}

fn truncate(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max_chars).collect();
    out.push('…');
    out
}

fn pre_tool_use(call: &HookCall, cfg: &Config, deadline: Instant) -> Plan {
    let project_dir = cfg
        .project_dir
        .clone()
        .filter(|dir| cfg.mode == Mode::User || holds(dir, &call.cwd))
        .unwrap_or_else(|| project_root_of(&call.cwd));
    let local = reads::classify(call, cfg, Path::new(&project_dir));

    if let Some(hatch) = &cfg.escape_hatch {
        return escape_hatch(call, hatch, local);
    }

    match local {
        Local::Read {
            rule,
            tiermap_revision,
        } => Plan {
            answer: Answer::Decision {
                verdict: Verdict::Allow,
                reason: format!("cmdgate: a read ({rule}), allowed by the hook"),
                system_message: None,
                context: None,
            },
            spool: vec![SpoolEntry::LocalAllow {
                agent: call.agent.clone(),
                tool_use_id: call.tool_use_id.clone(),
                cwd: call.cwd.clone(),
                project_dir,
                tool_name: call.tool_name.clone(),
                tool_input: call.tool_input.clone(),
                rule,
                tiermap_revision,
            }],
        },
        Local::Catastrophic(_) | Local::Unanalyzable(_) | Local::Route(_) => {
            let mut note = local.note();
            if !cfg.ignored_env.is_empty() {
                note.push_str(&format!(
                    "; system mode ignored {} from the agent's environment",
                    cfg.ignored_env.join(", ")
                ));
            }
            Plan {
                answer: ask_daemon(call, cfg, project_dir, note, deadline),
                spool: Vec::new(),
            }
        }
    }
}

fn escape_hatch(call: &HookCall, hatch: &str, local: Local) -> Plan {
    let (answer, verdict) = match &local {
        Local::Catastrophic(why) => (
            Answer::Decision {
                verdict: Verdict::Deny,
                reason: format!(
                    "cmdgate denied {}: {why}. This is on cmdgate's catastrophic list, which the \
                     operator's escape hatch does not lift. Do not retry it in another form.",
                    summary(call)
                ),
                system_message: Some(format!(
                    "cmdgate escape hatch is active ({hatch}) but a catastrophic command was still denied: {why}"
                )),
                context: None,
            },
            Some(Verdict::Deny),
        ),
        Local::Unanalyzable(why) => (
            Answer::Decision {
                verdict: Verdict::Ask,
                reason: format!(
                    "cmdgate's escape hatch is active, but {} could not be analysed ({why}), so it \
                     cannot be shown not to be catastrophic: a person must confirm it.",
                    summary(call)
                ),
                system_message: Some(format!("cmdgate escape hatch is active ({hatch})")),
                context: None,
            },
            Some(Verdict::Ask),
        ),
        Local::Read { .. } | Local::Route(_) => (
            Answer::StepAside {
                system_message: format!(
                    "⚠ cmdgate ESCAPE HATCH ACTIVE ({hatch}): cmdgate is not deciding this call; \
                     Claude Code's own permission rules apply. Only catastrophic commands are still denied."
                ),
            },
            None,
        ),
    };
    let spool = vec![SpoolEntry::EscapeHatch {
        agent: call.agent.clone(),
        tool_use_id: call.tool_use_id.clone(),
        cwd: call.cwd.clone(),
        tool_name: call.tool_name.clone(),
        tool_input: call.tool_input.clone(),
        reason: hatch.to_string(),
        verdict,
    }];
    Plan { answer, spool }
}

const ONLY_READS: &str = "Without the daemon only reads run: ls, cat, head, grep, find without \
    -exec/-delete, git status/log/diff/show, and the Read/Glob/Grep/LS tools outside secret paths.";

fn daemon_down_reason(call: &HookCall, cfg: &Config, note: &str, err: &ClientError) -> String {
    let socket = cfg.socket.display();
    let what = match err {
        ClientError::Connect(e) => {
            format!("the cmdgate daemon is not running (cannot connect to {socket}: {e})")
        }
        ClientError::Timeout => format!("the cmdgate daemon at {socket} did not answer in time"),
        ClientError::Io(_) | ClientError::Malformed(_) => {
            format!("the cmdgate daemon at {socket} gave no usable answer ({err})")
        }
    };
    format!(
        "cmdgate denied {}: {what}, and the hook may not allow it by itself ({note}). \
         Nothing was run. {ONLY_READS} Do not try to work around this; tell the user to start the \
         daemon with `cmdgate up` (or `systemctl --user start cmdgated`), then retry.",
        summary(call)
    )
}

fn ask_daemon(
    call: &HookCall,
    cfg: &Config,
    project_dir: String,
    note: String,
    deadline: Instant,
) -> Answer {
    let request = DecideRequest {
        v: WIRE_VERSION,
        event: HookEvent::PreToolUse,
        agent: call.agent.clone(),
        tool_use_id: call.tool_use_id.clone(),
        cwd: call.cwd.clone(),
        project_dir,
        tool_name: call.tool_name.clone(),
        tool_input: call.tool_input.clone(),
        hook_note: Some(note.clone()),
        attended: cfg.attended,
        approval_mode: cfg.approval_mode,
        wait_ms: Some(
            u64::try_from(
                deadline
                    .checked_sub(CLIENT_MARGIN)
                    .unwrap_or(deadline)
                    .saturating_duration_since(Instant::now())
                    .as_millis(),
            )
            .unwrap_or(u64::MAX),
        ),
        escape_hatch: None,
        reviewer: cfg.reviewer,
        // Only on this routed path: the fast path above never reads the transcript.
        transcript: Some(crate::transcript::user_turns(
            call.transcript_path.as_deref(),
        )),
        // `~` in the agent's commands is its shell's `$HOME`, which the daemon cannot see.
        home: cfg.home.as_ref().map(|h| h.display().to_string()),
    };
    let body = match serde_json::to_vec(&request) {
        Ok(b) => b,
        Err(e) => {
            return Answer::deny(format!(
                "cmdgate denied {}: cannot encode the request ({e})",
                summary(call)
            ))
        }
    };
    let client_deadline = deadline.checked_sub(CLIENT_MARGIN).unwrap_or(deadline);
    let response = match client::post_json(
        &cfg.socket,
        DECIDE_PATH,
        &body,
        client_deadline,
        MAX_RESPONSE_BYTES,
    ) {
        Ok(r) => r,
        Err(e) => return Answer::deny(daemon_down_reason(call, cfg, &note, &e)),
    };
    if response.status != 200 {
        let snippet = truncate(&String::from_utf8_lossy(&response.body), 200);
        return Answer::deny(daemon_down_reason(
            call,
            cfg,
            &note,
            &ClientError::Malformed(format!("HTTP status {}: {snippet}", response.status)),
        ));
    }
    let decided: DecideResponse = match serde_json::from_slice(&response.body) {
        Ok(d) => d,
        Err(e) => {
            return Answer::deny(daemon_down_reason(
                call,
                cfg,
                &note,
                &ClientError::Malformed(format!("bad JSON: {e}")),
            ))
        }
    };
    if decided.v != WIRE_VERSION {
        return Answer::deny(daemon_down_reason(
            call,
            cfg,
            &note,
            &ClientError::Malformed(format!(
                "wire version {} (this hook speaks {WIRE_VERSION})",
                decided.v
            )),
        ));
    }
    match &decided.run {
        Some(ticket) => render_run(call, &decided, ticket, client_path(), &cfg.socket),
        None => render_decision(call, &decided),
    }
}

/// Where `cmdgate-run` is: beside this hook's executable (the two are installed together).
fn client_path() -> Result<PathBuf, String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the hook's own path: {e}"))?;
    let client = exe
        .parent()
        .map(|d| d.join(CLIENT_NAME))
        .ok_or_else(|| format!("the hook's path {} has no directory", exe.display()))?;
    match std::fs::metadata(&client) {
        Ok(m) if m.is_file() => Ok(client),
        Ok(_) => Err(format!("{} is not a file", client.display())),
        Err(e) => Err(format!(
            "{CLIENT_NAME} is not installed beside the hook at {} ({e})",
            client.display()
        )),
    }
}

/// The daemon runs this call in its mirror: allow Claude Code to run the client with the ticket
/// instead of the command (every other field of the input kept; the hook's socket passed on, so
/// the client reaches the daemon the hook asked whatever the shell's environment says). Without
/// the client, deny: the command itself must never run on the host instead.
pub fn render_run(
    call: &HookCall,
    d: &DecideResponse,
    ticket: &RunTicket,
    client: Result<PathBuf, String>,
    socket: &Path,
) -> Answer {
    let client = match client {
        Ok(c) => c,
        Err(why) => {
            return Answer::deny(format!(
                "cmdgate denied {}: the daemon would run it in its mirror, but {why}. Nothing was \
                 run; tell the user the cmdgate install is incomplete (`cmdgate doctor`).",
                summary(call)
            ))
        }
    };
    let mut input = call.tool_input.clone();
    let Some(obj) = input.as_object_mut() else {
        return Answer::deny(format!(
            "cmdgate denied {}: its tool input is not an object",
            summary(call)
        ));
    };
    obj.insert(
        "command".into(),
        Value::String(client_command(
            &client.to_string_lossy(),
            Some(&socket.to_string_lossy()),
            ticket,
        )),
    );
    let mut provenance = d.source.as_str().to_string();
    if let Some(rule) = &d.rule {
        provenance.push_str(&format!(", rule {rule}"));
    }
    if let Some(rev) = d.tiermap_revision {
        provenance.push_str(&format!(", tier map revision {rev}"));
    }
    if let Some(id) = d.audit_id {
        provenance.push_str(&format!(", audit #{id}"));
    }
    Answer::Rewrite {
        reason: format!(
            "cmdgate runs {} in its mirror of the workspace ({provenance}): the output and exit \
             status are the command's; clean effects are committed to the workspace, anything else \
             is rolled back and named. {}",
            summary(call),
            truncate(&d.reason, MAX_REASON_CHARS)
        ),
        updated_input: input,
    }
}

/// Longest daemon reason passed on to the model, in characters.
const MAX_REASON_CHARS: usize = 4000;

/// Turns the daemon's decision into Claude Code's answer, with the provenance in the reason. The
/// daemon's escape hatch (an operator's grant, system mode) makes the hook step aside, loudly.
pub fn render_decision(call: &HookCall, d: &DecideResponse) -> Answer {
    if d.step_aside && d.source == Source::EscapeHatch {
        return Answer::StepAside {
            system_message: format!(
                "⚠ cmdgate ESCAPE HATCH ACTIVE (granted by the operator): cmdgate is not deciding \
                 {}; Claude Code's own permission rules apply. {}",
                summary(call),
                truncate(&d.reason, MAX_REASON_CHARS)
            ),
        };
    }
    let mut provenance = d.source.as_str().to_string();
    match &d.rule {
        // A stored rule names itself (`rule #12`); a tier-map rule is its pattern.
        Some(rule) if RuleRef::parse(rule).is_some() => provenance.push_str(&format!(", {rule}")),
        Some(rule) => provenance.push_str(&format!(", rule {rule}")),
        None => {}
    }
    if let Some(rev) = d.tiermap_revision {
        provenance.push_str(&format!(", tier map revision {rev}"));
    }
    if let Some(id) = d.audit_id {
        provenance.push_str(&format!(", audit #{id}"));
    }
    // The model reads this: the gist of a reason, not a log (the audit row keeps the whole).
    let why = truncate(&d.reason, MAX_REASON_CHARS);
    let reason = match d.decision {
        Verdict::Allow => format!("cmdgate allowed {} ({provenance}): {why}", summary(call)),
        Verdict::Deny => format!("cmdgate denied {} ({provenance}): {why}", summary(call)),
        Verdict::Ask => format!(
            "cmdgate asks a person to confirm {} ({provenance}): {why}",
            summary(call)
        ),
    };
    let system_message = match d.source {
        Source::Breaker => Some("cmdgate's circuit breaker is open: read-only mode".to_string()),
        Source::HookFastPath
        | Source::TierRule
        | Source::Builtin
        | Source::Learned
        | Source::Remembered
        | Source::Sandbox
        | Source::Human
        | Source::FailClosed
        | Source::EscapeHatch => None,
        Source::Reviewer => Some(format!(
            "cmdgate's model reviewer {} this call",
            match d.decision {
                Verdict::Allow => "allowed (once)",
                Verdict::Deny => "denied",
                Verdict::Ask => "left to you",
            }
        )),
    };
    // A person's note on an approval reaches the model only this way.
    let context = match d.decision {
        Verdict::Allow => d.context.as_deref().map(|c| truncate(c, MAX_REASON_CHARS)),
        Verdict::Deny | Verdict::Ask => None,
    };
    Answer::Decision {
        verdict: d.decision,
        reason,
        system_message,
        context,
    }
}

/// Parses `Exit code N` out of a Bash failure text.
fn exit_code_from(error: &str) -> Option<i32> {
    let rest = &error[error.find("Exit code ")? + "Exit code ".len()..];
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits.parse().ok()
}

/// The outcome report for a Post event.
pub fn outcome(call: &HookCall) -> OutcomeReport {
    let post = call.post.clone().unwrap_or(crate::input::PostInfo {
        tool_response: None,
        error: None,
        is_interrupt: None,
        duration_ms: None,
    });
    let success = call.event == HookEvent::PostToolUse;
    let response_interrupted = post
        .tool_response
        .as_ref()
        .and_then(|r| r.get("interrupted"))
        .and_then(Value::as_bool);
    let interrupted = post.is_interrupt.or(response_interrupted).unwrap_or(false);
    let exit_code = match (&post.error, success, call.tool_name.as_str()) {
        (Some(e), _, _) => exit_code_from(e),
        (None, true, "Bash") if !interrupted => Some(0),
        (None, _, _) => None,
    };
    OutcomeReport {
        v: WIRE_VERSION,
        event: call.event,
        agent: call.agent.clone(),
        tool_use_id: call.tool_use_id.clone(),
        tool_name: call.tool_name.clone(),
        success,
        exit_code,
        interrupted,
        duration_ms: post.duration_ms,
        error: post.error.as_deref().map(|e| truncate(e, MAX_ERROR_CHARS)),
        command: match (call.tool_name.as_str(), call.tool_input.get("command")) {
            ("Bash", Some(Value::String(c))) => Some(c.clone()),
            _ => None,
        },
    }
}

fn post_tool_use(call: &HookCall, cfg: &Config) -> Plan {
    let report = outcome(call);
    let undelivered = match serde_json::to_vec(&report) {
        Err(e) => Some(format!("cannot encode: {e}")),
        Ok(body) => {
            let deadline = Instant::now() + cfg.outcome_timeout;
            match client::post_json(&cfg.socket, OUTCOME_PATH, &body, deadline, 64 * 1024) {
                Ok(r) if (200..300).contains(&r.status) => None,
                Ok(r) => Some(format!("daemon answered HTTP {}", r.status)),
                Err(e) => Some(format!("daemon at {}: {e}", cfg.socket.display())),
            }
        }
    };
    let spool = match undelivered {
        None => Vec::new(),
        Some(why) => vec![SpoolEntry::Outcome {
            report,
            undelivered: why,
        }],
    };
    Plan {
        answer: Answer::Nothing,
        spool,
    }
}

/// After the answer is printed: in system mode each record of what the hook did by itself (a local
/// allow, escape-hatch use) is sent to the daemon's audit (`POST /v1/record`), because the daemon
/// cannot read the agent's spool; returns the entries left for the spool (all of them in user
/// mode, where the daemon ingests the spool; in system mode those the daemon did not take).
pub fn deliver(cfg: &Config, entries: Vec<SpoolEntry>) -> Vec<SpoolEntry> {
    if cfg.mode == Mode::User {
        return entries;
    }
    let deadline = Instant::now() + cfg.outcome_timeout;
    let mut left = Vec::new();
    for entry in entries {
        if matches!(entry, SpoolEntry::Outcome { .. }) {
            // The daemon already refused or missed it once: the spool is where it goes.
            left.push(entry);
            continue;
        }
        let record = SpoolRecord {
            v: WIRE_VERSION,
            at_ms: crate::spool::now_ms(),
            entry,
        };
        let sent = serde_json::to_vec(&record).ok().is_some_and(|body| {
            matches!(
                client::post_json(&cfg.socket, RECORD_PATH, &body, deadline, 64 * 1024),
                Ok(r) if (200..300).contains(&r.status)
            )
        });
        if !sent {
            left.push(record.entry);
        }
    }
    left
}

/// System mode takes `CLAUDE_PROJECT_DIR` only when it holds the call's `cwd` (both as the file
/// system resolves them): a variable the agent's settings can set must not borrow another
/// project's map for a command that runs here. The daemon applies the same rule.
fn holds(dir: &str, cwd: &str) -> bool {
    match (std::fs::canonicalize(dir), std::fs::canonicalize(cwd)) {
        (Ok(d), Ok(c)) => c.starts_with(d),
        _ => false,
    }
}

/// Without `CLAUDE_PROJECT_DIR` (a hook run by hand, an older Claude Code), the project is the
/// nearest ancestor of `cwd` holding `.git`, else `cwd` itself: the same rule as the daemon's
/// `project::project_root`, so both find the same `CLAUDE_CMDS.md`. A few `stat`s, no parsing.
fn project_root_of(cwd: &str) -> String {
    let mut dir = Some(Path::new(cwd));
    while let Some(d) = dir {
        if d.join(".git").exists() {
            return d.display().to_string();
        }
        dir = d.parent();
    }
    cwd.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code_from("Exit code 3\nboom"), Some(3));
        assert_eq!(exit_code_from("Error: Exit code 127"), Some(127));
        assert_eq!(exit_code_from("killed"), None);
    }

    #[test]
    fn an_allows_context_reaches_the_model_as_additional_context() {
        let call = crate::input::parse_call(
            br#"{"session_id":"s","transcript_path":"/t","cwd":"/p","hook_event_name":"PreToolUse",
                "tool_name":"Bash","tool_input":{"command":"make"},"tool_use_id":"t1"}"#,
        )
        .unwrap();
        assert_eq!(call.transcript_path.as_deref(), Some("/t"));
        let mut d = DecideResponse::fail_closed("no".into(), None, None);
        d.context = Some("Operator's note: only today".into());
        let denied = render_decision(&call, &d).render().unwrap();
        assert!(!denied.contains("additionalContext"), "{denied}");
        d.decision = Verdict::Allow;
        d.source = Source::Human;
        let allowed: serde_json::Value =
            serde_json::from_str(&render_decision(&call, &d).render().unwrap()).unwrap();
        assert_eq!(
            allowed["hookSpecificOutput"]["additionalContext"],
            "Operator's note: only today"
        );
    }

    #[test]
    fn a_stored_rule_is_named_once_a_tier_rule_by_its_pattern() {
        let call = crate::input::parse_call(
            br#"{"session_id":"s","transcript_path":"/t","cwd":"/p","hook_event_name":"PreToolUse",
                "tool_name":"Bash","tool_input":{"command":"make"},"tool_use_id":"t1"}"#,
        )
        .unwrap();
        let answer = |rule: &str| {
            let d = DecideResponse {
                v: WIRE_VERSION,
                decision: Verdict::Allow,
                reason: "ok".into(),
                source: Source::Remembered,
                rule: Some(rule.into()),
                tiermap_revision: None,
                audit_id: Some(3),
                context: None,
                run: None,
                step_aside: false,
            };
            render_decision(&call, &d).render().unwrap()
        };
        let stored = answer("rule #12");
        assert!(
            stored.contains("(remembered operator decision, rule #12, audit #3)"),
            "{stored}"
        );
        let tier = answer("`make *`");
        assert!(tier.contains(", rule `make *`,"), "{tier}");
    }

    #[test]
    fn a_run_rewrites_the_command_and_keeps_every_other_field() {
        let call = crate::input::parse_call(
            br#"{"session_id":"s","transcript_path":"/t","cwd":"/p","hook_event_name":"PreToolUse",
                "tool_name":"Bash","tool_input":{"command":"cd sub && make","description":"build",
                "timeout":9000,"run_in_background":false},"tool_use_id":"t1"}"#,
        )
        .unwrap();
        let ticket = RunTicket {
            ticket: cmdgate_policy::wire::run::ticket_from(&[5; 32]),
            cd: Some("sub".into()),
            command: "make".into(),
            expires_in_ms: 60_000,
        };
        let d = DecideResponse {
            v: WIRE_VERSION,
            decision: Verdict::Ask,
            reason: "tier 1".into(),
            source: Source::Sandbox,
            rule: None,
            tiermap_revision: Some(4),
            audit_id: Some(9),
            context: None,
            run: Some(ticket.clone()),
            step_aside: false,
        };
        let sock = Path::new("/run/c.sock");
        let client = || Ok(PathBuf::from("/opt/bin/cmdgate-run"));
        let answer = render_run(&call, &d, &ticket, client(), sock);
        let Answer::Rewrite {
            updated_input,
            reason,
        } = &answer
        else {
            panic!("{answer:?}")
        };
        assert_eq!(
            updated_input,
            &serde_json::json!({"command": format!(
                "cd sub && /opt/bin/cmdgate-run --socket /run/c.sock {}", ticket.ticket),
                "description": "build", "timeout": 9000, "run_in_background": false})
        );
        assert!(reason.contains("in its mirror"), "{reason}");
        let line = answer.render().unwrap();
        assert!(line.contains("\"permissionDecision\":\"allow\""), "{line}");
        assert!(line.contains("\"updatedInput\""), "{line}");
        // No client: a deny, never the command itself.
        let no_client = render_run(&call, &d, &ticket, Err("missing".into()), sock);
        assert!(
            matches!(&no_client, Answer::Decision { verdict: Verdict::Deny, reason, .. } if reason.contains("missing")),
            "{no_client:?}"
        );
    }

    #[test]
    fn truncation_is_char_safe() {
        assert_eq!(truncate("ééé", 2), "éé…");
        assert_eq!(truncate("abc", 3), "abc");
    }
}
