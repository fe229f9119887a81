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
    let reply = match read() {
        Err(e) => failed("request", &e),
        Ok(ParentMessage::Run(req)) => match prepare(&req.run_id, &req.config.state_dir, None) {
            Ok(prep) => {
                made = Some(prep.cgroup.clone());
                mirrored = req.mirror.is_some();
                finish(run(&req, prep, channel.take(), &mut held))
            }
            Err(e) => failed("sandbox setup", &e),
        },
        Ok(ParentMessage::Store(op)) => HelperReply::Store(crate::keeper::serve(op)),
        Ok(ParentMessage::Prepare {
            run_id,
            state_dir,
            overlay,
        }) => match prepare(&run_id, &state_dir, overlay.as_ref()) {
            Err(e) => failed("sandbox setup", &e),
            Ok(prep) => {
                made = Some(prep.cgroup.clone());
                if !send(&HelperReply::Ready) {
                    leave_cgroups(parent, parent_is_root, made.as_ref());
                    return ExitCode::FAILURE;
                }
                match read() {
                    Ok(ParentMessage::Run(req))
                        if req.run_id == run_id && req.config.state_dir == state_dir =>
                    {
                        mirrored = req.mirror.is_some();
                        finish(run(&req, prep, channel.take(), &mut held))
                    }
                    Ok(_) => failed(
                        "request",
                        &HelperError::Invalid("expected the Run of the prepared run".into()),
                    ),
                    Err(e) => failed("request", &e),
                }
            }
        },
    };
    let sent = send(&reply);
    // Only now, with the answer sent: the kernel tears down the mirror's mount namespace and
    // destroys the fanotify group here, off the run's critical path.
    drop(held);
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
    /// Held (flock) for the helper's life: `sweep_stale` skips locked runs.
    _lock: Flock<std::fs::File>,
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
        _lock: lock,
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
#[derive(Default)]
struct Held(Option<OwnedFd>);

fn run(
    req: &HelperRequest,
    mut prep: Prepared,
    channel: Option<OwnedFd>,
    held: &mut Held,
) -> Result<RawRun, HelperError> {
    let start = Instant::now();
    // The run's start, for the commit's "changed on the host after the run started": every
    // host change before it has a ctime at or before it, and pid 1 starts the command only once
    // the coarse clock has passed it (see `clock`). Taken as the `Run` arrives, so the wait for
    // the clock's tick overlaps the mirror's setup instead of following it. An earlier start is
    // the cautious side: a host change made during the setup counts as made after the start (a
    // conflict if the run changed the same path), never as one the run saw.
    let started = crate::clock::precise_now();
    let cfg = &req.config;
    // The secret masks' walk of the workspace (the longest step before pid 1 exists: one listing
    // per directory) runs on a thread while this one builds the scratch tree below; it is joined
    // before the mount plan is made, so the helper is single-threaded again when it forks pid 1.
    // The walk reads the host as the mounts will show it (the thread stays in the mount
    // namespace this process had at `Run`; ours differs only by the scratch tmpfs, in the
    // masked state dir).
    let secret_walk = SecretWalk::start(cfg);
    let scratch = prep.scratch.clone();
    let cgroup = &prep.cgroup;
    let mirror = req.mirror.as_ref();
    // A mirrored run's pipes (and proxy hand-off), sent with its `Run`; a test-run takes none.
    let mut passed = match (mirror, channel) {
        (Some(_), Some(channel)) => crate::init::recv_fds(&channel).ok_or_else(|| {
            HelperError::Invalid("no output pipes came with the mirrored run".into())
        })?,
        (Some(_), None) => {
            return Err(HelperError::Invalid(
                "a mirrored run needs the library's fd channel (fd 3)".into(),
            ))
        }
        (None, _) => Vec::new(),
    };
    // Our own mount namespace, copied now (not when prepared: a warm helper may wait a long
    // time, and the mirror must show the host's mounts as they are when the run starts). The
    // scratch tmpfs exists only here (and in the run's copy), so whatever happens to us, the
    // kernel frees it when the last process using it is gone.
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
    let plan = MountPlan {
        new_root: root,
        scratch: scratch.clone(),
        overlays: overlays.iter().map(|(_, o)| o.clone()).collect(),
        binds,
        shm: shm.clone(),
        network: cfg.network,
        masks: masks_for(cfg, secret_walk.finish()?)?,
    };

    // Limits before anything of the command runs.
    cgroup
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
    // streamed, unbounded, never copied. A test-run's output is collected here, bounded.
    let expected = 2 + usize::from(cfg.proxy && mirror.is_some());
    if mirror.is_some() && passed.len() != expected {
        return Err(HelperError::Invalid(format!(
            "{} fds came with the mirrored run, {expected} expected",
            passed.len()
        )));
    }
    let handoff = (passed.len() == 3).then(|| passed.pop()).flatten();
    let (out_r, out_w, err_r, err_w) = match mirror {
        Some(_) => {
            let (out, err) = output_fds(passed)?;
            (None, out, None, err)
        }
        None => {
            let (out_r, out_w) = pipe()?;
            let (err_r, err_w) = pipe()?;
            (Some(out_r), out_w, Some(err_r), err_w)
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
    let upper_guard = mirror.map(|m| {
        let dirs = std::iter::once(&m.keep).chain(m.extra.iter().map(|k| &k.keep));
        UpperGuard::new(dirs, m.upper_bytes)
    });

    // The next child is pid 1 of a new pid namespace: when it dies, every process of the run does.
    nix::sched::unshare(CloneFlags::CLONE_NEWPID)
        .map_err(|e| HelperError::Kernel("unshare the pid namespace", e))?;
    let mut writable: Vec<PathBuf> = overlays.iter().map(|(_, o)| o.target.clone()).collect();
    writable.extend(["/tmp", "/run", "/dev/shm"].map(PathBuf::from));
    let env = cfg.command_env();
    let ahead = std::mem::take(&mut prep.ahead);
    // SAFETY: the helper is single-threaded here (its one thread, the secret walk, was joined
    // when the mount plan was made; nothing else spawns threads), so the child may run
    // arbitrary code after fork.
    let child = match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            drop((rep_r, out_r, err_r, held_ours));
            // A panic must not unwind into the helper's frames (their destructors own the
            // helper's scratch mount): catch it and leave.
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                init_main(InitArgs {
                    plan: &plan,
                    command: &req.command,
                    cwd: mirror.map_or(&cfg.workspace, |m| &m.cwd),
                    aliases: mirror.is_some(),
                    env: &env,
                    run_as: cfg.run_as,
                    network: cfg.network,
                    proxy,
                    writable,
                    not_before: started,
                    host_root,
                    ahead,
                    hand_off: held_theirs,
                    report: rep_w,
                    stdout: out_w,
                    stderr: err_w,
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
    drop((rep_w, out_w, err_w, proxy, host_root, ahead, held_theirs));
    held.0 = held_ours;
    let pidfd = pidfd_open(child.as_raw());

    let collected = collect(
        child,
        pidfd.as_ref(),
        Collect {
            report: rep_r,
            stdout: out_r,
            stderr: err_r,
            deadline: run_start + cfg.limits.timeout,
            output_bytes: cfg.limits.output_bytes,
            upper_guard: upper_guard.as_ref(),
        },
    );
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
    effects.extend(cgroup.limit_hits());
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
    })
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
                                Ok(InitMessage::Exited { exit, signal }) => {
                                    c.exit = exit;
                                    c.signal = signal;
                                }
                                Err(_) => {}
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
    Off,
    Thread(std::thread::JoinHandle<std::io::Result<Vec<PathBuf>>>),
    Inline(PathBuf, Option<PathBuf>, Vec<String>),
}

impl SecretWalk {
    fn start(cfg: &RunConfig) -> SecretWalk {
        if !cfg.mask_secrets {
            return SecretWalk::Off;
        }
        let (ws, home, extra) = (
            cfg.workspace.clone(),
            cfg.home.clone(),
            cfg.secret_paths.clone(),
        );
        let (ws2, home2, extra2) = (ws.clone(), home.clone(), extra.clone());
        match std::thread::Builder::new()
            .name("secret-walk".into())
            .spawn(move || crate::secrets::secret_masks(home2.as_deref(), &ws2, &extra2))
        {
            Ok(handle) => SecretWalk::Thread(handle),
            Err(_) => SecretWalk::Inline(ws, home, extra),
        }
    }

    /// The masks (`None`: secrets are not masked in this run); the thread is gone on return.
    fn finish(self) -> Result<Option<Vec<PathBuf>>, HelperError> {
        let found = match self {
            SecretWalk::Off => return Ok(None),
            SecretWalk::Thread(handle) => handle
                .join()
                .map_err(|_| HelperError::Invalid("secret masks: the walk failed".into()))?,
            SecretWalk::Inline(ws, home, extra) => {
                crate::secrets::secret_masks(home.as_deref(), &ws, &extra)
            }
        };
        found
            .map(Some)
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
) -> Result<Vec<crate::setup::Mask>, HelperError> {
    let mut out = Vec::new();
    // (path, is a secret mask): only secret masks yield to the entry's `unmask` paths.
    let mut paths: Vec<(PathBuf, bool)> = cfg.masks.iter().map(|p| (p.clone(), false)).collect();
    // The unmasked paths as spelled and where their links lead (the secret masks are resolved).
    let mut unmask = cfg.unmask.clone();
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
        mask_around(path, kept, &mut split)?;
    }
    for path in split {
        match std::fs::symlink_metadata(&path) {
            Ok(m) => out.push(crate::setup::Mask {
                dir: m.is_dir(),
                entries: if m.is_dir() && placeholder_ok(&path) {
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
fn mask_around(path: &Path, keep: &[&Path], out: &mut Vec<PathBuf>) -> Result<(), HelperError> {
    if keep.contains(&path) {
        return Ok(());
    }
    if !keep.iter().any(|k| k.starts_with(path)) {
        out.push(path.to_path_buf());
        return Ok(());
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
            mask_around(&child, keep, out)?;
        }
    }
    Ok(())
}
