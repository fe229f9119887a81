//! The daemon's integration tests, one module per subject, linked into one test binary (link time
//! dominates CI). A new test file goes here as a module. `graceful_shutdown` and `notify_dbus` stay
//! binaries of their own: each sets process environment variables, which no other test may share.

mod explain_cli;
mod export_notes;
mod export_record;
mod export_redaction;
mod export_roundtrip;
mod export_split;
mod export_stats;
mod layers;
mod reviewer_providers;
mod signing_openbao;
mod support;
