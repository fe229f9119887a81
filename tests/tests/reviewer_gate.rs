//! The model reviewer end to end through the real hook and the real daemon, against a local fake
//! provider: it answers only what the policy asks a person about; allow-once makes no rule; deny
//! and ask reach the agent with the reviewer's words; a broken provider leaves it to the person; a
//! changed tier map between question and answer is re-checked; the fake never receives a
//! catastrophic or tier-3 command or a secret value; a subagent's call shows the parent session's
//! rules; the session can turn it off.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cmdgate_tests::fake_reviewer::{FakeReviewer, Received, Reply};
use cmdgate_tests::gate::Gate;
use serde_json::{json, Value};

/// A tier-2 command of the starter map.
const ASKS: &str = "git push -q origin HEAD:refs/heads/reviewed";
const KEY: &str = "fake-key-8d1e";
const SECRET: &str = "AKIAIOSFODNN7EXAMPLE";

/// A gate whose daemon's reviewer is the fake (`extra` is more config).
fn gate(fake: &FakeReviewer, extra: &str) -> Gate {
    let mut g = Gate::new();
    std::fs::write(
        g.conf.join("config.toml"),
        format!(
            "{extra}\n[reviewer]\nenabled = true\nprovider = \"anthropic\"\nbase_url = \"{}\"\n\
             model = \"fake-reviewer\"\napi_key_env = \"CMDGATE_TEST_REVIEWER_KEY\"\ntimeout_ms = 5000\n",
            fake.anthropic_url()
        ),
    )
    .unwrap();
    g.daemon_env
        .push(("CMDGATE_TEST_REVIEWER_KEY".into(), KEY.into()));
    // The user's own turns, where the hook's events say the transcript is.
    write_transcript(&g, &["please commit what we have"]);
    g.init_signed();
    g.start();
    g
}

fn write_transcript(g: &Gate, turns: &[&str]) {
    let lines: String = turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                "{}\n",
                json!({"type": "user", "uuid": format!("turn-{i}-{t}"), "message": {"role": "user", "content": t}})
            )
        })
        .collect();
    std::fs::write(g.dir.path().join("t.jsonl"), lines).unwrap();
}

fn forbidden() -> Vec<String> {
    vec![
        SECRET.into(),
        KEY.into(),
        "rm -rf /".into(),
        "git push --force".into(),
    ]
}

fn answering(decision: &'static str, reason: &str) -> FakeReviewer {
    let reason = reason.to_owned();
    FakeReviewer::start(
        move |_| Reply::Decision(decision, reason.clone()),
        forbidden(),
    )
}

/// Every decision row of a tool_use_id, oldest first.
fn decisions(g: &Gate, tool_use_id: &str) -> Vec<Value> {
    let mut rows: Vec<Value> = g
        .audit("decision")
        .into_iter()
        .filter(|r| r["tool_use_id"] == tool_use_id)
        .collect();
    rows.sort_by_key(|r| r["id"].as_i64());
    rows
}

#[test]
fn allow_once_runs_that_call_and_makes_no_rule() {
    let fake = answering("allow-once", "the user asked to commit");
    let g = gate(&fake, "");
    let (d, reason) = g.pre("rv-1", ASKS);
    assert_eq!(d, "allow", "{reason}");
    assert!(
        reason.contains("model reviewer") && reason.contains("the user asked to commit"),
        "{reason}"
    );
    let rows = decisions(&g, "rv-1");
    assert_eq!(
        rows.len(),
        2,
        "the ask, then the reviewer's answer: {rows:?}"
    );
    assert_eq!(
        (rows[0]["decision"].as_str(), rows[0]["source"].as_str()),
        (Some("ask"), Some("tier_rule"))
    );
    assert_eq!(
        (rows[1]["decision"].as_str(), rows[1]["source"].as_str()),
        (Some("allow"), Some("reviewer"))
    );
    let note = rows[1]["note"].as_str().unwrap();
    assert!(
        note.contains("model fake-reviewer") && note.contains("evidence sha256:"),
        "{note}"
    );
    assert!(note.contains("tokens prompt "), "{note}");
    // docs/reviewer.md quotes this line (the fakes' counting: 4 bytes a token).
    println!("reviewer call: {note}");
    // What the model saw: the user's own turn, the call, its classification; quoted.
    let seen = &fake.received()[0];
    assert!(seen.text.contains("please commit what we have"));
    assert!(seen
        .text
        .contains("git push -q origin HEAD:refs/heads/reviewed"));
    assert!(seen.text.contains("tier 2"), "{}", seen.text);
    assert_eq!(seen.header("x-api-key"), Some(KEY));
    // No rule: the same command in a new call goes to the reviewer again.
    assert_eq!(
        g.cli_json(&["rules", "list", "--json"])["rules"]
            .as_array()
            .map(Vec::len),
        Some(0)
    );
    let (d, _) = g.pre("rv-2", ASKS);
    assert_eq!(d, "allow");
    assert_eq!(fake.received().len(), 2, "asked again");
    // The export marks the model's label apart from people's.
    let out = g.dir.path().join("export.jsonl");
    let done = g.cli(&["export", "--out", out.to_str().unwrap()]);
    assert!(done.status.success(), "{}", done.stderr_text());
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("\"label_basis\":\"model_allowed_once\""),
        "{text}"
    );
    assert!(g.verify()["broken"].is_null());
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    // status and doctor show it, naming the key's variable, never the key.
    let status = g.cli_json(&["status", "--json"]);
    let r = &status["reviewer"];
    assert_eq!(
        (r["enabled"].as_bool(), r["api_key"].as_str()),
        (Some(true), Some("set")),
        "{r}"
    );
    assert_eq!(r["model"], "fake-reviewer");
    let doctor = g.cli(&["doctor", "--json"]);
    let doctor: Value = serde_json::from_str(&doctor.stdout_text()).unwrap();
    let check = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "model reviewer")
        .cloned()
        .unwrap_or_else(|| panic!("no reviewer check: {doctor}"));
    assert_eq!(check["status"], "ok", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("CMDGATE_TEST_REVIEWER_KEY"),
        "{check}"
    );
    for text in [
        status.to_string(),
        doctor.to_string(),
        std::fs::read_to_string(&out).unwrap(),
    ] {
        assert!(!text.contains(KEY), "the key leaked: {text}");
    }
}

#[test]
fn deny_and_ask_reach_the_agent_with_the_reviewers_words() {
    let fake = answering("deny", "the user never asked for a commit");
    let g = gate(&fake, "");
    let (d, reason) = g.pre("rv-deny", ASKS);
    assert_eq!(d, "deny", "{reason}");
    assert!(
        reason.contains("the user never asked for a commit"),
        "{reason}"
    );
    let fake = answering("ask", "unsure what the user wants");
    let g = gate(&fake, "");
    let (d, reason) = g.pre("rv-ask", ASKS);
    assert_eq!(d, "ask", "{reason}");
    assert!(reason.contains("unsure what the user wants"), "{reason}");
}

#[test]
fn a_broken_provider_leaves_it_to_the_person_told_why() {
    let fake = FakeReviewer::start(|_| Reply::Status(500), forbidden());
    let g = gate(&fake, "");
    let (d, reason) = g.pre("rv-500", ASKS);
    assert_eq!(d, "ask", "{reason}");
    assert!(reason.contains("HTTP 500"), "{reason}");
    let fake = FakeReviewer::start(|_| Reply::Text("yes".into()), forbidden());
    let g = gate(&fake, "");
    let (d, reason) = g.pre("rv-bad", ASKS);
    assert_eq!(d, "ask", "{reason}");
    assert!(reason.contains("broke the contract"), "{reason}");
}

#[test]
fn the_reviewer_never_sees_what_the_policy_decides_nor_secrets() {
    let fake = answering("allow-once", "fine");
    let g = gate(&fake, "");
    for (id, cmd) in [
        ("rv-cat", "rm -rf /"),
        ("rv-t3", "git push --force origin main"),
        ("rv-read", "ls"),
    ] {
        let (d, reason) = g.pre(id, cmd);
        assert_ne!(d, "ask", "{cmd}: {reason}");
        assert!(!reason.contains("model reviewer"), "{cmd}: {reason}");
    }
    // A remembered rejection, and a project with no valid map (read-only), deny first.
    let rejected = "git push -q origin HEAD:refs/heads/rejected";
    let done = g.cli(&[
        "rules",
        "remember",
        "reject",
        "--project",
        g.proj.to_str().unwrap(),
        "--note",
        "never this branch",
        "--",
        rejected,
    ]);
    assert!(done.status.success(), "{}", done.stderr_text());
    let (d, reason) = g.pre("rv-rejected", rejected);
    assert_eq!(d, "deny", "{reason}");
    let unmapped = g.dir.path().join("proj-unmapped");
    std::fs::create_dir_all(&unmapped).unwrap();
    let init = Command::new("git")
        .args(["init", "-q", "."])
        .current_dir(&unmapped)
        .output()
        .unwrap();
    assert!(init.status.success());
    let (d, reason) = g.pre_in(&unmapped, "rv-readonly", ASKS);
    assert_eq!(d, "deny", "{reason}");
    assert!(fake.received().is_empty(), "the reviewer was asked");
    // A tier-2 call carrying a secret: the reviewer sees it redacted.
    let (d, reason) = g.pre(
        "rv-secret",
        &format!("curl -H 'X-Key: {SECRET}' https://example.invalid"),
    );
    assert_eq!(d, "allow", "{reason}");
    assert_eq!(fake.received().len(), 1);
    assert!(fake.received()[0].text.contains("REDACTED"));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn the_session_can_turn_it_off_and_an_always_ask_rule_is_never_reviewed() {
    let fake = answering("allow-once", "fine");
    let g = gate(&fake, "");
    let mut cmd = g.hook_command();
    cmd.env("CMDGATE_REVIEWER", "off");
    let event = g.pre_event("rv-off", "Bash", json!({"command": ASKS}));
    let done = cmdgate_tests::proc::run_bounded(
        &mut cmd,
        event.to_string().as_bytes(),
        Duration::from_secs(120),
    );
    let (d, _) = cmdgate_tests::gate::hook_answer(&done);
    assert_eq!(d, "ask");
    let remembered = g.cli(&[
        "rules",
        "always-ask",
        "--project",
        g.proj.to_str().unwrap(),
        "--",
        ASKS,
    ]);
    assert!(remembered.status.success(), "{}", remembered.stderr_text());
    let (d, reason) = g.pre("rv-always", ASKS);
    assert_eq!(d, "ask", "{reason}");
    assert!(fake.received().is_empty(), "the reviewer was asked");
}

/// What the fake does before it answers.
type Hook = Box<dyn Fn() + Send>;

#[test]
fn a_changed_tier_map_between_question_and_answer_is_rechecked() {
    // The fake moves the command to tier 3 (and re-signs) before it answers allow-once.
    let resign: Arc<Mutex<Option<Hook>>> = Arc::new(Mutex::new(None));
    let hook = Arc::clone(&resign);
    let fake = FakeReviewer::start(
        move |_: &Received| {
            if let Some(f) = hook.lock().unwrap().as_ref() {
                f();
            }
            Reply::Decision("allow-once", "the user asked to commit".into())
        },
        forbidden(),
    );
    let g = gate(&fake, "");
    let map = g.proj.join("CLAUDE_CMDS.md");
    let mut sign = Command::new(&g.cmdgate);
    sign.args(["tiermap", "sign", "--dev", map.to_str().unwrap()])
        .current_dir(&g.proj);
    g.env(&mut sign);
    let sign = Mutex::new(sign);
    *resign.lock().unwrap() = Some(Box::new(move || {
        let text = std::fs::read_to_string(&map).unwrap();
        let text = text.replace("## Tier 3 — deny\n", "## Tier 3 — deny\n\n- `git push *`\n");
        let text = text.replace("- `git push *`\n- `git reset *`", "- `git reset *`");
        std::fs::write(&map, text).unwrap();
        let out = sign.lock().unwrap().output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }));
    let (d, reason) = g.pre("rv-changed", ASKS);
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("policy now denies"), "{reason}");
    assert_eq!(fake.received().len(), 1);
    // The next call is denied by the policy and never reaches the reviewer.
    let (d, _) = g.pre("rv-after", ASKS);
    assert_eq!(d, "deny");
    assert_eq!(fake.received().len(), 1);
}

#[test]
fn a_subagents_call_shows_the_parent_sessions_rules() {
    let fake = answering("ask", "let the person decide");
    let g = gate(
        &fake,
        "[approvals]\nmode = \"background\"\nwait_ms = 60000\n",
    );
    // A person approves one call of the session with a note (the reviewer is off for it).
    let waiting = g.spawn_pre(
        "rv-parent",
        "git push -q origin HEAD:refs/heads/parent",
        &[("CMDGATE_REVIEWER", "off")],
    );
    let started = Instant::now();
    let id = loop {
        let list = g.cli_json(&["pending", "--json"]);
        if let Some(p) = list
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["tool_use_id"] == "rv-parent")
        {
            break p["id"].as_i64().unwrap().to_string();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never pending: {list}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let answered = g.cli_json(&[
        "approve",
        &id,
        "--note",
        "commits on this branch are fine today",
        "--json",
    ]);
    assert_eq!(answered["decision"], "allow");
    assert_eq!(waiting.join().unwrap().0, "allow");
    // A subagent of the same session makes a call the reviewer sees.
    let mut event = g.pre_event("rv-sub", "Bash", json!({"command": ASKS}));
    event["agent_id"] = json!("agent-7");
    event["agent_type"] = json!("general-purpose");
    let mut cmd = g.hook_command();
    cmd.env("CMDGATE_APPROVAL_MODE", "interactive");
    let done = cmdgate_tests::proc::run_bounded(
        &mut cmd,
        event.to_string().as_bytes(),
        Duration::from_secs(120),
    );
    let (d, _) = cmdgate_tests::gate::hook_answer(&done);
    assert_eq!(d, "ask");
    let seen = &fake.received()[0];
    assert!(
        seen.text.contains("commits on this branch are fine today"),
        "{}",
        seen.text
    );
    assert!(seen.text.contains("agent-7"), "{}", seen.text);
}

/// `cmdgate …` with the reviewer's key in the CLI's environment (try and eval run in the CLI):
/// its stdout; fails the test unless it succeeds.
fn cli_text_with_key(g: &Gate, args: &[&str]) -> String {
    let mut cmd = Command::new(&g.cmdgate);
    cmd.args(args).current_dir(&g.proj);
    g.env(&mut cmd);
    cmd.env("CMDGATE_TEST_REVIEWER_KEY", KEY);
    let done = cmdgate_tests::proc::run_bounded(&mut cmd, b"", Duration::from_secs(120));
    assert!(
        done.status.success(),
        "cmdgate {args:?}: {}",
        done.stderr_text()
    );
    done.stdout_text()
}

/// [`cli_text_with_key`], parsed as JSON.
fn cli_with_key(g: &Gate, args: &[&str]) -> Value {
    let out = cli_text_with_key(g, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Waits (bounded) until the call `tool_use_id` is a pending approval; its id.
fn pending_id(g: &Gate, tool_use_id: &str) -> String {
    let started = Instant::now();
    loop {
        let list = g.cli_json(&["pending", "--json"]);
        if let Some(p) = list
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["tool_use_id"] == tool_use_id)
        {
            return p["id"].as_i64().unwrap().to_string();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{tool_use_id} never pending: {list}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Remembers an approval of `command` in `project` (through the CLI); the new rule's id.
fn remember_approval(g: &Gate, project: &std::path::Path, command: &str, note: &str) -> i64 {
    let before: Vec<i64> = rule_ids(g);
    let done = g.cli(&[
        "rules",
        "remember",
        "approve",
        "--project",
        project.to_str().unwrap(),
        "--note",
        note,
        "--",
        command,
    ]);
    assert!(done.status.success(), "{}", done.stderr_text());
    let new: Vec<i64> = rule_ids(g)
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    assert_eq!(new.len(), 1, "{new:?}");
    new[0]
}

fn rule_ids(g: &Gate) -> Vec<i64> {
    g.cli_json(&["rules", "list", "--json"])["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

#[test]
fn try_shows_the_evidence_and_eval_counts_agreement() {
    let fake = answering("allow-once", "looks requested");
    let g = gate(&fake, "");
    let tried = cli_with_key(
        &g,
        &[
            "reviewer",
            "try",
            "--json",
            "--user-turn",
            "commit it please",
            "--",
            ASKS,
        ],
    );
    assert_eq!(tried["decision"], "allow-once", "{tried}");
    assert!(
        tried["evidence"]
            .as_str()
            .unwrap()
            .contains("commit it please"),
        "{tried}"
    );
    assert_eq!(fake.received().len(), 1);
    // Two person-decided examples (one allowed, one denied) and one the policy decided.
    let example = |source: &str, verdict: &str| {
        json!({"request": {"tool": "Bash", "command": ASKS, "input": null, "cwd": "."},
               "context": {"project": g.proj, "session": "s", "tier": "ask"},
               "decision": {"verdict": verdict, "source": source, "sandbox": null}})
        .to_string()
    };
    let file = g.dir.path().join("people.jsonl");
    std::fs::write(
        &file,
        [
            example("human", "allow"),
            example("human", "deny"),
            example("tier_rule", "deny"),
        ]
        .join("\n"),
    )
    .unwrap();
    let eval = cli_with_key(&g, &["reviewer", "eval", "--json", file.to_str().unwrap()]);
    assert_eq!(eval["examples"], 2, "{eval}");
    assert_eq!(
        eval["matrix"]["person_allowed"],
        json!([1, 0, 0, 0]),
        "{eval}"
    );
    assert_eq!(
        eval["matrix"]["person_denied"],
        json!([1, 0, 0, 0]),
        "{eval}"
    );
    assert_eq!(eval["allowed_what_a_person_denied"], 1, "{eval}");
    assert_eq!(fake.received().len(), 3);
}

#[test]
fn try_shows_the_saved_rule_candidates_bounded_and_never_for_shells() {
    let fake = answering("allow-once", "looks requested");
    let g = gate(&fake, "");
    let proj = g.proj.clone();
    let dev = remember_approval(
        &g,
        &proj,
        "git push -q origin HEAD:refs/heads/dev",
        "dev is fine",
    );
    // The exact command, remembered and then disabled (enabled, the policy would allow it).
    let same = remember_approval(&g, &proj, ASKS, "was fine once");
    let off = g.cli(&["rules", "disable", &same.to_string()]);
    assert!(off.status.success(), "{}", off.stderr_text());
    // Never candidates: another subcommand, a shell, a rejection, another project.
    remember_approval(&g, &proj, "git status", "reads");
    remember_approval(&g, &proj, "bash -c 'git push -q origin dev'", "shell");
    let reject = g.cli(&[
        "rules",
        "remember",
        "reject",
        "--project",
        proj.to_str().unwrap(),
        "--",
        "git push -q origin HEAD:refs/heads/prod",
    ]);
    assert!(reject.status.success(), "{}", reject.stderr_text());
    remember_approval(
        &g,
        &g.other_project(),
        "git push -q origin other",
        "elsewhere",
    );
    let tried = cli_with_key(&g, &["reviewer", "try", "--json", "--", ASKS]);
    let got: Vec<(i64, String, bool)> = tried["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["rule"].as_str().unwrap()[6..].parse().unwrap(),
                c["matched"].as_str().unwrap().to_owned(),
                c["enabled"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (same, "the same command".to_owned(), false),
            (
                dev,
                "the same executable and subcommand: git push".to_owned(),
                true
            ),
        ],
        "{tried}"
    );
    let evidence = tried["evidence"].as_str().unwrap();
    assert!(evidence.contains("dev is fine") && !evidence.contains("elsewhere"));
    // The same, for a person reading it.
    let text = cli_text_with_key(&g, &["reviewer", "try", "--", ASKS]);
    assert!(
        text.contains("saved-rule candidates: 2 of 6 saved rules"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "  rule #{same} `{ASKS}`: the same command (disabled)"
        )),
        "{text}"
    );
    // Through a shell or a wrapper the call has no candidates.
    for wrapped in [
        format!("bash -c '{ASKS}'"),
        format!("env GIT_TRACE=0 {ASKS}"),
    ] {
        let t = cli_with_key(&g, &["reviewer", "try", "--json", "--", &wrapped]);
        assert_eq!(t["candidates"], json!([]), "{wrapped}: {t}");
        assert!(t["decision"].is_string(), "the policy asked: {t}");
    }
    // At most 8: the exact one first, then the newest.
    let newest: Vec<i64> = (0..10)
        .map(|i| {
            remember_approval(
                &g,
                &proj,
                &format!("git push -q origin HEAD:refs/heads/b{i}"),
                "more",
            )
        })
        .collect();
    let tried = cli_with_key(&g, &["reviewer", "try", "--json", "--", ASKS]);
    // docs/reviewer.md quotes these (the fakes' counting) with 8 short candidates ...
    println!("try with 8 candidates: usage {}", tried["usage"]);
    let rules: Vec<String> = tried["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["rule"].as_str().unwrap().to_owned())
        .collect();
    let mut want = vec![format!("rule #{same}")];
    want.extend(newest.iter().rev().take(7).map(|id| format!("rule #{id}")));
    assert_eq!(rules, want, "{tried}");
    // Within 8 KiB: long candidates end the list early.
    for i in 0..3 {
        remember_approval(
            &g,
            &proj,
            &format!("git push -q origin HEAD:refs/heads/{i}{}", "x".repeat(3000)),
            "long",
        );
    }
    let tried = cli_with_key(&g, &["reviewer", "try", "--json", "--", ASKS]);
    // ... and with candidates near the 8 KiB bound.
    println!("try with long candidates: usage {}", tried["usage"]);
    let candidates = tried["candidates"].as_array().unwrap();
    assert_eq!(
        candidates.len(),
        3,
        "the exact one and two long ones: {tried}"
    );
    let bytes: usize = candidates.iter().map(|c| c.to_string().len()).sum();
    assert!(bytes <= 8 * 1024, "{bytes}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn eval_replays_a_real_exports_person_decided_calls() {
    // The model's answer by the branch in the call: the person's answers were made with it off.
    let fake = FakeReviewer::start(
        |r: &Received| {
            let call = r
                .text
                .split("<evidence name=\"tool_call\">")
                .nth(1)
                .unwrap_or("");
            let call = call.split("</evidence>").next().unwrap_or("");
            let has = |b: &str| call.contains(&format!("refs/heads/{b}\""));
            if has("ev-a1") || has("ev-d2") || has("ev-m1") {
                Reply::Decision("allow-once", "looks requested".into())
            } else if has("ev-a2") {
                Reply::Decision("ask", "unsure".into())
            } else if has("ev-d1") {
                Reply::Decision("deny", "not requested".into())
            } else {
                Reply::Status(500)
            }
        },
        forbidden(),
    );
    let g = gate(
        &fake,
        "[approvals]\nmode = \"background\"\nwait_ms = 60000\n",
    );
    let push = |b: &str| format!("git push -q origin HEAD:refs/heads/{b}");
    for (branch, approve) in [
        ("ev-a1", true),
        ("ev-a2", true),
        ("ev-a3", true),
        ("ev-d1", false),
        ("ev-d2", false),
    ] {
        let waiting = g.spawn_pre(branch, &push(branch), &[("CMDGATE_REVIEWER", "off")]);
        let id = pending_id(&g, branch);
        let verb = if approve { "approve" } else { "reject" };
        let answered = g.cli_json(&[verb, &id, "--note", "decided by a person", "--json"]);
        let want = if approve { "allow" } else { "deny" };
        assert_eq!(answered["decision"], want, "{answered}");
        assert_eq!(waiting.join().unwrap().0, want);
    }
    // One call the model decided live: an example, but not a person's.
    let (d, reason) = g.pre("ev-m1", &push("ev-m1"));
    assert_eq!(d, "allow", "{reason}");
    assert_eq!(fake.received().len(), 1);
    let file = g.dir.path().join("export.jsonl");
    let exported = g.cli(&["export", "--out", file.to_str().unwrap()]);
    assert!(exported.status.success(), "{}", exported.stderr_text());
    let bases: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| {
            e["request"]["command"]
                .as_str()
                .is_some_and(|c| c.contains("ev-"))
        })
        .map(|e| e["label_basis"].as_str().unwrap().to_owned())
        .collect();
    let count = |b: &str| bases.iter().filter(|x| *x == b).count();
    assert_eq!(
        (
            count("human_approved"),
            count("human_rejected"),
            count("model_allowed_once")
        ),
        (3, 2, 1),
        "{bases:?}"
    );
    let eval = cli_with_key(&g, &["reviewer", "eval", "--json", file.to_str().unwrap()]);
    assert_eq!(eval["examples"], 5, "{eval}");
    assert_eq!(
        eval["columns"],
        json!(["allow-once", "deny", "ask", "unavailable"])
    );
    assert_eq!(
        eval["matrix"]["person_allowed"],
        json!([1, 0, 1, 1]),
        "{eval}"
    );
    assert_eq!(
        eval["matrix"]["person_denied"],
        json!([1, 1, 0, 0]),
        "{eval}"
    );
    assert_eq!(eval["agreed"], 2, "{eval}");
    assert_eq!(eval["allowed_what_a_person_denied"], 1, "{eval}");
    let ms = |k: &str| {
        eval["latency_ms"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k}: {eval}"))
    };
    assert!(ms("p50") <= ms("p95") && ms("p95") <= ms("max"), "{eval}");
    assert_eq!(
        fake.received().len(),
        6,
        "one question per person-decided example"
    );
    // What eval sent is the export's redacted call, quoted like a live question.
    let asked = &fake.received()[1].text;
    assert!(asked.contains("<evidence name=\"tool_call\">") && asked.contains("ev-"));
    // The table for a person.
    let text = cli_text_with_key(&g, &["reviewer", "eval", file.to_str().unwrap()]);
    println!("{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("5 person-decided examples from "),
        "{text}"
    );
    let cells = |l: &str| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" ");
    assert!(
        lines[2].starts_with("allowed") && cells(lines[2]) == "1 0 1 1",
        "{text}"
    );
    assert!(
        lines[3].starts_with("denied") && cells(lines[3]) == "1 1 0 0",
        "{text}"
    );
    assert!(
        lines[4].starts_with("agreed on 2 of 5; allowed 1 a person denied; latency p50 "),
        "{text}"
    );
}

#[test]
fn a_failed_test_run_is_reviewed_with_the_mirror_runs_report() {
    let fake = answering("deny", "an endless sleep was not requested");
    let g = gate(&fake, "[sandbox]\ntimeout_ms = 1000\n");
    // `python3 -c *` is test-run in the mirror first (a `direct` entry); this one never ends
    // there, so the test-run fails and the policy asks a person: the reviewer's question.
    let map = g.proj.join("CLAUDE_CMDS.md");
    let text = std::fs::read_to_string(&map).unwrap();
    let text = text.replacen(
        "- `cargo build *`",
        "- `python3 -c *` — direct\n- `cargo build *`",
        1,
    );
    std::fs::write(&map, text).unwrap();
    g.resign();
    let (d, reason) = g.pre("rv-testrun", "python3 -c 'import time; time.sleep(600)'");
    assert_eq!(d, "deny", "{reason}");
    assert!(
        reason.contains("an endless sleep was not requested"),
        "{reason}"
    );
    let rows = decisions(&g, "rv-testrun");
    assert_eq!(
        (rows[0]["decision"].as_str(), rows[0]["source"].as_str()),
        (Some("ask"), Some("sandbox")),
        "{rows:?}"
    );
    let seen = &fake.received()[0].text;
    let report = seen
        .split("<evidence name=\"mirror_run\">")
        .nth(1)
        .expect("the mirror run's report is in the evidence");
    let report = report.split("</evidence>").next().unwrap();
    println!("the mirror run as the reviewer saw it: {report}");
    assert!(
        report.contains("\"timed_out\": true") || report.contains("\"verdict\": \"failed\""),
        "{report}"
    );
}

#[test]
fn unknown_tools_and_secret_reads_are_reviewed_without_the_secret() {
    let fake = answering("ask", "a person should look");
    let g = gate(&fake, "");
    std::fs::write(g.proj.join(".env"), format!("AWS_ACCESS_KEY_ID={SECRET}\n")).unwrap();
    let env_file = g.proj.join(".env");
    for (id, tool, input) in [
        (
            "rv-mcp",
            "mcp__deploy__release",
            json!({"target": "staging"}),
        ),
        ("rv-env", "Read", json!({"file_path": env_file})),
    ] {
        let (d, reason) = g.pre_tool(id, tool, input);
        assert_eq!(d, "ask", "{tool}: {reason}");
        assert!(reason.contains("a person should look"), "{tool}: {reason}");
    }
    let asked: Vec<String> = fake
        .received()
        .iter()
        .map(|r| {
            let call = r
                .text
                .split("<evidence name=\"tool_call\">")
                .nth(1)
                .unwrap();
            call.split("</evidence>").next().unwrap().to_owned()
        })
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[0].contains("mcp__deploy__release") && asked[0].contains("staging"));
    assert!(asked[1].contains("\"Read\"") && asked[1].contains(".env"));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn changed_rules_between_question_and_answer_go_to_the_person_or_deny() {
    // Before it answers allow-once, the fake has the operator save a rule through the CLI.
    let edit: Arc<Mutex<Option<Hook>>> = Arc::new(Mutex::new(None));
    let hook = Arc::clone(&edit);
    let fake = FakeReviewer::start(
        move |_: &Received| {
            if let Some(f) = hook.lock().unwrap().take() {
                f();
            }
            Reply::Decision("allow-once", "the user asked to push".into())
        },
        forbidden(),
    );
    let g = gate(&fake, "");
    let remember = |decision: &str, command: &str| {
        let mut cmd = Command::new(&g.cmdgate);
        cmd.args([
            "rules",
            "remember",
            decision,
            "--project",
            g.proj.to_str().unwrap(),
            "--",
            command,
        ]);
        g.env(&mut cmd);
        Mutex::new(cmd)
    };
    let run = |cmd: Mutex<Command>| -> Hook {
        Box::new(move || {
            let out = cmd.lock().unwrap().output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        })
    };
    // An unrelated rule: the rules changed, so a person decides.
    *edit.lock().unwrap() = Some(run(remember("approve", "git status --short")));
    let (d, reason) = g.pre("rv-rules-changed", ASKS);
    assert_eq!(d, "ask", "{reason}");
    assert!(reason.contains("the rules changed"), "{reason}");
    // A rejection of this very command: the policy now denies.
    *edit.lock().unwrap() = Some(run(remember("reject", ASKS)));
    let (d, reason) = g.pre("rv-rules-reject", ASKS);
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("policy now denies"), "{reason}");
    assert_eq!(fake.received().len(), 2);
}
