//! The run's pid 1: builds the mirror, starts the confined `bash -c`, answers the seccomp
//! supervisor's notifications, reaps orphans, and reports what was left running.
//!
//! Runs in the helper's forked child, so it is single-threaded; when it exits, the kernel kills
//! every other process of the run's pid namespace. The mount namespace (mirror) and the
//! fanotify group go when the helper lets go of them, after its answer (`helper::Held`).

use crate::config::RunAs;
use crate::confine;
use crate::model::Effect;
use crate::protocol::InitMessage;
use crate::setup::{enter_mirror, MountPlan};
use crate::syscall::RealSyscall;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// What pid 1 needs besides the mount plan.
pub struct InitArgs<'a> {
    /// The mount plan.
    pub plan: &'a MountPlan,
    /// The command and what comes with it: given now, or awaited once the mirror is built.
    pub job: JobSource,
    /// Run `bash -O expand_aliases -c` (a mirrored run: Claude Code evaluates commands with
    /// alias expansion on, so `alias ls='rm x'⏎ls` must do here what it does for real).
    pub aliases: bool,
    /// Optional uid/gid switch.
    pub run_as: Option<RunAs>,
    /// Whether network is allowed.
    pub network: bool,
    /// Network by domain: the caller's end of the listener hand-off (see [`crate::net`]).
    pub proxy: Option<OwnedFd>,
    /// Writable trees for Landlock.
    pub writable: Vec<PathBuf>,
    /// The detached copy of the host's mount tree the mirror's root is made of
    /// ([`crate::syscall::clone_tree`]).
    pub host_root: OwnedFd,
    /// What the helper made when it was prepared (namespaces no process has entered, a
    /// detached `/dev`), used instead of making them (`setup::enter_mirror`; the network
    /// namespace is unused when the run keeps the host's network).
    pub ahead: crate::setup::MadeAhead,
    /// The helper's socket for what must outlive pid 1 (`helper::Held`): the mirror's mount
    /// namespace and the fanotify group, so that pid 1's exit does not wait for their teardown.
    pub hand_off: Option<OwnedFd>,
    /// Write end of the report pipe (InitMessage lines).
    pub report: OwnedFd,
}

/// The command of a run and what comes with it.
pub struct Job {
    /// Command for `bash -c`.
    pub command: String,
    /// Working directory inside the mirror (the workspace, or a mirrored run's caller's cwd).
    pub cwd: PathBuf,
    /// Environment of the command.
    pub env: Vec<(String, String)>,
    /// The run's start (precise clock): the command starts once the coarse clock is past it,
    /// so every host change it could have seen is stamped after the start.
    pub not_before: crate::clock::Stamp,
    /// Write ends for the command's stdout and stderr.
    pub stdout: OwnedFd,
    /// See `stdout`.
    pub stderr: OwnedFd,
}

/// Where pid 1's [`Job`] comes from.
pub enum JobSource {
    /// Known when pid 1 is forked (a run built at `Run`).
    Given(Job),
    /// A mirror built ahead (`helper::Whole`): once the mirror is built pid 1 reports
    /// [`InitMessage::Prepared`] and waits on this socket for the output pipes and a
    /// [`crate::protocol::Go`] line ([`recv_go`]); its hang-up ends pid 1 before any command.
    Awaited(OwnedFd),
}

struct Reporter(std::fs::File);

impl Reporter {
    fn send(&mut self, msg: &InitMessage) {
        if let Ok(mut line) = serde_json::to_vec(msg) {
            line.push(b'\n');
            let _ = self.0.write_all(&line);
        }
    }
}

/// Pid 1's whole life; returns the exit code for `_exit`.
pub fn init_main(args: InitArgs<'_>) -> i32 {
    // If the helper dies, so do we (and with us the whole run).
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    let mut report = Reporter(std::fs::File::from(args.report));
    let entered = enter_mirror(
        &RealSyscall,
        args.plan,
        args.host_root.as_raw_fd(),
        args.ahead.raw(),
    );
    // Attached or entered (or failed): the fds are of no further use, and no fd of pid 1's
    // reaches the command.
    drop((args.host_root, args.ahead));
    let gone = match entered {
        Ok(gone) => gone,
        Err(e) => {
            report.send(&InitMessage::SetupFailed { message: chain(&e) });
            return 1;
        }
    };
    // A mirror built ahead with a mask whose path vanished between the walk and its mount (and
    // may be back by the time the builder reads the identities) is not offered: the run builds
    // its own, as a run that met the same race at `Run` would mount what is there then.
    if gone > 0 && matches!(args.job, JobSource::Awaited(_)) {
        report.send(&InitMessage::SetupFailed {
            message: format!("{gone} masked path(s) vanished while the mirror was built ahead"),
        });
        return 1;
    }
    // Opens through the masks are queued from here on and drained once the command is gone.
    let masks: Vec<(&Path, bool)> = args
        .plan
        .masks
        .iter()
        .map(|m| (m.path.as_path(), m.dir))
        .collect();
    let watch = crate::maskwatch::MaskWatch::new(&masks);
    // The helper holds the mirror's mount namespace and the group from here on, unread, until
    // after its answer (`helper::Held`): their teardown is off the run's path. Best effort: a
    // failure only leaves it on the path. Both fds close before the command exists.
    if let Some(hand_off) = args.hand_off {
        let ns = std::fs::File::open("/proc/self/ns/mnt").ok();
        let fds: Vec<RawFd> = ns
            .iter()
            .map(AsRawFd::as_raw_fd)
            .chain(watch.iter().map(|w| w.as_fd().as_raw_fd()))
            .collect();
        if !fds.is_empty() {
            let _ = send_fds(&hand_off, &fds);
        }
    }
    // A mirror built ahead: it is ready; the command comes when the run does (or never: the
    // helper found the mirror stale, or nobody ran it, and its hang-up ends us here).
    let job = match args.job {
        JobSource::Given(job) => job,
        JobSource::Awaited(sock) => {
            report.send(&InitMessage::Prepared);
            match recv_go(&sock) {
                Some((fds, go)) => match <[OwnedFd; 2]>::try_from(fds) {
                    Ok([stdout, stderr]) => Job {
                        command: go.command,
                        cwd: go.cwd,
                        env: go.env,
                        not_before: go.started,
                        stdout,
                        stderr,
                    },
                    Err(_) => return 1,
                },
                None => return 1,
            }
        }
    };
    // Network by domain: the proxy's listener, made here in the mirror's own network namespace
    // (before the command exists) and sent to the caller; our copy is closed right after.
    let mut proxy_port = None;
    if let Some(handoff) = args.proxy {
        let sent = crate::net::open_listener().and_then(|(listener, port)| {
            send_fd(&handoff, listener.as_raw_fd())
                .map(|()| port)
                .map_err(std::io::Error::from)
        });
        match sent {
            Ok(port) => proxy_port = Some(port),
            Err(e) => {
                report.send(&InitMessage::SetupFailed {
                    message: format!("failed to open the proxy listener in the mirror: {e}"),
                });
                return 1;
            }
        }
    }
    let env = match proxy_port {
        Some(port) => crate::net::with_proxy_env(&job.env, port),
        None => job.env.clone(),
    };
    // SIGCHLD arrives through a signalfd so one poll waits for children and notifications.
    let mut mask = nix::sys::signal::SigSet::empty();
    mask.add(nix::sys::signal::Signal::SIGCHLD);
    if mask.thread_block().is_err() {
        return 1;
    }
    let sfd = match nix::sys::signalfd::SignalFd::with_flags(
        &mask,
        nix::sys::signalfd::SfdFlags::SFD_CLOEXEC | nix::sys::signalfd::SfdFlags::SFD_NONBLOCK,
    ) {
        Ok(s) => s,
        Err(e) => {
            report.send(&InitMessage::SetupFailed {
                message: format!("failed to create signalfd: {e}"),
            });
            return 1;
        }
    };
    // The child passes us its seccomp listener over this socket pair (SCM_RIGHTS): the fd is in
    // flight as soon as it is sent, so the child can close its copy and exec without waiting.
    let Some((ours, theirs)) = socket_pair() else {
        report.send(&InitMessage::SetupFailed {
            message: "failed to create the listener hand-off socket pair".into(),
        });
        return 1;
    };
    crate::clock::wait_past(job.not_before);
    let child = Command {
        command: &job.command,
        cwd: &job.cwd,
        aliases: args.aliases,
        env: &env,
        run_as: args.run_as,
        network: args.network,
        proxy_port,
        writable: &args.writable,
        stdout: &job.stdout,
        stderr: &job.stderr,
        handoff: &theirs,
    };
    let forked = std::time::Instant::now();
    // SAFETY: this process is single-threaded (forked from the single-threaded helper), so the
    // child may run arbitrary code after fork.
    let pid = match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            let code = child.exec();
            // SAFETY: _exit is always safe; we must not run destructors in a failed child.
            unsafe { libc::_exit(code) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => child,
        Err(e) => {
            report.send(&InitMessage::SetupFailed {
                message: format!("failed to fork the command: {e}"),
            });
            return 1;
        }
    };
    drop((job.stdout, job.stderr, theirs));
    // None: the child failed before installing the filter (it said why on stderr), or the fd
    // never arrived, in which case the kernel fails every notified syscall (fail closed).
    let listener = recv_fd(&ours);
    drop(ours);
    if let Some(l) = &listener {
        // Best effort: a kernel before 6.6 refuses the flag, and notifications then take the
        // ordinary wake-up (slower, the same answers).
        let _ = confine::sync_wake_up(l);
    }
    let mut writable = args.writable.clone();
    // Device nodes and /proc/self are written by ordinary tools (`> /dev/null`, oom_score_adj).
    writable.extend(["/dev", "/proc"].map(PathBuf::from));
    let mut status = supervise(
        pid,
        &sfd,
        listener.as_ref(),
        &Policy {
            network: args.network,
            proxy_port,
            writable,
        },
        &mut report,
    );
    if let InitMessage::Exited { ran_us, .. } = &mut status {
        *ran_us = crate::protocol::micros(forked.elapsed());
    }
    report.send(&status);
    for e in leftovers() {
        report.send(&InitMessage::Effect(e));
    }
    for e in watch.iter().flat_map(|w| w.drain()) {
        report.send(&InitMessage::Effect(e));
    }
    0
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// Everything the command child needs between fork and exec.
struct Command<'a> {
    command: &'a str,
    cwd: &'a Path,
    aliases: bool,
    env: &'a [(String, String)],
    run_as: Option<RunAs>,
    network: bool,
    proxy_port: Option<u16>,
    writable: &'a [PathBuf],
    stdout: &'a OwnedFd,
    stderr: &'a OwnedFd,
    handoff: &'a OwnedFd,
}

impl Command<'_> {
    /// Confine ourselves and exec `bash -c`; returns only on failure (exit code 126/127).
    fn exec(&self) -> i32 {
        let fail = |what: &str, e: &dyn std::error::Error| {
            let msg = format!("cmdgate-sandbox: {what}: {}\n", chain(e));
            let _ = nix::unistd::write(self.stderr, msg.as_bytes());
            126
        };
        // The signal mask is inherited across exec: unblock what pid 1 blocked.
        let _ = nix::sys::signal::SigSet::all().thread_unblock();
        // Our own session: no controlling terminal, and a job-control `kill 0` stays inside.
        let _ = nix::unistd::setsid();
        // stdin is /dev/null; a failure to open it leaves fd 0 as it was (the helper's /dev/null).
        if let Ok(null) = nix::fcntl::open(
            c"/dev/null",
            nix::fcntl::OFlag::O_RDWR,
            nix::sys::stat::Mode::empty(),
        ) {
            let _ = nix::unistd::dup2_stdin(&null);
        }
        let _ = nix::unistd::dup2_stdout(self.stdout);
        let _ = nix::unistd::dup2_stderr(self.stderr);
        if let Err(e) = nix::unistd::chdir(self.cwd) {
            return fail("chdir to the workspace", &e);
        }
        if let Err(e) = confine::no_new_privs() {
            return fail("confine", &e);
        }
        if let Err(e) = confine::landlock(self.writable, self.network, self.proxy_port) {
            return fail("confine", &e);
        }
        if let Err(e) = confine::drop_privileges(self.run_as) {
            return fail("confine", &e);
        }
        // Last: the filter. From here on mount/ptrace/... are refused for us and our descendants.
        let listener = match confine::install_seccomp(self.network) {
            Ok(l) => l,
            Err(e) => return fail("confine", &e),
        };
        // Give pid 1 the listener, then close ours: the command must never hold the fd that
        // answers its own notifications.
        if let Err(e) = send_fd(self.handoff, listener.as_raw_fd()) {
            return fail("hand over the seccomp listener", &e);
        }
        drop(listener);
        // Close every inherited fd ≥ 3 (helper pipes, lock files, ...).
        // SAFETY: integer arguments only.
        unsafe { libc::close_range(3, u32::MAX, 0) };
        let bash = ["/bin/bash", "/usr/bin/bash"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap_or("/bin/bash");
        let mut argv = vec![CString::new(bash).unwrap_or_default()];
        if self.aliases {
            argv.push(c"-O".to_owned());
            argv.push(c"expand_aliases".to_owned());
        }
        argv.push(c"-c".to_owned());
        argv.push(CString::new(self.command.as_bytes()).unwrap_or_default());
        let envp: Vec<CString> = self
            .env
            .iter()
            .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok())
            .collect();
        let e = nix::unistd::execve(&argv[0], &argv, &envp).unwrap_err();
        let msg = format!("cmdgate-sandbox: exec {bash}: {e}\n");
        let _ = nix::unistd::write(std::io::stderr(), msg.as_bytes());
        127
    }
}

pub(crate) fn socket_pair() -> Option<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .ok()
}

/// Send `fd` over `sock` with SCM_RIGHTS (one data byte carries it).
pub(crate) fn send_fd(sock: &OwnedFd, fd: RawFd) -> nix::Result<()> {
    send_fds(sock, &[fd])
}

/// Send every fd of `fds` over `sock` in one message with SCM_RIGHTS (one data byte carries
/// them).
pub(crate) fn send_fds(sock: &OwnedFd, fds: &[RawFd]) -> nix::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
    let sent = sendmsg::<UnixAddr>(
        sock.as_raw_fd(),
        &[std::io::IoSlice::new(&[0u8])],
        &[ControlMessage::ScmRights(fds)],
        MsgFlags::empty(),
        None,
    )?;
    if sent == 1 {
        Ok(())
    } else {
        Err(nix::errno::Errno::EIO)
    }
}

/// Receive the fds of one [`send_fds`] message (close-on-exec), at most `MAX_FDS`; `None` on
/// EOF, an error, or a message whose fds did not all fit (every received fd is closed then).
pub(crate) fn recv_fds(sock: &OwnedFd) -> Option<Vec<OwnedFd>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};
    const MAX_FDS: usize = 4;
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let msg = recvmsg::<UnixAddr>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .ok()?;
    let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
    let mut received: Vec<OwnedFd> = Vec::new();
    for c in msg.cmsgs().ok()? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            // SAFETY: SCM_RIGHTS installed each received fd in our table (close-on-exec) and
            // nothing else owns it.
            received.extend(
                fds.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    (msg.bytes == 1 && !truncated).then_some(received)
}

/// Send a [`crate::protocol::Go`]: the output pipes `fds` (one [`send_fds`] message), then its
/// JSON line on the same stream.
pub(crate) fn send_go(
    sock: &OwnedFd,
    fds: &[RawFd],
    go: &crate::protocol::Go,
) -> std::io::Result<()> {
    send_fds(sock, fds)?;
    let mut line = serde_json::to_vec(go).map_err(std::io::Error::other)?;
    line.push(b'\n');
    (&std::fs::File::from(sock.try_clone()?)).write_all(&line)
}

/// Receive what [`send_go`] sent; `None` on EOF (the sender is gone), an error or a bad line.
pub(crate) fn recv_go(sock: &OwnedFd) -> Option<(Vec<OwnedFd>, crate::protocol::Go)> {
    use std::io::BufRead;
    let fds = recv_fds(sock)?;
    let mut line = Vec::new();
    std::io::BufReader::new(std::fs::File::from(sock.try_clone().ok()?))
        .read_until(b'\n', &mut line)
        .ok()?;
    Some((fds, serde_json::from_slice(&line).ok()?))
}

/// Receive one fd sent with [`send_fd`]; None on EOF (the sender died first) or error.
pub(crate) fn recv_fd(sock: &OwnedFd) -> Option<OwnedFd> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(RawFd);
    let msg = recvmsg::<UnixAddr>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .ok()?;
    if msg.bytes != 1 {
        return None;
    }
    let mut received: Vec<RawFd> = Vec::new();
    for c in msg.cmsgs().ok()? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            received.extend(fds);
        }
    }
    let mut first = None;
    for fd in received {
        // SAFETY: SCM_RIGHTS installed the received fd in our table (close-on-exec) and nothing
        // else owns it. The sender sends exactly one; any extra is taken here and closed.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        first.get_or_insert(fd);
    }
    first
}

/// `pidfd_open(2)`.
pub fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: integer arguments only.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a non-negative return is a new fd we own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Wait for the command, answering seccomp notifications meanwhile and reaping orphans.
fn supervise(
    pid: nix::unistd::Pid,
    sfd: &nix::sys::signalfd::SignalFd,
    listener: Option<&OwnedFd>,
    policy: &Policy,
    report: &mut Reporter,
) -> InitMessage {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    // The listener hangs up once no task uses the filter any more (the command's last process
    // is exiting): from then on it is always "ready" and no notification can come, so it leaves
    // the poll set — polling it would spin until the exiting process can be reaped.
    let mut listener = listener;
    loop {
        // Reap everything that has exited (orphans are reparented to us).
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(p, code)) if p == pid => {
                    return InitMessage::Exited {
                        exit: Some(code),
                        signal: None,
                        ran_us: 0,
                    }
                }
                Ok(WaitStatus::Signaled(p, sig, _)) if p == pid => {
                    return InitMessage::Exited {
                        exit: None,
                        signal: Some(sig as i32),
                        ran_us: 0,
                    }
                }
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        let (signalled, notified) = {
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            use std::os::fd::AsFd;
            let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
            if let Some(l) = listener {
                fds.push(PollFd::new(l.as_fd(), PollFlags::POLLIN));
            }
            if poll(&mut fds, PollTimeout::NONE).is_err() {
                continue;
            }
            let ready = |i: usize, want: PollFlags| {
                fds.get(i)
                    .and_then(PollFd::revents)
                    .is_some_and(|r| r.intersects(want))
            };
            let notified = ready(1, PollFlags::POLLIN);
            if !notified
                && ready(
                    1,
                    PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL,
                )
            {
                listener = None;
            }
            (ready(0, PollFlags::all()), notified)
        };
        if signalled {
            while let Ok(Some(_)) = sfd.read_signal() {}
        }
        if let (Some(l), true) = (listener, notified) {
            if let Some(effect) = answer(l, policy) {
                report.send(&InitMessage::Effect(effect));
            }
        }
    }
}

/// Receive one notification, decide, answer; returns what to report.
fn answer(listener: &OwnedFd, policy: &Policy) -> Option<Effect> {
    // SAFETY: seccomp_notif is plain old data; all-zero is a valid value (and RECV requires it).
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: RECV writes one seccomp_notif into `req`, which is valid and writable.
    let rc = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV,
            &mut req,
        )
    };
    if rc < 0 {
        return None;
    }
    let nr = req.data.nr;
    let args = req.data.args;
    let pid = req.pid as i32;
    let (effect, verdict) = decide(pid, nr, &args, policy);
    let resp = libc::seccomp_notif_resp {
        id: req.id,
        val: 0,
        error: match verdict {
            Verdict::Continue => 0,
            Verdict::Errno(e) => -e,
        },
        flags: match verdict {
            Verdict::Continue => libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
            Verdict::Errno(_) => 0,
        },
    };
    // SAFETY: SEND reads one seccomp_notif_resp from `resp`, valid for the call. A failure means
    // the target died meanwhile; nothing to do.
    unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) };
    effect
}

enum Verdict {
    /// Let the kernel run the syscall (only for sockets whose domain we checked).
    Continue,
    /// Fail it with this errno.
    Errno(i32),
}

/// What the supervisor needs to judge notifications.
struct Policy {
    /// Whether the run may use the network.
    network: bool,
    /// Network by domain: the port of the proxy's listener on 127.0.0.1 in the mirror.
    proxy_port: Option<u16>,
    /// Trees where writes are expected (the overlays, scratch dirs, /dev, /proc).
    writable: Vec<PathBuf>,
}

fn decide(pid: i32, nr: i32, args: &[u64; 6], policy: &Policy) -> (Option<Effect>, Verdict) {
    let network = policy.network;
    let call = libc::c_long::from(nr);
    if let Some(w) = confine::watched_writes().into_iter().find(|w| w.nr == call) {
        // Only noted: the kernel decides (read-only mounts, Landlock), so continuing is safe
        // even if another thread rewrites the path after we read it.
        for p in w.paths {
            let Some(path) = resolve_path(pid, p, args) else {
                continue;
            };
            let kernel_knob =
                path.starts_with("/proc/sys") || path.starts_with("/proc/sysrq-trigger");
            if kernel_knob || !policy.writable.iter().any(|root| path.starts_with(root)) {
                return (
                    Some(Effect::ReadOnlyWrite {
                        syscall: w.name.to_string(),
                        path,
                    }),
                    Verdict::Continue,
                );
            }
        }
        return (None, Verdict::Continue);
    }
    let is_net = call == libc::SYS_connect || call == libc::SYS_sendto;
    if !is_net {
        let name = confine::syscall_name(nr);
        let detail = match call {
            libc::SYS_clone => format!("flags {:#x} (new namespaces)", args[0]),
            libc::SYS_mknodat => format!("device node mode {:o}", args[2]),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_mknod => format!("device node mode {:o}", args[1]),
            libc::SYS_ptrace => format!("request {} pid {}", args[0], args[1] as i32),
            _ => String::new(),
        };
        return (
            Some(Effect::Blocked {
                syscall: name.to_string(),
                detail,
            }),
            Verdict::Errno(libc::EPERM),
        );
    }
    let fd = args[0] as i32;
    let (addr_ptr, addr_len) = if call == libc::SYS_connect {
        (args[1], args[2])
    } else {
        (args[4], args[5])
    };
    // The socket's domain is fixed at creation: decide on it, not on the address in the
    // command's memory (another thread could rewrite that after we read it).
    let domain = socket_domain(pid, fd);
    let addr = read_sockaddr(pid, addr_ptr, addr_len);
    // Network by domain: a connect to the proxy's listener goes ahead, unreported (the proxy
    // records what is asked of it). Continuing is safe even if another thread rewrites the
    // address after we read it: the run's network namespace has nothing but loopback, and
    // Landlock lets TCP connect only to the proxy's port.
    if let (Some(port), Some(libc::AF_INET | libc::AF_INET6), libc::SYS_connect) =
        (policy.proxy_port, domain, call)
    {
        if is_proxy(&addr, port) {
            return (None, Verdict::Continue);
        }
    }
    match domain {
        Some(libc::AF_INET) | Some(libc::AF_INET6) => (
            Some(Effect::Network {
                target: describe(&addr),
                allowed: network,
            }),
            if network {
                Verdict::Continue
            } else {
                Verdict::Errno(libc::ENETUNREACH)
            },
        ),
        Some(libc::AF_NETLINK) => (None, Verdict::Continue),
        Some(libc::AF_UNIX) => {
            // Never continued: a pathname socket is reachable through any mount (even
            // read-only), across namespaces. Probes of absent sockets (nscd, ...) are not
            // attempts at anything and are answered like the kernel would.
            match unix_target(pid, &addr) {
                UnixTarget::Absent => (None, Verdict::Errno(libc::ENOENT)),
                UnixTarget::Present(what) => (
                    Some(Effect::Network {
                        target: what,
                        allowed: false,
                    }),
                    Verdict::Errno(libc::EPERM),
                ),
            }
        }
        _ => (
            Some(Effect::Network {
                target: format!("{} (socket domain {domain:?})", describe(&addr)),
                allowed: false,
            }),
            Verdict::Errno(libc::EPERM),
        ),
    }
}

/// `process_vm_readv(2)` of `buf.len()` bytes at `addr` in `pid`'s memory: how many were read
/// (the kernel fails cleanly on an unmapped range).
fn vm_read(pid: i32, addr: u64, buf: &mut [u8]) -> Option<usize> {
    let remote = nix::sys::uio::RemoteIoVec {
        base: usize::try_from(addr).ok()?,
        len: buf.len(),
    };
    nix::sys::uio::process_vm_readv(
        nix::unistd::Pid::from_raw(pid),
        &mut [std::io::IoSliceMut::new(buf)],
        &[remote],
    )
    .ok()
}

/// Whether `addr` is 127.0.0.1:`port` (also as the IPv4-mapped `::ffff:127.0.0.1`).
fn is_proxy(addr: &[u8], port: u16) -> bool {
    if addr.len() < 4 {
        return false;
    }
    let family = i32::from(u16::from_ne_bytes([addr[0], addr[1]]));
    let p = u16::from_be_bytes([addr[2], addr[3]]);
    match family {
        libc::AF_INET if addr.len() >= 8 => p == port && addr[4..8] == [127, 0, 0, 1],
        libc::AF_INET6 if addr.len() >= 24 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&addr[8..24]);
            p == port
                && std::net::Ipv6Addr::from(octets).to_ipv4_mapped()
                    == Some(std::net::Ipv4Addr::LOCALHOST)
        }
        _ => false,
    }
}

/// Read a NUL-terminated path from the command's memory.
fn read_path(pid: i32, ptr: u64) -> Option<PathBuf> {
    if ptr == 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut addr = ptr;
    // Page-sized reads that never cross a page boundary (the next page may be unmapped).
    while out.len() < libc::PATH_MAX as usize {
        let chunk = 4096 - (addr as usize % 4096);
        let mut buf = vec![0u8; chunk];
        let n = vm_read(pid, addr, &mut buf);
        let n = n.filter(|n| *n > 0)?;
        if let Some(end) = buf[..n].iter().position(|b| *b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(PathBuf::from(std::ffi::OsString::from_vec(out)));
        }
        out.extend_from_slice(&buf[..n]);
        addr += n as u64;
    }
    None
}

/// The absolute path (inside the mirror) a path argument names, symlinks resolved as the kernel
/// would; components that do not exist yet are kept as written.
fn resolve_path(pid: i32, arg: &confine::PathArg, args: &[u64; 6]) -> Option<PathBuf> {
    let raw = as_seen_by(pid, read_path(pid, args[arg.path])?);
    let base = if raw.is_absolute() {
        PathBuf::from("/")
    } else {
        match arg.dirfd.map(|i| args[i] as i32) {
            None | Some(libc::AT_FDCWD) => PathBuf::from(format!("/proc/{pid}/cwd")),
            Some(fd) => PathBuf::from(format!("/proc/{pid}/fd/{fd}")),
        }
    };
    let full = base.join(&raw);
    let (dir, last) = if arg.follow {
        (full.clone(), None)
    } else {
        (
            full.parent()?.to_path_buf(),
            full.file_name().map(PathBuf::from),
        )
    };
    let mut cur = dir;
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    let canonical = loop {
        if let Some(c) = canonical(&cur) {
            break c;
        }
        rest.push(cur.file_name()?.to_os_string());
        if !cur.pop() {
            return None;
        }
    };
    let mut path = canonical;
    for r in rest.iter().rev() {
        path.push(r);
    }
    if let Some(last) = last {
        path.push(last);
    }
    Some(path)
}

/// `raw` with its leading name for "this process" — `/proc/self`, `/proc/thread-self`,
/// `/dev/fd`, `/dev/stdin|stdout|stderr` (links to `/proc/self/fd/N`) — spelled with the
/// command's thread id: resolved by the supervisor as written, they name the supervisor's own
/// fds, and `echo x >> /proc/self/fd/3` with fd 3 on `/etc/passwd` went unnoted.
fn as_seen_by(tid: i32, raw: PathBuf) -> PathBuf {
    let own = |rest: &Path| {
        let mut p = PathBuf::from(format!("/proc/{tid}"));
        p.push(rest);
        p
    };
    let named = [
        ("/dev/stdin", "fd/0"),
        ("/dev/stdout", "fd/1"),
        ("/dev/stderr", "fd/2"),
    ];
    if let Some((_, fd)) = named.iter().find(|(n, _)| raw == Path::new(n)) {
        return own(Path::new(fd));
    }
    if let Ok(rest) = raw.strip_prefix("/dev/fd") {
        return own(&Path::new("fd").join(rest));
    }
    if let Ok(rest) = raw.strip_prefix("/proc/self") {
        return own(rest);
    }
    if let Ok(rest) = raw.strip_prefix("/proc/thread-self") {
        return own(&Path::new(&format!("task/{tid}")).join(rest));
    }
    raw
}

/// `path` with every link and `..` resolved as the kernel resolves them — what `realpath`
/// gives — in one lookup: an `O_PATH` open (which opens nothing: no device, no FIFO) and the
/// name of its fd. `realpath` reads every component of the way as a possible link, 4–6 µs each
/// through the mirror's overlays, and the supervisor resolves every write it notes: a build's
/// writes under `target/` cost over 100 µs each that way. `None` when `path` does not exist, and
/// — as `realpath` fails there too — when the fd's name does not lead back to the same file:
/// `/proc/PID/fd/N` of a pipe, socket or anonymous inode (`pipe:[…]`, no path at all), a memfd
/// or a deleted file (`/memfd:x (deleted)`). Those are no filesystem write: taken as a path,
/// `echo hi > /dev/stdout` into the run's output pipe was a "write to read-only pipe:[…]", and
/// every cargo build (its jobserver re-opens a pipe by `/proc/self/fd/N`) was dirty.
fn canonical(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let fd = nix::fcntl::open(
        path,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()?;
    let name = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    // `pipe:[…]`, `socket:[…]`, `anon_inode:[…]`: no path at all.
    if !name.is_absolute() {
        return None;
    }
    // A memfd, a deleted file, or a file really named so: only the file opened counts (one more
    // lookup, so only here: on every write it cost 5–10 % of the supervisor's answer).
    if name.as_os_str().as_bytes().ends_with(b" (deleted)") {
        let opened = nix::sys::stat::fstat(&fd).ok()?;
        let named = std::fs::metadata(&name).ok()?;
        return (named.dev() == opened.st_dev && named.ino() == opened.st_ino).then_some(name);
    }
    Some(name)
}

fn socket_domain(pid: i32, fd: i32) -> Option<i32> {
    let pidfd = pidfd_open(pid)?;
    // SAFETY: integer arguments only.
    let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if copy < 0 {
        return None;
    }
    // SAFETY: a new fd we own.
    let copy = unsafe { OwnedFd::from_raw_fd(copy as RawFd) };
    let mut domain: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `domain` and `len` are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            copy.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut domain as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(domain)
}

fn read_sockaddr(pid: i32, ptr: u64, len: u64) -> Vec<u8> {
    let len = (len as usize).min(std::mem::size_of::<libc::sockaddr_un>());
    if ptr == 0 || len == 0 {
        return Vec::new();
    }
    let mut buf = vec![0u8; len];
    let n = vm_read(pid, ptr, &mut buf).unwrap_or(0);
    buf.truncate(n);
    buf
}

fn describe(addr: &[u8]) -> String {
    if addr.len() < 2 {
        return "(no address)".into();
    }
    let family = i32::from(u16::from_ne_bytes([addr[0], addr[1]]));
    match family {
        libc::AF_INET if addr.len() >= 8 => format!(
            "inet {}.{}.{}.{}:{}",
            addr[4],
            addr[5],
            addr[6],
            addr[7],
            u16::from_be_bytes([addr[2], addr[3]])
        ),
        libc::AF_INET6 if addr.len() >= 24 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&addr[8..24]);
            format!(
                "inet6 [{}]:{}",
                std::net::Ipv6Addr::from(octets),
                u16::from_be_bytes([addr[2], addr[3]])
            )
        }
        libc::AF_UNIX => {
            let path = &addr[2..];
            if path.first() == Some(&0) {
                format!("unix @{}", String::from_utf8_lossy(&path[1..]))
            } else {
                let end = path.iter().position(|b| *b == 0).unwrap_or(path.len());
                format!("unix {}", String::from_utf8_lossy(&path[..end]))
            }
        }
        f => format!("family {f}"),
    }
}

enum UnixTarget {
    Absent,
    Present(String),
}

fn unix_target(pid: i32, addr: &[u8]) -> UnixTarget {
    let what = describe(addr);
    if addr.len() <= 2 {
        return UnixTarget::Absent;
    }
    let path = &addr[2..];
    if path.first() == Some(&0) {
        // Abstract sockets live in the network namespace: the host's when network is allowed.
        return UnixTarget::Present(what);
    }
    let end = path.iter().position(|b| *b == 0).unwrap_or(path.len());
    let p = Path::new(std::ffi::OsStr::from_bytes(&path[..end]));
    // Resolve as the command would: from its root, or its cwd for relative paths.
    let base = if p.is_absolute() {
        PathBuf::from(format!("/proc/{pid}/root"))
    } else {
        PathBuf::from(format!("/proc/{pid}/cwd"))
    };
    let full = base.join(p.strip_prefix("/").unwrap_or(p));
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(&full) {
        Ok(m) if m.file_type().is_socket() => UnixTarget::Present(what),
        _ => UnixTarget::Absent,
    }
}

/// Processes other than us still alive after `bash -c` returned (they die when we exit).
fn leftovers() -> Vec<Effect> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == 1 {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // "pid (comm) S ...": zombies are already dead.
        if stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
        {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let command = String::from_utf8_lossy(&cmdline)
            .split('\0')
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        let command = if command.is_empty() {
            // No cmdline (exiting, or between fork and exec): fall back to the comm name.
            stat.split_once(" (")
                .and_then(|(_, r)| r.rsplit_once(") "))
                .map(|(comm, _)| format!("[{comm}]"))
                .unwrap_or_default()
        } else {
            command
        };
        out.push(Effect::BackgroundProcess { pid, command });
    }
    out.sort_by_key(|e| match e {
        Effect::BackgroundProcess { pid, .. } => *pid,
        _ => 0,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::{as_seen_by, canonical};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::path::Path;

    /// The command's names for itself are spelled with its thread id; everything else,
    /// including look-alikes, is left as written.
    #[test]
    fn names_for_this_process_are_the_commands() {
        for (raw, want) in [
            ("/proc/self/fd/3", "/proc/77/fd/3"),
            ("/proc/self", "/proc/77"),
            ("/proc/thread-self/fd/3", "/proc/77/task/77/fd/3"),
            ("/dev/stdout", "/proc/77/fd/1"),
            ("/dev/stderr", "/proc/77/fd/2"),
            ("/dev/stdin", "/proc/77/fd/0"),
            ("/dev/fd/5", "/proc/77/fd/5"),
            ("/proc/selfish/x", "/proc/selfish/x"),
            ("/dev/stdout2", "/dev/stdout2"),
            ("proc/self/fd/3", "proc/self/fd/3"),
            ("/etc/passwd", "/etc/passwd"),
        ] {
            assert_eq!(as_seen_by(77, raw.into()), Path::new(want), "{raw}");
        }
    }

    /// The one-lookup resolution is `realpath`'s: links (relative, absolute, chained, to a
    /// directory), `..` after a link, `/proc`'s magic links, a FIFO (not opened), and nothing
    /// for a path that does not exist, a dangling link, or a magic link to a pipe, socket,
    /// memfd or deleted file.
    #[test]
    fn canonical_is_realpath() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::create_dir_all(d.join("real/deep/er")).unwrap();
        std::fs::write(d.join("real/deep/file"), "x").unwrap();
        std::os::unix::fs::symlink("real/deep", d.join("rel")).unwrap();
        std::os::unix::fs::symlink(d.join("rel"), d.join("abs")).unwrap();
        std::os::unix::fs::symlink("nowhere", d.join("dangling")).unwrap();
        std::fs::write(d.join("real (deleted)"), "x").unwrap();
        nix::unistd::mkfifo(
            &d.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let cwd = format!("/proc/{}/cwd", std::process::id());
        let same: Vec<std::path::PathBuf> = vec![
            d.to_path_buf(),
            d.join("real/deep/file"),
            d.join("rel"),
            d.join("abs/er"),
            d.join("abs/../deep/file"),
            d.join("rel/er/../../.."),
            d.join("fifo"),
            d.join("real (deleted)"),
            Path::new(&cwd).to_path_buf(),
            Path::new("/proc/self/root/etc").to_path_buf(),
        ];
        for p in &same {
            let want = std::fs::canonicalize(p).expect("realpath");
            assert_eq!(canonical(p), Some(want), "{}", p.display());
        }
        for p in [
            d.join("dangling"),
            d.join("real/missing"),
            d.join("missing/x"),
        ] {
            assert_eq!(canonical(&p), None, "{}", p.display());
        }
        // Magic links to what has no path: `realpath` fails on each, and so must `canonical`
        // (the supervisor then resolves the parent, `/proc/PID/fd`, as before).
        let (r, w) = nix::unistd::pipe().expect("pipe");
        // SAFETY: a NUL-terminated name and a flag; the new fd is ours alone.
        let memfd = unsafe { libc::memfd_create(c"cmdgate-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(memfd >= 0, "memfd_create");
        // SAFETY: just created above, owned nowhere else.
        let memfd = unsafe { OwnedFd::from_raw_fd(memfd) };
        let gone = std::fs::File::create(d.join("gone")).expect("create");
        std::fs::remove_file(d.join("gone")).unwrap();
        let sock = std::os::unix::net::UnixDatagram::unbound().expect("socket");
        let fd_link = |fd: RawFd| std::path::PathBuf::from(format!("/proc/self/fd/{fd}"));
        for fd in [
            r.as_raw_fd(),
            w.as_raw_fd(),
            memfd.as_raw_fd(),
            sock.as_raw_fd(),
        ] {
            let p = fd_link(fd);
            assert!(std::fs::canonicalize(&p).is_err(), "{}", p.display());
            assert_eq!(canonical(&p), None, "{}", p.display());
        }
        // A deleted file, and another made after under the name its link shows: `realpath`
        // would answer with that other file; `canonical` knows it is not the one opened.
        let p = fd_link(gone.as_raw_fd());
        assert_eq!(canonical(&p), None, "{}", p.display());
        std::fs::write(d.join("gone (deleted)"), "x").unwrap();
        assert_eq!(canonical(&p), None, "{}", p.display());
    }
}
