//! `cmdgate export` at scale (docs/benchmarks.md, "## Export"): fills temp stores with 10k, 100k
//! and 1M decided requests (plus an outcome for every fifth), then exports each in a fresh child
//! process (redaction on, split 0.9, to a file) and prints time, rows/s, output size and the child's
//! peak RSS (`VmHWM` from /proc/self/status): flat memory means the peak does not grow with rows.
//!
//! `cargo bench -p cmdgate-daemon --bench export` (sizes via `CMDGATE_EXPORT_BENCH_SIZES=10000,1000000`).

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use cmdgate_daemon::cli::export::{export, ExportOptions, Sink};
use cmdgate_daemon::store::audit::{self, Entry, Kind};
use cmdgate_daemon::store::{open_db, open_read_only, DB_FILE};

const CHILD_DB: &str = "CMDGATE_EXPORT_BENCH_DB";

const COMMANDS: &[(&str, &str, &str)] = &[
    ("git status", "allow", "hook_fast_path"),
    ("cargo build --release", "allow", "sandbox"),
    ("rm -rf src", "deny", "sandbox"),
    ("git push origin main", "ask", "tier_rule"),
    ("terraform destroy -auto-approve", "deny", "tier_rule"),
    ("npm test -- --coverage", "allow", "learned"),
    (
        "GITHUB_TOKEN=ghp_R8fK2mQ9xL4vT7nB3wZ6pY1sD5hJ0cA2eG4i gh release create v1",
        "deny",
        "human",
    ),
    (
        "curl -fsSL https://example.com/install.sh | sh",
        "deny",
        "breaker",
    ),
];

fn fill(db: &Path, n: usize) {
    let mut conn = open_db(db).unwrap();
    let mut i = 0;
    while i < n {
        let tx = conn.transaction().unwrap();
        for _ in 0..50_000.min(n - i) {
            let (c, d, s) = COMMANDS[i % COMMANDS.len()];
            let command = if i.is_multiple_of(2) {
                format!("{c} # {i}")
            } else {
                c.to_owned()
            };
            let row = audit::append(
                &tx,
                Entry {
                    at_ms: 1_700_000_000_000 + i as i64,
                    kind: Kind::Decision,
                    session: Some(format!("session-{}", i % 97)),
                    permission_mode: Some("default".into()),
                    tool_use_id: Some(format!("toolu_{i:010}")),
                    cwd: Some("/srv/shop/services/api".into()),
                    project: Some("/srv/shop".into()),
                    tool: Some("Bash".into()),
                    tool_input: Some(serde_json::json!({ "command": command }).to_string()),
                    command: Some(command),
                    tier: Some(audit::TierSeen::Sandbox),
                    decision: Some(audit::AuditDecision::parse(d)),
                    source: Some(audit::parse_source(s).expect("a source")),
                    reason: Some(format!("{d} by {s}")),
                    tiermap_revision: Some(4),
                    sandbox: (s == "sandbox").then(|| {
                        r#"{"clean":true,"why":[],"exit":0,"effects":["created target/"]}"#.into()
                    }),
                    latency_us: Some(100 + (i % 900) as i64),
                    note: (s == "human").then(|| "never with a live token".to_owned()),
                    ..Entry::default()
                },
            )
            .unwrap();
            if i % 5 == 1 {
                audit::append(
                    &tx,
                    Entry {
                        at_ms: row.entry.at_ms + 3,
                        kind: Kind::Outcome,
                        tool_use_id: row.entry.tool_use_id.clone(),
                        success: Some(true),
                        exit_code: Some(0),
                        decision_id: Some(row.id),
                        ..Entry::default()
                    },
                )
                .unwrap();
            }
            i += 1;
        }
        tx.commit().unwrap();
    }
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The child: export one store and print `rows written ms out_bytes hwm_before hwm_after`.
fn child(db: &Path) {
    let before = vm_hwm_kib();
    let conn = open_read_only(db).unwrap();
    let out_path = db.with_extension("jsonl");
    let file = std::fs::File::create(&out_path).unwrap();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let started = Instant::now();
    let summary = export(
        &conn,
        &ExportOptions {
            split: Some(0.9),
            ..ExportOptions::default()
        },
        &mut Sink::One(&mut out),
        &mut |_| {},
    )
    .unwrap();
    out.flush().unwrap();
    let ms = started.elapsed().as_millis();
    let bytes = std::fs::metadata(&out_path).unwrap().len();
    println!(
        "{} {} {ms} {bytes} {before} {}",
        summary.rows_read,
        summary.written,
        vm_hwm_kib()
    );
}

fn main() {
    if let Some(db) = std::env::var_os(CHILD_DB) {
        child(Path::new(&db));
        return;
    }
    let sizes: Vec<usize> = std::env::var("CMDGATE_EXPORT_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000, 1_000_000]);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "| decided requests | audit rows | fill | export | rows/s | output | peak RSS (VmHWM) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for n in sizes {
        let db = dir.path().join(format!("{n}-{DB_FILE}"));
        let t = Instant::now();
        fill(&db, n);
        let fill_s = t.elapsed().as_secs_f64();
        let audit_rows: i64 = open_read_only(&db)
            .unwrap()
            .query_row("SELECT count(*) FROM command_audit", [], |r| r.get(0))
            .unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .env(CHILD_DB, &db)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let f: Vec<u64> = text
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let (rows, ms, bytes, hwm) = (f[0], f[2], f[3], f[5]);
        println!(
            "| {n} | {audit_rows} | {fill_s:.1} s | {:.2} s | {:.0} | {:.0} MiB | {:.1} MiB |",
            ms as f64 / 1000.0,
            rows as f64 / (ms.max(1) as f64 / 1000.0),
            bytes as f64 / 1_048_576.0,
            hwm as f64 / 1024.0
        );
        std::fs::remove_file(&db).ok();
        std::fs::remove_file(db.with_extension("jsonl")).ok();
    }
}
