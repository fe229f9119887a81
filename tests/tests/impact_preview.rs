//! Impact previews end to end (issue 16): a real `cmdgated` audits a few requests, then the real
//! `cmdgate` replays them under a broadened map (`tiermap preview`) and under a proposed rule
//! (`rules preview`) — nothing runs — and `tiermap sign` prints the expansion before signing.

use cmdgate_tests::gate::Gate;
use serde_json::Value;

/// The signed map with `git push *` moved from ask (tier 2) to sandbox (tier 1).
fn broadened(map: &str) -> String {
    let body: Vec<&str> = map
        .lines()
        .filter(|l| !l.starts_with("<!-- cmdgate-signature") && *l != "- `git push *`")
        .collect();
    body.join("\n").replace(
        "## Tier 1 — sandbox\n",
        "## Tier 1 — sandbox\n\n- `git push *`\n\n",
    ) + "\n"
}

fn group<'a>(v: &'a Value, pattern: &str) -> &'a Value {
    v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["pattern"].as_str().unwrap_or("").contains(pattern))
        .unwrap_or_else(|| panic!("no group for {pattern}: {v:#}"))
}

#[test]
fn previews_replay_the_audit_and_sign_prints_the_expansion() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    for (id, cmd) in [
        ("p1", "git push origin one"),
        ("p2", "git push origin two"),
        ("p3", "cargo publish"),
    ] {
        let (d, reason) = g.pre(id, cmd);
        assert_eq!(d, "ask", "{cmd}: {reason}");
    }
    let map_path = g.proj.join("CLAUDE_CMDS.md");
    let map = std::fs::read_to_string(&map_path).unwrap();
    let proposed = g.dir.path().join("proposed.md");
    std::fs::write(&proposed, broadened(&map)).unwrap();

    let v = g.cli_json(&[
        "tiermap",
        "preview",
        proposed.to_str().unwrap(),
        "--project",
        g.proj.to_str().unwrap(),
        "--json",
    ]);
    println!("tiermap preview: {v:#}");
    assert_eq!(v["replayed"], 3, "{v}");
    assert_eq!(v["changed"], 2, "{v}");
    assert_eq!(v["more_permissive"], 2, "{v}");
    let moved = group(&v, "`git push *`");
    assert_eq!(moved["from"], "ask");
    assert_eq!(moved["to"], "test_run");
    assert_eq!(moved["count"], 2);
    assert_eq!(moved["examples"][0][1], "git push origin one");
    let text = g.cli(&[
        "tiermap",
        "preview",
        proposed.to_str().unwrap(),
        "--project",
        g.proj.to_str().unwrap(),
    ]);
    assert!(
        text.stdout_text().contains("ask → test-run ×2"),
        "{}",
        text.stdout_text()
    );

    // A remembered rejection of one exact command moves that command only.
    let v = g.cli_json(&[
        "rules",
        "preview",
        "remember",
        "reject",
        "--project",
        g.proj.to_str().unwrap(),
        "--json",
        "--",
        "cargo",
        "publish",
    ]);
    println!("rules preview: {v:#}");
    assert_eq!(v["changed"], 1, "{v}");
    assert_eq!(v["groups"][0]["from"], "ask");
    assert_eq!(v["groups"][0]["to"], "deny");
    assert_eq!(v["groups"][0]["examples"][0][1], "cargo publish");

    // Signing a broader map prints its expansion against the last map signed here first.
    let sign = |path: &std::path::Path| {
        let done = g.cli(&["tiermap", "sign", "--dev", path.to_str().unwrap()]);
        assert!(done.status.success(), "{}", done.stderr_text());
        done.stdout_text()
    };
    sign(&map_path);
    std::fs::write(
        &map_path,
        broadened(&std::fs::read_to_string(&map_path).unwrap()),
    )
    .unwrap();
    let out = sign(&map_path);
    println!("{out}");
    assert!(out.contains("against the last map signed here"), "{out}");
    assert!(
        out.contains("more permissive: `git push *` tier 2 (ask) → tier 1 (sandbox)"),
        "{out}"
    );
    assert!(
        out.find("more permissive").unwrap() < out.find("\nsigned ").unwrap(),
        "{out}"
    );

    // Retention: pruning everything before now but the newest row keeps the chain verifiable, and says what
    // the previews and the export lose.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    let text = g.cli(&["audit", "prune", "--before", &now]);
    assert!(text.status.success(), "{}", text.stderr_text());
    let text = text.stdout_text();
    println!("{text}");
    // The newest row (the third decision) always stays.
    assert!(text.contains("(2 decisions)"), "{text}");
    assert!(text.contains("no longer replay"), "{text}");
    let verify = g.verify();
    assert!(verify["broken"].is_null(), "{verify}");
    let v = g.cli_json(&[
        "tiermap",
        "preview",
        proposed.to_str().unwrap(),
        "--project",
        g.proj.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(v["replayed"], 1, "{v}");
    // A new request after the cut is chained and verified like any other.
    g.pre("p4", "git push origin four");
    assert!(g.decision_row("p4").is_some());
    let verify = g.verify();
    assert!(verify["broken"].is_null(), "{verify}");
}
