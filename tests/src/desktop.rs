//! A real desktop notification server for tests: a private `dbus-daemon --session`, an `Xvfb`
//! display (its number picked by the X server itself, so tests in one process never collide) and
//! `dunst` on it, with `dbus-monitor` logging every `org.freedesktop.Notifications.Notify` call that
//! crosses the bus. A stopped (SIGSTOP) dunst is a real hung server: it keeps the bus name and
//! never answers. Everything is killed on drop.
//!
//! Only `std` and `tempfile`: `daemon/tests/notify_dbus.rs` includes this file with `#[path]`.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the bus, the display, dunst and the monitor may take to come up.
const START_BOUND: Duration = Duration::from_secs(30);

pub struct Desktop {
    /// Dropped first (fields drop in order): the processes.
    procs: Procs,
    /// Then dunst's HOME and the monitor's log.
    _dir: tempfile::TempDir,
    addr: String,
    display: String,
    monitor_log: PathBuf,
    dunst_pid: u32,
}

/// The children, bus first, killed on drop even when `start` fails half-way. The bus goes first:
/// with it gone nothing can ask it to activate another dunst from its service file (it would for a
/// Notify call that finds no owner); then the others, newest first. SIGKILL ends a stopped
/// process too.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            let mut bus = self.0.remove(0);
            let _ = bus.kill();
            let _ = bus.wait();
        }
        while let Some(mut child) = self.0.pop() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Desktop {
    /// Starts bus, display, dunst and monitor; returns once dunst owns
    /// `org.freedesktop.Notifications` and the monitor is logging. Panics (with how to install
    /// them) when a tool is missing.
    pub fn start() -> Desktop {
        for bin in ["dbus-daemon", "dbus-monitor", "dbus-send", "Xvfb", "dunst"] {
            need(bin);
        }
        let dir = tempfile::tempdir().expect("tempdir");
        // A private session bus.
        let mut bus = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn dbus-daemon");
        let addr = first_line(bus.stdout.take().unwrap());
        let mut procs = Procs(vec![bus]);
        assert!(!addr.is_empty(), "dbus-daemon printed no address");
        // A display: Xvfb picks a free number and writes it once it accepts connections.
        let mut x = Command::new("Xvfb")
            .args(["-displayfd", "1", "-nolisten", "tcp"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn Xvfb");
        let number = first_line(x.stdout.take().unwrap());
        procs.0.push(x);
        assert!(
            number.parse::<u32>().is_ok(),
            "Xvfb printed no display number: {number:?}"
        );
        let display = format!(":{number}");
        // The notification server on it.
        let dunst = Command::new("dunst")
            .env("DISPLAY", &display)
            .env("DBUS_SESSION_BUS_ADDRESS", &addr)
            .env("HOME", dir.path())
            .env_remove("XDG_CONFIG_HOME")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn dunst");
        let dunst_pid = dunst.id();
        procs.0.push(dunst);
        let mut desktop = Desktop {
            monitor_log: dir.path().join("monitor.log"),
            _dir: dir,
            addr,
            display,
            dunst_pid,
            procs,
        };
        wait_for(
            "dunst to own org.freedesktop.Notifications",
            START_BOUND,
            || desktop.name_owned(),
        );
        let monitor = Command::new("dbus-monitor")
            .args([
                "--session",
                "interface='org.freedesktop.Notifications',member='Notify'",
            ])
            .env("DBUS_SESSION_BUS_ADDRESS", &desktop.addr)
            .stdout(std::fs::File::create(&desktop.monitor_log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn dbus-monitor");
        desktop.procs.0.push(monitor);
        // The monitor is ready once it logs a probe: a broadcast signal matching its rule, which
        // dunst (subscribed to no such signal) never sees.
        let started = Instant::now();
        for i in 0.. {
            let probe = format!("cmdgate-monitor-probe-{i}");
            let _ = Command::new("dbus-send")
                .args([
                    "--type=signal",
                    "/cmdgate/probe",
                    "org.freedesktop.Notifications.Notify",
                ])
                .arg(format!("string:{probe}"))
                .env("DBUS_SESSION_BUS_ADDRESS", &desktop.addr)
                .status();
            if desktop.wait_seen(&probe, Duration::from_millis(200)) {
                break;
            }
            assert!(
                started.elapsed() < START_BOUND,
                "dbus-monitor never logged a probe: {}",
                desktop.log()
            );
        }
        desktop
    }

    /// `DBUS_SESSION_BUS_ADDRESS` of the private bus.
    pub fn bus_address(&self) -> &str {
        &self.addr
    }

    /// `DISPLAY` of the X server dunst draws on.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// Everything dbus-monitor logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.monitor_log).unwrap_or_default()
    }

    /// Whether a Notify call carrying `text` (e.g. in its summary) crossed the bus.
    pub fn seen(&self, text: &str) -> bool {
        self.log().contains(text)
    }

    /// Waits at most `bound` for [`Desktop::seen`]; returns whether it was.
    pub fn wait_seen(&self, text: &str, bound: Duration) -> bool {
        let started = Instant::now();
        loop {
            if self.seen(text) {
                return true;
            }
            if started.elapsed() >= bound {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Hangs the server (SIGSTOP): it keeps `org.freedesktop.Notifications`, the bus still routes
    /// calls to it (and the monitor still logs them), and no call is ever answered.
    pub fn hang(&self) {
        signal("-STOP", self.dunst_pid);
    }

    /// Lets a hung server go on (SIGCONT).
    pub fn resume(&self) {
        signal("-CONT", self.dunst_pid);
    }

    fn name_owned(&self) -> bool {
        Command::new("dbus-send")
            .args([
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.NameHasOwner",
                "string:org.freedesktop.Notifications",
            ])
            .env("DBUS_SESSION_BUS_ADDRESS", &self.addr)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("boolean true"))
            .unwrap_or(false)
    }
}

fn need(bin: &str) {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {bin}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "`{bin}` is missing: .ci/install installs dbus, dbus-bin, xvfb and dunst \
         (apt-get install dbus dbus-bin xvfb dunst)"
    );
}

fn signal(sig: &str, pid: u32) {
    let ok = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid} failed");
}

/// Reads up to the first newline (the pipe stays open: the child keeps running).
fn first_line(mut out: impl Read) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while out.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    String::from_utf8_lossy(&line).trim().to_owned()
}

/// Waits (bounded) until `f` holds.
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let started = Instant::now();
    while !f() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
