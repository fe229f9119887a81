//! Can this process build a mirror? Root can; otherwise we say exactly why not and refuse —
//! a test-run never silently falls back to running unsandboxed.

use crate::helper::HelperError;

/// What the current process may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Privilege {
    /// Effective uid 0 with CAP_SYS_ADMIN: the full mirror.
    Root,
    /// Not root, and the kernel allows unprivileged user namespaces.
    UserNamespace,
    /// Neither; the reason says which knob forbids user namespaces.
    Unavailable(String),
}

fn read_knob(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Inspect euid, capabilities and the kernel's user-namespace knobs (reads files only: safe to
/// call from any thread).
pub fn detect() -> Privilege {
    if nix::unistd::geteuid().is_root() && has_sys_admin() {
        return Privilege::Root;
    }
    if read_knob("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Privilege::Unavailable("user.max_user_namespaces is 0".into());
    }
    if read_knob("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Privilege::Unavailable("kernel.unprivileged_userns_clone is 0".into());
    }
    if read_knob("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return Privilege::Unavailable("kernel.apparmor_restrict_unprivileged_userns is 1".into());
    }
    Privilege::UserNamespace
}

fn has_sys_admin() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 21) != 0) // bit 21: CAP_SYS_ADMIN
}

/// The helper's gate: Ok for root, otherwise an error saying what is missing.
pub fn require() -> Result<(), HelperError> {
    match detect() {
        Privilege::Root => Ok(()),
        Privilege::UserNamespace => Err(HelperError::Privilege(
            "not running as root: the mirror needs root (overlay on the workspace and $HOME, \
             cgroup limits); this kernel allows user namespaces, but rootless mode also needs a \
             delegated cgroup and is not implemented yet, so the command was NOT run"
                .into(),
        )),
        Privilege::Unavailable(why) => Err(HelperError::Privilege(format!(
            "not running as root and user namespaces are unavailable ({why}): the command was \
             NOT run"
        ))),
    }
}
