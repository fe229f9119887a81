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

use anyhow::{bail, Context};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;

use crate::api::serve;
use crate::api::types::{
    AddRule, AuditRow, RuleAdded, RuleEdit, RuleEnabled, RuleRemoved, RuleShown, RulesList,
    StoredRule,
};
use crate::cli::client::{self, Outcome};
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
            let listed = client::get::<RulesList>(admin, "/admin/rules")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&listed.raw)?);
            } else {
                println!("rules revision {}", listed.value.revision);
                for r in &listed.value.rules {
                    println!("{}", rule_line(r));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Show { id, json } => {
            let shown = client::get::<RuleShown>(admin, &format!("/admin/rules/{id}"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&shown.raw)?);
            } else {
                print_shown(&shown.value);
            }
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Enable { id, edit } => {
            let path = format!("/admin/rules/{id}/enable");
            edit_rule(
                admin,
                "POST",
                &path,
                |if_revision| RuleEdit { if_revision },
                &edit,
                |done: &RuleEnabled| (format!("rule #{id} enabled"), done.revision),
            )
        }
        RulesCommand::Disable { id, edit } => {
            let path = format!("/admin/rules/{id}/disable");
            edit_rule(
                admin,
                "POST",
                &path,
                |if_revision| RuleEdit { if_revision },
                &edit,
                |done: &RuleEnabled| (format!("rule #{id} disabled"), done.revision),
            )
        }
        RulesCommand::Remove { id, edit } => {
            let path = format!("/admin/rules/{id}");
            edit_rule(
                admin,
                "DELETE",
                &path,
                |if_revision| RuleEdit { if_revision },
                &edit,
                |done: &RuleRemoved| (format!("rule #{id} removed"), done.revision),
            )
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
    let what = kind.replace('_', "-");
    let (command, note) = (rule.command.join(" "), rule.note);
    edit_rule(
        admin,
        "POST",
        "/admin/rules",
        |if_revision| AddRule {
            kind: kind.to_owned(),
            project: project.to_string_lossy().into_owned(),
            command,
            note,
            if_revision,
        },
        &rule.edit,
        |added: &RuleAdded| {
            (
                format!(
                    "rule #{} ({what}) added for `{}` in {}",
                    added.id,
                    added.key.replace('\n', " ; "),
                    added.project
                ),
                added.revision,
            )
        },
    )
}

/// Sends one revision-checked edit and prints its result; a conflict exits [`EXIT_CONFLICT`].
fn edit_rule<B: Serialize, T: DeserializeOwned>(
    admin: &std::path::Path,
    method: &str,
    path: &str,
    body: impl FnOnce(Option<i64>) -> B,
    edit: &EditOptions,
    done: impl FnOnce(&T) -> (String, i64),
) -> anyhow::Result<ExitCode> {
    let expected = match edit.revision {
        Some(r) => r,
        // Without an explicit expectation, the revision now: an edit racing another one still
        // conflicts instead of overwriting it.
        None => {
            client::get::<RulesList>(admin, "/admin/rules")?
                .value
                .revision
        }
    };
    match client::send::<B, T>(admin, method, path, Some(&body(Some(expected))))? {
        Outcome::Done(answer) => {
            if edit.json {
                println!("{}", answer.raw);
            } else {
                let (what, revision) = done(&answer.value);
                println!("{what} (rules revision {revision})");
            }
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Refused { status: 409, reply } => {
            if edit.json {
                println!(
                    "{}",
                    json!({"conflict": true, "error": reply.error, "revision": reply.revision, "expected": expected})
                );
            }
            eprintln!("cmdgate: {}", reply.error);
            Ok(ExitCode::from(EXIT_CONFLICT))
        }
        Outcome::Refused { status, reply } => {
            bail!("the daemon answered {status}: {}", reply.error)
        }
    }
}

fn rule_line(r: &StoredRule) -> String {
    // The id is not padded (it never was: the list printed it as JSON).
    format!(
        "#{} {:<10} {:<8} {} in {} (by {}, evidence {}){}",
        r.id,
        r.kind,
        if r.enabled { "enabled" } else { "disabled" },
        r.key.replace('\n', " ; "),
        r.project,
        r.created_by,
        serde_json::to_string(&r.provenance).unwrap_or_default(),
        r.note
            .as_deref()
            .map(|n| format!(" — note: {n}"))
            .unwrap_or_default()
    )
}

fn audit_line(r: &AuditRow) -> String {
    let e = &r.entry;
    let what = e
        .command
        .as_deref()
        .or(e.note.as_deref())
        .unwrap_or_default();
    let what: String = what.chars().take(80).collect::<String>().replace('\n', "⏎");
    format!(
        "  audit #{} {}  {:<9} {:<8} {}",
        r.id,
        e.at_ms,
        e.kind,
        e.decision.as_ref().map_or("-".into(), |d| d.text()),
        what
    )
}

fn print_shown(shown: &RuleShown) {
    println!("{}", rule_line(&shown.rule));
    for (title, rows) in [
        ("sources (the audit rows that earned it)", &shown.sources),
        ("history", &shown.history),
        ("requests it matched (newest first)", &shown.matched),
    ] {
        if rows.is_empty() {
            println!("{title}: none");
        } else {
            println!("{title}:");
            for r in rows {
                println!("{}", audit_line(r));
            }
        }
    }
}
