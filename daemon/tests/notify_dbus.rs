//! Desktop notifications against a real notification server: a private `dbus-daemon --session`,
//! `Xvfb` and `dunst`, with `dbus-monitor` proving what arrived. A stopped (SIGSTOP) dunst is a
//! real hung server: it owns the bus name and never answers.

use std::time::{Duration, Instant};

use cmdgate_daemon::engine::notify::{Note, Notifier, NotifyConfig, Sent};

// The same bus + Xvfb + dunst + dbus-monitor setup the end-to-end tests use
// (tests/tests/daemon_notify.rs); included by path so there is one copy.
#[allow(dead_code)]
#[path = "../../tests/src/desktop.rs"]
mod desktop;

/// Waits (bounded) until `f` holds.
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn notes_reach_a_real_server_and_a_hung_server_never_blocks() {
    let desktop = desktop::Desktop::start();
    let addr = desktop.bus_address().to_owned();
    // notify-rust reads the bus address from the environment; this test binary has one test.
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", &addr);

    let notifier = Notifier::new(NotifyConfig {
        timeout: Duration::from_millis(500),
        ..NotifyConfig::default()
    });
    let sent = notifier.notify(Note {
        summary: "cmdgate: breaker tripped".into(),
        body: "session s1 is read-only".into(),
        urgent: true,
    });
    assert_eq!(sent, Sent::Queued);
    wait_for(
        "the notification to be delivered",
        Duration::from_secs(20),
        || notifier.delivered() == 1,
    );
    assert!(
        desktop.wait_seen("cmdgate: breaker tripped", Duration::from_secs(10)),
        "dbus-monitor did not see it: {}",
        desktop.log()
    );

    // Hang the server: it keeps the name, but never answers.
    desktop.hang();
    let returned = std::sync::mpsc::channel();
    let n2 = notifier.clone();
    let tx = returned.0;
    std::thread::spawn(move || {
        let mut results = Vec::new();
        for i in 0..5 {
            results.push(n2.notify(Note {
                summary: format!("pending {i}"),
                body: String::new(),
                urgent: false,
            }));
        }
        tx.send(results).unwrap();
    });
    // notify() is a try_send: it returns at once however long the server hangs. The bound here only
    // turns a regression into a failure instead of a stuck CI job.
    let results = returned
        .1
        .recv_timeout(Duration::from_secs(10))
        .expect("notify blocked on a hung server");
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Sent::Queued | Sent::Dropped(_))),
        "{results:?}"
    );
    // After the timeout the stuck worker is abandoned and the reason is recorded.
    std::thread::sleep(Duration::from_millis(700));
    let _ = notifier.notify(Note {
        summary: "after hang".into(),
        body: String::new(),
        urgent: false,
    });
    assert!(
        notifier
            .last_error()
            .unwrap_or_default()
            .contains("did not answer"),
        "{:?}",
        notifier.last_error()
    );

    // The server comes back: a fresh worker delivers again.
    desktop.resume();
    let before = notifier.delivered();
    std::thread::sleep(Duration::from_millis(700));
    let _ = notifier.notify(Note {
        summary: "cmdgate: back".into(),
        body: String::new(),
        urgent: false,
    });
    wait_for(
        "delivery after the server resumed",
        Duration::from_secs(20),
        || notifier.delivered() > before,
    );
}
