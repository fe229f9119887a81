//! `cmdgate rules list | add | enable | disable`: remembered decisions and learned entries, with
//! their provenance, through the admin socket (the daemon audits every change).

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{json, Value};

use crate::admin_client;
use crate::serve;

/// Arguments of `cmdgate rules`.
#[derive(Debug, clap::Args)]
pub struct RulesArgs {
    #[command(subcommand)]
    pub command: RulesCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum RulesCommand {
    /// Every rule, enabled or not, with where it came from.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remember a decision for one exact command in one project.
    Add {
        /// approve, reject or always_ask.
        #[arg(long)]
        kind: String,
        /// The project root (default: the current directory).
        #[arg(long)]
        project: Option<PathBuf>,
        /// Shown to the model with a rejection.
        #[arg(long)]
        note: Option<String>,
        #[arg(long)]
        json: bool,
        /// The command, as the agent's Bash tool would receive it.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Enable a rule again.
    Enable { id: i64 },
    /// Disable a rule (kept with its provenance, never matches).
    Disable { id: i64 },
}

pub fn run(args: RulesArgs) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(None)?;
    let admin = &paths.admin_socket;
    match args.command {
        RulesCommand::List { json } => {
            let rules = admin_client::call(admin, "GET", "/admin/rules", None)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rules)?);
            } else {
                for r in rules.as_array().into_iter().flatten() {
                    let text = |v: &Value| {
                        v.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| v.to_string())
                    };
                    println!(
                        "#{:<4} {:<10} {:<8} {} in {} (by {}, evidence {})",
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
                        r["provenance"]
                    );
                }
            }
        }
        RulesCommand::Add {
            kind,
            project,
            note,
            json,
            command,
        } => {
            let project = match project {
                Some(p) => p,
                None => std::env::current_dir()?,
            };
            let body = json!({"kind": kind, "project": project, "command": command.join(" "), "note": note});
            let added = admin_client::call(admin, "POST", "/admin/rules", Some(&body))?;
            if json {
                println!("{added}");
            } else {
                println!("rule #{} added", added["id"]);
            }
        }
        RulesCommand::Enable { id } => {
            admin_client::call(admin, "POST", &format!("/admin/rules/{id}/enable"), None)?;
            println!("rule #{id} enabled");
        }
        RulesCommand::Disable { id } => {
            admin_client::call(admin, "POST", &format!("/admin/rules/{id}/disable"), None)?;
            println!("rule #{id} disabled");
        }
    }
    Ok(ExitCode::SUCCESS)
}
