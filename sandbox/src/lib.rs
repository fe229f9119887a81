//! cmdgate-sandbox: test-run a command in a container mirror of the workspace (overlayfs +
//! namespaces + cgroup limits), report its effects, and roll the mirror back.
//!
//! ```text
//! run(config, cmd) ── exec ──▶ helper (single-threaded; own mount ns with the scratch tmpfs)
//!                                 │ cgroups, unshare(pid), fork
//!                                 ▼
//!                              pid 1 of the run: enter_mirror (setup.rs), fork ──▶ bash -c cmd
//!                                 │  seccomp supervisor, reaper                (confined: NNP,
//!                                 │                                             no caps, uid,
//!                                 ▼                                             Landlock, seccomp)
//!                              helper: timeout, bounded output, effects diff of the upper dirs,
//!                                      teardown ──▶ RawRun ──▶ run(): git tracked query, verdict
//! ```
//!
//! A mirrored run (issue 19, [`mirror`]) is the same machinery as the real run: the command's
//! output goes straight to the caller's pipes, the workspace's upper dir is kept on the
//! workspace's mount ([`store`]), and [`commit`] applies it all-or-nothing (journal, `undo`,
//! `recover`) or it is discarded.

pub mod cgroup;
pub mod clock;
pub mod commit;
pub mod config;
pub mod confine;
pub mod effects;
pub mod helper;
mod init;
pub mod keeper;
pub mod maskwatch;
pub mod mirror;
pub mod model;
pub mod net;
pub mod peer;
pub mod privilege;
pub mod protocol;
mod reaper;
mod run;
pub mod secrets;
pub mod setup;
pub mod store;
pub mod syscall;
pub mod tracked;
pub mod trash;
pub mod verdict;
pub mod walkwatch;

pub use config::{default_protected, HelperCommand, Limits, RunAs, RunConfig};
pub use helper::helper_main;
pub use model::{Area, Effect, FileKind, TestRun};
pub use privilege::{detect as detect_privilege, Privilege};
pub use run::{prepare, run, sweep_stale, Prepared, SandboxError};
