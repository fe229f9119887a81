//! Daemon benchmark (harness = false): routed decisions per second through the decide socket
//! (tier map cached, no test-run), and whole-process latency of a routed hook call against the
//! hook's local fast path. Prints a Markdown table for docs/benchmarks.md.
//!
//! Needs `cmdgate-hook` built in the same profile: `cargo build --release -p cmdgate-hook &&
//! cargo bench -p cmdgate-daemon --bench routing`.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{decide_body, request, Daemon};

const WARMUP: usize = 50;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
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
    let bin_dir = cmdgated.parent().expect("the binaries' directory");
    assert_eq!(cmdgate.parent(), Some(bin_dir));
    let daemon = Daemon::start("cmdgated", bin_dir);
    let (socket, proj) = (daemon.socket.clone(), daemon.proj.clone());

    // 1. Routed decisions per second: a tier 2 ask in a signed, cached map (no test-run; an ask
    //    is no breaker signal, so the breakers stay closed for part 2).
    let body = |i: usize| decide_body("bench", i, &proj);
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
        common::env_of(daemon.dir.path(), &daemon.proj, &mut cmd);
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
