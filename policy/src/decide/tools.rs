//! Claude Code's tools other than Bash: what each one is, and its built-in policy.

use serde_json::Value;

use crate::shell::read::recursive::claude_grep;
use crate::tiermap::Snapshot;

use super::kernel::{OwnPaths, PathResolver, Seen};
use super::paths::{self, Base};
use super::persistence::persistence;
use super::protected::protected;
use super::{Context, Decision, Evidence, Request, Source};

/// A tool call, reduced to what the policy needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tool {
    /// `Bash`: a command string.
    Bash { command: String },
    /// `Read`, `NotebookRead`: reads one file.
    Read { tool: String, path: String },
    /// `Glob`, `Grep`, `LS`: reads a tree (the path is optional: the cwd). `pattern` is Glob's
    /// pattern or Grep's `glob` file filter: which files inside it are read.
    Search {
        tool: String,
        path: Option<String>,
        pattern: Option<String>,
    },
    /// `Write`, `Edit`, `MultiEdit`, `NotebookEdit`: writes one file.
    Write { tool: String, path: String },
    /// `WebFetch`, `WebSearch`: leaves the machine.
    Web { tool: String, target: String },
    /// Claude Code's own bookkeeping (`TodoWrite`, `Task`, ...): touches nothing on the host; a
    /// subagent's tool calls are hooked on their own.
    Internal { tool: String },
    /// MCP tools and anything unknown.
    Other { tool: String },
}

/// Tools that only change Claude Code's own state.
const INTERNAL: &[&str] = &[
    "TodoWrite",
    "Task",
    "Agent",
    "ExitPlanMode",
    "BashOutput",
    "KillShell",
    "KillBash",
    "ListMcpResourcesTool",
];

/// Files whose change alters what later runs (shell startup files): never written without a person.
const SHELL_RC: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".inputrc",
    ".envrc",
];

impl Tool {
    /// Reads Claude Code's `tool_name` and `tool_input`. A known tool missing its required field is
    /// an error (the caller denies), never a guess.
    pub fn from_claude(name: &str, input: &Value) -> Result<Tool, String> {
        let field = |key: &str| -> Result<String, String> {
            input
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("tool `{name}` has no string field `{key}` in tool_input"))
        };
        let optional = |key: &str| input.get(key).and_then(Value::as_str).map(str::to_owned);
        Ok(match name {
            "Bash" => Tool::Bash {
                command: field("command")?,
            },
            "Read" => Tool::Read {
                tool: name.into(),
                path: field("file_path")?,
            },
            "NotebookRead" => Tool::Read {
                tool: name.into(),
                path: field("notebook_path")?,
            },
            "Glob" => Tool::Search {
                tool: name.into(),
                path: optional("path"),
                pattern: optional("pattern"),
            },
            "Grep" => Tool::Search {
                tool: name.into(),
                path: optional("path"),
                pattern: optional("glob"),
            },
            "LS" => Tool::Search {
                tool: name.into(),
                path: optional("path"),
                pattern: None,
            },
            "Write" | "Edit" | "MultiEdit" => Tool::Write {
                tool: name.into(),
                path: field("file_path")?,
            },
            "NotebookEdit" => Tool::Write {
                tool: name.into(),
                path: field("notebook_path")?,
            },
            "WebFetch" => Tool::Web {
                tool: name.into(),
                target: field("url")?,
            },
            "WebSearch" => Tool::Web {
                tool: name.into(),
                target: field("query")?,
            },
            n if INTERNAL.contains(&n) => Tool::Internal { tool: name.into() },
            _ => Tool::Other { tool: name.into() },
        })
    }

    pub fn name(&self) -> &str {
        match self {
            Tool::Bash { .. } => "Bash",
            Tool::Read { tool, .. }
            | Tool::Search { tool, .. }
            | Tool::Write { tool, .. }
            | Tool::Web { tool, .. }
            | Tool::Internal { tool }
            | Tool::Other { tool } => tool,
        }
    }
}

pub(super) fn decide_tool(
    tool: &Tool,
    req: Request<'_>,
    ctx: Context<'_>,
    kernel: &dyn PathResolver,
) -> Decision {
    let revision = match ctx.snapshot {
        Snapshot::Verified(v) => Some(v.revision),
        Snapshot::ReadOnly { .. } => None,
    };
    let ev = |source, reason: String| Evidence {
        source,
        rule: None,
        revision,
        reason,
    };
    let base = Base {
        home: ctx.home,
        cwd: req.cwd,
    };
    let read_only = |what: &str| -> Option<Decision> {
        if let Snapshot::ReadOnly { reason } = ctx.snapshot {
            return Some(Decision::Deny(ev(
                Source::ReadOnlyMap,
                format!("{what} refused: this project is read-only because it has no valid signed tier map ({reason})"),
            )));
        }
        ctx.breaker_open.then(|| {
            Decision::Deny(ev(
                Source::Breaker,
                format!("{what} refused: read-only mode after the circuit breaker tripped; the operator resets it with `cmdgate breaker reset`"),
            ))
        })
    };
    let own = OwnPaths::resolve(ctx.own_paths, req.project_root, kernel);
    let own_deny = |tool: &str, seen: &Seen, own_path: &str| {
        Decision::Deny(Evidence {
            source: Source::Catastrophic,
            rule: Some("built-in:cmdgate-own-path".into()),
            revision,
            reason: format!(
                "`{tool}` of {} refused: it is cmdgate's own {own_path}, which no tool may read or write",
                seen.shown()
            ),
        })
    };
    match tool {
        Tool::Bash { .. } => Decision::Deny(ev(
            Source::ToolPolicy,
            "internal error: Bash reached the tool policy".into(),
        )),
        Tool::Read { tool, path } => {
            let seen = Seen::of(path, base, kernel);
            if let Some(o) = own.hit(&seen) {
                return own_deny(tool, &seen, &o);
            }
            if let Some(doubt) = seen.doubt() {
                return Decision::Ask(ev(
                    Source::ToolPolicy,
                    format!("`{tool}`: {doubt}; a person must decide"),
                ));
            }
            let shown = seen.shown();
            if seen
                .names()
                .iter()
                .any(|n| ctx.read_policy.secrets.matches(n, &[], false))
            {
                Decision::Ask(ev(
                    Source::ToolPolicy,
                    format!("`{tool}` of {shown} reads a secret path (keys, tokens, credentials); a person must decide"),
                ))
            } else {
                Decision::Allow(ev(
                    Source::BuiltinRead,
                    format!("`{tool}` of {shown} is a read outside secret paths"),
                ))
            }
        }
        Tool::Search {
            tool,
            path,
            pattern,
        } => {
            let seen = Seen::of(path.as_deref().unwrap_or("."), base, kernel);
            if let Some(o) = own.hit(&seen) {
                return own_deny(tool, &seen, &o);
            }
            if tool == "Grep" {
                // Grep reads every file below its path: one of cmdgate's own files down there is read too.
                if let Some(o) = seen.names().iter().find_map(|n| own.below(n)) {
                    return own_deny(tool, &seen, &o);
                }
            }
            if let Some(doubt) = seen.doubt() {
                return Decision::Ask(ev(
                    Source::ToolPolicy,
                    format!("`{tool}`: {doubt}; a person must decide"),
                ));
            }
            // The search must be a read where it is spelled and where it resolves.
            for dir in seen.names() {
                if let Some(d) = search_one(tool, dir, pattern.as_deref(), req, ctx, &ev) {
                    return d;
                }
            }
            Decision::Allow(ev(
                Source::BuiltinRead,
                format!(
                    "`{tool}` in {} is a read outside secret paths",
                    seen.shown()
                ),
            ))
        }
        Tool::Write { tool, path } => {
            let seen = Seen::of(path, base, kernel);
            if let Some(o) = own.hit(&seen) {
                return own_deny(tool, &seen, &o);
            }
            let shown = seen.shown();
            if let Some(d) = read_only(&format!("`{tool}` of {shown}")) {
                return d;
            }
            if let Some(doubt) = seen.doubt() {
                return Decision::Ask(ev(
                    Source::ToolPolicy,
                    format!(
                        "`{tool}`: {doubt}, so where it writes is not known; a person must decide"
                    ),
                ));
            }
            let roots = Seen::absolute(req.project_root, kernel);
            for abs in seen.names() {
                if let Some(why) = write_refusal(abs, &roots) {
                    return Decision::Ask(ev(
                        Source::ToolPolicy,
                        format!("`{tool}` of {shown} {why}; a person must decide"),
                    ));
                }
            }
            Decision::Allow(ev(
                Source::ToolPolicy,
                format!("`{tool}` of {shown} stays inside the project, outside protected paths"),
            ))
        }
        Tool::Web { tool, target } => read_only(&format!("`{tool}`")).unwrap_or_else(|| {
            Decision::Ask(ev(
                Source::ToolPolicy,
                format!("`{tool}` of `{target}` leaves the machine; a person must decide"),
            ))
        }),
        Tool::Internal { tool } => Decision::Allow(ev(
            Source::ToolPolicy,
            format!("`{tool}` only changes Claude Code's own state"),
        )),
        Tool::Other { tool } => read_only(&format!("`{tool}`")).unwrap_or_else(|| {
            Decision::Ask(ev(
                Source::ToolPolicy,
                format!("`{tool}` is not a tool cmdgate knows; a person must decide"),
            ))
        }),
    }
}

/// Why a write to `abs` (one name of the written file) needs a person, or `None`.
fn write_refusal(abs: &str, root: &Seen) -> Option<String> {
    let name = abs.rsplit('/').next().unwrap_or_default();
    if SHELL_RC.contains(&name) {
        return Some("changes a shell startup file".into());
    }
    let Some(rel) = root
        .names()
        .into_iter()
        .find(|r| paths::is_within(abs, r))
        .map(|r| abs[r.len()..].trim_start_matches('/'))
    else {
        return Some(format!(
            "writes {abs}, outside the project {}",
            root.spelled
        ));
    };
    if let Some(what) = protected(rel) {
        return Some(format!("changes a protected path: {what}"));
    }
    persistence(rel).map(|p| format!("changes {rel}, which runs later: {}", p.reason))
}

/// Glob/Grep/LS in one directory (as spelled or as resolved): `Some` when it is not a plain read.
fn search_one(
    tool: &str,
    dir: &str,
    pattern: Option<&str>,
    req: Request<'_>,
    ctx: Context<'_>,
    ev: &dyn Fn(Source, String) -> Evidence,
) -> Option<Decision> {
    // Grep reads every file under its path: the recursive rule (`shell::read::recursive`), as the
    // hook applies it.
    if tool == "Grep" {
        let secrets = &ctx.read_policy.secrets;
        let cwd = paths::normalise(req.cwd);
        return claude_grep(
            secrets,
            dir,
            pattern,
            &cwd,
            Some(req.project_root),
            ctx.read_policy.listing,
        )
        .err()
        .map(|risk| {
            Decision::Ask(ev(
                Source::ToolPolicy,
                format!(
                    "`{tool}` searches {dir} recursively, which {}; a person must decide",
                    risk.why()
                ),
            ))
        });
    }
    // The directory itself, and (for a pattern) every file the pattern could match in it.
    let secret = ctx.read_policy.secrets.matches(dir, &[], false)
        || pattern.is_some_and(|p| {
            let joined = if p.starts_with('/') {
                p.to_owned()
            } else {
                format!("{dir}/{p}")
            };
            ctx.read_policy.secrets.matches(&joined, &[], true)
        });
    secret.then(|| {
        Decision::Ask(ev(
            Source::ToolPolicy,
            format!("`{tool}` in {dir} could read secret paths (keys, tokens, credentials); a person must decide"),
        ))
    })
}
