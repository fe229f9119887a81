//! `cmdgate explain` end to end: the real binary, a temp project, pinned keys in a temp config dir.

use std::process::Command;

use cmdgate_policy::tiermap::{sign, PinnedKeys};
use ed25519_dalek::SigningKey;

struct Env {
    _tmp: tempfile::TempDir,
    home: std::path::PathBuf,
    project: std::path::PathBuf,
    config: std::path::PathBuf,
}

fn env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let project = home.join("proj");
    let config = tmp.path().join("config");
    std::fs::create_dir_all(project.join(".git")).unwrap();
    std::fs::create_dir_all(&config).unwrap();
    Env {
        _tmp: tmp,
        home,
        project,
        config,
    }
}

fn explain(env: &Env, command: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_cmdgate"))
        .args(["explain", "--json", "--cwd"])
        .arg(&env.project)
        .arg("--")
        .arg(command)
        .env_clear()
        .env("HOME", &env.home)
        .env("CMDGATE_CONFIG_DIR", &env.config)
        .env("CMDGATE_HOME", env.home.join("state"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "explain failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn write_signed_map(env: &Env, map: &str) {
    let key = SigningKey::from_bytes(&[3; 32]);
    let mut keys = PinnedKeys::new();
    keys.pin("ops", 1, key.verifying_key()).unwrap();
    std::fs::write(env.config.join("trusted-keys"), keys.to_file_string()).unwrap();
    std::fs::write(
        env.project.join("CLAUDE_CMDS.md"),
        sign(map, "ops", 1, &key).unwrap(),
    )
    .unwrap();
}

const MAP: &str = "---\nrevision: 2\n---\n\n## Tier 1 — sandbox\n- `cargo build *` — network\n\n## Tier 2 — ask\n- `git push *`\n";

fn decision(v: &serde_json::Value) -> &str {
    v["outcome"]["decision"].as_str().unwrap()
}

#[test]
fn without_a_map_the_project_is_read_only() {
    let env = env();
    let v = explain(&env, "git log --oneline | head -5");
    assert_eq!(decision(&v), "allow", "{v:#}");
    assert_eq!(
        v["project"].as_str().unwrap(),
        std::fs::canonicalize(&env.project)
            .unwrap()
            .to_str()
            .unwrap()
    );
    let v = explain(&env, "cargo build");
    assert_eq!(decision(&v), "deny", "{v:#}");
    assert_eq!(v["outcome"]["source"], "read_only_map");
    assert!(
        v["tier_map"]["read_only_because"]
            .as_str()
            .unwrap()
            .contains("no CLAUDE_CMDS.md"),
        "{v:#}"
    );
}

#[test]
fn catastrophic_commands_are_denied_with_the_rule() {
    let env = env();
    let v = explain(&env, "ls; rm -rf ~");
    assert_eq!(decision(&v), "deny");
    assert_eq!(v["outcome"]["rule"], "built-in:rm-critical-path");
    assert_eq!(v["parts"].as_array().unwrap().len(), 2);
    assert_eq!(v["parts"][0]["read"], true);
}

#[test]
fn a_signed_map_with_pinned_keys_enables_test_runs_and_asks() {
    let env = env();
    write_signed_map(&env, MAP);
    let v = explain(&env, "cargo build --release");
    assert_eq!(decision(&v), "test-run", "{v:#}");
    assert_eq!(v["outcome"]["network"], true);
    assert_eq!(v["tier_map"]["revision"], 2);
    // Not `direct`: it runs once in the mirror and its clean effects are committed.
    assert_eq!(v["outcome"]["direct"], false, "{v:#}");
    assert!(
        v["outcome"]["then"]
            .as_str()
            .is_some_and(|t| t.contains("committed")),
        "{v:#}"
    );
    let v = explain(&env, "git push origin x");
    assert_eq!(decision(&v), "ask", "{v:#}");
}

#[test]
fn a_tampered_map_turns_the_project_read_only() {
    let env = env();
    write_signed_map(&env, MAP);
    let path = env.project.join("CLAUDE_CMDS.md");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("`git push *`", "`git log *`");
    std::fs::write(&path, text).unwrap();
    let v = explain(&env, "cargo build");
    assert_eq!(decision(&v), "deny", "{v:#}");
    assert_eq!(v["tier_map"]["valid"], false);
}

#[test]
fn a_malformed_pinned_keys_file_is_read_only_with_the_reason() {
    let env = env();
    write_signed_map(&env, MAP);
    std::fs::write(env.config.join("trusted-keys"), "ops v1 not-base64\n").unwrap();
    let v = explain(&env, "cargo build");
    assert_eq!(decision(&v), "deny", "{v:#}");
    assert!(
        v["tier_map"]["read_only_because"]
            .as_str()
            .unwrap()
            .contains("trusted-keys"),
        "{v:#}"
    );
}

#[test]
fn explain_names_the_read_pack_and_rule_and_honours_read_packs_off() {
    let e = env();
    let out = explain(&e, "kubectl get pods -n app | head -3; gh auth token");
    let parts = out["parts"].as_array().expect("parts");
    assert_eq!(parts[0]["read"], true, "{out:#}");
    assert_eq!(parts[0]["read_pack"]["pack"], "kubectl", "{out:#}");
    assert_eq!(parts[0]["read_pack"]["rule"], "kubectl get", "{out:#}");
    assert!(parts[1]["read_pack"].is_null(), "{out:#}");
    assert_eq!(parts[2]["read"], false, "{out:#}");
    let why = parts[2]["not_read_because"].as_str().unwrap_or_default();
    assert!(
        why.contains("reads a secret") && why.contains("read pack `gh`"),
        "{why}"
    );
    // The operator's config switches a pack off.
    std::fs::write(
        e.config.join("config.toml"),
        "read_packs_off = [\"kubectl\"]\n",
    )
    .unwrap();
    let out = explain(&e, "kubectl get pods");
    let why = out["parts"][0]["not_read_because"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("read pack `kubectl` is switched off"),
        "{out:#}"
    );
}
