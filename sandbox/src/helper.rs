//! The helper process: one per run, single-threaded when it forks (the secret walk's thread is
//! joined before), launched by the library (never forked from
//! the daemon's threads). It owns the run's scratch tmpfs, cgroups and timeout, forks the run's
//! pid 1, collects output and effects, tears everything down, and answers on stdout.

use crate::cgroup::{CgroupError, RunCgroup};
use crate::config::RunConfig;
use crate::effects::{self, Layer};
use crate::init::{init_main, pidfd_open, InitArgs};
use crate::model::{Area, Effect};
use crate::protocol::{
    HelperReply, HelperRequest, InitMessage, MirrorSpec, OverlayAhead, ParentMessage, RawRun,
};
use crate::setup::{MadeAhead, MountPlan, OverlayMount, ScratchBind};
use crate::walkwatch::{Listed, Tracer};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nix::mount::MsFlags;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sched::CloneFlags;
use std::io::{BufRead, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Why the helper could not run the command (the command did not run unsandboxed).
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    /// Reading or parsing the request.
    #[error("failed to read the run request")]
    Request(#[source] std::io::Error),
    /// Not root and no usable user namespace.
    #[error("{0}")]
    Privilege(String),
    /// The request is not runnable.
    #[error("invalid run: {0}")]
    Invalid(String),
    /// State dir, lock file, scratch dirs.
    #[error("failed to prepare {0}")]
    State(PathBuf, #[source] std::io::Error),
    /// Namespaces or the scratch tmpfs of the helper itself.
    #[error("failed to {0}")]
    Kernel(&'static str, #[source] Errno),
    /// cgroup limits.
    #[error("failed to set up cgroup limits")]
    Cgroup(#[source] CgroupError),
    /// The run's pid 1 reported a setup failure.
    #[error("failed to build the mirror: {0}")]
    Mirror(String),
    /// The run's pid 1 died without a word.
    #[error("the run's init process ended without reporting (status {0})")]
    InitLost(String),
}

/// Entry point of the helper process: read `Prepare` and/or `Run` on stdin, answer on stdout.
pub fn helper_main() -> ExitCode {
    // Who started us: if that process is gone when we end, or may not remove cgroups (a daemon
    // without capabilities, system mode), nobody will remove ours: we do (`leave_cgroups`).
    let parent = nix::unistd::getppid();
    let parent_is_root = euid_of(parent) == Some(0);
    // A mirrored run's pipes come over fd 3 (`run::Prepared::send_fds`) with its `Run`.
    let mut channel = take_channel();
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut read = || -> Result<ParentMessage, HelperError> {
        let mut line = String::new();
        input.read_line(&mut line).map_err(HelperError::Request)?;
        serde_json::from_str(&line).map_err(|e| {
            HelperError::Request(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })
    };
    // The run's cgroups, once made: removed here only if our parent died (see `orphaned`).
    let mut made: Option<RunCgroup> = None;
    // A mirrored run's parent reaps us on a thread (`Prepared::finish_later`) and may itself end
    // before it gets to the cgroups (a daemon stopped right after a run): we remove them.
    let mut mirrored = false;
    // What pid 1 handed over to outlive it (`Held`): released after our answer.
    let mut held = Held::default();
    // A mirror built ahead whose builder answered: reaped after our answer.
    let mut builder: Option<nix::unistd::Pid> = None;
    let reply = match read() {
        Err(e) => failed("request", &e),
        Ok(ParentMessage::Run(req)) => match prepare(&req.run_id, &req.config.state_dir, None) {
            Ok(prep) => {
                made = Some(prep.cgroup.clone());
                mirrored = req.mirror.is_some();
                let started = run_boundary(&req);
                match take_passed(&req, channel.take()) {
                    Ok(passed) => finish(run(&req, prep, started, passed, &mut held)),
                    Err(e) => failed("sandbox setup", &e),
                }
            }
            Err(e) => failed("sandbox setup", &e),
        },
        Ok(ParentMessage::Store(op)) => HelperReply::Store(crate::keeper::serve(op)),
        Ok(ParentMessage::Prepare {
            run_id,
            state_dir,
            overlay,
            whole,
        }) => match prepare(&run_id, &state_dir, overlay.as_ref()) {
            Err(e) => failed("sandbox setup", &e),
            Ok(prep) => {
                made = Some(prep.cgroup.clone());
                // The whole mirror for the run expected next, built by a forked builder before
                // we answer.
                let (prep, whole) = match whole {
                    Some(request)
                        if overlay.is_some()
                            && request.run_id == run_id
                            && request.config.state_dir == state_dir =>
                    {
                        build_whole(*request, prep)
                    }
                    _ => (prep, None),
                };
                if !send(&HelperReply::Ready) {
                    if let Some(whole) = whole {
                        whole.tear_down();
                    }
                    leave_cgroups(parent, parent_is_root, made.as_ref());
                    return ExitCode::FAILURE;
                }
                // The mirror built ahead is let go of as soon as the host's mounts change.
                let whole = whole.and_then(Whole::wait_for_run);
                match read() {
                    Ok(ParentMessage::Run(req))
                        if req.run_id == run_id && req.config.state_dir == state_dir =>
                    {
                        mirrored = req.mirror.is_some();
                        let started = run_boundary(&req);
                        match take_passed(&req, channel.take()) {
                            Err(e) => {
                                if let Some(whole) = whole {
                                    whole.tear_down();
                                }
                                failed("sandbox setup", &e)
                            }
                            Ok(passed) => {
                                let served = match whole {
                                    Some(whole) => {
                                        let pid = whole.builder;
                                        whole.serve(&req, started, passed, &mut held).inspect(
                                            |_| {
                                                builder = Some(pid);
                                            },
                                        )
                                    }
                                    None => Err(passed),
                                };
                                match served {
                                    Ok(reply) => reply,
                                    Err(passed) => {
                                        finish(run(&req, prep, started, passed, &mut held))
                                    }
                                }
                            }
                        }
                    }
                    Ok(_) => {
                        if let Some(whole) = whole {
                            whole.tear_down();
                        }
                        failed(
                            "request",
                            &HelperError::Invalid("expected the Run of the prepared run".into()),
                        )
                    }
                    Err(e) => {
                        if let Some(whole) = whole {
                            whole.tear_down();
                        }
                        failed("request", &e)
                    }
                }
            }
        },
    };
    let sent = send(&reply);
    // Only now, with the answer sent: the kernel tears down the mirror's mount namespace and
    // destroys the fanotify group here (or in the builder, as it exits), off the run's path.
    drop(held);
    if let Some(pid) = builder {
        Whole::reap(pid);
    }
    leave_cgroups(parent, parent_is_root && !mirrored, made.as_ref());
    // A store operation's spent dirs (`trash`): removed before we exit, not left to the next
    // start.
    crate::trash::wait_idle();
    if sent {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The library removes a run's cgroups once its helper exited, but not when it is gone — killed,
/// say, with its state dir deleted after it — nor when it is not root (system mode: the cgroups
/// are root's), and maybe not after a mirrored run (`parent_cleans` false): then leave them for
/// the cgroups above and remove them ourselves, after the answer (a move between v1 cgroups
/// waits for a grace period; nobody waits for us then). Best effort; the run's lock
/// file (which names them) still lets `sweep_stale` finish the job.
fn leave_cgroups(parent: nix::unistd::Pid, parent_cleans: bool, cgroup: Option<&RunCgroup>) {
    if parent_cleans && nix::unistd::getppid() == parent {
        return;
    }
    if let Some(cgroup) = cgroup {
        if cgroup.leave(std::process::id() as i32).is_ok() {
            cgroup.remove();
        }
    }
}

/// The effective uid of process `pid` (`/proc/<pid>/status`), if it can be read.
fn euid_of(pid: nix::unistd::Pid) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    uids.split_whitespace().nth(1)?.parse().ok()
}

/// Fd 3 when it is a Unix socket (the library's fd channel), close-on-exec; `None` otherwise
/// (a store operation's helper has none).
fn take_channel() -> Option<OwnedFd> {
    let fd = crate::run::FD_CHANNEL;
    // SAFETY: integer arguments only.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    // SAFETY: fd 3 is open (checked above) and stays open for this borrow.
    let st = nix::sys::stat::fstat(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }).ok()?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return None;
    }
    // SAFETY: fd 3 is open (checked above), a socket our parent placed there for this purpose,
    // and nothing else in this process owns it.
    let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    nix::fcntl::fcntl(
        &owned,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .ok()?;
    Some(owned)
}

fn finish(result: Result<RawRun, HelperError>) -> HelperReply {
    match result {
        Ok(raw) => HelperReply::Done(raw),
        Err(e) => failed("sandbox setup", &e),
    }
}

fn send(reply: &HelperReply) -> bool {
    let mut out = std::io::stdout().lock();
    let ok = serde_json::to_writer(&mut out, reply).is_ok() && out.write_all(b"\n").is_ok();
    ok && out.flush().is_ok()
}

fn failed(stage: &str, e: &dyn std::error::Error) -> HelperReply {
    let mut message = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        message.push_str(": ");
        message.push_str(&c.to_string());
        src = c.source();
    }
    HelperReply::Failed {
        stage: stage.to_string(),
        message,
    }
}

fn state_err(p: &Path) -> impl FnOnce(std::io::Error) -> HelperError + '_ {
    move |e| HelperError::State(p.to_path_buf(), e)
}

/// Check the request and work out the overlays.
fn overlays_for(
    cfg: &RunConfig,
    scratch: &Path,
    mirror: Option<&MirrorSpec>,
) -> Result<Vec<(Area, OverlayMount)>, HelperError> {
    let ws = &cfg.workspace;
    if !ws.is_absolute() || ws == Path::new("/") || !ws.is_dir() {
        return Err(HelperError::Invalid(format!(
            "workspace {} must be an existing absolute directory other than /",
            ws.display()
        )));
    }
    let mut trees: Vec<(Area, PathBuf)> = vec![(Area::Workspace, ws.clone())];
    if let Some(home) = &cfg.home {
        if home.is_absolute() && home != Path::new("/") && home.is_dir() && home != ws {
            trees.push((Area::Home, home.clone()));
        }
    }
    let system = |p: &Path| {
        ["/tmp", "/run", "/dev", "/proc", "/sys"]
            .iter()
            .any(|s| p.starts_with(s))
    };
    // A mirrored run's kept `write=` trees: their own overlays even inside $HOME (mounted over
    // it), since they are committed and $HOME's other writes are not. Never the workspace's,
    // never around it.
    let kept: Vec<&Path> = mirror.map_or(Vec::new(), |m| {
        m.extra.iter().map(|k| k.target.as_path()).collect()
    });
    for target in &kept {
        if !target.is_absolute()
            || !target.is_dir()
            || system(target)
            || target.starts_with(ws)
            || ws.starts_with(target)
            || trees
                .iter()
                .any(|(a, t)| *a == Area::Extra && (t.starts_with(target) || target.starts_with(t)))
        {
            return Err(HelperError::Invalid(format!(
                "kept write= path {} must be an existing directory apart from the workspace, \
                 the system trees and the other kept paths",
                target.display()
            )));
        }
        trees.push((Area::Extra, target.to_path_buf()));
    }
    for extra in &cfg.extra_writable {
        let covered = trees.iter().any(|(_, t)| extra.starts_with(t));
        if extra.is_absolute() && extra.is_dir() && !covered && !system(extra) {
            trees.push((Area::Extra, extra.clone()));
        }
    }
    // Outer trees first, so an inner overlay is mounted on top of the outer one.
    trees.sort_by_key(|(_, t)| t.components().count());
    Ok(trees
        .into_iter()
        .enumerate()
        .map(|(i, (area, target))| {
            // A mirrored run keeps the workspace's upper dir on the workspace's own mount, so
            // the commit is a rename per entry (O(files), not O(bytes)).
            let kept = mirror.and_then(|m| m.extra.iter().find(|k| k.target == target));
            let (upper, work) = match (area, mirror, kept) {
                (Area::Workspace, Some(m), _) => (m.keep.join("upper"), m.keep.join("work")),
                (Area::Extra, _, Some(k)) => (k.keep.join("upper"), k.keep.join("work")),
                _ => (
                    scratch.join(format!("upper{i}")),
                    scratch.join(format!("work{i}")),
                ),
            };
            (
                area,
                OverlayMount {
                    target,
                    upper,
                    work,
                },
            )
        })
        .collect())
}

/// A prepared run: lock held, cgroups created and joined, empty network, IPC and UTS
/// namespaces and a detached `/dev` made.
pub struct Prepared {
    /// Held (flock) for the helper's life: `sweep_stale` skips locked runs. (Taken and
    /// forgotten by a builder, [`Whole`]: the lock is the helper's.)
    lock: Option<Flock<std::fs::File>>,
    scratch: PathBuf,
    cgroup: RunCgroup,
    /// For the run's pid 1 ([`fresh_namespaces`], [`crate::setup::prepare_dev`]); what is
    /// `None` pid 1 makes itself.
    ahead: MadeAhead,
    /// The workspace overlay made ahead ([`overlay_ahead`]), used at `Run` only if
    /// [`PreparedOverlay::still_for`] the run.
    overlay: Option<PreparedOverlay>,
}

/// Everything that does not depend on the command: done ahead of time by a warm helper.
fn prepare(
    run_id: &str,
    state_dir: &Path,
    overlay: Option<&OverlayAhead>,
) -> Result<Prepared, HelperError> {
    crate::privilege::require()?;
    if run_id.is_empty()
        || !run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(HelperError::Invalid(format!("bad run id {run_id:?}")));
    }
    // Bookkeeping on the host: a lock file held for the helper's life (sweep_stale takes it only
    // from dead helpers) naming the cgroups, and an empty mount point for the scratch tmpfs.
    let runs = state_dir.join("runs");
    std::fs::create_dir_all(&runs).map_err(state_err(&runs))?;
    let lock_path = runs.join(format!("{run_id}.lock"));
    let file = std::fs::File::create(&lock_path).map_err(state_err(&lock_path))?;
    let mut lock = Flock::lock(file, FlockArg::LockExclusiveNonblock)
        .map_err(|(_, errno)| HelperError::State(lock_path.clone(), errno.into()))?;
    let cgroup = RunCgroup::create(run_id).map_err(HelperError::Cgroup)?;
    let _ = serde_json::to_writer(&mut *lock, &cgroup);
    let _ = lock.flush();
    // The helper joins the run's cgroups itself, so pid 1 and everything below it are born
    // inside (no migration race). On cgroup v1 this costs an RCU grace period: paid here, ahead
    // of the command when the helper is warm.
    let pid = std::process::id() as i32;
    let scratch = runs.join(run_id);
    let rest = cgroup
        .join(pid)
        .map_err(HelperError::Cgroup)
        .and_then(|()| std::fs::create_dir(&scratch).map_err(state_err(&scratch)));
    if let Err(e) = rest {
        // Nobody else removes cgroups of a run that never got prepared (the state dir may be
        // gone: a daemon stopped and its state deleted while we prepared ahead).
        if cgroup.leave(pid).is_ok() {
            cgroup.remove();
        }
        return Err(e);
    }
    let mut ahead = fresh_namespaces()?;
    ahead.dev = crate::setup::prepare_dev();
    Ok(Prepared {
        lock: Some(lock),
        scratch,
        cgroup,
        ahead,
        overlay: overlay.and_then(overlay_ahead),
    })
}

/// A directory's identity as an overlay's lower root and the upper root made from it: device,
/// inode, permission bits, owner, group.
type DirId = (u64, u64, u32, u32, u32);

fn dir_id(st: &nix::sys::stat::FileStat) -> DirId {
    (
        st.st_dev,
        st.st_ino,
        st.st_mode & 0o7777,
        st.st_uid,
        st.st_gid,
    )
}

/// The workspace's overlay made ahead by a prepared helper, for the next run expected in the
/// same project: the overlay's mount-time work (its work dir, its probes of the upper file
/// system: journaled metadata operations on the workspace's file system) and the kept dir's
/// `upper` and `work` leave the run's path. The lower layer is the directory opened then (an
/// fd, not a path); nothing was looked up through the overlay, so the run sees the workspace as
/// it is when it looks, as with an overlay mounted at `Run`.
struct PreparedOverlay {
    /// The workspace path it was made for, and the identity of the directory it named then.
    target: PathBuf,
    id: DirId,
    /// The kept dir holding its `upper` and `work`.
    keep: PathBuf,
    /// The detached overlay mount ([`crate::setup::prepare_overlay`]).
    tree: OwnedFd,
}

impl PreparedOverlay {
    /// Whether it may serve the run: the same workspace path and kept dir, and the path still
    /// names the directory it was made on, with the owner and mode its upper root copied
    /// (renamed away and replaced, or changed since: made fresh, as the overlay of any run).
    fn still_for(&self, workspace: &Path, keep: &Path) -> bool {
        self.target == workspace
            && self.keep == keep
            && nix::sys::stat::lstat(workspace).is_ok_and(|st| {
                st.st_mode & libc::S_IFMT == libc::S_IFDIR && dir_id(&st) == self.id
            })
    }

    /// Not used: its detached mount goes with the fd; its `upper` and `work` are removed when
    /// the run's kept dir is this one (the run makes its own there).
    fn discard(self, keep: &Path) -> Result<(), HelperError> {
        drop(self.tree);
        if self.keep == keep {
            for dir in ["upper", "work"] {
                let path = keep.join(dir);
                std::fs::remove_dir_all(&path).map_err(state_err(&path))?;
            }
        }
        Ok(())
    }
}

/// Make the workspace's overlay ahead ([`PreparedOverlay`]): `upper` and `work` in the kept dir
/// the library made for this run (empty, root's, not a link), as [`run`] makes them — the upper
/// root with the workspace root's owner and mode —, and the overlay on the directories opened
/// (`O_NOFOLLOW`). `None` when anything fails (the `Run` then mounts its overlay as before).
fn overlay_ahead(hint: &OverlayAhead) -> Option<PreparedOverlay> {
    use nix::fcntl::OFlag;
    use nix::sys::stat::Mode;
    let (ws, keep) = (&hint.workspace, &hint.keep);
    if !ws.is_absolute() || ws == Path::new("/") || !keep.is_absolute() {
        return None;
    }
    let k = nix::sys::stat::lstat(keep).ok()?;
    if k.st_mode & libc::S_IFMT != libc::S_IFDIR
        || k.st_uid != 0
        || std::fs::read_dir(keep).ok()?.next().is_some()
    {
        return None;
    }
    let dir = |p: &Path| {
        nix::fcntl::open(
            p,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .ok()
    };
    let lower = dir(ws)?;
    let id = dir_id(&nix::sys::stat::fstat(&lower).ok()?);
    let (upper, work) = (keep.join("upper"), keep.join("work"));
    let made = (|| {
        std::fs::create_dir(&work).ok()?;
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o700)).ok()?;
        std::fs::create_dir(&upper).ok()?;
        std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(id.2)).ok()?;
        std::os::unix::fs::chown(&upper, Some(id.3), Some(id.4)).ok()?;
        crate::setup::prepare_overlay(&lower, &dir(&upper)?, &dir(&work)?).ok()
    })();
    match made {
        Some(tree) => Some(PreparedOverlay {
            target: ws.clone(),
            id,
            keep: keep.clone(),
            tree,
        }),
        None => {
            let _ = std::fs::remove_dir_all(&upper);
            let _ = std::fs::remove_dir_all(&work);
            None
        }
    }
}

/// New namespaces for the run's pid 1, made ahead of the run: an empty network namespace (only
/// a loopback device, down; making one is ~0.6 ms of CPU), an empty IPC namespace (making one
/// mounts its own mqueue file system) and a UTS namespace whose hostname is set to the mirror's
/// here — work that would otherwise be pid 1's, on the run's path. The helper enters them only
/// to make them (one `unshare`) and returns to its own at once, so no process is in them until
/// pid 1 enters them (`setup::enter_mirror` step 1); the only handles are these fds, held by this
/// single-use helper and closed once pid 1 is forked, so nothing else can enter or configure
/// them meanwhile: at the run they are exactly as empty as ones made then. All `None` when they
/// could not be made here (pid 1 then makes its own, as before); an error when the helper could
/// not return to its own (a run with network would not get the host's).
fn fresh_namespaces() -> Result<MadeAhead, HelperError> {
    let kinds = [
        ("net", CloneFlags::CLONE_NEWNET),
        ("ipc", CloneFlags::CLONE_NEWIPC),
        ("uts", CloneFlags::CLONE_NEWUTS),
    ];
    let open = |name: &str| std::fs::File::open(format!("/proc/self/ns/{name}")).ok();
    let Some(own) = kinds
        .iter()
        .map(|(name, _)| open(name))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(MadeAhead::default());
    };
    let all = kinds.iter().fold(CloneFlags::empty(), |a, (_, k)| a | *k);
    if nix::sched::unshare(all).is_err() {
        return Ok(MadeAhead::default());
    }
    let named = nix::unistd::sethostname(crate::setup::HOSTNAME).is_ok();
    let fresh = |name: &str| open(name).map(OwnedFd::from);
    let made = MadeAhead {
        net: fresh("net"),
        ipc: fresh("ipc"),
        uts: fresh("uts").filter(|_| named),
        dev: None,
        overlay: None,
    };
    for (fd, (_, kind)) in own.iter().zip(kinds) {
        nix::sched::setns(fd, kind)
            .map_err(|e| HelperError::Kernel("return to the helper's own namespaces", e))?;
    }
    Ok(made)
}

/// What the run's pid 1 hands over so that its death does not wait for the kernel's teardown: its
/// mount namespace (the mirror: overlays, masks, binds; the last reference going costs an RCU
/// grace period for its mounts) and its fanotify group (closing the last reference waits for an
/// SRCU grace period: `fsnotify_destroy_group`, 7–24 ms at load 11). Pid 1 sends both, once the
/// mirror is built, over a socket whose other end is this; they stay in flight, never received,
/// so nothing here can use them, and they are released when this is dropped: after the answer.
///
/// Holding them changes nothing the run can do: when pid 1 is gone every process of the run is
/// (pid namespace), so no process is left in that mount namespace nor can enter it (the only
/// handle to it is in flight here), and the group receives no event once its marks' mounts have
/// no process to open through them. The upper dirs hold exactly the run's changes either way.
///
/// A mirror built ahead's secret-walk watch (`walkwatch::Watch`, an inotify group: the same
/// SRCU wait when it goes) is kept here too, from the `Run` on.
#[derive(Default)]
struct Held {
    hand_off: Option<OwnedFd>,
    watch: Option<crate::walkwatch::Watch>,
}

/// A mirrored run's pipes (and proxy hand-off), sent with its `Run` on the library's fd channel;
/// a test-run takes none.
fn take_passed(req: &HelperRequest, channel: Option<OwnedFd>) -> Result<Vec<OwnedFd>, HelperError> {
    match (req.mirror.as_ref(), channel) {
        (Some(_), Some(channel)) => crate::init::recv_fds(&channel).ok_or_else(|| {
            HelperError::Invalid("no output pipes came with the mirrored run".into())
        }),
        (Some(_), None) => Err(HelperError::Invalid(
            "a mirrored run needs the library's fd channel (fd 3)".into(),
        )),
        (None, _) => Ok(Vec::new()),
    }
}

/// The run built at `Run` and run to its end. `started` is the run's start, read as the `Run`
/// arrived; `passed` what came with it ([`take_passed`]).
fn run(
    req: &HelperRequest,
    prep: Prepared,
    started: crate::clock::Stamp,
    passed: Vec<OwnedFd>,
    held: &mut Held,
) -> Result<RawRun, HelperError> {
    let built = build(req, prep, Some((started, passed)), None)?;
    conclude(built, held)
}

/// A run's mirror built and its pid 1 forked ([`build`]), until [`conclude`] runs it to its end.
struct Built {
    prep: Prepared,
    child: nix::unistd::Pid,
    pidfd: Option<OwnedFd>,
    report: OwnedFd,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    held: Option<OwnedFd>,
    overlays: Vec<(Area, OverlayMount)>,
    /// The scratch trees bound on /tmp, /run and /dev/shm.
    scratch_dirs: [PathBuf; 3],
    premade: Vec<PathBuf>,
    /// The masks pid 1 mounts ([`MountPlan::masks`]).
    masks: Vec<crate::setup::Mask>,
    /// The watches that keep the walk of those masks valid (`walkwatch`), when it was watched
    /// (a mirror built ahead) and all it read could be.
    watch: Option<Vec<(i32, crate::walkwatch::Filter)>>,
    timeout: std::time::Duration,
    output_bytes: usize,
    /// The kept upper dirs and their limit ([`UpperGuard`]); the guard's baseline is read
    /// before the command can run.
    upper: Option<(Vec<PathBuf>, u64)>,
    upper_guard: Option<UpperGuard>,
    /// When the `Run` arrived, and when the command was handed to pid 1 (the timeout's start).
    start: Instant,
    run_start: Instant,
    started: crate::clock::Stamp,
    /// A mirror built ahead: our end of the socket pid 1 waits on for its command.
    awaiting: Option<OwnedFd>,
}

/// Build the run's mirror and fork its pid 1: the command given (`job`: the run's start and the
/// fds passed with the `Run`), or, for a mirror built ahead ([`Whole`]), pid 1 waiting for it
/// once the mirror is built (`Built::awaiting`). With an `inotify` instance (a mirror built
/// ahead), the secret walk watches what it reads there (`walkwatch`, `Built::watch`).
fn build(
    req: &HelperRequest,
    mut prep: Prepared,
    job: Option<(crate::clock::Stamp, Vec<OwnedFd>)>,
    inotify: Option<OwnedFd>,
) -> Result<Built, HelperError> {
    let start = Instant::now();
    // The run's start, for the commit's "changed on the host after the run started": every
    // host change before it has a ctime at or before it, and pid 1 starts the command only once
    // the coarse clock has passed it (see `clock`). Taken as the `Run` arrives, so the wait for
    // the clock's tick overlaps the mirror's setup instead of following it. An earlier start is
    // the cautious side: a host change made during the setup counts as made after the start (a
    // conflict if the run changed the same path), never as one the run saw. A mirror built
    // ahead gets it with its command.
    let (started, mut passed) = match job {
        Some((started, passed)) => (started, Some(passed)),
        None => ([0, 0], None),
    };
    let cfg = &req.config;
    // The secret masks' walk of the workspace (the longest step before pid 1 exists: one listing
    // per directory) runs on a thread while this one builds the scratch tree below; it is joined
    // before the mount plan is made, so the helper is single-threaded again when it forks pid 1.
    // The walk reads the host as the mounts will show it (the thread stays in the mount
    // namespace this process had at `Run`; ours differs only by the scratch tmpfs, in the
    // masked state dir).
    let secret_walk = SecretWalk::start(cfg, inotify.map(Tracer::new));
    let scratch = prep.scratch.clone();
    let mirror = req.mirror.as_ref();
    // Our own mount namespace, copied now (not when prepared: a warm helper may wait a long
    // time, and the mirror must show the host's mounts as they are when the run starts; a
    // mirror built ahead is used only while the host's mount table has not changed since, see
    // `Whole`). The scratch tmpfs exists only here (and in the run's copy), so whatever happens
    // to us, the kernel frees it when the last process using it is gone.
    nix::sched::unshare(CloneFlags::CLONE_NEWNS)
        .map_err(|e| HelperError::Kernel("unshare the helper's mount namespace", e))?;
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| HelperError::Kernel("make the helper's mounts private", e))?;
    // The mirror's root: a copy of the host's mount tree taken now, before the scratch tmpfs
    // exists, so the scratch is not in it (see `setup` step 3).
    let host_root = crate::syscall::clone_tree(Path::new("/"))
        .map_err(|e| HelperError::Kernel("copy the host's mount tree", e))?;
    // No unmount at the end: the scratch tmpfs lives only in this process's mount namespace and
    // goes with it (an explicit umount costs an RCU grace period on the critical path). The
    // parent removes the empty mount point, the lock file and the cgroups after we exit.
    let size = format!("size={},mode=0700", cfg.limits.scratch_bytes);
    nix::mount::mount(
        Some("tmpfs"),
        &scratch,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(size.as_str()),
    )
    .map_err(|e| HelperError::Kernel("mount the scratch tmpfs", e))?;

    let overlays = overlays_for(cfg, &scratch, mirror)?;
    let mkdir = |p: &Path, mode: u32| -> Result<(), HelperError> {
        std::fs::create_dir(p).map_err(state_err(p))?;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(state_err(p))
    };
    // The workspace overlay made ahead serves only this run's workspace as it is now (else it
    // is dropped and the overlay made here, as for any run).
    let mut made_ahead: Option<PathBuf> = None;
    if let Some(made) = prep.overlay.take() {
        match mirror {
            Some(m) if made.still_for(&cfg.workspace, &m.keep) => {
                made_ahead = Some(made.target.clone());
                prep.ahead.overlay = Some((made.target, made.tree));
            }
            Some(m) => made.discard(&m.keep)?,
            None => drop(made),
        }
    }
    let root = scratch.join("root");
    mkdir(&root, 0o755)?;
    for (_, o) in &overlays {
        if made_ahead.as_ref() == Some(&o.target) {
            continue;
        }
        mkdir(&o.work, 0o700)?;
        // The merged root takes the upper root's owner and mode: copy the lower's, so the agent's
        // uid can write its own workspace and nobody gains access they did not have.
        let lower = std::fs::metadata(&o.target).map_err(state_err(&o.target))?;
        mkdir(&o.upper, lower.mode() & 0o7777)?;
        std::os::unix::fs::chown(&o.upper, Some(lower.uid()), Some(lower.gid()))
            .map_err(state_err(&o.upper))?;
    }
    let tmp = scratch.join("tmp");
    let run_dir = scratch.join("run");
    let shm = scratch.join("shm");
    mkdir(&tmp, 0o1777)?;
    mkdir(&run_dir, 0o755)?;
    mkdir(&shm, 0o1777)?;
    let mut binds = vec![ScratchBind {
        source: tmp.clone(),
        target: PathBuf::from("/tmp"),
    }];
    if Path::new("/run").is_dir() {
        binds.push(ScratchBind {
            source: run_dir.clone(),
            target: PathBuf::from("/run"),
        });
    }
    // Overlay targets under /tmp or /run are mounted on top of the scratch bind: make their
    // mount points there, with the host's owners and modes (so traversal rights stay the same).
    let mut premade: Vec<PathBuf> = Vec::new();
    for (_, o) in &overlays {
        for b in &binds {
            let Ok(rel) = o.target.strip_prefix(&b.target) else {
                continue;
            };
            let (mut host, mut made, mut shown) =
                (b.target.clone(), b.source.clone(), b.target.clone());
            for comp in rel.components() {
                host.push(comp);
                made.push(comp);
                shown.push(comp);
                if made.exists() {
                    continue;
                }
                let m = std::fs::metadata(&host).map_err(state_err(&host))?;
                mkdir(&made, m.mode() & 0o7777)?;
                std::os::unix::fs::chown(&made, Some(m.uid()), Some(m.gid()))
                    .map_err(state_err(&made))?;
                premade.push(shown.clone());
            }
        }
    }
    let (found, mut tracer) = secret_walk.finish()?;
    let masks = masks_for(cfg, found, &mut tracer)?;
    let watch = tracer.and_then(Tracer::finish);
    let plan = MountPlan {
        new_root: root,
        scratch: scratch.clone(),
        overlays: overlays.iter().map(|(_, o)| o.clone()).collect(),
        binds,
        shm: shm.clone(),
        network: cfg.network,
        masks,
    };

    // Limits before anything of the command runs.
    prep.cgroup
        .set_limits(&cfg.limits)
        .map_err(HelperError::Cgroup)?;

    let pipe = || {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| HelperError::Kernel("create a pipe", e))
    };
    let (rep_r, rep_w) = pipe()?;
    // Pid 1's hand-off of what must outlive it (`Held`); without it, the run is the same, only
    // its end waits for the kernel's teardown.
    let (held_ours, held_theirs) = match crate::init::socket_pair() {
        Some((ours, theirs)) => (Some(ours), Some(theirs)),
        None => (None, None),
    };
    // A mirrored run's command writes the library's pipes (passed with its `Run`) directly:
    // streamed, unbounded, never copied. A test-run's output is collected here, bounded. A
    // mirror built ahead gets them with its command.
    let expected = 2 + usize::from(cfg.proxy && mirror.is_some());
    if let (Some(_), Some(passed)) = (mirror, &passed) {
        if passed.len() != expected {
            return Err(HelperError::Invalid(format!(
                "{} fds came with the mirrored run, {expected} expected",
                passed.len()
            )));
        }
    }
    let handoff = passed
        .as_mut()
        .and_then(|p| (p.len() == 3).then(|| p.pop()).flatten());
    let (out_r, out_w, err_r, err_w) = match (mirror, passed) {
        (Some(_), Some(passed)) => {
            let (out, err) = output_fds(passed)?;
            (None, Some(out), None, Some(err))
        }
        (Some(_), None) => (None, None, None, None),
        (None, _) => {
            let (out_r, out_w) = pipe()?;
            let (err_r, err_w) = pipe()?;
            (Some(out_r), Some(out_w), Some(err_r), Some(err_w))
        }
    };
    // Network by domain: the caller's end of the listener hand-off, for pid 1 alone.
    let proxy = match (cfg.proxy, cfg.network, mirror) {
        (false, _, _) => None,
        (true, false, Some(_)) => Some(handoff_fd(handoff)?),
        (true, true, _) => {
            return Err(HelperError::Invalid(
                "a proxy run keeps its own network namespace: not with `network`".into(),
            ))
        }
        (true, false, None) => {
            return Err(HelperError::Invalid(
                "the network proxy is for mirrored runs only".into(),
            ))
        }
    };
    let upper = mirror.map(|m| (kept_dirs(m).collect::<Vec<PathBuf>>(), m.upper_bytes));
    let upper_guard = upper
        .as_ref()
        .map(|(dirs, limit)| UpperGuard::new(dirs.iter(), *limit));
    let (job, awaiting) = match (out_w, err_w) {
        (Some(stdout), Some(stderr)) => (
            crate::init::JobSource::Given(crate::init::Job {
                command: req.command.clone(),
                cwd: mirror.map_or(&cfg.workspace, |m| &m.cwd).clone(),
                env: cfg.command_env(),
                not_before: started,
                stdout,
                stderr,
            }),
            None,
        ),
        _ => {
            let (ours, theirs) = crate::init::socket_pair().ok_or_else(|| {
                HelperError::Kernel("create pid 1's command socket", Errno::last())
            })?;
            (crate::init::JobSource::Awaited(theirs), Some(ours))
        }
    };

    // The next child is pid 1 of a new pid namespace: when it dies, every process of the run does.
    nix::sched::unshare(CloneFlags::CLONE_NEWPID)
        .map_err(|e| HelperError::Kernel("unshare the pid namespace", e))?;
    let mut writable: Vec<PathBuf> = overlays.iter().map(|(_, o)| o.target.clone()).collect();
    writable.extend(["/tmp", "/run", "/dev/shm"].map(PathBuf::from));
    let ahead = std::mem::take(&mut prep.ahead);
    // SAFETY: the helper is single-threaded here (its one thread, the secret walk, was joined
    // when the mount plan was made; nothing else spawns threads), so the child may run
    // arbitrary code after fork.
    let child = match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            drop((rep_r, out_r, err_r, held_ours, awaiting));
            // A panic must not unwind into the helper's frames (their destructors own the
            // helper's scratch mount): catch it and leave.
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                init_main(InitArgs {
                    plan: &plan,
                    job,
                    aliases: mirror.is_some(),
                    run_as: cfg.run_as,
                    network: cfg.network,
                    proxy,
                    writable,
                    host_root,
                    ahead,
                    hand_off: held_theirs,
                    report: rep_w,
                })
            }))
            .unwrap_or(101);
            // SAFETY: _exit skips the parent's destructors (Teardown) that belong to the helper.
            unsafe { libc::_exit(code) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => child,
        Err(e) => return Err(HelperError::Kernel("fork the run's init", e)),
    };
    let run_start = Instant::now();
    // Our copy of the hand-off goes: the caller sees EOF once pid 1 has sent (or died).
    drop((rep_w, job, proxy, host_root, ahead, held_theirs));
    let pidfd = pidfd_open(child.as_raw());
    Ok(Built {
        prep,
        child,
        pidfd,
        report: rep_r,
        stdout: out_r,
        stderr: err_r,
        held: held_ours,
        overlays,
        scratch_dirs: [tmp, run_dir, shm],
        premade,
        masks: plan.masks,
        watch,
        timeout: cfg.limits.timeout,
        output_bytes: cfg.limits.output_bytes,
        upper,
        upper_guard,
        start,
        run_start,
        started,
        awaiting,
    })
}

/// Run a built run to its end ([`collect`]) and diff its effects.
fn conclude(built: Built, held: &mut Held) -> Result<RawRun, HelperError> {
    let Built {
        prep,
        child,
        pidfd,
        report,
        stdout,
        stderr,
        held: held_ours,
        overlays,
        scratch_dirs: [tmp, run_dir, shm],
        premade,
        upper_guard,
        start,
        run_start,
        started,
        timeout,
        output_bytes,
        ..
    } = built;
    held.hand_off = held_ours;
    let collected = collect(
        child,
        pidfd.as_ref(),
        Collect {
            report,
            stdout,
            stderr,
            deadline: run_start + timeout,
            output_bytes,
            upper_guard: upper_guard.as_ref(),
        },
    );
    let ended = Instant::now();
    let mut effects = collected.effects;
    if let Some(setup) = collected.setup_failed {
        return Err(HelperError::Mirror(setup));
    }
    if collected.exit.is_none()
        && collected.signal.is_none()
        && !collected.timed_out
        && !collected.killed
        && !collected.over_limit
    {
        return Err(HelperError::InitLost(collected.init_status));
    }
    effects.extend(prep.cgroup.limit_hits());
    // Once more now that every writer is gone: a run that went over the limit between two
    // looks is still over it.
    if let Some(hit) = upper_guard.as_ref().and_then(UpperGuard::check) {
        if !effects.contains(&hit)
            && !effects
                .iter()
                .any(|e| matches!(e, Effect::LimitHit { limit, .. } if limit == "upper"))
        {
            effects.push(hit);
        }
    }

    // The run is over and its namespaces are gone: the upper dirs now hold exactly its changes.
    let mut layers = Vec::new();
    for (area, o) in &overlays {
        let prefix = match area {
            Area::Workspace | Area::Home => PathBuf::new(),
            Area::Scratch | Area::Extra => o.target.clone(),
        };
        layers.push((*area, o.upper.clone(), Some(o.target.clone()), prefix));
    }
    for (dir, prefix) in [(&tmp, "/tmp"), (&run_dir, "/run"), (&shm, "/dev/shm")] {
        layers.push((Area::Scratch, dir.clone(), None, PathBuf::from(prefix)));
    }
    let layer_refs: Vec<Layer<'_>> = layers
        .iter()
        .map(|(area, upper, lower, prefix)| Layer {
            area: *area,
            upper,
            lower: lower.as_deref(),
            prefix,
            premade: &premade,
        })
        .collect();
    let mut fs_effects = effects::diff(&layer_refs);
    fs_effects.append(&mut effects);
    Ok(RawRun {
        exit: collected.exit,
        signal: collected.signal,
        timed_out: collected.timed_out,
        duration: start.elapsed(),
        stdout: collected.stdout,
        stderr: collected.stderr,
        output_truncated: collected.truncated,
        effects: fs_effects,
        killed: collected.killed,
        started,
        built_ahead: false,
        secrets_watched: false,
        phases: crate::protocol::RunPhases {
            ready_us: crate::protocol::micros(run_start.saturating_duration_since(start)),
            command_us: collected.ran_us,
            effects_us: crate::protocol::micros(ended.elapsed()),
        },
    })
}

/// The run's boundary for "changed on the host after the run started" (`RawRun::started`,
/// [`crate::clock`]): a precise reading now, or the caller's earlier start of the run
/// (`MirrorSpec::since`) — never a later one, which could put a change the command made or saw
/// before it. Pid 1 waits for the coarse clock to pass it before the command starts.
fn run_boundary(req: &HelperRequest) -> crate::clock::Stamp {
    let now = crate::clock::precise_now();
    match req.mirror.as_ref().and_then(|m| m.since) {
        Some(since) => since.min(now),
        None => now,
    }
}

/// A path's identity for [`Whole`]'s re-check: device, inode, type and permission bits, owner,
/// group (`None`: no such path).
type PathId = (u64, u64, u32, u32, u32);

/// `paths` and every directory above each (to `/`), each with its identity as `lstat` gives it
/// now, in path order.
fn path_ids(paths: impl IntoIterator<Item = PathBuf>) -> Vec<(PathBuf, Option<PathId>)> {
    let mut all = std::collections::BTreeSet::new();
    for path in paths {
        let mut at = Some(path.as_path());
        while let Some(p) = at {
            all.insert(p.to_path_buf());
            at = p.parent();
        }
    }
    all.into_iter()
        .map(|p| {
            let id = nix::sys::stat::lstat(&p)
                .ok()
                .map(|st| (st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid));
            (p, id)
        })
        .collect()
}

/// Builder → helper, one JSON line each on their socket ([`Whole`]).
#[derive(serde::Serialize, serde::Deserialize)]
enum BuilderMessage {
    /// The mirror is built and pid 1 waits: the masks it mounted, and the identity of every
    /// path the mirror was built on (the overlays' targets, the masks, the kept dir, and every
    /// directory above each), read once pid 1 had built it.
    Ready {
        masks: Vec<crate::setup::Mask>,
        ids: Vec<(PathBuf, Option<PathId>)>,
        /// The watches that keep the masks' walk valid (`walkwatch::Tracer`: watch descriptors
        /// in the helper's inotify instance, each with its filter); `None`: the walk is done
        /// again at `Run`.
        #[serde(default)]
        watch: Option<Vec<(i32, crate::walkwatch::Filter)>>,
    },
    /// Not built (the first message), or the run's answer (the second).
    Reply(HelperReply),
}

/// A run's mirror built whole ahead of its `Run` (`ParentMessage::Prepare::whole`: the request
/// of the run expected next, its command empty). A copy of the helper forked at `Prepare` (the
/// builder) does what [`run`] does up to the command — its own mount namespace with the host's
/// mount tree copied, the scratch tmpfs and tree, the secret walk and the masks, the cgroup
/// limits, pid 1 forked, which builds the mirror (namespaces entered, mounts, masks, pivot, the
/// old root detached, the mask watch) and waits for its command — and reports the masks and the
/// identities of the paths the mirror was built on. The helper itself stays as it was, so a
/// mirror found stale is torn down (the builder killed, pid 1 and the mirror with it) and the
/// run built at `Run` exactly as without one ([`Whole::serve`]).
struct Whole {
    builder: nix::unistd::Pid,
    link: OwnedFd,
    lines: std::io::BufReader<std::fs::File>,
    /// The host's mount table (the helper's own namespace), opened before the builder copied
    /// it: `POLLPRI` once anything was mounted, unmounted or moved there since.
    mountinfo: std::fs::File,
    request: HelperRequest,
    /// Where the builder makes the overlays' `upper` and `work` that a run keeps: the run's kept
    /// dir (the workspace's), then each kept `write=` tree's.
    keep: Vec<PathBuf>,
    /// What the builder reported when the mirror was built ([`BuilderMessage::Ready`]): the
    /// masks it mounted and the identities of the paths it was built on.
    masks: Vec<crate::setup::Mask>,
    ids: Vec<(PathBuf, Option<PathId>)>,
    /// What keeps the masks' walk valid until `Run`, when the builder could watch all it read.
    watch: Option<crate::walkwatch::Watch>,
}

/// Fork the builder of [`Whole`] for `request`. `None` (nothing forked) when the request is not
/// one a mirror is built ahead for: a mirrored run without a proxy.
fn build_whole(request: HelperRequest, prep: Prepared) -> (Prepared, Option<Whole>) {
    let keep = match &request.mirror {
        Some(m) if !request.config.proxy => kept_dirs(m).collect(),
        _ => return (prep, None),
    };
    let Ok(mountinfo) = std::fs::File::open("/proc/self/mountinfo") else {
        return (prep, None);
    };
    let Some((ours, theirs)) = crate::init::socket_pair() else {
        return (prep, None);
    };
    let Ok(lines) = ours.try_clone() else {
        return (prep, None);
    };
    // The builder adds its watches to this instance; we read their events at `Run`.
    let mut inotify = crate::walkwatch::instance();
    let helper = nix::unistd::getpid();
    // SAFETY: the helper is single-threaded here (no thread was started yet), so the child may
    // run arbitrary code after fork.
    let builder = match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            drop((ours, lines, mountinfo));
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                builder_main(&request, prep, theirs, helper, inotify.take())
            }))
            .unwrap_or(101);
            // SAFETY: _exit skips destructors that belong to the helper (its lock, its pipes).
            unsafe { libc::_exit(code) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => child,
        Err(_) => return (prep, None),
    };
    drop(theirs);
    let mut prep = prep;
    // The builder's pid 1 enters or attaches what was made ahead: never ours to use again.
    prep.ahead = MadeAhead::default();
    drop(prep.overlay.take());
    let mut whole = Whole {
        builder,
        link: ours,
        lines: std::io::BufReader::new(std::fs::File::from(lines)),
        mountinfo,
        request,
        keep,
        masks: Vec::new(),
        ids: Vec::new(),
        watch: None,
    };
    // Built (the identities read once pid 1 had built it), or torn down now.
    match whole.next() {
        Some(BuilderMessage::Ready { masks, ids, watch }) => {
            whole.masks = masks;
            whole.ids = ids;
            whole.watch = inotify
                .zip(watch)
                .map(|(fd, table)| crate::walkwatch::Watch::new(fd, table));
            (prep, Some(whole))
        }
        _ => {
            whole.tear_down();
            (prep, None)
        }
    }
}

/// The builder's life ([`Whole`]): build, report, wait for the command, run it, answer.
fn builder_main(
    request: &HelperRequest,
    mut prep: Prepared,
    link: OwnedFd,
    helper: nix::unistd::Pid,
    inotify: Option<OwnedFd>,
) -> i32 {
    // The helper's lock stays the helper's (dropping our copy would release it).
    std::mem::forget(prep.lock.take());
    // If the helper dies, so do we (and with us pid 1 and the mirror).
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    if nix::unistd::getppid() != helper {
        return 1;
    }
    // Our stdout is the helper's answer channel: never ours to write.
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdout(&null);
    }
    let say = |msg: &BuilderMessage| -> bool {
        let Ok(mut line) = serde_json::to_vec(msg) else {
            return false;
        };
        line.push(b'\n');
        let Ok(copy) = link.try_clone() else {
            return false;
        };
        (&std::fs::File::from(copy)).write_all(&line).is_ok()
    };
    // The trees the mirror is made of, as they are before anything of it is made (the
    // overlays' upper roots copy their owner and mode): the same once it is built, or the
    // mirror may show some of them as they were before (read again below).
    let cfg = &request.config;
    let roots: Vec<PathBuf> = std::iter::once(cfg.workspace.clone())
        .chain(cfg.home.clone())
        .chain(cfg.extra_writable.iter().cloned())
        .chain(request.mirror.iter().flat_map(kept_dirs))
        .collect();
    let before = path_ids(roots.iter().cloned());
    // The masks' walk watches what it reads (`walkwatch`) in our copy of the helper's inotify
    // instance, which goes with the walk: the helper reads the events.
    let mut built = match build(request, prep, None, inotify) {
        Ok(built) => built,
        Err(e) => {
            say(&BuilderMessage::Reply(failed("sandbox setup", &e)));
            return 1;
        }
    };
    // Pid 1's first line: built (`Prepared`), or why not. Read a byte at a time: what follows
    // is `collect`'s.
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\n") {
        match nix::unistd::read(&built.report, &mut byte) {
            Ok(1) => line.push(byte[0]),
            Err(Errno::EINTR) => {}
            _ => break,
        }
    }
    if !matches!(
        serde_json::from_slice::<InitMessage>(&line),
        Ok(InitMessage::Prepared)
    ) {
        let message = format!(
            "the mirror built ahead is not ready: {}",
            String::from_utf8_lossy(&line).trim()
        );
        say(&BuilderMessage::Reply(HelperReply::Failed {
            stage: "sandbox setup".into(),
            message,
        }));
        return 1;
    }
    let paths = built
        .overlays
        .iter()
        .map(|(_, o)| o.target.clone())
        .chain(built.masks.iter().map(|m| m.path.clone()))
        .chain(request.mirror.iter().flat_map(kept_dirs));
    let ids = path_ids(paths);
    if path_ids(roots) != before {
        say(&BuilderMessage::Reply(HelperReply::Failed {
            stage: "sandbox setup".into(),
            message: "the mirror's trees changed while it was built ahead".into(),
        }));
        return 1;
    }
    let watch = built.watch.take();
    if !say(&BuilderMessage::Ready {
        masks: built.masks.clone(),
        ids,
        watch,
    }) {
        return 1;
    }
    // The command, or the helper's hang-up (the mirror was stale, or nobody ran it). Pid 1 gone
    // meanwhile (killed: by the OOM killer, say): we end too, so the helper finds the mirror
    // gone (`Whole::serve`) and builds the run at `Run` instead of handing the command to nobody.
    if !go_or_init_gone(&link, built.pidfd.as_ref()) {
        return 1;
    }
    let Some((fds, go)) = crate::init::recv_go(&link) else {
        return 0;
    };
    built.start = Instant::now();
    built.started = go.started;
    // The upper dirs' baseline before the command can write there.
    built.upper_guard = built
        .upper
        .as_ref()
        .map(|(dirs, limit)| UpperGuard::new(dirs.iter(), *limit));
    let Some(awaiting) = built.awaiting.take() else {
        return 1;
    };
    let raw: Vec<std::os::fd::RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let handed = crate::init::send_go(&awaiting, &raw, &go);
    // Only pid 1 (and then the command) holds the output pipes' write ends.
    drop((fds, awaiting));
    built.run_start = Instant::now();
    let mut held = Held::default();
    let reply = match handed {
        Ok(()) => finish(conclude(built, &mut held).map(|raw| RawRun {
            built_ahead: true,
            ..raw
        })),
        Err(e) => failed("sandbox setup", &e),
    };
    say(&BuilderMessage::Reply(reply));
    // Our exit tears down the mirror (`Held`), after the answer.
    drop(held);
    0
}

/// The dirs a mirrored run keeps for its commit: its own (the workspace overlay's `upper` and
/// `work`), then each kept `write=` tree's.
fn kept_dirs(mirror: &MirrorSpec) -> impl Iterator<Item = PathBuf> + '_ {
    std::iter::once(mirror.keep.clone()).chain(mirror.extra.iter().map(|k| k.keep.clone()))
}

/// Wait until the helper's `link` has something (the command, or its hang-up): `true`; or
/// until the waiting pid 1 (`pidfd`) ended first: `false`. Without a pidfd, `true` at once.
fn go_or_init_gone(link: &OwnedFd, pidfd: Option<&OwnedFd>) -> bool {
    let Some(pidfd) = pidfd else {
        return true;
    };
    loop {
        let mut fds = [
            PollFd::new(link.as_fd(), PollFlags::POLLIN),
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(Errno::EINTR) => continue,
            Err(_) => return true,
            Ok(_) => return !happened(&fds[1]),
        }
    }
}

impl Whole {
    /// The builder's next line.
    fn next(&mut self) -> Option<BuilderMessage> {
        let mut line = String::new();
        match self.lines.read_line(&mut line) {
            Ok(n) if n > 0 => serde_json::from_str(&line).ok(),
            _ => None,
        }
    }

    /// Whether `req` is the request the mirror was built for but for what only the command
    /// has (its text, working directory and environment — with git's bookkeeping, which only
    /// adds to it) and what only the library's verdict reads (tracked and protected changes).
    fn same_run(&self, req: &HelperRequest) -> bool {
        let (Some(made), Some(now)) = (&self.request.mirror, &req.mirror) else {
            return false;
        };
        let mut cfg = self.request.config.clone();
        cfg.env.clone_from(&req.config.env);
        cfg.git_bookkeeping = req.config.git_bookkeeping;
        cfg.allow_tracked_changes = req.config.allow_tracked_changes;
        cfg.allow_protected = req.config.allow_protected;
        cfg.protected.clone_from(&req.config.protected);
        self.request.run_id == req.run_id
            && cfg == req.config
            && made.keep == now.keep
            && made.upper_bytes == now.upper_bytes
            && made.extra == now.extra
    }

    /// Serve `req` with the mirror built ahead, re-checked first: the request is the one it
    /// was built for ([`Whole::same_run`]); the host's mount table has not changed since
    /// before the builder copied it; the secret walk gives exactly the masks it mounted,
    /// placeholders included — kept valid by the builder's watch when no event since could
    /// have changed it (`walkwatch`), else redone now on the host (on a thread, while the rest
    /// is checked);
    /// every path it was built on (each overlay's target, each mask, the kept dir, every
    /// directory above them) is still the same file (device, inode, type, mode, owner, group)
    /// — an overlay keeps what it looked up, and a mount on the host tree follows its
    /// directory when renamed; and the builder still waits (it ends when its pid 1 does, so a
    /// mirror whose pid 1 was killed meanwhile is built anew). Then the command, its working
    /// directory, environment and output pipes go to the builder, whose answer is returned.
    /// `Err` with the pipes when any check fails: the mirror is torn down, and the caller
    /// builds the run as without it.
    fn serve(
        mut self,
        req: &HelperRequest,
        started: crate::clock::Stamp,
        passed: Vec<OwnedFd>,
        held: &mut Held,
    ) -> Result<HelperReply, Vec<OwnedFd>> {
        let checking = Instant::now();
        // The watch goes only after our answer, whatever happens here (`Held`).
        held.watch = self.watch.take();
        if !self.same_run(req) {
            self.tear_down();
            return Err(passed);
        }
        // The walk's watch read, or the walk on its thread while this one checks the mount
        // table and the identities.
        let cfg = &req.config;
        let watched = held
            .watch
            .as_ref()
            .is_some_and(|w| !w.changed(cfg.home.as_deref(), &cfg.secret_paths));
        let walk = (!watched).then(|| SecretWalk::start(cfg, None));
        // In the same poll: the builder's socket, on which it says nothing until the command
        // came, so anything to read is its end (it ends when its pid 1 did: killed meanwhile).
        let mut table = [
            PollFd::new(
                self.mountinfo.as_fd(),
                PollFlags::POLLPRI | PollFlags::POLLERR,
            ),
            PollFd::new(self.link.as_fd(), PollFlags::POLLIN),
        ];
        let polled = poll(&mut table, PollTimeout::ZERO).is_ok();
        let mounts_changed = !polled
            || table[0].revents().is_none_or(|r| {
                r.intersects(PollFlags::POLLPRI | PollFlags::POLLERR | PollFlags::POLLNVAL)
            });
        let builder_gone = !polled || happened(&table[1]);
        let now = path_ids(self.ids.iter().map(|(p, _)| p.clone()));
        let same_paths = now.len() == self.ids.len()
            && now
                .iter()
                .zip(&self.ids)
                .all(|((p, new), (_, old))| new == old || self.file_mask_replaced(p, old, new));
        let same_masks = match walk {
            None => true,
            Some(walk) => walk
                .finish()
                .ok()
                .and_then(|(found, _)| masks_for(cfg, found, &mut None).ok())
                .is_some_and(|now| now == self.masks),
        };
        let fresh = !mounts_changed && !builder_gone && same_paths && same_masks;
        if !fresh {
            self.tear_down();
            return Err(passed);
        }
        let (out, err) = match output_fds(passed) {
            Ok(pipes) => pipes,
            Err(e) => {
                self.tear_down();
                return Ok(failed("sandbox setup", &e));
            }
        };
        let go = crate::protocol::Go {
            command: req.command.clone(),
            cwd: req
                .mirror
                .as_ref()
                .map_or(&req.config.workspace, |m| &m.cwd)
                .clone(),
            env: req.config.command_env(),
            started,
        };
        // The re-checks are setup left on the run's path too: the builder's `ready_us` starts
        // when the command reaches it.
        let checks = crate::protocol::micros(checking.elapsed());
        let sent = crate::init::send_go(&self.link, &[out.as_raw_fd(), err.as_raw_fd()], &go);
        drop((out, err));
        let reply = match (sent, self.next()) {
            (Ok(()), Some(BuilderMessage::Reply(HelperReply::Done(raw)))) => {
                HelperReply::Done(RawRun {
                    secrets_watched: watched,
                    phases: crate::protocol::RunPhases {
                        ready_us: raw.phases.ready_us.saturating_add(checks),
                        ..raw.phases
                    },
                    ..raw
                })
            }
            (Ok(()), Some(BuilderMessage::Reply(reply))) => reply,
            _ => failed(
                "sandbox setup",
                &HelperError::InitLost("the builder of the mirror ended without an answer".into()),
            ),
        };
        Ok(reply)
    }

    /// Whether `path`, whose identity changed from `old` to `new` since the mirror was built,
    /// is a file mask the change leaves covering its path: a regular file replaced by another
    /// (a rename over it: Claude Code rewrites `~/.claude.json`, a masked path, that way up to a
    /// few times a second) inside the workspace or the home, whose overlays the mask was mounted
    /// on, in a plain directory of a local filesystem. There the mask's mount sits on the
    /// overlay's dentry for the name, which a rename on the host neither moves nor detaches (an
    /// overlay over a local filesystem does not revalidate what it looked up), so the path
    /// stays masked. Not on the host tree (a mask outside both): a rename over a mount point in
    /// another namespace detaches that mount, and the new file would be open. Every directory
    /// above must still be the same (the caller compares each), and the walk gives the same
    /// masks (a file mask still).
    fn file_mask_replaced(&self, path: &Path, old: &Option<PathId>, new: &Option<PathId>) -> bool {
        let regular = |id: &Option<PathId>| {
            id.is_some_and(|(_, _, mode, _, _)| mode & libc::S_IFMT == libc::S_IFREG)
        };
        let cfg = &self.request.config;
        let in_overlay = std::iter::once(&cfg.workspace)
            .chain(cfg.home.as_ref())
            .any(|root| path.starts_with(root) && path != root);
        let file_mask = self.masks.iter().any(|m| m.path == path && !m.dir);
        regular(old)
            && regular(new)
            && old.map(|o| o.0) == new.map(|n| n.0)
            && in_overlay
            && file_mask
            && path.parent().is_some_and(crate::walkwatch::plain_local_dir)
    }

    /// Wait until the helper's next message can be read (its `Run`, or the parent's hang-up):
    /// the mirror, kept; or until the host's mount table changes first: the mirror torn down
    /// (`None`; the run is built at `Run`, as the mount check of [`Whole::serve`] would have
    /// it). Its copy of the host's mount tree holds every file system mounted when it was
    /// built: a volume the operator unmounts meanwhile would stay alive in it until the next
    /// run — its device busy (`cryptsetup close` refused), and its last writes not flushed by
    /// the unmount, which does not end a file system still mounted elsewhere.
    ///
    /// Stdin holds nothing unread here: the library sends the `Run` only after our `Ready`.
    fn wait_for_run(self) -> Option<Whole> {
        let stdin = std::io::stdin();
        loop {
            let mut fds = [
                PollFd::new(stdin.as_fd(), PollFlags::POLLIN),
                PollFd::new(
                    self.mountinfo.as_fd(),
                    PollFlags::POLLPRI | PollFlags::POLLERR,
                ),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Err(Errno::EINTR) => continue,
                Err(_) => return Some(self),
                Ok(_) if happened(&fds[1]) => {
                    self.tear_down();
                    return None;
                }
                Ok(_) => return Some(self),
            }
        }
    }

    /// Kill the builder (its pid 1 and the mirror go with it) and remove the `upper` and `work`
    /// it made in the kept dirs (the workspace overlay's, each kept `write=` tree's), so the run
    /// makes its own.
    fn tear_down(self) {
        let _ = nix::sys::signal::kill(self.builder, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(self.builder, None);
        for keep in &self.keep {
            for dir in ["upper", "work"] {
                let _ = crate::mirror::remove_tree(&keep.join(dir));
            }
        }
    }

    /// Reap the builder once it answered (its exit tears the mirror down).
    fn reap(builder: nix::unistd::Pid) {
        let _ = nix::sys::wait::waitpid(builder, None);
    }
}

fn kill_init(child: nix::unistd::Pid, pidfd: Option<&OwnedFd>) {
    match pidfd {
        // SAFETY: integer arguments and a NULL siginfo; the pidfd is ours.
        Some(fd) => unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        },
        None => {
            let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

struct Collect<'a> {
    report: OwnedFd,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    deadline: Instant,
    output_bytes: usize,
    upper_guard: Option<&'a UpperGuard>,
}

#[derive(Default)]
struct Collected {
    exit: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    stdout: String,
    stderr: String,
    truncated: bool,
    effects: Vec<Effect>,
    setup_failed: Option<String>,
    init_status: String,
    killed: bool,
    /// The upper-dir guard killed the run (a `LimitHit` says so).
    over_limit: bool,
    /// The command's own time, as pid 1 timed it (`InitMessage::Exited::ran_us`).
    ran_us: u64,
}

/// Did poll report anything for `p` (readable, hung up, an error; bits nix does not name count)?
fn happened(p: &PollFd<'_>) -> bool {
    p.revents().is_none_or(|r| !r.is_empty())
}

/// Poll the run's pipes and pid 1 until it exits, enforcing the deadline and watching stdin
/// (the parent): a hang-up there means nobody waits for the answer, so the run is killed.
fn collect(child: nix::unistd::Pid, pidfd: Option<&OwnedFd>, io: Collect) -> Collected {
    let mut c = Collected::default();
    let mut bufs: [Vec<u8>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let fds = [Some(&io.report), io.stdout.as_ref(), io.stderr.as_ref()];
    let mut open = fds.map(|f| f.is_some());
    let mut init_done = false;
    let mut report_line = Vec::new();
    let parent = std::io::stdin();
    loop {
        let mut pfds: Vec<PollFd<'_>> = Vec::new();
        for (i, fd) in fds.iter().enumerate() {
            if let (true, Some(fd)) = (open[i], fd) {
                pfds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
            }
        }
        if !init_done {
            if let Some(p) = pidfd {
                pfds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
            }
            // The parent's end: only its hang-up (or an error) is of interest.
            pfds.push(PollFd::new(parent.as_fd(), PollFlags::empty()));
        }
        if pfds.is_empty() {
            break;
        }
        let now = Instant::now();
        let timeout_ms = if init_done {
            1000
        } else if now >= io.deadline {
            0
        } else {
            let ms = (io.deadline - now).as_millis().min(60_000) as i32 + 1;
            // The upper-dir guard looks at the filesystem four times a second.
            if io.upper_guard.is_some() {
                ms.min(UpperGuard::PERIOD_MS)
            } else {
                ms
            }
        };
        let Ok(n) = poll(
            &mut pfds,
            PollTimeout::from(u16::try_from(timeout_ms).unwrap_or(u16::MAX)),
        ) else {
            continue;
        };
        if !init_done && Instant::now() >= io.deadline {
            c.timed_out = true;
            kill_init(child, pidfd);
        }
        if !init_done {
            let parent_gone = pfds
                .last()
                .and_then(PollFd::revents)
                .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR));
            if parent_gone && !c.killed {
                c.killed = true;
                kill_init(child, pidfd);
            }
            if let Some(hit) = io.upper_guard.and_then(UpperGuard::check) {
                if !c.over_limit {
                    c.over_limit = true;
                    c.effects.push(hit);
                    kill_init(child, pidfd);
                }
            }
        }
        if n == 0 && init_done {
            break; // pipes held open by nothing we know: give up draining
        }
        let mut k = 0;
        for i in 0..3 {
            if !open[i] {
                continue;
            }
            let ready = happened(&pfds[k]);
            k += 1;
            if !ready {
                continue;
            }
            let mut chunk = [0u8; 16384];
            let Some(fd) = fds[i] else { continue };
            match nix::unistd::read(fd, &mut chunk) {
                Ok(0) | Err(_) => open[i] = false,
                Ok(got) => {
                    if i == 0 {
                        report_line.extend_from_slice(&chunk[..got]);
                        while let Some(pos) = report_line.iter().position(|b| *b == b'\n') {
                            let line: Vec<u8> = report_line.drain(..=pos).collect();
                            match serde_json::from_slice::<InitMessage>(&line) {
                                Ok(InitMessage::SetupFailed { message }) => {
                                    c.setup_failed = Some(message)
                                }
                                Ok(InitMessage::Effect(e)) => {
                                    if !c.effects.contains(&e) {
                                        c.effects.push(e);
                                    }
                                }
                                Ok(InitMessage::Exited {
                                    exit,
                                    signal,
                                    ran_us,
                                }) => {
                                    c.exit = exit;
                                    c.signal = signal;
                                    c.ran_us = ran_us;
                                }
                                Ok(InitMessage::Prepared) | Err(_) => {}
                            }
                        }
                    } else {
                        let keep = io.output_bytes.saturating_sub(bufs[i].len()).min(got);
                        bufs[i].extend_from_slice(&chunk[..keep]);
                        if keep < got {
                            c.truncated = true;
                        }
                    }
                }
            }
        }
        if !init_done && pfds[k..].first().is_some_and(happened) && pidfd.is_some() {
            init_done = true;
            c.init_status = format!("{:?}", nix::sys::wait::waitpid(child, None));
        }
        if pidfd.is_none() && !init_done && !open[0] {
            init_done = true;
            c.init_status = format!("{:?}", nix::sys::wait::waitpid(child, None));
        }
        if init_done && !open.iter().any(|o| *o) {
            break;
        }
    }
    if !init_done {
        c.init_status = format!("{:?}", nix::sys::wait::waitpid(child, None));
    }
    c.stdout = String::from_utf8_lossy(&bufs[1]).into_owned();
    c.stderr = String::from_utf8_lossy(&bufs[2]).into_owned();
    c
}

/// The output pipes of a mirrored run (stdout, stderr), passed by the library with its `Run`.
fn output_fds(fds: Vec<OwnedFd>) -> Result<(OwnedFd, OwnedFd), HelperError> {
    for fd in &fds {
        // Refuse anything but a pipe: the command gets this fd, and a caller's mistake must not
        // hand it a host file or socket. Received close-on-exec: only the command gets them
        // (dup2'd onto 1 and 2), never by accident.
        match nix::sys::stat::fstat(fd) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFIFO => {}
            Ok(_) => return Err(HelperError::Invalid("an output fd is not a pipe".into())),
            Err(e) => return Err(HelperError::Kernel("inspect the output pipes", e)),
        }
    }
    let mut fds = fds.into_iter();
    match (fds.next(), fds.next(), fds.next()) {
        (Some(out), Some(err), None) => Ok((out, err)),
        _ => Err(HelperError::Invalid("output pipes missing".into())),
    }
}

/// The listener hand-off of a proxy run: a Unix stream socket passed by the library.
fn handoff_fd(fd: Option<OwnedFd>) -> Result<OwnedFd, HelperError> {
    let fd =
        fd.ok_or_else(|| HelperError::Invalid("the proxy hand-off socket is missing".into()))?;
    match nix::sys::stat::fstat(&fd) {
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFSOCK => Ok(fd),
        Ok(_) => Err(HelperError::Invalid(
            "the proxy hand-off is not a socket".into(),
        )),
        Err(e) => Err(HelperError::Kernel("inspect the proxy hand-off socket", e)),
    }
}

/// Watches the filesystems of a mirrored run's kept upper dirs (the workspace's, and each kept
/// `write=` path's) while the run writes there.
struct UpperGuard {
    /// Each kept dir with the free bytes of its filesystem before the run.
    dirs: Vec<(PathBuf, u64)>,
    limit: u64,
}

impl UpperGuard {
    const PERIOD_MS: i32 = 250;

    fn new<'a>(dirs: impl Iterator<Item = &'a PathBuf>, limit: u64) -> UpperGuard {
        UpperGuard {
            dirs: dirs
                .map(|d| (d.clone(), Self::free(d).map_or(0, |(free, _)| free)))
                .collect(),
            limit,
        }
    }

    /// (available bytes, total bytes).
    fn free(dir: &Path) -> Option<(u64, u64)> {
        let st = nix::sys::statvfs::statvfs(dir).ok()?;
        let frag = st.fragment_size();
        Some((st.blocks_available() * frag, st.blocks() * frag))
    }

    /// Free space the run may not take from the filesystem: the smaller of 1% of it and 256 MiB.
    /// Only what the run itself added counts against it, so a disk that was already fuller than
    /// that before the run does not fail every run (it did with a 5% floor on a busy disk).
    const FLOOR_BYTES: u64 = 256 << 20;

    /// A `LimitHit` once the run used more than its limit, or its own writes brought the
    /// filesystem below the floor.
    fn check(&self) -> Option<Effect> {
        self.dirs
            .iter()
            .find_map(|(dir, baseline)| self.check_one(dir, *baseline))
    }

    fn check_one(&self, dir: &Path, baseline_free: u64) -> Option<Effect> {
        let (free, total) = Self::free(dir)?;
        let used = baseline_free.saturating_sub(free);
        let floor = Self::FLOOR_BYTES.min(total / 100);
        if used > self.limit || (used > 0 && free < floor) {
            return Some(Effect::LimitHit {
                limit: "upper".into(),
                detail: format!(
                    "the run added {used} bytes to the workspace's filesystem (limit {}; {free} \
                     of {total} bytes free)",
                    self.limit
                ),
            });
        }
        None
    }
}

/// The secret masks of a run (`RunConfig::mask_secrets`), computed right before its mounts so
/// the list is what exists then: on a thread of the helper's ([`SecretWalk::start`]) while the
/// helper builds the scratch tree, joined before pid 1 is forked ([`SecretWalk::finish`]); inline
/// when no thread could be started.
enum SecretWalk {
    Off(Option<Tracer>),
    Thread(std::thread::JoinHandle<Walked>),
    Inline(PathBuf, Option<PathBuf>, Vec<String>, Option<Tracer>),
}

/// A secret walk's paths, and what it read when asked to record it (`walkwatch`).
type Walked = (std::io::Result<Vec<PathBuf>>, Option<Tracer>);

impl SecretWalk {
    /// The walk for `cfg`, watching what it reads when given a `tracer` (`walkwatch`).
    fn start(cfg: &RunConfig, tracer: Option<Tracer>) -> SecretWalk {
        if !cfg.mask_secrets {
            return SecretWalk::Off(tracer);
        }
        let (ws, home, extra) = (
            cfg.workspace.clone(),
            cfg.home.clone(),
            cfg.secret_paths.clone(),
        );
        let (ws2, home2, extra2) = (ws.clone(), home.clone(), extra.clone());
        // The tracer goes to the thread and comes back with its answer (or stays here for the
        // inline walk, when no thread could be started: then it is lost with the failed spawn's
        // closure, and the walk is simply not watched).
        let spawned = std::thread::Builder::new()
            .name("secret-walk".into())
            .spawn(move || {
                let mut tracer = tracer;
                let found = crate::secrets::secret_masks_reading(
                    home2.as_deref(),
                    &ws2,
                    &extra2,
                    &mut tracer,
                );
                (found, tracer)
            });
        match spawned {
            Ok(handle) => SecretWalk::Thread(handle),
            Err(_) => SecretWalk::Inline(ws, home, extra, None),
        }
    }

    /// The masks (`None`: secrets are not masked in this run) and the walk's tracer (`None`
    /// unless given); the thread is gone on return.
    fn finish(self) -> Result<(Option<Vec<PathBuf>>, Option<Tracer>), HelperError> {
        let (found, reads) = match self {
            SecretWalk::Off(reads) => return Ok((None, reads)),
            SecretWalk::Thread(handle) => handle
                .join()
                .map_err(|_| HelperError::Invalid("secret masks: the walk failed".into()))?,
            SecretWalk::Inline(ws, home, extra, mut reads) => {
                let found =
                    crate::secrets::secret_masks_reading(home.as_deref(), &ws, &extra, &mut reads);
                (found, reads)
            }
        };
        found
            .map(|found| (Some(found), reads))
            .map_err(|e| HelperError::Invalid(format!("secret masks: {e}")))
    }
}

/// The mirror's masks: each configured path that exists on the host, typed. A mask that contains
/// the workspace or the home directory (cmdgate's data dir above a test's workspace, say) is
/// replaced by masks of its entries, down to the kept path, which stays visible; a mask that *is*
/// the workspace is refused (it would hide what the command must work on).
fn masks_for(
    cfg: &RunConfig,
    secrets: Option<Vec<PathBuf>>,
    reads: &mut Option<Tracer>,
) -> Result<Vec<crate::setup::Mask>, HelperError> {
    let mut out = Vec::new();
    // (path, is a secret mask): only secret masks yield to the entry's `unmask` paths.
    let mut paths: Vec<(PathBuf, bool)> = cfg.masks.iter().map(|p| (p.clone(), false)).collect();
    // The unmasked paths as spelled and where their links lead (the secret masks are resolved).
    let mut unmask = cfg.unmask.clone();
    if let Some(r) = reads.as_mut() {
        for u in &cfg.unmask {
            r.resolve(u, true);
        }
    }
    unmask.extend(
        cfg.unmask
            .iter()
            .filter_map(|u| std::fs::canonicalize(u).ok()),
    );
    let mut secret_dirs = Vec::new();
    if let Some(secrets) = secrets {
        secret_dirs = secrets.clone();
        paths.extend(
            secrets
                .into_iter()
                .filter(|p| !cfg.masks.contains(p) && !unmask.iter().any(|u| p.starts_with(u)))
                .map(|p| (p, true)),
        );
    }
    // Placeholders (entry names) only in secret directories: cmdgate's own masked dirs (config,
    // data, sockets) list nothing.
    let placeholder_ok = |p: &Path| {
        secret_dirs.iter().any(|s| p.starts_with(s))
            && !cfg
                .masks
                .iter()
                .any(|m| p.starts_with(m) || m.starts_with(p))
    };
    let keep: Vec<&Path> = std::iter::once(cfg.workspace.as_path())
        .chain(cfg.home.as_deref())
        .collect();
    // A secret directory that holds an unmasked path masks its other entries.
    let keep_unmasked: Vec<&Path> = keep
        .iter()
        .copied()
        .chain(unmask.iter().map(PathBuf::as_path))
        .collect();
    let mut split = Vec::new();
    for (path, secret) in &paths {
        if !path.is_absolute() || *path == cfg.workspace {
            return Err(HelperError::Invalid(format!(
                "mask {} is relative or the workspace itself",
                path.display()
            )));
        }
        let kept = if *secret { &keep_unmasked } else { &keep };
        mask_around(path, kept, &mut split, reads)?;
    }
    for path in split {
        if let Some(r) = reads.as_mut() {
            r.resolve(&path, false);
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) => out.push(crate::setup::Mask {
                dir: m.is_dir(),
                entries: if m.is_dir() && placeholder_ok(&path) {
                    if let Some(r) = reads.as_mut() {
                        r.list(&path, Listed::All);
                    }
                    placeholders(&path)
                } else {
                    Vec::new()
                },
                path,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(HelperError::State(path, e)),
        }
    }
    Ok(out)
}

/// A masked directory's entry names on the host (at most `maskwatch::PLACEHOLDERS`; UTF-8 names
/// only), for the placeholders that let the mask watch see an open of one (`setup` step 6b).
fn placeholders(dir: &Path) -> Vec<(String, bool)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, bool)> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let dir = e.file_type().ok()?.is_dir();
            Some((name, dir))
        })
        .take(crate::maskwatch::PLACEHOLDERS)
        .collect();
    out.sort();
    out
}

/// `path` as masks that leave every `keep` path visible: `path` itself when it contains none of
/// them, else each of its entries the same way (a kept path itself is left out, and so is a
/// symbolic link among the entries: a mount on it would land on its target, which may be the
/// kept path). A missing path adds nothing.
fn mask_around(
    path: &Path,
    keep: &[&Path],
    out: &mut Vec<PathBuf>,
    reads: &mut Option<Tracer>,
) -> Result<(), HelperError> {
    if keep.contains(&path) {
        return Ok(());
    }
    if !keep.iter().any(|k| k.starts_with(path)) {
        out.push(path.to_path_buf());
        return Ok(());
    }
    if let Some(r) = reads.as_mut() {
        r.list(path, Listed::All);
    }
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(HelperError::State(path.to_path_buf(), e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| HelperError::State(path.to_path_buf(), e))?;
        let child = entry.path();
        let is_link = entry
            .file_type()
            .map_err(|e| HelperError::State(child.clone(), e))?
            .is_symlink();
        if !is_link {
            mask_around(&child, keep, out, reads)?;
        }
    }
    Ok(())
}
