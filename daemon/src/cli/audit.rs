//! `cmdgate audit tail [-f] | show ID | query … | verify`: the command_audit, through the admin
//! socket (or, for `verify --db`, straight from a store file, read-only).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;

use crate::api::serve;
use crate::api::types::AuditShown;
use crate::cli::client;
use crate::store::audit::{self, AuditRow, ChainReport, Query};

/// Arguments of `cmdgate audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: AuditCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum AuditCommand {
    /// The newest rows; `-f` keeps printing new ones.
    Tail {
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: u32,
        #[arg(short, long)]
        follow: bool,
        #[arg(long)]
        json: bool,
    },
    /// One row with its outcomes.
    Show {
        id: i64,
        #[arg(long)]
        json: bool,
    },
    /// Rows matching every given filter, oldest first.
    Query {
        #[arg(long)]
        kind: Option<String>,
        #[arg(long)]
        session: Option<String>,
        #[arg(long)]
        project: Option<String>,
        #[arg(long)]
        tool: Option<String>,
        /// allow, deny or ask.
        #[arg(long)]
        decision: Option<String>,
        #[arg(long)]
        source: Option<String>,
        /// Substring of the command.
        #[arg(long)]
        contains: Option<String>,
        /// Only rows at or after this time (milliseconds since the epoch).
        #[arg(long)]
        since_ms: Option<i64>,
        #[arg(long)]
        after_id: Option<i64>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
    /// Counts by decision, source and tier, top denied commands, breaker trips, promotions,
    /// decision latency (read-only, straight from the store file).
    Stats(crate::cli::stats::StatsArgs),
    /// Walk the hash chain; exits 1 when it is broken.
    Verify {
        /// Verify this store file directly (read-only) instead of asking the daemon.
        #[arg(long)]
        db: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

fn line(r: &AuditRow) -> String {
    let e = &r.entry;
    let what = e
        .command
        .clone()
        .or_else(|| e.note.clone())
        .unwrap_or_default();
    let what: String = what.chars().take(80).collect::<String>().replace('\n', "⏎");
    format!(
        "{:>6}  {}  {:<12} {:<6} {:<14} {}",
        r.id,
        e.at_ms,
        e.kind,
        e.decision.as_deref().unwrap_or("-"),
        e.source.as_deref().unwrap_or("-"),
        what
    )
}

fn print(rows: &[AuditRow], json: bool) -> anyhow::Result<()> {
    for r in rows {
        if json {
            println!("{}", serde_json::to_string(r)?);
        } else {
            println!("{}", line(r));
        }
    }
    Ok(())
}

pub fn run(args: AuditArgs) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(None)?;
    let admin = paths.admin_socket.clone();
    let query = |q: &Query| -> anyhow::Result<Vec<AuditRow>> {
        Ok(
            client::call::<Query, Vec<AuditRow>>(&admin, "POST", "/admin/audit/query", Some(q))?
                .value,
        )
    };
    match args.command {
        AuditCommand::Tail {
            lines,
            follow,
            json,
        } => {
            let first = query(&Query {
                limit: Some(lines),
                newest: true,
                ..Query::default()
            })?;
            print(&first, json)?;
            let mut last = first.last().map(|r| r.id).unwrap_or(0);
            if follow {
                loop {
                    std::thread::sleep(Duration::from_millis(500));
                    let more = query(&Query {
                        after_id: Some(last),
                        limit: Some(1000),
                        ..Query::default()
                    })?;
                    print(&more, json)?;
                    last = more.last().map(|r| r.id).unwrap_or(last);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Show { id, json } => {
            let shown = client::get::<AuditShown>(&admin, &format!("/admin/audit/{id}"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&shown.raw)?);
            } else {
                let row = shown.value.row;
                let fields = serde_json::to_value(&row)?;
                for (k, val) in fields.as_object().into_iter().flatten() {
                    if !val.is_null() {
                        println!(
                            "{k:<17} {}",
                            val.as_str()
                                .map(str::to_owned)
                                .unwrap_or_else(|| val.to_string())
                        );
                    }
                }
                for o in shown.value.outcomes {
                    println!(
                        "outcome           #{} success={:?} exit={:?}",
                        o.id, o.entry.success, o.entry.exit_code
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Query {
            kind,
            session,
            project,
            tool,
            decision,
            source,
            contains,
            since_ms,
            after_id,
            limit,
            json,
        } => {
            let q = Query {
                after_id,
                kind,
                session,
                project,
                tool,
                decision,
                source,
                contains,
                since_ms,
                until_ms: None,
                limit: Some(limit),
                newest: false,
            };
            print(&query(&q)?, json)?;
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Stats(args) => crate::cli::stats::run(args),
        AuditCommand::Verify { db, json } => {
            let report: ChainReport = match db {
                Some(path) => audit::verify(&crate::store::open_read_only(&path)?)?,
                None => client::get::<ChainReport>(&admin, "/admin/audit/verify")?.value,
            };
            if json {
                println!("{}", json!(report));
            } else {
                match &report.broken {
                    None => println!(
                        "audit chain intact: {} rows, last hash {}",
                        report.rows, report.last_hash
                    ),
                    Some(b) => println!(
                        "audit chain BROKEN at row {}: {} ({} rows verified before it)",
                        b.id, b.why, report.rows
                    ),
                }
            }
            Ok(if report.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}
