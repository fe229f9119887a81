//! Table tests for canonical bytes, pinned keys, signing and verification: every tampering case is
//! rejected with its own reason.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cmdgate_policy::tiermap::{
    attach_signature, canonical_bytes, canonical_text, check_revision, content_hash, sign,
    signing_message, verify, ContentHash, PinnedKeys, ReplayError, SeenRevision, Snapshot, Tier,
    Unverified, VerifyError, MAX_MAP_BYTES,
};
use ed25519_dalek::{Signer as _, SigningKey};

fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

/// `ops` v1, v2 and `other` v1 pinned; `retired` pinned at v1 and v2 with min_version 2.
fn pinned() -> PinnedKeys {
    let mut k = PinnedKeys::new();
    k.pin("ops", 1, key(1).verifying_key()).unwrap();
    k.pin("ops", 2, key(2).verifying_key()).unwrap();
    k.pin("other", 1, key(9).verifying_key()).unwrap();
    k.pin("retired", 1, key(5).verifying_key()).unwrap();
    k.pin("retired", 2, key(6).verifying_key()).unwrap();
    k.set_min_version("retired", 2).unwrap();
    k
}

const MAP: &str = "---
revision: 5
project: demo
---

# Demo

## Tier 0 — read
- `ls *`

## Tier 1 — sandbox
- `cargo test *` — timeout=120s

## Tier 3 — deny
- `rm -rf /`
";

fn signed() -> String {
    sign(MAP, "ops", 1, &key(1)).expect("signs")
}

#[test]
fn canonicalisation_table() {
    #[rustfmt::skip]
    let cases: &[(&str, &str)] = &[
        // input                                    canonical
        ("a\n",                                     "a\n"),
        ("a",                                       "a\n"),
        ("a\r\n",                                   "a\n"),
        ("a\r\nb\r\n",                              "a\nb\n"),
        ("a\r\r\n",                                 "a\n"),
        ("a\n\n\n",                                 "a\n"),
        ("a\r\n\r\n",                               "a\n"),
        ("",                                        ""),
        ("\n\n",                                    ""),
        // Not normalised: trailing spaces and tabs, inner and leading blank lines, lone CR, BOM.
        ("a \n",                                    "a \n"),
        ("a\t\n",                                   "a\t\n"),
        ("a\n  \n",                                 "a\n  \n"),
        ("\na\n",                                   "\na\n"),
        ("a\n\nb\n",                                "a\n\nb\n"),
        ("a\rb\n",                                  "a\rb\n"),
        ("\u{feff}a",                               "\u{feff}a\n"),
        // Trailer lines at the end are removed, with the empty lines around them.
        ("a\n<!-- cmdgate-signature: x -->\n",      "a\n"),
        ("a\n\n<!-- cmdgate-signature: x -->",      "a\n"),
        ("a\n<!-- cmdgate-signature: x -->\n\n<!-- cmdgate-signature: y -->\r\n\n", "a\n"),
        // ... but not elsewhere (verify rejects those).
        ("<!-- cmdgate-signature: x -->\na\n",      "<!-- cmdgate-signature: x -->\na\n"),
        ("a\n<!-- cmdgate-signature: x -->\n  \n",  "a\n<!-- cmdgate-signature: x -->\n  \n"),
    ];
    for (input, expect) in cases {
        assert_eq!(canonical_text(input), *expect, "{input:?}");
        assert_eq!(canonical_bytes(input), expect.as_bytes(), "{input:?}");
        assert_eq!(canonical_text(expect), *expect, "idempotent on {expect:?}");
    }
}

#[test]
fn signing_message_is_domain_separated_digest() {
    let msg = String::from_utf8(signing_message(MAP)).expect("ascii");
    assert_eq!(
        msg,
        format!("cmdgate-tiermap-v1 sha256:{}", content_hash(MAP))
    );
    assert_eq!(msg.len(), "cmdgate-tiermap-v1 sha256:".len() + 64);
    let hash = content_hash(MAP);
    assert_eq!(ContentHash::from_hex(&hash.to_hex()), Some(hash));
    assert_eq!(
        ContentHash::from_hex(&hash.to_hex().to_uppercase()),
        Some(hash)
    );
    assert_eq!(ContentHash::from_hex("+f"), None);
    assert_eq!(
        ContentHash::from_hex(&format!("+{}", &hash.to_hex()[1..])),
        None
    );
}

#[test]
fn sign_then_verify() {
    let doc = signed();
    assert!(
        doc.starts_with(MAP),
        "signed document is the canonical text plus a trailer"
    );
    let last = doc.lines().last().expect("lines");
    assert!(
        last.starts_with("<!-- cmdgate-signature: key=ops sig=vault:v1:") && last.ends_with(" -->")
    );
    assert!(doc.ends_with(" -->\n"));
    let v = verify(&doc, &pinned()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((v.key.as_str(), v.key_version, v.revision), ("ops", 1, 5));
    assert_eq!(v.map.revision, 5);
    assert_eq!(v.content_hash, content_hash(MAP));
    assert_eq!(
        v.map.classify(&["rm", "-rf", "/"]).map(|(t, _)| t),
        Some(Tier::Deny)
    );
    // Re-signing replaces the trailer rather than stacking another.
    let again = sign(&doc, "ops", 2, &key(2)).expect("signs");
    assert_eq!(again.matches("cmdgate-signature").count(), 1);
    assert_eq!(
        verify(&again, &pinned()).expect("v2 verifies").key_version,
        2
    );
}

#[test]
fn attach_signature_matches_the_local_signer() {
    // What the Vault path does: send signing_message, get `vault:v2:<base64>`, attach it.
    let sig = key(2).sign(&signing_message(MAP));
    let vault = format!("vault:v2:{}", STANDARD.encode(sig.to_bytes()));
    let doc = attach_signature(MAP, "ops", &vault).expect("attaches");
    assert_eq!(doc, sign(MAP, "ops", 2, &key(2)).expect("signs"));
    assert!(verify(&doc, &pinned()).is_ok());
    #[rustfmt::skip]
    let bad: &[(&str, &str)] = &[
        ("ops",     "vault:v0:AAAA"),
        ("ops",     "v1:AAAA"),
        ("ops",     "vault:v1:!!!!"),
        ("ops",     "vault:v1:AAAA"),
        ("bad key", &vault),
        ("",        &vault),
        ("-x",      &vault),
    ];
    for (k, s) in bad {
        assert!(attach_signature(MAP, k, s).is_err(), "{k} {s}");
    }
}

/// The kind of a verification result, for tables.
fn kind(r: &Result<cmdgate_policy::tiermap::VerifiedMap, VerifyError>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(VerifyError::TooLarge { .. }) => "too_large",
        Err(VerifyError::NoTrailer) => "no_trailer",
        Err(VerifyError::DuplicateTrailer { .. }) => "duplicate_trailer",
        Err(VerifyError::MovedTrailer { .. }) => "moved_trailer",
        Err(VerifyError::MalformedTrailer { .. }) => "malformed_trailer",
        Err(VerifyError::BadSignatureEncoding { .. }) => "bad_signature_encoding",
        Err(VerifyError::UnknownKey { .. }) => "unknown_key",
        Err(VerifyError::VersionNotPinned { .. }) => "version_not_pinned",
        Err(VerifyError::BelowMinVersion { .. }) => "below_min_version",
        Err(VerifyError::SignatureMismatch { .. }) => "signature_mismatch",
        Err(VerifyError::InvalidMap(_)) => "invalid_map",
    }
}

fn trailer_of(doc: &str) -> String {
    doc.lines().last().expect("trailer").to_owned()
}

fn body_of(doc: &str) -> String {
    canonical_text(doc)
}

/// Replaces the first occurrence, insisting there is one.
fn swap(doc: &str, from: &str, to: &str) -> String {
    assert!(doc.contains(from), "{from:?} not in the document");
    doc.replacen(from, to, 1)
}

fn relabel(doc: &str, from: &str, to: &str) -> String {
    let t = trailer_of(doc);
    swap(doc, &t, &t.replacen(from, to, 1))
}

#[test]
fn tampering_table() {
    let doc = signed();
    let trailer = trailer_of(&doc);
    let body = body_of(&doc);
    let sig_b64 = trailer
        .split("vault:v1:")
        .nth(1)
        .unwrap()
        .trim_end_matches(" -->")
        .to_owned();
    let reordered = {
        let (head, deny) = body.split_once("## Tier 3 — deny\n").unwrap();
        let (pre, rest) = head.split_once("## Tier 0 — read\n").unwrap();
        format!("{pre}## Tier 3 — deny\n{deny}\n## Tier 0 — read\n{rest}")
    };
    let bad_map = sign("---\nrevision: 6\n---\n- `ls`\n", "ops", 1, &key(1)).unwrap();
    #[rustfmt::skip]
    let cases: Vec<(&str, String, &str)> = vec![
        ("untouched",                          doc.clone(),                                            "ok"),
        // Normalised by canonicalisation: still valid.
        ("CRLF line endings",                  doc.replace('\n', "\r\n"),                              "ok"),
        ("blank lines after the trailer",      format!("{doc}\n\n"),                                   "ok"),
        ("blank lines before the trailer",     format!("{body}\n\n{trailer}\n"),                       "ok"),
        ("no newline after the trailer",       doc.trim_end_matches('\n').to_owned(),                  "ok"),
        // Any other byte change breaks the signature.
        ("a pattern changed",                  swap(&doc, "`ls *`", "`lt *`"),                         "signature_mismatch"),
        ("revision bumped",                    swap(&doc, "revision: 5", "revision: 6"),               "signature_mismatch"),
        ("entry moved to another tier",        swap(&swap(&doc, "- `rm -rf /`\n", ""), "- `ls *`\n", "- `ls *`\n- `rm -rf /`\n"), "signature_mismatch"),
        ("sections reordered",                 format!("{reordered}{trailer}\n"),                      "signature_mismatch"),
        ("trailing space on a line",           swap(&doc, "- `ls *`\n", "- `ls *` \n"),                "signature_mismatch"),
        ("space turned into a tab",            swap(&doc, "- `ls *`", "-\t`ls *`"),                    "signature_mismatch"),
        ("blank line removed inside",          swap(&doc, "---\n\n# Demo", "---\n# Demo"),             "signature_mismatch"),
        ("blank line added at the top",        format!("\n{doc}"),                                     "signature_mismatch"),
        ("byte order mark added",              format!("\u{feff}{doc}"),                               "signature_mismatch"),
        ("em dash turned into a hyphen",       swap(&doc, "Tier 0 — read", "Tier 0 - read"),           "signature_mismatch"),
        ("option changed",                     swap(&doc, "timeout=120s", "timeout=600s"),             "signature_mismatch"),
        ("whitespace-only line added at end",  format!("{body}  \n{trailer}\n"),                       "signature_mismatch"),
        // Trailer problems.
        ("unsigned",                           MAP.to_owned(),                                         "no_trailer"),
        ("trailer removed",                    body.clone(),                                           "no_trailer"),
        ("trailer moved to the top",           format!("{trailer}\n{body}"),                           "moved_trailer"),
        ("trailer moved into the middle",      swap(&body, "# Demo\n", &format!("# Demo\n{trailer}\n")), "moved_trailer"),
        ("text after the trailer",             format!("{doc}- `curl *`\n"),                           "moved_trailer"),
        ("whitespace after the trailer",       format!("{doc}  \n"),                                   "moved_trailer"),
        ("trailer duplicated",                 format!("{doc}{trailer}\n"),                            "duplicate_trailer"),
        ("trailer duplicated at the top",      format!("{trailer}\n{doc}"),                            "duplicate_trailer"),
        ("trailer indented",                   format!("{body} {trailer}\n"),                          "malformed_trailer"),
        ("trailer with extra space",           relabel(&doc, "key=ops", "key=ops "),                   "malformed_trailer"),
        ("trailer without -->",                swap(&doc, " -->", ""),                                 "malformed_trailer"),
        ("trailer with version 0",             relabel(&doc, "vault:v1:", "vault:v0:"),                "malformed_trailer"),
        ("trailer with version 01",            relabel(&doc, "vault:v1:", "vault:v01:"),               "malformed_trailer"),
        ("trailer not vault-prefixed",         relabel(&doc, "vault:v1:", "v1:"),                      "malformed_trailer"),
        ("trailer with a bad key name",        relabel(&doc, "key=ops", "key=o/ps"),                   "malformed_trailer"),
        ("signature not base64",               relabel(&doc, &sig_b64, "not*base64"),                  "bad_signature_encoding"),
        ("signature of 63 bytes",              relabel(&doc, &sig_b64, &STANDARD.encode([7u8; 63])),   "bad_signature_encoding"),
        ("signature unpadded",                 relabel(&doc, &sig_b64, sig_b64.trim_end_matches('=')), "bad_signature_encoding"),
        // Keys.
        ("unknown key",                        relabel(&doc, "key=ops", "key=nobody"),                 "unknown_key"),
        ("unknown key version",                sign(MAP, "ops", 3, &key(3)).unwrap(),                  "version_not_pinned"),
        ("version relabelled to v2",           relabel(&doc, "vault:v1:", "vault:v2:"),                "signature_mismatch"),
        ("signature from another pinned key",  relabel(&sign(MAP, "other", 1, &key(9)).unwrap(), "key=other", "key=ops"), "signature_mismatch"),
        ("signed by an unpinned key",          sign(MAP, "ops", 1, &key(77)).unwrap(),                 "signature_mismatch"),
        ("other pinned key, own name",         sign(MAP, "other", 1, &key(9)).unwrap(),                "ok"),
        ("below min_version",                  sign(MAP, "retired", 1, &key(5)).unwrap(),              "below_min_version"),
        ("at min_version",                     sign(MAP, "retired", 2, &key(6)).unwrap(),              "ok"),
        // Validly signed, but not a valid map.
        ("signed garbage",                     bad_map,                                                "invalid_map"),
        ("too large",                          format!("{}{doc}", " ".repeat(MAX_MAP_BYTES)),          "too_large"),
    ];
    let keys = pinned();
    for (name, text, expect) in &cases {
        // The hook's order (parse, look, then check the signature) refuses exactly what `verify`
        // refuses, and accepts the same map.
        let parsed_first = Unverified::parse(text.clone()).map(|u| u.verify(&keys));
        match &parsed_first {
            Ok(r) => assert_eq!(kind(r), *expect, "{name} (parsed first)"),
            Err(_) => assert_ne!(*expect, "ok", "{name}: verifies, yet does not parse"),
        }
        let r = verify(text, &keys);
        if let Ok(Ok(first)) = &parsed_first {
            assert_eq!(Some(first), r.as_ref().ok(), "{name}");
        }
        assert_eq!(
            kind(&r),
            *expect,
            "{name}: {:?}",
            r.as_ref().err().map(ToString::to_string)
        );
        if let Err(e) = r {
            let msg = e.to_string();
            let first = msg.chars().next().expect("non-empty message");
            assert!(
                first.is_lowercase(),
                "{name}: messages are lowercase fragments: {msg}"
            );
        }
    }
}

#[test]
fn verify_error_messages_are_specific() {
    let keys = pinned();
    let e = verify(&sign(MAP, "retired", 1, &key(5)).unwrap(), &keys).unwrap_err();
    assert_eq!(
        e.to_string(),
        "signed with `retired` v1, below the minimum accepted version v2"
    );
    let e = verify(&format!("{}{}", signed(), trailer_of(&signed())), &keys).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("tier map has 2 signature trailers"),
        "{e}"
    );
    let e = verify(
        &sign("---\nrevision: 0\n---\n", "ops", 1, &key(1)).unwrap(),
        &keys,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "tier map is signed but invalid: CLAUDE_CMDS.md:2: `revision:` must be at least 1"
    );
}

/// Revision and hash of the candidate map, highest seen, expected result.
type ReplayCase = (
    u64,
    ContentHash,
    Option<SeenRevision>,
    Result<(), ReplayError>,
);

#[test]
fn replay_table() {
    let a = ContentHash([1; 32]);
    let b = ContentHash([2; 32]);
    let seen = |revision| SeenRevision {
        revision,
        content_hash: a,
    };
    #[rustfmt::skip]
    let cases: &[ReplayCase] = &[
        // revision hash  highest seen      result
        (1,  a, None,            Ok(())),
        (5,  b, Some(seen(4)),   Ok(())),
        (5,  a, Some(seen(5)),   Ok(())),   // a reload, or the same map re-signed after a rotation
        (5,  b, Some(seen(5)),   Err(ReplayError::RevisionReused { revision: 5 })),
        (4,  a, Some(seen(5)),   Err(ReplayError::Rollback { revision: 4, highest: 5 })),
        (4,  b, Some(seen(5)),   Err(ReplayError::Rollback { revision: 4, highest: 5 })),
    ];
    for (revision, hash, seen, expect) in cases {
        assert_eq!(
            &check_revision(*revision, hash, seen.as_ref()),
            expect,
            "{revision} vs {seen:?}"
        );
    }
}

#[test]
fn snapshot_is_verified_or_read_only_with_a_reason() {
    let keys = pinned();
    let doc = signed();
    let v = verify(&doc, &keys).unwrap();
    let snap = Snapshot::load(Some(&doc), &keys, None);
    assert_eq!(snap.revision(), Some(5));
    assert!(snap.tier_map().is_some() && snap.read_only_reason().is_none());
    assert_eq!(Snapshot::load(Some(&doc), &keys, Some(&v.seen())), snap);
    #[rustfmt::skip]
    let cases: Vec<(Option<String>, PinnedKeys, Option<SeenRevision>, &str)> = vec![
        (None,                  keys.clone(),      None, "no CLAUDE_CMDS.md in the project"),
        (Some(MAP.to_owned()),  keys.clone(),      None, "tier map rejected: tier map is not signed (no signature trailer)"),
        (Some(doc.clone()),     PinnedKeys::new(), None, "tier map rejected: signed with key `ops`, which is not pinned"),
        (Some(doc.clone()),     keys.clone(),      Some(SeenRevision { revision: 6, content_hash: v.content_hash }),
            "tier map rejected: tier map revision 5 is older than revision 6 already accepted (replayed map?)"),
        (Some(doc.clone()),     keys.clone(),      Some(SeenRevision { revision: 5, content_hash: ContentHash([0; 32]) }),
            "tier map rejected: tier map revision 5 was already accepted with different content"),
    ];
    for (text, keys, seen, reason) in cases {
        let snap = Snapshot::load(text.as_deref(), &keys, seen.as_ref());
        assert_eq!(snap.read_only_reason(), Some(reason));
        assert!(snap.tier_map().is_none() && snap.revision().is_none());
        assert_eq!(snap.to_string(), format!("read-only: {reason}"));
    }
}

#[test]
fn pinned_keys_file_table() {
    let k1 = STANDARD.encode(key(1).verifying_key().as_bytes());
    let k2 = STANDARD.encode(key(2).verifying_key().as_bytes());
    let small_order = STANDARD.encode([0u8; 32]); // the identity point: a weak key
                                                  // About half of all y coordinates are not on the curve; take the first small one.
    let not_a_point = (2u8..=255)
        .map(|y| {
            let mut b = [0u8; 32];
            b[0] = y;
            b
        })
        .find(|b| ed25519_dalek::VerifyingKey::from_bytes(b).is_err())
        .map(|b| STANDARD.encode(b))
        .expect("some small y is off the curve");
    let short = STANDARD.encode([1u8; 31]);
    #[rustfmt::skip]
    let cases: Vec<(String, &[(usize, &str)])> = vec![
        (format!("# c\n\nops v1 {k1}\n  ops v2 {k2}  \nops min_version 2\n"), &[]),
        (format!("ops v1 {k1}\r\n"),                         &[]),
        (format!("ops v1 {k1} extra\n"),                     &[(1, "expected `<key-name> v<N>")]),
        ("ops v1\n".to_owned(),                              &[(1, "expected `<key-name> v<N>")]),
        (format!("o/ps v1 {k1}\n"),                          &[(1, "invalid key name")]),
        (format!("ops 1 {k1}\n"),                            &[(1, "expected a key version")]),
        (format!("ops v0 {k1}\n"),                           &[(1, "expected a key version")]),
        (format!("ops v01 {k1}\n"),                          &[(1, "expected a key version")]),
        ("ops v1 !!!\n".to_owned(),                          &[(1, "not standard base64")]),
        (format!("ops v1 {short}\n"),                        &[(1, "31 bytes")]),
        (format!("ops v1 {not_a_point}\n"),                  &[(1, "not a valid ed25519 point")]),
        (format!("ops v1 {small_order}\n"),                  &[(1, "weak")]),
        (format!("ops v1 {k1}\nops v1 {k1}\n"),              &[(2, "pinned twice (first on line 1)")]),
        (format!("ops v1 {k1}\nops min_version 0\n"),        &[(2, "positive whole number")]),
        (format!("ops v1 {k1}\nops min_version 1\nops min_version 1\n"), &[(3, "given twice (first on line 2)")]),
        ("ops min_version 1\n".to_owned(),                   &[(1, "no pinned version")]),
        (format!("ops v1 {k1}\nops min_version 2\n"),        &[(2, "above every pinned version")]),
        (format!("x y\nops v1 {k1}\nops v9 ?\n"),            &[(1, "expected"), (3, "not standard base64")]),
    ];
    for (text, expect) in &cases {
        match PinnedKeys::parse(text) {
            Ok(k) => assert!(
                expect.is_empty(),
                "{text:?} parsed to {k:?}, expected {expect:?}"
            ),
            Err(d) => {
                let got: Vec<(usize, &str)> =
                    d.iter().map(|d| (d.line, d.message.as_str())).collect();
                assert_eq!(got.len(), expect.len(), "{text:?}: {got:?}");
                for ((gl, gm), (el, em)) in got.iter().zip(expect.iter()) {
                    assert!(
                        gl == el && gm.contains(em),
                        "{text:?}: {got:?} vs {expect:?}"
                    );
                }
                assert!(d[0]
                    .to_string()
                    .starts_with(&format!("pinned-keys:{}: ", d[0].line)));
            }
        }
    }
}

#[test]
fn pinned_keys_round_trip_and_api() {
    let keys = pinned();
    let file = keys.to_file_string();
    assert_eq!(PinnedKeys::parse(&file).expect("own output parses"), keys);
    assert!(file.contains("retired min_version 2\n"));
    let mut k = keys.clone();
    assert!(
        k.pin("ops", 1, key(1).verifying_key()).is_ok(),
        "same key again is a no-op"
    );
    assert!(
        k.pin("ops", 1, key(3).verifying_key()).is_err(),
        "a version's key never changes"
    );
    assert!(k.pin("ops", 0, key(3).verifying_key()).is_err());
    assert!(k.pin("a b", 1, key(3).verifying_key()).is_err());
    assert!(k.set_min_version("nobody", 1).is_err());
    assert!(k.remove("ops") && !k.remove("ops"));
    assert_eq!(k.key("retired").and_then(|p| p.min_version()), Some(2));
    assert_eq!(k.key("retired").map(|p| p.versions().count()), Some(2));
}

#[test]
fn docs_example_verifies() {
    let docs = include_str!("../../../docs/tiermap.md");
    let example = docs
        .split_once("```markdown\n")
        .and_then(|(_, rest)| rest.split_once("\n```\n"))
        .map(|(ex, _)| format!("{ex}\n"))
        .expect("docs/tiermap.md has a ```markdown example");
    let mut keys = PinnedKeys::new();
    keys.pin("cmdgate-tiermap", 1, key(7).verifying_key())
        .unwrap();
    let v = verify(&example, &keys).unwrap_or_else(|e| panic!("docs example: {e}"));
    assert_eq!(v.revision, 12);
    let tier = |argv: &[&str]| v.map.classify(argv).map(|(t, _)| t);
    assert_eq!(tier(&["cargo", "test", "--features=x"]), Some(Tier::Ask));
    assert_eq!(tier(&["cargo", "test"]), Some(Tier::Sandbox));
    assert_eq!(tier(&["git", "-C", "--exec-path=/tmp"]), Some(Tier::Deny));
    let pubkey = STANDARD.encode(key(7).verifying_key().as_bytes());
    assert!(docs.contains(&pubkey), "docs name the example's public key");
}
