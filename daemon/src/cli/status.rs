//! `cmdgate status`: what the running daemon is doing (admin socket).

use std::process::ExitCode;

use crate::api::serve;
use crate::api::types::{Status, StatusRuns};
use crate::cli::client;

/// Arguments of `cmdgate status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[arg(long)]
    pub json: bool,
}

/// The serialized name of a closed value (`mode`, an approval mode, a breaker state's tag).
pub(crate) fn name_of<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(serde_json::Value::Object(o)) => match o.get("state") {
            Some(serde_json::Value::String(s)) => s.clone(),
            _ => "unknown".into(),
        },
        Ok(other) => other.to_string(),
        Err(_) => "unknown".into(),
    }
}

/// The runs section: counts of the newest run rows, then the newest runs with their undo.
fn print_runs(r: &StatusRuns) {
    if r.counted == 0 {
        println!("runs           none yet (mirrored runs: `cmdgate runs`)");
    } else {
        println!(
            "runs           {} committed, {} rolled back, {} conflict, {} failed ({} committed \
             by the operator's acceptance, {} refused tickets, {} undone, {} crash recoveries \
             at start) in the last {} run rows; {} can be undone (`cmdgate runs`)",
            r.committed,
            r.rolled_back,
            r.conflict,
            r.failed,
            r.accepted,
            r.refused,
            r.undone,
            r.recovered,
            r.counted,
            r.undoable
        );
    }
    for run in &r.recent {
        let exit = run
            .exit_code
            .map_or_else(String::new, |c| format!(" exit {c}"));
        let undo = if run.undo_available {
            format!(" (undo: `cmdgate undo {}`)", run.run_id)
        } else {
            String::new()
        };
        println!(
            "  {:<14} {:<11}{exit}  {}{undo}",
            if run.run_id.is_empty() {
                "-"
            } else {
                &run.run_id
            },
            run.status,
            run.command.replace('\n', " ; ")
        );
    }
    if let Some(problem) = &r.problem {
        println!("  problem: {problem}");
    }
}

pub fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(None)?;
    let answer = client::get::<Status>(&paths.admin_socket, "/admin/status")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&answer.raw)?);
        return Ok(ExitCode::SUCCESS);
    }
    let s = answer.value;
    println!(
        "cmdgated {} (pid {}), up {} s, mode {}",
        s.version,
        s.pid,
        s.uptime_s,
        name_of(&s.mode)
    );
    println!("decide socket  {}", s.paths.decide_socket.display());
    println!("admin socket   {}", s.paths.admin_socket.display());
    println!(
        "store          {} (last audit row {})",
        s.paths.store.display(),
        s.last_audit_id
            .map_or_else(|| "-".to_owned(), |id| id.to_string())
    );
    println!(
        "decisions      {} served, {} peers refused",
        s.decisions_served, s.peers_refused
    );
    println!("test-runs      {}", s.test_runs);
    let r = &s.reviewer;
    println!(
        "reviewer       {}",
        match (r.enabled, r.configured) {
            (true, _) => format!(
                "on: {} `{}` at {} (key: {}, timeout {} ms){}",
                r.provider,
                r.model,
                r.base_url,
                r.api_key,
                r.timeout_ms,
                r.problem
                    .as_deref()
                    .map(|p| format!(" — UNAVAILABLE: {p}; a person decides every ask"))
                    .unwrap_or_default()
            ),
            (false, true) => format!(
                "off (configured: {} `{}`; CMDGATE_REVIEWER=on turns it on for a session)",
                r.provider, r.model
            ),
            (false, false) => "off".to_owned(),
        }
    );
    println!(
        "approvals      {} mode, {} pending (`cmdgate pending`)",
        name_of(&s.approvals.mode),
        s.approvals.pending
    );
    print_runs(&s.runs);
    println!(
        "rules          {}{}",
        s.rules,
        if s.rules_stale {
            " — STALE: a reload failed after a change; every routed call is refused until it loads"
        } else {
            ""
        }
    );
    match &s.audit_failures.last {
        Some(last) if s.audit_failures.count > 0 => println!(
            "audit          INTEGRITY: {} audit write(s) failed since start; last: {} ({})",
            s.audit_failures.count, last.what, last.error
        ),
        _ => println!("audit          every write committed"),
    }
    println!("global breaker {}", name_of(&s.breakers.global.state));
    for b in &s.breakers.sessions {
        println!(
            "  session {}: {} (score {})",
            b.session.as_deref().unwrap_or("-"),
            name_of(&b.state),
            b.score
        );
    }
    for p in &s.projects {
        println!("project {}: {}", p.project, p.active);
        if let Some(problem) = &p.problem {
            println!("  problem: {problem}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
