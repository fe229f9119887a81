//! The hook process's deadline and its last word, without a thread: an interval timer (`SIGALRM`)
//! at the internal deadline, and the signals of a crash (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`,
//! `SIGABRT`: a stack overflow, an allocation failure), each handled on an alternate stack by
//! writing the fail-closed answer and `_exit`ing. So a hook blocked on stdin, on a FIFO, on a hung
//! FUSE path, or looping, still denies in time, and a hook that crashes denies instead of dying by a
//! signal (which Claude Code would read as a non-blocking error and go on with the call).
//!
//! The answers are rendered before the timer is set; the handlers only read atomics, call
//! `write(2)` and `_exit(2)` — all async-signal-safe — and never allocate or lock. Who owns stdout
//! is `output::claim`: if the logic's answer was written, the handler exits 0 leaving it; if it
//! was being written, exit 2 (Claude Code blocks the call); otherwise the handler writes the deny.
//! A Post event's answer is always "nothing": the handler exits 0 silently.
//!
//! This replaces a watchdog thread (clone, a stack, a malloc arena and its exit: ~70 µs a call) and
//! also does the few things std's runtime start did that the hook needs, since `main.rs` skips it
//! (`#![no_main]`): `SIGPIPE` ignored (a closed stdout is an error the hook sees, not a death), and
//! fds 0–2 open (else the first file opened would take the place of stdin or stdout). The answer
//! itself goes out through [`write_stdout`], the same `write(2)` loop the handlers use.
#![expect(
    unsafe_code,
    reason = "sigaction, sigaltstack, setitimer, poll and the handlers' write/_exit have no safe \
              wrapper in std; the handlers must be async-signal-safe"
)]

use std::ffi::c_int;
use std::sync::OnceLock;
use std::time::Duration;

use crate::output::{self, Claim};

/// The two answers the handlers may print, rendered in advance.
struct Lines {
    deadline: Box<[u8]>,
    crash: Box<[u8]>,
}

static LINES: OnceLock<Lines> = OnceLock::new();

/// The alternate signal stack's size: the handlers need a few hundred bytes, the kernel's signal
/// frame a few KiB (more with AVX-512 state).
const ALT_STACK: usize = 64 * 1024;

/// Readies the process and starts the deadline: fds 0–2 open, `SIGPIPE` ignored, the crash
/// handlers on an alternate stack, and `SIGALRM` after `budget`. Must be called once, before any
/// other thread exists (the hook has none). An error means no deadline: the caller refuses.
pub fn start(budget: Duration) -> Result<(), String> {
    let ms = budget.as_millis();
    let render = |why: &str| -> Box<[u8]> {
        output::fail_closed_deny(why)
            .render()
            .unwrap_or_default()
            .into_bytes()
            .into_boxed_slice()
    };
    let lines = Lines {
        deadline: render(&format!("it did not finish within its {ms} ms deadline")),
        crash: render("the hook crashed (a fatal signal)"),
    };
    if LINES.set(lines).is_err() {
        return Err("its deadline watchdog was started twice".into());
    }
    standard_fds()?;
    // SAFETY: setting a signal's disposition to SIG_IGN touches no memory of ours.
    if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(format!("cannot ignore SIGPIPE: {}", errno()));
    }
    alternate_stack()?;
    for sig in [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGABRT,
    ] {
        handle(sig, on_crash)?;
    }
    handle(libc::SIGALRM, on_deadline)?;
    // At least 1 ms: a zero `it_value` would disarm the timer instead of firing at once.
    let usecs = budget
        .as_micros()
        .clamp(1_000, u128::from(u32::MAX) * 1_000_000);
    #[cfg_attr(
        target_env = "musl",
        expect(
            deprecated,
            reason = "libc marks musl's `time_t`/`suseconds_t` as changing to 64 bits; they are \
                      64 bits on the 64-bit targets the hook is built for"
        )
    )]
    let timer = libc::itimerval {
        it_interval: libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
        it_value: libc::timeval {
            tv_sec: (usecs / 1_000_000) as libc::time_t,
            tv_usec: (usecs % 1_000_000) as libc::suseconds_t,
        },
    };
    // SAFETY: `timer` is a valid itimerval; the old value is not asked for (null).
    if unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) } != 0 {
        return Err(format!("cannot set its deadline timer: {}", errno()));
    }
    Ok(())
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Opens `/dev/null` on any of fds 0–2 that is closed, as std's runtime start does: one `poll`.
fn standard_fds() -> Result<(), String> {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    loop {
        // SAFETY: `fds` is a valid array of 3 pollfd that poll may write `revents` into.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) };
        if n >= 0 {
            break;
        }
        let e = errno();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("cannot check its standard fds: {e}"));
        }
    }
    for pfd in fds {
        if pfd.revents & libc::POLLNVAL != 0 {
            // SAFETY: a NUL-terminated path literal; the lowest free fd is the closed one.
            let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
            if fd != pfd.fd {
                return Err(format!("fd {} is closed and cannot be reopened", pfd.fd));
            }
        }
    }
    Ok(())
}

/// Gives the (only) thread an alternate signal stack, so a stack overflow's `SIGSEGV` can still
/// be handled. The memory is reserved, not touched: the kernel maps what the handler uses.
fn alternate_stack() -> Result<(), String> {
    let mut mem: Vec<u8> = Vec::with_capacity(ALT_STACK);
    let stack = libc::stack_t {
        ss_sp: mem.as_mut_ptr().cast(),
        ss_flags: 0,
        ss_size: ALT_STACK,
    };
    // The stack lives as long as the process.
    std::mem::forget(mem);
    // SAFETY: `stack` describes ALT_STACK bytes this process owns and never frees.
    if unsafe { libc::sigaltstack(&stack, std::ptr::null_mut()) } != 0 {
        return Err(format!("cannot set its signal stack: {}", errno()));
    }
    Ok(())
}

/// Installs `handler` for `sig` on the alternate stack with every signal blocked while it runs.
fn handle(sig: c_int, handler: extern "C" fn(c_int)) -> Result<(), String> {
    // SAFETY: sigaction is plain data; all-zero is a valid empty value that is filled in below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as usize;
    action.sa_flags = libc::SA_ONSTACK;
    // SAFETY: `action.sa_mask` is a valid sigset_t to fill; `action` a valid sigaction whose
    // handler is an `extern "C" fn(c_int)` (no SA_SIGINFO).
    let ok = unsafe {
        libc::sigfillset(&mut action.sa_mask) == 0
            && libc::sigaction(sig, &action, std::ptr::null_mut()) == 0
    };
    if !ok {
        return Err(format!("cannot handle signal {sig}: {}", errno()));
    }
    Ok(())
}

extern "C" fn on_deadline(_: c_int) {
    last_word(LINES.get().map(|l| &*l.deadline))
}

extern "C" fn on_crash(_: c_int) {
    last_word(LINES.get().map(|l| &*l.crash))
}

/// The handlers' one action: the fail-closed answer if nothing was answered yet, then `_exit`.
/// Only atomics, `write` and `_exit`.
fn last_word(line: Option<&[u8]>) {
    let code = match (output::answers_nothing(), output::claim(), line) {
        // A Post event: nothing to say; the tool already ran.
        (true, _, _) => 0,
        (false, Claim::Mine, Some(line)) if write_all(line) => 0,
        // Claimed but unwritable, or no line: Claude Code blocks the call on exit 2.
        (false, Claim::Mine, _) => 2,
        // The logic's answer was half written when the signal came: exit 2, never a second
        // answer after part of the first.
        (false, Claim::Writing, _) => {
            write_fd(
                2,
                b"cmdgate-hook: deadline or crash while writing the answer; blocked\n",
            );
            2
        }
        (false, Claim::Written, _) => 0,
    };
    // SAFETY: _exit is async-signal-safe and ends the process without running anything else.
    unsafe { libc::_exit(code) }
}

/// Writes all of `buf` to stdout (fd 1) with `write(2)`, unbuffered: the hook's one answer
/// (`output::emit`), and the handlers' (async-signal-safe).
pub fn write_stdout(buf: &[u8]) -> std::io::Result<()> {
    if write_all(buf) {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Writes all of `buf` to stdout; false on an error.
fn write_all(mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        let n = write_fd(1, buf);
        if n <= 0 {
            return false;
        }
        buf = buf.get(n as usize..).unwrap_or_default();
    }
    true
}

/// One `write(2)`, retried on EINTR; the count, or -1.
fn write_fd(fd: c_int, buf: &[u8]) -> isize {
    loop {
        // SAFETY: `buf` is valid for `buf.len()` bytes of reading.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n >= 0 || errno().kind() != std::io::ErrorKind::Interrupted {
            return n;
        }
    }
}
