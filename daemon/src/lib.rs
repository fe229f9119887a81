//! cmdgate-daemon: the routing daemon `cmdgated` and the operator CLI `cmdgate`.
pub mod breakers;
pub mod cli_tiermap;
pub mod cli_trust;
pub mod clock;
pub mod notify;
pub mod pending;
pub mod server;
pub mod signing;
pub mod store;
pub mod tiermaps;

pub mod admin_client;
pub mod cli_audit;
pub mod cli_doctor;
pub mod cli_explain;
pub mod cli_hook;
pub mod cli_init;
pub mod cli_sandbox;
pub mod cli_status;
pub mod cli_up;
pub mod config;
pub mod daemon;
pub mod learning;
pub mod listing;
pub mod project;
pub mod serve;
pub mod testrun;

pub mod approval_notes;
pub mod approvals;
pub mod cli_breaker;
pub mod cli_export;
pub mod cli_pending;
pub mod cli_rules;
pub mod cli_stats;
pub mod rules_admin;
