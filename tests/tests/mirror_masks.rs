//! Secret masking and cmdgate's own paths inside the mirror (issue 14), end to end through the
//! real hook, the real `cmdgate-run` client and a real `cmdgated`: code cmdgate cannot analyse
//! (`python3 -c`, a script the agent wrote, a Makefile) reads nothing where keys live — `~/.ssh`,
//! `~/.aws`, the workspace's `.env`, the operator's `secret_paths` — and cannot talk to cmdgate's
//! admin socket or read its audit store and keys, in a mirrored run and in the test-run of a
//! `direct` entry.

use cmdgate_tests::gate::Gate;

/// The planted secrets: (path relative to the gate's temp dir, content).
const SECRETS: &[(&str, &str)] = &[
    ("home/.ssh/id_rsa", "SSH-KEY-SECRET"),
    ("home/.aws/credentials", "AWS-KEY-SECRET"),
    ("proj/.env", "DOTENV-SECRET"),
    ("home/vault/token", "VAULT-SECRET"),
    ("home/ops/opsecret", "OPERATOR-SECRET"),
];

/// A gate whose operator lists `~/vault` and an absolute file (in the agent's home: the mirror's
/// `/tmp` is its own, so a file under the host's `/tmp` is out of reach anyway) in
/// `secret_paths`, with every secret planted and the starter map signed.
fn gate() -> Gate {
    let mut g = at_home();
    g.init_signed();
    for (rel, content) in SECRETS {
        let p = g.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, format!("{content}\n")).unwrap();
    }
    std::fs::write(
        g.conf.join("config.toml"),
        format!(
            "secret_paths = [\"~/vault\", \"{}\"]\n",
            g.home.join("ops/opsecret").display()
        ),
    )
    .unwrap();
    g.start();
    g
}

/// A gate whose config and data dirs (and so its sockets, store and keys) are where a user's are,
/// in the agent's home: the mirror's `/tmp` is its own, so dirs under the host's `/tmp` would be
/// out of reach without any mask.
fn at_home() -> Gate {
    let mut g = Gate::new();
    g.conf = g.home.join(".config/cmdgate");
    g.data = g.home.join(".local/share/cmdgate");
    for d in [&g.conf, &g.data] {
        std::fs::create_dir_all(d).unwrap();
    }
    g.socket = g.data.join("cmdgate.sock");
    g.admin = g.data.join("admin.sock");
    g
}

/// Runs `command` as Claude Code would after the hook's rewrite; (exit code, stdout + stderr).
fn mirrored(g: &Gate, id: &str, command: &str) -> (Option<i32>, String) {
    let rewritten = g.pre_rewrite(id, command);
    assert!(rewritten.contains("cmdgate-run"), "{rewritten}");
    let done = g.shell(&rewritten);
    let text = format!("{}{}", done.stdout_text(), done.stderr_text());
    println!("{command}: exit {:?}\n{text}", done.status);
    (done.status.code(), text)
}

fn assert_no_secret(text: &str) {
    for (rel, content) in SECRETS {
        assert!(!text.contains(content), "{rel} was readable: {text}");
    }
}

/// The paths spelled so no word of the command names a secret: the hook and the daemon see only
/// `python3 -c …` with string pieces, as opaque code would build them.
const PY_READER: &str = "python3 -c \"import os\nh = os.environ['HOME']\n\
     for p in [h + '/.s' + 'sh/id_rsa', h + '/.a' + 'ws/credentials', '.e' + 'nv', \
     h + '/va' + 'ult/token', h + '/ops/ops' + 'ecret']:\n\
     \x20   try: print(p, repr(open(p).read()))\n\
     \x20   except OSError as e: print(p, 'unreadable', e.errno)\"";

#[test]
fn opaque_code_in_a_mirrored_run_reads_no_secret() {
    let g = gate();
    // python3 -c: every secret is empty or absent, and the run itself goes on (exit 0).
    let (code, text) = mirrored(&g, "py", PY_READER);
    assert_eq!(code, Some(0), "{text}");
    assert_no_secret(&text);
    // A masked directory holds an empty placeholder per host entry (so the open is seen).
    assert!(text.contains("id_rsa ''"), "~/.ssh/id_rsa is empty: {text}");
    assert!(text.contains(".env ''"), ".env is an empty file: {text}");
    assert!(text.contains("token ''"), "~/vault/token is empty: {text}");
    assert!(text.contains("opsecret ''"), "{text}");
    // Each open is named: on the client's last line and in the run's audit row (issue 14).
    assert!(
        text.contains("tried to open paths cmdgate masks")
            && text.contains("~/.ssh/id_rsa")
            && text.contains("~/.aws/credentials"),
        "{text}"
    );
    let row = g
        .audit("run")
        .into_iter()
        .find(|r| r["tool_use_id"] == "py")
        .expect("run row");
    let detail: serde_json::Value =
        serde_json::from_str(row["sandbox"].as_str().expect("sandbox detail")).unwrap();
    let opened: Vec<&str> = detail["masked_opens"]
        .as_array()
        .expect("masked_opens")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    for p in [
        "~/.ssh/id_rsa",
        "~/.aws/credentials",
        "~/vault/token",
        "~/ops/opsecret",
    ] {
        assert!(opened.contains(&p), "{p} not in {opened:?}");
    }
    assert!(
        opened.iter().any(|p| p.ends_with("/proj/.env")),
        "{opened:?}"
    );
    assert_eq!(
        row["decision"], "committed",
        "a masked open is not dirty: {row}"
    );

    // A script the agent wrote, and a Makefile: the hook sees only `sh leak.sh` and `make`.
    let targets = "~/.ssh/id_rsa ~/.aws/credentials .env ~/vault/token ~/ops/opsecret";
    std::fs::write(
        g.proj.join("leak.sh"),
        format!("for f in {targets}; do cat $f; done; ls -A ~/.ssh ~/.aws ~/vault; exit 0\n"),
    )
    .unwrap();
    let (code, text) = mirrored(&g, "sh", "sh leak.sh");
    assert_eq!(code, Some(0), "{text}");
    assert_no_secret(&text);
    // The masked directories list their entries' names (placeholders), never their content.
    assert!(
        text.lines().any(|l| l.trim() == "id_rsa"),
        "the placeholders are listed: {text}"
    );
    std::fs::write(
        g.proj.join("Makefile"),
        format!("leak:\n\t-cat {targets}\n\t-cp ~/.ssh/id_rsa stolen\n"),
    )
    .unwrap();
    let (code, text) = mirrored(&g, "make", "make leak");
    assert_eq!(code, Some(0), "{text}");
    assert_no_secret(&text);
    assert_eq!(
        std::fs::read_to_string(g.proj.join("stolen")).unwrap_or_default(),
        "",
        "nothing to steal was committed (the copy of a placeholder is empty)"
    );

    // The host's files are untouched and each run has its row.
    for (rel, content) in SECRETS {
        let on_host = std::fs::read_to_string(g.dir.path().join(rel)).unwrap();
        assert_eq!(on_host, format!("{content}\n"));
    }
    for id in ["py", "sh", "make"] {
        let row = g
            .audit("run")
            .into_iter()
            .find(|r| r["tool_use_id"] == id)
            .unwrap_or_else(|| panic!("no run row for {id}"));
        assert_ne!(row["decision"], "failed", "{row}");
    }
}

/// A probe the agent wrote: talks to cmdgate's admin socket, reads its audit store, lists its
/// config dir (keys) and data dir; prints what it reached.
fn write_probe(g: &Gate) {
    let probe = format!(
        r#"import os, socket
reached = []
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect({admin:?})
    s.sendall(b"GET /admin/status HTTP/1.1\r\nHost: x\r\n\r\n")
    if s.recv(100):
        reached.append("ADMIN-SOCKET")
except OSError as e:
    print("admin socket:", e)
try:
    if open({db:?}, "rb").read(16).startswith(b"SQLite format"):
        reached.append("AUDIT-DB")
except OSError as e:
    print("audit db:", e)
for d in [{conf:?}, {data:?}]:
    try:
        names = os.listdir(d)
        if names:
            reached.append("LISTED " + d + ": " + " ".join(names))
    except OSError as e:
        print(d, e)
print("REACHED", reached)
if reached:
    os.remove("tracked.txt")
"#,
        admin = g.admin.display().to_string(),
        db = g.data.join("cmdgate.db").display().to_string(),
        conf = g.conf.display().to_string(),
        data = g.data.display().to_string(),
    );
    std::fs::write(g.proj.join("probe.py"), probe).unwrap();
}

#[test]
fn a_mirrored_script_cannot_reach_the_admin_socket_nor_read_the_audit() {
    let g = gate();
    write_probe(&g);
    let (code, text) = mirrored(&g, "probe", "python3 probe.py");
    assert!(text.contains("REACHED []"), "{text}");
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(
        std::fs::read_to_string(g.proj.join("tracked.txt")).unwrap(),
        "precious\n"
    );
}

#[test]
fn the_test_run_of_a_direct_entry_masks_the_same() {
    let mut g = at_home();
    g.init_signed();
    let map = g.proj.join("CLAUDE_CMDS.md");
    let text = std::fs::read_to_string(&map).unwrap();
    let text = text.replacen(
        "- `cargo build *`",
        "- `python3 probe.py` — direct\n- `cargo build *`",
        1,
    );
    std::fs::write(&map, text).unwrap();
    g.resign();
    std::fs::create_dir_all(g.home.join(".ssh")).unwrap();
    std::fs::write(g.home.join(".ssh/id_rsa"), "SSH-KEY-SECRET\n").unwrap();
    g.start();
    write_probe(&g);
    // The probe deletes a tracked file when it reached anything: a dirty test-run, a deny.
    let mut probe = std::fs::read_to_string(g.proj.join("probe.py")).unwrap();
    probe = probe.replace(
        "print(\"REACHED\", reached)",
        &format!(
            "try:\n    if open({:?}).read():\n        reached.append(\"SSH\")\nexcept OSError:\n    pass\nprint(\"REACHED\", reached)",
            g.home.join(".ssh/id_rsa").display().to_string()
        ),
    );
    std::fs::write(g.proj.join("probe.py"), probe).unwrap();
    let (d, reason) = g.pre("direct", "python3 probe.py");
    assert_eq!(d, "allow", "the test-run reached something: {reason}");
    assert!(reason.contains("test-ran"), "{reason}");
    let row = g.decision_row("direct").expect("audited");
    let sandbox: serde_json::Value =
        serde_json::from_str(row["sandbox"].as_str().unwrap()).unwrap();
    assert_eq!(sandbox["clean"], true, "{sandbox}");
}

#[test]
fn an_entry_that_unmasks_a_secret_reads_it_and_only_it_and_explain_says_so() {
    let mut g = at_home();
    g.init_signed();
    let map = g.proj.join("CLAUDE_CMDS.md");
    let text = std::fs::read_to_string(&map).unwrap();
    let text = text.replacen(
        "- `cargo build *`",
        "- `python3 publish.py` — unmask=~/.npmrc\n- `cargo build *`",
        1,
    );
    std::fs::write(&map, text).unwrap();
    g.resign();
    std::fs::write(g.home.join(".npmrc"), "NPM-TOKEN-VALUE\n").unwrap();
    std::fs::create_dir_all(g.home.join(".ssh")).unwrap();
    std::fs::write(g.home.join(".ssh/id_rsa"), "SSH-KEY-SECRET\n").unwrap();
    g.start();
    std::fs::write(
        g.proj.join("publish.py"),
        "import os\nh = os.environ['HOME']\nfor p in ['/.npmrc', '/.ssh/id_rsa']:\n    \
         try: print(p, repr(open(h + p).read()))\n    except OSError as e: print(p, e.errno)\n",
    )
    .unwrap();
    let (code, text) = mirrored(&g, "pub", "python3 publish.py");
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("NPM-TOKEN-VALUE"),
        "the entry unmasks ~/.npmrc: {text}"
    );
    assert!(!text.contains("SSH-KEY-SECRET"), "{text}");
    // The same code under another command (no `unmask=`) reads nothing.
    let (_, text) = mirrored(&g, "other", "python3 ./publish.py");
    assert!(!text.contains("NPM-TOKEN-VALUE"), "{text}");
    // `cmdgate explain` names what the entry unmasks.
    let explained = g.cli_json(&["explain", "--json", "--", "python3", "publish.py"]);
    println!("{explained:#}");
    assert_eq!(
        explained["outcome"]["unmask"],
        serde_json::json!(["~/.npmrc"]),
        "{explained}"
    );
}
