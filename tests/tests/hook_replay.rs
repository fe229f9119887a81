//! Replaying an older validly signed `CLAUDE_CMDS.md` against the hook's fast path: the daemon
//! publishes the revisions it accepted (`<data dir>/tiermap-revisions`), and the hook does not use
//! a replayed map's tier 0 to allow a command by itself. Real `cmdgated`, real hook binary, real
//! CLI signing with the development key.

use std::path::Path;

use cmdgate_tests::gate::Gate;

/// The `revision:` of a map's front matter.
fn revision_of(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("revision: "))
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or_else(|| panic!("no revision in {text}"))
}

/// Signs a map whose tier 0 also lists `make lint` (and whose tier 1 no longer lists `make *`,
/// which would outrank it): the broad revision the operator later narrows. Returns its bytes.
fn sign_broad(g: &Gate) -> String {
    let map = g.proj.join("CLAUDE_CMDS.md");
    let text = std::fs::read_to_string(&map).unwrap();
    let broad = text
        .replacen("- `pwd`\n", "- `pwd`\n- `make lint`\n", 1)
        .replacen("- `make *` — timeout=10m\n", "", 1);
    assert_ne!(broad, text, "the starter map changed: adapt this test");
    std::fs::write(&map, broad).unwrap();
    g.resign();
    std::fs::read_to_string(&map).unwrap()
}

/// Narrows the map (drops `make lint` from tier 0) and re-signs it. Returns its bytes.
fn sign_narrow(g: &Gate) -> String {
    let map = g.proj.join("CLAUDE_CMDS.md");
    let text = std::fs::read_to_string(&map).unwrap();
    std::fs::write(&map, text.replacen("- `make lint`\n", "", 1)).unwrap();
    g.resign();
    std::fs::read_to_string(&map).unwrap()
}

/// One routed request (tier 3 in the starter map, decided without a test-run): the daemon loads
/// the map on disk. Returns the tier map revision the decision was made under.
fn route_one(g: &Gate, id: &str) -> Option<i64> {
    let (d, reason) = g.pre(id, "git clean -fdx");
    assert_eq!(d, "deny", "{reason}");
    let row = g
        .decision_row(id)
        .expect("a routed call reaches the daemon");
    row["tiermap_revision"].as_i64()
}

/// The published line for the test project: (revision, content hash).
fn published(g: &Gate) -> Option<(u64, String)> {
    let text = std::fs::read_to_string(g.data.join("tiermap-revisions")).ok()?;
    let root = std::fs::canonicalize(&g.proj).unwrap();
    let root = root.to_str().unwrap();
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, '\t');
        let (rev, hash, r) = (f.next()?, f.next()?, f.next()?);
        (r == root).then(|| (rev.parse().unwrap(), hash.to_owned()))
    })
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A fast-path allow: the hook allowed it and the daemon never saw it.
fn assert_fast_path_allow(g: &Gate, id: &str, command: &str) -> String {
    let (d, reason) = g.pre(id, command);
    assert_eq!(d, "allow", "{command}: {reason}");
    assert!(
        g.decision_row(id).is_none(),
        "{command} reached the daemon: {reason}"
    );
    reason
}

#[test]
fn a_replayed_broader_map_is_not_fast_path_allowed_and_reads_still_run() {
    let mut g = Gate::new();
    g.init_signed();
    let broad = sign_broad(&g);
    let broad_rev = revision_of(&broad);
    g.start();

    // Revision `broad_rev` is current: `make lint` is a tier-0 read, allowed by the hook alone.
    // (This is the fast path the replay below must not reach.)
    let reason = assert_fast_path_allow(&g, "broad-make", "make lint");
    assert!(
        reason.contains(&format!("revision {broad_rev}")),
        "{reason}"
    );
    assert_eq!(route_one(&g, "accept-broad"), Some(broad_rev as i64));
    assert_eq!(published(&g).map(|p| p.0), Some(broad_rev));
    // It lists every project path: readable by the daemon's uid only (user mode; system mode
    // gives it to the agents' group, `tests/tests/system_mode.rs`).
    assert_eq!(mode(&g.data.join("tiermap-revisions")), 0o600);

    // The operator narrows tier 0 and re-signs; the daemon accepts the new revision.
    let narrow = sign_narrow(&g);
    let narrow_rev = revision_of(&narrow);
    assert!(narrow_rev > broad_rev, "{narrow_rev} > {broad_rev}");
    assert_eq!(route_one(&g, "accept-narrow"), Some(narrow_rev as i64));
    assert_eq!(published(&g).map(|p| p.0), Some(narrow_rev));

    // The agent puts the older, validly signed, broader map back.
    std::fs::write(g.proj.join("CLAUDE_CMDS.md"), &broad).unwrap();
    let (d, reason) = g.pre("replayed-make", "make lint");
    assert_ne!(d, "allow", "a replayed map was used: {reason}");
    let row = g
        .decision_row("replayed-make")
        .unwrap_or_else(|| panic!("`make lint` did not reach the daemon: {reason}"));
    // The daemon refuses the replayed map itself: read-only, so a non-read is denied.
    assert_eq!(row["decision"], "deny", "{row}");
    assert!(
        reason.contains("read-only")
            && reason.contains(&format!("older than revision {narrow_rev}")),
        "{reason}"
    );
    // Built-in reads still run on the fast path (`ls *` is in the replayed tier 0 too, but a
    // built-in read needs no map: the hook answers it by its built-in list, never on the replayed
    // map's word).
    let reason = assert_fast_path_allow(&g, "replayed-ls", "ls -la");
    assert!(
        reason.contains("built-in read list") && !reason.contains("revision"),
        "{reason}"
    );
    // The replay did not lower what was published.
    assert_eq!(published(&g).map(|p| p.0), Some(narrow_rev));

    // Restoring the current map restores the fast path for what it allows.
    std::fs::write(g.proj.join("CLAUDE_CMDS.md"), &narrow).unwrap();
    assert_fast_path_allow(&g, "restored-ls", "ls -la");
}

#[test]
fn the_record_is_written_at_start_before_any_request() {
    let mut g = Gate::new();
    g.init_signed();
    let broad = sign_broad(&g);
    g.start();
    route_one(&g, "accept-broad");
    let narrow = sign_narrow(&g);
    let narrow_rev = revision_of(&narrow);
    route_one(&g, "accept-narrow");
    g.stop();

    // The record is lost (or never existed); a restart rebuilds it from the store before the
    // first request, so the hook refuses the replay without the daemon having seen the map again.
    std::fs::remove_file(g.data.join("tiermap-revisions")).unwrap();
    std::fs::write(g.proj.join("CLAUDE_CMDS.md"), &broad).unwrap();
    g.start();
    let (rev, hash) = published(&g).expect("published at start");
    assert_eq!(rev, narrow_rev);
    assert_eq!(hash.len(), 64);
    let (d, reason) = g.pre("replayed-make", "make lint");
    assert_ne!(d, "allow", "{reason}");
    assert!(g.decision_row("replayed-make").is_some(), "{reason}");
}

#[test]
fn commands_naming_the_record_are_catastrophic() {
    let mut g = Gate::new();
    g.init_signed();
    g.start();
    let file = g.data.join("tiermap-revisions");
    for (id, command) in [
        ("rm", format!("rm -f {}", file.display())),
        ("truncate", format!(": > {}", file.display())),
    ] {
        let (d, reason) = g.pre(id, &command);
        assert_eq!(d, "deny", "{command}: {reason}");
        let row = g.decision_row(id).expect("audited");
        assert_eq!(row["source"], "builtin", "{command}: {row}");
    }
    assert!(file.exists());
}
