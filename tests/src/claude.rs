//! Running the real Claude Code CLI (`claude -p`) in a throwaway workspace with a throwaway HOME,
//! pointed at a [`FakeApi`](crate::fake_api::FakeApi), with hooks registered in the workspace's
//! `.claude/settings.json`.
//!
//! The CLI is installed by `.ci/install` into `tests/node/` (pinned version, git-ignored);
//! `CMDGATE_CLAUDE_BIN` overrides the path.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::bins::repo_root;
use crate::fake_api::FakeApi;
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
        let mut cmd = Command::new(claude_bin());
        cmd.current_dir(self.workspace())
            .args(["-p", prompt, "--output-format", "json"])
            .args(args)
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
        let done = run_bounded(&mut cmd, b"", RUN_BOUND);
        let result = done
            .stdout_text()
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<Value>(l).ok())
            .unwrap_or(Value::Null);
        ClaudeRun { done, result }
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
