//! The example record: labels by source and verdict, cwd relative to the project, and a serde
//! round trip of a full example.

use cmdgate_daemon::engine::export::*;

macro_rules! label {
    ($verdict:literal, $source:literal $(, $rule:literal)? => $label:ident, $basis:literal) => {
        assert_eq!(
            label_for($verdict, $source, None $(.or(Some($rule)))?),
            (Label::$label, $basis),
            "{} by {}", $verdict, $source
        );
    };
}

#[test]
fn labels_follow_who_decided() {
    label!("allow", "human" => Safe, "human_approved");
    label!("deny", "human" => Unsafe, "human_rejected");
    label!("ask", "human" => Unknown, "unanswered");
    label!("allow", "remembered" => Safe, "remembered_approval");
    label!("deny", "remembered" => Unsafe, "remembered_rejection");
    label!("ask", "remembered" => Unknown, "always_ask");
    label!("allow", "tier_rule" => Safe, "policy_allow");
    label!("deny", "tier_rule" => Unsafe, "policy_deny");
    label!("ask", "tier_rule" => Unknown, "needs_person");
    label!("allow", "builtin" => Safe, "builtin_read");
    label!("deny", "builtin", "built-in:rm-root" => Unsafe, "builtin_catastrophic");
    label!("deny", "builtin" => Unknown, "read_only_project");
    label!("allow", "sandbox" => Safe, "sandbox_clean");
    label!("deny", "sandbox" => Unsafe, "sandbox_dirty");
    label!("ask", "sandbox" => Unknown, "sandbox_failed");
    label!("allow", "learned" => Safe, "learned");
    label!("allow", "hook_fast_path" => Safe, "hook_read");
    label!("deny", "breaker" => Unknown, "not_about_the_command");
    label!("deny", "fail_closed" => Unknown, "not_about_the_command");
    label!("allow", "escape_hatch" => Unknown, "not_about_the_command");
}

#[test]
fn cwd_is_relative_to_the_project() {
    let cases = [
        (Some("/p/app"), Some("/p/app"), Some(".")),
        (Some("/p/app/"), Some("/p/app/src/x"), Some("src/x")),
        (Some("/p/app"), Some("/p/app2"), None),
        (Some("/p/app"), Some("/home/alice"), None),
        (Some("/p/app"), Some("/p/app/../secret"), None),
        (None, Some("/p/app"), None),
        (Some("/p/app"), None, None),
    ];
    for (project, cwd, want) in cases {
        assert_eq!(
            relative_cwd(project, cwd).as_deref(),
            want,
            "{project:?} {cwd:?}"
        );
    }
}

#[test]
fn an_example_round_trips_through_json() {
    let example = Example {
        schema: SCHEMA_ID.into(),
        audit_id: 7,
        at_ms: 1_780_000_000_000,
        request: ExampleRequest {
            tool: "Bash".into(),
            command: "rm -rf build".into(),
            normalized: "rm -rf build".into(),
            parts: Some(vec![vec!["rm".into(), "-rf".into(), "build".into()]]),
            analyzable: true,
            input: None,
            cwd: Some(".".into()),
        },
        context: ExampleContext {
            project: Some("/p/app".into()),
            session: Some("s1".into()),
            agent_id: None,
            agent_type: Some("general-purpose".into()),
            permission_mode: Some("default".into()),
            tiermap_revision: Some(3),
            tier: Some("sandbox".into()),
        },
        decision: ExampleDecision {
            verdict: "deny".into(),
            source: "remembered".into(),
            rule: Some("rule #4".into()),
            reason: Some("rejected. Operator's note: use make clean".into()),
            latency_us: Some(1234),
            sandbox: Some(serde_json::json!({"clean": false, "why": ["deleted tracked file"]})),
            human: Some(HumanDecision {
                remembered: true,
                rule_id: Some(4),
                note: Some("use make clean".into()),
            }),
        },
        outcome: None,
        label: Label::Unsafe,
        label_basis: "remembered_rejection".into(),
        command_key: command_key("rm -rf build"),
        split: Some(Split::Test),
        redactions: vec![RedactedField {
            field: "request.command".into(),
            kind: SecretKind::GithubToken,
        }],
    };
    let line = serde_json::to_string(&example).unwrap();
    assert!(!line.contains('\n'));
    let back: Example = serde_json::from_str(&line).unwrap();
    assert_eq!(back, example);
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["split"], "test");
    assert_eq!(v["redactions"][0]["kind"], "github_token");
    assert_eq!(v["decision"]["human"]["note"], "use make clean");
}
