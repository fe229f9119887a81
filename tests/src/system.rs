//! System mode for real: Linux users and groups made for one test (a daemon user, two agents, an
//! operator, the `agents` and `operators` groups), the real `cmdgated` as the daemon user under
//! Debian's `systemd-socket-activate` (the sockets passed as `cmdgated.socket` and
//! `cmdgated-admin.socket` pass them), the real hook run as an agent with the command line `cmdgate
//! hook install --system` writes, and the real CLI as the operator. Needs root (it runs `useradd`);
//! every name carries a per-fixture tag, so parallel tests and re-runs never collide, and `Drop`
//! removes the users, groups and files again.
//!
//! Layout under one root-owned temp dir `T` in /var/tmp (0755, so every user can reach what it must):
//!
//! | path | owner, mode | what |
//! |---|---|---|
//! | `T/etc` | root:operators 2775 | config dir: `config.toml` (root), pinned keys and dev key (operators) |
//! | `T/var` | daemon 0711 | data dir: the store, `tiermap-revisions` |
//! | `T/run` | root 0755 | `cmdgate.sock` (daemon:agents 0660), `admin.sock` (daemon:operators 0660) |
//! | `T/<user>` | that user, 0711 | each agent's and the operator's home |
//! | `T/<agent>/proj` | the agent, 0755 | the agent's git project |

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::bins::cargo_bin;
use crate::proc::{run_bounded, Finished};

/// `systemd-socket-activate`, from Debian's `systemd` package.
pub const ACTIVATE: &str = "/usr/bin/systemd-socket-activate";
/// Bound on every wait: only turns a hang into a failure.
pub const BOUND: Duration = Duration::from_secs(60);
/// The file capabilities of `cmdgate-mirror-helper`, exactly as `systemd/README.md` step 2 sets
/// them (`tests/system_mode.rs` checks the README still says this).
pub const MIRROR_HELPER_CAPS: &str =
    "cap_sys_admin,cap_setuid,cap_setgid,cap_setpcap,cap_chown,cap_dac_override,cap_sys_ptrace,cap_kill,cap_net_admin+ep";
/// `useradd`/`groupadd`/`userdel` of parallel tests take turns on this lock (they lock
/// /etc/passwd themselves, but fail instead of waiting).
const USERS_LOCK: &str = "/run/lock/cmdgate-tests-users.lock";

/// A user made for the test.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// Runs an account tool under the shared lock; panics with its output on failure.
fn account(tool: &str, args: &[&str]) {
    let mut cmd = Command::new("flock");
    cmd.arg(USERS_LOCK).arg(tool).args(args);
    let done = run_bounded(&mut cmd, b"", BOUND);
    assert!(
        done.status.success(),
        "{tool} {args:?} failed: {}{}",
        done.stdout_text(),
        done.stderr_text()
    );
}

fn id(flag: &str, name: &str) -> u32 {
    let done = run_bounded(Command::new("id").args([flag, name]), b"", BOUND);
    assert!(
        done.status.success(),
        "id {flag} {name}: {}",
        done.stderr_text()
    );
    done.stdout_text().trim().parse().expect("numeric id")
}

fn group_id(name: &str) -> u32 {
    let done = run_bounded(Command::new("getent").args(["group", name]), b"", BOUND);
    assert!(done.status.success(), "getent group {name}");
    done.stdout_text()
        .split(':')
        .nth(2)
        .and_then(|g| g.trim().parse().ok())
        .expect("gid")
}

fn chown(path: &Path, owner: &str) {
    let done = run_bounded(Command::new("chown").arg(owner).arg(path), b"", BOUND);
    assert!(
        done.status.success(),
        "chown {owner} {}: {}",
        path.display(),
        done.stderr_text()
    );
}

pub fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {:o} {}: {e}", mode, path.display()));
}

/// The users and groups one fixture made, removed again on drop (also when making the rest of the
/// fixture fails half way).
#[derive(Default)]
struct Accounts {
    users: Vec<String>,
    groups: Vec<String>,
}

impl Drop for Accounts {
    fn drop(&mut self) {
        for u in &self.users {
            let _ = Command::new("flock")
                .args([USERS_LOCK, "userdel", u])
                .status();
        }
        for g in &self.groups {
            let _ = Command::new("flock")
                .args([USERS_LOCK, "groupdel", g])
                .status();
        }
    }
}

/// One fixture: users, groups, directories, binaries, and (once started) the daemon.
pub struct System {
    pub tag: String,
    pub root: tempfile::TempDir,
    pub etc: PathBuf,
    pub var: PathBuf,
    pub run: PathBuf,
    pub socket: PathBuf,
    pub admin: PathBuf,
    pub daemon_user: User,
    pub agent1: User,
    pub agent2: User,
    pub operator: User,
    /// Not in any cmdgate group, not listed in `[peers]`: a local user who can reach the decide
    /// socket only because its mode lets everyone connect.
    pub outsider: User,
    pub agents_gid: u32,
    pub operators_gid: u32,
    pub cmdgated: PathBuf,
    pub cmdgate: PathBuf,
    pub hook: PathBuf,
    /// The mirror helper installed with file capabilities (`install_mirror_helper`), if any.
    pub mirror_helper: Option<PathBuf>,
    /// The decide socket's and the admin socket's groups (`SocketGroup=`).
    agents_group: String,
    operators_group: String,
    daemon: Option<Child>,
    /// Last, so the daemon is stopped before its user goes.
    _accounts: Accounts,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl System {
    /// Makes the users, groups and directories; writes `config.toml` listing the groups in
    /// `[peers]`. The daemon is not started yet.
    pub fn create() -> System {
        assert!(
            Path::new(ACTIVATE).is_file(),
            "{ACTIVATE} is missing: apt-get install systemd (Debian's package has it)"
        );
        let cmdgated = cargo_bin("cmdgate-daemon", "cmdgated");
        let cmdgate = cargo_bin("cmdgate-daemon", "cmdgate");
        let hook = cargo_bin("cmdgate-hook", "cmdgate-hook");
        // A tag unique on this machine: pid and a per-process counter (names ≤ 32 chars).
        let tag = format!(
            "cgt{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let root = tempfile::Builder::new()
            .prefix(&format!("cmdgate-{tag}-"))
            // Not under /tmp: the mirror mounts a scratch tmpfs there, so homes under /tmp would
            // be out of its sight, unlike homes under /home on a real machine.
            .tempdir_in("/var/tmp")
            .expect("tempdir");
        chmod(root.path(), 0o755);
        let mut accounts = Accounts::default();
        let agents = format!("{tag}agents");
        let operators = format!("{tag}ops");
        for g in [&agents, &operators] {
            account("groupadd", &[g]);
            accounts.groups.push(g.clone());
        }
        let mut make = |suffix: &str, groups: Option<&str>, home: bool| -> User {
            let name = format!("{tag}{suffix}");
            let home_dir = root.path().join(&name);
            let mut args = vec![
                "--no-create-home",
                "--user-group",
                "--shell",
                "/bin/sh",
                "--home-dir",
            ];
            let home_s = home_dir.to_str().unwrap().to_owned();
            args.push(&home_s);
            if let Some(g) = groups {
                args.push("--groups");
                args.push(g);
            }
            args.push(&name);
            account("useradd", &args);
            accounts.users.push(name.clone());
            if home {
                std::fs::create_dir(&home_dir).unwrap();
                chown(&home_dir, &format!("{name}:{name}"));
                // Others (the daemon user) may traverse a home, never list or read it: the
                // daemon needs only the project inside it (see systemd/README.md).
                chmod(&home_dir, 0o711);
            }
            User {
                uid: id("-u", &name),
                gid: id("-g", &name),
                name,
                home: home_dir,
            }
        };
        let daemon_user = make("d", None, false);
        let agent1 = make("a1", Some(&agents), true);
        let agent2 = make("a2", Some(&agents), true);
        let operator = make("op", Some(&operators), true);
        let outsider = make("x", None, true);
        let agents_gid = group_id(&agents);
        let operators_gid = group_id(&operators);

        let etc = root.path().join("etc");
        let var = root.path().join("var");
        let run = root.path().join("run");
        std::fs::create_dir(&etc).unwrap();
        chown(&etc, &format!("root:{operators}"));
        chmod(&etc, 0o2775);
        std::fs::create_dir(&var).unwrap();
        chown(&var, &format!("{0}:{0}", daemon_user.name));
        chmod(&var, 0o711);
        std::fs::create_dir(&run).unwrap();
        chmod(&run, 0o755);
        let config = format!(
            "[peers]\ndecide_gids = [{agents_gid}]\nadmin_gids = [{operators_gid}]\n\
             publish_gid = {agents_gid}\n[notify]\nenabled = false\n"
        );
        let config_path = etc.join("config.toml");
        std::fs::write(&config_path, config).unwrap();
        chmod(&config_path, 0o644);

        let sys = System {
            socket: run.join("cmdgate.sock"),
            admin: run.join("admin.sock"),
            tag,
            etc,
            var,
            run,
            daemon_user,
            agent1,
            agent2,
            operator,
            outsider,
            agents_gid,
            operators_gid,
            cmdgated,
            cmdgate,
            hook,
            mirror_helper: None,
            agents_group: agents,
            operators_group: operators,
            daemon: None,
            root,
            _accounts: accounts,
        };
        for agent in [&sys.agent1, &sys.agent2] {
            sys.git_project(agent);
        }
        sys
    }

    /// Installs `cmdgate-mirror-helper` as `systemd/README.md` step 2 says (root, the daemon's
    /// group, 0750, then `setcap` with the capabilities `cmdgated.service` lists) under `T/libexec`
    /// and names it in `config.toml`'s `[sandbox] helper`. Call before `start`.
    pub fn install_mirror_helper(&mut self) {
        let built = cargo_bin("cmdgate-daemon", "cmdgate-mirror-helper");
        // The client the hook's rewrite names, next to the hook (as `cargo install` puts it).
        let _ = cargo_bin("cmdgate-hook", "cmdgate-run");
        let dir = self.root.path().join("libexec");
        std::fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o755);
        let helper = dir.join("cmdgate-mirror-helper");
        // By `cp`: a write fd held by this multi-threaded process could leak into a child forked
        // meanwhile and make exec of the helper fail with ETXTBSY.
        let copied = Command::new("cp")
            .arg(&built)
            .arg(&helper)
            .status()
            .expect("run cp");
        assert!(copied.success(), "copy the mirror helper: {copied}");
        chown(&helper, &format!("root:{}", self.daemon_user.name));
        chmod(&helper, 0o750);
        let done = run_bounded(
            Command::new("setcap").arg(MIRROR_HELPER_CAPS).arg(&helper),
            b"",
            BOUND,
        );
        assert!(done.status.success(), "setcap: {}", done.stderr_text());
        let config = self.etc.join("config.toml");
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str(&format!("[sandbox]\nhelper = \"{}\"\n", helper.display()));
        std::fs::write(&config, text).unwrap();
        self.mirror_helper = Some(helper);
    }

    /// The agent's project: `T/<agent>/proj`, a git repository with one tracked file.
    pub fn proj(&self, agent: &User) -> PathBuf {
        agent.home.join("proj")
    }

    fn git_project(&self, agent: &User) {
        let proj = self.proj(agent);
        let done = self.as_user(
            agent,
            &[],
            &[
                "sh",
                "-c",
                &format!(
                    "mkdir -m 0755 {p} && cd {p} && git init -q . && echo precious > tracked.txt \
                     && git add tracked.txt && git -c user.email=t@t -c user.name=t commit -qm init",
                    p = proj.display()
                ),
            ],
            b"",
        );
        assert!(done.status.success(), "git project: {}", done.stderr_text());
    }

    /// Runs `argv` as `user` (real and effective uid and gid, its groups from /etc/group) with a
    /// clean environment: `HOME`, `PATH`, `USER` and `env`.
    pub fn as_user(
        &self,
        user: &User,
        env: &[(&str, &str)],
        argv: &[&str],
        stdin: &[u8],
    ) -> Finished {
        let mut cmd = self.user_command(user, env);
        cmd.args(argv);
        run_bounded(&mut cmd, stdin, BOUND)
    }

    /// `setpriv … env -i …` as `user`, ready for the program and its arguments.
    pub fn user_command(&self, user: &User, env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--reuid",
            &user.uid.to_string(),
            "--regid",
            &user.gid.to_string(),
            "--init-groups",
            "--",
            "env",
            "-i",
        ]);
        cmd.arg(format!("HOME={}", user.home.display()))
            .arg(format!("USER={}", user.name))
            .arg("PATH=/usr/local/bin:/usr/bin:/bin");
        for (k, v) in env {
            cmd.arg(format!("{k}={v}"));
        }
        cmd.current_dir(&user.home);
        cmd
    }

    /// The hook's registered command line in system mode, as `cmdgate hook install --system`
    /// writes it for this fixture's directories.
    pub fn hook_argv(&self) -> Vec<String> {
        vec![
            self.hook.display().to_string(),
            "--system".into(),
            "--config-dir".into(),
            self.etc.display().to_string(),
            "--data-dir".into(),
            self.var.display().to_string(),
            "--socket".into(),
            self.socket.display().to_string(),
        ]
    }

    /// A PreToolUse event from `agent` in its project, in `session`.
    pub fn pre_event(
        &self,
        agent: &User,
        session: &str,
        tool_use_id: &str,
        command: &str,
    ) -> Value {
        // The transcript exists and holds the user's turn, as Claude Code's does (a missing one,
        // or one without a user turn, makes the hook wait).
        let transcript = agent.home.join("t.jsonl");
        if !transcript.exists() {
            std::fs::write(&transcript, "{\"type\":\"user\",\"uuid\":\"u0\",\"message\":{\"role\":\"user\",\"content\":\"go on\"}}\n").expect("transcript");
        }
        json!({
            "session_id": session,
            "transcript_path": transcript,
            "cwd": self.proj(agent),
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": command},
            "tool_use_id": tool_use_id,
        })
    }

    /// The real hook, run as `agent` with its registered command line and `env` added to the
    /// agent's environment (where Claude Code puts a settings file's `env` block): (decision or
    /// "none" when the hook stepped aside, the reason or system message).
    pub fn hook(&self, agent: &User, env: &[(&str, &str)], event: &Value) -> (String, String) {
        let proj = self.proj(agent);
        let proj_s = proj.display().to_string();
        let mut all: Vec<(&str, &str)> = vec![("CLAUDE_PROJECT_DIR", &proj_s)];
        all.extend_from_slice(env);
        let argv = self.hook_argv();
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let done = self.as_user(agent, &all, &argv, event.to_string().as_bytes());
        assert!(
            done.status.success(),
            "hook exit {}: {}",
            done.status,
            done.stderr_text()
        );
        let out: Value = serde_json::from_slice(&done.stdout)
            .unwrap_or_else(|e| panic!("hook stdout not JSON ({e}): {}", done.stdout_text()));
        let specific = &out["hookSpecificOutput"];
        match specific["permissionDecision"].as_str() {
            Some(d) => (
                d.to_owned(),
                specific["permissionDecisionReason"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            ),
            None => (
                "none".to_owned(),
                out["systemMessage"].as_str().unwrap_or_default().to_owned(),
            ),
        }
    }

    /// The real hook's whole answer (JSON), run as `agent` with its registered command line.
    pub fn hook_json(&self, agent: &User, event: &Value) -> Value {
        self.hook_json_env(agent, &[], event)
    }

    /// [`System::hook_json`] with `env` added to the agent's environment.
    pub fn hook_json_env(&self, agent: &User, env: &[(&str, &str)], event: &Value) -> Value {
        let proj = self.proj(agent);
        let proj_s = proj.display().to_string();
        let argv = self.hook_argv();
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut all: Vec<(&str, &str)> = vec![("CLAUDE_PROJECT_DIR", &proj_s)];
        all.extend_from_slice(env);
        let done = self.as_user(agent, &all, &argv, event.to_string().as_bytes());
        assert!(
            done.status.success(),
            "hook exit {}: {}",
            done.status,
            done.stderr_text()
        );
        serde_json::from_slice(&done.stdout)
            .unwrap_or_else(|e| panic!("hook stdout not JSON ({e}): {}", done.stdout_text()))
    }

    /// Runs `command` with `bash -c` as `user` in `dir`, the way Claude Code's Bash tool runs a
    /// (rewritten) command.
    pub fn shell_as(&self, user: &User, dir: &Path, command: &str) -> Finished {
        let mut cmd = self.user_command(user, &[]);
        cmd.args(["bash", "-c", command]).current_dir(dir);
        run_bounded(&mut cmd, b"", Duration::from_secs(120))
    }

    /// The operator's CLI environment: system mode, this fixture's directories.
    pub fn operator_env(&self) -> Vec<(String, String)> {
        vec![
            ("CMDGATE_MODE".into(), "system".into()),
            ("CMDGATE_CONFIG_DIR".into(), self.etc.display().to_string()),
            ("CMDGATE_HOME".into(), self.var.display().to_string()),
            ("CMDGATE_SOCKET".into(), self.socket.display().to_string()),
            (
                "CMDGATE_ADMIN_SOCKET".into(),
                self.admin.display().to_string(),
            ),
        ]
    }

    /// `cmdgate ARGS` as `user` in system mode (the operator, normally).
    pub fn cli_as(&self, user: &User, args: &[&str]) -> Finished {
        let env = self.operator_env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut argv = vec![self.cmdgate.to_str().unwrap()];
        argv.extend_from_slice(args);
        self.as_user(user, &env, &argv, b"")
    }

    /// The operator's CLI, JSON output; fails the test on a non-zero exit.
    pub fn operator_json(&self, args: &[&str]) -> Value {
        let done = self.cli_as(&self.operator, args);
        assert!(
            done.status.success(),
            "cmdgate {args:?} as the operator failed: {}{}\nlog:\n{}",
            done.stdout_text(),
            done.stderr_text(),
            self.log()
        );
        serde_json::from_str(&done.stdout_text())
            .unwrap_or_else(|e| panic!("cmdgate {args:?}: {e}: {}", done.stdout_text()))
    }

    pub fn log_path(&self) -> PathBuf {
        self.root.path().join("daemon.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Starts the daemon as systemd would: `systemd-socket-activate` (root) binds both sockets,
    /// they get the unit files' owners and modes, and on the first connection it execs
    /// `setpriv` → `cmdgated` as the daemon user (same pid, so `LISTEN_PID` holds) with the
    /// agents group as a supplementary group (`SupplementaryGroups=` in `cmdgated.service`).
    /// `decide_mode` is the decide socket's mode (the unit's is 0660).
    pub fn start(&mut self, decide_mode: u32) {
        let mut cmd = Command::new(ACTIVATE);
        cmd.arg("-l")
            .arg(&self.socket)
            .arg("--fdname=decide")
            .arg("-l")
            .arg(&self.admin)
            .arg("--fdname=admin");
        for var in [
            "CMDGATE_MODE",
            "CMDGATE_CONFIG_DIR",
            "CMDGATE_HOME",
            "CMDGATE_SOCKET",
            "CMDGATE_ADMIN_SOCKET",
        ] {
            cmd.arg("-E").arg(var);
        }
        cmd.args([
            "setpriv",
            "--reuid",
            &self.daemon_user.uid.to_string(),
            "--regid",
            &self.daemon_user.gid.to_string(),
            "--groups",
            &self.agents_gid.to_string(),
            "--",
        ]);
        cmd.arg(&self.cmdgated);
        cmd.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", "/nonexistent");
        for (k, v) in self.operator_env() {
            cmd.env(k, v);
        }
        let log = std::fs::File::create(self.log_path()).unwrap();
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        self.daemon = Some(cmd.spawn().expect("spawn systemd-socket-activate"));
        let start = Instant::now();
        let is_socket =
            |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket());
        while !(is_socket(&self.socket) && is_socket(&self.admin)) {
            assert!(
                start.elapsed() < BOUND,
                "sockets not bound; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // SocketUser=/SocketGroup=/SocketMode= of the unit files.
        chown(
            &self.socket,
            &format!("{}:{}", self.daemon_user.name, self.agents_group),
        );
        chmod(&self.socket, decide_mode);
        chown(
            &self.admin,
            &format!("{}:{}", self.daemon_user.name, self.operators_group),
        );
        chmod(&self.admin, 0o660);
        // The first connection (as the operator, through its group) starts the daemon.
        let status = self.operator_json(&["status", "--json"]);
        assert!(status.is_object(), "{status}");
    }

    /// Stops the daemon (SIGTERM, as systemd does) and starts it again the same way, with fresh
    /// sockets (systemd would keep its own; what the daemon kept is what counts here).
    pub fn restart(&mut self, decide_mode: u32) {
        if let Some(mut child) = self.daemon.take() {
            let done = run_bounded(
                Command::new("kill").args(["-TERM", &child.id().to_string()]),
                b"",
                BOUND,
            );
            assert!(done.status.success(), "kill: {}", done.stderr_text());
            let status = child.wait().expect("wait for the daemon");
            assert!(
                status.success(),
                "the daemon's exit: {status}; log:\n{}",
                self.log()
            );
        }
        for sock in [&self.socket, &self.admin] {
            let _ = std::fs::remove_file(sock);
        }
        let old = self.log();
        std::fs::write(self.root.path().join("daemon.log.1"), old).unwrap();
        self.start(decide_mode);
    }

    /// The daemon's pid (`systemd-socket-activate` execs `setpriv`, which execs `cmdgated`: one
    /// pid throughout, as `LISTEN_PID` requires).
    pub fn daemon_pid(&self) -> u32 {
        self.daemon.as_ref().expect("daemon started").id()
    }

    /// Accepted tier map revisions as published in the data dir.
    pub fn revisions_path(&self) -> PathBuf {
        self.var.join("tiermap-revisions")
    }

    /// A connection to the decide socket made as `user` answering `GET /v1/health`: the HTTP status
    /// line, or the error (EACCES when the socket's mode keeps the user out).
    pub fn health_as(&self, user: &User) -> Finished {
        let script = format!(
            "exec python3 -c 'import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\n\
             s.sendall(b\"GET /v1/health HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n\")\n\
             print(s.recv(200).split(b\"\\r\\n\")[0].decode())' {}",
            self.socket.display()
        );
        self.as_user(user, &[], &["sh", "-c", &script], b"")
    }

    /// Runs the real Claude Code CLI (`claude -p PROMPT --output-format json`) as `agent` in its
    /// project against `api`, with `managed` bind-mounted on `/etc/claude-code` in a mount
    /// namespace of its own (over an overlay of `/etc`, so the host's `/etc` is never written):
    /// the CLI sees root-owned managed settings at the path a real machine has them, and no other
    /// test (or other CLI on this machine) sees them. `env` is added to the CLI's environment.
    pub fn claude_as(
        &self,
        agent: &User,
        managed: &Path,
        api: &crate::fake_api::FakeApi,
        prompt: &str,
        env: &[(&str, &str)],
    ) -> Finished {
        let run_dir = agent.home.join("run");
        let done = self.as_user(agent, &[], &["mkdir", "-p", run_dir.to_str().unwrap()], b"");
        assert!(done.status.success(), "{}", done.stderr_text());
        let base_url = api.base_url();
        let run_s = run_dir.display().to_string();
        let mut all: Vec<(&str, &str)> = vec![
            ("XDG_RUNTIME_DIR", &run_s),
            ("ANTHROPIC_BASE_URL", &base_url),
            ("ANTHROPIC_API_KEY", "dummy"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("DISABLE_TELEMETRY", "1"),
            ("DISABLE_ERROR_REPORTING", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
        ];
        all.extend_from_slice(env);
        let user = self.user_command(agent, &all);
        let overlay = tempfile::Builder::new()
            .prefix("etc-overlay-")
            .tempdir_in(self.root.path())
            .expect("overlay dir");
        let (upper, work) = (overlay.path().join("u"), overlay.path().join("w"));
        for d in [&upper, &work] {
            std::fs::create_dir(d).expect("overlay dir");
        }
        // `unshare` (root) → an overlay on `/etc` → `mount --bind` → `setpriv … env -i … claude`.
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(
                "mount -t overlay overlay -o lowerdir=/etc,upperdir=\"$1\",workdir=\"$2\" /etc \
                 && mkdir -p /etc/claude-code && mount --bind \"$0\" /etc/claude-code \
                 && shift 2 && exec \"$@\"",
            )
            .arg(managed)
            .arg(&upper)
            .arg(&work)
            .arg(user.get_program())
            .args(user.get_args())
            .arg(crate::claude::claude_bin())
            .args(["-p", prompt, "--output-format", "json"])
            .current_dir(self.proj(agent));
        run_bounded(&mut cmd, b"", crate::claude::RUN_BOUND)
    }

    /// Waits until `cond` holds (bounded).
    pub fn wait_for(&self, what: &str, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(
                start.elapsed() < BOUND,
                "timed out waiting for {what}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for System {
    fn drop(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }
}
