//! `cmdgate pending`, `cmdgate approve ID`, `cmdgate reject ID`: the operator's side of background
//! mode (see `approvals`). Through the admin socket; the daemon audits every answer.

use std::process::ExitCode;

use crate::api::serve;
use crate::api::types::{AnswerPending, Answered, PendingInfo};
use crate::cli::client;

/// Arguments of `cmdgate pending`.
#[derive(Debug, clap::Args)]
pub struct PendingArgs {
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `cmdgate approve` and `cmdgate reject`.
#[derive(Debug, clap::Args)]
pub struct AnswerArgs {
    /// The pending request's id (`cmdgate pending`; the notification names it too).
    pub id: i64,
    /// Also remember the answer: a rule for this exact command in this project
    /// (`cmdgate rules list` shows it; `cmdgate rules disable|remove` undoes it).
    #[arg(long)]
    pub remember: bool,
    /// A note the model reads with the answer (kept with the rule and in the audit).
    #[arg(long)]
    pub note: Option<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn list(args: PendingArgs) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(None)?;
    let pending = client::get::<Vec<PendingInfo>>(&paths.admin_socket, "/admin/pending")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&pending.raw)?);
        return Ok(ExitCode::SUCCESS);
    }
    let items = pending.value;
    if items.is_empty() {
        println!("nothing is waiting for an answer");
        return Ok(ExitCode::SUCCESS);
    }
    let now = crate::clock::now_ms();
    for p in &items {
        let left = p.deadline_ms.saturating_sub(now) / 1000;
        println!(
            "#{:<6} {}  {}  (session {}, denied in {left} s unless answered)",
            p.id,
            p.tool,
            p.command.as_deref().unwrap_or("null").replace('\n', " ; "),
            p.session,
        );
        println!("        in {}", p.project.as_deref().unwrap_or("null"));
        println!("        why: {}", p.reason);
    }
    println!("answer with `cmdgate approve ID` or `cmdgate reject ID` (--remember, --note TEXT)");
    Ok(ExitCode::SUCCESS)
}

pub fn answer(args: AnswerArgs, approve: bool) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(None)?;
    let verb = if approve { "approve" } else { "reject" };
    let body = AnswerPending {
        remember: args.remember,
        note: args.note,
    };
    let answer = client::call::<_, Answered>(
        &paths.admin_socket,
        "POST",
        &format!("/admin/pending/{}/{verb}", args.id),
        Some(&body),
    )?;
    if args.json {
        println!("{}", answer.raw);
        return Ok(ExitCode::SUCCESS);
    }
    let answered = answer.value;
    let done = if approve { "approved" } else { "rejected" };
    print!("#{} {done} (audit row {})", args.id, answered.audit_id);
    if let Some(rule) = answered.rule {
        print!("; remembered as rule #{rule}");
    }
    println!();
    if !answered.delivered {
        println!(
            "the agent had stopped waiting: the call did not run, but the answer{} is recorded",
            if answered.rule.is_some() {
                " and the rule"
            } else {
                ""
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}
