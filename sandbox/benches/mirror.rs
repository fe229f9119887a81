//! Benchmark of the container mirror: a test-run of `true` against bare `true` and bubblewrap,
//! in a 1,000-file and a 100,000-file workspace; the effects diff for 10 and 10,000 changes; and
//! what one file written costs a command in the mirror against the host (every write-open, as
//! every `mkdir`, `unlink` and `rename`, stops at pid 1's seccomp supervisor, which notes its
//! path), in a directory at the workspace's top and ten levels down.
//! Medians over many runs, std::time only. Run as root: `cargo bench -p cmdgate-sandbox`.
//! `MIRROR_BENCH_ONLY=writes` times only the writes; `MIRROR_BENCH_HELPER=PATH` runs another
//! build's `cmdgate-sandbox-helper` for them (pid 1 and its supervisor are the helper's code),
//! and `MIRROR_BENCH_BASE_HELPER=PATH` a second one beside it, as the baseline.

use cmdgate_sandbox::effects::{self, Layer};
use cmdgate_sandbox::{Area, HelperCommand, RunConfig};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 40;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time(runs: usize, mut f: impl FnMut()) -> Duration {
    f(); // warm-up (page cache, binaries)
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

/// A workspace of `files` small files, 1,000 per directory.
fn workspace(root: &Path, files: usize) -> PathBuf {
    let ws = root.join(format!("ws{files}"));
    for i in 0..files {
        let dir = ws.join(format!("d{}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&dir).expect("mkdir");
        }
        std::fs::write(dir.join(format!("f{i}.rs")), format!("// file {i}\n")).expect("write");
    }
    ws
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "the mirror benchmark needs root");
    let root = tempfile::Builder::new()
        .prefix("cmdgate-bench-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let state = root.path().join("state");
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).expect("mkdir");
    if std::env::var("MIRROR_BENCH_ONLY").is_ok_and(|o| o == "writes") {
        writes(root.path(), &state, &home);
        return;
    }
    let bwrap = Command::new("bwrap").arg("--version").output().is_ok();

    println!("| workspace | bare `true` | `bwrap --unshare-all` `true` | mirror run, cold helper | mirror run, warm helper | warm − bwrap |");
    println!("|---|---|---|---|---|---|");
    let mut mirror_times = Vec::new();
    for files in [1_000, 100_000] {
        let ws = workspace(root.path(), files);
        let bare = time(RUNS, || {
            Command::new("true").status().expect("true");
        });
        let bw = bwrap.then(|| {
            time(RUNS, || {
                let ok = Command::new("bwrap")
                    .args(["--unshare-all", "--die-with-parent", "--ro-bind", "/", "/"])
                    .args([
                        "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--bind",
                    ])
                    .arg(&ws)
                    .arg(&ws)
                    .arg("--chdir")
                    .arg(&ws)
                    .arg("true")
                    .stdout(Stdio::null())
                    .status()
                    .expect("bwrap");
                assert!(ok.success());
            })
        });
        let mut config = RunConfig::new(
            ws.clone(),
            state.clone(),
            HelperCommand {
                program: PathBuf::from(env!("CARGO_BIN_EXE_cmdgate-sandbox-helper")),
                args: vec![],
            },
        );
        config.home = Some(home.clone());
        let mirror = time(RUNS, || {
            let run = cmdgate_sandbox::run(&config, "true").expect("mirror run");
            assert!(run.clean, "{run:?}");
        });
        // Warm: the helper was started and joined its cgroups before the command was known.
        let warm = median(
            (0..RUNS)
                .map(|_| {
                    let prepared = cmdgate_sandbox::prepare(&config).expect("prepare");
                    let t = Instant::now();
                    let run = prepared.run(&config, "true").expect("mirror run");
                    let d = t.elapsed();
                    assert!(run.clean, "{run:?}");
                    d
                })
                .collect(),
        );
        mirror_times.push(warm);
        println!(
            "| {files} files | {} ms | {} ms | {} ms | {} ms | {} ms |",
            ms(bare),
            bw.map_or("n/a".into(), ms),
            ms(mirror),
            ms(warm),
            bw.map_or("n/a".into(), |b| format!(
                "{:+.2}",
                (warm.as_secs_f64() - b.as_secs_f64()) * 1000.0
            )),
        );
    }
    println!(
        "\nwarm mirror run, 100k/1k ratio: {:.2}\n",
        mirror_times[1].as_secs_f64() / mirror_times[0].as_secs_f64()
    );

    writes(root.path(), &state, &home);

    // The diff alone, over an upper dir shaped like overlayfs leaves it: half the changes are
    // new files, half are copied-up files whose content changed (size differs from the lower).
    println!("| changes | effects diff |");
    println!("|---|---|");
    for changes in [10, 10_000] {
        let lower = workspace(&root.path().join(format!("lower{changes}")), 20_000);
        let upper = root.path().join(format!("upper{changes}"));
        for i in 0..changes {
            let dir = upper.join(format!("d{}", (i / 2) / 1000));
            std::fs::create_dir_all(&dir).expect("mkdir");
            let name = if i % 2 == 0 {
                format!("f{}.rs", i / 2)
            } else {
                format!("new{i}.rs")
            };
            std::fs::write(dir.join(name), format!("// changed {i}, longer\n")).expect("write");
        }
        let prefix = PathBuf::new();
        let layer = Layer {
            area: Area::Workspace,
            upper: &upper,
            lower: Some(&lower),
            prefix: &prefix,
            premade: &[],
        };
        let mut count = 0;
        let d = time(if changes > 1000 { 15 } else { RUNS }, || {
            count = effects::diff(std::slice::from_ref(&layer)).len();
        });
        assert_eq!(count, changes);
        println!("| {changes} | {} ms |", ms(d));
    }
}

/// Files created by one `: > f$i` each, timed inside the command by bash (so the run's setup
/// does not count), at the top of the workspace and ten directories down: on the host (a fresh
/// directory in the system's temporary directory each round) and in the mirror, with this
/// build's helper and, when `MIRROR_BENCH_BASE_HELPER` names one, another build's, the rounds
/// alternating.
fn writes(root: &Path, state: &Path, home: &Path) {
    const FILES: usize = 2000;
    const ROUNDS: usize = 9;
    const DEEP: &str = "a/b/c/d/e/f/g/h/i/j";
    let script = format!(
        "t0=$EPOCHREALTIME; for i in $(seq {FILES}); do : > f$i; done; t1=$EPOCHREALTIME; \
         cd {DEEP} && for i in $(seq {FILES}); do : > f$i; done; t2=$EPOCHREALTIME; \
         echo $t0 $t1 $t2"
    );
    // Microseconds per file at the top and deep down, from the command's three stamps.
    let per_file = |stdout: &str| -> [f64; 2] {
        let t: Vec<f64> = stdout
            .split_whitespace()
            .map(|x| x.parse().expect("a time stamp"))
            .collect();
        assert_eq!(t.len(), 3, "{stdout}");
        let us = |a: f64, b: f64| (b - a) * 1e6 / FILES as f64;
        [us(t[0], t[1]), us(t[1], t[2])]
    };
    let ws = root.join("ws-writes");
    std::fs::create_dir_all(ws.join(DEEP)).expect("mkdir");
    let this = PathBuf::from(
        std::env::var_os("MIRROR_BENCH_HELPER")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_cmdgate-sandbox-helper").into()),
    );
    let mut helpers = vec![("mirror", this)];
    if let Some(base) = std::env::var_os("MIRROR_BENCH_BASE_HELPER") {
        helpers.push(("mirror, base helper", PathBuf::from(base)));
    }
    let configs: Vec<RunConfig> = helpers
        .iter()
        .map(|(_, program)| {
            let mut config = RunConfig::new(
                ws.clone(),
                state.to_path_buf(),
                HelperCommand {
                    program: program.clone(),
                    args: vec![],
                },
            );
            config.home = Some(home.to_path_buf());
            config
        })
        .collect();
    // [host, helper…] × rounds of [top, deep].
    let mut times: Vec<Vec<[f64; 2]>> = vec![Vec::new(); 1 + configs.len()];
    for round in 0..=ROUNDS {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join(DEEP)).expect("mkdir");
        let out = Command::new("bash")
            .args(["-c", &script])
            .current_dir(dir.path())
            .output()
            .expect("bash");
        if round > 0 {
            times[0].push(per_file(&String::from_utf8_lossy(&out.stdout)));
        }
        for k in 0..configs.len() {
            // The helpers' order alternates by round.
            let k = (k + round) % configs.len();
            let run = cmdgate_sandbox::run(&configs[k], &script).expect("mirror run");
            assert!(run.clean, "{run:?}");
            if round > 0 {
                times[1 + k].push(per_file(&run.stdout));
            }
        }
    }
    let med = |v: &[[f64; 2]], at: usize| {
        let mut x: Vec<f64> = v.iter().map(|t| t[at]).collect();
        x.sort_by(f64::total_cmp);
        x[x.len() / 2]
    };
    let mut head = format!("| one file written ({FILES} a run, {ROUNDS} runs) | host |");
    for (name, _) in &helpers {
        head.push_str(&format!(" {name} |"));
    }
    if helpers.len() == 2 {
        head.push_str(" mirror / base |");
    }
    println!("{head}");
    println!(
        "|---{}|",
        "|---:".repeat(1 + helpers.len() + usize::from(helpers.len() == 2))
    );
    for (name, at) in [("at the workspace's top", 0), ("ten directories down", 1)] {
        let mut row = format!("| {name} | {:.1} µs |", med(&times[0], at));
        for t in &times[1..] {
            row.push_str(&format!(" {:.1} µs |", med(t, at)));
        }
        if helpers.len() == 2 {
            row.push_str(&format!(
                " {:.2}× |",
                med(&times[1], at) / med(&times[2], at)
            ));
        }
        println!("{row}");
    }
    println!();
}
