//! Impact preview on a real-sized history (docs/benchmarks.md, "## Impact preview"): fills a temp
//! store with 10,000 audited requests (a mix of reads, builds, tier-2 and tier-3 commands, other
//! tools), then replays them through the pure policy under the starter map and a broadened map
//! (`git reset *` and `cargo publish *` moved from ask to sandbox, `curl *` to read, `rm *` added
//! to deny) — reading the rows included — and prints the time and the differences.
//!
//! `cargo bench -p cmdgate-daemon --bench preview` (size via `CMDGATE_PREVIEW_BENCH_ROWS`).

use std::time::Instant;

use cmdgate_daemon::engine::preview::{self, Fixed, Side};
use cmdgate_daemon::store::audit::{self, Entry, Kind};
use cmdgate_daemon::store::{open_db, open_read_only, DB_FILE};
use cmdgate_policy::decide::RuleSet;
use cmdgate_policy::tiermap::{self, Snapshot, VerifiedMap, STARTER_MAP};

const COMMANDS: &[&str] = &[
    "git status",
    "git reset --soft HEAD~1",
    "cargo build --release",
    "cargo test -p api",
    "cargo publish --dry-run",
    "curl -fsSL https://example.com/data.json",
    "rm -rf target",
    "ls -la src",
    "npm install left-pad",
    "python3 scripts/gen.py --out build",
    "git push origin main",
    "make -j4 all",
    "grep -rn TODO src",
    "docker compose up -d",
];

fn snapshot(text: &str) -> Snapshot {
    let map = tiermap::parse(text).expect("map");
    Snapshot::Verified(VerifiedMap {
        revision: map.revision,
        map,
        key: "bench".into(),
        key_version: 1,
        content_hash: tiermap::content_hash(text),
    })
}

fn main() {
    let n: usize = std::env::var("CMDGATE_PREVIEW_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join(DB_FILE);
    let project = "/srv/shop";
    {
        let mut conn = open_db(&db).unwrap();
        let tx = conn.transaction().unwrap();
        for i in 0..n {
            let (tool, command, input) = if i % 10 == 9 {
                let path = format!("/srv/shop/src/m{}.rs", i % 50);
                (
                    "Read",
                    path.clone(),
                    serde_json::json!({ "file_path": path }),
                )
            } else {
                let c = format!("{} # {}", COMMANDS[i % COMMANDS.len()], i % 300);
                ("Bash", c.clone(), serde_json::json!({ "command": c }))
            };
            audit::append(
                &tx,
                Entry {
                    at_ms: 1_700_000_000_000 + i as i64,
                    kind: Kind::Decision,
                    session: Some(format!("session-{}", i % 31)),
                    tool_use_id: Some(format!("toolu_{i:010}")),
                    cwd: Some(format!("{project}/services/api")),
                    project: Some(project.into()),
                    tool: Some(tool.into()),
                    tool_input: Some(input.to_string()),
                    command: Some(command),
                    decision: Some(cmdgate_policy::wire::Verdict::Ask.into()),
                    ..Entry::default()
                },
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let broadened = STARTER_MAP
        .replace("- `git reset *`\n", "")
        .replace("- `cargo publish *`\n", "")
        .replace("- `curl *`\n", "")
        .replace(
            "## Tier 1 — sandbox\n",
            "## Tier 1 — sandbox\n\n- `git reset *`\n- `cargo publish *`\n\n",
        )
        .replace("## Tier 0 — read\n", "## Tier 0 — read\n\n- `curl *`\n\n")
        .replace("## Tier 3 — deny\n", "## Tier 3 — deny\n\n- `rm *`\n\n");
    let (old, new) = (snapshot(STARTER_MAP), snapshot(&broadened));
    let rules = RuleSet::new(Vec::new());
    let fixed = Fixed::new("/home/agent".into(), Vec::new(), &[]);

    let started = Instant::now();
    let cpu_before = on_cpu_ms();
    let conn = open_read_only(&db).unwrap();
    let history = preview::history(&conn, Some(project)).unwrap();
    let read = started.elapsed();
    let p = preview::preview(
        &history,
        &fixed,
        Side {
            snapshot: &old,
            rules: &rules,
        },
        Side {
            snapshot: &new,
            rules: &rules,
        },
        |_| true,
    );
    let total = started.elapsed();
    let cpu_ms = on_cpu_ms() - cpu_before;
    println!(
        "{} audited requests: read {:.0} ms, replayed under two maps in {:.0} ms, total {:.0} ms wall, \
         {cpu_ms:.0} ms on the CPU ({} skipped)",
        history.past.len(),
        read.as_secs_f64() * 1000.0,
        (total - read).as_secs_f64() * 1000.0,
        total.as_secs_f64() * 1000.0,
        p.skipped
    );
    println!(
        "{} would be decided differently ({} more permissive):",
        p.report.changed,
        p.report.more_permissive()
    );
    for g in &p.report.groups {
        println!(
            "  {:>8} -> {:<8} x{:<5} {}   e.g. #{} {}",
            g.from.as_str(),
            g.to.as_str(),
            g.count,
            g.pattern,
            g.examples[0].0,
            g.examples[0].1
        );
    }
}

/// This thread's time on a CPU, from `/proc/thread-self/schedstat` (the wall clock on a shared,
/// loaded machine says more about the neighbours than about the replay).
fn on_cpu_ms() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns / 1e6)
}
