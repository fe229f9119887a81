//! `cmdgate audit stats` over a store with known contents: counts by decision, source and tier, top
//! denied commands (redacted), breaker trips, promotions, human notes, outcomes and the latency
//! percentiles; and the CLI's `--json` output.

use cmdgate_daemon::cli::stats::{stats, StatsFilter};
use cmdgate_daemon::store::audit::{self, Entry, Kind};
use cmdgate_daemon::store::{open_db, open_read_only, DB_FILE};

fn decided(i: i64, command: &str, decision: &str, source: &str, tier: &str) -> Entry {
    Entry {
        at_ms: 1_000 + i,
        kind: if source == "hook_fast_path" {
            Kind::LocalAllow
        } else {
            Kind::Decision
        },
        project: Some(if i % 2 == 0 { "/p/a" } else { "/p/b" }.into()),
        tool: Some("Bash".into()),
        command: Some(command.into()),
        decision: Some(audit::AuditDecision::parse(decision)),
        source: Some(audit::parse_source(source).expect("a source")),
        tier: Some(audit::TierSeen::parse(tier).expect("a tier")),
        // Latencies 1..=9 ms for daemon decisions.
        latency_us: (source != "hook_fast_path").then_some(i * 1000),
        note: (source == "human").then(|| "ask first".to_owned()),
        ..Entry::default()
    }
}

fn fill(db: &std::path::Path) {
    let conn = open_db(db).unwrap();
    let rows = [
        decided(1, "rm -rf /", "deny", "builtin", "deny"),
        decided(2, "rm -rf /", "deny", "builtin", "deny"),
        decided(3, "rm -rf /", "deny", "builtin", "deny"),
        decided(
            4,
            "GITHUB_TOKEN=ghp_R8fK2mQ9xL4vT7nB3wZ6pY1sD5hJ0cA2eG4i gh release create",
            "deny",
            "human",
            "ask",
        ),
        decided(
            5,
            "GITHUB_TOKEN=ghp_R8fK2mQ9xL4vT7nB3wZ6pY1sD5hJ0cA2eG4i gh release create",
            "deny",
            "human",
            "ask",
        ),
        decided(6, "cargo build", "allow", "sandbox", "sandbox"),
        decided(7, "git push", "ask", "tier_rule", "ask"),
        decided(8, "cargo test", "allow", "learned", "sandbox"),
        decided(9, "make", "deny", "breaker", "unknown"),
        decided(10, "ls", "allow", "hook_fast_path", "read"),
    ];
    for r in rows {
        audit::append(&conn, r).unwrap();
    }
    let event = |kind: Kind, decision: &str| Entry {
        at_ms: 2_000,
        kind,
        decision: Some(audit::AuditDecision::parse(decision)),
        ..Entry::default()
    };
    for e in [
        event(Kind::Breaker, r#"{"transition":"tripped","score":10}"#),
        event(Kind::Breaker, r#"{"transition":"half_opened"}"#),
        event(Kind::Breaker, r#"{"transition":"reopened"}"#),
        event(Kind::Breaker, "reset"),
        event(Kind::Learn, "promoted"),
        event(Kind::Learn, "promoted"),
        event(Kind::Learn, "demoted"),
        Entry {
            success: Some(true),
            ..event(Kind::Outcome, "")
        },
        Entry {
            success: Some(false),
            ..event(Kind::Outcome, "")
        },
    ] {
        audit::append(&conn, e).unwrap();
    }
}

#[test]
fn counts_percentiles_and_top_denied() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join(DB_FILE);
    fill(&db);
    let conn = open_read_only(&db).unwrap();
    let s = stats(
        &conn,
        &StatsFilter {
            top: 2,
            ..StatsFilter::default()
        },
    )
    .unwrap();
    assert_eq!(s.decisions, 10);
    assert_eq!(s.by_decision["deny"], 6);
    assert_eq!(s.by_decision["allow"], 3);
    assert_eq!(s.by_decision["ask"], 1);
    assert_eq!(s.by_source["builtin"], 3);
    assert_eq!(s.by_source["hook_fast_path"], 1);
    assert_eq!(s.by_tier["deny"], 3);
    assert_eq!(s.top_denied.len(), 2);
    assert_eq!(
        (s.top_denied[0].command.as_str(), s.top_denied[0].count),
        ("rm -rf /", 3)
    );
    assert_eq!(
        s.top_denied[1].command,
        "GITHUB_TOKEN=<REDACTED:github_token> gh release create"
    );
    assert_eq!(
        (s.breaker_trips, s.breaker_reopens, s.breaker_resets),
        (1, 1, 1)
    );
    assert_eq!((s.promotions, s.demotions), (2, 1));
    assert_eq!((s.human_decisions, s.human_notes), (2, 2));
    assert_eq!((s.outcomes_succeeded, s.outcomes_failed), (1, 1));
    let l = s.latency_us.unwrap();
    // Daemon decisions 1..=9 ms: the lower median of 9 values is the 5th.
    assert_eq!((l.samples, l.median, l.max), (9, 5000, 9000));
    assert_eq!(l.p90, 9000);

    let only_a = stats(
        &conn,
        &StatsFilter {
            project: Some("/p/a".into()),
            top: 10,
            ..StatsFilter::default()
        },
    )
    .unwrap();
    assert_eq!(only_a.decisions, 5);
    let late = stats(
        &conn,
        &StatsFilter {
            since_ms: Some(1_009),
            top: 10,
            ..StatsFilter::default()
        },
    )
    .unwrap();
    assert_eq!(late.decisions, 2);
}

#[test]
fn the_cli_prints_json() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join(DB_FILE);
    fill(&db);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cmdgate"))
        .args(["audit", "stats", "--json", "--db"])
        .arg(&db)
        .env("CMDGATE_HOME", dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decisions"], 10);
    assert_eq!(v["promotions"], 2);
    assert_eq!(v["latency_us"]["median"], 5000);
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_cmdgate"))
        .args(["audit", "stats", "--db"])
        .arg(&db)
        .env("CMDGATE_HOME", dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("median 5000 us"), "{text}");
    assert!(!text.contains("ghp_"), "{text}");
}
