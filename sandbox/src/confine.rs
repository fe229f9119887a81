//! Confining the command process just before exec: no new privileges, no capabilities, the agent's
//! uid, Landlock, and a seccomp filter (hand-written BPF) whose refusals are reported.

use crate::config::RunAs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// A confinement step that failed; the command does not run.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// prctl(PR_SET_NO_NEW_PRIVS).
    #[error("failed to set no_new_privs")]
    NoNewPrivs(#[source] std::io::Error),
    /// Bounding/ambient/effective capability drop.
    #[error("failed to drop capabilities")]
    Capabilities(#[source] std::io::Error),
    /// setgroups/setresgid/setresuid.
    #[error("failed to switch to uid {0}")]
    SwitchUser(u32, #[source] std::io::Error),
    /// A landlock syscall.
    #[error("failed to apply landlock ({0})")]
    Landlock(&'static str, #[source] std::io::Error),
    /// seccomp(SECCOMP_SET_MODE_FILTER).
    #[error("failed to install the seccomp filter")]
    Seccomp(#[source] std::io::Error),
}

fn check(rc: libc::c_long) -> std::io::Result<libc::c_long> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Exec of setuid binaries or file capabilities can no longer raise privileges (required by
/// seccomp and Landlock for an unprivileged process anyway).
pub fn no_new_privs() -> Result<(), ConfineError> {
    nix::sys::prctl::set_no_new_privs().map_err(|e| ConfineError::NoNewPrivs(e.into()))
}

/// Drop every capability (bounding set, ambient, then the uid switch or an empty capset), so even
/// a command running as uid 0 cannot mount, load modules, or override file permissions.
pub fn drop_privileges(run_as: Option<RunAs>) -> Result<(), ConfineError> {
    let last_cap: libc::c_ulong = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63);
    // The bounding set by number up to the kernel's cap_last_cap: `caps::clear(Bounding)` drops
    // only the capabilities the crate knows, and a newer kernel may have more.
    for cap in 0..=last_cap {
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(ConfineError::Capabilities(e));
            }
        }
    }
    let caps_err = |e: caps::errors::CapsError| {
        ConfineError::Capabilities(std::io::Error::other(e.to_string()))
    };
    caps::clear(None, caps::CapSet::Ambient).map_err(caps_err)?;
    if let Some(RunAs { uid, gid }) = run_as {
        use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};
        let err = |e: nix::Error| ConfineError::SwitchUser(uid, e.into());
        let (u, g) = (Uid::from_raw(uid), Gid::from_raw(gid));
        setgroups(&[]).map_err(err)?;
        setresgid(g, g, g).map_err(err)?;
        // Leaving uid 0 clears the permitted and effective sets.
        setresuid(u, u, u).map_err(err)?;
    }
    // Every bit of the three sets, known to the `caps` crate or not: capset(2) with zeroed words.
    // Effective first: it must stay a subset of permitted.
    for set in [
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
        caps::CapSet::Inheritable,
    ] {
        caps::clear(None, set).map_err(caps_err)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Landlock (second layer: the mounts already make everything but the mirrored trees read-only).

const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;

/// The Landlock ABI version the kernel offers (0 = none).
pub fn landlock_abi() -> u32 {
    // SAFETY: the documented version query: NULL attr, size 0, flag VERSION; reads no memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(rc).unwrap_or(0)
}

/// Restrict this process (and what it execs) to reading everywhere and writing only under
/// `writable`; without network, TCP connect is refused except to `proxy_port` (the mirror's own
/// proxy listener, network by domain); abstract Unix sockets and signals are scoped to the run. Returns the ABI the kernel offers (0: Landlock unavailable, nothing
/// applied). The `landlock` crate handles what that ABI supports and drops the rest (best effort,
/// as the kernel documentation recommends).
pub fn landlock(
    writable: &[PathBuf],
    network: bool,
    proxy_port: Option<u16>,
) -> Result<u32, ConfineError> {
    use landlock::{
        Access, AccessFs, AccessNet, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, Scope, ABI,
    };
    let abi = landlock_abi();
    if abi == 0 {
        return Ok(0);
    }
    let err = |what: &'static str| {
        move |e: landlock::RulesetError| {
            ConfineError::Landlock(what, std::io::Error::other(e.to_string()))
        }
    };
    // ABI 1..5: execute .. make_sym, refer, truncate, ioctl_dev (later ABIs add no fs right).
    let fs = AccessFs::from_all(ABI::V5);
    let mut ruleset = Ruleset::default()
        .handle_access(fs)
        .map_err(err("create ruleset"))?;
    if !network {
        ruleset = ruleset
            .handle_access(AccessNet::ConnectTcp)
            .map_err(err("create ruleset"))?;
    }
    let mut ruleset = ruleset
        .scope(Scope::from_all(ABI::V6))
        .map_err(err("create ruleset"))?
        .create()
        .map_err(err("create ruleset"))?;
    let read = AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir;
    let mut rules = vec![(Path::new("/"), read)];
    rules.push((
        Path::new("/dev"),
        read | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev,
    ));
    for w in writable {
        rules.push((
            w.as_path(),
            fs & !(AccessFs::MakeChar | AccessFs::MakeBlock),
        ));
    }
    for (path, access) in rules {
        let Ok(fd) = PathFd::new(path) else {
            continue; // a path that does not exist in the mirror needs no rule
        };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(err("add rule"))?;
    }
    if let (false, Some(port)) = (network, proxy_port) {
        ruleset = ruleset
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(err("add rule"))?;
    }
    ruleset.restrict_self().map_err(err("restrict self"))?;
    Ok(abi)
}

// ---------------------------------------------------------------------------------------------
// seccomp

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_NOTIFY: u32 = 0x7fc0_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const fn ret_errno(e: i32) -> u32 {
    0x0005_0000 | (e as u32 & 0xffff)
}

const LD_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JSET: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const AND: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const RET: u16 = 0x06; // BPF_RET | BPF_K

const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const fn arg_lo(i: u32) -> u32 {
    16 + 8 * i
}
const fn arg_hi(i: u32) -> u32 {
    16 + 8 * i + 4
}

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// Syscalls always refused (and reported): they reach kernel state beyond the run (ptrace,
/// process_vm_*, pidfd_getfd on other processes, mounts and namespaces that could undo the mirror, keyrings,
/// bpf, perf, io_uring which bypasses this filter, module loading, kexec, swap, reboot, acct).
pub fn refused_syscalls() -> Vec<(libc::c_long, &'static str)> {
    let mut v = vec![
        (libc::SYS_ptrace, "ptrace"),
        (libc::SYS_process_vm_readv, "process_vm_readv"),
        (libc::SYS_process_vm_writev, "process_vm_writev"),
        // Another process's fds (pid 1 holds the seccomp listener: the capability check of
        // ptrace_may_access already refuses it; this is the second lock) and its memory.
        (libc::SYS_pidfd_getfd, "pidfd_getfd"),
        (libc::SYS_process_madvise, "process_madvise"),
        (libc::SYS_io_uring_setup, "io_uring_setup"),
        (libc::SYS_io_uring_enter, "io_uring_enter"),
        (libc::SYS_io_uring_register, "io_uring_register"),
        (libc::SYS_keyctl, "keyctl"),
        (libc::SYS_add_key, "add_key"),
        (libc::SYS_request_key, "request_key"),
        (libc::SYS_bpf, "bpf"),
        (libc::SYS_perf_event_open, "perf_event_open"),
        (libc::SYS_mount, "mount"),
        (libc::SYS_umount2, "umount2"),
        (libc::SYS_unshare, "unshare"),
        (libc::SYS_setns, "setns"),
        (libc::SYS_pivot_root, "pivot_root"),
        (libc::SYS_chroot, "chroot"),
        (libc::SYS_init_module, "init_module"),
        (libc::SYS_finit_module, "finit_module"),
        (libc::SYS_delete_module, "delete_module"),
        (libc::SYS_kexec_load, "kexec_load"),
        (libc::SYS_kexec_file_load, "kexec_file_load"),
        (libc::SYS_fsopen, "fsopen"),
        (libc::SYS_fsconfig, "fsconfig"),
        (libc::SYS_fsmount, "fsmount"),
        (libc::SYS_fspick, "fspick"),
        (libc::SYS_open_tree, "open_tree"),
        (libc::SYS_move_mount, "move_mount"),
        (libc::SYS_mount_setattr, "mount_setattr"),
        (libc::SYS_swapon, "swapon"),
        (libc::SYS_swapoff, "swapoff"),
        (libc::SYS_reboot, "reboot"),
        (libc::SYS_acct, "acct"),
        (libc::SYS_userfaultfd, "userfaultfd"),
        (libc::SYS_quotactl, "quotactl"),
        (libc::SYS_open_by_handle_at, "open_by_handle_at"),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([(libc::SYS_iopl, "iopl"), (libc::SYS_ioperm, "ioperm")]);
    v
}

/// Where a watched write syscall names a path: the dirfd argument (for `*at` calls), the path
/// argument, and whether the kernel follows a final symlink.
#[derive(Clone, Copy, Debug)]
pub struct PathArg {
    /// Index of the dirfd argument, if any.
    pub dirfd: Option<usize>,
    /// Index of the path argument.
    pub path: usize,
    /// Whether a final symlink is followed (open, chmod) or acted on itself (unlink, rename).
    pub follow: bool,
}

const fn pa(dirfd: Option<usize>, path: usize, follow: bool) -> PathArg {
    PathArg {
        dirfd,
        path,
        follow,
    }
}

/// A syscall that writes the filesystem by path. The supervisor does not decide these (the
/// read-only mounts and Landlock do): it only notes attempts on paths outside the writable
/// trees, which would otherwise fail quietly inside a command that ignores the error, and then
/// lets the kernel proceed.
#[derive(Clone, Copy, Debug)]
pub struct WatchedWrite {
    /// Syscall number.
    pub nr: libc::c_long,
    /// Name for reports.
    pub name: &'static str,
    /// For open-like calls: the flags argument (only writing opens are watched).
    pub flags_arg: Option<u32>,
    /// Paths it writes.
    pub paths: &'static [PathArg],
}

/// open flags that make an open a write.
const WRITE_OPEN_FLAGS: u32 =
    (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u32;

/// The watched write syscalls of this architecture.
pub fn watched_writes() -> Vec<WatchedWrite> {
    let w = |nr, name, flags_arg, paths| WatchedWrite {
        nr,
        name,
        flags_arg,
        paths,
    };
    const AT_FOLLOW: &[PathArg] = &[pa(Some(0), 1, true)];
    const AT_NOFOLLOW: &[PathArg] = &[pa(Some(0), 1, false)];
    const RENAMEAT: &[PathArg] = &[pa(Some(0), 1, false), pa(Some(2), 3, false)];
    const LINKAT: &[PathArg] = &[pa(Some(2), 3, false)];
    const SYMLINKAT: &[PathArg] = &[pa(Some(1), 2, false)];
    const P0_FOLLOW: &[PathArg] = &[pa(None, 0, true)];
    let mut v = vec![
        w(libc::SYS_openat, "openat", Some(2), AT_FOLLOW),
        w(libc::SYS_openat2, "openat2", None, AT_FOLLOW),
        w(libc::SYS_mkdirat, "mkdirat", None, AT_NOFOLLOW),
        w(libc::SYS_unlinkat, "unlinkat", None, AT_NOFOLLOW),
        w(libc::SYS_renameat, "renameat", None, RENAMEAT),
        w(libc::SYS_renameat2, "renameat2", None, RENAMEAT),
        w(libc::SYS_linkat, "linkat", None, LINKAT),
        w(libc::SYS_symlinkat, "symlinkat", None, SYMLINKAT),
        w(libc::SYS_fchmodat, "fchmodat", None, AT_FOLLOW),
        w(libc::SYS_fchownat, "fchownat", None, AT_FOLLOW),
        w(libc::SYS_truncate, "truncate", None, P0_FOLLOW),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        const P0_NOFOLLOW: &[PathArg] = &[pa(None, 0, false)];
        const RENAME: &[PathArg] = &[pa(None, 0, false), pa(None, 1, false)];
        const P1_NOFOLLOW: &[PathArg] = &[pa(None, 1, false)];
        v.extend([
            w(libc::SYS_open, "open", Some(1), P0_FOLLOW),
            w(libc::SYS_creat, "creat", None, P0_FOLLOW),
            w(libc::SYS_mkdir, "mkdir", None, P0_NOFOLLOW),
            w(libc::SYS_unlink, "unlink", None, P0_NOFOLLOW),
            w(libc::SYS_rmdir, "rmdir", None, P0_NOFOLLOW),
            w(libc::SYS_rename, "rename", None, RENAME),
            w(libc::SYS_link, "link", None, P1_NOFOLLOW),
            w(libc::SYS_symlink, "symlink", None, P1_NOFOLLOW),
            w(libc::SYS_chmod, "chmod", None, P0_FOLLOW),
            w(libc::SYS_chown, "chown", None, P0_FOLLOW),
            w(libc::SYS_lchown, "lchown", None, P0_NOFOLLOW),
        ]);
    }
    v
}

/// Name of a syscall the filter hands to the supervisor (for reports).
pub fn syscall_name(nr: i32) -> &'static str {
    let nr = libc::c_long::from(nr);
    if let Some((_, name)) = refused_syscalls().into_iter().find(|(n, _)| *n == nr) {
        return name;
    }
    match nr {
        libc::SYS_connect => "connect",
        libc::SYS_sendto => "sendto",
        libc::SYS_clone => "clone",
        libc::SYS_mknodat => "mknodat",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_mknod => "mknod",
        _ => "syscall",
    }
}

/// Namespace-creating clone flags (clone with any of them goes to the supervisor, which refuses).
const CLONE_NS_MASK: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

/// The filter program. `network`: the run keeps the host network (then `sendto` with an address
/// is not inspected). Notifications go to the run's pid 1, which reports and answers them.
pub fn filter(network: bool) -> Vec<libc::sock_filter> {
    let mut p = vec![
        // Wrong architecture (e.g. the i386 entry points on x86_64) ⇒ kill: the numbers below
        // would mean other syscalls there.
        ins(LD_ABS, 0, 0, OFF_ARCH),
        ins(JEQ, 1, 0, AUDIT_ARCH),
        ins(RET, 0, 0, RET_KILL_PROCESS),
        ins(LD_ABS, 0, 0, OFF_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        // x32 syscalls (bit 30) alias the x86_64 ones with other numbers.
        p.push(ins(JGE, 0, 1, 0x4000_0000));
        p.push(ins(RET, 0, 0, ret_errno(libc::EPERM)));
    }
    for (n, _) in refused_syscalls() {
        p.extend(on_syscall(n, &[ins(RET, 0, 0, RET_NOTIFY)]));
    }
    // Filesystem writes by path: noted by the supervisor, decided by the kernel.
    for wr in watched_writes() {
        match wr.flags_arg {
            Some(arg) => p.extend(on_syscall(
                wr.nr,
                &[
                    ins(LD_ABS, 0, 0, arg_lo(arg)),
                    ins(JSET, 0, 1, WRITE_OPEN_FLAGS),
                    ins(RET, 0, 0, RET_NOTIFY),
                    ins(RET, 0, 0, RET_ALLOW),
                ],
            )),
            None => p.extend(on_syscall(wr.nr, &[ins(RET, 0, 0, RET_NOTIFY)])),
        }
    }
    // clone3 passes its flags in memory the filter cannot read: make libc fall back to clone.
    p.extend(on_syscall(
        libc::SYS_clone3,
        &[ins(RET, 0, 0, ret_errno(libc::ENOSYS))],
    ));
    // Every connect goes to the supervisor: it decides by the socket's own domain (not by the
    // address in memory, which another thread could change), reports, and refuses what leaves.
    p.extend(on_syscall(libc::SYS_connect, &[ins(RET, 0, 0, RET_NOTIFY)]));
    // clone(flags) with namespace flags.
    p.extend(on_syscall(
        libc::SYS_clone,
        &[
            ins(LD_ABS, 0, 0, arg_lo(0)),
            ins(JSET, 0, 1, CLONE_NS_MASK),
            ins(RET, 0, 0, RET_NOTIFY),
            ins(RET, 0, 0, RET_ALLOW),
        ],
    ));
    // AF_UNIX datagram sockets can send to any socket path (even on a read-only mount, even to
    // the host's): refuse creating them. Stream/seqpacket ones can only reach a path via
    // connect, which the supervisor sees.
    for call in [libc::SYS_socket, libc::SYS_socketpair] {
        p.extend(on_syscall(
            call,
            &[
                ins(LD_ABS, 0, 0, arg_lo(0)),
                ins(JEQ, 0, 3, libc::AF_UNIX as u32),
                ins(LD_ABS, 0, 0, arg_lo(1)),
                ins(AND, 0, 0, 0xf),
                ins(JEQ, 1, 0, libc::SOCK_DGRAM as u32),
                ins(RET, 0, 0, RET_ALLOW),
                ins(RET, 0, 0, ret_errno(libc::EPERM)),
            ],
        ));
    }
    // mknod of a device node (FIFOs and sockets are fine).
    #[cfg(target_arch = "x86_64")]
    let mknods = [(libc::SYS_mknod, 1u32), (libc::SYS_mknodat, 2u32)];
    #[cfg(not(target_arch = "x86_64"))]
    let mknods = [(libc::SYS_mknodat, 2u32)];
    for (call, mode_arg) in mknods {
        p.extend(on_syscall(
            call,
            &[
                ins(LD_ABS, 0, 0, arg_lo(mode_arg)),
                ins(AND, 0, 0, libc::S_IFMT),
                ins(JEQ, 2, 0, libc::S_IFCHR),
                ins(JEQ, 1, 0, libc::S_IFBLK),
                ins(RET, 0, 0, RET_ALLOW),
                ins(RET, 0, 0, RET_NOTIFY),
            ],
        ));
    }
    if !network {
        // sendto with a destination address (UDP without connect): reported and refused.
        p.extend(on_syscall(
            libc::SYS_sendto,
            &[
                ins(LD_ABS, 0, 0, arg_lo(4)),
                ins(JEQ, 0, 3, 0),
                ins(LD_ABS, 0, 0, arg_hi(4)),
                ins(JEQ, 0, 1, 0),
                ins(RET, 0, 0, RET_ALLOW),
                ins(RET, 0, 0, RET_NOTIFY),
            ],
        ));
    }
    p.push(ins(RET, 0, 0, RET_ALLOW));
    p
}

/// `if syscall == n { block }`, with the jump over the block counted rather than written by hand
/// (the accumulator must hold the syscall number). Every block ends in a return, so falling out
/// of it never happens; a block longer than a BPF jump can skip is a bug in this file.
fn on_syscall(n: libc::c_long, block: &[libc::sock_filter]) -> Vec<libc::sock_filter> {
    let skip = u8::try_from(block.len()).expect("a seccomp block longer than 255 instructions");
    let mut out = Vec::with_capacity(block.len() + 1);
    out.push(ins(JEQ, 0, skip, n as u32));
    out.extend_from_slice(block);
    out
}

/// Install the filter on this thread (inherited across fork and exec) and return the listener fd
/// through which the supervisor receives the notifications.
pub fn install_seccomp(network: bool) -> Result<OwnedFd, ConfineError> {
    let prog = filter(network);
    let fprog = libc::sock_fprog {
        len: u16::try_from(prog.len()).unwrap_or(u16::MAX),
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` points at `prog`, which outlives the call; the kernel copies the program.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &fprog as *const libc::sock_fprog,
        )
    })
    .map_err(ConfineError::Seccomp)?;
    // SAFETY: the kernel just returned this listener fd; we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Have the kernel switch straight from a task that notifies to the supervisor waiting on
/// `listener`, and back, instead of waking it on whichever CPU (Linux 6.6+; `EINVAL` before).
/// Every watched write of a run stops its task for one round trip: with this flag a file
/// written in the mirror took 0.45–0.57× the time it took without (docs/benchmarks.md,
/// "session 15"; a whole build's time did not separate from the noise).
pub fn sync_wake_up(listener: &OwnedFd) -> std::io::Result<()> {
    const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;
    // SAFETY: SET_FLAGS takes the flags by value; no memory is read or written.
    let rc = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
            SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel takes the flag on a real listener (from 6.6 on; an older kernel must refuse
    /// it with EINVAL, nothing else), and refuses an fd that is no listener.
    #[test]
    fn the_kernel_takes_the_sync_wake_up_flag() {
        // The filter goes on a thread of its own that only hands the listener over and ends (a
        // watched write on it would wait for a supervisor that never answers).
        let listener = std::thread::spawn(|| {
            no_new_privs().expect("no_new_privs");
            install_seccomp(false).expect("install the filter")
        })
        .join()
        .expect("the filter's thread");
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
        let mut v = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>());
        let version = (v.next(), v.next());
        let (Some(Ok(major)), Some(Ok(minor))) = version else {
            panic!("cannot read the kernel's version from {release:?}");
        };
        match sync_wake_up(&listener) {
            Ok(()) => assert!((major, minor) >= (6, 6), "{release}"),
            Err(e) => {
                assert!((major, minor) < (6, 6), "{release}: {e}");
                assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{release}");
            }
        }
        let not_a_listener = std::fs::File::open("/dev/null").expect("open /dev/null");
        assert!(sync_wake_up(&OwnedFd::from(not_a_listener)).is_err());
    }

    /// A classic-BPF interpreter for the instructions the filter uses, over a seccomp_data.
    fn eval(p: &[libc::sock_filter], arch: u32, nr: libc::c_long, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&(nr as i32).to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let f = p[pc];
            let jump = |cond: bool| pc + 1 + usize::from(if cond { f.jt } else { f.jf });
            pc = match f.code {
                LD_ABS => {
                    let k = f.k as usize;
                    acc = u32::from_le_bytes([data[k], data[k + 1], data[k + 2], data[k + 3]]);
                    pc + 1
                }
                AND => {
                    acc &= f.k;
                    pc + 1
                }
                JEQ => jump(acc == f.k),
                JGE => jump(acc >= f.k),
                JSET => jump(acc & f.k != 0),
                RET => return f.k,
                other => panic!("unexpected instruction {other:#x}"),
            };
        }
    }

    #[test]
    fn filter_decisions() {
        let no_net = filter(false);
        let net = filter(true);
        let run = |p: &[libc::sock_filter], nr, args| eval(p, AUDIT_ARCH, nr, args);
        let unix = libc::AF_UNIX as u64;
        let dgram = (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC) as u64;
        let cases: &[(&str, libc::c_long, [u64; 6], u32)] = &[
            ("read", libc::SYS_read, [0; 6], RET_ALLOW),
            ("ptrace", libc::SYS_ptrace, [16, 1, 0, 0, 0, 0], RET_NOTIFY),
            ("mount", libc::SYS_mount, [0; 6], RET_NOTIFY),
            ("io_uring", libc::SYS_io_uring_setup, [0; 6], RET_NOTIFY),
            (
                "connect",
                libc::SYS_connect,
                [3, 0, 16, 0, 0, 0],
                RET_NOTIFY,
            ),
            (
                "unix dgram socket",
                libc::SYS_socket,
                [unix, dgram, 0, 0, 0, 0],
                ret_errno(libc::EPERM),
            ),
            (
                "unix dgram pair",
                libc::SYS_socketpair,
                [unix, dgram, 0, 0, 0, 0],
                ret_errno(libc::EPERM),
            ),
            (
                "unix stream socket",
                libc::SYS_socket,
                [unix, libc::SOCK_STREAM as u64, 0, 0, 0, 0],
                RET_ALLOW,
            ),
            (
                "inet dgram socket",
                libc::SYS_socket,
                [libc::AF_INET as u64, dgram, 0, 0, 0, 0],
                RET_ALLOW,
            ),
            (
                "clone thread",
                libc::SYS_clone,
                [
                    libc::CLONE_VM as u64 | libc::CLONE_THREAD as u64,
                    0,
                    0,
                    0,
                    0,
                    0,
                ],
                RET_ALLOW,
            ),
            (
                "clone userns",
                libc::SYS_clone,
                [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0],
                RET_NOTIFY,
            ),
            ("clone3", libc::SYS_clone3, [0; 6], ret_errno(libc::ENOSYS)),
            (
                "openat read",
                libc::SYS_openat,
                [0, 0, libc::O_RDONLY as u64, 0, 0, 0],
                RET_ALLOW,
            ),
            (
                "openat write",
                libc::SYS_openat,
                [0, 0, (libc::O_WRONLY | libc::O_CREAT) as u64, 0, 0, 0],
                RET_NOTIFY,
            ),
            ("unlinkat", libc::SYS_unlinkat, [0; 6], RET_NOTIFY),
            (
                "mknod char",
                libc::SYS_mknodat,
                [0, 0, u64::from(libc::S_IFCHR | 0o600), 0, 0, 0],
                RET_NOTIFY,
            ),
            (
                "mknod block",
                libc::SYS_mknodat,
                [0, 0, u64::from(libc::S_IFBLK | 0o600), 0, 0, 0],
                RET_NOTIFY,
            ),
            (
                "mkfifo",
                libc::SYS_mknodat,
                [0, 0, u64::from(libc::S_IFIFO | 0o600), 0, 0, 0],
                RET_ALLOW,
            ),
            (
                "sendto addr",
                libc::SYS_sendto,
                [3, 0, 1, 0, 0x7fff_0000_0000, 16],
                RET_NOTIFY,
            ),
            (
                "sendto connected",
                libc::SYS_sendto,
                [3, 0, 1, 0, 0, 0],
                RET_ALLOW,
            ),
        ];
        for (name, nr, args, want) in cases {
            assert_eq!(run(&no_net, *nr, *args), *want, "{name}");
        }
        assert_eq!(
            run(&net, libc::SYS_sendto, [3, 0, 1, 0, 0x7fff_0000_0000, 16]),
            RET_ALLOW
        );
        assert_eq!(
            run(&net, libc::SYS_connect, [3, 0, 16, 0, 0, 0]),
            RET_NOTIFY
        );
        assert_eq!(
            eval(&no_net, 0x4000_0003, libc::SYS_read, [0; 6]),
            RET_KILL_PROCESS
        );
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            run(&no_net, 0x4000_0000 + libc::SYS_ptrace, [0; 6]),
            ret_errno(libc::EPERM)
        );
    }

    /// Every jump lands inside the program and the program ends in a return.
    #[test]
    fn filter_jumps_stay_in_bounds() {
        for network in [false, true] {
            let p = filter(network);
            assert!(p.len() < 4096);
            for (i, f) in p.iter().enumerate() {
                if f.code & 0x07 == 0x05 {
                    assert!(i + 1 + usize::from(f.jt.max(f.jf)) < p.len(), "jump at {i}");
                }
            }
            assert_eq!(p.last().map(|f| f.code), Some(RET));
        }
    }
}
