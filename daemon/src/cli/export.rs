//! `cmdgate export`: the audit as a JSONL training dataset (docs/export.md), streamed from the
//! store file over a read-only connection, redacted by default, with a stable train/test split.
//!
//! [`export`] is the library entry (tests and the benchmark drive it on a store they fill);
//! [`run`] is the CLI around it: paths, output files, the progress bar and the summary.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::engine::export::{
    command_key, dedup_key, label_for, normalized_command, redact, redact_argv, relative_cwd,
    split_for, Example, ExampleContext, ExampleDecision, ExampleOutcome, ExampleRequest,
    HumanDecision, RedactedField, SecretKind, Split, SCHEMA_ID,
};
use cmdgate_policy::shell::{self, Analysis, Limits, Word};
use rusqlite::{Connection, Row};
use serde::Serialize;
use serde_json::Value;

use crate::engine::approval_notes;
use crate::store::audit::{self, AuditDecision, AuditSource, RunEvent};
use crate::store::StoreError;
use cmdgate_policy::wire::Source;

/// Export failures.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("failed to read the store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("failed to write the dataset")]
    Write(#[source] std::io::Error),
    #[error("failed to encode an example: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Which decided requests to export; every `Some`/non-empty field narrows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExportFilter {
    /// Decided at or after (ms since the epoch).
    pub since_ms: Option<i64>,
    /// Decided at or before (ms since the epoch).
    pub until_ms: Option<i64>,
    /// Canonical project root, as the audit records it.
    pub project: Option<String>,
    /// Verdicts to keep (`allow`, `deny`, `ask`); empty keeps all.
    pub decisions: Vec<String>,
}

/// How to export.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportOptions {
    pub filter: ExportFilter,
    /// Replace secrets by typed placeholders (the default; off only when asked explicitly).
    pub redact: bool,
    /// Keep only the first example of each (normalised command, verdict).
    pub dedup: bool,
    /// Train fraction: adds the `split` field.
    pub split: Option<f64>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            filter: ExportFilter::default(),
            redact: true,
            dedup: false,
            split: None,
        }
    }
}

/// Where examples go: one stream, or one per side of the split.
pub enum Sink<'a> {
    One(&'a mut dyn Write),
    Split {
        train: &'a mut dyn Write,
        test: &'a mut dyn Write,
    },
}

/// What an export did (`--json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExportSummary {
    /// Decided requests that matched the filter.
    pub rows_read: u64,
    /// Examples written.
    pub written: u64,
    /// Examples dropped by `--dedup`.
    pub skipped_duplicates: u64,
    /// With a split: examples on each side.
    pub train: u64,
    pub test: u64,
    /// Examples with at least one redaction.
    pub redacted_examples: u64,
    /// Redactions by kind.
    pub redactions: BTreeMap<String, u64>,
    pub elapsed_ms: u64,
    /// The output file(s); `None` for stdout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
}

const ROW_COLUMNS: &str = "d.id, d.at_ms, d.session, d.agent_id, d.agent_type, d.permission_mode, \
    d.cwd, d.project, d.tool, d.command, d.tool_input, d.parts, d.tier, d.decision, d.source, d.rule, \
    d.reason, d.tiermap_revision, d.sandbox, d.latency_us, d.note, \
    o.id, o.success, o.exit_code, o.interrupted, o.duration_ms, o.error, \
    r.decision, r.source, r.sandbox";

/// The FROM/WHERE of the decided requests: decision and hook fast-path rows with a verdict, the
/// last one per `tool_use_id` (a person's answer supersedes its `ask`), joined with their latest
/// outcome. Both lookups go through the `tool_use_id` index.
fn from_where(filter: &ExportFilter) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value as V;
    let mut clauses = vec![
        "d.kind IN ('decision', 'local_allow')".to_owned(),
        "d.decision IS NOT NULL".to_owned(),
        "NOT EXISTS (SELECT 1 FROM command_audit l WHERE l.tool_use_id = d.tool_use_id \
         AND l.kind IN ('decision', 'local_allow') AND l.id > d.id)"
            .to_owned(),
    ];
    let mut values: Vec<V> = Vec::new();
    let mut add = |clause: &str, v: V| {
        values.push(v);
        clauses.push(clause.replace('?', &format!("?{}", values.len())));
    };
    if let Some(v) = filter.since_ms {
        add("d.at_ms >= ?", V::Integer(v));
    }
    if let Some(v) = filter.until_ms {
        add("d.at_ms <= ?", V::Integer(v));
    }
    if let Some(p) = &filter.project {
        add("d.project = ?", V::Text(p.clone()));
    }
    if !filter.decisions.is_empty() {
        let mut alternatives = Vec::new();
        for d in &filter.decisions {
            values.push(V::Text(d.clone()));
            alternatives.push(format!("d.decision = ?{}", values.len()));
        }
        clauses.push(format!("({})", alternatives.join(" OR ")));
    }
    let sql = format!(
        "FROM command_audit d \
         LEFT JOIN command_audit o ON o.id = (SELECT max(x.id) FROM command_audit x \
           WHERE x.tool_use_id = d.tool_use_id AND x.kind = 'outcome' AND x.decision_id = d.id) \
         LEFT JOIN command_audit r ON r.id = (SELECT max(y.id) FROM command_audit y \
           WHERE y.tool_use_id = d.tool_use_id AND y.kind = 'run' AND y.decision_id = d.id \
           AND y.sandbox IS NOT NULL) \
         WHERE {}",
        clauses.join(" AND ")
    );
    (sql, values)
}

/// How many decided requests match (for the progress bar).
pub fn count(conn: &Connection, filter: &ExportFilter) -> Result<u64, ExportError> {
    let (from, values) = from_where(filter);
    let n: i64 = conn.query_row(
        &format!("SELECT count(*) {from}"),
        rusqlite::params_from_iter(values),
        |r| r.get(0),
    )?;
    Ok(n.max(0) as u64)
}

/// One decided request as read from the store.
struct DecidedRow {
    id: i64,
    at_ms: i64,
    session: Option<String>,
    agent_id: Option<String>,
    agent_type: Option<String>,
    permission_mode: Option<String>,
    cwd: Option<String>,
    project: Option<String>,
    tool: Option<String>,
    command: Option<String>,
    tool_input: Option<String>,
    parts: Option<String>,
    tier: Option<String>,
    decision: String,
    source: Option<String>,
    rule: Option<String>,
    reason: Option<String>,
    tiermap_revision: Option<i64>,
    sandbox: Option<String>,
    latency_us: Option<i64>,
    note: Option<String>,
    outcome_id: Option<i64>,
    success: Option<bool>,
    exit_code: Option<i64>,
    interrupted: Option<bool>,
    duration_ms: Option<i64>,
    error: Option<String>,
    /// A mirrored run's own row (decision `run`): its result, source and record.
    run_decision: Option<String>,
    run_source: Option<String>,
    run_sandbox: Option<String>,
}

fn decided_row(r: &Row<'_>) -> rusqlite::Result<DecidedRow> {
    Ok(DecidedRow {
        id: r.get(0)?,
        at_ms: r.get(1)?,
        session: r.get(2)?,
        agent_id: r.get(3)?,
        agent_type: r.get(4)?,
        permission_mode: r.get(5)?,
        cwd: r.get(6)?,
        project: r.get(7)?,
        tool: r.get(8)?,
        command: r.get(9)?,
        tool_input: r.get(10)?,
        parts: r.get(11)?,
        tier: r.get(12)?,
        decision: r.get(13)?,
        source: r.get(14)?,
        rule: r.get(15)?,
        reason: r.get(16)?,
        tiermap_revision: r.get(17)?,
        sandbox: r.get(18)?,
        latency_us: r.get(19)?,
        note: r.get(20)?,
        outcome_id: r.get(21)?,
        success: r.get(22)?,
        exit_code: r.get(23)?,
        interrupted: r.get(24)?,
        duration_ms: r.get(25)?,
        error: r.get(26)?,
        run_decision: r.get(27)?,
        run_source: r.get(28)?,
        run_sandbox: r.get(29)?,
    })
}

/// A remembered rule as the export needs it.
struct RuleInfo {
    note: Option<String>,
}

/// Streams every matching decided request to `sink` as one JSON line, oldest first, inside one
/// read transaction (a consistent snapshot beside a running daemon). `progress` is called with the
/// number of rows read so far, every few thousand rows and at the end.
pub fn export(
    conn: &Connection,
    options: &ExportOptions,
    sink: &mut Sink<'_>,
    progress: &mut dyn FnMut(u64),
) -> Result<ExportSummary, ExportError> {
    let started = Instant::now();
    conn.execute_batch("BEGIN")?;
    let result = export_in_snapshot(conn, options, sink, progress);
    // Read-only: nothing to keep; ending the transaction releases the snapshot.
    let _ = conn.execute_batch("COMMIT");
    let mut summary = result?;
    summary.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(summary)
}

fn export_in_snapshot(
    conn: &Connection,
    options: &ExportOptions,
    sink: &mut Sink<'_>,
    progress: &mut dyn FnMut(u64),
) -> Result<ExportSummary, ExportError> {
    let rules = load_rules(conn)?;
    let (from, values) = from_where(&options.filter);
    let mut stmt = conn.prepare(&format!("SELECT {ROW_COLUMNS} {from} ORDER BY d.id"))?;
    let mut rows = stmt.query(rusqlite::params_from_iter(values))?;
    let mut seen: HashSet<u128> = HashSet::new();
    let mut summary = ExportSummary::default();
    let mut line: Vec<u8> = Vec::with_capacity(4096);
    while let Some(r) = rows.next()? {
        let row = decided_row(r)?;
        summary.rows_read += 1;
        if summary.rows_read.is_multiple_of(4096) {
            progress(summary.rows_read);
        }
        let example = to_example(row, options, &rules);
        if options.dedup
            && !seen.insert(dedup_key(
                &example.request.normalized,
                &example.decision.verdict,
            ))
        {
            summary.skipped_duplicates += 1;
            continue;
        }
        line.clear();
        serde_json::to_writer(&mut line, &example)?;
        line.push(b'\n');
        let out: &mut dyn Write = match sink {
            Sink::One(w) => &mut **w,
            Sink::Split { test, .. } if example.split == Some(Split::Test) => &mut **test,
            Sink::Split { train, .. } => &mut **train,
        };
        out.write_all(&line).map_err(ExportError::Write)?;
        summary.written += 1;
        match example.split {
            Some(Split::Train) => summary.train += 1,
            Some(Split::Test) => summary.test += 1,
            None => {}
        }
        if !example.redactions.is_empty() {
            summary.redacted_examples += 1;
            for r in &example.redactions {
                *summary
                    .redactions
                    .entry(r.kind.as_str().into())
                    .or_default() += 1;
            }
        }
    }
    progress(summary.rows_read);
    match sink {
        Sink::One(w) => w.flush(),
        Sink::Split { train, test } => train.flush().and_then(|()| test.flush()),
    }
    .map_err(ExportError::Write)?;
    Ok(summary)
}

fn load_rules(conn: &Connection) -> Result<HashMap<i64, RuleInfo>, ExportError> {
    let mut stmt = conn.prepare("SELECT id, note FROM rules")?;
    let mut rows = stmt.query([])?;
    let mut out = HashMap::new();
    while let Some(r) = rows.next()? {
        out.insert(r.get(0)?, RuleInfo { note: r.get(1)? });
    }
    Ok(out)
}

/// Accumulates which fields had which secrets replaced.
struct Redactor {
    on: bool,
    found: Vec<RedactedField>,
}

impl Redactor {
    fn text(&mut self, field: &str, text: String) -> String {
        if !self.on {
            return text;
        }
        let (out, found) = redact(&text);
        self.note(field, found.iter().map(|r| r.kind));
        out
    }

    fn opt(&mut self, field: &str, text: Option<String>) -> Option<String> {
        text.map(|t| self.text(field, t))
    }

    fn note(&mut self, field: &str, kinds: impl Iterator<Item = SecretKind>) {
        for kind in kinds {
            self.found.push(RedactedField {
                field: field.to_owned(),
                kind,
            });
        }
    }

    fn value(&mut self, field: &str, v: Value) -> Value {
        if !self.on {
            return v;
        }
        match v {
            Value::String(s) => Value::String(self.text(field, s)),
            Value::Array(a) => Value::Array(a.into_iter().map(|x| self.value(field, x)).collect()),
            Value::Object(o) => Value::Object(
                o.into_iter()
                    .map(|(k, x)| {
                        let x = self.value(field, x);
                        (k, x)
                    })
                    .collect(),
            ),
            other => other,
        }
    }
}

/// The argv of each simple command: from the audit's `parts` column when it holds them, else
/// from the analyser (hook fast-path rows carry no parts).
fn parts_of(tool: &str, command: &str, column: Option<&str>) -> (Option<Vec<Vec<String>>>, bool) {
    if tool != "Bash" {
        return (None, true);
    }
    if let Some(col) = column {
        match serde_json::from_str::<Value>(col) {
            Ok(Value::Array(_)) => {
                if let Ok(parts) = serde_json::from_str::<Vec<Vec<String>>>(col) {
                    return (Some(parts), true);
                }
            }
            Ok(Value::Object(o)) if o.contains_key("unanalyzable") => return (None, false),
            _ => {}
        }
    }
    match shell::analyze(command, &Limits::default()) {
        Analysis::Parsed(script) => (
            Some(
                script
                    .commands
                    .iter()
                    .map(|c| {
                        c.argv
                            .iter()
                            .map(|w| match w {
                                Word::Static(s) => s.clone(),
                                Word::Dynamic(raw) => format!("{raw} (dynamic)"),
                            })
                            .collect()
                    })
                    .collect(),
            ),
            true,
        ),
        Analysis::Unanalyzable(_) => (None, false),
    }
}

fn to_example(row: DecidedRow, options: &ExportOptions, rules: &HashMap<i64, RuleInfo>) -> Example {
    let mut red = Redactor {
        on: options.redact,
        found: Vec::new(),
    };
    let tool = row.tool.clone().unwrap_or_default();
    let raw_command = row.command.clone().unwrap_or_default();
    let normalized = normalized_command(&tool, &raw_command);
    let (parts, analyzable) = parts_of(&tool, &raw_command, row.parts.as_deref());
    let parts = parts.map(|ps| {
        ps.into_iter()
            .map(|argv| {
                if !red.on {
                    return argv;
                }
                let (words, kinds) = redact_argv(&argv);
                red.note("request.parts", kinds.into_iter());
                words
            })
            .collect()
    });
    let command = red.text("request.command", raw_command);
    let input = if tool == "Bash" {
        None
    } else {
        row.tool_input
            .as_deref()
            .and_then(|t| serde_json::from_str::<Value>(t).ok())
            .map(|v| red.value("request.input", v))
    };
    let cwd = red.opt(
        "request.cwd",
        relative_cwd(row.project.as_deref(), row.cwd.as_deref()),
    );
    // A mirrored run (the decision row says `run`) was let run, in the mirror: its verdict is
    // `allow`, its record is the run's own row (status, effects, the operator's acceptance), and
    // its label follows what became of it: committed ⇒ clean, rolled back ⇒ dirty, committed by
    // the operator's acceptance ⇒ the learned source; conflict, failed or unfinished ⇒ unknown.
    let mirrored = AuditDecision::parse(&row.decision) == AuditDecision::Mirrored;
    let run = row.run_decision.as_deref().map(AuditDecision::parse);
    let (verdict, source, judged) = match (mirrored, run) {
        (false, _) => (
            row.decision.clone(),
            row.source.clone().unwrap_or_default(),
            row.decision.clone(),
        ),
        (true, Some(AuditDecision::Run(RunEvent::AcceptedRun))) => {
            ("allow".to_owned(), "learned".to_owned(), "allow".to_owned())
        }
        (true, run) => (
            "allow".to_owned(),
            row.run_source
                .clone()
                .or_else(|| row.source.clone())
                .unwrap_or_default(),
            match run {
                Some(AuditDecision::Run(RunEvent::Committed)) => "allow",
                Some(AuditDecision::Run(RunEvent::RolledBack)) => "deny",
                _ => "unjudged",
            }
            .to_owned(),
        ),
    };
    let label_source = match mirrored {
        true if source != "learned" => "sandbox",
        _ => source.as_str(),
    };
    let (label, basis) = label_for(&judged, label_source, row.rule.as_deref());
    let human = match audit::parse_source(&source) {
        Some(AuditSource::Wire(Source::Human)) => Some(HumanDecision {
            remembered: false,
            rule_id: None,
            note: red.opt("decision.human.note", row.note.clone()),
        }),
        Some(AuditSource::Wire(Source::Remembered)) => {
            let id = row.rule.as_deref().and_then(approval_notes::rule_id);
            Some(HumanDecision {
                remembered: true,
                rule_id: id,
                note: red.opt(
                    "decision.human.note",
                    id.and_then(|id| rules.get(&id))
                        .and_then(|r| r.note.clone()),
                ),
            })
        }
        _ => None,
    };
    let record = match mirrored {
        true => row.run_sandbox.as_deref().or(row.sandbox.as_deref()),
        false => row.sandbox.as_deref(),
    };
    let sandbox = record
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .map(|v| red.value("decision.sandbox", v));
    let outcome = row.outcome_id.map(|_| ExampleOutcome {
        success: row.success,
        exit_code: row.exit_code,
        interrupted: row.interrupted,
        duration_ms: row.duration_ms,
        error: red.opt("outcome.error", row.error.clone()),
    });
    let decision = ExampleDecision {
        verdict,
        source,
        rule: red.opt("decision.rule", row.rule.clone()),
        reason: red.opt("decision.reason", row.reason.clone()),
        latency_us: row.latency_us,
        sandbox,
        human,
    };
    Example {
        schema: SCHEMA_ID.into(),
        audit_id: row.id,
        at_ms: row.at_ms,
        command_key: command_key(&normalized),
        split: options.split.map(|f| split_for(&normalized, f)),
        request: ExampleRequest {
            tool,
            command,
            normalized,
            parts,
            analyzable,
            input,
            cwd,
        },
        context: ExampleContext {
            project: row.project,
            session: row.session,
            agent_id: row.agent_id,
            agent_type: row.agent_type,
            permission_mode: row.permission_mode,
            tiermap_revision: row.tiermap_revision,
            tier: row.tier,
        },
        decision,
        outcome,
        label,
        label_basis: basis.into(),
        redactions: red.found,
    }
}

// ---------------------------------------------------------------------------------------------
// The CLI.

/// Arguments of `cmdgate export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Write the JSONL here (via PATH.partial, renamed when complete); default stdout.
    #[arg(long, conflicts_with = "out_dir")]
    pub out: Option<PathBuf>,
    /// With --split: write DIR/train.jsonl and DIR/test.jsonl.
    #[arg(long, requires = "split")]
    pub out_dir: Option<PathBuf>,
    /// Only requests decided at or after: ms since the epoch, RFC 3339 UTC, or YYYY-MM-DD.
    #[arg(long, value_parser = parse_time)]
    pub since: Option<i64>,
    /// Only requests decided at or before (same forms; a bare date means its end).
    #[arg(long, value_parser = parse_until)]
    pub until: Option<i64>,
    /// Only this project root.
    #[arg(long)]
    pub project: Option<PathBuf>,
    /// Only this verdict (repeatable).
    #[arg(long, value_parser = ["allow", "deny", "ask"])]
    pub decision: Vec<String>,
    /// Replace secrets by typed placeholders (the default).
    #[arg(long, overrides_with = "no_redact")]
    pub redact: bool,
    /// Export text exactly as recorded, secrets included.
    #[arg(long, overrides_with = "redact")]
    pub no_redact: bool,
    /// Keep the first example of each (normalised command, verdict).
    #[arg(long)]
    pub dedup: bool,
    /// Add a stable train/test split with this train fraction (0 < F <= 1).
    #[arg(long, value_parser = parse_fraction)]
    pub split: Option<f64>,
    /// Read this store file instead of the one under the state dir.
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Print a JSON summary at the end (stdout, or stderr when the data goes to stdout).
    #[arg(long)]
    pub json: bool,
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!(
            "{s:?} is not a train fraction in (0, 1] (e.g. 0.9)"
        )),
    }
}

/// Milliseconds since the epoch from `1780000000000`, `2026-11-29`, or `2026-11-29T16:00:00Z`.
pub fn parse_time(s: &str) -> Result<i64, String> {
    parse_instant(s, false)
}

fn parse_until(s: &str) -> Result<i64, String> {
    parse_instant(s, true)
}

fn parse_instant(s: &str, end_of_day: bool) -> Result<i64, String> {
    let bad = || {
        format!("{s:?} is not a time: use milliseconds since the epoch, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ")
    };
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().map_err(|_| bad());
    }
    let num = |a: usize, b: usize| -> Result<i64, String> {
        s.get(a..b)
            .filter(|t| t.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|t| t.parse().ok())
            .ok_or_else(bad)
    };
    if s.len() < 10 || &s[4..5] != "-" || &s[7..8] != "-" {
        return Err(bad());
    }
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return Err(bad());
    }
    let day_ms = days_from_civil(y, m, d) * 86_400_000;
    if s.len() == 10 {
        return Ok(if end_of_day {
            day_ms + 86_399_999
        } else {
            day_ms
        });
    }
    let rest = &s[10..];
    if rest.len() != 10 || !rest.starts_with('T') || !rest.ends_with('Z') {
        return Err(bad());
    }
    let (hh, mm, ss) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if &s[13..14] != ":" || &s[16..17] != ":" || hh > 23 || mm > 59 || ss > 60 {
        return Err(bad());
    }
    Ok(day_ms + ((hh * 60 + mm) * 60 + ss) * 1000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A progress bar on stderr, redrawn at most four times a second; silent when stderr is not a
/// terminal.
struct Progress {
    total: u64,
    started: Instant,
    last: Option<Instant>,
    on: bool,
}

impl Progress {
    fn draw(&mut self, done: u64, last: bool) {
        if !self.on {
            return;
        }
        let now = Instant::now();
        if !last
            && self
                .last
                .is_some_and(|t| now - t < Duration::from_millis(250))
        {
            return;
        }
        self.last = Some(now);
        let total = self.total.max(done).max(1);
        let width = 30;
        let filled = (done * width / total) as usize;
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        eprint!(
            "\r[{}{}] {done}/{total} rows {:>5.1}%  {:.0} rows/s ",
            "#".repeat(filled),
            ".".repeat(width as usize - filled),
            done as f64 * 100.0 / total as f64,
            done as f64 / secs
        );
        if last {
            eprintln!();
        }
    }
}

/// An output file written under a temporary name and renamed into place when complete, so a
/// failed export never leaves a truncated dataset that looks whole.
struct Partial {
    path: PathBuf,
    tmp: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

impl Partial {
    fn create(path: &Path) -> anyhow::Result<Partial> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".partial");
        let tmp = PathBuf::from(tmp);
        let file = std::fs::File::create(&tmp)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", tmp.display()))?;
        Ok(Partial {
            path: path.to_path_buf(),
            tmp,
            file: std::io::BufWriter::with_capacity(1 << 20, file),
        })
    }

    fn finish(self) -> anyhow::Result<()> {
        let file = self
            .file
            .into_inner()
            .map_err(|e| anyhow::anyhow!("cannot write {}: {}", self.tmp.display(), e.error()))?;
        file.sync_all()?;
        std::fs::rename(&self.tmp, &self.path)?;
        Ok(())
    }
}

pub fn run(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let db = match args.db {
        Some(p) => p,
        None => crate::api::serve::load(None)?.1.db,
    };
    if !db.exists() {
        anyhow::bail!("no store at {} (has the daemon ever run?)", db.display());
    }
    let conn = crate::store::open_read_only(&db)?;
    let project = args.project.map(|p| {
        std::fs::canonicalize(&p)
            .unwrap_or(p)
            .to_string_lossy()
            .into_owned()
    });
    let options = ExportOptions {
        filter: ExportFilter {
            since_ms: args.since,
            until_ms: args.until,
            project,
            decisions: args.decision,
        },
        redact: !args.no_redact,
        dedup: args.dedup,
        split: args.split,
    };
    if args.no_redact {
        eprintln!("cmdgate export: --no-redact: secrets in the audit are exported as recorded");
    }
    let show_progress = std::io::stderr().is_terminal();
    let mut progress = Progress {
        total: if show_progress {
            count(&conn, &options.filter)?
        } else {
            0
        },
        started: Instant::now(),
        last: None,
        on: show_progress,
    };
    let mut tick = |done: u64| progress.draw(done, false);
    let summary = match (&args.out, &args.out_dir) {
        (Some(path), _) => {
            let mut out = Partial::create(path)?;
            let mut summary = export(&conn, &options, &mut Sink::One(&mut out.file), &mut tick)?;
            out.finish()?;
            summary.out = Some(path.display().to_string());
            summary
        }
        (None, Some(dir)) => {
            std::fs::create_dir_all(dir)?;
            let mut train = Partial::create(&dir.join("train.jsonl"))?;
            let mut test = Partial::create(&dir.join("test.jsonl"))?;
            let mut summary = export(
                &conn,
                &options,
                &mut Sink::Split {
                    train: &mut train.file,
                    test: &mut test.file,
                },
                &mut tick,
            )?;
            train.finish()?;
            test.finish()?;
            summary.out = Some(dir.display().to_string());
            summary
        }
        (None, None) => {
            let stdout = std::io::stdout();
            let mut lock = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
            export(&conn, &options, &mut Sink::One(&mut lock), &mut tick)?
        }
    };
    progress.draw(summary.rows_read, true);
    let text = serde_json::to_string(&summary)?;
    match (args.json, summary.out.is_some()) {
        (true, true) => println!("{text}"),
        (true, false) => eprintln!("{text}"),
        (false, true) => eprintln!(
            "cmdgate export: {} examples ({} duplicates skipped, {} redacted) to {}",
            summary.written,
            summary.skipped_duplicates,
            summary.redacted_examples,
            summary.out.as_deref().unwrap_or("stdout")
        ),
        (false, false) => {}
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_in_every_accepted_form() {
        assert_eq!(parse_time("1780000000000"), Ok(1_780_000_000_000));
        assert_eq!(parse_time("1970-01-01"), Ok(0));
        assert_eq!(parse_time("2026-11-29"), Ok(1_795_910_400_000));
        assert_eq!(parse_until("2026-11-29"), Ok(1_795_996_799_999));
        assert_eq!(parse_time("2026-11-29T16:00:00Z"), Ok(1_795_968_000_000));
        assert_eq!(parse_time("2000-02-29T00:00:01Z"), Ok(951_782_401_000));
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-11-29T16:00",
            "2026/11/29",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fractions_outside_zero_one_are_refused() {
        assert_eq!(parse_fraction("0.9"), Ok(0.9));
        assert_eq!(parse_fraction("1"), Ok(1.0));
        for bad in ["0", "-0.1", "1.5", "NaN", "x"] {
            assert!(parse_fraction(bad).is_err(), "{bad}");
        }
    }
}
