//! `cmdgate runs [--json]`, `cmdgate runs show RUN`, `cmdgate undo RUN`: the mirrored runs
//! (issue 19) — what each did, whether it was committed, rolled back or conflicted, its exit
//! status — and undoing a committed one. Through the admin socket; the daemon audits an undo.

use std::process::ExitCode;

use serde_json::Value;

use crate::api::serve;
use crate::cli::client::{self, ClientError};

/// Arguments of `cmdgate runs`.
#[derive(Debug, clap::Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub show: Option<RunsCommand>,
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum RunsCommand {
    /// One run: its command, effects, status and undo state.
    Show {
        /// The run id (`cmdgate runs` lists them).
        run: String,
        /// Its changes as a unified diff (text) and one line per other change (binary, type,
        /// mode, symlink, deletion): a kept rolled-back run against the workspace now, or a
        /// committed run from its journal.
        #[arg(long)]
        diff: bool,
    },
}

/// Arguments of `cmdgate undo`.
#[derive(Debug, clap::Args)]
pub struct UndoArgs {
    /// The committed run to undo (`cmdgate runs`).
    pub run: String,
    #[arg(long)]
    pub json: bool,
}

fn text(v: &Value) -> String {
    v.as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| v.to_string())
}

/// One line per run, newest first.
fn line(run: &Value) -> String {
    let row = &run["row"];
    let undo = match run["undo_state"].as_str() {
        Some(state) => format!(" [{state}]"),
        None => String::new(),
    };
    let exit = match row["exit_code"].as_i64() {
        Some(code) => format!(" exit {code}"),
        None => String::new(),
    };
    format!(
        "{:<14} {:<11}{exit}{undo}  {}  (audit #{}, session {})",
        text(&run["run_id"]),
        text(&row["decision"]),
        text(&row["command"]).replace('\n', " ; "),
        row["id"],
        text(&row["session"]),
    )
}

pub fn run(args: RunsArgs) -> anyhow::Result<ExitCode> {
    if let Some(RunsCommand::Show { run, diff: true }) = &args.show {
        return crate::cli::apply::show_diff(run, args.json);
    }
    let (_, paths) = serve::load(None)?;
    let path = match &args.show {
        Some(RunsCommand::Show { run, .. }) => format!("/admin/runs/{run}"),
        None => "/admin/runs".to_owned(),
    };
    let reply: Value = client::get::<Value>(&paths.admin_socket, &path)?.value;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reply)?);
        return Ok(ExitCode::SUCCESS);
    }
    match args.show {
        Some(_) => {
            println!("{}", line(&reply));
            let row = &reply["row"];
            if let Some(why) = row["reason"].as_str() {
                println!("  {why}");
            }
            let detail: Value = row["sandbox"]
                .as_str()
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or(Value::Null);
            for e in detail["effects"].as_array().into_iter().flatten() {
                println!("  effect: {e}");
            }
            for key in ["conflicts", "refused"] {
                for c in detail[key].as_array().into_iter().flatten() {
                    println!("  {key}: {}", text(c));
                }
            }
            if reply["undo_state"] == "committed" {
                println!("undo with `cmdgate undo {}`", text(&reply["run_id"]));
            }
            if detail["kept_until"].is_u64() && reply["undo_state"].is_null() {
                println!(
                    "kept for the operator: read it with `cmdgate runs show {0} --diff`, commit it \
                     with `cmdgate apply {0}`",
                    text(&reply["run_id"])
                );
            }
        }
        None => {
            let runs = reply.as_array().cloned().unwrap_or_default();
            if runs.is_empty() {
                println!("no mirrored runs yet");
            }
            for r in &runs {
                println!("{}", line(r));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn undo(args: UndoArgs) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(None)?;
    let reply = client::call::<(), Value>(
        &paths.admin_socket,
        "POST",
        &format!("/admin/runs/{}/undo", args.run),
        None,
    )
    .map(|answer| answer.value);
    match reply {
        Ok(v) if args.json => {
            println!("{v}");
            Ok(ExitCode::SUCCESS)
        }
        Ok(v) => {
            let n = v["restored"].as_array().map_or(0, Vec::len);
            println!("undid run {}: {n} paths restored", args.run);
            Ok(ExitCode::SUCCESS)
        }
        Err(ClientError::Status {
            status: 409,
            message,
        }) => {
            eprintln!(
                "cmdgate: the undo of run {} was refused: {message}",
                args.run
            );
            Ok(ExitCode::from(3))
        }
        Err(e) => Err(e.into()),
    }
}
