//! What the running daemon reports about itself (`GET /admin/status`, `cmdgate status`).

use std::path::PathBuf;

use cmdgate_policy::locations::Mode;
use cmdgate_policy::wire::ApprovalMode;
use serde::{Deserialize, Serialize};

use crate::engine::breakers::BreakersSummary;
use crate::engine::integrity::AuditFailures;
use crate::engine::tiermaps::ProjectStatus;
use crate::store::audit::{AuditDecision, AuditRow, RunEvent};

/// How many of the newest `run` audit rows the runs section counts.
pub const RUNS_COUNTED: u32 = 1000;
/// How many runs the runs section lists.
pub const RUNS_LISTED: usize = 5;

/// The daemon's state, as `cmdgate status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub pid: u32,
    pub uptime_s: u64,
    pub mode: Mode,
    pub paths: StatusPaths,
    pub decisions_served: u64,
    pub peers_refused: u64,
    /// Refused connections per uid (decimal uid → count): who knocks, not only how often.
    #[serde(default)]
    pub peers_refused_by_uid: std::collections::BTreeMap<String, u64>,
    /// The newest audit row (none in an empty store, or when the read failed).
    pub last_audit_id: Option<i64>,
    /// `available`, or `unavailable: <why>`.
    pub test_runs: String,
    pub deadlines_ms: StatusDeadlines,
    pub breakers: BreakersSummary,
    pub projects: Vec<ProjectStatus>,
    /// How many remembered and learned rules the engine holds.
    pub rules: usize,
    /// A reload failed after a change: every routed call is refused until one succeeds.
    pub rules_stale: bool,
    pub audit_failures: AuditFailures,
    /// The model reviewer (`[reviewer]`); absent from an older daemon's answer.
    #[serde(default)]
    pub reviewer: crate::engine::reviewer::ReviewerStatus,
    pub approvals: StatusApprovals,
    pub notifications: StatusNotifications,
    /// Mirrored runs (issue 19); absent from an older daemon's answer.
    #[serde(default)]
    pub runs: StatusRuns,
}

/// Recent mirrored runs: what they came to, the newest few, and what can be undone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusRuns {
    /// How many `run` audit rows were counted (the newest, at most [`RUNS_COUNTED`]).
    pub counted: u64,
    /// When the oldest counted row was written (Unix ms); `None` with no rows.
    pub since_ms: Option<i64>,
    /// Clean: effects committed to the workspace.
    pub committed: u64,
    /// Dirty, but committed by the operator's acceptance (`accepted_run`: its exact refused
    /// effects were applied K times before).
    #[serde(default)]
    pub accepted: u64,
    /// Dirty: nothing reached the workspace.
    pub rolled_back: u64,
    /// Clean, but its targets changed on the host while it ran: nothing committed.
    pub conflict: u64,
    /// Not finished or not judged (client gone, limit, sandbox error): nothing committed.
    pub failed: u64,
    /// Tickets refused at redemption (unknown, used, expired, another uid or directory).
    pub refused: u64,
    /// `cmdgate undo` runs that restored a workspace.
    pub undone: u64,
    /// Start-up repairs after a crash.
    pub recovered: u64,
    /// Committed runs whose journal still allows `cmdgate undo`.
    pub undoable: u64,
    /// The newest runs (at most [`RUNS_LISTED`]), newest first.
    pub recent: Vec<RecentRun>,
    /// Why the section is incomplete (the store or the journal could not be read).
    pub problem: Option<String>,
}

/// One run in `cmdgate status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecentRun {
    /// The run id (`cmdgate runs show`, `cmdgate undo`); empty when the run never started.
    pub run_id: String,
    pub audit_id: i64,
    pub at_ms: i64,
    /// `committed`, `rolled_back`, `conflict` or `failed`.
    pub status: String,
    pub command: String,
    pub exit_code: Option<i64>,
    /// `cmdgate undo RUN` would restore it now (its journal is `committed`).
    pub undo_available: bool,
}

/// The runs section from the newest `run` rows (any order) and the committed runs whose journal
/// still allows an undo.
pub fn runs_summary(rows: &[AuditRow], undoable: &[String]) -> StatusRuns {
    let mut s = StatusRuns {
        counted: rows.len() as u64,
        since_ms: rows.iter().map(|r| r.entry.at_ms).min(),
        undoable: undoable.len() as u64,
        ..StatusRuns::default()
    };
    let mut newest: Vec<&AuditRow> = rows.iter().collect();
    newest.sort_by_key(|r| std::cmp::Reverse(r.id));
    for row in &newest {
        let Some(AuditDecision::Run(event)) = &row.entry.decision else {
            continue;
        };
        let counter = match event {
            RunEvent::Committed => &mut s.committed,
            RunEvent::AcceptedRun => &mut s.accepted,
            RunEvent::RolledBack => &mut s.rolled_back,
            RunEvent::Conflict => &mut s.conflict,
            RunEvent::Failed => &mut s.failed,
            RunEvent::Refused => &mut s.refused,
            RunEvent::Undone => &mut s.undone,
            RunEvent::Recovered => &mut s.recovered,
            RunEvent::UndoRefused | RunEvent::Applied | RunEvent::ApplyRefused => continue,
        };
        *counter += 1;
        // A run's own end (not a refusal, undo or recovery) is listed.
        let is_run = matches!(
            event,
            RunEvent::Committed
                | RunEvent::AcceptedRun
                | RunEvent::RolledBack
                | RunEvent::Conflict
                | RunEvent::Failed
        );
        if is_run && s.recent.len() < RUNS_LISTED {
            let run_id = row
                .entry
                .note
                .as_deref()
                .and_then(crate::engine::runs::run_of_note)
                .unwrap_or_default()
                .to_owned();
            s.recent.push(RecentRun {
                undo_available: !run_id.is_empty() && undoable.contains(&run_id),
                run_id,
                audit_id: row.id,
                at_ms: row.entry.at_ms,
                status: event.to_string(),
                command: row.entry.command.clone().unwrap_or_default(),
                exit_code: row.entry.exit_code,
            });
        }
    }
    s
}

/// Where the daemon keeps its files and sockets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusPaths {
    pub config: PathBuf,
    pub store: PathBuf,
    pub decide_socket: PathBuf,
    pub admin_socket: PathBuf,
    pub spool: Option<PathBuf>,
    pub trusted_keys: String,
}

/// The configured deadlines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusDeadlines {
    pub decide: u64,
    pub test_run: u64,
}

/// Background approvals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusApprovals {
    pub mode: ApprovalMode,
    pub wait_ms: u64,
    pub pending: usize,
}

/// Desktop notifications.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusNotifications {
    pub enabled: bool,
    pub delivered: u64,
    pub last_error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::audit::{Entry, Kind};

    fn row(id: i64, decision: &str, run: Option<&str>) -> AuditRow {
        AuditRow {
            id,
            entry: Entry {
                at_ms: 1000 + id,
                kind: Kind::Run,
                decision: Some(AuditDecision::parse(decision)),
                command: Some(format!("cmd {id}")),
                note: run.map(crate::engine::runs::run_note),
                exit_code: Some(id % 3),
                ..Entry::default()
            },
            prev_hash: String::new(),
            hash: String::new(),
        }
    }

    #[test]
    fn counts_each_result_and_lists_the_newest_runs_with_their_undo() {
        let rows = vec![
            row(1, "committed", Some("r1")),
            row(2, "rolled_back", Some("r2")),
            row(3, "accepted_run", Some("r3")),
            row(4, "conflict", Some("r4")),
            row(5, "committed", Some("r5")),
            row(6, "undone", Some("r1")),
            row(7, "failed", Some("r7")),
            row(8, "recovered", None),
            row(9, "committed", Some("r9")),
            row(10, "failed", None),
        ];
        let s = runs_summary(&rows, &["r5".to_owned(), "r9".to_owned()]);
        assert_eq!(
            (s.committed, s.rolled_back, s.conflict, s.failed),
            (3, 1, 1, 2)
        );
        assert_eq!((s.refused, s.undone, s.recovered, s.accepted), (0, 1, 1, 1));
        assert_eq!((s.counted, s.since_ms, s.undoable), (10, Some(1001), 2));
        let recent: Vec<(&str, &str, bool)> = s
            .recent
            .iter()
            .map(|r| (r.run_id.as_str(), r.status.as_str(), r.undo_available))
            .collect();
        assert_eq!(
            recent,
            [
                ("", "failed", false),
                ("r9", "committed", true),
                ("r7", "failed", false),
                ("r5", "committed", true),
                ("r4", "conflict", false),
            ],
            "newest first, only runs (not refusals, undos or repairs), at most five"
        );
        assert_eq!(s.recent[1].command, "cmd 9");
        assert_eq!(s.recent[1].audit_id, 9);
        assert!(s.problem.is_none());
    }

    #[test]
    fn no_runs_is_an_empty_section() {
        let s = runs_summary(&[], &[]);
        assert_eq!(s, StatusRuns::default());
    }
}
