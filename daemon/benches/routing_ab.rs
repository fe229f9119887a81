//! A/B routing benchmark (harness = false): two release builds of the daemon side by side on the
//! same machine, decision latency through the decide socket measured in interleaved rounds, so a
//! load change on a shared machine hits both alike. Median per side over every decision, and the
//! median of the per-round ratios. Prints a Markdown table for docs/benchmarks.md.
//!
//! Each side is a directory holding its own release `cmdgated` and `cmdgate` (each side's
//! `cmdgate init --sign` writes its own config, keys and signed starter map):
//!
//! ```text
//! CMDGATE_AB_BASE=/path/to/base/bin CMDGATE_AB_NEW=/path/to/new/bin \
//!     cargo bench -p cmdgate-daemon --bench routing_ab
//! ```
//!
//! Optional: `CMDGATE_AB_ROUNDS` (default 40), `CMDGATE_AB_PER_ROUND` (default 50 decisions).
//! Without both directories it says how to run it and measures nothing.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One side: a running daemon of one build with its own store, keys and signed map.
struct Side {
    name: &'static str,
    child: std::process::Child,
    socket: PathBuf,
    proj: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Side {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(name: &'static str, bin: &Path) -> Side {
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
    let mut init = Command::new(bin.join("cmdgate"));
    init.args(["init", "--sign", "--project"]).arg(&proj);
    env(&mut init);
    assert!(
        init.output().unwrap().status.success(),
        "{name}: cmdgate init --sign failed"
    );
    let mut cmd = Command::new(bin.join("cmdgated"));
    env(&mut cmd);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let child = cmd.spawn().unwrap();
    let start = Instant::now();
    while UnixStream::connect(data.join("admin.sock")).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{name}: cmdgated did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    Side {
        name,
        child,
        socket: data.join("cmdgate.sock"),
        proj,
        _dir: dir,
    }
}

/// `n` sequential routed decisions (`git push origin main`: tier 2 ⇒ ask, cached map, audited,
/// no test-run); each one's latency in microseconds.
fn round(side: &Side, first_id: usize, n: usize) -> Vec<f64> {
    (first_id..first_id + n)
        .map(|i| {
            let body = format!(
                r#"{{"v":1,"event":"PreToolUse","session_id":"ab-{}","tool_use_id":"ab{i}","cwd":"{}","project_dir":"{}","tool_name":"Bash","tool_input":{{"command":"git push origin main"}}}}"#,
                i % 8,
                side.proj.display(),
                side.proj.display()
            );
            let t = Instant::now();
            assert_eq!(request(&side.socket, body.as_bytes()), 200, "{}", side.name);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

fn main() {
    let (Some(base), Some(new)) = (
        std::env::var_os("CMDGATE_AB_BASE"),
        std::env::var_os("CMDGATE_AB_NEW"),
    ) else {
        println!(
            "routing_ab: set CMDGATE_AB_BASE and CMDGATE_AB_NEW to directories holding a release \
             cmdgated and cmdgate each (see the file's header); nothing measured"
        );
        return;
    };
    let num = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let rounds = num("CMDGATE_AB_ROUNDS", 40).max(1);
    let per = num("CMDGATE_AB_PER_ROUND", 50).max(1);
    let sides = [
        start("base", Path::new(&base)),
        start("new", Path::new(&new)),
    ];
    // Warm-up: map verified and cached, store pages hot.
    for (k, s) in sides.iter().enumerate() {
        round(s, 1_000_000 * (k + 1), 50);
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut all: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut ratios = Vec::new();
    let mut id = 0;
    for r in 0..rounds {
        // Alternate which side goes first, so neither always follows the other.
        let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut med = [0.0; 2];
        for k in order {
            let mut lat = round(&sides[k], id, per);
            id += per;
            med[k] = median(&mut lat);
            all[k].extend(lat);
        }
        ratios.push(med[1] / med[0]);
    }
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let [mut b, mut n] = all;
    let (mb, mn) = (median(&mut b), median(&mut n));
    let mr = median(&mut ratios);
    let (lo, hi) = (
        ratios[ratios.len() / 10],
        ratios[ratios.len() - 1 - ratios.len() / 10],
    );
    println!("## Routing A/B\n");
    println!(
        "{rounds} interleaved rounds of {per} sequential routed decisions per side (`git push \
         origin main`, tier 2 ⇒ ask, cached map, audited, no test-run); load average before \
         `{}`, after `{}`.\n",
        load.trim(),
        load_after.trim()
    );
    println!("| side | decisions | median µs |");
    println!("|---|---:|---:|");
    println!("| base | {} | {mb:.0} |", b.len());
    println!("| new | {} | {mn:.0} |", n.len());
    println!(
        "\nnew/base, median of the per-round median ratios: {mr:.3} (10th–90th percentile of the \
         rounds: {lo:.3}–{hi:.3})"
    );
}
