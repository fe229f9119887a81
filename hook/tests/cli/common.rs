//! Helpers for driving the built hook binary: run it with stdin and a clean environment under a
//! bounded wait, and a fake-daemon test peer on a Unix socket with scripted behaviour.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Upper bound on one hook run: a hang fails the test instead of blocking CI.
const RUN_BOUND: Duration = Duration::from_secs(30);

/// A temp world for one hook run: HOME, runtime dir, spool dir, socket path, workspace.
pub struct World {
    pub dir: tempfile::TempDir,
    pub env: Vec<(String, String)>,
}

impl World {
    pub fn new() -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for sub in ["home", "run", "work", "spool"] {
            std::fs::create_dir_all(root.join(sub)).expect("mkdir");
        }
        // Claude Code's transcript exists and holds the user's turn by the time it runs hooks; a
        // missing one, or one without a user turn, makes a routed call wait (hook/src/transcript.rs).
        std::fs::write(root.join("home/transcript.jsonl"), "{\"type\":\"user\",\"uuid\":\"u0\",\"message\":{\"role\":\"user\",\"content\":\"go on\"}}\n").expect("transcript");
        let env = vec![
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
            ("HOME".to_string(), root.join("home").display().to_string()),
            (
                "XDG_RUNTIME_DIR".to_string(),
                root.join("run").display().to_string(),
            ),
            (
                "CMDGATE_SOCKET".to_string(),
                root.join("cmdgate.sock").display().to_string(),
            ),
            (
                "CMDGATE_SPOOL_DIR".to_string(),
                root.join("spool").display().to_string(),
            ),
            (
                "CMDGATE_CONFIG_DIR".to_string(),
                root.join("config").display().to_string(),
            ),
            (
                "CLAUDE_PROJECT_DIR".to_string(),
                root.join("work").display().to_string(),
            ),
        ];
        World { dir, env }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn work(&self) -> String {
        self.path("work").display().to_string()
    }

    pub fn socket(&self) -> PathBuf {
        self.path("cmdgate.sock")
    }

    pub fn set(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.to_string()));
    }

    /// The spool's lines, parsed.
    pub fn spool(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.path("spool/hook.jsonl")).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).expect("spool line is JSON"))
            .collect()
    }

    /// A PreToolUse input for `tool` with `input`, in the workspace.
    pub fn pre(&self, tool: &str, input: Value) -> Vec<u8> {
        self.event("PreToolUse", tool, input, json!({}))
    }

    /// Any event's input; `extra` fields are merged in.
    pub fn event(&self, event: &str, tool: &str, input: Value, extra: Value) -> Vec<u8> {
        let mut v = json!({
            "session_id": "sess-1",
            "transcript_path": self.path("home/transcript.jsonl").display().to_string(),
            "cwd": self.work(),
            "permission_mode": "default",
            "hook_event_name": event,
            "tool_name": tool,
            "tool_input": input,
            "tool_use_id": "toolu_01",
        });
        for (k, val) in extra.as_object().expect("extra is an object") {
            v[k] = val.clone();
        }
        serde_json::to_vec(&v).expect("encode")
    }

    /// Runs the hook with `stdin` and `args`.
    pub fn run(&self, stdin: &[u8], args: &[&str]) -> HookRun {
        run_hook(&self.env, stdin, args, StdinEnd::Close)
    }
}

/// What one hook process did.
#[derive(Debug)]
pub struct HookRun {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl HookRun {
    /// The JSON answer (panics with the run's output if there is none).
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("no JSON answer ({e}): {self:?}"))
    }

    /// `(permissionDecision, permissionDecisionReason)` of a PreToolUse answer, after checking the
    /// process exited 0 (any other code is a fail-open trap).
    pub fn decision(&self) -> (String, String) {
        assert_eq!(self.code, Some(0), "hook must exit 0: {self:?}");
        let v = self.json();
        let out = &v["hookSpecificOutput"];
        assert_eq!(out["hookEventName"], "PreToolUse", "{self:?}");
        (
            out["permissionDecision"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            out["permissionDecisionReason"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    }

    /// Asserts a deny and returns its reason.
    pub fn denied(&self) -> String {
        let (d, reason) = self.decision();
        assert_eq!(d, "deny", "{self:?}");
        reason
    }
}

/// What happens to the hook's stdin after the input is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdinEnd {
    /// Closed, as Claude Code does.
    Close,
    /// Held open for the whole run bound: a writer that never finishes.
    HoldOpen,
}

/// Runs the hook binary with exactly `env`, `stdin` (closed afterwards unless `end` says otherwise
/// false) and `args`, bounded by [`RUN_BOUND`].
pub fn run_hook(env: &[(String, String)], stdin: &[u8], args: &[&str], end: StdinEnd) -> HookRun {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cmdgate-hook"))
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hook");
    let mut pipe = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    let writer = thread::spawn(move || {
        // The hook may stop reading (oversize input) and exit: a broken pipe here is expected.
        let _ = pipe.write_all(&data);
        if end == StdinEnd::HoldOpen {
            thread::sleep(RUN_BOUND);
        }
    });
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let reader = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_reader = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > RUN_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hook did not exit within {RUN_BOUND:?}");
        }
        thread::sleep(Duration::from_millis(5));
    };
    if end == StdinEnd::Close {
        let _ = writer.join();
    }
    HookRun {
        code: status.code(),
        stdout: String::from_utf8_lossy(&reader.join().expect("reader")).into_owned(),
        stderr: String::from_utf8_lossy(&err_reader.join().expect("err reader")).into_owned(),
    }
}

/// How the fake daemon answers.
#[derive(Clone)]
pub enum Behaviour {
    /// Accept, read the request, never answer (the connection stays open).
    Hang,
    /// Write these bytes and close.
    Raw(Vec<u8>),
    /// A well-formed HTTP response with this status and body.
    Http(u16, String),
}

/// One request the fake daemon received.
#[derive(Debug, Clone)]
pub struct Received {
    pub head: String,
    pub body: Value,
}

/// A test peer listening where the hook looks for the daemon.
pub struct FakeDaemon {
    pub received: Arc<Mutex<Vec<Received>>>,
}

impl FakeDaemon {
    pub fn start(socket: &Path, behaviour: Behaviour) -> FakeDaemon {
        let listener = UnixListener::bind(socket).expect("bind fake daemon");
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&received);
        thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                if let Some(req) = read_request(&mut stream) {
                    log.lock().expect("log").push(req);
                }
                match &behaviour {
                    Behaviour::Hang => held.push(stream),
                    Behaviour::Raw(bytes) => {
                        let _ = stream.write_all(bytes);
                    }
                    Behaviour::Http(status, body) => {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                }
            }
        });
        FakeDaemon { received }
    }

    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().expect("log").clone()
    }
}

fn read_request(stream: &mut UnixStream) -> Option<Received> {
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_string();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().ok())
                })
                .flatten()?;
            if buf.len() >= end + 4 + len {
                let body = serde_json::from_slice(&buf[end + 4..end + 4 + len]).ok()?;
                return Some(Received { head, body });
            }
        }
    }
}

/// A decide response body.
pub fn decision(verdict: &str, reason: &str) -> String {
    json!({"v": 1, "decision": verdict, "reason": reason, "source": "tier_rule", "rule": "tier 2: git push *",
           "tiermap_revision": 7, "audit_id": 42})
    .to_string()
}
