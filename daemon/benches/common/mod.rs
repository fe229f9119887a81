//! What the routing benchmarks share: a real `cmdgated` of a given build started on temp sockets
//! with its own `cmdgate init --sign` store, keys and signed starter map (`Daemon::start`), the
//! routed request they time (`decide_body`: `git push origin main`, tier 2 ⇒ ask), and one
//! HTTP/1.1 request per connection, as the hook makes it (`request`).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One `POST /v1/decide` on its own connection; the reply's status code (0 if unreadable).
pub fn request(socket: &Path, body: &[u8]) -> u16 {
    let mut s = UnixStream::connect(socket).expect("connect");
    let head = format!(
        "POST /v1/decide HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    String::from_utf8_lossy(&raw[..12.min(raw.len())])
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The routed decision every routing bench times: `git push origin main` (tier 2 ⇒ ask in the
/// starter map; cached, audited, no test-run) in one of eight sessions named `{prefix}-N`.
pub fn decide_body(prefix: &str, i: usize, proj: &Path) -> String {
    format!(
        r#"{{"v":1,"event":"PreToolUse","session_id":"{prefix}-{}","tool_use_id":"{prefix}{i}","cwd":"{}","project_dir":"{}","tool_name":"Bash","tool_input":{{"command":"git push origin main"}}}}"#,
        i % 8,
        proj.display(),
        proj.display()
    )
}

/// A running daemon of one build, with its own home, config, data and project dirs.
pub struct Daemon {
    child: std::process::Child,
    /// The decide socket.
    pub socket: PathBuf,
    pub proj: PathBuf,
    /// Home, config, data, spool and project, all inside.
    pub dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// `cmdgate init --sign` with `bin_dir`'s `cmdgate`, then its `cmdgated`, waited for until
    /// the admin socket answers. `name` says which build failed.
    pub fn start(name: &str, bin_dir: &Path) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let proj = dir.path().join("proj");
        for d in ["home", "conf", "data", "proj"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        let mut init = Command::new(bin_dir.join("cmdgate"));
        init.args(["init", "--sign", "--project"]).arg(&proj);
        env_of(dir.path(), &proj, &mut init);
        assert!(
            init.output().unwrap().status.success(),
            "{name}: cmdgate init --sign failed"
        );
        let mut cmd = Command::new(bin_dir.join("cmdgated"));
        env_of(dir.path(), &proj, &mut cmd);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let daemon = Daemon {
            child: cmd.spawn().unwrap(),
            socket: dir.path().join("data/cmdgate.sock"),
            proj,
            dir,
        };
        let admin = daemon.dir.path().join("data/admin.sock");
        let start = Instant::now();
        while UnixStream::connect(&admin).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{name}: cmdgated did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        daemon
    }
}

/// The environment of a daemon's processes (the daemon, its CLI, a hook talking to it): the
/// host's XDG and mode variables removed, every location inside `dir` (`Daemon::dir`).
pub fn env_of(dir: &Path, proj: &Path, cmd: &mut Command) {
    for k in [
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "CMDGATE_MODE",
    ] {
        cmd.env_remove(k);
    }
    let p = |s: &str| dir.join(s);
    cmd.env("HOME", p("home"))
        .env("CMDGATE_HOME", p("data"))
        .env("CMDGATE_CONFIG_DIR", p("conf"))
        .env("CMDGATE_SPOOL_DIR", p("spool"))
        .env("CLAUDE_PROJECT_DIR", proj);
}
