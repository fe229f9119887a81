//! A real `cmdgated` on temp sockets with its own home, config and store, driven through the real
//! `cmdgate-hook` binary and the real `cmdgate` CLI. Used by most end-to-end tests and by
//! [`crate::claude::World`].

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::bins::cargo_bin;
use crate::proc::{run_bounded, Finished};
use serde_json::{json, Value};

/// How long the daemon may take to come up before the test fails with its log.
const START_BOUND: Duration = Duration::from_secs(60);

pub struct Gate {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    pub conf: PathBuf,
    pub data: PathBuf,
    pub spool: PathBuf,
    pub proj: PathBuf,
    pub socket: PathBuf,
    pub admin: PathBuf,
    pub cmdgated: PathBuf,
    pub cmdgate: PathBuf,
    pub hook: PathBuf,
    /// `cmdgate-run`, built beside the hook (the hook names it in its rewrites).
    pub run_client: PathBuf,
    /// Extra environment for `cmdgated` alone (set before `start`), e.g. a private session bus.
    pub daemon_env: Vec<(String, String)>,
    daemon: Option<Child>,
    starts: u32,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate::new()
    }
}

impl Gate {
    /// Temp dirs, a git project with one tracked file, the binaries built.
    pub fn new() -> Gate {
        Gate::new_in(&std::env::temp_dir())
    }

    /// [`Gate::new`] under `parent` (`/var/tmp` when a `write=` path in the home must be kept:
    /// one under /tmp is the mirror's scratch, never committed).
    pub fn new_in(parent: &std::path::Path) -> Gate {
        let dir = tempfile::tempdir_in(parent).expect("tempdir");
        // The transcript the events name exists and holds the user's turn, as Claude Code's
        // does by the time it runs hooks (a missing one, or one read whole without a user turn,
        // makes a routed call wait for it: hook/src/transcript.rs).
        std::fs::write(dir.path().join("t.jsonl"), "{\"type\":\"user\",\"uuid\":\"u0\",\"message\":{\"role\":\"user\",\"content\":\"go on\"}}\n").expect("transcript");
        let p = |s: &str| dir.path().join(s);
        let (home, conf, data, spool, proj) =
            (p("home"), p("conf"), p("data"), p("spool"), p("proj"));
        for d in [&home, &conf, &data, &spool, &proj] {
            std::fs::create_dir_all(d).unwrap();
        }
        let git = |args: &[&str]| {
            let ok = Command::new("git")
                .args(args)
                .current_dir(&proj)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(ok.success(), "git {args:?}");
        };
        git(&["init", "-q", "."]);
        std::fs::write(proj.join("tracked.txt"), "precious\n").unwrap();
        git(&["add", "tracked.txt"]);
        git(&[
            "-c",
            "user.email=t@t",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "init",
        ]);
        Gate {
            socket: data.join("cmdgate.sock"),
            admin: data.join("admin.sock"),
            cmdgated: cargo_bin("cmdgate-daemon", "cmdgated"),
            cmdgate: cargo_bin("cmdgate-daemon", "cmdgate"),
            hook: cargo_bin("cmdgate-hook", "cmdgate-hook"),
            run_client: cargo_bin("cmdgate-hook", "cmdgate-run"),
            dir,
            home,
            conf,
            data,
            spool,
            proj,
            daemon_env: Vec::new(),
            daemon: None,
            starts: 0,
        }
    }

    /// The environment every cmdgate process of this gate gets.
    pub fn env(&self, cmd: &mut Command) {
        for k in [
            "XDG_RUNTIME_DIR",
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
            "XDG_STATE_HOME",
            "CMDGATE_MODE",
            "CMDGATE_ESCAPE_HATCH",
        ] {
            cmd.env_remove(k);
        }
        cmd.env("HOME", &self.home)
            .env("CMDGATE_HOME", &self.data)
            .env("CMDGATE_CONFIG_DIR", &self.conf)
            .env("CMDGATE_SOCKET", &self.socket)
            .env("CMDGATE_ADMIN_SOCKET", &self.admin)
            .env("CMDGATE_SPOOL_DIR", &self.spool)
            .env("CLAUDE_PROJECT_DIR", &self.proj);
    }

    /// Runs the `cmdgate` CLI.
    pub fn cli(&self, args: &[&str]) -> Finished {
        let mut cmd = Command::new(&self.cmdgate);
        cmd.args(args).current_dir(&self.proj);
        self.env(&mut cmd);
        run_bounded(&mut cmd, b"", Duration::from_secs(120))
    }

    /// The CLI's JSON output; fails the test on a non-zero exit.
    pub fn cli_json(&self, args: &[&str]) -> Value {
        let done = self.cli(args);
        assert!(
            done.status.success(),
            "cmdgate {args:?} failed: {}\n{}",
            done.stdout_text(),
            done.stderr_text()
        );
        serde_json::from_str(&done.stdout_text())
            .unwrap_or_else(|e| panic!("cmdgate {args:?}: {e}: {}", done.stdout_text()))
    }

    /// A second git project beside the gate's, with its own signed starter map.
    pub fn other_project(&self) -> PathBuf {
        let b = self.dir.path().join("proj-b");
        std::fs::create_dir_all(&b).unwrap();
        let ok = Command::new("git")
            .args(["init", "-q", "."])
            .current_dir(&b)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success());
        let done = self.cli(&[
            "init",
            "--sign",
            "--force",
            "--project",
            b.to_str().unwrap(),
        ]);
        assert!(done.status.success(), "init B: {}", done.stderr_text());
        b
    }

    /// Writes the starter map and signs it with the development key.
    pub fn init_signed(&self) {
        let done = self.cli(&[
            "init",
            "--sign",
            "--force",
            "--project",
            self.proj.to_str().unwrap(),
        ]);
        assert!(done.status.success(), "init --sign: {}", done.stderr_text());
    }

    /// Re-signs the project's map (after an edit: the revision goes up).
    pub fn resign(&self) {
        let map = self.proj.join("CLAUDE_CMDS.md");
        let done = self.cli(&["tiermap", "sign", "--dev", map.to_str().unwrap()]);
        assert!(
            done.status.success(),
            "tiermap sign: {}",
            done.stderr_text()
        );
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(format!("daemon-{}.log", self.starts))
    }

    /// Starts `cmdgated` and waits until it answers on both sockets.
    pub fn start(&mut self) {
        self.spawn_with(&[]);
        self.wait_up();
    }

    /// Spawns `cmdgated` as the last argument of `wrapper` (empty: on its own), e.g. under
    /// `systemd-socket-activate`, without waiting for it to answer. The log is `log_path()`.
    pub fn spawn_with(&mut self, wrapper: &[std::ffi::OsString]) {
        assert!(self.daemon.is_none(), "already running");
        self.starts += 1;
        let log = std::fs::File::create(self.log_path()).unwrap();
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(&self.cmdgated);
                cmd
            }
            None => Command::new(&self.cmdgated),
        };
        self.env(&mut cmd);
        cmd.envs(self.daemon_env.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        self.daemon = Some(cmd.spawn().expect("spawn cmdgated"));
    }

    /// The pid of the process `start`/`spawn_with` spawned (the wrapper's, until it execs).
    pub fn daemon_pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(Child::id)
    }

    /// Waits until the spawned daemon answers on the admin socket; fails with its log if it exits.
    pub fn wait_up(&mut self) {
        let started = Instant::now();
        loop {
            // Both sockets are bound before either is served, and the decide socket may refuse
            // this test's uid on purpose: the admin socket answering is the signal.
            let up = request(&self.admin, "GET", "/admin/status", b"").is_ok_and(|(s, _)| s == 200);
            if up {
                return;
            }
            if let Some(status) = self.daemon.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "cmdgated exited with {status}: {}",
                    std::fs::read_to_string(self.log_path()).unwrap_or_default()
                );
            }
            assert!(
                started.elapsed() < START_BOUND,
                "cmdgated did not come up: {}",
                std::fs::read_to_string(self.log_path()).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM and wait: the graceful path.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let status = child.wait().unwrap();
            assert!(
                status.success(),
                "cmdgated exited {status} on SIGTERM: {}",
                std::fs::read_to_string(self.log_path()).unwrap_or_default()
            );
        }
    }

    /// SIGKILL: the crash path.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// A PreToolUse for `tool` through the real hook; returns (decision, reason).
    pub fn pre_tool(&self, tool_use_id: &str, tool: &str, input: Value) -> (String, String) {
        hook_answer(&self.hook_run(&self.pre_event(tool_use_id, tool, input)))
    }

    /// A PreToolUse for a Bash command run in another `project` (its cwd and `CLAUDE_PROJECT_DIR`).
    pub fn pre_in(&self, project: &Path, tool_use_id: &str, command: &str) -> (String, String) {
        let mut event = self.pre_event(tool_use_id, "Bash", json!({"command": command}));
        event["cwd"] = json!(project);
        let mut cmd = self.hook_command();
        cmd.current_dir(project).env("CLAUDE_PROJECT_DIR", project);
        hook_answer(&run_bounded(
            &mut cmd,
            event.to_string().as_bytes(),
            Duration::from_secs(120),
        ))
    }

    /// A PreToolUse for a Bash command on its own thread, with `env` added to the hook's
    /// environment: the hook blocks while the daemon holds the request for the operator.
    pub fn spawn_pre(
        &self,
        tool_use_id: &str,
        command: &str,
        env: &[(&str, &str)],
    ) -> std::thread::JoinHandle<(String, String)> {
        let mut cmd = self.hook_command();
        for (k, v) in env {
            cmd.env(k, v);
        }
        let event = self.pre_event(tool_use_id, "Bash", json!({"command": command}));
        std::thread::spawn(move || {
            hook_answer(&run_bounded(
                &mut cmd,
                event.to_string().as_bytes(),
                Duration::from_secs(120),
            ))
        })
    }

    /// A PreToolUse for a Bash command through the real hook: its whole answer (for a mirrored
    /// run, `hookSpecificOutput.updatedInput.command` is `cmdgate-run TICKET`).
    pub fn pre_answer(&self, tool_use_id: &str, command: &str) -> Value {
        let done = self.hook_run(&self.pre_event(
            tool_use_id,
            "Bash",
            json!({"command": command, "description": "test"}),
        ));
        assert!(done.status.success(), "hook: {}", done.stderr_text());
        serde_json::from_str(&done.stdout_text())
            .unwrap_or_else(|e| panic!("hook output is not JSON ({e}): {:?}", done.stdout_text()))
    }

    /// The rewritten command of a mirrored run (fails the test when the hook did not rewrite).
    pub fn pre_rewrite(&self, tool_use_id: &str, command: &str) -> String {
        let out = self.pre_answer(tool_use_id, command);
        let h = &out["hookSpecificOutput"];
        assert_eq!(h["permissionDecision"], "allow", "{out}");
        h["updatedInput"]["command"]
            .as_str()
            .unwrap_or_else(|| panic!("no rewrite: {out}"))
            .to_owned()
    }

    /// Runs a rewritten command the way Claude Code's Bash tool does (`bash -c` in the project,
    /// the agent's environment), with stdout and stderr piped.
    pub fn spawn_shell(&self, command: &str) -> Child {
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(command)
            .current_dir(&self.proj)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        self.env(&mut cmd);
        cmd.spawn().expect("bash")
    }

    /// [`Gate::spawn_shell`] to the end, bounded.
    pub fn shell(&self, command: &str) -> Finished {
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(command).current_dir(&self.proj);
        self.env(&mut cmd);
        run_bounded(&mut cmd, b"", Duration::from_secs(120))
    }

    /// The PreToolUse event `pre_tool` sends (session `sess-1`), for driving the hook yourself.
    pub fn pre_event(&self, tool_use_id: &str, tool: &str, input: Value) -> Value {
        json!({
            "session_id": "sess-1",
            "transcript_path": self.dir.path().join("t.jsonl"),
            "cwd": self.proj,
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": tool,
            "tool_input": input,
            "tool_use_id": tool_use_id,
        })
    }

    pub fn pre(&self, tool_use_id: &str, command: &str) -> (String, String) {
        self.pre_tool(tool_use_id, "Bash", json!({"command": command}))
    }

    /// A PostToolUse (success) or PostToolUseFailure through the hook.
    pub fn post(&self, tool_use_id: &str, command: &str, success: bool) {
        let mut event = json!({
            "session_id": "sess-1",
            "transcript_path": self.dir.path().join("t.jsonl"),
            "cwd": self.proj,
            "permission_mode": "default",
            "hook_event_name": if success { "PostToolUse" } else { "PostToolUseFailure" },
            "tool_name": "Bash",
            "tool_input": {"command": command},
            "tool_use_id": tool_use_id,
        });
        if success {
            event["tool_response"] = json!({"stdout": "", "stderr": "", "interrupted": false});
        } else {
            event["error"] = json!("Exit code 1");
        }
        let done = self.hook_run(&event);
        assert!(
            done.status.success(),
            "the hook exited {:?}: {}",
            done.status,
            done.stderr_text()
        );
    }

    pub fn hook_command(&self) -> Command {
        let mut cmd = Command::new(&self.hook);
        cmd.current_dir(&self.proj);
        self.env(&mut cmd);
        cmd
    }

    fn hook_run(&self, event: &Value) -> Finished {
        run_bounded(
            &mut self.hook_command(),
            event.to_string().as_bytes(),
            Duration::from_secs(120),
        )
    }

    /// Audit rows (newest `limit`) through the CLI.
    pub fn audit(&self, kind: &str) -> Vec<Value> {
        let done = self.cli(&[
            "audit", "query", "--kind", kind, "--limit", "10000", "--json",
        ]);
        assert!(done.status.success(), "audit query: {}", done.stderr_text());
        done.stdout_text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits (bounded: 120 s, then the test fails with the daemon's log) until an audit row of
    /// `kind` satisfies `wanted`, and returns it: for what the daemon records after the call that
    /// caused it has returned (a run killed when its client went away, a recovery at start).
    pub fn wait_audit(&self, kind: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            if let Some(row) = self.audit(kind).into_iter().find(|r| wanted(r)) {
                return row;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "no matching {kind} row: {:?}\n{}",
                self.audit(kind),
                std::fs::read_to_string(self.log_path()).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (bounded: 120 s) until a mirrored run has created `name` in its overlay upper dir
    /// (`<state dir>/mirror/runs/<id>/upper/<name>`, on the host, root-only): the event that the
    /// command is running in the mirror, which nothing in the workspace shows before a commit.
    pub fn wait_in_mirror(&self, name: &str) -> PathBuf {
        let started = Instant::now();
        loop {
            if let Some(found) = find_upper(&self.data, name, 0) {
                return found;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "no mirrored run created {name}: {}",
                std::fs::read_to_string(self.log_path()).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The decision row for a tool_use_id, if any.
    pub fn decision_row(&self, tool_use_id: &str) -> Option<Value> {
        self.audit("decision")
            .into_iter()
            .find(|r| r["tool_use_id"] == tool_use_id)
    }

    /// `cmdgate audit verify --json`.
    pub fn verify(&self) -> Value {
        self.cli_json(&["audit", "verify", "--json"])
    }

    /// Makes the daemon ingest the hook's spool now.
    pub fn ingest(&self) -> Value {
        let (status, body) =
            request(&self.admin, "POST", "/admin/spool/ingest", b"").expect("ingest");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// `<dir>/**/mirror/runs/<id>/upper/<name>`, searched a few levels deep.
fn find_upper(dir: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    if dir.ends_with("mirror/runs") {
        for run in std::fs::read_dir(dir).ok()?.flatten() {
            let candidate = run.path().join("upper").join(name);
            if candidate.symlink_metadata().is_ok() {
                return Some(candidate);
            }
        }
        return None;
    }
    if depth > 4 {
        return None;
    }
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .find_map(|e| find_upper(&e.path(), name, depth + 1))
}

/// The (decision, reason) a PreToolUse run of the hook printed; fails the test on anything else.
pub fn hook_answer(done: &Finished) -> (String, String) {
    assert!(
        done.status.success(),
        "the hook exited {:?}: {}",
        done.status,
        done.stderr_text()
    );
    let out: Value = serde_json::from_str(&done.stdout_text())
        .unwrap_or_else(|e| panic!("hook output is not JSON ({e}): {:?}", done.stdout_text()));
    let h = &out["hookSpecificOutput"];
    let text = |k: &str| h[k].as_str().unwrap_or_default().to_owned();
    (text("permissionDecision"), text("permissionDecisionReason"))
}

/// One HTTP/1.1 request over a Unix socket: (status, body).
pub fn request(
    socket: &Path,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = match raw.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => raw[i + 4..].to_vec(),
        None => Vec::new(),
    };
    Ok((status, body))
}

/// The `audit #N` a hook answer carries (present when the daemon committed the decision).
pub fn audit_id(reason: &str) -> Option<i64> {
    let at = reason.find("audit #")?;
    reason[at + 7..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()
}
