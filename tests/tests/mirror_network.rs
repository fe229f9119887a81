//! Network by domain end to end (issue 14) through the real hook, the real `cmdgate-run` client,
//! a real `cmdgated` and the real sandbox: a tier-map entry with `network=registry.test:PORT`
//! reaches a local HTTP server (started here, mapped to that name by `[network] hosts`) through
//! cmdgate's proxy, plain HTTP and CONNECT; another mapped name is refused, audited, and its run
//! rolled back with the reason on the client's last line; a direct connect around the proxy
//! reaches nothing.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use cmdgate_tests::gate::Gate;
use serde_json::Value;

/// The client the entry allows: `http URL` (urllib, through $http_proxy: absolute-form),
/// `connect HOST PORT` (a CONNECT tunnel through $https_proxy, then HTTP inside it), `direct HOST
/// PORT` (a plain socket, around the proxy). It first writes the file named by a last argument
/// `out-…` (a workspace effect, committed or rolled back with the run). One simple command, so the
/// run takes the entry's options (a compound with an unlisted part gets no network).
const FETCH: &str = r#"import os, socket, sys, urllib.request
mode = sys.argv[1]
open(sys.argv[-1] if sys.argv[-1].startswith("out-") else "out-none", "w").write(mode)
if mode == "http":
    print(urllib.request.urlopen(sys.argv[2], timeout=30).read().decode())
elif mode == "connect":
    host, port = sys.argv[2], int(sys.argv[3])
    proxy = os.environ["https_proxy"].rsplit(":", 1)
    s = socket.create_connection((proxy[0].split("//")[1], int(proxy[1])), timeout=30)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    f = s.makefile("rb")
    status = f.readline().decode().strip()
    while f.readline() not in (b"\r\n", b""):
        pass
    print("proxy said:", status)
    if " 200 " in status:
        s.sendall(f"GET /tunnel HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        print(f.read().decode().split("\r\n\r\n", 1)[-1])
elif mode == "direct":
    socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=5)
    print("direct connect worked")
"#;

/// A plain HTTP server on 127.0.0.1 answering every request with `hello from PATH`; it records
/// the request lines and `Host` headers it saw.
fn server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut head = Vec::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push(line.trim_end().to_owned());
            }
            let path = head
                .first()
                .and_then(|l| l.split(' ').nth(1))
                .unwrap_or("?")
                .to_owned();
            log.lock().unwrap().push(head.join(" | "));
            let body = format!("hello from {path}");
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, seen)
}

fn gate(port: u16) -> Gate {
    let mut g = Gate::new();
    std::fs::write(
        g.conf.join("config.toml"),
        "[network]\nhosts = { \"registry.test\" = \"127.0.0.1\", \"other.test\" = \"127.0.0.1\" }\n",
    )
    .unwrap();
    g.init_signed();
    let map = g.proj.join("CLAUDE_CMDS.md");
    let text = std::fs::read_to_string(&map).unwrap();
    let entry = format!("- `python3 fetch.py *` — network=registry.test:{port}\n");
    std::fs::write(
        &map,
        text.replacen("- `make *`", &format!("{entry}- `make *`"), 1),
    )
    .unwrap();
    g.resign();
    std::fs::write(g.proj.join("fetch.py"), FETCH).unwrap();
    g.start();
    g
}

/// The newest `run` audit row for a tool_use_id, and its `sandbox` detail.
fn run_row(g: &Gate, tool_use_id: &str) -> (Value, Value) {
    let row = g
        .audit("run")
        .into_iter()
        .filter(|r| r["tool_use_id"] == tool_use_id)
        .max_by_key(|r| r["id"].as_i64())
        .unwrap_or_else(|| panic!("no run row for {tool_use_id}"));
    let detail = match &row["sandbox"] {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        other => other.clone(),
    };
    (row, detail)
}

fn attempts(detail: &Value) -> Vec<Value> {
    detail["network"]["attempts"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("no network attempts in {detail}"))
}

#[test]
fn an_entry_reaches_its_hosts_through_the_proxy_and_nothing_else() {
    let (port, seen) = server();
    let g = gate(port);

    // Explain shows the list.
    let explained = g.cli(&["explain", "--", "python3", "fetch.py", "x"]);
    assert!(
        explained.stdout_text().contains(&format!(
            "only registry.test:{port} through cmdgate's proxy"
        )),
        "{}",
        explained.stdout_text()
    );

    // 1. Plain HTTP to the listed name: reaches the server, committed, audited.
    let cmd = format!("python3 fetch.py http http://Registry.Test:{port}/pkg out-fetched");
    let done = g.shell(&g.pre_rewrite("t1", &cmd));
    println!(
        "t1: {:?}\n{}\n{}",
        done.status,
        done.stdout_text(),
        done.stderr_text()
    );
    assert_eq!(done.status.code(), Some(0), "{}", done.stderr_text());
    assert!(done.stdout_text().contains("hello from /pkg"));
    assert!(g.proj.join("out-fetched").exists(), "a clean run commits");
    let (row, detail) = run_row(&g, "t1");
    assert_eq!(row["decision"], "committed", "{row}");
    let a = attempts(&detail);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0]["host"], "registry.test");
    assert_eq!(a[0]["port"], port);
    assert_eq!(a[0]["via"], "http");
    assert_eq!(a[0]["allowed"], true);
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .any(|r| r.starts_with("GET /pkg HTTP/1.1")
                && r.contains(&format!("Host: Registry.Test:{port}"))),
        "{:?}",
        seen.lock().unwrap()
    );

    // 2. A CONNECT tunnel to the listed name.
    let cmd = format!("python3 fetch.py connect registry.test {port}");
    let done = g.shell(&g.pre_rewrite("t2", &cmd));
    println!(
        "t2: {:?}\n{}\n{}",
        done.status,
        done.stdout_text(),
        done.stderr_text()
    );
    assert_eq!(done.status.code(), Some(0), "{}", done.stderr_text());
    assert!(done.stdout_text().contains("proxy said: HTTP/1.1 200"));
    assert!(done.stdout_text().contains("hello from /tunnel"));
    let (row, detail) = run_row(&g, "t2");
    assert_eq!(row["decision"], "committed", "{row}");
    assert_eq!(attempts(&detail)[0]["via"], "connect");

    // 3. Another name (mapped to the same server, so only the list refuses it): refused,
    //    audited, the run rolled back with the reason on the last line.
    let before = seen.lock().unwrap().len();
    let cmd = format!("python3 fetch.py connect other.test {port} out-made");
    let done = g.shell(&g.pre_rewrite("t3", &cmd));
    let err = done.stderr_text();
    println!("t3: {:?}\n{}\n{err}", done.status, done.stdout_text());
    assert_ne!(done.status.code(), Some(0));
    assert!(done.stdout_text().contains("proxy said: HTTP/1.1 403"));
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.contains(&format!(
            "tried to reach other.test:{port}, which this command's tier-map entry does not allow"
        )),
        "{err}"
    );
    assert!(
        !g.proj.join("out-made").exists(),
        "a refused attempt rolls the run back"
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        before,
        "the server was not reached"
    );
    let (row, detail) = run_row(&g, "t3");
    assert_eq!(row["decision"], "rolled_back", "{row}");
    let a = attempts(&detail);
    assert_eq!(
        (a[0]["host"].as_str(), a[0]["allowed"].as_bool()),
        (Some("other.test"), Some(false)),
        "{a:?}"
    );

    // 4. An IP literal through the proxy, and a direct connect around it: neither reaches the
    //    server; both runs are rolled back.
    let cmd = format!("python3 fetch.py connect 127.0.0.1 {port}");
    let done = g.shell(&g.pre_rewrite("t4", &cmd));
    println!(
        "t4: {:?}\n{}\n{}",
        done.status,
        done.stdout_text(),
        done.stderr_text()
    );
    assert!(done.stdout_text().contains("proxy said: HTTP/1.1 403"));
    assert_eq!(run_row(&g, "t4").0["decision"], "rolled_back");
    let cmd = format!("python3 fetch.py direct 127.0.0.1 {port}");
    let done = g.shell(&g.pre_rewrite("t5", &cmd));
    let err = done.stderr_text();
    println!("t5: {:?}\n{}\n{err}", done.status, done.stdout_text());
    assert!(!done.stdout_text().contains("direct connect worked"));
    assert!(err.contains("around the proxy"), "{err}");
    assert_eq!(run_row(&g, "t5").0["decision"], "rolled_back");
    assert_eq!(
        seen.lock().unwrap().len(),
        before,
        "the server was not reached"
    );
    assert!(g.verify()["broken"].is_null());
}

#[test]
fn through_claude_code_a_listed_host_is_reached_and_another_is_refused_with_the_reason() {
    use cmdgate_tests::claude::World;
    use cmdgate_tests::fake_api::Step;
    let (port, seen) = server();
    let w = World::builder()
        .config("[network]\nhosts = { \"registry.test\" = \"127.0.0.1\", \"other.test\" = \"127.0.0.1\" }")
        .file("fetch.py", FETCH)
        .start();
    let map = w.gate.proj.join("CLAUDE_CMDS.md");
    let text = std::fs::read_to_string(&map).unwrap();
    let entry = format!("- `python3 fetch.py *` — network=registry.test:{port}\n");
    std::fs::write(
        &map,
        text.replacen("- `make *`", &format!("{entry}- `make *`"), 1),
    )
    .unwrap();
    w.gate.resign();
    let run = w.play(vec![
        Step::bash(&format!(
            "python3 fetch.py connect registry.test {port} out-ok"
        )),
        Step::bash(&format!(
            "python3 fetch.py connect other.test {port} out-refused"
        )),
    ]);
    let ok = run.result(0);
    println!("turn 0: {ok:?}");
    assert!(!ok.is_error, "{ok:?}");
    assert!(ok.content.contains("hello from /tunnel"), "{ok:?}");
    assert_eq!(w.read("out-ok"), "connect");
    assert_eq!(w.run_row(0)["decision"], "committed");
    let refused = run.result(1);
    println!("turn 1: {refused:?}");
    assert!(refused.is_error, "{refused:?}");
    assert!(
        refused.content.contains(&format!(
            "tried to reach other.test:{port}, which this command's tier-map entry does not allow"
        )),
        "the model is told which host was refused: {refused:?}"
    );
    assert!(
        !w.ws("out-refused").exists(),
        "the refused run was rolled back"
    );
    assert_eq!(w.run_row(1)["decision"], "rolled_back");
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "only the listed name reached the server"
    );
    assert_eq!(run.denials(), 0, "{}", run.run.result);
}
