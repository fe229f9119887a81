//! One long-lived thread per process for the helpers' loose ends (`run::Prepared`): it reads
//! each helper's stderr (kept for the error of a helper that died without an answer) and, once a
//! finished run's helper exits, reaps it and removes its lock file and cgroups
//! (`Prepared::finish_later`). Before, each helper had a thread of its own reading its stderr and
//! each finished mirrored run started one more to reap it: two thread starts a run, one of them
//! on the run's path.
//!
//! The thread polls a wake-up pipe, every registered stderr pipe and the pidfd of every helper
//! handed over for reaping. A stderr is read up to [`STDERR_MAX`] bytes, then closed (the
//! helper's further writes fail, as with the thread per helper before); its text is kept in a
//! [`Stderr`] slot, final once the pipe reached its end. A helper is reaped only when its pidfd
//! says it exited (its `waitpid` never blocks this thread) and only the caller that handed it
//! over ever waits for it.
//!
//! When the thread cannot be started (or a pidfd cannot be opened), each caller falls back to
//! a thread of its own, as before: the same work, never skipped.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// What a helper's stderr may fill of the error message.
pub(crate) const STDERR_MAX: usize = 64 << 10;

/// A helper's stderr, read by the reaper: final once the pipe ended (or the reaper gave up).
#[derive(Clone, Default)]
pub(crate) struct Stderr(Arc<(Mutex<Text>, Condvar)>);

/// A stderr's bytes so far, and whether they are all.
type Text = (Vec<u8>, bool);

/// What runs once a helper was reaped.
type Then = Box<dyn FnOnce() + Send>;

impl Stderr {
    fn push(&self, bytes: &[u8]) {
        if let Ok(mut s) = self.0 .0.lock() {
            let room = STDERR_MAX.saturating_sub(s.0.len());
            s.0.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
    }

    fn len(&self) -> usize {
        self.0 .0.lock().map_or(STDERR_MAX, |s| s.0.len())
    }

    fn end(&self) {
        if let Ok(mut s) = self.0 .0.lock() {
            s.1 = true;
            self.0 .1.notify_all();
        }
    }

    /// The text, once the pipe ended (wait for it: call only once the helper is gone).
    pub(crate) fn wait(&self) -> String {
        let Ok(mut s) = self.0 .0.lock() else {
            return String::new();
        };
        while !s.1 {
            match self.0 .1.wait(s) {
                Ok(g) => s = g,
                Err(_) => return String::new(),
            }
        }
        String::from_utf8_lossy(&s.0).into_owned()
    }
}

/// Work for the reaper thread.
enum Job {
    /// Read a helper's stderr into its slot until the pipe ends.
    Read(std::process::ChildStderr, Stderr),
    /// Once the pidfd says the helper exited: reap it, then `then` (its lock file and cgroups).
    Reap {
        pidfd: OwnedFd,
        pid: nix::unistd::Pid,
        then: Box<dyn FnOnce() + Send>,
    },
}

/// The thread's inbox and the pipe that wakes its `poll`.
struct Reaper {
    tx: Mutex<Sender<Job>>,
    wake: OwnedFd,
}

static REAPER: OnceLock<Option<Reaper>> = OnceLock::new();

fn reaper() -> Option<&'static Reaper> {
    REAPER.get_or_init(start).as_ref()
}

fn start() -> Option<Reaper> {
    let (wake_r, wake_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK).ok()?;
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("helper-reaper".into())
        .spawn(move || serve(&rx, &wake_r))
        .ok()?;
    Some(Reaper {
        tx: Mutex::new(tx),
        wake: wake_w,
    })
}

fn send(job: Job) -> Result<(), Job> {
    let Some(r) = reaper() else {
        return Err(job);
    };
    let Ok(tx) = r.tx.lock() else {
        return Err(job);
    };
    tx.send(job).map_err(|e| e.0)?;
    // A full wake-up pipe already wakes the thread.
    let _ = nix::unistd::write(&r.wake, &[1]);
    Ok(())
}

/// Read `stderr` off the caller's thread: on the reaper, else on a thread of its own.
pub(crate) fn read_stderr(stderr: std::process::ChildStderr) -> Stderr {
    let slot = Stderr::default();
    if let Err(Job::Read(mut stderr, slot)) = send(Job::Read(stderr, slot.clone())) {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = (&mut stderr).take(STDERR_MAX as u64).read_to_end(&mut s);
            slot.push(&s);
            slot.end();
        });
    }
    slot
}

/// Once the helper `pid` (our child, never waited for elsewhere) exits: reap it, then run
/// `then`. On the reaper; on a thread of its own when there is none or no pidfd.
pub(crate) fn reap(pid: nix::unistd::Pid, then: Box<dyn FnOnce() + Send>) {
    let fallback = |then: Box<dyn FnOnce() + Send>| {
        std::thread::spawn(move || {
            let _ = nix::sys::wait::waitpid(pid, None);
            then();
        });
    };
    let Some(pidfd) = crate::init::pidfd_open(pid.as_raw()) else {
        return fallback(then);
    };
    if let Err(Job::Reap { then, .. }) = send(Job::Reap { pidfd, pid, then }) {
        fallback(then);
    }
}

/// The reaper's loop: forever (it ends with the process).
fn serve(rx: &Receiver<Job>, wake: &OwnedFd) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut reads: Vec<(std::process::ChildStderr, Stderr)> = Vec::new();
    let mut reaps: Vec<(OwnedFd, nix::unistd::Pid, Then)> = Vec::new();
    loop {
        for job in rx.try_iter() {
            match job {
                Job::Read(fd, slot) => reads.push((fd, slot)),
                Job::Reap { pidfd, pid, then } => reaps.push((pidfd, pid, then)),
            }
        }
        let (ready_reads, ready_reaps) = {
            let mut fds = vec![PollFd::new(wake.as_fd(), PollFlags::POLLIN)];
            fds.extend(
                reads
                    .iter()
                    .map(|(f, _)| PollFd::new(f.as_fd(), PollFlags::POLLIN)),
            );
            fds.extend(
                reaps
                    .iter()
                    .map(|(p, _, _)| PollFd::new(p.as_fd(), PollFlags::POLLIN)),
            );
            if poll(&mut fds, PollTimeout::NONE).is_err() {
                continue; // EINTR
            }
            let ready: Vec<bool> = fds
                .iter()
                .map(|p| p.revents().is_some_and(|r| !r.is_empty()))
                .collect();
            let (reads_ready, reaps_ready) = ready[1..].split_at(reads.len());
            (reads_ready.to_vec(), reaps_ready.to_vec())
        };
        let mut drain = [0u8; 64];
        while matches!(nix::unistd::read(wake, &mut drain), Ok(n) if n > 0) {}
        // Readable stderrs: one read each; an end, an error or a full slot closes the pipe.
        let mut i = 0;
        reads.retain_mut(|(fd, slot)| {
            let ready = ready_reads[i];
            i += 1;
            if !ready {
                return true;
            }
            let mut chunk = [0u8; 16384];
            match fd.read(&mut chunk) {
                Ok(n) if n > 0 && slot.len() + n < STDERR_MAX => {
                    slot.push(&chunk[..n]);
                    true
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => true,
                Ok(n) => {
                    slot.push(&chunk[..n]);
                    slot.end();
                    false
                }
                Err(_) => {
                    slot.end();
                    false
                }
            }
        });
        // Exited helpers: reaped (no wait: the pidfd said it exited), then their bookkeeping.
        let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut reaps)
            .into_iter()
            .zip(ready_reaps)
            .partition(|(_, ready)| *ready);
        reaps = waiting.into_iter().map(|(r, _)| r).collect();
        for ((pidfd, pid, then), _) in due {
            drop(pidfd);
            let _ = nix::sys::wait::waitpid(pid, None);
            then();
        }
    }
}
