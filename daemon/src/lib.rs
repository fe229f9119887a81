//! cmdgate-daemon: the routing daemon `cmdgated` and the operator CLI `cmdgate`.
pub mod cli_tiermap;
pub mod cli_trust;
pub mod breakers;
pub mod clock;
pub mod signing;
pub mod server;
pub mod store;
pub mod tiermaps;

pub mod cli_sandbox;
