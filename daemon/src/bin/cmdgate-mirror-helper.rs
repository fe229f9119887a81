//! cmdgate-mirror-helper: the sandbox helper as a program of its own, for system mode, where the
//! daemon runs as an unprivileged user and holds no capability. This file is installed
//! `root:cmdgate 0750` (only the daemon's group may run it) with file capabilities (the `setcap`
//! line of `systemd/README.md`, step 2; `cmdgated.service` says what each is for): the mount,
//! cgroup and namespace work of a mirror happens here, in a single-threaded process that lives
//! for one run, and never in the daemon; so do the store's operations after a run (commit,
//! discard, undo, recover, prune: `cmdgate_sandbox::keeper`), one process each.
//!
//! It speaks exactly the protocol of `cmdgated __sandbox-helper` (`cmdgate_sandbox::helper_main`).
//! First it makes its uid 0 with `setresuid`: the capabilities it holds are the file's and no more
//! (changing the effective uid to 0 copies the permitted set into the effective set; it does not
//! grant the full root set), but the cgroup and state files it must write are root's. Without the
//! file capabilities that step fails, the helper refuses with the reason, and the daemon asks a
//! person instead of running anything (never unsandboxed).

#![forbid(unsafe_code)]

use std::process::ExitCode;

use nix::unistd::{geteuid, setresuid, Uid};

fn main() -> ExitCode {
    if !geteuid().is_root() {
        let root = Uid::from_raw(0);
        if let Err(e) = setresuid(root, root, root) {
            eprintln!(
                "cmdgate-mirror-helper: cannot take uid 0 ({e}): the file capabilities are missing \
                 (setcap, see systemd/README.md) or NoNewPrivileges is set; the mirror will refuse"
            );
        }
    }
    cmdgate_sandbox::helper_main()
}
