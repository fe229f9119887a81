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

mod common;

use std::path::Path;
use std::time::Instant;

use common::{decide_body, request, Daemon};

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
    daemon: Daemon,
}

fn start(name: &'static str, bin: &Path) -> Side {
    Side {
        name,
        daemon: Daemon::start(name, bin),
    }
}

/// `n` sequential routed decisions (`git push origin main`: tier 2 ⇒ ask, cached map, audited,
/// no test-run); each one's latency in microseconds.
fn round(side: &Side, first_id: usize, n: usize) -> Vec<f64> {
    (first_id..first_id + n)
        .map(|i| {
            let body = decide_body("ab", i, &side.daemon.proj);
            let t = Instant::now();
            assert_eq!(
                request(&side.daemon.socket, body.as_bytes()),
                200,
                "{}",
                side.name
            );
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
