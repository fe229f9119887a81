//! Fuzz target for the tier map: parse, canonicalise, verify against a fixed pinned key, parse the
//! pinned-keys format, and check the laws that must hold for every input.
#![no_main]

use cmdgate_policy::tiermap::{
    canonical_text, parse, sign, verify, Pattern, PinnedKeys, VerifyError, MAX_MAP_BYTES,
};
use ed25519_dalek::SigningKey;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// The fixed key maps are signed with, and the pinned keys that trust it.
fn fixture() -> &'static (SigningKey, PinnedKeys) {
    static FIXTURE: OnceLock<(SigningKey, PinnedKeys)> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let key = SigningKey::from_bytes(&[42; 32]);
        let mut keys = PinnedKeys::new();
        keys.pin("fuzz", 1, key.verifying_key()).expect("valid key");
        (key, keys)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (key, keys) = fixture();

    // Whatever the input: no panic, and canonicalisation is idempotent.
    let parsed = parse(text);
    let canonical = canonical_text(text);
    assert_eq!(
        canonical_text(&canonical),
        canonical,
        "canonicalisation is idempotent"
    );
    let _ = verify(text, keys);
    let _ = PinnedKeys::parse(text);
    let _ = Pattern::parse(text);

    // Signing whatever this is with the pinned key must verify, unless the text itself carries
    // trailer-like lines (then the trailer is duplicated/moved) or is too large.
    let has_trailer_like = text.split('\n').any(|l| l.contains("cmdgate-signature"));
    if has_trailer_like || text.len() + 200 > MAX_MAP_BYTES {
        return;
    }
    let doc = sign(text, "fuzz", 1, key).expect("valid key name and signature");
    match (verify(&doc, keys), parsed) {
        (Ok(v), Ok(map)) => assert_eq!(v.map, map, "verified map is the parsed map"),
        (Err(VerifyError::InvalidMap(a)), Err(b)) => assert_eq!(a, b, "same diagnostics"),
        (v, p) => panic!(
            "sign→verify {:?} disagrees with parse {:?}",
            v.err(),
            p.err()
        ),
    }
});
