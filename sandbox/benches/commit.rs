//! Benchmark of mirrored runs (issue 19): `true` bare, under bwrap, as today's test-run + real
//! run, and as a mirrored run (+ commit); then the commit of 10,000 new files (into an existing
//! directory: one rename each; as a new directory: one rename) and of a build's outputs (700
//! files, 39 MB, into existing directories and a new one). Medians over many runs, std::time
//! only. Run as root: `cargo bench -p cmdgate-sandbox --bench commit`; two builds side by side:
//! `sandbox/benches/commit_ab.sh` (this harness over the library of an older revision).

use cmdgate_sandbox::commit::{self, CommitConfig};
use cmdgate_sandbox::mirror::{self, MirrorCommand};
use cmdgate_sandbox::{HelperCommand, RunConfig};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time(runs: usize, mut f: impl FnMut()) -> Duration {
    f();
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

/// CPU time of this process (every thread, user and system): on a loaded machine the wall
/// time mostly measures the wait for a CPU; this does not.
fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn config(ws: &Path, state: &Path, home: &Path) -> RunConfig {
    let mut c = RunConfig::new(
        ws.to_path_buf(),
        state.to_path_buf(),
        HelperCommand {
            program: PathBuf::from(env!("CARGO_BIN_EXE_cmdgate-sandbox-helper")),
            args: vec![],
        },
    );
    c.home = Some(home.to_path_buf());
    c.limits.timeout = Duration::from_secs(600);
    c
}

fn cmd(ws: &Path, command: &str) -> MirrorCommand {
    MirrorCommand {
        command: command.into(),
        cwd: ws.to_path_buf(),
        env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
        since: None,
    }
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "the benchmark needs root");
    let root = tempfile::Builder::new()
        .prefix("cmdgate-bench-commit-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let (ws, state, home) = (
        root.path().join("ws"),
        root.path().join("state"),
        root.path().join("home"),
    );
    for d in [&ws, &state, &home] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    for i in 0..1000 {
        let dir = ws.join(format!("d{}", i / 100));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join(format!("f{i}.rs")), "// x\n").expect("write");
    }
    std::fs::create_dir(ws.join("target")).expect("mkdir");
    for d in ["deps", ".fingerprint", "build"] {
        std::fs::create_dir_all(ws.join("target/debug").join(d)).expect("mkdir");
    }
    let cfg = config(&ws, &state, &home);
    const RUNS: usize = 40;
    // `CMDGATE_BENCH_COMMIT_ONLY=1`: the commit table alone (and a short one under callgrind,
    // `CMDGATE_BENCH_ROUNDS=1`, with `--toggle-collect` on `commit::commit`).
    if std::env::var_os("CMDGATE_BENCH_COMMIT_ONLY").is_none() {
        bench_true(&cfg, &ws, RUNS);
    }
    bench_commit(&cfg, &ws, &state);
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn bench_true(cfg: &RunConfig, ws: &Path, runs: usize) {
    let load_before = loadavg();
    let cfg = cfg.clone();
    let ws = ws.to_path_buf();
    let runs_n = runs;

    let bare = time(runs_n, || {
        Command::new("true").status().expect("true");
    });
    let bwrap = Command::new("bwrap")
        .arg("--version")
        .output()
        .is_ok()
        .then(|| {
            time(runs_n, || {
                Command::new("bwrap")
                    .args(["--unshare-all", "--die-with-parent", "--ro-bind", "/", "/"])
                    .args([
                        "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--bind",
                    ])
                    .arg(&ws)
                    .arg(&ws)
                    .args(["--chdir"])
                    .arg(&ws)
                    .arg("true")
                    .stdout(Stdio::null())
                    .status()
                    .expect("bwrap");
            })
        });
    let test_run = time(runs_n, || {
        let r = cmdgate_sandbox::run(&cfg, "true").expect("test-run");
        assert!(r.clean);
    });
    let today = time(runs_n, || {
        let r = cmdgate_sandbox::run(&cfg, "true").expect("test-run");
        assert!(r.clean);
        Command::new("bash")
            .args(["-c", "true"])
            .status()
            .expect("real run");
    });
    let mirrored = time(runs_n, || {
        let fin = mirror::start(&cfg, &cmd(&ws, "true"))
            .and_then(|r| r.wait())
            .expect("mirrored run");
        assert!(fin.run.clean);
        fin.kept.discard().expect("discard");
    });
    // The daemon keeps a helper prepared for the next run (`mirror::Warm`): its exec, lock file
    // and cgroup joins happen before the command is known. Refilled untimed before each run.
    let warm = mirror::Warm::new();
    let mirrored_warm = median(
        (0..=runs_n)
            .map(|_| {
                warm.fill(&cfg).expect("prepare a helper");
                let t = Instant::now();
                let fin = mirror::start_with(&warm, &cfg, &cmd(&ws, "true"))
                    .and_then(|r| r.wait())
                    .expect("mirrored run");
                let took = t.elapsed();
                assert!(fin.run.clean);
                fin.kept.discard().expect("discard");
                took
            })
            .skip(1)
            .collect(),
    );
    let mirrored_commit = time(runs_n, || {
        let fin = mirror::start(&cfg, &cmd(&ws, "true"))
            .and_then(|r| r.wait())
            .expect("mirrored run");
        commit::commit(fin.kept, &CommitConfig::default()).expect("commit");
    });
    println!("| `true`, 1,000-file workspace | median of {runs_n} |");
    println!("|---|---|");
    println!("| bare `true` | {} |", ms(bare));
    println!(
        "| `bash -c true` bare | {} |",
        ms(time(runs_n, || {
            Command::new("bash")
                .args(["-c", "true"])
                .status()
                .expect("bash");
        }))
    );
    println!(
        "| `bwrap --unshare-all` `true` | {} |",
        bwrap.map_or("n/a".into(), ms)
    );
    println!("| test-run (cold helper) | {} |", ms(test_run));
    println!(
        "| today's path: test-run + real `bash -c true` | {} |",
        ms(today)
    );
    println!(
        "| mirrored run (start + wait + discard) | {} |",
        ms(mirrored)
    );
    println!(
        "| mirrored run, helper prepared ahead (start + wait + discard) | {} |",
        ms(mirrored_warm)
    );
    println!(
        "| mirrored run + commit (nothing to commit) | {} |",
        ms(mirrored_commit)
    );
    println!(
        "\nload average before/after the `true` rows: {load_before} / {}",
        loadavg()
    );
}

fn bench_commit(cfg: &RunConfig, ws: &Path, state: &Path) {
    let rounds: usize = std::env::var("CMDGATE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9);
    println!(
        "\n| commit of new files | median of {rounds} (commit only) | per file | CPU (process) |"
    );
    println!("|---|---|---|---|");
    for (what, script) in [
        (
            "into an existing directory (10,000 renames)",
            "cd target && seq 1 10000 | sed 's/^/o/' | xargs touch",
        ),
        (
            "as a new directory (1 rename; tree still validated)",
            "mkdir gen && cd gen && seq 1 10000 | sed 's/^/o/' | xargs touch",
        ),
        (
            "a build's outputs (700 files, 39 MB; 601 renames)",
            "cd target/debug && for i in $(seq 1 300); do head -c 131072 /dev/zero > \
             deps/libx$i.rlib; echo $i > .fingerprint/x$i; done && mkdir build/x && \
             for i in $(seq 1 100); do echo $i > build/x/o$i; done",
        ),
    ] {
        let (mut times, mut cpu) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let fin = mirror::start(cfg, &cmd(ws, script))
                .and_then(|r| r.wait())
                .expect("mirrored run");
            assert_eq!(fin.run.exit, Some(0));
            let (t, c) = (Instant::now(), process_cpu());
            let report = commit::commit(fin.kept, &CommitConfig::default()).expect("commit");
            times.push(t.elapsed());
            cpu.push(process_cpu().saturating_sub(c));
            // Put the workspace back for the next round (outside the timing).
            commit::undo(state, &report.run_id).expect("undo");
        }
        let m = median(times);
        let files = if what.starts_with("a build") {
            700.0
        } else {
            10_000.0
        };
        println!(
            "| {what} | {} | {:.1} µs | {} |",
            ms(m),
            m.as_secs_f64() * 1e6 / files,
            ms(median(cpu))
        );
    }
}
