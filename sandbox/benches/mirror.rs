//! Benchmark of the container mirror: a test-run of `true` against bare `true` and bubblewrap,
//! in a 1,000-file and a 100,000-file workspace, and the effects diff for 10 and 10,000 changes.
//! Medians over many runs, std::time only. Run as root: `cargo bench -p cmdgate-sandbox`.

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
