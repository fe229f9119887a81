//! `cmdgate audit stats [--json]`: what the audit says in numbers — decisions by verdict, deciding
//! source and tier, the most denied commands, breaker trips, promotions, outcomes, and decision
//! latency percentiles — read straight from the store file over a read-only connection.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::engine::export::redact;
use cmdgate_policy::breaker::Transition;
use rusqlite::Connection;
use serde::Serialize;

use crate::cli::export::parse_time;
use crate::store::audit::{source_name, BreakerDecision, Kind, LearnChange};
use crate::store::StoreError;

/// Arguments of `cmdgate audit stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Only rows at or after: ms since the epoch, RFC 3339 UTC, or YYYY-MM-DD.
    #[arg(long, value_parser = parse_time)]
    pub since: Option<i64>,
    /// Only this project root (decisions; breaker and learning events are counted everywhere).
    #[arg(long)]
    pub project: Option<PathBuf>,
    /// How many of the most denied commands to list.
    #[arg(long, default_value_t = 10)]
    pub top: u32,
    /// Read this store file instead of the one under the state dir.
    #[arg(long)]
    pub db: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

/// Which rows the statistics cover.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsFilter {
    pub since_ms: Option<i64>,
    pub project: Option<String>,
    /// How many denied commands to list.
    pub top: u32,
}

/// The numbers.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Decided requests (daemon decisions and hook fast-path reads).
    pub decisions: u64,
    pub by_decision: BTreeMap<String, u64>,
    pub by_source: BTreeMap<String, u64>,
    pub by_tier: BTreeMap<String, u64>,
    /// Most denied commands (redacted), most frequent first.
    pub top_denied: Vec<CommandCount>,
    /// Breaker transitions to open (`tripped`, and `reopened` from half-open).
    pub breaker_trips: u64,
    pub breaker_reopens: u64,
    pub breaker_resets: u64,
    /// Learned allowlist promotions and demotions.
    pub promotions: u64,
    pub demotions: u64,
    /// Decisions a person made (`source = human`), and how many carried a note.
    pub human_decisions: u64,
    pub human_notes: u64,
    /// Real runs reported (PostToolUse / PostToolUseFailure).
    pub outcomes_succeeded: u64,
    pub outcomes_failed: u64,
    /// Daemon decision latency (request received to audit row committed), microseconds.
    pub latency_us: Option<Latency>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandCount {
    pub command: String,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Latency {
    /// Rows with a latency.
    pub samples: u64,
    /// The lower median (the value at rank ⌊n/2⌋ of the sorted latencies).
    pub median: i64,
    pub p90: i64,
    pub p99: i64,
    pub max: i64,
}

fn where_decided(filter: &StatsFilter) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value as V;
    let mut clauses = vec!["kind IN ('decision', 'local_allow')".to_owned()];
    let mut values = Vec::new();
    if let Some(v) = filter.since_ms {
        values.push(V::Integer(v));
        clauses.push(format!("at_ms >= ?{}", values.len()));
    }
    if let Some(p) = &filter.project {
        values.push(V::Text(p.clone()));
        clauses.push(format!("project = ?{}", values.len()));
    }
    (format!("WHERE {}", clauses.join(" AND ")), values)
}

fn grouped(
    conn: &Connection,
    column: &str,
    filter: &StatsFilter,
) -> Result<BTreeMap<String, u64>, StoreError> {
    let (w, values) = where_decided(filter);
    let mut stmt = conn.prepare(&format!(
        "SELECT coalesce({column}, '-'), count(*) FROM command_audit {w} GROUP BY 1"
    ))?;
    let mut rows = stmt.query(rusqlite::params_from_iter(values))?;
    let mut out = BTreeMap::new();
    while let Some(r) = rows.next()? {
        out.insert(r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64);
    }
    Ok(out)
}

fn scalar(
    conn: &Connection,
    sql: &str,
    values: Vec<rusqlite::types::Value>,
) -> Result<u64, StoreError> {
    let n: i64 = conn.query_row(sql, rusqlite::params_from_iter(values), |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

fn since(filter: &StatsFilter) -> (String, Vec<rusqlite::types::Value>) {
    match filter.since_ms {
        Some(v) => (
            " AND at_ms >= ?1".into(),
            vec![rusqlite::types::Value::Integer(v)],
        ),
        None => (String::new(), Vec::new()),
    }
}

/// Breaker trips, re-opens and operator resets, from the `breaker` audit rows' typed decisions.
#[derive(Default)]
struct BreakerCounts {
    trips: u64,
    reopens: u64,
    resets: u64,
}

fn breaker_counts(
    conn: &Connection,
    since: &str,
    values: &[rusqlite::types::Value],
) -> Result<BreakerCounts, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT decision FROM command_audit WHERE kind = '{}'{since}",
        Kind::Breaker.as_str()
    ))?;
    let decisions = stmt.query_map(rusqlite::params_from_iter(values.iter()), |r| {
        // A row in a format this build does not know counts as nothing.
        Ok(r.get::<_, BreakerDecision>(0).ok())
    })?;
    let mut n = BreakerCounts::default();
    for d in decisions {
        match d? {
            Some(BreakerDecision::Transition(Transition::Tripped { .. })) => n.trips += 1,
            Some(BreakerDecision::Transition(Transition::Reopened)) => n.reopens += 1,
            Some(BreakerDecision::OperatorReset) => n.resets += 1,
            Some(BreakerDecision::Transition(
                Transition::HalfOpened | Transition::Closed | Transition::Reset,
            ))
            | None => {}
        }
    }
    Ok(n)
}

/// Computes the statistics inside one read transaction.
pub fn stats(conn: &Connection, filter: &StatsFilter) -> Result<Stats, StoreError> {
    conn.execute_batch("BEGIN")?;
    let result = stats_in_snapshot(conn, filter);
    let _ = conn.execute_batch("COMMIT");
    result
}

fn stats_in_snapshot(conn: &Connection, filter: &StatsFilter) -> Result<Stats, StoreError> {
    let by_decision = grouped(conn, "decision", filter)?;
    let (w, values) = where_decided(filter);
    let mut top_denied = Vec::new();
    {
        let mut stmt = conn.prepare(&format!(
            "SELECT command, count(*) AS n FROM command_audit {w} AND decision = 'deny' AND command IS NOT NULL \
             GROUP BY command ORDER BY n DESC, command LIMIT {}",
            filter.top
        ))?;
        let mut rows = stmt.query(rusqlite::params_from_iter(values.clone()))?;
        while let Some(r) = rows.next()? {
            let command: String = r.get(0)?;
            top_denied.push(CommandCount {
                command: redact(&command).0,
                count: r.get::<_, i64>(1)?.max(0) as u64,
            });
        }
    }
    let (s, sv) = since(filter);
    let learned = |change: LearnChange| {
        let mut v = sv.clone();
        v.push(rusqlite::types::Value::Text(Kind::Learn.as_str().into()));
        v.push(rusqlite::types::Value::Text(change.as_str().into()));
        scalar(
            conn,
            &format!(
                "SELECT count(*) FROM command_audit WHERE kind = ?{} AND decision = ?{}{s}",
                v.len() - 1,
                v.len()
            ),
            v,
        )
    };
    let breaker = breaker_counts(conn, &s, &sv)?;
    let latency = {
        let (w, values) = where_decided(filter);
        let base =
            format!("FROM command_audit {w} AND kind = 'decision' AND latency_us IS NOT NULL");
        let n = scalar(conn, &format!("SELECT count(*) {base}"), values.clone())?;
        if n == 0 {
            None
        } else {
            let at = |rank: u64| -> Result<i64, StoreError> {
                Ok(conn.query_row(
                    &format!("SELECT latency_us {base} ORDER BY latency_us LIMIT 1 OFFSET {rank}"),
                    rusqlite::params_from_iter(values.clone()),
                    |r| r.get(0),
                )?)
            };
            Some(Latency {
                samples: n,
                median: at(n / 2)?,
                p90: at((n * 9 / 10).min(n - 1))?,
                p99: at((n * 99 / 100).min(n - 1))?,
                max: at(n - 1)?,
            })
        }
    };
    let (w, values) = where_decided(filter);
    let human = source_name(cmdgate_policy::wire::Source::Human);
    let human_decisions = scalar(
        conn,
        &format!("SELECT count(*) FROM command_audit {w} AND source = '{human}'"),
        values.clone(),
    )?;
    let human_notes = scalar(
        conn,
        &format!("SELECT count(*) FROM command_audit {w} AND source = '{human}' AND note IS NOT NULL AND note != ''"),
        values,
    )?;
    let outcomes = |success: bool| {
        let mut v = sv.clone();
        v.push(rusqlite::types::Value::Integer(i64::from(success)));
        scalar(
            conn,
            &format!(
                "SELECT count(*) FROM command_audit WHERE kind = 'outcome'{s} AND success = ?{}",
                v.len()
            ),
            v,
        )
    };
    Ok(Stats {
        decisions: by_decision.values().sum(),
        by_decision,
        by_source: grouped(conn, "source", filter)?,
        by_tier: grouped(conn, "tier", filter)?,
        top_denied,
        breaker_trips: breaker.trips,
        breaker_reopens: breaker.reopens,
        breaker_resets: breaker.resets,
        promotions: learned(LearnChange::Promoted)?,
        demotions: learned(LearnChange::Demoted)?,
        human_decisions,
        human_notes,
        outcomes_succeeded: outcomes(true)?,
        outcomes_failed: outcomes(false)?,
        latency_us: latency,
    })
}

fn print_map(title: &str, m: &BTreeMap<String, u64>) {
    println!("{title}");
    let mut v: Vec<_> = m.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (k, n) in v {
        println!("  {k:<22} {n:>10}");
    }
}

pub fn run(args: StatsArgs) -> anyhow::Result<ExitCode> {
    let db = match args.db {
        Some(p) => p,
        None => crate::api::serve::load(None)?.1.db,
    };
    if !db.exists() {
        anyhow::bail!("no store at {} (has the daemon ever run?)", db.display());
    }
    let conn = crate::store::open_read_only(&db)?;
    let filter = StatsFilter {
        since_ms: args.since,
        project: args.project.map(|p| {
            std::fs::canonicalize(&p)
                .unwrap_or(p)
                .to_string_lossy()
                .into_owned()
        }),
        top: args.top,
    };
    let s = stats(&conn, &filter)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("decided requests        {:>10}", s.decisions);
    print_map("by decision", &s.by_decision);
    print_map("by source", &s.by_source);
    print_map("by tier", &s.by_tier);
    println!("top denied commands");
    for c in &s.top_denied {
        let one_line: String = c.command.replace('\n', " ⏎ ").chars().take(100).collect();
        println!("  {:>8}  {one_line}", c.count);
    }
    println!(
        "breaker                 {} trips, {} re-opens, {} resets",
        s.breaker_trips, s.breaker_reopens, s.breaker_resets
    );
    println!(
        "learned allowlist       {} promotions, {} demotions",
        s.promotions, s.demotions
    );
    println!(
        "human decisions         {} ({} with a note)",
        s.human_decisions, s.human_notes
    );
    println!(
        "outcomes                {} succeeded, {} failed",
        s.outcomes_succeeded, s.outcomes_failed
    );
    match &s.latency_us {
        Some(l) => println!(
            "decision latency        median {} us, p90 {} us, p99 {} us, max {} us ({} decisions)",
            l.median, l.p90, l.p99, l.max, l.samples
        ),
        None => println!("decision latency        no daemon decisions yet"),
    }
    Ok(ExitCode::SUCCESS)
}
