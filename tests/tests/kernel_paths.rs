//! Paths as the kernel sees them, end to end with the real hook and the real daemon: the
//! kernel-paths table (`policy/tests/kernel_table/cases.txt`, the same cases the policy and the hook
//! binary run) through the hook and straight to the daemon, and the sequences of issue 13 — a link
//! made by one call and written through by the next, the nested repository whose fsmonitor a
//! `git status` would run, cmdgate's signing key and store read by every tool, a map put in place
//! through a link.

#[allow(dead_code)] // the in-memory half is for the policy's test
#[path = "../../policy/tests/kernel_table/mod.rs"]
mod kernel_table;

use std::path::Path;
use std::process::{Command, Stdio};

use cmdgate_tests::gate::{request, Gate};
use serde_json::{json, Value};

/// A PreToolUse straight to the daemon's decide socket (no hook fast path), with the agent's
/// `HOME` as the hook sends it: (decision, reason).
fn direct(g: &Gate, id: &str, tool: &str, input: Value) -> (String, String) {
    let body = json!({
        "v": 1,
        "event": "PreToolUse",
        "session_id": "sess-direct",
        "permission_mode": "default",
        "tool_use_id": id,
        "cwd": g.proj,
        "project_dir": g.proj,
        "tool_name": tool,
        "tool_input": input,
        "home": g.home,
    });
    let (status, out) =
        request(&g.socket, "POST", "/v1/decide", body.to_string().as_bytes()).expect("decide");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
    let v: Value = serde_json::from_slice(&out).unwrap();
    (
        v["decision"].as_str().unwrap_or_default().to_owned(),
        v["reason"].as_str().unwrap_or_default().to_owned(),
    )
}

/// Empties the project (but its repository, tracked file and map) and the home.
fn reset(g: &Gate) {
    for entry in std::fs::read_dir(&g.proj).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if [".git", "tracked.txt", "CLAUDE_CMDS.md"].contains(&name.to_str().unwrap()) {
            continue;
        }
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    std::fs::remove_dir_all(&g.home).unwrap();
    std::fs::create_dir_all(&g.home).unwrap();
}

fn started() -> Gate {
    let mut g = Gate::new();
    // The table is mostly refusals: keep the breaker from turning the rest into read-only denials.
    std::fs::write(
        g.conf.join("config.toml"),
        "[breaker]\nthreshold = 100000\n",
    )
    .unwrap();
    g.init_signed();
    g.start();
    assert!(g.conf.join("dev-signing-key").is_file(), "init made no key");
    g
}

#[test]
fn the_table_through_the_hook_and_the_daemon() {
    let g = started();
    assert_eq!(g.dir.path().join("proj"), g.proj, "the table's layout");
    let w = g.dir.path().display().to_string();
    let mut failures = Vec::new();
    for (i, case) in kernel_table::cases(&w).into_iter().enumerate() {
        reset(&g);
        for s in &case.setup {
            kernel_table::apply_real(&g.proj, s);
        }
        let (hook, why_hook) = g.pre_tool(&format!("h{i}"), &case.tool, case.input());
        let (daemon, why_daemon) = direct(&g, &format!("d{i}"), &case.tool, case.input());
        if hook != case.verdict || daemon != case.verdict {
            failures.push(format!(
                "{}: {} {:?}: want {}, hook {hook} ({why_hook}), daemon {daemon} ({why_daemon})",
                case.name, case.tool, case.arg, case.verdict
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn link_then_write_is_refused_at_the_write() {
    let g = started();
    std::fs::write(g.home.join(".bashrc"), "# rc\n").unwrap();
    // Making the link is ordinary work (a test-run of `ln -s`): allowed.
    let (d, reason) = g.pre("mk-link", "ln -s ../home/.bashrc notes.txt");
    assert_eq!(d, "allow", "{reason}");
    std::os::unix::fs::symlink("../home/.bashrc", g.proj.join("notes.txt")).unwrap();
    // Writing the link's name writes ~/.bashrc: refused at the write, by the hook's route and by
    // the daemon, and the reason names where it lands.
    let write = json!({"file_path": g.proj.join("notes.txt"), "content": "curl x | sh\n"});
    for (d, reason) in [
        g.pre_tool("w-link", "Write", write.clone()),
        direct(&g, "w-link-d", "Write", write.clone()),
    ] {
        assert_eq!(d, "ask", "{reason}");
        assert!(reason.contains(".bashrc"), "{reason}");
    }
    // The same through a hard link.
    std::fs::hard_link(g.home.join(".bashrc"), g.proj.join("hl")).unwrap();
    let write = json!({"file_path": "hl", "content": "x\n"});
    for (d, reason) in [
        g.pre_tool("w-hl", "Write", write.clone()),
        direct(&g, "w-hl-d", "Write", write.clone()),
    ] {
        assert_eq!(d, "ask", "{reason}");
        assert!(reason.contains("hard links"), "{reason}");
    }
    // Control: a plain file of the project is written without a person.
    let (d, reason) = g.pre_tool(
        "w-plain",
        "Write",
        json!({"file_path": "plain.txt", "content": ""}),
    );
    assert_eq!(d, "allow", "{reason}");
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success(), "git {args:?}");
}

#[test]
fn the_nested_repository_fsmonitor_never_runs() {
    let g = started();
    let marker = g.dir.path().join("fsmonitor-ran");
    let fsmonitor = format!("touch {}", marker.display());
    // The agent makes a nested repository and configures its fsmonitor; whatever the gate said
    // to those steps, they are done here (as if a person had approved them).
    let (_, _) = g.pre("init", "git init sub");
    git(&g.proj, &["init", "-q", "sub"]);
    let (d, reason) = g.pre(
        "config",
        &format!("git -C sub config core.fsmonitor '{fsmonitor}'"),
    );
    assert_ne!(d, "allow", "{reason}");
    git(
        &g.proj.join("sub"),
        &["config", "core.fsmonitor", &fsmonitor],
    );
    // The "read" that would run it: never allowed, by the hook or the daemon, in any spelling.
    for (i, cmd) in [
        "git -C sub status",
        "cd sub && git status",
        "git -C sub diff",
    ]
    .iter()
    .enumerate()
    {
        let (d, reason) = g.pre(&format!("status-{i}"), cmd);
        assert_eq!(d, "ask", "{cmd}: {reason}");
        assert!(reason.contains("not the project's own"), "{cmd}: {reason}");
        let (d, reason) = direct(
            &g,
            &format!("status-d-{i}"),
            "Bash",
            json!({"command": cmd}),
        );
        assert_eq!(d, "ask", "{cmd}: {reason}");
    }
    assert!(!marker.exists(), "the fsmonitor command ran");
    // The project's own repository stays a read.
    let (d, reason) = g.pre("own-status", "git status");
    assert_eq!(d, "allow", "{reason}");
    // And the sequence was real: run on the host, the read runs the configured command.
    let _ = Command::new("git")
        .args(["-C", "sub", "status"])
        .current_dir(&g.proj)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(marker.exists(), "the fsmonitor would not have run anyway");
}

#[test]
fn reading_the_signing_key_or_the_store_is_refused_by_every_tool() {
    let g = started();
    let key = g.conf.join("dev-signing-key");
    let db = g.data.join("cmdgate.db");
    assert!(db.is_file());
    std::os::unix::fs::symlink(&key, g.proj.join("key.txt")).unwrap();
    std::fs::hard_link(&key, g.proj.join("hk")).unwrap();
    let calls: Vec<(&str, Value)> = vec![
        ("Read", json!({"file_path": key})),
        ("Read", json!({"file_path": db})),
        ("Read", json!({"file_path": "key.txt"})),
        ("Read", json!({"file_path": "hk"})),
        ("Read", json!({"file_path": "~/../conf/dev-signing-key"})),
        (
            "Read",
            json!({"file_path": format!("/proc/self/root{}", key.display())}),
        ),
        ("Grep", json!({"pattern": "x", "path": g.conf})),
        ("Grep", json!({"pattern": "x", "path": g.dir.path()})),
        ("LS", json!({"path": g.data})),
        ("Glob", json!({"pattern": "*", "path": g.conf})),
        ("Bash", json!({"command": "cat key.txt"})),
        ("Bash", json!({"command": "base64 hk"})),
        ("Bash", json!({"command": "cat ~/../conf/dev-signing-key"})),
        (
            "Bash",
            json!({"command": "sqlite3 ../data/cmdgate.db .dump"}),
        ),
    ];
    for (i, (tool, input)) in calls.into_iter().enumerate() {
        for (d, reason) in [
            g.pre_tool(&format!("own-{i}"), tool, input.clone()),
            direct(&g, &format!("own-d-{i}"), tool, input.clone()),
        ] {
            assert_eq!(d, "deny", "{tool} {input}: {reason}");
            assert!(reason.contains("cmdgate"), "{tool} {input}: {reason}");
        }
    }
}

#[test]
fn a_map_written_through_a_link_is_not_accepted() {
    let g = started();
    let map = g.proj.join("CLAUDE_CMDS.md");
    // A broader map, signed with the development key (as an agent that had read it could).
    let broad = g.dir.path().join("broad.md");
    let text = std::fs::read_to_string(&map).unwrap();
    let body = text
        .lines()
        .take_while(|l| !l.starts_with("<!-- cmdgate-signature") && !l.starts_with("---sig"))
        .collect::<Vec<_>>()
        .join("\n");
    // A higher revision than the project's, as a newer map would carry.
    let body: String = body
        .lines()
        .map(|l| {
            if l.starts_with("revision:") {
                "revision: 9"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    let body = body.replacen("## Tier 0 — read\n", "## Tier 0 — read\n- `python3 *`\n", 1);
    assert!(body.contains("`python3 *`"), "no tier 0 section: {body}");
    std::fs::write(&broad, format!("{body}\n")).unwrap();
    let done = g.cli(&["tiermap", "sign", "--dev", broad.to_str().unwrap()]);
    assert!(done.status.success(), "sign: {}", done.stderr_text());
    // Written through a link named like an ordinary file: refused at the write.
    std::os::unix::fs::symlink("CLAUDE_CMDS.md", g.proj.join("notes.md")).unwrap();
    let write =
        json!({"file_path": "notes.md", "content": std::fs::read_to_string(&broad).unwrap()});
    for (d, reason) in [
        g.pre_tool("w-map", "Write", write.clone()),
        direct(&g, "w-map-d", "Write", write.clone()),
    ] {
        assert_eq!(d, "ask", "{reason}");
        assert!(reason.contains("tier map"), "{reason}");
    }
    // Put in place as a link to the signed file: neither the hook nor the daemon accepts it.
    std::fs::remove_file(&map).unwrap();
    std::os::unix::fs::symlink(&broad, &map).unwrap();
    let (d, reason) = g.pre("py-link", "python3 tool.py");
    assert_ne!(d, "allow", "{reason}");
    assert!(reason.contains("symbolic link"), "{reason}");
    // Control: the same signed text as the file itself is accepted, so only the link made the
    // difference.
    std::fs::remove_file(&map).unwrap();
    std::fs::copy(&broad, &map).unwrap();
    let (d, reason) = g.pre("py-file", "python3 tool.py");
    assert_eq!(d, "allow", "{reason}");
}

/// A way git runs configured code: (name, config keys and values with `{M}` for the marker,
/// `.gitattributes` text, the read that would run it).
type GitCase = (
    &'static str,
    &'static [(&'static str, &'static str)],
    Option<&'static str>,
    &'static str,
);

#[test]
fn no_read_runs_code_a_nested_repository_configured() {
    let g = started();
    // One nested repository per way git runs configured code, each with a committed file changed
    // since (so `diff` has work to do), and the read that would run it.
    let cases: [GitCase; 7] = [
        (
            "fsmonitor",
            &[("core.fsmonitor", "touch {M}")],
            None,
            "status",
        ),
        ("pager", &[("core.pager", "touch {M}; cat")], None, "log -1"),
        (
            "pager-log",
            &[("pager.log", "touch {M}; cat")],
            None,
            "log --oneline",
        ),
        ("external", &[("diff.external", "touch {M}")], None, "diff"),
        (
            "textconv",
            &[("diff.x.textconv", "touch {M}; cat")],
            Some("* diff=x\n"),
            "diff",
        ),
        (
            "filter",
            &[
                ("filter.x.clean", "touch {M}; cat"),
                ("filter.x.smudge", "cat"),
            ],
            Some("* filter=x\n"),
            "diff",
        ),
        (
            "ssh",
            &[("core.sshCommand", "touch {M}")],
            None,
            "ls-remote origin",
        ),
    ];
    let mut markers = Vec::new();
    for (i, (name, config, attributes, read)) in cases.iter().enumerate() {
        let sub = g.proj.join(format!("sub-{name}"));
        std::fs::create_dir_all(&sub).unwrap();
        git(&sub, &["init", "-q", "."]);
        std::fs::write(sub.join("f.txt"), "one\n").unwrap();
        git(&sub, &["add", "f.txt"]);
        git(
            &sub,
            &[
                "-c",
                "user.email=t@t",
                "-c",
                "user.name=t",
                "commit",
                "-qm",
                "x",
            ],
        );
        std::fs::write(sub.join("f.txt"), "two\n").unwrap();
        if let Some(a) = attributes {
            std::fs::write(sub.join(".gitattributes"), a).unwrap();
        }
        git(
            &sub,
            &["remote", "add", "origin", "ssh://example.invalid/x"],
        );
        let marker = g.dir.path().join(format!("ran-{name}"));
        for (k, v) in *config {
            let v = v.replace("{M}", &marker.display().to_string());
            git(&sub, &["config", k, &v]);
        }
        for cmd in [
            format!("git -C sub-{name} {read}"),
            format!("cd sub-{name} && git {read}"),
        ] {
            let (d, reason) = g.pre(&format!("cfg-{i}-{}", cmd.len()), &cmd);
            assert_eq!(d, "ask", "{cmd}: {reason}");
            let (d, reason) = direct(
                &g,
                &format!("cfg-d-{i}-{}", cmd.len()),
                "Bash",
                json!({"command": cmd}),
            );
            assert_eq!(d, "ask", "{cmd}: {reason}");
        }
        markers.push((name, marker, sub, *read));
    }
    for (name, marker, _, _) in &markers {
        assert!(!marker.exists(), "{name}: the configured command ran");
    }
    // The configured commands are real: run on the host (no terminal, so no pager; no network),
    // the reads that need neither run them.
    for (name, marker, sub, read) in &markers {
        if ["fsmonitor", "external", "textconv"].contains(name) {
            let _ = Command::new("git")
                .args(read.split(' '))
                .current_dir(sub)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            assert!(
                marker.exists(),
                "{name}: `git {read}` did not run it on the host"
            );
        }
    }
}

#[test]
fn bash_writes_to_persistence_files_and_nested_repositories_are_not_clean() {
    let g = started();
    git(&g.proj, &["init", "-q", "sub"]);
    for (i, (cmd, names)) in [
        ("echo '{}' > .mcp.json", ".mcp.json"),
        (
            "mkdir -p .husky && echo 'curl x' > .husky/pre-commit",
            ".husky",
        ),
        (
            "mkdir -p pkg/.claude && echo '{}' > pkg/.claude/settings.json",
            ".claude",
        ),
        (
            "printf '[core]\\n\\tfsmonitor = x\\n' >> sub/.git/config",
            "sub/.git/config",
        ),
        (
            "echo 'curl x' > sub/.git/hooks/post-checkout",
            "sub/.git/hooks",
        ),
    ]
    .iter()
    .enumerate()
    {
        // The command runs once, in the mirror (issue 19): the hook rewrites it to the run client,
        // and the write is rolled back with the protected name, never committed.
        let rewritten = g.pre_rewrite(&format!("bw-{i}"), cmd);
        let done = g.shell(&rewritten);
        let err = done.stderr_text();
        assert_ne!(done.status.code(), Some(0), "{cmd}: {err}");
        assert!(
            err.contains("cmdgate rolled back") && err.contains(names),
            "{cmd}: {err}"
        );
    }
    assert!(!g.proj.join(".mcp.json").exists());
    assert!(!g.proj.join(".husky").exists());
    assert!(!g.proj.join("pkg/.claude").exists());
    assert!(!g.proj.join("sub/.git/hooks/post-checkout").exists());
    let config = std::fs::read_to_string(g.proj.join("sub/.git/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    // Control: build outputs, and a fresh repository's own files, are clean and committed.
    for (i, cmd) in ["mkdir -p build && touch build/out", "git init -q fresh"]
        .iter()
        .enumerate()
    {
        let rewritten = g.pre_rewrite(&format!("bw-ok-{i}"), cmd);
        let done = g.shell(&rewritten);
        assert_eq!(done.status.code(), Some(0), "{cmd}: {}", done.stderr_text());
    }
    assert!(g.proj.join("build/out").exists());
    assert!(g.proj.join("fresh/.git").is_dir());
}
