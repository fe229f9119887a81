//! What the running daemon reports about itself (`GET /admin/status`, `cmdgate status`).

use std::path::PathBuf;

use cmdgate_policy::locations::Mode;
use cmdgate_policy::wire::ApprovalMode;
use serde::{Deserialize, Serialize};

use crate::engine::breakers::BreakersSummary;
use crate::engine::integrity::AuditFailures;
use crate::engine::tiermaps::ProjectStatus;

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
