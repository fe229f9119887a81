//! cmdgate's pure decision logic: shell analysis, read classification, tier maps, precedence,
//! circuit breaker and promotion state machines, and the wire types shared by hook and daemon.
//!
//! Nothing in this crate performs IO or reads a clock: files arrive as bytes, time arrives as an
//! argument. That is what makes every decision reproducible from its inputs and testable as a table.
#![forbid(unsafe_code)]

pub mod breaker;
pub mod decide;
pub mod learn;
pub mod locations;
pub mod net;
pub mod replay;
pub mod secrets;
pub mod shell;
pub mod tiermap;
pub mod time;
pub mod transcript;
pub mod wire;
