//! Whole-process benchmark of the hook against the floor any hook can reach: a static C program
//! that reads its stdin and prints `{}`. Same stdin, a signed starter `CLAUDE_CMDS.md` in the
//! project with its key pinned and its revision published (the normal case: tier 0 vouches, the
//! replay record is read), daemon absent (the denial is the fail-closed path). Alternating runs
//! (floor, hook, floor, hook …), medians and their ratio in the same run, peak RSS from
//! `/usr/bin/time -f %M`; with `HOOK_BENCH_CALLGRIND=1` also the instructions of one run of each
//! under callgrind (independent of machine load). Prints a Markdown table for docs/benchmarks.md,
//! then what one minor page fault and one `statx` cost on this machine (a small static C program),
//! the units of what the hook still does beyond the floor, and the load average at the end.
//!
//! Run: `cargo bench -p cmdgate-hook --bench floor` (`HOOK_BENCH_RUNS=N`, default 400;
//! `HOOK_BENCH_BIN=path` to measure another build of the hook, e.g. the one `cargo build
//! --release` made, or `path:path…` to measure several in the same runs (floor, first, second …
//! in turn, a row each), for a before/after on a loaded machine; `HOOK_BENCH_DIR=dir` builds the project there and keeps it, with each case's
//! stdin as `case-N.json` and its environment as `env`, for `strace` or `perf` by hand). Needs
//! `cc` with a static libc (`libc6-dev`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cmdgate_policy::tiermap::published::{self, Published};
use cmdgate_policy::tiermap::{self, PinnedKeys, SeenRevision, STARTER_MAP};
use ed25519_dalek::SigningKey;
use serde_json::json;

/// The 400-character compound read (the same string as `benches/hook.rs`).
const COMPOUND: &str =
    "git status --short && git log --oneline -20 | head -5; ls -la src | grep -v target | sort | \
     uniq -c | head -20; cat Cargo.toml | grep -E '^(name|version)'; grep -rn 'fn main' src | \
     head -3; git diff --stat HEAD | tail -1; head -n 20 README.md | wc -l; wc -l src/main.rs \
     src/lib.rs | sort -n; git branch --list | head; test -f Cargo.lock && echo locked; \
     git show --stat HEAD | head -3; ls -1 docs | head -3";

/// Cases: name, command, goal (hook median / floor median).
const CASES: &[(&str, &str, f64)] = &[
    ("`ls -la`", "ls -la", 1.2),
    ("`git status`", "git status", 1.2),
    ("400-char compound read", COMPOUND, 1.4),
    (
        "denial (`rm -rf build`, daemon absent)",
        "rm -rf build",
        1.3,
    ),
];

const FLOOR_C: &str = r#"#include <unistd.h>
int main(void) {
    char buf[65536];
    while (read(0, buf, sizeof buf) > 0) {}
    write(1, "{}\n", 3);
    return 0;
}
"#;

/// What one unit of the hook's remaining excess over the floor costs in this machine: a minor page
/// fault (an anonymous page's first touch, and a private file page's first write: the static-PIE
/// relocation's kind), and one `statx` of a path (what each of cmdgate's own paths costs to
/// resolve). Medians of 201 rounds of 64 (16 for file pages).
const COST_C: &str = r#"#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
    enum { REPS = 201, PAGES = 64, FILE_PAGES = 16, STATS = 64 };
    static double anon[REPS], file[REPS], stx[REPS];
    for (int r = 0; r < REPS; r++) {
        char *p = mmap(0, PAGES * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        double t0 = now();
        for (int i = 0; i < PAGES; i++) p[i * 4096] = 1;
        anon[r] = (now() - t0) / PAGES;
        munmap(p, PAGES * 4096);
        int fd = open(argv[0], O_RDONLY);
        char *q = mmap(0, FILE_PAGES * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        t0 = now();
        for (int i = 0; i < FILE_PAGES; i++) q[i * 4096] ^= 1;
        file[r] = (now() - t0) / FILE_PAGES;
        munmap(q, FILE_PAGES * 4096);
        close(fd);
        struct statx sx;
        t0 = now();
        for (int i = 0; i < STATS; i++) statx(AT_FDCWD, argv[1], AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx);
        stx[r] = (now() - t0) / STATS;
    }
    qsort(anon, REPS, sizeof *anon, cmp); qsort(file, REPS, sizeof *file, cmp); qsort(stx, REPS, sizeof *stx, cmp);
    printf("%.0f %.0f %.0f\n", anon[REPS / 2], file[REPS / 2], stx[REPS / 2]);
    return 0;
}
"#;

/// Builds and runs [`COST_C`] in `dir` (`statx` of `path`): nanoseconds of an anonymous fault, a
/// file page's copy-on-write fault and a `statx`.
fn unit_costs(dir: &Path, path: &Path) -> Option<(u64, u64, u64)> {
    let src = dir.join("cost.c");
    let bin = dir.join("cost");
    std::fs::write(&src, COST_C).ok()?;
    let built = Command::new("cc")
        .args(["-O2", "-static", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .ok()?;
    if !built.success() {
        return None;
    }
    let out = Command::new(&bin).arg(path).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v = text.split_whitespace().filter_map(|n| n.parse().ok());
    Some((v.next()?, v.next()?, v.next()?))
}

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
    pipe.write_all(stdin).expect("write stdin");
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

/// Runs `program` under `wrapper` (`/usr/bin/time -f %M`, callgrind) and returns its stderr.
fn wrapped(
    wrapper: &[&str],
    program: &Path,
    env: &[(String, String)],
    stdin: &[u8],
) -> Option<String> {
    let mut child = Command::new(wrapper[0])
        .args(&wrapper[1..])
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
    Some(String::from_utf8_lossy(&out.stderr).into_owned())
}

fn peak_rss_kib(program: &Path, env: &[(String, String)], stdin: &[u8]) -> Option<u64> {
    wrapped(&["/usr/bin/time", "-f", "%M"], program, env, stdin)?
        .lines()
        .last()?
        .trim()
        .parse()
        .ok()
}

/// Instructions executed by one run (callgrind's `Collected`), all threads; the profile goes to
/// `$HOOK_BENCH_CALLGRIND_OUT` (for `callgrind_annotate`), else nowhere.
fn instructions(program: &Path, env: &[(String, String)], stdin: &[u8]) -> Option<u64> {
    let err = wrapped(
        &[
            "valgrind",
            "--tool=callgrind",
            &format!(
                "--callgrind-out-file={}",
                std::env::var("HOOK_BENCH_CALLGRIND_OUT").unwrap_or_else(|_| "/dev/null".into())
            ),
        ],
        program,
        env,
        stdin,
    )?;
    let line = err.lines().find(|l| l.contains("Collected :"))?;
    line.rsplit(':').next()?.trim().parse().ok()
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// Builds the floor program (static) in `dir`.
fn build_floor(dir: &Path) -> PathBuf {
    let src = dir.join("floor.c");
    let bin = dir.join("floor");
    std::fs::write(&src, FLOOR_C).expect("write floor.c");
    let status = Command::new("cc")
        .args(["-O2", "-static", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(
        status.success(),
        "cc -static failed (is libc6-dev installed?)"
    );
    bin
}

/// A project with the signed starter map, the key pinned and the revision published as accepted.
fn signed_project(root: &Path, work: &Path) {
    for sub in ["src", "docs"] {
        std::fs::create_dir_all(work.join(sub)).expect("mkdir");
    }
    std::fs::create_dir_all(work.join(".git")).expect("mkdir .git");
    let key = SigningKey::from_bytes(&[7; 32]);
    let signed = tiermap::sign(STARTER_MAP, "cmdgate-tiermap", 1, &key).expect("sign");
    std::fs::write(work.join(tiermap::FILE_NAME), &signed).expect("write map");
    let mut keys = PinnedKeys::new();
    keys.pin("cmdgate-tiermap", 1, key.verifying_key())
        .expect("pin");
    std::fs::create_dir_all(root.join("config")).expect("mkdir config");
    std::fs::write(root.join("config/trusted-keys"), keys.to_file_string()).expect("keys");
    let verified = tiermap::verify(&signed, &keys).expect("the map verifies");
    let canon = std::fs::canonicalize(work).expect("canonicalize");
    let record = published::render(&[Published {
        root: canon.display().to_string(),
        seen: SeenRevision {
            revision: verified.revision,
            content_hash: verified.content_hash,
        },
    }]);
    std::fs::create_dir_all(root.join("data")).expect("mkdir data");
    std::fs::write(root.join("data/tiermap-revisions"), record).expect("revisions");
}

fn main() {
    let runs: usize = std::env::var("HOOK_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let hooks: Vec<PathBuf> = match std::env::var("HOOK_BENCH_BIN") {
        Ok(list) => list.split(':').map(PathBuf::from).collect(),
        Err(_) => vec![PathBuf::from(env!("CARGO_BIN_EXE_cmdgate-hook"))],
    };
    let callgrind = std::env::var_os("HOOK_BENCH_CALLGRIND").is_some_and(|v| v == "1");
    let dir = tempfile::tempdir().expect("tempdir");
    let kept = std::env::var_os("HOOK_BENCH_DIR").map(PathBuf::from);
    if let Some(k) = &kept {
        std::fs::create_dir_all(k).expect("HOOK_BENCH_DIR");
    }
    let root = kept.as_deref().unwrap_or(dir.path());
    let floor = build_floor(root);
    let work = root.join("work");
    signed_project(root, &work);
    let path = |rel: &str| root.join(rel).display().to_string();
    let env: Vec<(String, String)> = vec![
        ("PATH".into(), "/usr/bin:/bin".into()),
        ("HOME".into(), path("home")),
        ("CMDGATE_SOCKET".into(), path("absent.sock")),
        ("CMDGATE_SPOOL_DIR".into(), path("spool")),
        ("CMDGATE_CONFIG_DIR".into(), path("config")),
        ("CMDGATE_HOME".into(), path("data")),
        ("CLAUDE_PROJECT_DIR".into(), work.display().to_string()),
    ];
    if kept.is_some() {
        let lines: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(root.join("env"), lines.concat()).expect("write env");
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    for (i, hook) in hooks.iter().enumerate() {
        println!("hook {}: {}", i + 1, hook.display());
    }
    println!(
        "{runs} alternating runs per program and case after 20 warm-up runs; load average at start: {}\n",
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    println!("| case | decision | hook median | floor median | ratio | goal | hook peak RSS | floor peak RSS | instructions hook / floor |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (case, (name, command, goal)) in CASES.iter().enumerate() {
        let stdin = serde_json::to_vec(&json!({
            "session_id": "bench", "transcript_path": "/dev/null", "cwd": work.display().to_string(),
            "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": command, "description": "bench"}, "tool_use_id": "toolu_bench",
        }))
        .expect("encode");
        if kept.is_some() {
            std::fs::write(root.join(format!("case-{case}.json")), &stdin).expect("write stdin");
        }
        for _ in 0..20 {
            run_once(&floor, &env, &stdin);
            for hook in &hooks {
                run_once(hook, &env, &stdin);
            }
        }
        let mut f = Vec::with_capacity(runs);
        let mut h: Vec<Vec<Duration>> = vec![Vec::with_capacity(runs); hooks.len()];
        let mut decisions = vec![String::new(); hooks.len()];
        for _ in 0..runs {
            f.push(run_once(&floor, &env, &stdin).0);
            for (i, hook) in hooks.iter().enumerate() {
                let (d, out) = run_once(hook, &env, &stdin);
                h[i].push(d);
                if decisions[i].is_empty() {
                    let v: serde_json::Value =
                        serde_json::from_slice(&out).expect("hook answers JSON");
                    decisions[i] = v["hookSpecificOutput"]["permissionDecision"]
                        .as_str()
                        .unwrap_or("?")
                        .to_string();
                }
            }
        }
        let fm = median(&mut f);
        let rss =
            |p| peak_rss_kib(p, &env, &stdin).map_or("n/a".to_string(), |k| format!("{k} KiB"));
        for (i, hook) in hooks.iter().enumerate() {
            let hm = median(&mut h[i]);
            let ir = if callgrind {
                match (
                    instructions(hook, &env, &stdin),
                    instructions(&floor, &env, &stdin),
                ) {
                    (Some(a), Some(b)) => format!("{a} / {b}"),
                    _ => "n/a".into(),
                }
            } else {
                "-".into()
            };
            let label = if hooks.len() > 1 {
                format!("{name} (hook {})", i + 1)
            } else {
                (*name).to_string()
            };
            println!(
                "| {label} | {} | {} | {} | {:.2}× | ≤ {goal}× | {} | {} | {ir} |",
                decisions[i],
                us(hm),
                us(fm),
                hm.as_secs_f64() / fm.as_secs_f64(),
                rss(hook),
                rss(&floor),
            );
        }
    }
    match unit_costs(root, &work.join(tiermap::FILE_NAME)) {
        Some((anon, file, statx)) => println!(
            "\nThis machine: a minor fault {anon} ns (anonymous page, first touch), {file} ns (a \
             private file page's first write, as a relocation makes); one statx {statx} ns."
        ),
        None => println!("\n(the unit costs need cc and a static libc)"),
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average at the end: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}
