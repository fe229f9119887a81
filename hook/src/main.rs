//! cmdgate-hook: Claude Code's PreToolUse/PostToolUse/PostToolUseFailure hook. Reads are allowed
//! locally; everything else is one round trip to cmdgated; every error, panic or overrun of the
//! internal deadline still ends in a printed deny and exit 0 (see ARCHITECTURE.md, `hook/`).
//!
//! Raw stdin → `input::parse_call` (a validated `HookCall`) → `gate::handle` → one `Answer`
//! printed by `output::emit`, then the spool is written. The logic lives in the library
//! (`src/lib.rs`, also what the fuzz target drives); this file owns the process: panic hook,
//! watchdog, exit code.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cmdgate_policy::locations::Mode;
use cmdgate_policy::wire::SpoolEntry;

use cmdgate_hook::config::{Config, DEFAULT_DEADLINE};
use cmdgate_hook::output::{self, Answer};
use cmdgate_hook::{gate, input, spool};

fn main() -> ExitCode {
    let started = Instant::now();
    // A panic anywhere (logic, watchdog, a library) prints the fail-closed answer and exits 0 from
    // inside the panic hook, before unwinding or aborting could turn it into an exit code that
    // Claude Code reads as "no decision".
    panic::set_hook(Box::new(|info| {
        let _ = writeln!(std::io::stderr(), "cmdgate-hook: internal error: {info}");
        output::emit(&output::fail_closed("the hook hit an internal error"));
        std::process::exit(0);
    }));

    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let config = Config::load(|k| std::env::var_os(k), &args);
    let budget = config.as_ref().map_or(DEFAULT_DEADLINE, |c| c.deadline);
    let deadline = started + budget;
    start_watchdog(budget);

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
    match (wrote, &answer) {
        // stdout is gone: for a decision, exit 2 makes Claude Code block the call (stderr goes to
        // the model) instead of reading "no output" as "no decision".
        (
            output::Emitted::Failed,
            Answer::Decision { .. } | Answer::Rewrite { .. } | Answer::StepAside { .. },
        ) => ExitCode::from(2),
        _ => ExitCode::SUCCESS,
    }
}

/// Prints the fail-closed answer and exits 0 once `budget` has passed, whatever the main thread is
/// doing (blocked on stdin, on connect, on a slow disk, or looping).
fn start_watchdog(budget: Duration) {
    // Unnamed (naming allocates in the new thread, which costs it a malloc arena) and with a small
    // stack: it only sleeps, formats one reason and writes it.
    let spawned = std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(move || {
            std::thread::sleep(budget);
            let ms = budget.as_millis();
            output::emit(&output::fail_closed(&format!(
                "it did not finish within its {ms} ms deadline"
            )));
            std::process::exit(0);
        });
    if spawned.is_err() {
        // No thread, no deadline: refuse rather than run unbounded.
        output::emit(&output::fail_closed(
            "it could not start its deadline watchdog",
        ));
        std::process::exit(0);
    }
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
    if std::env::var_os("CMDGATE_HOOK_FAULT").is_some_and(|v| v == "panic") {
        panic!("injected fault (CMDGATE_HOOK_FAULT=panic)");
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
