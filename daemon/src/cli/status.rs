//! `cmdgate status`: what the running daemon is doing (admin socket).

use std::process::ExitCode;

use serde_json::Value;

use crate::api::serve;
use crate::cli::client;

/// Arguments of `cmdgate status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(None)?;
    let s = client::call(&paths.admin_socket, "GET", "/admin/status", None)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(ExitCode::SUCCESS);
    }
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    println!(
        "cmdgated {} (pid {}), up {} s, mode {}",
        text(&s["version"]),
        s["pid"],
        s["uptime_s"],
        text(&s["mode"])
    );
    println!("decide socket  {}", text(&s["paths"]["decide_socket"]));
    println!("admin socket   {}", text(&s["paths"]["admin_socket"]));
    println!(
        "store          {} (last audit row {})",
        text(&s["paths"]["store"]),
        text(&s["last_audit_id"])
    );
    println!(
        "decisions      {} served, {} peers refused",
        s["decisions_served"], s["peers_refused"]
    );
    println!("test-runs      {}", text(&s["test_runs"]));
    println!(
        "approvals      {} mode, {} pending (`cmdgate pending`)",
        text(&s["approvals"]["mode"]),
        s["approvals"]["pending"]
    );
    println!(
        "rules          {}{}",
        s["rules"],
        if s["rules_stale"] == true {
            " — STALE: a reload failed after a change; every routed call is refused until it loads"
        } else {
            ""
        }
    );
    let failures = s["audit_failures"]["count"].as_u64().unwrap_or(0);
    if failures > 0 {
        let last = &s["audit_failures"]["last"];
        println!(
            "audit          INTEGRITY: {failures} audit write(s) failed since start; last: {} ({})",
            text(&last["what"]),
            text(&last["error"])
        );
    } else {
        println!("audit          every write committed");
    }
    println!(
        "global breaker {}",
        text(&s["breakers"]["global"]["state"]["state"])
    );
    for b in s["breakers"]["sessions"].as_array().into_iter().flatten() {
        println!(
            "  session {}: {} (score {})",
            text(&b["session"]),
            text(&b["state"]["state"]),
            b["score"]
        );
    }
    for p in s["projects"].as_array().into_iter().flatten() {
        println!("project {}: {}", text(&p["project"]), text(&p["active"]));
        if let Some(problem) = p["problem"].as_str() {
            println!("  problem: {problem}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
