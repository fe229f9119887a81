//! `cmdgate rules list | show | enable | disable | remove | always-ask | remember`: remembered
//! decisions and learned entries, with their provenance and the requests they matched, through
//! the admin socket (the daemon audits every change).
//!
//! Every edit is revision-checked: it carries the rules' revision (`--revision N` from
//! `rules list`, else the current one, fetched just before), and the daemon applies it only if the
//! rules are still at that revision. Two edits racing each other therefore never silently
//! overwrite one another: the second exits with [`EXIT_CONFLICT`] and an error naming the current
//! revision.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::api::serve;
use crate::cli::client;
use crate::engine::project;

/// The exit code of an edit refused because the rules changed since the revision it was made
/// against (list them again and retry). Other failures exit 1.
pub const EXIT_CONFLICT: u8 = 3;

/// Arguments of `cmdgate rules`.
#[derive(Debug, clap::Args)]
pub struct RulesArgs {
    #[command(subcommand)]
    pub command: RulesCommand,
}

/// How a rule edit is checked and printed.
#[derive(Debug, clap::Args)]
pub struct EditOptions {
    /// Apply only if the rules are still at this revision (from `rules list`); default: the
    /// current revision, fetched first.
    #[arg(long)]
    pub revision: Option<i64>,
    #[arg(long)]
    pub json: bool,
}

/// A new rule: where, why, and the exact command.
#[derive(Debug, clap::Args)]
pub struct NewRuleArgs {
    /// The project the rule is scoped to (canonicalised; default: the project root of the current
    /// directory, the nearest ancestor holding `.git`). Rules never match in another project.
    #[arg(long)]
    pub project: Option<PathBuf>,
    /// Shown to the model with a rejection, and kept in the audit.
    #[arg(long)]
    pub note: Option<String>,
    #[command(flatten)]
    pub edit: EditOptions,
    /// The command, as the agent's Bash tool would receive it (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// What a remembered decision does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Remembered {
    /// Allow the command (never over tier 3, the breaker or a remembered rejection).
    Approve,
    /// Deny the command, telling the model the note.
    Reject,
}

#[derive(Debug, clap::Subcommand)]
pub enum RulesCommand {
    /// The rules' revision, then every rule, enabled or not, with where it came from.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One rule: the audit rows it came from, its history, and the latest requests it matched.
    Show {
        id: i64,
        #[arg(long)]
        json: bool,
    },
    /// Enable a rule again.
    Enable {
        id: i64,
        #[command(flatten)]
        edit: EditOptions,
    },
    /// Disable a rule (kept with its provenance, never matches).
    Disable {
        id: i64,
        #[command(flatten)]
        edit: EditOptions,
    },
    /// Remove a rule (its audit rows stay).
    Remove {
        id: i64,
        #[command(flatten)]
        edit: EditOptions,
    },
    /// Always ask a person before this exact command runs in the project, even if it would be
    /// allowed (test-run clean, learned, approved).
    AlwaysAsk(NewRuleArgs),
    /// Remember a decision for one exact command in one project.
    Remember {
        decision: Remembered,
        #[command(flatten)]
        rule: NewRuleArgs,
    },
    /// Which retained past requests a rule change would decide differently (replayed through the
    /// policy; nothing runs, nothing changes).
    #[command(subcommand)]
    Preview(crate::cli::preview::RuleChange),
    /// The older spelling of `remember` / `always-ask`.
    #[command(hide = true)]
    Add {
        /// approve, reject or always_ask.
        #[arg(long)]
        kind: String,
        #[command(flatten)]
        rule: NewRuleArgs,
    },
}

pub fn run(args: RulesArgs) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(None)?;
    let admin = &paths.admin_socket;
    match args.command {
        RulesCommand::List { json } => {
            let listed = client::call(admin, "GET", "/admin/rules", None)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&listed)?);
            } else {
                println!("rules revision {}", listed["revision"]);
                for r in listed["rules"].as_array().into_iter().flatten() {
                    println!("{}", rule_line(r));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Show { id, json } => {
            let shown = client::call(admin, "GET", &format!("/admin/rules/{id}"), None)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&shown)?);
            } else {
                print_shown(&shown);
            }
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Enable { id, edit } => {
            let path = format!("/admin/rules/{id}/enable");
            edit_rule(admin, "POST", &path, json!({}), &edit, |_| {
                format!("rule #{id} enabled")
            })
        }
        RulesCommand::Disable { id, edit } => {
            let path = format!("/admin/rules/{id}/disable");
            edit_rule(admin, "POST", &path, json!({}), &edit, |_| {
                format!("rule #{id} disabled")
            })
        }
        RulesCommand::Remove { id, edit } => {
            let path = format!("/admin/rules/{id}");
            edit_rule(admin, "DELETE", &path, json!({}), &edit, |_| {
                format!("rule #{id} removed")
            })
        }
        RulesCommand::AlwaysAsk(rule) => add(admin, "always_ask", rule),
        RulesCommand::Remember { decision, rule } => {
            let kind = match decision {
                Remembered::Approve => "approve",
                Remembered::Reject => "reject",
            };
            add(admin, kind, rule)
        }
        RulesCommand::Add { kind, rule } => add(admin, &kind, rule),
        RulesCommand::Preview(change) => crate::cli::preview::rules_preview(change),
    }
}

/// The canonical project root a new rule is scoped to.
fn project_of(arg: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match arg {
        // As given, canonicalised: a path that does not resolve would give a rule that never
        // matches (a rejection that silently does nothing), so it is an error.
        Some(p) => std::fs::canonicalize(&p)
            .with_context(|| format!("the project {} cannot be resolved", p.display())),
        None => Ok(project::project_root(&std::env::current_dir()?, None).0),
    }
}

fn add(admin: &std::path::Path, kind: &str, rule: NewRuleArgs) -> anyhow::Result<ExitCode> {
    let project = project_of(rule.project)?;
    let body = json!({
        "kind": kind,
        "project": project,
        "command": rule.command.join(" "),
        "note": rule.note,
    });
    let what = kind.replace('_', "-");
    edit_rule(admin, "POST", "/admin/rules", body, &rule.edit, |added| {
        format!(
            "rule #{} ({what}) added for `{}` in {}",
            added["id"],
            text(&added["key"]).replace('\n', " ; "),
            text(&added["project"])
        )
    })
}

/// Sends one revision-checked edit and prints its result; a conflict exits [`EXIT_CONFLICT`].
fn edit_rule(
    admin: &std::path::Path,
    method: &str,
    path: &str,
    mut body: Value,
    edit: &EditOptions,
    done: impl FnOnce(&Value) -> String,
) -> anyhow::Result<ExitCode> {
    let expected = match edit.revision {
        Some(r) => r,
        // Without an explicit expectation, the revision now: an edit racing another one still
        // conflicts instead of overwriting it.
        None => client::call(admin, "GET", "/admin/rules", None)?["revision"]
            .as_i64()
            .context("the daemon's rule list has no revision")?,
    };
    body["if_revision"] = json!(expected);
    let bytes = serde_json::to_vec(&body)?;
    let reply = client::request(admin, method, path, Some(&bytes), Duration::from_secs(60))?;
    let answer: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    match reply.status {
        200..=299 => {
            if edit.json {
                println!("{answer}");
            } else {
                println!("{} (rules revision {})", done(&answer), answer["revision"]);
            }
            Ok(ExitCode::SUCCESS)
        }
        409 => {
            let error = answer["error"].as_str().map_or_else(
                || String::from_utf8_lossy(&reply.body).into_owned(),
                str::to_owned,
            );
            if edit.json {
                println!(
                    "{}",
                    json!({"conflict": true, "error": error, "revision": answer["revision"], "expected": expected})
                );
            }
            eprintln!("cmdgate: {error}");
            Ok(ExitCode::from(EXIT_CONFLICT))
        }
        status => {
            let error = answer["error"].as_str().map_or_else(
                || String::from_utf8_lossy(&reply.body).into_owned(),
                str::to_owned,
            );
            bail!("the daemon answered {status}: {error}")
        }
    }
}

fn text(v: &Value) -> String {
    v.as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| v.to_string())
}

fn rule_line(r: &Value) -> String {
    format!(
        "#{:<4} {:<10} {:<8} {} in {} (by {}, evidence {}){}",
        r["id"],
        text(&r["kind"]),
        if r["enabled"] == true {
            "enabled"
        } else {
            "disabled"
        },
        text(&r["key"]).replace('\n', " ; "),
        text(&r["project"]),
        text(&r["created_by"]),
        r["provenance"],
        r["note"]
            .as_str()
            .map(|n| format!(" — note: {n}"))
            .unwrap_or_default()
    )
}

fn audit_line(r: &Value) -> String {
    let what = r["command"]
        .as_str()
        .or_else(|| r["note"].as_str())
        .unwrap_or_default();
    let what: String = what.chars().take(80).collect::<String>().replace('\n', "⏎");
    format!(
        "  audit #{:<6} {}  {:<9} {:<8} {}",
        r["id"],
        r["at_ms"],
        text(&r["kind"]),
        r["decision"].as_str().unwrap_or("-"),
        what
    )
}

fn print_shown(shown: &Value) {
    println!("{}", rule_line(&shown["rule"]));
    for (title, key) in [
        ("sources (the audit rows that earned it)", "sources"),
        ("history", "history"),
        ("requests it matched (newest first)", "matched"),
    ] {
        let rows = shown[key].as_array().cloned().unwrap_or_default();
        if rows.is_empty() {
            println!("{title}: none");
        } else {
            println!("{title}:");
            for r in &rows {
                println!("{}", audit_line(r));
            }
        }
    }
}
