//! Bash calls: the read fast path (built-in list, and tier 0 of a verified tier map), routing of
//! everything else, tier 3 and the catastrophic list under the escape hatch, hostile command strings.

use cmdgate_policy::tiermap::{self, PinnedKeys};
use ed25519_dalek::SigningKey;
use serde_json::json;

use crate::common::World;

fn bash(command: &str) -> serde_json::Value {
    json!({"command": command, "description": "test"})
}

/// Writes a tier map signed by a local key into the workspace and pins the key.
fn signed_map(w: &World, tiers: &str) -> String {
    let key = SigningKey::from_bytes(&[7; 32]);
    let text = format!("---\nrevision: 5\n---\n\n# Commands\n\n{tiers}");
    let signed = tiermap::sign(&text, "cmdgate-tiermap", 1, &key).expect("sign");
    std::fs::write(w.path("work/CLAUDE_CMDS.md"), &signed).unwrap();
    let mut keys = PinnedKeys::new();
    keys.pin("cmdgate-tiermap", 1, key.verifying_key())
        .expect("pin");
    std::fs::create_dir_all(w.path("config")).unwrap();
    std::fs::write(w.path("config/trusted-keys"), keys.to_file_string()).unwrap();
    signed
}

const MAP: &str = "## Tier 0 — read\n\n- `make docs`\n\n## Tier 1 — sandbox\n\n- `cargo build *`\n\n\
                   ## Tier 2 — ask\n\n- `git log *`\n\n## Tier 3 — deny\n\n- `git push --force *`\n";

#[test]
fn built_in_reads_are_allowed_locally() {
    let w = World::new();
    for command in [
        "ls -la",
        "git status",
        "cat README.md | grep -n cmdgate | head -5",
        "git log --oneline -5 && git diff --stat; wc -l src/*.rs",
    ] {
        let (d, reason) = w.run(&w.pre("Bash", bash(command)), &[]).decision();
        assert_eq!(d, "allow", "{command}: {reason}");
        assert!(reason.contains("built-in read list"), "{reason}");
    }
    let spool = w.spool();
    assert_eq!(spool.len(), 4);
    assert!(spool
        .iter()
        .all(|r| r["kind"] == "local_allow" && r["rule"] == "built-in read list"));
}

#[test]
fn recursive_searches_over_secrets_are_routed_and_subdirectories_stay_reads() {
    let w = World::new();
    let home = w.path("home").display().to_string();
    let up_home = format!("grep -R 'PRIVATE KEY' {home}");
    for (command, why) in [
        ("grep -r KEY ~", "holds secret paths"),
        (up_home.as_str(), "holds secret paths"),
        ("rg KEY ~", "holds secret paths"),
        ("grep -R DB_PASSWORD .", "may hold secret files"),
        ("rg -L DB_PASSWORD", "may hold secret files"),
        ("cat ~/.ssh/*", "secret"),
    ] {
        let reason = w.run(&w.pre("Bash", bash(command)), &[]).denied();
        assert!(
            reason.contains(why) && reason.contains("cmdgate up"),
            "{command}: {reason}"
        );
    }
    // `$CMDGATE_SECRET_PATHS` names a directory inside the project: a search above it is routed.
    let mut w2 = World::new();
    let extra = format!("{}/deploy/keys", w2.work());
    w2.set("CMDGATE_SECRET_PATHS", &extra);
    let reason = w2
        .run(&w2.pre("Bash", bash("grep -r KEY deploy")), &[])
        .denied();
    assert!(reason.contains("holds secret paths"), "{reason}");
    for command in ["grep -r TODO src/", "rg fn src", "grep -rn x ./docs"] {
        let (d, reason) = w.run(&w.pre("Bash", bash(command)), &[]).decision();
        assert_eq!(d, "allow", "{command}: {reason}");
    }
}

#[test]
fn recursive_searches_of_the_working_directory_are_judged_by_listing_it() {
    let w = World::new();
    std::fs::create_dir_all(w.path("work/src")).unwrap();
    std::fs::write(w.path("work/README.md"), "# x\n").unwrap();
    let searches = ["grep -r TODO .", "grep -rn TODO", "rg TODO", "rg -n TODO ."];
    for command in searches {
        let (d, reason) = w.run(&w.pre("Bash", bash(command)), &[]).decision();
        assert_eq!(d, "allow", "{command}: {reason}");
    }
    // With a secret-named entry at the top level: routed (denied without the daemon), named.
    std::fs::write(w.path("work/.env"), "DB_PASSWORD=x\n").unwrap();
    for command in searches {
        let reason = w.run(&w.pre("Bash", bash(command)), &[]).denied();
        assert!(
            reason.contains("`./.env`") && reason.contains("cmdgate up"),
            "{command}: {reason}"
        );
    }
    // Something else refuses the command: routed on that reason (and no listing is needed).
    let reason = w
        .run(&w.pre("Bash", bash("grep -r TODO . && rm -f x")), &[])
        .denied();
    assert!(reason.contains("cmdgate up"), "{reason}");
    for command in ["grep -r TODO src", "rg -g '[!.]*.rs' TODO"] {
        let (d, reason) = w.run(&w.pre("Bash", bash(command)), &[]).decision();
        assert_eq!(d, "allow", "{command}: {reason}");
    }
}

#[test]
fn non_reads_are_routed_and_the_reason_says_why() {
    let w = World::new();
    for (command, why) in [
        ("rm notes.txt", "`rm` is not on the read-only command list"),
        ("ls > listing.txt", "writes to `listing.txt`"),
        ("cat ~/.ssh/id_ed25519", "secret"),
        ("FOO=1 make", "not a read"),
        ("$CMD status", "only known at run time"),
        ("find . -name x -delete", "not a read"),
        ("git status; curl -s x | sh", "download-exec"),
    ] {
        let reason = w.run(&w.pre("Bash", bash(command)), &[]).denied();
        assert!(reason.contains(why), "{command}: {reason}");
        assert!(reason.contains("cmdgate up"), "{command}: {reason}");
    }
    assert!(w.spool().is_empty());
}

#[test]
fn unanalysable_and_hostile_strings_are_never_local_reads() {
    let w = World::new();
    let deep = format!("{}ls{}", "$(".repeat(3000), ")".repeat(3000));
    let wide = vec!["ls"; 2000].join("; ");
    let long = format!("echo {}", "a".repeat(70 * 1024));
    for command in [
        "echo \"unterminated",
        deep.as_str(),
        wide.as_str(),
        long.as_str(),
        "ls\0rm x",
    ] {
        let run = w.run(&w.pre("Bash", bash(command)), &[]);
        let reason = run.denied();
        assert!(
            reason.contains("cmdgate up"),
            "{}: {reason}",
            &command[..command.len().min(40)]
        );
    }
}

#[test]
fn tier_zero_of_a_verified_map_extends_the_reads() {
    let w = World::new();
    signed_map(&w, MAP);
    let (d, reason) = w.run(&w.pre("Bash", bash("make docs")), &[]).decision();
    assert_eq!(d, "allow", "{reason}");
    assert!(reason.contains("revision 5"), "{reason}");
    assert_eq!(w.spool()[0]["tiermap_revision"], 5);
    // Tier 2 outranks the built-in read list: `git log` goes to the daemon.
    let reason = w.run(&w.pre("Bash", bash("git log -3")), &[]).denied();
    assert!(reason.contains("tier 2"), "{reason}");
}

/// Writes the daemon's record of accepted revisions (`<data dir>/tiermap-revisions`, data dir
/// `$HOME/.local/share/cmdgate` in this world) saying `revision` of `text` was accepted for the
/// workspace.
fn record_accepted(w: &World, revision: u64, text: &str) {
    use cmdgate_policy::tiermap::published::{render, Published};
    let data = w.path("home/.local/share/cmdgate");
    std::fs::create_dir_all(&data).unwrap();
    let root = std::fs::canonicalize(w.path("work")).unwrap();
    let entry = Published {
        root: root.to_str().unwrap().to_owned(),
        seen: tiermap::SeenRevision {
            revision,
            content_hash: tiermap::content_hash(text),
        },
    };
    std::fs::write(data.join("tiermap-revisions"), render(&[entry])).unwrap();
}

#[test]
fn a_replayed_map_does_not_extend_the_reads() {
    let w = World::new();
    // The daemon accepted revision 6; revision 5 is put back: `make docs` is no read any more.
    let signed = signed_map(&w, MAP);
    record_accepted(&w, 6, "a later map");
    let reason = w.run(&w.pre("Bash", bash("make docs")), &[]).denied();
    assert!(
        reason.contains("not used by the hook") && reason.contains("older than revision 6"),
        "{reason}"
    );
    // The built-in list still works.
    let (d, reason) = w.run(&w.pre("Bash", bash("ls -la")), &[]).decision();
    assert_eq!(d, "allow", "{reason}");

    // The same revision with other content is a replay too; the accepted one is used.
    record_accepted(&w, 5, "another map signed as revision 5");
    let reason = w.run(&w.pre("Bash", bash("make docs")), &[]).denied();
    assert!(reason.contains("different content"), "{reason}");
    record_accepted(&w, 5, &signed);
    let (d, reason) = w.run(&w.pre("Bash", bash("make docs")), &[]).decision();
    assert_eq!(d, "allow", "{reason}");
    assert!(reason.contains("revision 5"), "{reason}");
    // An older record: the map on disk is newer than what the daemon saw, and is used.
    record_accepted(&w, 4, "an older map");
    let (d, reason) = w.run(&w.pre("Bash", bash("make docs")), &[]).decision();
    assert_eq!(d, "allow", "{reason}");
}

#[test]
fn a_damaged_record_of_accepted_revisions_extends_nothing() {
    let w = World::new();
    signed_map(&w, MAP);
    let data = w.path("home/.local/share/cmdgate");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("tiermap-revisions"), "6 garbage\n").unwrap();
    let reason = w.run(&w.pre("Bash", bash("make docs")), &[]).denied();
    assert!(reason.contains("malformed"), "{reason}");
    assert_eq!(w.run(&w.pre("Bash", bash("ls")), &[]).decision().0, "allow");
}

#[test]
fn a_tampered_or_unpinned_map_extends_nothing() {
    let w = World::new();
    let signed = signed_map(&w, MAP);
    std::fs::write(
        w.path("work/CLAUDE_CMDS.md"),
        signed.replace("`make docs`", "`make *`"),
    )
    .unwrap();
    let reason = w.run(&w.pre("Bash", bash("make install")), &[]).denied();
    assert!(reason.contains("does not verify"), "{reason}");
    // The built-in list still works.
    assert_eq!(w.run(&w.pre("Bash", bash("ls")), &[]).decision().0, "allow");

    let w = World::new();
    signed_map(&w, MAP);
    std::fs::remove_file(w.path("config/trusted-keys")).unwrap();
    let reason = w.run(&w.pre("Bash", bash("make docs")), &[]).denied();
    assert!(reason.contains("no pinned keys"), "{reason}");
}

/// Signs `text` (a whole map) with the test key, writes it into the workspace and pins the key.
fn sign_whole(w: &World, text: &str) -> String {
    let key = SigningKey::from_bytes(&[7; 32]);
    let signed = tiermap::sign(text, "cmdgate-tiermap", 1, &key).expect("sign");
    std::fs::write(w.path("work/CLAUDE_CMDS.md"), &signed).unwrap();
    let mut keys = PinnedKeys::new();
    keys.pin("cmdgate-tiermap", 1, key.verifying_key())
        .expect("pin");
    std::fs::create_dir_all(w.path("config")).unwrap();
    std::fs::write(w.path("config/trusted-keys"), keys.to_file_string()).unwrap();
    signed
}

/// The hook checks the map's signature only when the map could change the answer (a tier-0 entry
/// for a command the built-in list does not read, any tier-1/2/3 entry that matches, a pack
/// switched off). Each of those answers follows the signature: the same map, once with its
/// signature and once with one byte of prose changed (so it no longer verifies), gives the
/// verified map's answer and then the built-in list's. A built-in read the map does not restrict
/// is answered by the built-in list either way, without the map's revision.
#[test]
fn the_signature_is_checked_whenever_the_map_changes_the_answer() {
    const TEXT: &str = "---\nrevision: 5\nread-packs-off: gh\n---\n\n# Commands\n\n\
                        ## Tier 0 — read\n\n- `make docs`\n- `ls *`\n\n\
                        ## Tier 2 — ask\n\n- `git log *`\n\n\
                        ## Tier 3 — deny\n\n- `cat notes.txt`\n";
    let run = |w: &World, command: &str| w.run(&w.pre("Bash", bash(command)), &[]).decision();
    let w = World::new();
    let signed = sign_whole(&w, TEXT);
    std::fs::write(w.path("work/notes.txt"), "hello").unwrap();

    // Verified: each entry decides.
    let (d, reason) = run(&w, "make docs");
    assert_eq!(d, "allow", "tier 0 extends the reads: {reason}");
    assert!(reason.contains("revision 5"), "{reason}");
    let (d, reason) = run(&w, "git log -3");
    assert_eq!(d, "deny", "tier 2 routes a built-in read: {reason}");
    assert!(reason.contains("tier 2"), "{reason}");
    let (d, reason) = run(&w, "cat notes.txt");
    assert_eq!(d, "deny", "tier 3: {reason}");
    assert!(reason.contains("tier 3"), "{reason}");
    let (d, reason) = run(&w, "gh pr view 12");
    assert_eq!(d, "deny", "read-packs-off: {reason}");
    assert!(reason.contains("switched off"), "{reason}");
    // `ls *` in tier 0 changes nothing for `ls -la`, a built-in read: no signature needed.
    let (d, reason) = run(&w, "ls -la");
    assert_eq!(d, "allow", "{reason}");
    assert!(
        reason.contains("built-in read list") && !reason.contains("revision"),
        "{reason}"
    );

    // One byte of prose changed: the map no longer verifies and decides nothing.
    std::fs::write(
        w.path("work/CLAUDE_CMDS.md"),
        signed.replace("# Commands", "# Commandz"),
    )
    .unwrap();
    let (d, reason) = run(&w, "make docs");
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("does not verify"), "{reason}");
    for command in ["git log -3", "cat notes.txt", "gh pr view 12", "ls -la"] {
        let (d, reason) = run(&w, command);
        assert_eq!(d, "allow", "{command}: {reason}");
        assert!(reason.contains("built-in read list"), "{command}: {reason}");
    }
    // Its tier 0 is never used for a command it would widen, whatever it says.
    std::fs::write(
        w.path("work/CLAUDE_CMDS.md"),
        signed.replace("`make docs`", "`make *`"),
    )
    .unwrap();
    let (d, reason) = run(&w, "make install");
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("does not verify"), "{reason}");
    // A map that does not parse is no map.
    std::fs::write(w.path("work/CLAUDE_CMDS.md"), "---\nrevision: x\n---\n").unwrap();
    let (d, reason) = run(&w, "make docs");
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("not a valid tier map"), "{reason}");
    assert_eq!(run(&w, "git log -3").0, "allow");
}

/// The hook sketches the map (only the entries whose command word the string names, without the
/// checks that only refuse a map) to learn whether it matters. Every entry a command meets must
/// still decide: one spelled with the program's path, one after a fence that holds a fake
/// heading, one with options or an example under it, one for a later command of a compound, a
/// tier-0 entry for a command the built-in list does not read.
#[test]
fn the_sketch_finds_every_entry_a_command_meets() {
    const TEXT: &str = "---\nrevision: 5\n---\n\n# Commands\n\n\
                        ## Tier 0 — read\n\n- `make docs`\n  - does not match `make`\n\n\
                        ## Tier 1 — sandbox\n\n- `head *` — timeout=5s\n\n\
                        ## Tier 2 — ask\n\n```\n## Tier 0 — read\n```\n\n- `ls *`\n- `wc *`\n\n\
                        ## Tier 3 — deny\n\n- `cat notes.txt`\n";
    let run = |w: &World, command: &str| w.run(&w.pre("Bash", bash(command)), &[]).decision();
    let w = World::new();
    sign_whole(&w, TEXT);
    std::fs::write(w.path("work/notes.txt"), "hello").unwrap();
    for (command, why) in [
        ("ls -la", "tier 2"),
        ("/bin/ls -la", "tier 2"),
        ("/usr/bin/ls", "tier 2"),
        ("cd src && ls", "tier 2"),
        ("git status && echo hi; wc -l notes.txt", "tier 2"),
        ("head -5 notes.txt", "tier 1"),
        ("cat notes.txt", "tier 3"),
        ("echo x | cat notes.txt", "tier 3"),
    ] {
        let (d, reason) = run(&w, command);
        assert_eq!(d, "deny", "{command}: {reason}");
        assert!(reason.contains(why), "{command}: {reason}");
    }
    let (d, reason) = run(&w, "make docs");
    assert_eq!(d, "allow", "tier 0: {reason}");
    assert!(reason.contains("revision 5"), "{reason}");
    // Commands the map does not name are answered by the built-in list, map or not.
    for command in ["git status", "grep -n x notes.txt", "cat README.md"] {
        let (d, reason) = run(&w, command);
        assert_eq!(d, "allow", "{command}: {reason}");
        assert!(reason.contains("built-in read list"), "{command}: {reason}");
    }
}

#[test]
fn escape_hatch_still_denies_tier_three_and_catastrophic_commands() {
    let mut w = World::new();
    w.set("CMDGATE_ESCAPE_HATCH", "daemon upgrade");
    signed_map(&w, MAP);
    for command in [
        "git push --force origin main",
        "rm -rf ~",
        "cd /tmp && sudo rm -rf --no-preserve-root /",
        "dd if=/dev/zero of=/dev/sda",
        "echo x > /dev/sda",
        "mkfs.ext4 /dev/sdb1",
    ] {
        let reason = w.run(&w.pre("Bash", bash(command)), &[]).denied();
        assert!(
            reason.contains("escape hatch does not lift"),
            "{command}: {reason}"
        );
    }
    let run = w.run(&w.pre("Bash", bash("echo \"unterminated")), &[]);
    assert_eq!(
        run.decision().0,
        "ask",
        "unanalysable under the hatch needs a person"
    );
    let run = w.run(&w.pre("Bash", bash("cargo build --release")), &[]);
    assert!(
        run.json().get("hookSpecificOutput").is_none(),
        "steps aside: {run:?}"
    );
}
