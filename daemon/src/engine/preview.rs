//! Impact previews over the retained audit: `cmdgate tiermap preview NEW_MAP` and `cmdgate rules
//! preview …` replay past requests through the pure policy (`cmdgate_policy::replay`) under the
//! current and the proposed context. Nothing is executed and nothing is written: the store is read
//! through a read-only connection.
//!
//! A past request is the first decision row of each `tool_use_id` (later rows are people's answers
//! and fail-closed denials of the same request). Requests of other tools than Bash are replayed
//! from their stored input; one whose input was shortened for the audit (long values replaced by
//! their hash) cannot be rebuilt and is counted as skipped. The breaker is taken as closed on
//! both sides (the preview is about the map and the rules, not about one session's state).

use std::collections::HashSet;

use cmdgate_policy::decide::{Context, Rule, RuleSet, Tool};
use cmdgate_policy::replay::{self, Past, Report};
use cmdgate_policy::shell::read::{PackSet, ReadPolicy, SecretPaths};
use cmdgate_policy::shell::Limits;
use cmdgate_policy::tiermap::Snapshot;
use rusqlite::Connection;
use serde::Serialize;

use crate::engine::rules::rule_kind;
use crate::store::audit::{self, Query};
use crate::store::{state, StoreError};

/// Rows fetched per page while reading the audit.
const PAGE: u32 = 10_000;

/// The retained requests, oldest first, and how many rows could not be rebuilt.
pub struct History {
    pub past: Vec<Past>,
    pub skipped: usize,
    /// The oldest retained decision row (replay cannot see anything pruned before it).
    pub oldest_id: Option<i64>,
}

/// Reads every retained request (of `project` only, when given).
pub fn history(conn: &Connection, project: Option<&str>) -> Result<History, StoreError> {
    let mut out = History {
        past: Vec::new(),
        skipped: 0,
        oldest_id: None,
    };
    let mut seen: HashSet<String> = HashSet::new();
    let mut after = None;
    loop {
        let rows = audit::query(
            conn,
            &Query {
                after_id: after,
                kind: Some("decision".into()),
                project: project.map(str::to_owned),
                limit: Some(PAGE),
                ..Query::default()
            },
        )?;
        let Some(last) = rows.last() else { break };
        after = Some(last.id);
        let full = rows.len() == PAGE as usize;
        for r in rows {
            let e = r.entry;
            out.oldest_id.get_or_insert(r.id);
            if let Some(t) = &e.tool_use_id {
                if !seen.insert(t.clone()) {
                    continue;
                }
            }
            let (Some(tool), Some(project), Some(cwd)) = (e.tool, e.project, e.cwd) else {
                out.skipped += 1;
                continue;
            };
            let rebuilt = if tool == "Bash" {
                e.command.clone().map(|command| Tool::Bash { command })
            } else {
                e.tool_input
                    .as_deref()
                    .and_then(|i| serde_json::from_str(i).ok())
                    .and_then(|input| Tool::from_claude(&tool, &input).ok())
            };
            match rebuilt {
                Some(t) => out.past.push(Past {
                    id: r.id,
                    tool: t,
                    project,
                    cwd,
                    shown: e.command.unwrap_or(tool),
                }),
                None => out.skipped += 1,
            }
        }
        if !full {
            break;
        }
    }
    Ok(out)
}

/// The rules in the store, as the engine loads them (an unknown kind is an error, as at start).
pub fn rules(conn: &Connection) -> Result<RuleSet, StoreError> {
    let mut rules = Vec::new();
    for r in state::rules(conn)? {
        let kind = rule_kind(&r.kind).ok_or_else(|| {
            StoreError::Corrupt(format!("rule {} has an unknown kind {:?}", r.id, r.kind))
        })?;
        rules.push(Rule {
            id: r.id,
            kind,
            project: r.project,
            key: r.key,
            enabled: r.enabled,
            note: r.note,
        });
    }
    Ok(RuleSet::new(rules))
}

/// What stays the same on both sides of a preview: the agent's home, cmdgate's own paths and
/// the configured secret paths (added to the built-in table, as the engine does).
pub struct Fixed {
    pub home: String,
    pub own_paths: Vec<String>,
    pub extra_secrets: Vec<String>,
    /// The read packs that are on (all, unless the caller narrows them to the operator's).
    pub packs: PackSet,
}

impl Fixed {
    pub fn new(home: String, own_paths: Vec<String>, extra_secrets: &[String]) -> Fixed {
        Fixed {
            home,
            own_paths,
            extra_secrets: extra_secrets.to_vec(),
            packs: PackSet::all(),
        }
    }
}

/// One side of a preview: the map and the rules.
pub struct Side<'a> {
    pub snapshot: &'a Snapshot,
    pub rules: &'a RuleSet,
}

/// The preview's answer, with what it could not see.
#[derive(Debug, Serialize)]
pub struct Preview {
    #[serde(flatten)]
    pub report: Report,
    /// Rows that could not be rebuilt into a request.
    pub skipped: usize,
    /// The oldest retained decision row: anything pruned before it is not replayed.
    pub oldest_id: Option<i64>,
}

/// Replays `history` under `before` and `after` (for requests `include` accepts).
pub fn preview(
    history: &History,
    fixed: &Fixed,
    before: Side<'_>,
    after: Side<'_>,
    include: impl Fn(&Past) -> bool,
) -> Preview {
    let read_policy = ReadPolicy {
        home: fixed.home.clone(),
        cwd: None,
        project: None,
        secrets: std::borrow::Cow::Owned(SecretPaths::builtin(&fixed.home, &fixed.extra_secrets)),
        extension: None,
        // No IO: a recursive search is judged without a directory listing (the same on both sides).
        listing: None,
        packs: fixed.packs,
    };
    let ctx = |snapshot, rules| Context {
        snapshot,
        rules,
        breaker_open: false,
        read_policy: &read_policy,
        limits: Limits::default(),
        home: &fixed.home,
        own_paths: &fixed.own_paths,
    };
    let (b, a) = (
        ctx(before.snapshot, before.rules),
        ctx(after.snapshot, after.rules),
    );
    let report = replay::replay(&history.past, |p| include(p).then_some((b, a)));
    Preview {
        report,
        skipped: history.skipped,
        oldest_id: history.oldest_id,
    }
}
