//! The hook's logic as a library, so the binary (`main.rs`: panic hook, watchdog, exit code), the
//! fuzz target (`hook/fuzz`) and the benchmark share it: stdin parsing, the fast path, the daemon
//! client, the spool, the answer and the process's deadline (`watchdog`) and its memory (`arena`), the two modules
//! with `unsafe` beside `bytes`, musl's `memcmp` eight bytes at a time). See `main.rs` for the flow and ARCHITECTURE.md, `hook/`.
#![deny(unsafe_code)]

pub mod arena;
mod bash;
pub mod bytes;
pub mod client;
pub mod config;
pub mod gate;
pub mod input;
pub mod kernel;
mod memo;
pub mod output;
mod own;
mod reads;
mod replay;
pub mod run_client;
mod secrets;
pub mod spool;
mod tier;
pub mod transcript;
pub mod watchdog;
