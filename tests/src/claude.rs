//! Running the real Claude Code CLI (`claude -p`) in a throwaway workspace with a throwaway HOME,
//! pointed at a [`FakeApi`](crate::fake_api::FakeApi), with hooks registered in the workspace's
//! `.claude/settings.json`.
//!
//! [`World`] is the whole end-to-end setup most Claude Code tests want: a real `cmdgated`
//! ([`Gate`]) whose project is the session's workspace (a git repository with a tracked
//! `tracked.txt` and a signed, committed starter map), the hook installed by `cmdgate hook
//! install`. A test then states its script and its checks:
//!
//! ```no_run
//! use cmdgate_tests::claude::World;
//! use cmdgate_tests::fake_api::Step;
//!
//! let w = World::new();
//! let played = w.play(vec![Step::bash("rm tracked.txt")]);
//! assert!(played.result(0).content.contains("rolled back"));
//! assert_eq!(w.read("tracked.txt"), "precious\n");
//! assert_eq!(w.run_row(0)["decision"], "rolled_back");
//! ```
//!
//! The CLI is installed by `.ci/install` into `tests/node/` (pinned version, git-ignored);
//! `CMDGATE_CLAUDE_BIN` overrides the path.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::bins::repo_root;
use crate::fake_api::{tool_use_id, FakeApi, Step, ToolResult};
use crate::gate::Gate;
use crate::proc::{run_bounded, Finished};

/// The version `.ci/install` pins; the facts in `fake_api` were learned with it.
pub const CLAUDE_CODE_VERSION: &str = "2.1.332";

/// Upper bound on one `claude -p` run.
pub const RUN_BOUND: Duration = Duration::from_secs(180);

/// The CLI's path. Panics with the fix when it is not installed: this test needs the real CLI.
pub fn claude_bin() -> PathBuf {
    let path = std::env::var_os("CMDGATE_CLAUDE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("tests/node/node_modules/.bin/claude"));
    assert!(
        path.exists(),
        "the Claude Code CLI is not installed at {}: run .ci/install (it installs \
         @anthropic-ai/claude-code@{CLAUDE_CODE_VERSION} into tests/node)",
        path.display()
    );
    path
}

/// One Claude Code session's world: a workspace and a HOME, both temporary.
pub struct Session {
    pub root: tempfile::TempDir,
    /// Extra environment for the CLI (and so for its hooks).
    pub env: Vec<(String, String)>,
}

/// What `claude -p --output-format json` reported.
#[derive(Debug)]
pub struct ClaudeRun {
    pub done: Finished,
    /// The final JSON result (`type: "result"`), `Null` if the CLI printed none.
    pub result: Value,
}

/// What [`Session::run_prompting`] saw.
#[derive(Debug)]
pub struct PromptedRun {
    /// Every `can_use_tool` request: Claude Code's permission prompt (`tool_name`, `input`,
    /// `decision_reason`, `decision_reason_type`: `hook` when a hook's `ask` raised it, …).
    pub prompts: Vec<Value>,
    /// The final `type: "result"` message.
    pub result: Value,
}

impl ClaudeRun {
    /// How many calls Claude Code reported as denied (`permission_denials`).
    pub fn denials(&self) -> usize {
        self.result["permission_denials"]
            .as_array()
            .map_or(0, Vec::len)
    }
}

impl Default for Session {
    fn default() -> Session {
        Session::new()
    }
}

impl Session {
    pub fn new() -> Session {
        let root = tempfile::tempdir().expect("tempdir");
        for d in ["workspace/.claude", "home", "run"] {
            std::fs::create_dir_all(root.path().join(d)).expect("mkdir");
        }
        Session {
            root,
            env: Vec::new(),
        }
    }

    pub fn workspace(&self) -> PathBuf {
        self.root.path().join("workspace")
    }

    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// A path in the scratch area beside workspace and home (sockets, spools).
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.to_string()));
    }

    /// Registers `command` for PreToolUse, PostToolUse and PostToolUseFailure on every tool.
    pub fn install_hooks(&self, command: &Path, args: &[&str]) {
        let mut cmd = shell_quote(&command.display().to_string());
        for a in args {
            cmd.push(' ');
            cmd.push_str(&shell_quote(a));
        }
        let entry = json!([{"matcher": "*", "hooks": [{"type": "command", "command": cmd, "timeout": 60}]}]);
        let settings = json!({"hooks": {
            "PreToolUse": entry, "PostToolUse": entry, "PostToolUseFailure": entry,
        }});
        std::fs::write(
            self.workspace().join(".claude/settings.json"),
            serde_json::to_string_pretty(&settings).expect("encode"),
        )
        .expect("write settings");
    }

    /// Runs `claude -p <prompt> --output-format json` in the workspace against `api`.
    pub fn run(&self, api: &FakeApi, prompt: &str) -> ClaudeRun {
        self.run_with(api, prompt, &[])
    }

    /// [`Session::run`] with extra CLI arguments (`--permission-mode bypassPermissions`, ...).
    pub fn run_with(&self, api: &FakeApi, prompt: &str, args: &[&str]) -> ClaudeRun {
        let mut cmd = self.command(api);
        cmd.args(["-p", prompt, "--output-format", "json"])
            .args(args);
        let done = run_bounded(&mut cmd, b"", RUN_BOUND);
        let result = done
            .stdout_text()
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<Value>(l).ok())
            .unwrap_or(Value::Null);
        ClaudeRun { done, result }
    }

    /// Runs `claude -p` with stream-json input and output and `--permission-prompt-tool stdio`:
    /// Claude Code's permission prompt comes to the test as `can_use_tool` control requests (as to
    /// an Agent SDK host, the programmatic form of the prompt a person answers), each answered
    /// allow when `answer(request)` says so, else deny. Fails the test unless the CLI reports a
    /// result and exits 0 within [`RUN_BOUND`].
    pub fn run_prompting(
        &self,
        api: &FakeApi,
        prompt: &str,
        mut answer: impl FnMut(&Value) -> bool,
    ) -> PromptedRun {
        use std::io::{BufRead, BufReader, Write};
        use std::process::Stdio;
        let mut cmd = self.command(api);
        cmd.args([
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-prompt-tool",
            "stdio",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("spawn claude");
        let mut stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let user = json!({"type": "user", "message": {"role": "user", "content": prompt}});
        writeln!(stdin, "{user}").expect("write the prompt");
        let started = std::time::Instant::now();
        let mut prompts = Vec::new();
        let mut seen = Vec::new();
        let result = loop {
            let left = RUN_BOUND.saturating_sub(started.elapsed());
            let line = match rx.recv_timeout(left) {
                Ok(line) => line,
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "claude gave no result ({e:?}); it printed:\n{}",
                        seen.join("\n")
                    );
                }
            };
            seen.push(line.clone());
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if msg["type"] == "control_request" && msg["request"]["subtype"] == "can_use_tool" {
                let request = &msg["request"];
                let response = if answer(request) {
                    json!({"behavior": "allow", "updatedInput": request["input"]})
                } else {
                    json!({"behavior": "deny", "message": "the person at the prompt said no"})
                };
                let reply = json!({"type": "control_response", "response": {
                    "subtype": "success", "request_id": msg["request_id"], "response": response}});
                writeln!(stdin, "{reply}").expect("answer the prompt");
                prompts.push(request.clone());
            } else if msg["type"] == "result" {
                break msg;
            }
        };
        drop(stdin);
        let status = child.wait().expect("wait for claude");
        assert!(status.success(), "claude exited {status:?}");
        PromptedRun { prompts, result }
    }

    /// The CLI in the workspace, with the session's environment, pointed at `api`.
    fn command(&self, api: &FakeApi) -> Command {
        let mut cmd = Command::new(claude_bin());
        cmd.current_dir(self.workspace())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.home())
            .env("XDG_RUNTIME_DIR", self.scratch("run"))
            .env("ANTHROPIC_BASE_URL", api.base_url())
            .env("ANTHROPIC_API_KEY", "dummy")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            // Running as root: the CLI refuses some modes as root unless it is told it is sandboxed.
            .env("IS_SANDBOX", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }
}

fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-=".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Runs `git` (with a throwaway identity) in `dir`; fails the test unless it succeeds. Its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.email=t@t", "-c", "user.name=t"])
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A real daemon whose project is a Claude Code session's workspace (see the module docs).
pub struct World {
    pub gate: Gate,
    pub session: Session,
}

/// What goes into a [`World`] before its daemon starts: `World::builder()....start()`.
#[derive(Default)]
pub struct WorldBuilder {
    config: String,
    files: Vec<(String, Vec<u8>)>,
    daemon_env: Vec<(String, String)>,
    env: Vec<(String, String)>,
}

impl WorldBuilder {
    /// The daemon's `config.toml` (appended to what was given before).
    pub fn config(mut self, toml: &str) -> WorldBuilder {
        self.config.push_str(toml);
        self.config.push('\n');
        self
    }

    /// A file committed to the workspace's repository with the map (so it is tracked).
    pub fn file(mut self, name: &str, content: impl AsRef<[u8]>) -> WorldBuilder {
        self.files
            .push((name.to_owned(), content.as_ref().to_vec()));
        self
    }

    /// Environment for `cmdgated` alone (a reviewer's key, a session bus).
    pub fn daemon_env(mut self, key: &str, value: &str) -> WorldBuilder {
        self.daemon_env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Environment for the CLI (and so its hooks and the commands it runs).
    pub fn env(mut self, key: &str, value: &str) -> WorldBuilder {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Builds the workspace, signs and commits the starter map, installs the hook with `cmdgate
    /// hook install`, and starts the daemon (waiting until it answers).
    pub fn start(self) -> World {
        let mut gate = Gate::new();
        let mut session = Session::new();
        let ws = session.workspace();
        git(&ws, &["init", "-q", "."]);
        std::fs::write(ws.join("tracked.txt"), "precious\n").expect("tracked.txt");
        let mut tracked = vec!["tracked.txt".to_owned(), "CLAUDE_CMDS.md".to_owned()];
        for (name, content) in &self.files {
            let path = ws.join(name);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).expect("mkdir");
            }
            std::fs::write(&path, content).expect("write a workspace file");
            tracked.push(name.clone());
        }
        gate.proj = ws.clone();
        if !self.config.is_empty() {
            std::fs::write(gate.conf.join("config.toml"), &self.config).expect("config.toml");
        }
        gate.daemon_env.extend(self.daemon_env);
        gate.init_signed();
        let mut add = vec!["add", "--"];
        add.extend(tracked.iter().map(String::as_str));
        git(&ws, &add);
        git(&ws, &["commit", "-qm", "init"]);
        let install = gate.cli(&[
            "hook",
            "install",
            "--project",
            ws.to_str().expect("utf-8 temp path"),
            "--hook",
            gate.hook.to_str().expect("utf-8 target path"),
        ]);
        assert!(
            install.status.success(),
            "hook install: {}",
            install.stderr_text()
        );
        for (k, v) in [
            ("CMDGATE_SOCKET", &gate.socket),
            ("CMDGATE_CONFIG_DIR", &gate.conf),
            ("CMDGATE_SPOOL_DIR", &gate.spool),
        ] {
            session.set_env(k, &v.display().to_string());
        }
        // Commits the agent makes need an identity (HOME is empty).
        for (k, v) in [
            ("GIT_AUTHOR_NAME", "agent"),
            ("GIT_AUTHOR_EMAIL", "agent@example.invalid"),
            ("GIT_COMMITTER_NAME", "agent"),
            ("GIT_COMMITTER_EMAIL", "agent@example.invalid"),
        ] {
            session.set_env(k, v);
        }
        for (k, v) in &self.env {
            session.set_env(k, v);
        }
        gate.start();
        World { gate, session }
    }
}

/// One `claude -p` run of a script: the fake API (what the model was sent) and what the CLI said.
pub struct Played {
    pub api: FakeApi,
    pub run: ClaudeRun,
}

impl Played {
    /// The tool_result of scripted turn `turn`; fails the test (with the conversation) when the
    /// CLI sent none.
    pub fn result(&self, turn: usize) -> ToolResult {
        self.api.result_of(turn).unwrap_or_else(|| {
            panic!(
                "no tool_result for turn {turn}; the conversation:\n{}",
                self.api.transcript()
            )
        })
    }

    /// How many calls Claude Code reported as denied.
    pub fn denials(&self) -> usize {
        self.run.denials()
    }
}

impl Default for World {
    fn default() -> World {
        World::new()
    }
}

impl World {
    /// A started world with the default configuration.
    pub fn new() -> World {
        World::builder().start()
    }

    /// A started world whose daemon reads `config` as its `config.toml`.
    pub fn with_config(config: &str) -> World {
        World::builder().config(config).start()
    }

    pub fn builder() -> WorldBuilder {
        WorldBuilder::default()
    }

    /// A path in the workspace.
    pub fn ws(&self, name: &str) -> PathBuf {
        self.session.workspace().join(name)
    }

    /// A workspace file's text; fails the test when it cannot be read.
    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.ws(name))
            .unwrap_or_else(|e| panic!("reading {name} in the workspace: {e}"))
    }

    /// Plays `script` through `claude -p` (default permission mode); fails unless the CLI exits 0.
    pub fn play(&self, script: Vec<Step>) -> Played {
        self.play_with("follow the script", &[], script)
    }

    /// [`World::play`] with a prompt and extra CLI arguments.
    pub fn play_with(&self, prompt: &str, args: &[&str], script: Vec<Step>) -> Played {
        let api = FakeApi::start(script);
        let run = self.claude(&api, prompt, args);
        Played { api, run }
    }

    /// Runs `claude -p` against `api` (a script played again, e.g. with `--resume`) and prints
    /// what it did; fails unless the CLI exits 0.
    pub fn claude(&self, api: &FakeApi, prompt: &str, args: &[&str]) -> ClaudeRun {
        let run = self.session.run_with(api, prompt, args);
        println!("=== {prompt}: claude -p {args:?}");
        println!("result: {}", run.result);
        println!("tool results:\n{}", api.transcript());
        assert!(
            run.done.status.success(),
            "claude exited {:?}\n{}",
            run.done.status,
            run.done.stderr_text()
        );
        run
    }

    /// The newest audit row of `kind` for scripted turn `turn` (ids repeat across runs).
    pub fn row_of(&self, kind: &str, turn: usize) -> Option<Value> {
        let id = tool_use_id(turn);
        self.gate
            .audit(kind)
            .into_iter()
            .filter(|r| r["tool_use_id"] == id)
            .max_by_key(|r| r["id"].as_i64())
    }

    /// The newest decision row of turn `turn`, printed; fails the test when there is none.
    pub fn row(&self, turn: usize) -> Value {
        let row = self
            .row_of("decision", turn)
            .unwrap_or_else(|| panic!("no decision row for turn {turn}"));
        println!(
            "audit #{} {}: {} (source {}) {}",
            row["id"], row["tool_use_id"], row["decision"], row["source"], row["reason"]
        );
        row
    }

    /// The newest `run` row (a mirrored run's result) of turn `turn`.
    pub fn run_row(&self, turn: usize) -> Value {
        self.row_of("run", turn)
            .unwrap_or_else(|| panic!("no run row for turn {turn}"))
    }

    /// The run id (`cmdgate runs`, `cmdgate undo`) of turn `turn`'s mirrored run.
    pub fn run_id(&self, turn: usize) -> String {
        let row = self.run_row(turn);
        row["note"]
            .as_str()
            .and_then(|n| n.strip_prefix("run "))
            .unwrap_or_else(|| panic!("no run id in {row}"))
            .to_owned()
    }

    /// `cmdgate audit show ID --json`; ingests the spool once if no outcome joined yet (the hook
    /// spools an outcome the daemon did not take in time).
    pub fn show_with_outcome(&self, id: &Value) -> Value {
        let id = id.to_string();
        let show = self.gate.cli_json(&["audit", "show", &id, "--json"]);
        if show["outcomes"].as_array().is_some_and(|o| !o.is_empty()) {
            return show;
        }
        self.gate.ingest();
        self.gate.cli_json(&["audit", "show", &id, "--json"])
    }

    /// `git log --format=%s` of the workspace.
    pub fn git_log(&self) -> String {
        git(&self.session.workspace(), &["log", "--format=%s"])
    }
}
