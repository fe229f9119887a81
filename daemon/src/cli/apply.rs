//! `cmdgate runs show RUN --diff` and `cmdgate apply RUN`: read what a mirrored run changed (a
//! unified diff for text, one line for anything else) and commit a rolled-back run that was kept
//! for the operator. Through the admin socket; the daemon audits the apply as the operator's
//! decision, and `cmdgate undo RUN` reverses it.

use std::process::ExitCode;

use crate::api::serve;
use crate::api::types::{Applied, ApplyRequest, DiffSource, RunDiff};
use crate::cli::client::{self, ClientError};

/// Arguments of `cmdgate apply`.
#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// The rolled-back run to commit (`cmdgate runs`; read it first with `cmdgate runs show RUN
    /// --diff`).
    pub run: String,
    /// Also place changes to protected paths (CLAUDE_CMDS.md, `.claude/`, a repository's
    /// config/hooks/info/modules, persistence files such as `.mcp.json`); without it such a run is
    /// refused, naming them.
    #[arg(long)]
    pub include_protected: bool,
    #[arg(long)]
    pub json: bool,
}

/// Prints run `run`'s diff (text, or the reply as JSON).
pub fn show_diff(run: &str, json: bool) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(None)?;
    let diff = match client::get::<RunDiff>(&paths.admin_socket, &format!("/admin/runs/{run}/diff"))
    {
        Ok(a) => a.value,
        Err(ClientError::Status {
            status: 404,
            message,
        }) => {
            eprintln!("cmdgate: {message}");
            return Ok(ExitCode::from(4));
        }
        Err(e) => return Err(e.into()),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&diff)?);
        return Ok(ExitCode::SUCCESS);
    }
    let what = match diff.source {
        DiffSource::Kept => "rolled back and kept: the run's changes against the workspace now",
        DiffSource::Journal => "committed: the pre-images against what the commit put in place",
        DiffSource::Undone => "undone",
    };
    println!(
        "run {} in {} ({what}): {}",
        diff.run_id,
        diff.workspace.display(),
        diff.stat
    );
    print!("{}", diff.text);
    if let Some(note) = &diff.note {
        println!("note: {note}");
    }
    if diff.source == DiffSource::Kept {
        println!(
            "commit it with `cmdgate apply {}` (conflict-checked; `cmdgate undo {}` reverses it)",
            diff.run_id, diff.run_id
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `cmdgate apply RUN`: 0 applied, 3 refused (conflict, protected paths), 4 not kept.
pub fn apply(args: ApplyArgs) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(None)?;
    let body = ApplyRequest {
        include_protected: args.include_protected,
    };
    let reply = client::call::<ApplyRequest, Applied>(
        &paths.admin_socket,
        "POST",
        &format!("/admin/runs/{}/apply", args.run),
        Some(&body),
    );
    match reply {
        Ok(a) if args.json => {
            println!("{}", serde_json::to_string(&a.value)?);
            Ok(ExitCode::SUCCESS)
        }
        Ok(a) => {
            let a = a.value;
            println!(
                "applied run {}: {} paths changed (audit #{}); `cmdgate undo {}` restores them",
                a.run_id,
                a.changed.len(),
                a.audit_id,
                a.undo
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(ClientError::Status { status, message }) if status == 409 || status == 404 => {
            eprintln!("cmdgate: apply of run {} refused: {message}", args.run);
            Ok(ExitCode::from(if status == 409 { 3 } else { 4 }))
        }
        Err(e) => Err(e.into()),
    }
}
