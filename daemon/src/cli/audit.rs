//! `cmdgate audit tail [-f] | show ID | query … | verify`: the command_audit, through the admin
//! socket (or, for `verify --db`, straight from a store file, read-only).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;

use crate::api::serve;
use crate::api::types::{AuditShown, PruneAudit};
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
    /// Delete the rows before a date (UTC `YYYY-MM-DD`, or ms since the epoch; default: the
    /// config's `audit.retain_days`). A checkpoint row keeps the chain verifiable across the cut.
    Prune {
        #[arg(long)]
        before: Option<String>,
        #[arg(long)]
        json: bool,
    },
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
        e.decision.as_ref().map_or("-".into(), |d| d.text()),
        e.source.map_or("-", audit::AuditSource::as_str),
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
        AuditCommand::Prune { before, json } => {
            let (config, _) = serve::load(None)?;
            let before_ms = match before {
                Some(d) => parse_date(&d)?,
                None if config.audit.retain_days > 0 => {
                    crate::clock::now_ms() - i64::from(config.audit.retain_days) * 86_400_000
                }
                None => anyhow::bail!(
                    "give --before DATE, or set `[audit] retain_days` in config.toml (it is 0: keep everything)"
                ),
            };
            let pruned: Option<audit::Pruned> = client::call(
                &admin,
                "POST",
                "/admin/audit/prune",
                Some(&PruneAudit { before_ms }),
            )?
            .value;
            if json {
                println!("{}", json!(pruned));
                return Ok(ExitCode::SUCCESS);
            }
            match pruned {
                None => println!("nothing to prune: no row (but the newest) is older than that"),
                Some(p) => {
                    println!(
                        "pruned {} audit rows ({} decisions) through #{}; checkpoint row #{} carries \
                         that row's hash ({}), so `cmdgate audit verify` still checks every row kept.",
                        p.rows,
                        p.decisions,
                        p.through_id,
                        p.checkpoint_id,
                        &p.head_hash[..16.min(p.head_hash.len())]
                    );
                    println!(
                        "lost with them: `cmdgate tiermap preview` / `rules preview` no longer replay \
                         those {} decisions, `cmdgate export` no longer exports them (nor the \
                         outcomes and notes they carried), and `rules show` lists no provenance rows \
                         before #{} (the rules themselves stay).",
                        p.decisions,
                        p.through_id + 1
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
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

/// `YYYY-MM-DD` (UTC midnight) or milliseconds since the epoch.
fn parse_date(s: &str) -> anyhow::Result<i64> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    let parts: Vec<&str> = s.split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        anyhow::bail!("--before {s:?}: write YYYY-MM-DD (UTC) or milliseconds since the epoch");
    };
    let (y, m, d): (i64, i64, i64) = (y.parse()?, m.parse()?, d.parse()?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        anyhow::bail!("--before {s:?}: no such date");
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Ok((era * 146_097 + doe - 719_468) * 86_400_000)
}

#[cfg(test)]
mod date_tests {
    #[test]
    fn dates_are_utc_midnights() {
        assert_eq!(super::parse_date("1970-01-01").unwrap(), 0);
        assert_eq!(super::parse_date("2025-12-01").unwrap(), 1_764_547_200_000);
        assert_eq!(super::parse_date("1234").unwrap(), 1234);
        assert!(super::parse_date("2025-13-01").is_err());
        assert!(super::parse_date("yesterday").is_err());
    }
}
