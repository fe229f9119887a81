//! cmdgate-daemon: the routing daemon `cmdgated` and the operator CLI `cmdgate`.
//!
//! Layers point one way (`tests/layers.rs` checks it): [`cli`] (the operator's verbs and the admin
//! client) → [`api`] (server, listeners, routes, the admin request/reply types) → [`engine`] (the
//! decision pipeline and its components; no HTTP) → [`store`] (all SQL) → `cmdgate_policy`.
//! [`config`], [`clock`] and [`signing`] are leaves every layer may use.
#![forbid(unsafe_code)]

pub mod api;
pub mod cli;
pub mod clock;
pub mod config;
pub mod engine;
pub mod signing;
pub mod store;
