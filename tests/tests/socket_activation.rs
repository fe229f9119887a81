//! Socket activation for real: `cmdgated` started by Debian's `systemd-socket-activate`, systemd's
//! own implementation of the protocol (it binds the sockets, waits for the first connection, then
//! execs the daemon in its own pid with `LISTEN_FDS`, `LISTEN_PID` and `LISTEN_FDNAMES`, as
//! systemd does for `cmdgated.socket` / `cmdgated-admin.socket`). The real hook and the real CLI
//! are the clients. Nothing here is skipped: without `systemd-socket-activate` every test fails.

use std::ffi::OsString;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cmdgate_tests::gate::{audit_id, Gate};
use cmdgate_tests::proc::run_bounded;

const ACTIVATE: &str = "/usr/bin/systemd-socket-activate";

/// Bound on every wait here: only turns a hang into a failure.
const BOUND: Duration = Duration::from_secs(60);

/// The environment `systemd-socket-activate` must pass on: it gives its child only TERM, PATH,
/// USER and HOME of its own environment, plus what `-E` names (as a unit's `Environment=` would).
const DAEMON_ENV: [&str; 6] = [
    "CMDGATE_HOME",
    "CMDGATE_CONFIG_DIR",
    "CMDGATE_SOCKET",
    "CMDGATE_ADMIN_SOCKET",
    "CMDGATE_SPOOL_DIR",
    "CLAUDE_PROJECT_DIR",
];

/// `systemd-socket-activate -l PATH [--fdname=NAME] ... -E VAR ... [extra ...]`: the wrapper that
/// `Gate::spawn_with` puts in front of `cmdgated`. `extra` ends the wrapper (more options, or a
/// program such as `env -u LISTEN_PID` that then execs the daemon in the same pid).
fn activate(sockets: &[(&Path, Option<&str>)], extra: &[&str]) -> Vec<OsString> {
    assert!(
        Path::new(ACTIVATE).is_file(),
        "{ACTIVATE} is missing: it comes with Debian's `systemd` package, which `.ci/install` \
         installs (apt-get install systemd)"
    );
    let mut args: Vec<OsString> = vec![ACTIVATE.into()];
    for (path, name) in sockets {
        args.push("-l".into());
        args.push(path.into());
        if let Some(name) = name {
            args.push(format!("--fdname={name}").into());
        }
    }
    for var in DAEMON_ENV {
        args.push("-E".into());
        args.push(var.into());
    }
    args.extend(extra.iter().map(OsString::from));
    args
}

fn log(g: &Gate) -> String {
    std::fs::read_to_string(g.log_path()).unwrap_or_default()
}

/// Waits (bounded) until `cond` holds; fails with `what` and the daemon's log otherwise.
fn wait_for(g: &Gate, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < BOUND,
            "timed out waiting for {what}; log:\n{}",
            log(g)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

fn inode(path: &Path) -> u64 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .ino()
}

/// Waits until `systemd-socket-activate` has bound every socket and sits in `epoll_wait` for the
/// first connection (not yet exec'd: its pid still runs `systemd-socket-activate`).
fn wait_listening(g: &Gate, sockets: &[&Path]) {
    wait_for(g, "the sockets systemd-socket-activate binds", || {
        sockets.iter().all(|s| is_socket(s))
    });
    let pid = g.daemon_pid().expect("spawned");
    wait_for(g, "systemd-socket-activate waiting in epoll_wait", || {
        proc_text(pid, "wchan").contains("epoll_wait")
    });
    assert_eq!(
        proc_text(pid, "comm").trim(),
        "systemd-socket-",
        "not exec'd before the first connection"
    );
}

fn proc_text(pid: u32, file: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default()
}

/// The binary a pid runs now.
fn exe(pid: u32) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .unwrap_or_default()
        .canonicalize()
        .unwrap_or_default()
}

/// A routed call (a write, so not the hook's fast path) answered by the daemon: its audit id.
fn routed(g: &Gate, id: &str) -> i64 {
    let (d, reason) = g.pre(id, "touch x");
    assert_eq!(d, "allow", "{reason}\nlog:\n{}", log(g));
    audit_id(&reason).unwrap_or_else(|| panic!("no daemon decision (no audit id): {reason}"))
}

#[test]
fn both_sockets_passed_by_name_serve_the_hook_and_the_cli() {
    let mut g = Gate::new();
    g.init_signed();
    // The sockets at the paths the hook and the CLI look for, as the socket units put them.
    let (decide, admin) = (g.socket.clone(), g.admin.clone());
    g.spawn_with(&activate(
        &[(&decide, Some("decide")), (&admin, Some("admin"))],
        &[],
    ));
    wait_listening(&g, &[&decide, &admin]);
    let inodes = (inode(&decide), inode(&admin));
    // The hook's connection starts the daemon; the daemon answers it on the passed socket.
    let first = routed(&g, "first");
    g.wait_up();
    let status = g.cli_json(&["status", "--json"]);
    assert!(status["version"].is_string(), "{status}");
    assert!(
        routed(&g, "second") > first,
        "decisions keep coming through the passed socket"
    );
    // The daemon took both sockets and bound nothing itself: the files are the ones
    // systemd-socket-activate created, and the daemon says where it serves.
    assert_eq!((inode(&decide), inode(&admin)), inodes, "socket replaced");
    let text = log(&g);
    assert!(
        text.contains("serving decisions on the socket systemd passed (decide)")
            && text.contains("the operator on the socket systemd passed (admin)"),
        "{text}"
    );
    // SIGTERM: the graceful path (exit 0), and the daemon leaves systemd's socket files alone.
    g.stop();
    assert!(is_socket(&decide) && is_socket(&admin));
    assert_eq!((inode(&decide), inode(&admin)), inodes);
}

#[test]
fn sigterm_under_socket_activation_exits_cleanly_with_the_audit_committed() {
    let mut g = Gate::new();
    g.init_signed();
    let (decide, admin) = (g.socket.clone(), g.admin.clone());
    let sockets = [
        (decide.as_path(), Some("decide")),
        (admin.as_path(), Some("admin")),
    ];
    g.spawn_with(&activate(&sockets, &[]));
    wait_listening(&g, &[&decide, &admin]);
    let id = routed(&g, "before-stop");
    g.wait_up();
    // `Gate::stop` sends SIGTERM to the pid systemd-socket-activate exec'd the daemon in and
    // fails the test unless it exits 0, as `KillSignal=SIGTERM` in the unit expects.
    g.stop();
    // Activated again, the decision is in the audit and the chain verifies: the shutdown
    // committed it. (systemd keeps its sockets across a restart; systemd-socket-activate is gone
    // once it exec'd, so its socket files are stale and it would not bind over them.)
    for s in [&decide, &admin] {
        std::fs::remove_file(s).unwrap();
    }
    g.spawn_with(&activate(&sockets, &[]));
    wait_listening(&g, &[&decide, &admin]);
    g.wait_up();
    let row = g
        .decision_row("before-stop")
        .expect("the decision made before SIGTERM is in the audit");
    assert_eq!(row["id"].as_i64(), Some(id));
    assert!(g.verify()["broken"].is_null());
    g.stop();
}

#[test]
fn only_the_decide_socket_passed_the_daemon_binds_its_own_admin_socket() {
    let mut g = Gate::new();
    g.init_signed();
    let (decide, admin) = (g.socket.clone(), g.admin.clone());
    g.spawn_with(&activate(&[(&decide, Some("decide"))], &[]));
    wait_listening(&g, &[&decide]);
    assert!(!admin.exists(), "nothing binds the admin socket yet");
    let before = inode(&decide);
    // Only a connection to the decide socket can start the daemon here.
    routed(&g, "first");
    g.wait_up();
    assert!(is_socket(&admin));
    assert_eq!(
        std::fs::metadata(&admin).unwrap().mode() & 0o777,
        0o600,
        "the admin socket the daemon binds is the operator's alone"
    );
    let status = g.cli_json(&["status", "--json"]);
    assert!(status["version"].is_string(), "{status}");
    routed(&g, "second");
    assert_eq!(
        inode(&decide),
        before,
        "the passed decide socket was replaced"
    );
    let text = log(&g);
    assert!(
        text.contains("serving decisions on the socket systemd passed (decide)")
            && text.contains(&format!("the operator on {}", admin.display())),
        "{text}"
    );
    g.stop();
    // The daemon removes the socket it bound, not the one it was given.
    assert!(!admin.exists(), "the daemon's own admin socket is removed");
    assert!(is_socket(&decide));
}

#[test]
fn the_daemon_starts_on_the_first_connection() {
    let mut g = Gate::new();
    g.init_signed();
    let (decide, admin) = (g.socket.clone(), g.admin.clone());
    g.spawn_with(&activate(
        &[(&decide, Some("decide")), (&admin, Some("admin"))],
        &[],
    ));
    // systemd-socket-activate defers the exec (as systemd defers starting the service): the
    // sockets exist and accept, but no daemon runs and no store exists until someone connects.
    wait_listening(&g, &[&decide, &admin]);
    let pid = g.daemon_pid().unwrap();
    assert_ne!(exe(pid), g.cmdgated.canonicalize().unwrap());
    assert!(
        !g.data.join("cmdgate.db").exists() && !log(&g).contains("Execing"),
        "started before any connection:\n{}",
        log(&g)
    );
    // The first hook call starts it and gets its answer.
    routed(&g, "first");
    assert_eq!(
        exe(pid),
        g.cmdgated.canonicalize().unwrap(),
        "the daemon runs in the pid systemd-socket-activate had (exec, not fork)"
    );
    assert!(
        log(&g).contains("Communication attempt on fd"),
        "{}",
        log(&g)
    );
    g.wait_up();
    g.stop();
}

/// `LISTEN_FDS` meant for another process (`LISTEN_PID` not ours, empty, or absent) is ignored,
/// as `sd_listen_fds(3)` specifies: the daemon binds its own sockets at the configured paths.
#[test]
fn listen_fds_for_another_pid_are_ignored() {
    let variants: [(&str, &[&str]); 3] = [
        ("LISTEN_PID of another process", &["-E", "LISTEN_PID=1"]),
        ("empty LISTEN_PID", &["-E", "LISTEN_PID="]),
        // `env` execs the daemon in the same pid, without LISTEN_PID.
        ("no LISTEN_PID", &["env", "-u", "LISTEN_PID"]),
    ];
    for (case, extra) in variants {
        eprintln!("case: {case}");
        let mut g = Gate::new();
        g.init_signed();
        let passed_decide = g.dir.path().join("passed-decide.sock");
        let passed_admin = g.dir.path().join("passed-admin.sock");
        g.spawn_with(&activate(
            &[
                (&passed_decide, Some("decide")),
                (&passed_admin, Some("admin")),
            ],
            extra,
        ));
        wait_listening(&g, &[&passed_decide, &passed_admin]);
        // Start it (this connection stays in a backlog nobody accepts from).
        let _trigger = UnixStream::connect(&passed_decide).unwrap();
        g.wait_up();
        assert!(is_socket(&g.socket) && is_socket(&g.admin), "{case}");
        routed(&g, "routed");
        let text = log(&g);
        assert!(
            text.contains(&format!("serving decisions on {}", g.socket.display()))
                && !text.contains("systemd passed"),
            "{case}: {text}"
        );
        g.stop();
    }
}

/// Two sockets under one name (`--fdname=decide` given once names every socket `decide`, as
/// two units with the same `FileDescriptorName=` would): the daemon refuses to start rather than
/// serve one and silently drop the other.
#[test]
fn two_sockets_with_the_same_name_are_refused() {
    let g = Gate::new();
    let (a, b) = (g.dir.path().join("a.sock"), g.dir.path().join("b.sock"));
    let wrapper = activate(&[(&a, Some("decide")), (&b, None)], &[]);
    // What systemd-socket-activate passes with one name for two sockets.
    let (c, d) = (g.dir.path().join("c.sock"), g.dir.path().join("d.sock"));
    let mut probe = Command::new(&wrapper[0]);
    probe.args(activate(&[(&c, Some("decide")), (&d, None)], &[])[1..].iter());
    probe.arg("env");
    let run = std::thread::spawn(move || run_bounded(&mut probe, b"", BOUND));
    wait_for(&g, "the probe's sockets", || is_socket(&c) && is_socket(&d));
    let _trigger = UnixStream::connect(&c).unwrap();
    let env = run.join().unwrap().stdout_text();
    assert!(env.contains("LISTEN_FDNAMES=decide:decide"), "{env}");

    let mut cmd = Command::new(&wrapper[0]);
    cmd.args(&wrapper[1..]).arg(&g.cmdgated);
    g.env(&mut cmd);
    let run = std::thread::spawn(move || run_bounded(&mut cmd, b"", BOUND));
    wait_for(&g, "the sockets", || is_socket(&a) && is_socket(&b));
    let _trigger = UnixStream::connect(&a).unwrap();
    let done = run.join().unwrap();
    let err = done.stderr_text();
    assert!(!done.status.success(), "started anyway: {err}");
    assert!(err.contains("named decide:decide"), "{err}");
}
