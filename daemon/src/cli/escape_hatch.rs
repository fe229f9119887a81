//! `cmdgate escape-hatch grant | list | revoke`: the operator's escape hatch of system mode, held by
//! the daemon (`engine::escape_hatch`): for one agent uid or one session, until an expiry, cmdgate
//! steps aside (catastrophic commands are still denied). Through the admin socket; every grant,
//! revocation and use is audited by the daemon.

use std::process::ExitCode;

use anyhow::{bail, Context};

use crate::api::serve;
use crate::api::types::{Grant, GrantHatch, HatchScope};
use crate::cli::client;

/// Arguments of `cmdgate escape-hatch`.
#[derive(Debug, clap::Args)]
pub struct EscapeHatchArgs {
    #[command(subcommand)]
    pub command: EscapeHatchCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum EscapeHatchCommand {
    /// Step aside for one agent user (name or uid) or one session, for a while.
    Grant {
        /// The agent's user name or uid.
        #[arg(long, conflicts_with = "session", required_unless_present = "session")]
        user: Option<String>,
        /// One Claude Code session id.
        #[arg(long)]
        session: Option<String>,
        /// How long, in minutes (1 to 10080).
        #[arg(long)]
        minutes: u64,
        /// Why: shown to the agent and kept in the audit.
        #[arg(long)]
        reason: String,
        #[arg(long)]
        json: bool,
    },
    /// The grants in force.
    List {
        #[arg(long)]
        json: bool,
    },
    /// End a grant now.
    Revoke {
        id: u64,
        #[arg(long)]
        json: bool,
    },
}

/// A user name or uid, as a uid (from the password database).
fn uid_of(user: &str) -> anyhow::Result<u32> {
    if let Ok(uid) = user.parse() {
        return Ok(uid);
    }
    let found = nix::unistd::User::from_name(user)
        .with_context(|| format!("cannot look up user {user}"))?;
    match found {
        Some(u) => Ok(u.uid.as_raw()),
        None => bail!("no user named {user}"),
    }
}

fn render(grant: &Grant) -> String {
    format!(
        "#{} {} until {} ms since the epoch: {} (granted by {})",
        grant.id, grant.scope, grant.until.0, grant.reason, grant.granted_by
    )
}

pub fn run(args: EscapeHatchArgs) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(None)?;
    let socket = &paths.admin_socket;
    match args.command {
        EscapeHatchCommand::Grant {
            user,
            session,
            minutes,
            reason,
            json,
        } => {
            let scope = match (user, session) {
                (Some(u), _) => HatchScope::Uid(uid_of(&u)?),
                (None, Some(s)) => HatchScope::Session(s),
                (None, None) => bail!("name --user or --session"),
            };
            let body = GrantHatch {
                scope,
                minutes,
                reason,
            };
            let grant =
                client::call::<_, Grant>(socket, "POST", "/admin/escape-hatch", Some(&body))?;
            if json {
                println!("{}", grant.raw);
            } else {
                println!("granted {}", render(&grant.value));
            }
        }
        EscapeHatchCommand::List { json } => {
            let grants =
                client::call::<(), Vec<Grant>>(socket, "GET", "/admin/escape-hatch", None)?;
            if json {
                println!("{}", grants.raw);
            } else if grants.value.is_empty() {
                println!("no escape hatch granted");
            } else {
                for g in &grants.value {
                    println!("{}", render(g));
                }
            }
        }
        EscapeHatchCommand::Revoke { id, json } => {
            let answer = client::call::<(), Grant>(
                socket,
                "DELETE",
                &format!("/admin/escape-hatch/{id}"),
                None,
            )?;
            if json {
                println!("{}", answer.raw);
            } else {
                println!("revoked {}", render(&answer.value));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
