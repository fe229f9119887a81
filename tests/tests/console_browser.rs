//! The web console in a real browser (issue 16): Debian's headless Chromium over WebDriver, a real
//! `cmdgated` in background mode, and the real Claude Code CLI whose held calls are answered from
//! the page. Screenshots of each page (1280 px wide) go to `$CMDGATE_SCREENSHOT_DIR` when set,
//! else next to the test binary.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;

use cmdgate_tests::browser::Browser;
use cmdgate_tests::claude::{git, ClaudeRun, Session, World};
use cmdgate_tests::fake_api::{tool_use_id, FakeApi, Step};
use cmdgate_tests::gate::Gate;
use serde_json::Value;

const WIDTH: u32 = 1280;

/// A gate in background mode whose project is the Claude Code session's workspace.
fn world() -> (Gate, Session) {
    let w = World::with_config("[approvals]\nmode = \"background\"\n");
    (w.gate, w.session)
}

fn claude(session: &Session, api: &FakeApi, label: &str) -> ClaudeRun {
    let run = session.run_with(api, label, &[]);
    println!("=== {label}: {}\n{}", run.result, api.transcript());
    assert!(
        run.done.status.success(),
        "claude exited {:?}\n{}",
        run.done.status,
        run.done.stderr_text()
    );
    run
}

/// The repository's local branches (a tier-2 `git push . HEAD:refs/heads/NAME` makes one).
fn branches(ws: &std::path::Path) -> String {
    git(ws, &["branch", "--list", "--format=%(refname:short)"])
}

fn screens() -> PathBuf {
    let dir = std::env::var_os("CMDGATE_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::current_exe()
                .unwrap()
                .parent()
                .unwrap()
                .join("console-screens")
        });
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn shot(b: &Browser, name: &str) {
    b.fit_height(WIDTH);
    let path = screens().join(format!("{name}.png"));
    b.screenshot(&path);
    println!("screenshot: {}", path.display());
}

/// One raw HTTP request to the console; returns (status, body).
fn raw(port: u16, head: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, out)
}

/// A page on another origin (same host, another port) that tries to change the console's state:
/// a JSON fetch (preflighted) when it loads, and a form POST (no preflight) when `#go` is clicked.
/// Served once per request, forever.
fn attacker(console_port: u16, rule: i64) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let page = format!(
        r#"<!doctype html><html><body><p id="fetch">fetch pending</p>
<form id="f" method="POST" enctype="text/plain" action="http://127.0.0.1:{console_port}/rules/{rule}/enable">
<input name='{{"if_revision":99,"x":"' value='"}}'><button id="go">go</button></form>
<script>
fetch("http://127.0.0.1:{console_port}/rules/{rule}/enable", {{method: "POST", credentials: "include",
  headers: {{"Content-Type": "application/json"}}, body: JSON.stringify({{if_revision: 99}})}})
  .then(r => {{ document.getElementById("fetch").textContent = "fetch answered " + r.status; }})
  .catch(e => {{ document.getElementById("fetch").textContent = "fetch blocked"; }});
</script></body></html>"#
    );
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    port
}

#[test]
fn the_console_answers_held_calls_of_the_real_cli_and_refuses_what_is_not_its_own() {
    let (gate, session) = world();
    let ws = session.workspace();
    let login = gate.cli_json(&["console", "--json"]);
    let url = login["url"].as_str().expect("a login url").to_owned();
    let port: u16 = login["port"].as_u64().expect("port") as u16;
    let b = Browser::start(WIDTH, 900);

    // No token, no console: the session cookie comes only from a link `cmdgate console` minted.
    b.goto(&format!("http://127.0.0.1:{port}/pending"));
    assert!(b.text().contains("no console session"), "{}", b.text());
    b.goto(&format!("http://127.0.0.1:{port}/login?code=0000"));
    assert!(b.text().contains("no console session"), "{}", b.text());
    b.goto(&url);
    b.wait_for("document.body.dataset.page === 'pending' && document.getElementById('live').textContent === 'live'");
    assert!(b.url().ends_with("/pending"), "{}", b.url());
    // The link works once.
    let (status, _) = raw(
        port,
        &format!(
            "GET {} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n",
            url.split_once(&format!("{port}")).unwrap().1
        ),
    );
    assert_eq!(status, 403, "a used login code was accepted");
    // DNS rebinding: a page of another name that resolves to loopback keeps its name in Host.
    let (status, body) = raw(
        port,
        &format!(
            "GET /pending HTTP/1.1\r\nHost: rebind.example:{port}\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(status, 421, "{body}");
    assert!(!body.contains("access-control-allow"), "{body}");

    // 1. A held call of the real CLI appears without a reload and is approved with a note.
    let commit = "git push -q . HEAD:refs/heads/approved-in-the-browser";
    let api = FakeApi::start(vec![Step::bash(commit)]);
    let run = std::thread::scope(|s| {
        let agent = s.spawn(|| claude(&session, &api, "commit once the operator agrees"));
        b.wait_for("document.querySelector('.card:not(.closed)')");
        assert!(b.text().contains(commit), "{}", b.text());
        shot(&b, "pending");
        b.type_into(
            ".card:not(.closed) textarea[name=note]",
            "fine from the browser",
        );
        b.click(".card:not(.closed) button[data-act=approve]:not([data-remember])");
        let outcome = b.wait_for(
            "document.querySelector('.card.closed .outcome') && document.querySelector('.card.closed .outcome').textContent",
        );
        assert!(outcome.as_str().unwrap().contains("Approved"), "{outcome}");
        shot(&b, "pending-answered");
        agent.join().expect("claude thread")
    });
    assert_eq!(run.denials(), 0, "{}", run.result);
    assert!(
        branches(&ws).contains("approved-in-the-browser"),
        "the call did not run"
    );
    let row = gate
        .audit("decision")
        .into_iter()
        .filter(|r| r["tool_use_id"] == tool_use_id(0))
        .max_by_key(|r| r["id"].as_i64())
        .unwrap();
    assert_eq!(row["source"], "human", "{row}");
    assert_eq!(row["note"], "fine from the browser", "{row}");

    // 2. Reject and remember: the next identical call is denied by the rule, never held.
    let refused = "git push -q . HEAD:refs/heads/never-from-the-agent";
    let api = FakeApi::start(vec![Step::bash(refused)]);
    let run = std::thread::scope(|s| {
        let agent = s.spawn(|| claude(&session, &api, "commit that the operator refuses"));
        b.wait_for("document.querySelector('.card:not(.closed)')");
        b.type_into(
            ".card:not(.closed) textarea[name=note]",
            "no commits like this",
        );
        b.click(".card:not(.closed) button[data-act=reject][data-remember]");
        let outcome = b.wait_for(
            "Array.from(document.querySelectorAll('.card.closed .outcome')).map(o => o.textContent).find(t => t.includes('Rejected'))",
        );
        assert!(
            outcome.as_str().unwrap().contains("remembered as rule #"),
            "{outcome}"
        );
        agent.join().expect("claude thread")
    });
    assert_eq!(run.denials(), 1, "{}", run.result);
    let api = FakeApi::start(vec![Step::bash(refused)]);
    let run = claude(&session, &api, "the same commit again");
    assert_eq!(run.denials(), 1, "{}", run.result);
    let r = api.result_of(0).expect("a result");
    assert!(
        r.is_error && r.content.contains("no commits like this"),
        "{r:?}"
    );
    assert!(!branches(&ws).contains("never-from-the-agent"));
    assert_eq!(gate.cli_json(&["pending", "--json"]), serde_json::json!([]));
    let rules = gate.cli_json(&["rules", "list", "--json"]);
    let rule = rules["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "reject")
        .expect("the remembered rejection")["id"]
        .as_i64()
        .unwrap();

    // 3. History: newest first, a row opens to its evidence and names the rule that decided it.
    b.goto(&format!("http://127.0.0.1:{port}/history"));
    b.wait_for("document.querySelector('details.row')");
    let first = b.script(
        "return document.querySelector('details.row summary').textContent;",
        serde_json::json!([]),
    );
    assert!(
        first.as_str().unwrap().contains(&format!("rule #{rule}")),
        "newest row: {first}"
    );
    b.click("details.row summary");
    b.wait_for("document.querySelector('details.row[open] .evidence dl')");
    shot(&b, "history");

    // 4. Profile: an edit made against an older revision says what changed instead of applying.
    b.goto(&format!("http://127.0.0.1:{port}/profile"));
    b.wait_for(&format!("document.querySelector('#rule-{rule}')"));
    let changed = gate.cli_json(&["rules", "disable", &rule.to_string(), "--json"]);
    println!("disabled from the CLI: {changed}");
    b.click(&format!("#rule-{rule} summary"));
    b.click(&format!("#rule-{rule} button[data-act=disable]"));
    let outcome = b.wait_for(&format!(
        "document.querySelector('#rule-{rule} .outcome.bad') && document.querySelector('#rule-{rule} .outcome.bad').textContent"
    ));
    let outcome = outcome.as_str().unwrap();
    assert!(outcome.contains("Not applied"), "{outcome}");
    assert!(
        outcome.contains(&format!("rule #{rule} disabled")),
        "{outcome}"
    );
    shot(&b, "profile-conflict");
    b.goto(&format!("http://127.0.0.1:{port}/profile"));
    b.wait_for(&format!("document.querySelector('#rule-{rule}')"));
    shot(&b, "profile");

    // 5. Another origin cannot change anything: the form POST is refused by Origin, the JSON
    //    fetch never gets past its preflight (no CORS), and the rule stays disabled.
    let evil = attacker(port, rule);
    b.goto(&format!("http://127.0.0.1:{evil}/"));
    let fetched = b.wait_for(
        "document.getElementById('fetch').textContent !== 'fetch pending' && document.getElementById('fetch').textContent",
    );
    assert_eq!(
        fetched, "fetch blocked",
        "a cross-origin fetch got an answer"
    );
    // The form POST is a navigation (no preflight): the console answers it with a refusal.
    b.click("#go");
    let refused_text = b.wait_for(
        "document.body && document.body.innerText.includes('refused') && document.body.innerText",
    );
    assert!(
        refused_text
            .as_str()
            .unwrap()
            .contains("must come from the console's own page"),
        "{refused_text}"
    );
    let rules = gate.cli_json(&["rules", "list", "--json"]);
    let now: &Value = rules["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == rule)
        .unwrap();
    assert_eq!(
        now["enabled"], false,
        "a cross-origin request changed the rule: {now}"
    );
    let log = std::fs::read_to_string(gate.log_path()).unwrap_or_default();
    assert!(!log.contains("panicked"), "{log}");
}
