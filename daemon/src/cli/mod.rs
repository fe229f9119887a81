//! The operator CLI `cmdgate`: one module per verb (clap arguments and `run`), and the admin
//! client they share (`client`). The binary `bin/cmdgate.rs` only dispatches.

pub mod apply;
pub mod audit;
pub mod breaker;
pub mod client;
pub mod console;
pub mod doctor;
pub mod escape_hatch;
pub mod explain;
pub mod export;
pub mod hook;
pub mod init;
pub mod pending;
pub mod preview;
pub mod reviewer;
pub mod rules;
pub mod runs;
pub mod sandbox;
pub mod settings;
pub mod stats;
pub mod status;
pub mod tiermap;
pub mod trust;
pub mod up;
