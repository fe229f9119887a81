//! Read packs through the hook binary: remote and package CLIs' reads are allowed locally, their
//! secret forms and writes are not, a pack switched off (operator's `--read-packs-off`, the
//! environment, the tier map's `read-packs-off:`) is not a read; and the search agents write most,
//! `grep -rn PATTERN --include=*.py .`, is a read when the glob matches nothing.

use serde_json::json;

use crate::common::World;

fn bash(command: &str) -> serde_json::Value {
    json!({"command": command, "description": "test"})
}

#[test]
fn pack_reads_are_local_and_their_secret_forms_are_not() {
    let w = World::new();
    for command in [
        "gh pr view 12 --comments",
        "gh run list --limit 5",
        "kubectl get pods -n app -o wide",
        "docker ps -a",
        "aws sts get-caller-identity",
        "npm view react version",
        "cargo tree --locked",
        "journalctl -u nginx -n 50 --no-pager",
    ] {
        let (d, reason) = w.run(&w.pre("Bash", bash(command)), &[]).decision();
        assert_eq!(d, "allow", "{command}: {reason}");
    }
    for command in [
        "gh auth token",
        "kubectl get secret db -o yaml",
        "aws secretsmanager get-secret-value --secret-id db",
        "docker login",
        "kubectl exec -it web -- sh",
        "gh api -X POST repos/o/r/issues",
    ] {
        let (d, reason) = w.run(&w.pre("Bash", bash(command)), &[]).decision();
        assert_eq!(d, "deny", "{command} (daemon absent): {reason}");
    }
}

#[test]
fn a_pack_switched_off_is_not_a_read() {
    let mut w = World::new();
    let run = |w: &World, args: &[&str]| {
        w.run(&w.pre("Bash", bash("kubectl get pods")), args)
            .decision()
    };
    assert_eq!(run(&w, &[]).0, "allow");
    let (d, reason) = run(&w, &["--read-packs-off", "kubectl,aws"]);
    assert_eq!(d, "deny", "{reason}");
    assert!(
        reason.contains("read pack `kubectl` is switched off"),
        "{reason}"
    );
    w.set("CMDGATE_READ_PACKS_OFF", "kubectl");
    assert_eq!(run(&w, &[]).0, "deny");
    // A name that is no pack is a configuration error, which refuses everything.
    let (d, reason) = run(&w, &["--read-packs-off", "kubctl"]);
    assert_eq!(d, "deny");
    assert!(reason.contains("unknown read pack"), "{reason}");
}

#[test]
fn grep_with_an_unquoted_include_glob_is_a_read_when_it_matches_nothing() {
    let w = World::new();
    std::fs::create_dir_all(w.path("work/src")).unwrap();
    std::fs::write(w.path("work/src/app.py"), "def add(a, b): pass\n").unwrap();
    std::fs::write(w.path("work/setup.py"), "").unwrap();
    let command = "grep -rn 'def add' --include=*.py .";
    let (d, reason) = w.run(&w.pre("Bash", bash(command)), &[]).decision();
    assert_eq!(d, "allow", "{reason}");
    // A `.env` at the top of the searched tree still makes it a secret read.
    std::fs::write(w.path("work/.env"), "TOKEN=x\n").unwrap();
    let (d, reason) = w.run(&w.pre("Bash", bash(command)), &[]).decision();
    assert_eq!(d, "deny", "{reason}");
}
