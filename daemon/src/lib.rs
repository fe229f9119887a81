//! cmdgate-daemon: the routing daemon `cmdgated` and the operator CLI `cmdgate`.

pub mod clock;
pub mod store;
