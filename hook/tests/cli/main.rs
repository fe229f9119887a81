//! Drives the built `cmdgate-hook` binary with real stdin JSON: every event, every failure mode.
//! One test binary (shared helpers in `common`), so the hook is linked once.

mod bash;
mod common;
mod failures;
mod kernel_paths;
mod packs;
mod paths;
mod secret_table;
