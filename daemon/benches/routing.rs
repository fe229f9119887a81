//! Daemon benchmark (harness = false): routed decisions per second through the decide socket
//! (tier map cached, no test-run), and whole-process latency of a routed hook call against the
//! hook's local fast path. Prints a Markdown table for docs/benchmarks.md.
//!
//! Needs `cmdgate-hook` built in the same profile: `cargo build --release -p cmdgate-hook &&
//! cargo bench -p cmdgate-daemon --bench routing`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WARMUP: usize = 50;

fn request(socket: &Path, body: &[u8]) -> u16 {
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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

struct Daemon {
    child: std::process::Child,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main() {
    let cmdgated = PathBuf::from(env!("CARGO_BIN_EXE_cmdgated"));
    let cmdgate = PathBuf::from(env!("CARGO_BIN_EXE_cmdgate"));
    let hook = cmdgated.with_file_name("cmdgate-hook");
    assert!(
        hook.is_file(),
        "build the hook first: cargo build --release -p cmdgate-hook ({} missing)",
        hook.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let p = |s: &str| dir.path().join(s);
    let (home, conf, data, proj) = (p("home"), p("conf"), p("data"), p("proj"));
    for d in [&home, &conf, &data, &proj] {
        std::fs::create_dir_all(d).unwrap();
    }
    let env = |cmd: &mut Command| {
        for k in [
            "XDG_RUNTIME_DIR",
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
            "XDG_STATE_HOME",
            "CMDGATE_MODE",
        ] {
            cmd.env_remove(k);
        }
        cmd.env("HOME", &home)
            .env("CMDGATE_HOME", &data)
            .env("CMDGATE_CONFIG_DIR", &conf)
            .env("CMDGATE_SPOOL_DIR", p("spool"))
            .env("CLAUDE_PROJECT_DIR", &proj);
    };
    let mut init = Command::new(&cmdgate);
    init.args(["init", "--sign", "--project"]).arg(&proj);
    env(&mut init);
    assert!(
        init.output().unwrap().status.success(),
        "cmdgate init --sign failed"
    );
    let mut cmd = Command::new(&cmdgated);
    env(&mut cmd);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let _daemon = Daemon {
        child: cmd.spawn().unwrap(),
    };
    let socket = data.join("cmdgate.sock");
    let start = Instant::now();
    while UnixStream::connect(data.join("admin.sock")).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "cmdgated did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // 1. Routed decisions per second: a tier 2 ask in a signed, cached map (no test-run; an ask
    //    is no breaker signal, so the breakers stay closed for part 2).
    let body = |i: usize| {
        format!(
            r#"{{"v":1,"event":"PreToolUse","session_id":"bench-{}","tool_use_id":"b{i}","cwd":"{}","project_dir":"{}","tool_name":"Bash","tool_input":{{"command":"git push origin main"}}}}"#,
            i % 8,
            proj.display(),
            proj.display()
        )
    };
    for i in 0..WARMUP {
        assert_eq!(request(&socket, body(i).as_bytes()), 200);
    }
    println!("## Daemon\n");
    println!("| measurement | clients | requests | per second | p50 ms | p99 ms |");
    println!("|---|---:|---:|---:|---:|---:|");
    for clients in [1usize, 4, 16] {
        let per = 2000 / clients;
        let started = Instant::now();
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let socket = socket.clone();
                let bodies: Vec<String> = (0..per).map(|i| body(100_000 * (c + 1) + i)).collect();
                std::thread::spawn(move || {
                    bodies
                        .iter()
                        .map(|b| {
                            let t = Instant::now();
                            assert_eq!(request(&socket, b.as_bytes()), 200);
                            t.elapsed()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut lat: Vec<Duration> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let wall = started.elapsed();
        lat.sort();
        println!(
            "| routed decide (`git push`, tier 2 ⇒ ask; cached map, audited, no test-run) | {clients} | {} | {:.0} | {} | {} |",
            lat.len(),
            lat.len() as f64 / wall.as_secs_f64(),
            ms(percentile(&lat, 0.5)),
            ms(percentile(&lat, 0.99))
        );
    }

    // 2. Whole-process latency of the hook: fast path (a read) vs routed (a decision by the daemon).
    // Each row has its own session, so one row's denials cannot open the next row's breaker.
    let run_hook = |command: &str, id: usize| {
        let event = format!(
            r#"{{"session_id":"bench-{}","cwd":"{}","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{{"command":"{command}"}},"tool_use_id":"h{id}","permission_mode":"default"}}"#,
            command.len(),
            proj.display()
        );
        let mut cmd = Command::new(&hook);
        env(&mut cmd);
        cmd.env("CMDGATE_SOCKET", &socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let t = Instant::now();
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(event.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let elapsed = t.elapsed();
        assert!(out.status.success());
        (elapsed, String::from_utf8_lossy(&out.stdout).into_owned())
    };
    println!("\n| hook process, spawn to exit | calls | p50 ms | p99 ms | answer |");
    println!("|---|---:|---:|---:|---|");
    for (label, command) in [
        ("fast path: `ls -la` (read, no daemon)", "ls -la"),
        (
            "routed: `git push origin main` (tier 2 by the daemon, no test-run)",
            "git push origin main",
        ),
        ("routed: `touch x` (test-run in the mirror)", "touch x"),
    ] {
        let n = if command.starts_with("touch") {
            40
        } else {
            300
        };
        let mut lat = Vec::new();
        let mut answer = String::new();
        for i in 0..n {
            let (d, out) = run_hook(command, i);
            lat.push(d);
            answer = out;
        }
        lat.sort();
        let decision = answer
            .split("\"permissionDecision\":\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("?")
            .to_owned();
        println!(
            "| {label} | {n} | {} | {} | {decision} |",
            ms(percentile(&lat, 0.5)),
            ms(percentile(&lat, 0.99))
        );
    }
}
