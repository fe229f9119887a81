//! Desktop notifications end to end: the real `cmdgated` on a private session bus with a real
//! notification server (Xvfb + dunst, `tests/src/desktop.rs`), driven through the real hook and
//! CLI. dbus-monitor proves what the daemon sent: a held request is announced with its pending id,
//! a breaker trip with "read-only mode". A hung server (dunst stopped) delays nothing: the held
//! request is still answered from the CLI, denials and the breaker work, and `cmdgate status`
//! reports why notifications stopped.
//!
//! Bounds here (`HANG_BOUND`) only turn a hang into a failure; nothing asserts how fast anything
//! is (shared, noisy machines).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cmdgate_tests::desktop::Desktop;
use cmdgate_tests::gate::Gate;
use serde_json::Value;

/// A tier-2 command of the starter map: it needs a person.
const ASKS: &str = "git push -q origin HEAD:refs/heads/x";
/// Rolled back after its run in the mirror (a dirty run), which weighs 2: with `threshold = 2`
/// it trips the breaker.
const DIRTY: &str = "rm tracked.txt";
/// Far above anything a working gate needs; only a hang reaches it.
const HANG_BOUND: Duration = Duration::from_secs(30);

/// A mirrored run of [`DIRTY`] to its end, through the hook and `cmdgate-run`: its exit status
/// and the client's stderr (the daemon's rollback line).
fn dirty_run(g: &Gate, tool_use_id: &str) -> (Option<i32>, String) {
    let done = g.shell(&g.pre_rewrite(tool_use_id, DIRTY));
    (done.status.code(), done.stderr_text())
}

/// A gate whose daemon talks to `desktop`'s bus, with `config` as its config.toml.
fn gate_on(desktop: &Desktop, config: &str) -> Gate {
    let mut g = Gate::new();
    std::fs::write(g.conf.join("config.toml"), config).unwrap();
    g.daemon_env.push((
        "DBUS_SESSION_BUS_ADDRESS".into(),
        desktop.bus_address().into(),
    ));
    g.init_signed();
    g.start();
    g
}

/// `cmdgate status --json` → `notifications` (enabled, delivered, last_error).
fn notifications(g: &Gate) -> Value {
    g.cli_json(&["status", "--json"])["notifications"].clone()
}

/// Everything needed to diagnose a failure from the log alone.
fn diagnosis(g: &Gate, desktop: &Desktop) -> String {
    format!(
        "notifications: {}\n--- dbus-monitor\n{}\n--- cmdgated\n{}",
        notifications(g),
        desktop.log(),
        std::fs::read_to_string(g.log_path()).unwrap_or_default()
    )
}

fn assert_seen(g: &Gate, desktop: &Desktop, text: &str) {
    assert!(
        desktop.wait_seen(text, HANG_BOUND),
        "no notification with {text:?} crossed the bus\n{}",
        diagnosis(g, desktop)
    );
}

/// Runs `f` on a thread; fails the test if it has not returned within `HANG_BOUND`.
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(HANG_BOUND)
        .unwrap_or_else(|e| panic!("{what}: no answer within {HANG_BOUND:?} ({e})"))
}

/// A PreToolUse for `command` through the hook, answered on a channel (it blocks while held).
fn held(g: &Gate, tool_use_id: &str, command: &str) -> mpsc::Receiver<(String, String)> {
    let hook = g.spawn_pre(tool_use_id, command, &[]);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if let Ok(answer) = hook.join() {
            let _ = tx.send(answer);
        }
    });
    rx
}

/// The pending id of `tool_use_id`, once `cmdgate pending` lists it.
fn pending_id(g: &Gate, tool_use_id: &str) -> String {
    let started = Instant::now();
    loop {
        let list = g.cli_json(&["pending", "--json"]);
        let found = list
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["tool_use_id"] == tool_use_id);
        if let Some(p) = found {
            return p["id"].as_i64().expect("pending id").to_string();
        }
        assert!(
            started.elapsed() < HANG_BOUND,
            "{tool_use_id} never became pending: {list}\n{}",
            std::fs::read_to_string(g.log_path()).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_delivered(g: &Gate, desktop: &Desktop, at_least: u64) {
    let started = Instant::now();
    while notifications(g)["delivered"].as_u64().unwrap_or(0) < at_least {
        assert!(
            started.elapsed() < HANG_BOUND,
            "the server never accepted {at_least} notification(s)\n{}",
            diagnosis(g, desktop)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_held_request_is_announced_with_its_pending_id() {
    let desktop = Desktop::start();
    let g = gate_on(&desktop, "[approvals]\nmode = \"background\"\n");
    let answer = held(&g, "n-1", ASKS);
    let id = pending_id(&g, "n-1");
    assert_seen(&g, &desktop, &format!("cmdgate: approval needed (#{id})"));
    // dunst answered the call: the daemon counts it as delivered.
    wait_delivered(&g, &desktop, 1);
    let rejected = g.cli(&["reject", &id]);
    assert!(rejected.status.success(), "{}", rejected.stderr_text());
    let (d, reason) = answer.recv_timeout(HANG_BOUND).expect("the hook returns");
    assert_eq!(d, "deny", "{reason}");
    let n = notifications(&g);
    assert!(n["last_error"].is_null(), "{}", diagnosis(&g, &desktop));
}

#[test]
fn a_rolled_back_run_in_background_mode_is_announced_with_its_run_id_and_diff_stat() {
    let desktop = Desktop::start();
    let g = gate_on(&desktop, "[approvals]\nmode = \"background\"\n");
    let (code, err) = dirty_run(&g, "r-1");
    assert_ne!(code, Some(0), "{err}");
    let row = g
        .audit("run")
        .into_iter()
        .find(|r| r["tool_use_id"] == "r-1")
        .expect("run row");
    let id = row["note"]
        .as_str()
        .unwrap()
        .trim_start_matches("run ")
        .to_owned();
    assert_seen(
        &g,
        &desktop,
        &format!("cmdgate: run {id} rolled back (1 file changed, +0 -1)"),
    );
    assert_seen(
        &g,
        &desktop,
        &format!("cmdgate runs show {id} --diff; cmdgate apply {id}"),
    );
}

#[test]
fn a_breaker_trip_is_announced() {
    let desktop = Desktop::start();
    let g = gate_on(&desktop, "[breaker]\nthreshold = 2\n");
    let (code, err) = dirty_run(&g, "t-1");
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("cmdgate rolled back"), "{err}");
    let (d, reason) = g.pre("t-2", "touch ok.txt");
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("circuit breaker"), "{reason}");
    assert_seen(&g, &desktop, "cmdgate: read-only mode");
    assert!(desktop.seen("session:sess-1"), "{}", desktop.log());
    wait_delivered(&g, &desktop, 1);
}

#[test]
fn a_hung_notification_server_delays_no_decision() {
    let desktop = Desktop::start();
    let g = Arc::new(gate_on(
        &desktop,
        "[approvals]\nmode = \"background\"\n[breaker]\nthreshold = 2\n",
    ));
    // dunst keeps the name and never answers again: every Notify call waits forever.
    desktop.hang();

    // A held request is still listed and answered from the CLI; its hook returns the answer.
    let answer = held(&g, "h-1", ASKS);
    let id = pending_id(&g, "h-1");
    // The daemon did try to announce it (the bus routed the call to the stopped server).
    assert_seen(&g, &desktop, &format!("cmdgate: approval needed (#{id})"));
    let approved = {
        let g = g.clone();
        let id = id.clone();
        bounded("cmdgate approve", move || g.cli(&["approve", &id]))
    };
    assert!(approved.status.success(), "{}", approved.stderr_text());
    let (d, reason) = answer
        .recv_timeout(HANG_BOUND)
        .unwrap_or_else(|_| panic!("the held hook did not return\n{}", diagnosis(&g, &desktop)));
    // An allow can only come from the person's answer (a hook deadline would deny).
    assert_eq!(d, "allow", "{reason}");

    // Runs are still judged by the daemon, and the breaker still trips.
    let deny = |tool_use_id: String, command: &'static str| {
        let g = g.clone();
        bounded(&tool_use_id.clone(), move || g.pre(&tool_use_id, command))
    };
    let dirty = |tool_use_id: String| {
        let g = g.clone();
        bounded(&tool_use_id.clone(), move || dirty_run(&g, &tool_use_id))
    };
    let (code, err) = dirty("h-2".into());
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("cmdgate rolled back"),
        "judged by the daemon: {err}"
    );
    let (d, reason) = deny("h-3".into(), "touch ok.txt");
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("circuit breaker"), "{reason}");

    // The trip's note waits behind the stuck call. Once that call has been stuck past the
    // notifier's timeout (2 s), the next note abandons the worker, `cmdgate status` says why, and
    // a fresh worker sends that note (to the same hung server). Reset and trip the breaker again
    // until a note finds the worker stuck.
    let started = Instant::now();
    let mut round = 0;
    loop {
        let n = notifications(&g);
        let error = n["last_error"].as_str().unwrap_or_default().to_owned();
        if error.contains("did not answer") {
            println!("notifications while hung: {n}");
            break;
        }
        assert!(
            started.elapsed() < HANG_BOUND,
            "no last_error about the hung server\n{}",
            diagnosis(&g, &desktop)
        );
        std::thread::sleep(Duration::from_millis(500));
        let reset = g.cli_json(&["breaker", "reset", "--json"]);
        assert!(reset["reset"].is_array(), "{reset}");
        round += 1;
        let (code, err) = dirty(format!("h-again-{round}"));
        assert_ne!(code, Some(0), "{err}");
    }
    // The fresh worker's call crossed the bus: a second Notify call after the stuck one.
    let started = Instant::now();
    while desktop.log().matches("method call").count() < 2 {
        assert!(
            started.elapsed() < HANG_BOUND,
            "no fresh worker after the hang\n{}",
            diagnosis(&g, &desktop)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(g.verify()["broken"].is_null());
}
