//! Signed tier maps against a real OpenBao dev server: transit signing, pinning, rotation, minimum
//! versions, every tampering and replay technique, an unreachable Vault, and the `cmdgate` CLI.

use crate::support;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cmdgate_daemon::signing::{
    self, sign_file, SignConfig, SignError, Signer, Transit, VaultConfig, VaultError,
};
use cmdgate_policy::tiermap::{
    check_revision, content_hash, verify, PinnedKeys, ReplayError, Snapshot, VerifyError,
};
use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use support::{dead_address, names, starter_map, Bao};

const KEY: &str = "cmdgate-tiermap";

fn config(addr: &str, token: &str) -> VaultConfig {
    VaultConfig::from_env(|k| match k {
        "BAO_ADDR" => Some(addr.to_owned()),
        "BAO_TOKEN" => Some(token.to_owned()),
        _ => None,
    })
    .expect("vault config")
}

fn transit(bao: &Bao) -> Transit {
    Transit::connect(&config(&bao.addr, &bao.token), "transit").expect("connect")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Pins every version Vault holds for `key` into `keys`.
fn pin_from_vault(rt: &tokio::runtime::Runtime, t: &Transit, key: &str, keys: &mut PinnedKeys) {
    let public = rt.block_on(t.public_keys(key)).expect("public keys");
    public.pin_into(keys).expect("pin");
}

/// The map with its revision set to `revision` (unsigned).
fn map_with_revision(revision: u64) -> String {
    signing::revision::set_revision(&starter_map(), revision).expect("set revision")
}

#[test]
fn transit_sign_verify_rotate_pin_reverify_and_minimum_version() {
    let bao = Bao::start();
    bao.create_key(KEY, "ed25519");
    let rt = rt();
    let t = transit(&bao);

    // Facts the design relies on: vault:vN: + standard base64 of 64 bytes; 32-byte public keys.
    let raw = rt
        .block_on(t.sign_message(KEY, b"hello"))
        .expect("sign message");
    let b64 = raw.strip_prefix("vault:v1:").expect("vault:v1: prefix");
    assert_eq!(STANDARD.decode(b64).expect("base64").len(), 64);
    assert_eq!(
        STANDARD
            .decode(bao.public_key(KEY, 1))
            .expect("base64")
            .len(),
        32
    );

    let mut keys = PinnedKeys::new();
    pin_from_vault(&rt, &t, KEY, &mut keys);
    let text = starter_map();
    let v1_map = rt.block_on(t.sign_map(KEY, &text)).expect("sign map");
    let ok = verify(&v1_map, &keys).expect("v1 map verifies");
    assert_eq!((ok.key.as_str(), ok.key_version, ok.revision), (KEY, 1, 1));

    // Rotate: new signatures use v2, which is not pinned yet.
    bao.rotate(KEY);
    let v2_map = rt
        .block_on(t.sign_map(KEY, &text))
        .expect("sign after rotate");
    assert!(v2_map.contains("sig=vault:v2:"), "{v2_map}");
    assert_eq!(
        verify(&v2_map, &keys),
        Err(VerifyError::VersionNotPinned {
            key: KEY.into(),
            version: 2
        })
    );

    // v1's public key does not verify a v2 signature (pinned under v2 by mistake or on purpose).
    let mut wrong = PinnedKeys::new();
    let v1_public = *keys.key(KEY).unwrap().version(1).unwrap();
    wrong.pin(KEY, 2, v1_public).unwrap();
    assert_eq!(
        verify(&v2_map, &wrong),
        Err(VerifyError::SignatureMismatch {
            key: KEY.into(),
            version: 2
        })
    );

    // Pin again from Vault: v2 is added, the re-signed map verifies with the same revision and
    // content, which the replay check accepts.
    pin_from_vault(&rt, &t, KEY, &mut keys);
    let ok2 = verify(&v2_map, &keys).expect("v2 map verifies once pinned");
    assert_eq!((ok2.key_version, ok2.revision), (2, 1));
    assert_eq!(ok2.content_hash, ok.content_hash);
    assert_eq!(
        check_revision(ok2.revision, &ok2.content_hash, Some(&ok.seen())),
        Ok(())
    );

    // Retire v1 in Vault; pinning carries the minimum over; v1 signatures are rejected.
    bao.set_min_decryption_version(KEY, 2);
    pin_from_vault(&rt, &t, KEY, &mut keys);
    assert_eq!(keys.key(KEY).unwrap().min_version(), Some(2));
    assert_eq!(
        verify(&v1_map, &keys),
        Err(VerifyError::BelowMinVersion {
            key: KEY.into(),
            version: 1,
            min_version: 2
        })
    );
    assert!(verify(&v2_map, &keys).is_ok());
}

/// Replaces the first occurrence of `from` (which must exist) with `to`.
fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "`{from}` not in the map");
    text.replacen(from, to, 1)
}

/// The text with the sections starting at headings `a` and `b` (adjacent, `a` first) swapped.
fn swap_sections(text: &str, a: &str, b: &str, after_b: &str) -> String {
    let ia = text.find(a).unwrap();
    let ib = text.find(b).unwrap();
    let ic = text.find(after_b).unwrap();
    format!(
        "{}{}{}{}",
        &text[..ia],
        &text[ib..ic],
        &text[ia..ib],
        &text[ic..]
    )
}

#[test]
fn every_tampering_technique_is_rejected_with_its_own_reason() {
    let bao = Bao::start();
    bao.create_key(KEY, "ed25519");
    bao.create_key("other-key", "ed25519");
    let rt = rt();
    let t = transit(&bao);
    let mut keys = PinnedKeys::new();
    pin_from_vault(&rt, &t, KEY, &mut keys);
    let signed = rt.block_on(t.sign_map(KEY, &starter_map())).expect("sign");
    verify(&signed, &keys).expect("the untouched map verifies");
    let trailer = signed.lines().last().unwrap().to_owned();
    let body = signed.strip_suffix(&format!("{trailer}\n")).unwrap();
    let mismatch = Err(VerifyError::SignatureMismatch {
        key: KEY.into(),
        version: 1,
    });

    // Content changes, each caught by the signature.
    let cases: Vec<(&str, String)> = vec![
        ("a pattern changed", edit(&signed, "- `pwd`", "- `rm *`")),
        (
            "one byte changed",
            edit(&signed, "revision: 1", "revision: 2"),
        ),
        (
            "trailing space added",
            edit(&signed, "- `pwd`\n", "- `pwd` \n"),
        ),
        (
            "tab instead of space",
            edit(&signed, "- `ls *`", "-\t`ls *`"),
        ),
        (
            "blank line inserted",
            edit(&signed, "## Tier 0", "\n## Tier 0"),
        ),
        ("byte-order mark added", format!("\u{feff}{signed}")),
        (
            "line appended before the trailer",
            format!("{body}- `sh *`\n{trailer}\n"),
        ),
        (
            "sections reordered",
            swap_sections(&signed, "## Tier 0", "## Tier 1", "## Tier 2"),
        ),
    ];
    for (what, text) in &cases {
        assert_eq!(verify(text, &keys), mismatch, "{what}");
    }

    // Whitespace canonicalisation does normalise: CRLF line endings and trailing blank lines.
    let crlf = signed.replace('\n', "\r\n");
    assert!(verify(&crlf, &keys).is_ok(), "CRLF is canonicalised to LF");
    assert!(verify(&format!("{signed}\n\n"), &keys).is_ok());

    // The trailer itself.
    let first_line_end = signed.find('\n').unwrap() + 1;
    let moved_to_top = format!("{trailer}\n{body}");
    let moved_inside = format!(
        "{}{trailer}\n{}",
        &body[..first_line_end],
        &body[first_line_end..]
    );
    assert_eq!(
        verify(&moved_to_top, &keys),
        Err(VerifyError::MovedTrailer { line: 1 })
    );
    assert_eq!(
        verify(&moved_inside, &keys),
        Err(VerifyError::MovedTrailer { line: 2 })
    );
    let n = signed.lines().count();
    assert_eq!(
        verify(&format!("{signed}{trailer}\n"), &keys),
        Err(VerifyError::DuplicateTrailer {
            lines: vec![n, n + 1]
        })
    );
    assert_eq!(verify(body, &keys), Err(VerifyError::NoTrailer));
    assert!(matches!(
        verify(&edit(&signed, " sig=vault:", " sig=vault: "), &keys),
        Err(VerifyError::MalformedTrailer { .. })
    ));
    let b64_start = signed.find("sig=vault:v1:").unwrap() + "sig=vault:v1:".len();
    let flipped = {
        let mut b = signed.clone().into_bytes();
        b[b64_start] = if b[b64_start] == b'A' { b'B' } else { b'A' };
        String::from_utf8(b).unwrap()
    };
    assert_eq!(verify(&flipped, &keys), mismatch, "signature bytes changed");
    assert!(matches!(
        verify(&edit(&signed, "sig=vault:v1:", "sig=vault:v1:AAAA"), &keys),
        Err(VerifyError::BadSignatureEncoding { .. })
    ));

    // Another key: as is (not pinned), and relabelled as the pinned key.
    let by_other = rt
        .block_on(t.sign_map("other-key", &starter_map()))
        .expect("sign with the other key");
    assert_eq!(
        verify(&by_other, &keys),
        Err(VerifyError::UnknownKey {
            key: "other-key".into()
        })
    );
    let relabelled = edit(&by_other, "key=other-key ", &format!("key={KEY} "));
    assert_eq!(
        verify(&relabelled, &keys),
        mismatch,
        "another key's signature"
    );

    // A version that was never pinned (or does not exist).
    assert_eq!(
        verify(&edit(&signed, "sig=vault:v1:", "sig=vault:v7:"), &keys),
        Err(VerifyError::VersionNotPinned {
            key: KEY.into(),
            version: 7
        })
    );
}

#[test]
fn an_older_validly_signed_revision_is_a_replay() {
    let bao = Bao::start();
    bao.create_key(KEY, "ed25519");
    let rt = rt();
    let t = transit(&bao);
    let mut keys = PinnedKeys::new();
    pin_from_vault(&rt, &t, KEY, &mut keys);

    let old = rt.block_on(t.sign_map(KEY, &map_with_revision(3))).unwrap();
    let new = rt.block_on(t.sign_map(KEY, &map_with_revision(4))).unwrap();
    let twin_text = edit(&map_with_revision(4), "- `pwd`", "- `pwd`\n- `whoami`");
    let same_revision_other_content = rt.block_on(t.sign_map(KEY, &twin_text)).unwrap();
    let old_v = verify(&old, &keys).expect("old map is validly signed");
    let new_v = verify(&new, &keys).expect("new map is validly signed");
    let twin_v = verify(&same_revision_other_content, &keys).expect("twin is validly signed");
    let seen = new_v.seen();

    assert_eq!(
        check_revision(old_v.revision, &old_v.content_hash, Some(&seen)),
        Err(ReplayError::Rollback {
            revision: 3,
            highest: 4
        })
    );
    assert_eq!(
        check_revision(twin_v.revision, &twin_v.content_hash, Some(&seen)),
        Err(ReplayError::RevisionReused { revision: 4 })
    );
    assert_eq!(
        check_revision(new_v.revision, &content_hash(&new), Some(&seen)),
        Ok(())
    );
    let snap = Snapshot::load(Some(&old), &keys, Some(&seen));
    assert!(
        snap.read_only_reason().is_some_and(|r| r.contains("older")),
        "{snap}"
    );
}

#[test]
fn transit_errors_are_clear() {
    let bao = Bao::start();
    bao.create_key("aes", "aes256-gcm96");
    bao.create_key(KEY, "ed25519");
    let rt = rt();
    let t = transit(&bao);
    assert!(matches!(
        rt.block_on(t.public_keys("aes")),
        Err(VaultError::NotEd25519 { .. })
    ));
    assert!(matches!(
        rt.block_on(t.public_keys("missing")),
        Err(VaultError::Api { code: 404, .. })
    ));
    let weak = Transit::connect(&config(&bao.addr, &bao.powerless_token()), "transit").unwrap();
    let err = rt.block_on(weak.sign_map(KEY, &starter_map())).unwrap_err();
    assert!(matches!(err, VaultError::Api { code: 403, .. }), "{err}");
    let dead = Transit::connect(&config(&dead_address(), "t"), "transit").unwrap();
    let err = rt.block_on(dead.sign_map(KEY, &starter_map())).unwrap_err();
    assert!(matches!(err, VaultError::Unreachable { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("cannot reach Vault at http://127.0.0.1:"),
        "{err}"
    );
}

#[test]
fn sign_file_with_vault_unreachable_leaves_the_file_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("CLAUDE_CMDS.md");
    let original = format!("{}\r\n", starter_map().replace('\n', "\r\n"));
    fs::write(&map, &original).unwrap();
    let cfg_dir = dir.path().join("cfg");
    let config_paths = SignConfig {
        trusted_keys: cfg_dir.join("trusted-keys"),
        ledger_dir: cfg_dir.clone(),
    };
    let dead = Transit::connect(&config(&dead_address(), "t"), "transit").unwrap();
    let signer = Signer::Vault {
        transit: &dead,
        key: KEY,
    };
    let err = rt()
        .block_on(sign_file(&map, signer, &config_paths))
        .unwrap_err();
    assert!(
        matches!(err, SignError::Vault(VaultError::Unreachable { .. })),
        "{err}"
    );
    assert_eq!(fs::read(&map).unwrap(), original.as_bytes());
    assert_eq!(names(dir.path()), vec!["CLAUDE_CMDS.md"]);
}

// --- the `cmdgate` binary ----------------------------------------------------------------------

/// Runs `cmdgate` with a private config dir and (optionally) a Vault address and token.
fn cmdgate(home: &Path, vault: Option<(&str, &str)>, args: &[&str]) -> Output {
    cmdgate_env(home, vault, &[], args)
}

/// [`cmdgate`] with extra environment variables.
fn cmdgate_env(
    home: &Path,
    vault: Option<(&str, &str)>,
    env: &[(&str, &str)],
    args: &[&str],
) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cmdgate"));
    c.args(args)
        .env("HOME", home)
        .env("CMDGATE_CONFIG_DIR", home.join("cfg"))
        .env_remove("CMDGATE_MODE")
        .env_remove("XDG_CONFIG_HOME");
    for v in [
        "VAULT_ADDR",
        "VAULT_TOKEN",
        "VAULT_CACERT",
        "BAO_ADDR",
        "BAO_TOKEN",
        "BAO_CACERT",
        "VAULT_NAMESPACE",
        "BAO_NAMESPACE",
    ] {
        c.env_remove(v);
    }
    if let Some((addr, token)) = vault {
        c.env("VAULT_ADDR", addr).env("VAULT_TOKEN", token);
    }
    c.envs(env.iter().copied());
    c.output().expect("run cmdgate")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `cmdgate tiermap verify --json` as JSON, with the exit status.
fn verify_json(home: &Path, map: &Path) -> (bool, serde_json::Value) {
    let o = cmdgate(
        home,
        None,
        &["tiermap", "verify", "--json", map.to_str().unwrap()],
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("verify --json: {e}: {}{}", stdout(&o), stderr(&o)));
    assert_eq!(
        o.status.success(),
        v["valid"] == true,
        "exit status matches `valid`"
    );
    (o.status.success(), v)
}

fn error_kind(v: &serde_json::Value) -> &str {
    v["error"]["kind"].as_str().unwrap_or("none")
}

#[test]
fn cli_sign_verify_rotate_trust() {
    let bao = Bao::start();
    bao.create_key(KEY, "ed25519");
    let vault = Some((bao.addr.as_str(), bao.token.as_str()));
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let map = home.join("CLAUDE_CMDS.md");
    let map_s = map.to_str().unwrap();
    fs::write(&map, starter_map()).unwrap();

    let (ok, v) = verify_json(home, &map);
    assert!(!ok);
    assert_eq!(error_kind(&v), "no_trailer");
    assert_eq!(v["revision"], 1);

    let o = cmdgate(home, vault, &["trust", "add", "--vault", "--key", KEY]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("pinned `{KEY}` v1")),
        "{}",
        stdout(&o)
    );

    let o = cmdgate(home, vault, &["tiermap", "sign", map_s, "--key", KEY]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("revision 1 (unchanged)"),
        "{}",
        stdout(&o)
    );
    let (ok, v) = verify_json(home, &map);
    assert!(ok, "{v}");
    assert_eq!(
        (
            v["revision"].as_u64(),
            v["key"].as_str(),
            v["key_version"].as_u64()
        ),
        (Some(1), Some(KEY), Some(1))
    );
    let signed_v1 = fs::read_to_string(&map).unwrap();

    // Edit without raising the revision: the signature breaks; signing raises it.
    fs::write(&map, edit(&signed_v1, "- `pwd`", "- `pwd`\n- `whoami`")).unwrap();
    let o = cmdgate(home, None, &["tiermap", "verify", map_s]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("NOT valid (signature_mismatch)"),
        "{}",
        stdout(&o)
    );
    let o = cmdgate(home, vault, &["tiermap", "sign", map_s, "--key", KEY]);
    assert!(
        stdout(&o).contains("revision 2 (was 1)"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    assert_eq!(verify_json(home, &map).1["revision"], 2);

    // Rotate: re-signing the same content keeps revision 2 with key v2, not pinned yet.
    bao.rotate(KEY);
    let o = cmdgate(home, vault, &["tiermap", "sign", map_s, "--key", KEY]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("revision 2 (unchanged), key `cmdgate-tiermap` v2"),
        "{}",
        stdout(&o)
    );
    assert!(
        stderr(&o).contains("trust add --vault --key"),
        "{}",
        stderr(&o)
    );
    let (ok, v) = verify_json(home, &map);
    assert!(!ok);
    assert_eq!(error_kind(&v), "version_not_pinned");
    let o = cmdgate(home, vault, &["trust", "add", "--vault", "--key", KEY]);
    assert!(
        stdout(&o).contains(&format!("pinned `{KEY}` v2")),
        "{}",
        stdout(&o)
    );
    let (ok, v) = verify_json(home, &map);
    assert!(ok, "{v}");
    assert_eq!(v["key_version"], 2);

    // Retire v1: the minimum is pinned; an old v1-signed copy is rejected for it. (Vault stops
    // listing v1's public key once it is below min_decryption_version.)
    let v1_public = bao.public_key(KEY, 1);
    bao.set_min_decryption_version(KEY, 2);
    let o = cmdgate(home, vault, &["trust", "add", "--vault", "--key", KEY]);
    assert!(
        stdout(&o).contains("below v2 are rejected"),
        "{}",
        stdout(&o)
    );
    let old = home.join("old.md");
    fs::write(&old, &signed_v1).unwrap();
    assert_eq!(error_kind(&verify_json(home, &old).1), "below_min_version");

    // trust list / remove / manual add.
    let o = cmdgate(home, None, &["trust", "list", "--json"]);
    let list: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let versions = &list["keys"][0]["versions"];
    assert_eq!(versions.as_array().map(Vec::len), Some(2), "{list}");
    assert_eq!(versions[1]["public_key"], bao.public_key(KEY, 2));
    assert_eq!(list["keys"][0]["min_version"], 2);
    let o = cmdgate(home, None, &["trust", "remove", KEY]);
    assert!(o.status.success());
    assert_eq!(error_kind(&verify_json(home, &map).1), "unknown_key");
    let o = cmdgate(home, None, &["trust", "remove", KEY]);
    assert!(
        !o.status.success() && stderr(&o).contains("not pinned"),
        "{}",
        stderr(&o)
    );
    let public = bao.public_key(KEY, 2);
    let o = cmdgate(
        home,
        None,
        &[
            "trust",
            "add",
            "--name",
            KEY,
            "--version",
            "2",
            "--public-key",
            &public,
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(verify_json(home, &map).0);
    // A different public key under an already pinned version is refused.
    let o = cmdgate(
        home,
        None,
        &[
            "trust",
            "add",
            "--name",
            KEY,
            "--version",
            "2",
            "--public-key",
            &v1_public,
        ],
    );
    assert!(
        !o.status.success() && stderr(&o).contains("already pinned"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn cli_sign_with_vault_gone_leaves_the_file_byte_identical() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let map = home.join("CLAUDE_CMDS.md");
    let map_s = map.to_str().unwrap();
    fs::write(&map, starter_map()).unwrap();
    let bao = Bao::start();
    bao.create_key(KEY, "ed25519");
    let (addr, token) = (bao.addr.clone(), bao.token.clone());
    let o = cmdgate(
        home,
        Some((&addr, &token)),
        &["tiermap", "sign", map_s, "--key", KEY],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let edited = edit(
        &fs::read_to_string(&map).unwrap(),
        "- `pwd`",
        "- `pwd`\n- `id`",
    );
    fs::write(&map, &edited).unwrap();
    let before_files = names(home);

    drop(bao); // Vault goes away between two signings.
    let o = cmdgate(
        home,
        Some((&addr, &token)),
        &["tiermap", "sign", map_s, "--key", KEY],
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains(&format!("cannot reach Vault at {addr}")),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains(&token), "the token is never printed");
    assert_eq!(fs::read_to_string(&map).unwrap(), edited);
    assert_eq!(names(home), before_files);

    let o = cmdgate(home, None, &["tiermap", "sign", map_s, "--key", KEY]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no Vault address: set VAULT_ADDR"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read_to_string(&map).unwrap(), edited);
}

#[test]
fn cli_dev_signer_and_revision_supersedes_what_was_signed_before() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let map = home.join("CLAUDE_CMDS.md");
    let map_s = map.to_str().unwrap();
    fs::write(&map, map_with_revision(5)).unwrap();

    let o = cmdgate(home, None, &["tiermap", "sign", "--dev", map_s]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("revision 5 (unchanged), key `cmdgate-dev` v1"),
        "{}",
        stdout(&o)
    );
    use std::os::unix::fs::PermissionsExt as _;
    let key_mode = fs::metadata(home.join("cfg/dev-signing-key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(key_mode & 0o777, 0o600);
    let (ok, v) = verify_json(home, &map);
    assert!(ok, "{v}");
    assert_eq!(v["key"], "cmdgate-dev");

    // An older validly signed copy put back: `verify` flags the replay against this machine's
    // signing ledger (the daemon does the same against what it accepted).
    let signed_5 = fs::read_to_string(&map).unwrap();
    fs::write(&map, map_with_revision(7)).unwrap();
    let o = cmdgate(home, None, &["tiermap", "sign", "--dev", map_s]);
    assert!(
        stdout(&o).contains("revision 7 (unchanged)"),
        "{}",
        stdout(&o)
    );
    fs::write(&map, &signed_5).unwrap();
    let (ok, v) = verify_json(home, &map);
    assert!(!ok);
    assert_eq!(error_kind(&v), "rollback", "{v}");

    // An older unsigned copy put back over the map: signing goes above what was signed here.
    fs::write(&map, map_with_revision(2)).unwrap();
    let o = cmdgate(home, None, &["tiermap", "sign", "--dev", map_s]);
    assert!(stdout(&o).contains("revision 8 (was 2)"), "{}", stdout(&o));

    // An invalid map is not signed, and every diagnostic is shown.
    let broken = edit(
        &fs::read_to_string(&map).unwrap(),
        "## Tier 0 — read",
        "## Tier 9 — read",
    );
    fs::write(&map, &broken).unwrap();
    let o = cmdgate(home, None, &["tiermap", "sign", "--dev", map_s]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("is not a valid tier map"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read_to_string(&map).unwrap(), broken);
    let (ok, v) = verify_json(home, &map);
    assert!(!ok);
    assert!(
        v["diagnostics"].as_array().is_some_and(|d| !d.is_empty()),
        "{v}"
    );
}

#[test]
fn cli_tls_checks_the_certificate_unless_told_otherwise() {
    let bao = Bao::start_tls();
    bao.create_key(KEY, "ed25519");
    let ca = bao.ca_cert.clone().unwrap();
    let ca_s = ca.to_str().unwrap();
    let vault = Some((bao.addr.as_str(), bao.token.as_str()));
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let map = home.join("CLAUDE_CMDS.md");
    let map_s = map.to_str().unwrap();
    fs::write(&map, starter_map()).unwrap();
    let sign = ["tiermap", "sign", map_s, "--key", KEY];

    // An unknown CA is refused, also when VAULT_SKIP_VERIFY asks otherwise (never read).
    let o = cmdgate_env(home, vault, &[("VAULT_SKIP_VERIFY", "true")], &sign);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("cannot reach Vault at https://"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("UnknownIssuer"), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(&map).unwrap(), starter_map());

    // The CA from --ca-cert or VAULT_CACERT.
    let o = cmdgate(home, vault, &[&sign[..], &["--ca-cert", ca_s]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let o = cmdgate_env(
        home,
        vault,
        &[("VAULT_CACERT", ca_s)],
        &["trust", "add", "--vault", "--key", KEY],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(verify_json(home, &map).0);

    // The explicit, loudly labelled insecure flag.
    let o = cmdgate(
        home,
        vault,
        &[&sign[..], &["--insecure-skip-tls-verify"]].concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("TLS certificate checking is OFF"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn cli_transit_key_in_a_namespace() {
    let bao = Bao::start();
    bao.cli_ok(&["namespace", "create", "team1"]);
    bao.cli_ok(&["secrets", "enable", "-namespace=team1", "transit"]);
    bao.cli_ok(&[
        "write",
        "-namespace=team1",
        "-f",
        &format!("transit/keys/{KEY}"),
        "type=ed25519",
    ]);
    let vault = Some((bao.addr.as_str(), bao.token.as_str()));
    let ns = [("VAULT_NAMESPACE", "team1")];
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let map = home.join("CLAUDE_CMDS.md");
    let map_s = map.to_str().unwrap();
    fs::write(&map, starter_map()).unwrap();

    // Outside the namespace the key does not exist.
    let o = cmdgate(home, vault, &["trust", "add", "--vault", "--key", KEY]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("HTTP 404") || stderr(&o).contains("HTTP 400"),
        "{}",
        stderr(&o)
    );

    let o = cmdgate_env(home, vault, &ns, &["trust", "add", "--vault", "--key", KEY]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = cmdgate_env(home, vault, &ns, &["tiermap", "sign", map_s, "--key", KEY]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(verify_json(home, &map).0);
}
