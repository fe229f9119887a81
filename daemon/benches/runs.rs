//! Mirrored runs against today's `direct` path and the bare command (issue 19, harness = false):
//! whole wall time, through the real release hook, `cmdgate-run` client and `cmdgated`, of
//!
//! - **bare**: `bash -c CMD` in the project;
//! - **direct**: the hook's PreToolUse for a `direct` tier-1 entry (the daemon test-runs the
//!   command in the mirror and answers allow), then `bash -c CMD` on the host;
//! - **mirrored**: the hook's PreToolUse (the daemon answers with a ticket), then `bash -c` of the
//!   rewritten command: the client redeems the ticket, the command runs once in the mirror, its
//!   effects are judged and committed.
//!
//! for `true` — as `sh noop.sh`, a script that runs `true`: `true` itself is a built-in read, which
//! never reaches the mirror — and for `cargo build --offline` of a small crate whose dependencies (itoa, memchr,
//! smallvec, ryu, fnv, hex) are vendored from the local registry cache at setup (no network).
//! The three paths alternate in every round (their order rotates); the build's `target/` and
//! `~/.cargo` are removed between runs, untimed. Medians, ratios to bare's median of the same run, and the load
//! average before and after. Prints a Markdown table for docs/benchmarks.md. The goal (issue 19)
//! is "bare + at most 15 ms + commit time": after each mirrored call (untimed) the run's own
//! commit time is read from its audit row (`cmdgate runs --json`: the `commit.duration` the
//! daemon recorded), and the table gives its median and the median of mirrored − commit − bare.
//! A second table splits a mirrored call by the phases its run recorded (`phases_us`): the
//! command's own time in the mirror (pid 1's fork of `bash -c` to its end) against the bare
//! call, the setup left on the run's path, the effects' walk, and the call less its commit and
//! its command — what the mirror cost around the command, apart from how much slower the
//! command itself ran in it.
//! The environment is a Claude Code Bash tool's: `HOME`, `PATH` and `SHELL` (without `SHELL`,
//! bash looks the user up with `getpwuid` to set it — an NSS lookup Claude Code's shell never
//! makes, and in the mirror a `connect` to nscd's socket that the supervisor must answer).
//!
//! Needs root (the mirror), the hook and client built in the same profile, and a quiet machine:
//! `.ci/build-release && cargo bench -p cmdgate-daemon --bench runs` — the README's release
//! build, whose hook and client are static (musl): dynamically linked ones, as a plain
//! `cargo build --release` leaves them, added ≈7 ms to every mirrored call on a VM where
//! starting a process is slow (docs/benchmarks.md, "session 17")
//! (`RUNS_BENCH_TRUE=N`, `RUNS_BENCH_BUILD=N` set the rounds, 0 skips a row; defaults 40 and 7;
//! `RUNS_BENCH_BIN=DIR` takes the four binaries from another build's release dir;
//! `RUNS_BENCH_PATHS=mirrored` — a comma list of `bare`, `direct`, `mirrored` — times only those
//! paths, e.g. to count the daemon's system calls per mirrored run with a tracer attached; a row
//! without bare has no ratios; `RUNS_BENCH_COMMITS=0` skips reading each run's commit time;
//! `RUNS_BENCH_GAP_MS=N` waits N ms, untimed, before every call, as an agent's turn does between
//! two Bash calls: what the daemon prepares after a run — the next run's whole mirror, built ahead
//! — is then ready, as in a session, instead of racing the bench's next call).
//! A third table takes the goal round by round: each mirrored call less its commit against the
//! bare call of the same round, and the median of those differences (the machine's drift between
//! rounds, a third of the bare build's time here, cancels); `RUNS_BENCH_RAW=FILE` appends each
//! round's bare, mirrored − commit and command times (ms, tab-separated) to FILE, to pool runs.
//! `RUNS_BENCH_DIR=PATH` makes the bench's projects, state and mirrors' stores under PATH
//! instead of `/var/tmp`. `RUNS_BENCH_CPU=FILE` appends, per call, the path, the command, its
//! time and the machine's user, system and idle ticks meanwhile: whether a slower call used more
//! CPU or waited more.
//! `RUNS_BENCH_JOBS=N` builds with `cargo build --offline -j N` (both paths): with `-j 1` the
//! build's own time no longer depends on the order cargo happens to start the dependencies in.
//! `RUNS_BENCH_DIRS=N` adds N directories to each project (a larger tree for the secret walk);
//! `RUNS_BENCH_REPLACE=NAME` replaces the project's file NAME by a rename before each call.
//! After each row it prints how many of the mirrored runs used a mirror built ahead (the run's
//! audit detail, `built_ahead`), and of those how many kept the mirror's secret walk by its
//! watch instead of walking again at the run (`secrets_watched`); the counts need the commit
//! read-back.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Daemon {
    child: std::process::Child,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path3 {
    Bare,
    Direct,
    Mirrored,
}

struct Bench {
    hook: PathBuf,
    env: Vec<(String, String)>,
    transcript: PathBuf,
    calls: usize,
}

/// The machine's user (with nice), system (with irq, softirq) and idle (with iowait) ticks so far.
fn cpu_ticks() -> [u64; 3] {
    let stat = std::fs::read_to_string("/proc/stat").expect("read /proc/stat");
    let v: Vec<u64> = stat
        .lines()
        .next()
        .expect("the cpu line")
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().expect("a tick count"))
        .collect();
    [v[0] + v[1], v[2] + v[5] + v[6], v[3] + v[4]]
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn median(mut v: Vec<Duration>) -> Option<Duration> {
    v.sort();
    v.get(v.len() / 2).copied()
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Bench {
    fn command(&self, program: &Path, dir: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(dir).env_clear();
        cmd.env("CARGO_HOME", dir.join(".cargo-home"));
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.env("CLAUDE_PROJECT_DIR", dir);
        cmd
    }

    /// The hook's PreToolUse answer for `command` in `proj`.
    fn pre(&mut self, proj: &Path, command: &str) -> serde_json::Value {
        self.calls += 1;
        let event = serde_json::json!({
            "session_id": "bench",
            "transcript_path": self.transcript,
            "cwd": proj,
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": command, "description": "bench"},
            "tool_use_id": format!("toolu_bench_{}", self.calls),
        });
        let mut cmd = self.command(&self.hook, proj);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("hook");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(event.to_string().as_bytes())
            .expect("write event");
        let out = child.wait_with_output().expect("hook");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "hook answer is not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// The commit time of the newest mirrored run (its audit row's `commit.duration`), which
    /// must be a run of `command`, whether its mirror was built ahead (`built_ahead`; `None`
    /// from a daemon that does not record it), and whether that mirror's secret walk was kept
    /// valid by its watch instead of done again (`secrets_watched`), and where its time went
    /// (`phases_us`: the setup on the run's path, the command itself, the effects' walk; `None`
    /// from a daemon that does not record them).
    fn last_commit(
        &self,
        cmdgate: &Path,
        proj: &Path,
        command: &str,
    ) -> (Duration, Option<bool>, bool, Option<[Duration; 3]>) {
        let mut cmd = self.command(cmdgate, proj);
        cmd.args(["runs", "--json"]);
        let out = run(&mut cmd, "cmdgate runs --json");
        let runs: serde_json::Value = serde_json::from_str(&out).expect("cmdgate runs --json");
        let row = &runs[0]["row"];
        assert_eq!(row["command"], command, "the newest run is not ours: {row}");
        let detail: serde_json::Value = match &row["sandbox"] {
            serde_json::Value::String(s) => serde_json::from_str(s).expect("the run's detail"),
            other => other.clone(),
        };
        assert_eq!(
            detail["status"], "committed",
            "the run did not commit: {detail}"
        );
        let d = &detail["commit"]["duration"];
        let took = Duration::new(
            d["secs"]
                .as_u64()
                .unwrap_or_else(|| panic!("no commit time: {detail}")),
            d["nanos"].as_u64().unwrap_or(0) as u32,
        );
        let phase = |name: &str| {
            detail["phases_us"][name]
                .as_u64()
                .map(Duration::from_micros)
        };
        let phases = match (phase("ready_us"), phase("command_us"), phase("effects_us")) {
            (Some(r), Some(c), Some(e)) => Some([r, c, e]),
            _ => None,
        };
        (
            took,
            detail["built_ahead"].as_bool(),
            detail["secrets_watched"].as_bool() == Some(true),
            phases,
        )
    }

    fn bash(&self, proj: &Path, command: &str) {
        let mut cmd = self.command(Path::new("/bin/bash"), proj);
        cmd.arg("-c").arg(command);
        run(&mut cmd, command);
    }

    /// [`Self::once_untallied`]; with `RUNS_BENCH_CPU=FILE`, also appends the machine's user,
    /// system and idle ticks (`/proc/stat`, 10 ms each, all CPUs) spent during the call to FILE.
    fn once(&mut self, path: Path3, proj: &Path, command: &str) -> Duration {
        let tally = std::env::var_os("RUNS_BENCH_CPU").map(|log| (log, cpu_ticks()));
        let took = self.once_untallied(path, proj, command);
        if let Some((log, before)) = tally {
            let after = cpu_ticks();
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .unwrap_or_else(|e| panic!("RUNS_BENCH_CPU {}: {e}", log.to_string_lossy()));
            writeln!(
                f,
                "{path:?}\t{command}\t{:.3}\t{}\t{}\t{}",
                took.as_secs_f64() * 1e3,
                after[0] - before[0],
                after[1] - before[1],
                after[2] - before[2]
            )
            .unwrap();
        }
        took
    }

    /// One whole call on `path`: what an agent's Bash call costs from the hook to the end.
    fn once_untallied(&mut self, path: Path3, proj: &Path, command: &str) -> Duration {
        let t = Instant::now();
        match path {
            Path3::Bare => self.bash(proj, command),
            Path3::Direct => {
                let answer = self.pre(proj, command);
                let h = &answer["hookSpecificOutput"];
                assert!(
                    h["permissionDecision"] == "allow" && h["updatedInput"].is_null(),
                    "direct: expected a plain allow after the test-run: {answer}"
                );
                self.bash(proj, command);
            }
            Path3::Mirrored => {
                let answer = self.pre(proj, command);
                let rewritten = answer["hookSpecificOutput"]["updatedInput"]["command"]
                    .as_str()
                    .unwrap_or_else(|| panic!("mirrored: expected a rewrite: {answer}"))
                    .to_owned();
                self.bash(proj, &rewritten);
            }
        }
        t.elapsed()
    }
}

const CRATE_TOML: &str = r#"[package]
name = "small"
version = "0.1.0"
edition = "2021"

[dependencies]
itoa = "1"
memchr = "2"
smallvec = "1"
ryu = "1"
fnv = "1"
hex = "0.4"
"#;

const CRATE_MAIN: &str = r#"use std::collections::HashMap;
fn main() {
    let mut buf = itoa::Buffer::new();
    let mut f = ryu::Buffer::new();
    let v: smallvec::SmallVec<[u8; 8]> = smallvec::smallvec![1, 2, 3];
    let mut m: fnv::FnvHashMap<u8, u8> = HashMap::default();
    m.insert(1, 2);
    println!("{} {} {:?} {} {:?}", buf.format(42), f.format(1.5), memchr::memchr(2, &v), hex::encode(&v), m);
}
"#;

/// A git project with the crate, its dependencies vendored, `noop.sh`, and a signed map in which
/// `sh noop.sh` and `cargo build *` are tier 1, `direct` or not.
fn project(
    root: &Path,
    name: &str,
    direct: bool,
    b: &Bench,
    cmdgate: &Path,
    cargo: &Path,
) -> PathBuf {
    let proj = root.join(name);
    std::fs::create_dir_all(proj.join("src")).unwrap();
    std::fs::write(proj.join("Cargo.toml"), CRATE_TOML).unwrap();
    std::fs::write(proj.join("src/main.rs"), CRATE_MAIN).unwrap();
    std::fs::write(proj.join(".gitignore"), "/target\n/.cargo-home\n").unwrap();
    std::fs::write(proj.join("noop.sh"), "true\n").unwrap();
    let mut c = b.command(cargo, &proj);
    c.args(["generate-lockfile", "--offline"]);
    run(&mut c, "cargo generate-lockfile --offline");
    let mut c = b.command(cargo, &proj);
    c.args(["vendor", "--offline", "vendor"]);
    let config = run(&mut c, "cargo vendor --offline");
    std::fs::create_dir_all(proj.join(".cargo")).unwrap();
    std::fs::write(proj.join(".cargo/config.toml"), config).unwrap();
    let git = |args: &[&str]| {
        let mut c = b.command(Path::new("/usr/bin/git"), &proj);
        c.args(["-c", "user.email=b@b", "-c", "user.name=b"])
            .args(args);
        run(&mut c, "git");
    };
    git(&["init", "-q", "."]);
    let mut init = b.command(cmdgate, &proj);
    init.args(["init", "--force", "--project"]).arg(&proj);
    run(&mut init, "cmdgate init");
    let map_path = proj.join("CLAUDE_CMDS.md");
    let opt = if direct { "direct, " } else { "" };
    // The starter's `cargo build *` line (whatever options it carries: the build here is offline,
    // and `direct` cannot take a host list) becomes ours.
    let starter = std::fs::read_to_string(&map_path).unwrap();
    let line = starter
        .lines()
        .find(|l| l.starts_with("- `cargo build *` —"))
        .unwrap_or("- `sh noop.sh`: the starter map has no `cargo build *` entry");
    let map = starter.replacen(
        line,
        &format!(
            "- `sh noop.sh` — {opt}timeout=1m\n- `cargo build *` — {opt}timeout=10m, write=~/.cargo"
        ),
        1,
    );
    assert!(
        map.contains("- `sh noop.sh`"),
        "the starter map changed: {map}"
    );
    std::fs::write(&map_path, map).unwrap();
    let mut sign = b.command(cmdgate, &proj);
    sign.args(["tiermap", "sign", "--dev"]).arg(&map_path);
    run(&mut sign, "cmdgate tiermap sign");
    git(&["add", "-A"]);
    git(&["commit", "-qm", "init"]);
    proj
}

fn main() {
    // `RUNS_BENCH_BIN=DIR`: the binaries (cmdgated, cmdgate, cmdgate-hook, cmdgate-run) of another
    // build's release dir instead of this one's, so the same harness measures both sides of a
    // change (e.g. the session's base build, then this one).
    let (cmdgated, cmdgate) = match std::env::var_os("RUNS_BENCH_BIN").map(PathBuf::from) {
        Some(dir) => (dir.join("cmdgated"), dir.join("cmdgate")),
        None => (
            PathBuf::from(env!("CARGO_BIN_EXE_cmdgated")),
            PathBuf::from(env!("CARGO_BIN_EXE_cmdgate")),
        ),
    };
    let hook = cmdgated.with_file_name("cmdgate-hook");
    println!(
        "binaries: {}",
        cmdgated.parent().unwrap_or(Path::new("?")).display()
    );
    for bin in [&hook, &cmdgated.with_file_name("cmdgate-run")] {
        assert!(
            bin.is_file(),
            "build it first: cargo build --release -p cmdgate-hook --bins ({} missing)",
            bin.display()
        );
    }
    let rounds = |var: &str, default: usize| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (n_true, n_build) = (rounds("RUNS_BENCH_TRUE", 40), rounds("RUNS_BENCH_BUILD", 7));
    // `RUNS_BENCH_COMMITS=0`: no `cmdgate runs --json` after each mirrored call (its journal
    // read and audit query are the daemon's busiest work between calls): for counting what a
    // run alone costs the daemon; the commit columns are then dashes.
    let read_commits = std::env::var("RUNS_BENCH_COMMITS").map_or(true, |v| v != "0");
    let gap = Duration::from_millis(rounds("RUNS_BENCH_GAP_MS", 0) as u64);
    let paths: Vec<Path3> = match std::env::var("RUNS_BENCH_PATHS") {
        Ok(list) => list
            .split(',')
            .map(|p| match p.trim() {
                "bare" => Path3::Bare,
                "direct" => Path3::Direct,
                "mirrored" => Path3::Mirrored,
                other => {
                    panic!("RUNS_BENCH_PATHS: unknown path {other:?} (bare, direct, mirrored)")
                }
            })
            .collect(),
        Err(_) => vec![Path3::Bare, Path3::Direct, Path3::Mirrored],
    };
    // On the disk, not a tmpfs: the mirror's upper dirs and the commit live on the workspace's
    // filesystem. `RUNS_BENCH_DIR` puts it elsewhere, e.g. on a tmpfs mounted for the purpose:
    // this VM's ext4 took from 27 to 750 µs to create a file depending on the directory, and the
    // bare and mirrored projects' outputs land in different directories.
    let parent =
        std::env::var_os("RUNS_BENCH_DIR").map_or_else(|| "/var/tmp".into(), PathBuf::from);
    let dir = tempfile::Builder::new()
        .prefix("cmdgate-runs-bench")
        .tempdir_in(&parent)
        .unwrap_or_else(|e| panic!("RUNS_BENCH_DIR {}: {e}", parent.display()));
    let p = |s: &str| dir.path().join(s);
    let (conf, data) = (p("conf"), p("data"));
    for d in [&conf, &data] {
        std::fs::create_dir_all(d).unwrap();
    }
    // The user's turn is there, as in Claude Code's (without one the hook waits for it).
    std::fs::write(p("t.jsonl"), "{\"type\":\"user\",\"uuid\":\"u0\",\"message\":{\"role\":\"user\",\"content\":\"go on\"}}\n").unwrap();
    // The operator's own HOME: the toolchain lives there (`~/.rustup`), and the mirror shows the
    // agent's HOME (an overlay), not other users' homes. The toolchain's own cargo, not rustup's
    // proxy. Each project's cargo home is inside it (`CARGO_HOME`, set per call), so nothing is
    // written to the real `~/.cargo` except by the direct path's test-run, in its overlay.
    let home = PathBuf::from(std::env::var("HOME").expect("HOME"));
    let cargo = PathBuf::from(
        run(
            Command::new("rustup").args(["which", "cargo"]),
            "rustup which cargo",
        )
        .trim(),
    );
    let toolchain_bin = cargo.parent().unwrap().to_path_buf();
    let mut b = Bench {
        hook,
        env: vec![
            ("HOME".into(), home.display().to_string()),
            (
                "PATH".into(),
                format!("{}:/usr/local/bin:/usr/bin:/bin", toolchain_bin.display()),
            ),
            ("SHELL".into(), "/bin/bash".into()),
            ("CMDGATE_HOME".into(), data.display().to_string()),
            ("CMDGATE_CONFIG_DIR".into(), conf.display().to_string()),
            (
                "CMDGATE_SOCKET".into(),
                data.join("cmdgate.sock").display().to_string(),
            ),
            (
                "CMDGATE_ADMIN_SOCKET".into(),
                data.join("admin.sock").display().to_string(),
            ),
            ("CMDGATE_SPOOL_DIR".into(), p("spool").display().to_string()),
        ],
        transcript: p("t.jsonl"),
        calls: 0,
    };
    // No promotion during the bench (it needs outcomes, which the bench does not send). The
    // direct path's test-run must fit in the decision's deadline, itself below the hook's 45 s:
    // the longest the daemon accepts. (A longer build cannot take the direct path: it is "ask".)
    std::fs::write(
        conf.join("config.toml"),
        "[promotion]\nk = 1000000\n[deadlines]\ndecide_ms = 44000\ntest_run_ms = 42000\n",
    )
    .unwrap();
    let cargo_home_real = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cargo"));
    // Setup only: vendoring reads the real registry cache.
    let mut setup = Bench {
        env: b
            .env
            .iter()
            .filter(|(k, _)| k != "CARGO_HOME")
            .cloned()
            .chain([("CARGO_HOME".into(), cargo_home_real.display().to_string())])
            .collect(),
        hook: b.hook.clone(),
        transcript: b.transcript.clone(),
        calls: 0,
    };
    let direct = project(dir.path(), "direct", true, &setup, &cmdgate, &cargo);
    let mirrored = project(dir.path(), "mirrored", false, &setup, &cmdgate, &cargo);
    let bare = project(dir.path(), "bare", false, &setup, &cmdgate, &cargo);
    setup.calls = 0;
    // A larger project: `RUNS_BENCH_DIRS=N` more directories in each timed project, 50 to a
    // parent (`tree/dK/eJ`), for what a mirrored run's secret walk costs with the tree's size.
    let extra_dirs: usize = std::env::var("RUNS_BENCH_DIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // `RUNS_BENCH_REPLACE=NAME`: before each timed call (untimed), the project's file NAME is
    // replaced by a rename, as Claude Code replaces `~/.claude.json` (a masked path) up to
    // several times a second: with a secret NAME (`.env`), a mask's path is then another file at
    // the run, and the mirror built ahead is not used.
    let replace = std::env::var("RUNS_BENCH_REPLACE").ok();
    for proj in [&direct, &mirrored, &bare] {
        for k in 0..extra_dirs {
            std::fs::create_dir_all(proj.join(format!("tree/d{}/e{}", k / 50, k % 50))).unwrap();
        }
    }

    let mut cmd = b.command(&cmdgated, dir.path());
    let log = std::fs::File::create(p("daemon.log")).unwrap();
    cmd.stdout(log.try_clone().unwrap()).stderr(log);
    let _daemon = Daemon {
        child: cmd.spawn().unwrap(),
    };
    let start = Instant::now();
    while UnixStream::connect(data.join("admin.sock")).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "cmdgated did not start: {}",
            std::fs::read_to_string(p("daemon.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let load_before = loadavg();
    let mut rows_ahead = Vec::new();
    let mut rows_phases = Vec::new();
    let mut rows_paired = Vec::new();
    let started = Instant::now();
    println!("| command | rounds | bare | direct (test-run + host run) | mirrored + commit | direct / bare | mirrored / bare | mirrored − bare | its commit | mirrored − bare − commit |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // `-j N` takes cargo's own choice of order out of the build's time: with two jobs it starts
    // the six dependencies in an order of its own hash map's, and the round's time follows
    // when the largest one (memchr) started — ±100 ms on this crate, more than the mirror costs.
    let build = match std::env::var("RUNS_BENCH_JOBS") {
        Ok(n) if n.parse::<u32>().is_ok_and(|n| n > 0) => format!("cargo build --offline -j {n}"),
        Ok(n) => panic!("RUNS_BENCH_JOBS must be a positive number, not {n:?}"),
        Err(_) => "cargo build --offline".to_string(),
    };
    for (command, n, warmup) in [("sh noop.sh", n_true, 3), (build.as_str(), n_build, 1)] {
        if n == 0 {
            continue;
        }
        let mut times: [Vec<Duration>; 3] = Default::default();
        // Per mirrored call: its own commit time, and the call less it.
        let (mut commits, mut less_commit) = (Vec::new(), Vec::new());
        // Of the mirrored runs: built ahead, and whether the daemon said at all.
        let (mut ahead, mut watched, mut recorded) = (0, 0, true);
        // Of the mirrored runs: the setup on the path, the command, the effects' walk, and the
        // call less its commit and its command (what the mirror cost around the command).
        let mut phases: [Vec<Duration>; 4] = Default::default();
        // Per round with both: (bare, mirrored − commit, the command in the mirror), in ms —
        // the same round's calls run seconds apart, so their differences keep out the drift of
        // the machine between rounds (the bare build alone moved by a third between runs).
        let mut paired: Vec<(f64, f64, Option<f64>)> = Vec::new();
        let order = [Path3::Bare, Path3::Direct, Path3::Mirrored];
        for round in 0..n + warmup {
            let (mut bare_now, mut mirrored_now) = (None, None);
            for k in 0..3 {
                let path = order[(round + k) % 3];
                if !paths.contains(&path) {
                    continue;
                }
                let proj = match path {
                    Path3::Bare => &bare,
                    Path3::Direct => &direct,
                    Path3::Mirrored => &mirrored,
                };
                for d in [proj.join("target"), proj.join(".cargo-home")] {
                    let _ = std::fs::remove_dir_all(d);
                }
                if let Some(name) = &replace {
                    let tmp = proj.join(format!("{name}.new"));
                    std::fs::write(&tmp, format!("TOKEN={round}\n")).unwrap();
                    std::fs::rename(&tmp, proj.join(name)).unwrap();
                }
                std::thread::sleep(gap);
                let t = b.once(path, proj, command);
                if round >= warmup {
                    times[path as usize].push(t);
                    if path == Path3::Bare {
                        bare_now = Some(t);
                    }
                    if path == Path3::Mirrored && read_commits {
                        let (c, built_ahead, watched_walk, timed) =
                            b.last_commit(&cmdgate, proj, command);
                        if let Some(p) = timed {
                            for (all, one) in phases.iter_mut().zip(p) {
                                all.push(one);
                            }
                            phases[3].push(t.saturating_sub(c).saturating_sub(p[1]));
                        }
                        ahead += usize::from(built_ahead == Some(true));
                        watched += usize::from(watched_walk);
                        recorded &= built_ahead.is_some();
                        commits.push(c);
                        less_commit.push(t.saturating_sub(c));
                        mirrored_now = Some((t.saturating_sub(c), timed.map(|p| p[1])));
                    }
                }
            }
            if let (Some(bare), Some((less, ran))) = (bare_now, mirrored_now) {
                let ms = |d: Duration| d.as_secs_f64() * 1e3;
                paired.push((ms(bare), ms(less), ran.map(ms)));
            }
        }
        if let Some(raw) = std::env::var_os("RUNS_BENCH_RAW") {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&raw)
                .unwrap_or_else(|e| panic!("RUNS_BENCH_RAW {}: {e}", raw.to_string_lossy()));
            for (bare, less, ran) in &paired {
                let ran = ran.map_or("-".to_owned(), |r| format!("{r:.3}"));
                writeln!(f, "{command}\t{bare:.3}\t{less:.3}\t{ran}").unwrap();
            }
        }
        if !paired.is_empty() {
            let med = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let over: Vec<f64> = paired.iter().map(|(b, l, _)| l - b).collect();
            let within = over.iter().filter(|d| **d <= 15.0).count();
            let ran: Vec<f64> = paired
                .iter()
                .filter_map(|(b, _, r)| r.map(|r| r - b))
                .collect();
            rows_paired.push(format!(
                "| `{command}` | {} | {:+.1} ms | {within} of {} | {} |",
                paired.len(),
                med(over),
                paired.len(),
                if ran.is_empty() {
                    "–".to_owned()
                } else {
                    format!("{:+.1} ms", med(ran))
                },
            ));
        }
        let [bare_t, direct_t, mirrored_t] = times.map(median);
        // A path not timed (`RUNS_BENCH_PATHS`) is a dash, and so is every ratio to it.
        let cell = |d: Option<Duration>| d.map_or("–".to_owned(), |d| format!("{} ms", ms(d)));
        let ratio = |d: Option<Duration>| match (d, bare_t) {
            (Some(d), Some(b)) => format!("{:.2}×", d.as_secs_f64() / b.as_secs_f64()),
            _ => "–".to_owned(),
        };
        let over = |d: Option<Duration>| match (d, bare_t) {
            (Some(d), Some(b)) => format!("{:+.1} ms", (d.as_secs_f64() - b.as_secs_f64()) * 1e3),
            _ => "–".to_owned(),
        };
        println!(
            "| `{command}` | {n} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(bare_t),
            cell(direct_t),
            cell(mirrored_t),
            ratio(direct_t),
            ratio(mirrored_t),
            over(mirrored_t),
            median(commits).map_or("–".to_owned(), |c| format!(
                "{:.2} ms",
                c.as_secs_f64() * 1e3
            )),
            over(median(less_commit)),
        );
        if !phases[0].is_empty() {
            let [ready, ran, walk, around] = phases.map(median);
            let ms_of =
                |d: Option<Duration>| d.map_or("–".to_owned(), |d| format!("{} ms", ms(d)));
            rows_phases.push(format!(
                "| `{command}` | {} | {} | {} | {} | {} | {} |",
                ms_of(bare_t),
                ms_of(ran),
                match (ran, bare_t) {
                    (Some(r), Some(b)) =>
                        format!("{:+.1} ms", (r.as_secs_f64() - b.as_secs_f64()) * 1e3),
                    _ => "–".to_owned(),
                },
                ms_of(ready),
                ms_of(walk),
                ms_of(around),
            ));
        }
        if read_commits && paths.contains(&Path3::Mirrored) {
            rows_ahead.push(match recorded {
                true => format!(
                    "`{command}`: {ahead} of {n} (the secret walk kept by its watch: {watched})"
                ),
                false => format!("`{command}`: not recorded by this daemon"),
            });
        }
    }
    if !rows_phases.is_empty() {
        // The command's own time in the mirror against the whole bare call (bash's start
        // included): what the mirror slowed the command by, and what it cost around it.
        println!("\n| command | bare (whole call) | the command in the mirror | in the mirror − bare | setup on the run's path | effects' walk | mirrored − commit − command |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for row in &rows_phases {
            println!("{row}");
        }
    }
    if !rows_paired.is_empty() {
        // The same goal taken round by round: each mirrored call against the bare call of its
        // own round, then the median of those differences.
        println!("\n| command | rounds with both | median of (mirrored − commit − bare) | rounds within 15 ms | median of (the command in the mirror − bare) |");
        println!("|---|---:|---:|---:|---:|");
        for row in &rows_paired {
            println!("{row}");
        }
    }
    if !rows_ahead.is_empty() {
        println!(
            "\nmirrored runs whose mirror was built ahead: {}",
            rows_ahead.join(", ")
        );
    }
    if !gap.is_zero() {
        println!("gap before each call (untimed): {} ms", gap.as_millis());
    }
    println!(
        "\nload average (1/5/15 min) before: {load_before}; after: {} ({} s)",
        loadavg(),
        started.elapsed().as_secs()
    );
}
