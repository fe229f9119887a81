//! Whole-process benchmark of the hook: median wall time of `cmdgate-hook` vs `/bin/true` fed the
//! same stdin, alternating runs, per case; plus peak RSS (from `/usr/bin/time -f %M` when present).
//! Prints a Markdown table for `docs/benchmarks.md`. Run: `cargo bench -p cmdgate-hook`
//! (`HOOK_BENCH_RUNS=N` to change the number of runs per program, default 300; `HOOK_BENCH_BIN=path`
//! to measure another build of the hook, e.g. the static one).

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

/// One case: a name and the Bash command the hook is asked about.
const CASES: &[(&str, &str)] = &[
    ("`ls -la` (read, local allow)", "ls -la"),
    ("`git status` (read, local allow)", "git status"),
    (
        "400-char compound read (local allow)",
        "git status --short && git log --oneline -20 | head -5; ls -la src | grep -v target | sort | \
         uniq -c | head -20; cat Cargo.toml | grep -E '^(name|version)'; grep -rn 'fn main' src | \
         head -3; git diff --stat HEAD | tail -1; head -n 20 README.md | wc -l; wc -l src/main.rs \
         src/lib.rs | sort -n; git branch --list | head; test -f Cargo.lock && echo locked; \
         git show --stat HEAD | head -3; ls -1 docs | head -3",
    ),
    (
        "`grep -rn TODO .` (recursive search of the project root: one-level listing, local allow)",
        "grep -rn TODO .",
    ),
    ("`rm -rf build` (denied: daemon absent)", "rm -rf build"),
];

fn run_once(program: &Path, env: &[(String, String)], stdin: &[u8]) -> (Duration, Vec<u8>) {
    let start = Instant::now();
    let mut child = Command::new(program)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut pipe = child.stdin.take().expect("stdin");
    // /bin/true does not read its stdin; a small input fits in the pipe buffer either way.
    let _ = pipe.write_all(stdin);
    drop(pipe);
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_end(&mut out)
        .expect("read");
    let status = child.wait().expect("wait");
    let took = start.elapsed();
    assert!(status.success(), "{} exited {status:?}", program.display());
    (took, out)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn p90(v: &mut [Duration]) -> Duration {
    v.sort();
    v[(v.len() * 9) / 10]
}

/// Peak RSS in KiB of one run, via GNU time.
fn peak_rss_kib(program: &Path, env: &[(String, String)], stdin: &[u8]) -> Option<u64> {
    let time = Path::new("/usr/bin/time");
    if !time.exists() {
        return None;
    }
    let mut child = Command::new(time)
        .args(["-f", "%M"])
        .arg(program)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let mut pipe = child.stdin.take()?;
    let _ = pipe.write_all(stdin);
    drop(pipe);
    let out = child.wait_with_output().ok()?;
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()?
        .trim()
        .parse()
        .ok()
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let runs: usize = std::env::var("HOOK_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let other = std::env::var_os("HOOK_BENCH_BIN").map(std::path::PathBuf::from);
    let hook = other
        .as_deref()
        .unwrap_or(Path::new(env!("CARGO_BIN_EXE_cmdgate-hook")));
    let truth = Path::new("/bin/true");
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("src")).expect("mkdir");
    let env: Vec<(String, String)> = vec![
        ("PATH".into(), "/usr/bin:/bin".into()),
        ("HOME".into(), dir.path().join("home").display().to_string()),
        (
            "CMDGATE_SOCKET".into(),
            dir.path().join("absent.sock").display().to_string(),
        ),
        (
            "CMDGATE_SPOOL_DIR".into(),
            dir.path().join("spool").display().to_string(),
        ),
        (
            "CMDGATE_CONFIG_DIR".into(),
            dir.path().join("config").display().to_string(),
        ),
        ("CLAUDE_PROJECT_DIR".into(), work.display().to_string()),
    ];

    println!("hook: {}", hook.display());
    println!("{runs} alternating runs per program and case, after 20 warm-up runs each\n");
    println!("| case | decision | hook median | hook p90 | /bin/true median | ratio (medians) | hook peak RSS | /bin/true peak RSS |");
    println!("|---|---|---|---|---|---|---|---|");
    for (name, command) in CASES {
        let stdin = serde_json::to_vec(&json!({
            "session_id": "bench", "transcript_path": "/dev/null", "cwd": work.display().to_string(),
            "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": command, "description": "bench"}, "tool_use_id": "toolu_bench",
        }))
        .expect("encode");
        for _ in 0..20 {
            run_once(hook, &env, &stdin);
            run_once(truth, &env, &stdin);
        }
        let (mut h, mut t) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
        let mut decision = String::new();
        for _ in 0..runs {
            let (d, out) = run_once(hook, &env, &stdin);
            h.push(d);
            if decision.is_empty() {
                let v: serde_json::Value = serde_json::from_slice(&out).expect("hook answers JSON");
                decision = v["hookSpecificOutput"]["permissionDecision"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string();
            }
            t.push(run_once(truth, &env, &stdin).0);
        }
        let (hm, tm) = (median(&mut h), median(&mut t));
        let rss =
            |p| peak_rss_kib(p, &env, &stdin).map_or("n/a".to_string(), |k| format!("{k} KiB"));
        println!(
            "| {name} | {decision} | {} | {} | {} | {:.2}× | {} | {} |",
            us(hm),
            us(p90(&mut h)),
            us(tm),
            hm.as_secs_f64() / tm.as_secs_f64(),
            rss(hook),
            rss(truth),
        );
    }
}
