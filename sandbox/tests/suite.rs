//! The sandbox's integration suite, one binary: the escape suite, the effects diff, the CLI-free
//! library API. Every test builds real namespaces, mounts and cgroups, so it needs root.

#[path = "suite/commit.rs"]
mod commit;
#[path = "suite/common.rs"]
mod common;
#[path = "suite/diff.rs"]
mod diff;
#[path = "suite/effects.rs"]
mod effects;
#[path = "suite/escape.rs"]
mod escape;
#[path = "suite/gitlock.rs"]
mod gitlock;
#[path = "suite/lifecycle.rs"]
mod lifecycle;
#[path = "suite/mirror.rs"]
mod mirror;
#[path = "suite/proxy.rs"]
mod proxy;
#[path = "suite/smoke.rs"]
mod smoke;
