//! Desktop notifications against a real notification server: a private `dbus-daemon --session`,
//! `Xvfb` and `dunst`, with `dbus-monitor` proving what arrived. A stopped (SIGSTOP) dunst is a
//! real hung server: it owns the bus name and never answers.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cmdgate_daemon::notify::{Note, Notifier, NotifyConfig, Sent};

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn need(bin: &str) {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {bin}"))
        .output()
        .unwrap()
        .status
        .success();
    assert!(found, "`{bin}` is missing: .ci/install installs dbus, xvfb and dunst (apt-get install dbus xvfb dunst)");
}

/// Waits (bounded) until `f` holds.
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn name_owned(addr: &str) -> bool {
    Command::new("dbus-send")
        .args([
            "--print-reply",
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
        ])
        .args([
            "org.freedesktop.DBus.NameHasOwner",
            "string:org.freedesktop.Notifications",
        ])
        .env("DBUS_SESSION_BUS_ADDRESS", addr)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("boolean true"))
        .unwrap_or(false)
}

#[test]
fn notes_reach_a_real_server_and_a_hung_server_never_blocks() {
    for bin in ["dbus-daemon", "dbus-monitor", "dbus-send", "Xvfb", "dunst"] {
        need(bin);
    }
    let tmp = tempfile::tempdir().unwrap();
    // A private session bus.
    let mut bus = Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--print-address=1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = bus.stdout.take().unwrap();
    let mut addr = Vec::new();
    let mut byte = [0u8; 1];
    while out.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
        addr.push(byte[0]);
    }
    let addr = String::from_utf8(addr).unwrap();
    let _bus = Kill(bus);
    // A display and the notification server on it.
    let display = format!(":{}", 100 + std::process::id() % 400);
    let _x = Kill(
        Command::new("Xvfb")
            .args([&display, "-nolisten", "tcp"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(300));
    let dunst = Command::new("dunst")
        .env("DISPLAY", &display)
        .env("DBUS_SESSION_BUS_ADDRESS", &addr)
        .env("HOME", tmp.path())
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let dunst_pid = dunst.id();
    let _dunst = Kill(dunst);
    wait_for(
        "dunst to own org.freedesktop.Notifications",
        Duration::from_secs(20),
        || name_owned(&addr),
    );
    let monitor_log = tmp.path().join("monitor.log");
    let _monitor = Kill(
        Command::new("dbus-monitor")
            .args([
                "--session",
                "interface='org.freedesktop.Notifications',member='Notify'",
            ])
            .env("DBUS_SESSION_BUS_ADDRESS", &addr)
            .stdout(std::fs::File::create(&monitor_log).unwrap())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(300));
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
    wait_for("dbus-monitor to see it", Duration::from_secs(10), || {
        std::fs::read_to_string(&monitor_log)
            .unwrap_or_default()
            .contains("cmdgate: breaker tripped")
    });

    // Hang the server: it keeps the name, but never answers.
    assert!(Command::new("kill")
        .args(["-STOP", &dunst_pid.to_string()])
        .status()
        .unwrap()
        .success());
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
    assert!(Command::new("kill")
        .args(["-CONT", &dunst_pid.to_string()])
        .status()
        .unwrap()
        .success());
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
