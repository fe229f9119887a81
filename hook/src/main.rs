//! cmdgate-hook: Claude Code's PreToolUse/PostToolUse/PostToolUseFailure hook. Reads are allowed
//! locally; everything else is one round trip to cmdgated; every error, panic or overrun of the
//! internal deadline still ends in a printed deny and exit 0 (see ARCHITECTURE.md, `hook/`).
//!
//! Raw stdin → `input::parse_call` (a validated `HookCall`) → `gate::handle` → one `Answer`
//! printed by `output::emit`, then the spool is written. The logic lives in the library
//! (`src/lib.rs`, also what the fuzz target drives); this file owns the process: panic hook,
//! watchdog, exit code.
//!
//! `#![no_main]`: the C `main` below calls [`hook_main`] directly, skipping std's runtime start
//! (a stack-overflow handler that reads `/proc/self/maps`, an alternate stack, `SIGPIPE`, the
//! standard fds). What of it the hook needs, `watchdog::start` does, with a crash handler that
//! denies where std's would only print and abort. The arguments come from `main`'s `argv` (std
//! learns them only on glibc); the environment from std (`environ`, set by every C runtime).
#![no_main]
#![deny(unsafe_code)]

use std::ffi::OsString;
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::time::Instant;

use cmdgate_policy::locations::Mode;
use cmdgate_policy::wire::SpoolEntry;

use cmdgate_hook::config::{Config, DEFAULT_DEADLINE};
use cmdgate_hook::output::{self, Answer};
use cmdgate_hook::{gate, input, spool, watchdog};

/// Every allocation of the process comes from a bump arena (`arena.rs`): a call allocates a few
/// hundred blocks and exits, so `malloc`'s bookkeeping (and musl's `mmap` per larger block) is
/// cost without use.
#[global_allocator]
static ALLOC: cmdgate_hook::arena::Arena = cmdgate_hook::arena::Arena::global();

/// The process's entry point, called by the C runtime. The arguments are taken from `argv` here,
/// not from `std::env::args_os`: with `#![no_main]` std only learns them on glibc (which passes
/// `argc`/`argv` to `.init_array` functions); on musl, the hook's release build, std's list is
/// empty, and a `--system` hook would run as a user-mode one.
#[expect(
    unsafe_code,
    reason = "`no_mangle` exports the C `main`; it reads the C runtime's `argv` and calls the \
              safe `hook_main`"
)]
#[unsafe(no_mangle)]
extern "C" fn main(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
    use std::os::unix::ffi::OsStrExt;
    let count = usize::try_from(argc).unwrap_or(0);
    let args: Vec<OsString> = (1..count)
        .map(|i| {
            // SAFETY: the C runtime passes `argc` valid pointers in `argv`, each to a
            // NUL-terminated string that lives as long as the process.
            let arg = unsafe { std::ffi::CStr::from_ptr(*argv.add(i)) };
            OsString::from(std::ffi::OsStr::from_bytes(arg.to_bytes()))
        })
        .collect();
    hook_main(args).code()
}

/// How the process ends: 0, or 2 (Claude Code blocks the call and shows stderr to the model).
enum Exit {
    Success,
    Blocked,
}

impl Exit {
    fn code(&self) -> std::ffi::c_int {
        match self {
            Exit::Success => 0,
            Exit::Blocked => 2,
        }
    }
}

fn hook_main(args: Vec<OsString>) -> Exit {
    let started = Instant::now();
    // A panic anywhere (logic, watchdog, a library) prints the fail-closed answer and exits 0 from
    // inside the panic hook, before unwinding or aborting could turn it into an exit code that
    // Claude Code reads as "no decision".
    panic::set_hook(Box::new(|info| {
        let _ = writeln!(std::io::stderr(), "cmdgate-hook: internal error: {info}");
        output::emit(&output::fail_closed("the hook hit an internal error"));
        std::process::exit(0);
    }));

    let config = Config::load(|k| std::env::var_os(k), &args);
    let budget = config.as_ref().map_or(DEFAULT_DEADLINE, |c| c.deadline);
    let deadline = started + budget;
    if let Err(why) = watchdog::start(budget) {
        // No deadline: refuse rather than run unbounded.
        output::emit(&output::fail_closed(&why));
        return Exit::Success;
    }

    let (answer, spool) =
        match panic::catch_unwind(AssertUnwindSafe(|| run(config.as_ref(), deadline))) {
            Ok(done) => done,
            Err(_) => (output::fail_closed("the hook hit an internal error"), None),
        };
    let wrote = output::emit(&answer);
    // System mode sends what the hook did by itself to the daemon's audit; the rest is spooled.
    let spool = match (spool, config.as_ref()) {
        (Some((dir, entries)), Ok(cfg)) => Some((dir, gate::deliver(cfg, entries))),
        (spool, _) => spool,
    };
    if let Some((dir, entries)) = spool {
        for entry in entries {
            if let Err(e) = spool::append(&dir, entry) {
                let _ = writeln!(
                    std::io::stderr(),
                    "cmdgate-hook: spool {}: {e}",
                    dir.display()
                );
            }
        }
    }
    let exit = match (wrote, &answer) {
        // stdout is gone: for a decision, exit 2 makes Claude Code block the call (stderr goes to
        // the model) instead of reading "no output" as "no decision".
        (
            output::Emitted::Failed,
            Answer::Decision { .. } | Answer::Rewrite { .. } | Answer::StepAside { .. },
        ) => Exit::Blocked,
        _ => Exit::Success,
    };
    // The answer is written (one raw `write(2)`) and each spool record appended and its file
    // closed: nothing still owned here does anything at drop but free memory, which the exit
    // returns anyway. Ending the process now skips those frees (the configuration, the answer).
    std::process::exit(exit.code())
}

/// Everything between stdin and the answer. Returns the answer and the spool entries to write.
fn run(
    config: Result<&Config, &String>,
    deadline: Instant,
) -> (Answer, Option<(std::path::PathBuf, Vec<SpoolEntry>)>) {
    let bytes = match input::read_bounded(std::io::stdin().lock()) {
        Ok(b) => b,
        Err(e) => return (output::fail_closed(&e.to_string()), None),
    };
    let call = match input::parse_call(&bytes) {
        Ok(c) => c,
        Err(e) => {
            if let Some(event) = input::sniff_event(&bytes) {
                output::set_event(event);
            }
            return (output::fail_closed(&e.to_string()), None);
        }
    };
    output::set_event(call.event);
    // Fault injection for the tests of the panic path; compiled out of release builds.
    #[cfg(debug_assertions)]
    match std::env::var_os("CMDGATE_HOOK_FAULT") {
        Some(v) if v == "panic" => panic!("injected fault (CMDGATE_HOOK_FAULT=panic)"),
        // The crash handler's tests: a real stack overflow (SIGSEGV on the guard page) and an
        // abort (SIGABRT, as an allocation failure ends).
        Some(v) if v == "stack" => {
            overflow(0);
        }
        Some(v) if v == "abort" => std::process::abort(),
        _ => {}
    }
    let cfg = match config {
        Ok(c) => c,
        Err(e) => {
            return (
                output::fail_closed(&format!("its configuration is unusable: {e}")),
                None,
            )
        }
    };
    let plan = gate::handle(&call, cfg, deadline);
    // Without a spool dir the records still go to the daemon in system mode (`gate::deliver`);
    // an empty dir path makes any leftover's append fail, which is reported on stderr.
    let spool = match (&cfg.spool_dir, plan.spool.is_empty(), cfg.mode) {
        (_, true, _) => None,
        (Some(dir), false, _) => Some((dir.clone(), plan.spool)),
        (None, false, Mode::System) => Some((std::path::PathBuf::new(), plan.spool)),
        (None, false, Mode::User) => None,
    };
    (plan.answer, spool)
}

/// Recurses until the stack overflows (fault injection, debug builds only).
#[cfg(debug_assertions)]
#[expect(unconditional_recursion, reason = "it is meant to overflow the stack")]
fn overflow(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth; 512]);
    overflow(depth + 1) + frame[(depth % 512) as usize]
}
