//! Approval notes end to end through the store: a person's answer carries its note into the audit
//! row (what `cmdgate audit show` prints), the export, and the model's reason; a remembered
//! rejection's note (rules.note) reaches the reason the engine gives the model and the export.

use cmdgate_daemon::cli::export::{export, ExportOptions, Sink};
use cmdgate_daemon::engine::approval_notes::{
    clean_note, human_decision, human_note, reason_for_model,
};
use cmdgate_daemon::engine::export::Example;
use cmdgate_daemon::store::audit::{self, Entry, Kind, TierSeen};
use cmdgate_daemon::store::state::{self, NewRule};
use cmdgate_daemon::store::{open_read_only, Store, DB_FILE};
use cmdgate_policy::decide::{
    canonical_key, decide, Context, Decision, Request, Rule, RuleKind, RuleSet, Tool,
};
use cmdgate_policy::shell::{analyze, read::ReadPolicy, Analysis, Limits};
use cmdgate_policy::tiermap::{sign, PinnedKeys, Snapshot};
use cmdgate_policy::wire::{Source, Verdict};
use ed25519_dalek::SigningKey;

const PROJECT: &str = "/srv/shop";
const HOME: &str = "/home/agent";

fn request(command: &str) -> Entry {
    Entry {
        at_ms: 1_000,
        kind: Kind::Decision,
        session: Some("s1".into()),
        tool_use_id: Some("toolu_1".into()),
        cwd: Some(PROJECT.into()),
        project: Some(PROJECT.into()),
        tool: Some("Bash".into()),
        command: Some(command.into()),
        tier: Some(TierSeen::Ask),
        decision: Some(Verdict::Ask.into()),
        source: Some(Source::TierRule.into()),
        reason: Some("tier 2: a person decides".into()),
        tiermap_revision: Some(3),
        latency_us: Some(250),
        note: Some("not a read: `git`".into()),
        ..Entry::default()
    }
}

fn exported(db: &std::path::Path) -> Vec<Example> {
    let conn = open_read_only(db).unwrap();
    let mut out = Vec::new();
    export(
        &conn,
        &ExportOptions::default(),
        &mut Sink::One(&mut out),
        &mut |_| {},
    )
    .unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_persons_answer_keeps_its_note_in_the_audit_the_export_and_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join(DB_FILE);
    let store = Store::open(&db).unwrap();
    let ask = store
        .append(request("git push --force-with-lease origin main"))
        .await
        .unwrap();
    assert_eq!(
        human_note(&ask.entry),
        None,
        "the hook's remark is not a person's note"
    );

    let answer = human_decision(
        &ask.entry,
        Verdict::Deny,
        Some("  no force pushes to main;\nopen a PR instead  "),
        2_000,
    );
    let row = store.append(answer).await.unwrap();
    let stored = store
        .read(move |c| audit::get(c, row.id))
        .await
        .unwrap()
        .unwrap();
    // What `cmdgate audit show ID` prints: every non-null field, the note among them.
    let shown = serde_json::to_value(&stored).unwrap();
    assert_eq!(shown["note"], "no force pushes to main; open a PR instead");
    assert_eq!(shown["source"], "human");
    assert_eq!(shown["tool_use_id"], "toolu_1");
    assert_eq!(
        shown["reason"],
        "the operator rejected this request; do not retry it. Operator's note: no force pushes to main; open a PR instead"
    );
    assert_eq!(
        human_note(&stored.entry),
        Some("no force pushes to main; open a PR instead")
    );
    assert!(
        store.read(audit::verify).await.unwrap().ok(),
        "the note is inside the hash chain"
    );
    store.close().await;

    let examples = exported(&db);
    assert_eq!(examples.len(), 1, "the answer supersedes the ask");
    let human = examples[0].decision.human.as_ref().unwrap();
    assert_eq!(
        human.note.as_deref(),
        Some("no force pushes to main; open a PR instead")
    );
    assert_eq!(examples[0].label_basis, "human_rejected");
    assert_eq!(examples[0].decision.latency_us, None);
}

#[test]
fn notes_are_cleaned_and_optional() {
    assert_eq!(clean_note("  \n "), None);
    assert_eq!(clean_note("a\tb\r\nc").as_deref(), Some("a b  c"));
    assert_eq!(clean_note(&"x".repeat(5000)).unwrap().chars().count(), 2000);
    assert_eq!(
        reason_for_model(Verdict::Allow, None),
        "the operator approved this request."
    );
    assert_eq!(
        reason_for_model(Verdict::Deny, Some("")),
        "the operator rejected this request; do not retry it."
    );
}

/// The engine's view of the store's rules, as the daemon loads them.
fn engine_rules(stored: Vec<state::StoredRule>) -> RuleSet {
    RuleSet::new(
        stored
            .into_iter()
            .map(|r| Rule {
                id: r.id,
                kind: match r.kind.as_str() {
                    "approve" => RuleKind::Approve,
                    "reject" => RuleKind::Reject,
                    "always_ask" => RuleKind::AlwaysAsk,
                    _ => RuleKind::Learned,
                },
                project: r.project,
                key: r.key,
                enabled: r.enabled,
                note: r.note,
            })
            .collect(),
    )
}

fn key(command: &str) -> String {
    match analyze(command, &Limits::default()) {
        Analysis::Parsed(s) => canonical_key(&s),
        Analysis::Unanalyzable(u) => panic!("{u:?}"),
    }
}

/// A verified tier map in which `npm` is tier 2 (ask), so a remembered rejection is what denies.
fn snapshot() -> Snapshot {
    let map =
        "---\nrevision: 3\n---\n# Tier map for the notes test\n\n## Tier 2 — ask\n- `npm *`\n";
    let key = SigningKey::from_bytes(&[9; 32]);
    let mut keys = PinnedKeys::new();
    keys.pin("ops", 1, key.verifying_key()).unwrap();
    let signed = sign(map, "ops", 1, &key).unwrap();
    let snap = Snapshot::load(Some(&signed), &keys, None);
    assert!(snap.verified().is_some(), "test map must verify: {snap:?}");
    snap
}

fn decide_with(rules: &RuleSet, command: &str) -> Decision {
    let snapshot = snapshot();
    let policy = ReadPolicy::new(HOME);
    let tool = Tool::Bash {
        command: command.into(),
    };
    let own: Vec<String> = Vec::new();
    let step = decide(
        Request {
            tool: &tool,
            project_root: PROJECT,
            cwd: PROJECT,
        },
        Context {
            snapshot: &snapshot,
            rules,
            breaker_open: false,
            read_policy: &policy,
            limits: Limits::default(),
            home: HOME,
            own_paths: &own,
        },
    );
    match step {
        cmdgate_policy::decide::Step::Decided(d) => d,
        other => panic!("expected a decision, got {other:?}"),
    }
}

#[tokio::test]
async fn a_remembered_rejection_tells_the_model_the_operators_note() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join(DB_FILE);
    let store = Store::open(&db).unwrap();
    let command = "npm publish --access public";
    let k = key(command);
    let id = store
        .write(move |c| {
            state::add_rule(
                c,
                &NewRule {
                    kind: "reject".into(),
                    project: PROJECT.into(),
                    key: k,
                    note: clean_note("releases go through CI, never from an agent"),
                    created_by: "operator".into(),
                    provenance: vec![],
                },
                1,
            )
        })
        .await
        .unwrap();
    let rules = engine_rules(store.read(state::rules).await.unwrap());
    let decision = decide_with(&rules, command);
    let Decision::Deny(ev) = &decision else {
        panic!("{decision:?}")
    };
    assert!(
        ev.reason
            .ends_with("Operator's note: releases go through CI, never from an agent"),
        "{}",
        ev.reason
    );
    assert_eq!(ev.rule.as_deref(), Some(format!("rule #{id}").as_str()));

    // The daemon records that decision; the export joins the rule's note.
    store
        .append(Entry {
            decision: Some(Verdict::Deny.into()),
            source: Some(Source::Remembered.into()),
            rule: ev.rule.clone(),
            reason: Some(ev.reason.clone()),
            note: None,
            ..request(command)
        })
        .await
        .unwrap();
    // A rule without a note: the reason says nothing about a note (old rules keep working).
    let plain = "npm deprecate pkg";
    let kp = key(plain);
    store
        .write(move |c| {
            state::add_rule(
                c,
                &NewRule {
                    kind: "reject".into(),
                    project: PROJECT.into(),
                    key: kp,
                    note: None,
                    created_by: "operator".into(),
                    provenance: vec![],
                },
                2,
            )
        })
        .await
        .unwrap();
    let rules = engine_rules(store.read(state::rules).await.unwrap());
    let Decision::Deny(plain_ev) = decide_with(&rules, plain) else {
        panic!("a remembered rejection denies")
    };
    assert!(!plain_ev.reason.contains("Operator's note"));
    store.close().await;

    let examples = exported(&db);
    let human = examples[0].decision.human.as_ref().unwrap();
    assert!(human.remembered);
    assert_eq!(human.rule_id, Some(id));
    assert_eq!(
        human.note.as_deref(),
        Some("releases go through CI, never from an agent")
    );
    assert_eq!(examples[0].label_basis, "remembered_rejection");
}
