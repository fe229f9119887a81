//! cmdgate-daemon: the routing daemon `cmdgated` and the operator CLI `cmdgate`.
pub mod breakers;
pub mod cli_tiermap;
pub mod cli_trust;
pub mod clock;
pub mod server;
pub mod signing;
pub mod store;
pub mod tiermaps;

pub mod cli_explain;
pub mod cli_sandbox;
pub mod project;
