//! Graceful shutdown: the daemon's serve loop, in process on temp sockets, is asked to stop while a
//! decision is in the middle of a test-run (a `direct` entry); that decision is still answered and its audit row is
//! committed before `serve` returns, and the sockets are gone afterwards.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cmdgate_daemon::api::serve::{serve, ServeOptions};
use cmdgate_daemon::store::{audit, open_read_only};
use cmdgate_sandbox::HelperCommand;

fn post(socket: &Path, path: &str, body: &str) -> (u16, String) {
    let mut s = UnixStream::connect(socket).expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn lock_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("runs"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".lock"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn shutdown_finishes_the_in_flight_decision_and_commits_its_audit_row() {
    let dir = tempfile::tempdir().unwrap();
    let p = |s: &str| dir.path().join(s);
    let (conf, data, proj) = (p("conf"), p("data"), p("proj"));
    for d in [&conf, &data, &proj] {
        std::fs::create_dir_all(d).unwrap();
    }
    // A signed map, so the command is test-run rather than refused as read-only; its entries are
    // `direct`, so the decision itself test-runs (a mirrored run would only issue a ticket).
    let dev = cmdgate_daemon::signing::ensure_dev_key(&conf).unwrap();
    std::fs::write(
        proj.join("CLAUDE_CMDS.md"),
        cmdgate_policy::tiermap::STARTER_MAP.replacen(
            "- `cargo build *`",
            "- `sleep *` — direct\n- `touch *` — direct\n- `cargo build *`",
            1,
        ),
    )
    .unwrap();
    let config = cmdgate_daemon::signing::SignConfig {
        trusted_keys: cmdgate_daemon::signing::trusted_keys_path(&conf),
        ledger_dir: conf.clone(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(cmdgate_daemon::signing::sign_file(
            &proj.join("CLAUDE_CMDS.md"),
            cmdgate_daemon::signing::Signer::Dev(&dev),
            &config,
        ))
        .unwrap();
    // This test binary is the only user of its process environment.
    for k in [
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "CMDGATE_MODE",
        "CMDGATE_SOCKET",
        "CMDGATE_ADMIN_SOCKET",
    ] {
        std::env::remove_var(k);
    }
    std::env::set_var("CMDGATE_CONFIG_DIR", &conf);
    std::env::set_var("CMDGATE_HOME", &data);
    std::env::set_var("CMDGATE_SPOOL_DIR", p("spool"));

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let helper = HelperCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_cmdgated")),
        args: vec!["__sandbox-helper".into()],
    };
    let server = runtime.spawn(serve(
        ServeOptions {
            config_file: None,
            helper,
            announce: false,
        },
        stopped,
    ));
    let socket = data.join("cmdgate.sock");
    while UnixStream::connect(data.join("admin.sock")).is_err() {
        assert!(!server.is_finished(), "serve ended before listening");
        std::thread::sleep(Duration::from_millis(10));
    }
    let body = format!(
        r#"{{"v":1,"event":"PreToolUse","session_id":"s","tool_use_id":"inflight","cwd":"{0}","project_dir":"{0}","tool_name":"Bash","tool_input":{{"command":"sleep 1 && touch slow.txt"}}}}"#,
        proj.display()
    );
    let client = {
        let socket = socket.clone();
        std::thread::spawn(move || post(&socket, "/v1/decide", &body))
    };
    // Ask for shutdown once the test-run is under way (its lock file exists).
    while lock_files(&data.join("sandbox")) == 0 {
        assert!(
            !client.is_finished(),
            "the decision finished before its test-run was seen"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.send(true).unwrap();
    let (status, answer) = client.join().unwrap();
    assert_eq!(status, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["decision"], "allow", "{answer}");
    let audit_id = answer["audit_id"].as_i64().expect("an audit id");
    runtime.block_on(server).unwrap().unwrap();

    assert!(
        !socket.exists() && !data.join("admin.sock").exists(),
        "sockets left behind"
    );
    let conn = open_read_only(&data.join("cmdgate.db")).unwrap();
    let row = audit::get(&conn, audit_id)
        .unwrap()
        .expect("the answered decision is in the audit");
    assert_eq!(row.entry.tool_use_id.as_deref(), Some("inflight"));
    assert!(audit::verify(&conn).unwrap().ok());
    assert!(
        !proj.join("slow.txt").exists(),
        "the test-run touched the workspace"
    );
}
