//! The model reviewer with the real Claude Code CLI (scripted by the fake Messages API), the hook
//! installed by `cmdgate hook install`, a real `cmdgated` whose reviewer is a local fake provider:
//! a tier-2 command the reviewer allows once runs, and the same command in a new call is asked
//! again; the user's own prompt reaches the reviewer from Claude Code's real transcript; a reviewer
//! "ask" is Claude Code's permission prompt with the reviewer's words (answered by the test as an
//! SDK host; a denial under plain `claude -p`) or, in background mode, a pending approval whose
//! operator note the model reads in its next request; a subagent's call sees the parent session's
//! rules.

use std::process::Command;
use std::time::{Duration, Instant};

use cmdgate_tests::claude::{git, Session, World};
use cmdgate_tests::fake_api::{subagent_tool_use_id, FakeApi, Step, Subagent};
use cmdgate_tests::fake_reviewer::{FakeReviewer, Reply};
use cmdgate_tests::gate::Gate;
use serde_json::Value;

const KEY: &str = "fake-key-c0de";
const PROMPT: &str = "please record an empty commit named reviewed";

/// A daemon whose project is the session's workspace (signed starter map), with the fake as its
/// reviewer, and the hook installed.
fn world(fake: &FakeReviewer, extra: &str) -> (Gate, Session) {
    let w = World::builder()
        .config(extra)
        .config(&format!(
            "[reviewer]\nenabled = true\nprovider = \"openai\"\nbase_url = \"{}\"\n\
             model = \"fake-reviewer\"\napi_key_env = \"CMDGATE_TEST_REVIEWER_KEY\"\nstream = true",
            fake.openai_url()
        ))
        .daemon_env("CMDGATE_TEST_REVIEWER_KEY", KEY)
        .start();
    (w.gate, w.session)
}

/// One more than the times a `git reset` ran (the tier-2 command the reviewer is asked about;
/// each run adds a reflog entry, even to where HEAD already is).
fn resets(session: &Session) -> usize {
    1 + git(&session.workspace(), &["reflog", "--format=%gs"])
        .lines()
        .filter(|l| l.starts_with("reset: moving to HEAD"))
        .count()
}

/// A thread that waits (bounded) for the first pending approval, checks that the reviewer's words
/// `said` are in its reason, and approves it with `note` through `cmdgate approve`.
fn approve_first_pending(gate: &Gate, note: &str, said: &str) -> std::thread::JoinHandle<()> {
    answer_first_pending(gate, "approve", note, said)
}

/// [`approve_first_pending`] with the answer `verb` (`approve` or `reject`).
fn answer_first_pending(
    gate: &Gate,
    verb: &'static str,
    note: &str,
    said: &str,
) -> std::thread::JoinHandle<()> {
    let cmdgate = gate.cmdgate.clone();
    let mut env_cmd = Command::new(&gate.cmdgate);
    gate.env(&mut env_cmd);
    let envs: Vec<(String, String)> = env_cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.to_owned())))
        .collect();
    let (note, said) = (note.to_owned(), said.to_owned());
    std::thread::spawn(move || {
        let started = Instant::now();
        loop {
            let out = Command::new(&cmdgate)
                .args(["pending", "--json"])
                .envs(envs.clone())
                .output()
                .unwrap();
            let list: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            if let Some(p) = list.as_array().and_then(|l| l.first()) {
                let id = p["id"].as_i64().unwrap().to_string();
                assert!(
                    p["reason"].as_str().unwrap_or_default().contains(&said),
                    "{p}"
                );
                let done = Command::new(&cmdgate)
                    .args([verb, &id, "--note", &note])
                    .envs(envs.clone())
                    .output()
                    .unwrap();
                assert!(
                    done.status.success(),
                    "{}",
                    String::from_utf8_lossy(&done.stderr)
                );
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(150),
                "never pending"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

#[test]
fn a_tier2_command_allowed_once_runs_and_the_next_call_is_asked_again() {
    let fake = FakeReviewer::start(
        |_| Reply::Decision("allow-once", "the user asked for this commit".into()),
        vec![KEY.into()],
    );
    let (gate, session) = world(&fake, "");
    let cmd = "git reset -q --soft HEAD";
    let api = FakeApi::start(vec![Step::bash(cmd), Step::bash(cmd)]);
    let run = session.run(&api, PROMPT);
    println!("tool results:\n{}", api.transcript());
    assert!(run.done.status.success(), "{}", run.done.stderr_text());
    for turn in [0, 1] {
        let r = api
            .result_of(turn)
            .unwrap_or_else(|| panic!("no result for turn {turn}"));
        assert!(!r.is_error, "turn {turn}: {}", r.content);
    }
    assert_eq!(resets(&session), 3, "both commits ran");
    // Each call was a question of its own: allow-once made no rule.
    let questions = fake.received();
    assert_eq!(questions.len(), 2, "asked again for the second call");
    assert!(gate.cli_json(&["rules", "list", "--json"])["rules"]
        .as_array()
        .is_some_and(Vec::is_empty));
    // The user's own prompt came from Claude Code's real transcript, quoted.
    assert!(questions[0].text.contains(PROMPT), "{}", questions[0].text);
    assert_eq!(
        questions[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    // The prefix (user turns, session rules) is byte-identical within the turn.
    let user = |q: &cmdgate_tests::fake_reviewer::Received| {
        q.body["messages"][1]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let (a, b) = (user(&questions[0]), user(&questions[1]));
    let prefix = |t: &str| t[..t.find("<evidence name=\"tool_call\">").unwrap()].to_owned();
    assert_eq!(prefix(&a), prefix(&b));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn a_reviewer_ask_is_claude_codes_prompt_interactively() {
    let fake = FakeReviewer::start(
        |_| Reply::Decision("ask", "the user did not mention commits".into()),
        vec![KEY.into()],
    );
    let (_gate, session) = world(&fake, "");
    let api = FakeApi::start(vec![Step::bash("git reset -q --soft HEAD~0")]);
    let run = session.run(&api, "tidy up");
    assert!(run.done.status.success(), "{}", run.done.stderr_text());
    let r = api.result_of(0).expect("a result");
    println!("{r:?}");
    assert!(
        r.content.contains("the user did not mention commits"),
        "{}",
        r.content
    );
    assert_eq!(resets(&session), 1, "nothing ran");
    let denials = run.result["permission_denials"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(
        denials, 1,
        "under claude -p an ask is a denial: {}",
        run.result
    );
}

#[test]
fn a_reviewer_ask_is_claude_codes_permission_prompt_which_the_person_answers() {
    const SAID: &str = "REVIEWER-9d: the user did not mention resets";
    let fake = FakeReviewer::start(|_| Reply::Decision("ask", SAID.into()), vec![KEY.into()]);
    let (gate, session) = world(&fake, "");
    let cmd = "git reset -q --soft HEAD";
    let api = FakeApi::start(vec![Step::bash(cmd), Step::bash(cmd)]);
    // The person at Claude Code's prompt allows the first call and refuses the second.
    let mut answers = [true, false].into_iter();
    let run = session.run_prompting(&api, PROMPT, |_| answers.next().unwrap_or(false));
    println!(
        "prompts: {:?}\ntool results:\n{}",
        run.prompts,
        api.transcript()
    );
    assert_eq!(run.result["subtype"], "success", "{}", run.result);
    assert_eq!(run.prompts.len(), 2, "one prompt per call");
    for p in &run.prompts {
        assert_eq!(p["tool_name"], "Bash", "{p}");
        assert_eq!(p["input"]["command"], cmd, "{p}");
        assert_eq!(
            p["decision_reason_type"], "hook",
            "the hook's ask raised it: {p}"
        );
        let reason = p["decision_reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(SAID),
            "the reviewer's words are in the prompt: {p}"
        );
    }
    assert!(!api.result_of(0).expect("the allowed call").is_error);
    let refused = api.result_of(1).expect("the refused call");
    assert!(refused.is_error, "{}", refused.content);
    assert_eq!(resets(&session), 2, "only the call the person allowed ran");
    // Each call was the reviewer's question first, then the person's.
    assert_eq!(fake.received().len(), 2);
    let reviewer_rows: Vec<Value> = gate
        .audit("decision")
        .into_iter()
        .filter(|r| r["source"] == "reviewer")
        .collect();
    assert_eq!(reviewer_rows.len(), 2, "{reviewer_rows:?}");
    assert!(reviewer_rows.iter().all(|r| r["decision"] == "ask"));
}

#[test]
fn a_reviewer_ask_in_background_waits_for_the_operator_whose_note_the_model_reads() {
    let fake = FakeReviewer::start(
        |_| Reply::Decision("ask", "unsure".into()),
        vec![KEY.into()],
    );
    let (gate, mut session) = world(
        &fake,
        "[approvals]\nmode = \"background\"\nwait_ms = 120000\n",
    );
    session.set_env("CMDGATE_HOOK_DEADLINE_MS", "150000");
    let cmd = "git reset -q --soft HEAD";
    let api = FakeApi::start(vec![Step::bash(cmd), Step::Text("ok".into())]);
    let note = "NOTE-7f3a: commits are fine on this branch";
    let approver = approve_first_pending(&gate, note, "unsure");
    let run = session.run(&api, PROMPT);
    approver.join().unwrap();
    println!("tool results:\n{}", api.transcript());
    assert!(run.done.status.success(), "{}", run.done.stderr_text());
    assert!(!api.result_of(0).unwrap().is_error);
    assert_eq!(resets(&session), 2, "the approved commit ran");
    // The note reached the model in the request after the call (as the hook's additionalContext).
    let later = api.requests();
    let last = later.last().unwrap().to_string();
    assert!(
        last.contains("NOTE-7f3a"),
        "the note is not in the model's next request"
    );
}

#[test]
fn a_rejection_note_reaches_the_model_with_the_denial() {
    let fake = FakeReviewer::start(
        |_| Reply::Decision("ask", "unsure".into()),
        vec![KEY.into()],
    );
    let (gate, mut session) = world(
        &fake,
        "[approvals]\nmode = \"background\"\nwait_ms = 120000\n",
    );
    session.set_env("CMDGATE_HOOK_DEADLINE_MS", "150000");
    let api = FakeApi::start(vec![
        Step::bash("git reset -q --soft HEAD"),
        Step::Text("ok".into()),
    ]);
    let note = "NOTE-e41b: no resets today, ask me tomorrow";
    let rejecter = answer_first_pending(&gate, "reject", note, "unsure");
    let run = session.run(&api, PROMPT);
    rejecter.join().unwrap();
    println!("tool results:\n{}", api.transcript());
    assert!(run.done.status.success(), "{}", run.done.stderr_text());
    let r = api.result_of(0).expect("a result for the rejected call");
    assert!(r.is_error, "{}", r.content);
    assert!(
        r.content.contains(note),
        "the note is in the model's next request: {}",
        r.content
    );
    assert_eq!(resets(&session), 1, "nothing ran");
}

#[test]
fn a_subagents_call_sees_the_parent_sessions_rules() {
    const NOTE: &str = "NOTE-5b1c: resets of the index are fine here";
    const TASK: &str = "SUBAGENT-7c2e: reset the index again";
    // The reviewer leaves the parent's call to a person; it allows the subagent's call once only
    // when the person's note from the parent session is in its evidence.
    let fake = FakeReviewer::start(
        |r| {
            if r.text.contains(NOTE) {
                Reply::Decision("allow-once", "the person said resets are fine".into())
            } else {
                Reply::Decision("ask", "unsure about resets".into())
            }
        },
        vec![KEY.into()],
    );
    let (gate, mut session) = world(
        &fake,
        "[approvals]\nmode = \"background\"\nwait_ms = 120000\n",
    );
    session.set_env("CMDGATE_HOOK_DEADLINE_MS", "150000");
    let api = FakeApi::with_subagents(
        vec![
            Step::bash("git reset -q --soft HEAD"),
            Step::agent(TASK),
            Step::Text("ok".into()),
        ],
        vec![Subagent {
            marker: TASK.into(),
            steps: vec![
                Step::bash("git reset -q --soft HEAD~0"),
                Step::Text("reset done".into()),
            ],
        }],
    );
    let approver = approve_first_pending(&gate, NOTE, "unsure about resets");
    let run = session.run(&api, PROMPT);
    approver.join().unwrap();
    println!(
        "result: {}\ntool results:\n{}",
        run.result,
        api.transcript()
    );
    assert!(run.done.status.success(), "{}", run.done.stderr_text());
    assert!(!api.result_of(0).expect("the parent's reset").is_error);
    let sub = api
        .subagent_result_of(0, 0)
        .expect("the subagent's reset reached Claude Code");
    assert!(!sub.is_error, "{}", sub.content);
    assert_eq!(
        resets(&session),
        3,
        "the parent's and the subagent's resets ran"
    );
    // The subagent's call carried the parent's session id and its own agent id and type.
    let session_id = run.result["session_id"].as_str().expect("a session id");
    let sub_id = subagent_tool_use_id(0, 0);
    let mut rows: Vec<Value> = gate
        .audit("decision")
        .into_iter()
        .filter(|r| r["tool_use_id"] == sub_id.as_str())
        .collect();
    rows.sort_by_key(|r| r["id"].as_i64());
    assert_eq!(
        rows.len(),
        2,
        "the ask, then the reviewer's answer: {rows:?}"
    );
    let agent_id = rows[0]["agent_id"]
        .as_str()
        .expect("an agent id")
        .to_owned();
    assert_eq!(rows[0]["session"], session_id);
    assert_eq!(rows[0]["agent_type"], "general-purpose");
    assert_eq!(
        (rows[1]["decision"].as_str(), rows[1]["source"].as_str()),
        (Some("allow"), Some("reviewer"))
    );
    // docs/reviewer.md quotes this line (a real transcript, one session rule with a note).
    println!("reviewer call: {}", rows[1]["note"]);
    // What the reviewer received: for the parent's call no rules yet; for the subagent's call the
    // person's note from the parent session, and the subagent named.
    let questions = fake.received();
    assert_eq!(questions.len(), 2, "one question per call");
    assert!(!questions[0].text.contains(NOTE));
    let seen = &questions[1].text;
    assert!(seen.contains(NOTE), "{seen}");
    assert!(
        seen.contains(&agent_id) && seen.contains("general-purpose"),
        "{seen}"
    );
    assert!(seen.contains(session_id), "{seen}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}
