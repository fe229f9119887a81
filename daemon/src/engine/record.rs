//! The audit rows of requests: the row a decide request opens (`request_entry`), what a tool call
//! touches in one line (`summarize_tool`), tool inputs with long strings hashed (`sanitize`), the
//! parsed parts and strictest tier of a command (`describe_parts`), and the wire source of an
//! engine source.

use cmdgate_policy::decide::{Source, Tool};
use cmdgate_policy::shell::{self, Analysis, Limits, Word};
use cmdgate_policy::tiermap::{Snapshot, Tier};
use cmdgate_policy::wire::{self, DecideRequest};
use serde_json::{json, Value};

use crate::clock;
use crate::engine::Peer;
use crate::store::audit::{Entry, Kind, TierSeen};

/// Longest string kept verbatim in an audited tool input (Write contents are hashed instead).
const MAX_AUDIT_STRING: usize = 4096;

/// The audit row of a decide request, before the decision.
pub(crate) fn request_entry(peer: Peer, req: &DecideRequest) -> Entry {
    Entry {
        at_ms: clock::now_ms(),
        kind: Kind::Decision,
        session: Some(req.agent.session_id.clone()),
        agent_id: req.agent.agent_id.clone(),
        agent_type: req.agent.agent_type.clone(),
        permission_mode: req.agent.permission_mode.clone(),
        tool_use_id: Some(req.tool_use_id.clone()),
        cwd: Some(req.cwd.clone()),
        project: Some(req.project_dir.clone()),
        tool: Some(req.tool_name.clone()),
        command: Some(summarize_tool(&req.tool_name, &req.tool_input)),
        tool_input: Some(sanitize(&req.tool_input).to_string()),
        peer: Some(peer.to_string()),
        note: match (&req.hook_note, &req.escape_hatch) {
            (Some(n), Some(h)) => Some(format!("{n}; escape hatch set: {h}")),
            (Some(n), None) => Some(n.clone()),
            (None, Some(h)) => Some(format!("escape hatch set: {h}")),
            (None, None) => None,
        },
        ..Entry::default()
    }
}

/// The command (Bash) or a one-line summary of what another tool touches.
pub(crate) fn summarize_tool(tool: &str, input: &Value) -> String {
    let field = |k: &str| input.get(k).and_then(Value::as_str);
    match tool {
        "Bash" => field("command").unwrap_or_default().to_owned(),
        _ => {
            let target = [
                "file_path",
                "notebook_path",
                "path",
                "url",
                "query",
                "pattern",
            ]
            .iter()
            .find_map(|k| field(k));
            match target {
                Some(t) => format!("{tool} {t}"),
                None => tool.to_owned(),
            }
        }
    }
}

/// The tool input with long strings replaced by their size and hash (file contents for Write).
pub(crate) fn sanitize(v: &Value) -> Value {
    match v {
        Value::String(s) if s.len() > MAX_AUDIT_STRING => {
            use sha2::Digest;
            let h = sha2::Sha256::digest(s.as_bytes());
            let hex: String = h.iter().take(16).map(|b| format!("{b:02x}")).collect();
            Value::String(format!("<{} bytes, sha256 {hex}…>", s.len()))
        }
        Value::Array(a) => Value::Array(a.iter().map(sanitize).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), sanitize(v))).collect())
        }
        other => other.clone(),
    }
}

/// Parsed parts and the strictest tier for the audit.
pub(crate) fn describe_parts(entry: &mut Entry, tool: &Tool, snapshot: &Snapshot) {
    let Tool::Bash { command } = tool else { return };
    match shell::analyze(command, &Limits::default()) {
        Analysis::Unanalyzable(u) => {
            entry.parts = serde_json::to_string(&json!({"unanalyzable": u})).ok();
            entry.tier = Some(TierSeen::Unknown);
        }
        Analysis::Parsed(script) => {
            let mut strictest: Option<Tier> = None;
            let mut unknown = false;
            let parts: Vec<Vec<String>> = script
                .commands
                .iter()
                .map(|c| {
                    let argv: Vec<&str> = c
                        .argv
                        .iter()
                        .map(|w| match w {
                            Word::Static(s) | Word::Dynamic(s) => s.as_str(),
                        })
                        .collect();
                    match snapshot.tier_map().and_then(|m| m.classify(&argv)) {
                        Some((t, _)) => {
                            strictest = Some(strictest.map_or(t, |s| {
                                if t.number() > s.number() {
                                    t
                                } else {
                                    s
                                }
                            }))
                        }
                        None => unknown = true,
                    }
                    c.argv
                        .iter()
                        .map(|w| match w {
                            Word::Static(s) => s.clone(),
                            Word::Dynamic(raw) => format!("{raw} (dynamic)"),
                        })
                        .collect()
                })
                .collect();
            entry.parts = serde_json::to_string(&parts).ok();
            entry.tier = Some(match (strictest, unknown) {
                (Some(t), false) => t.into(),
                (Some(t), true) if t.number() >= 2 => t.into(),
                _ => TierSeen::Unknown,
            });
        }
    }
}

/// The engine's source as the wire names it.
pub(crate) fn wire_source(s: Source) -> wire::Source {
    match s {
        Source::Unanalyzable => wire::Source::FailClosed,
        Source::Catastrophic | Source::ReadOnlyMap | Source::BuiltinRead | Source::ToolPolicy => {
            wire::Source::Builtin
        }
        Source::TierMap => wire::Source::TierRule,
        Source::Breaker => wire::Source::Breaker,
        Source::Remembered => wire::Source::Remembered,
        Source::Learned => wire::Source::Learned,
        Source::Sandbox => wire::Source::Sandbox,
    }
}
