//! Property tests for the tier map: canonicalisation laws, parsers that never panic, glob matching
//! against a naive reference, pinned-keys round trips, and "any changed byte breaks the signature".

use cmdgate_policy::tiermap::{
    canonical_text, parse, sign, verify, Pattern, PinnedKeys, VerifyError, STARTER_MAP,
};
use ed25519_dalek::SigningKey;
use proptest::prelude::*;

/// Text built from the fragments that matter to the format, so cases hit its edges often.
fn fragments() -> impl Strategy<Value = String> {
    let frag = prop::sample::select(vec![
        "a",
        " ",
        "\t",
        "\r",
        "\n",
        "\r\n",
        "\n\n",
        "---",
        "revision: 3",
        "revision: 0",
        "foo: x",
        "## Tier 0 — read",
        "## Tier 1 — sandbox",
        "## Tier 3: deny",
        "## Tier 9 — x",
        "# T",
        "- `ls *`",
        "- `cargo test *` — timeout=5s, network",
        "- `a` — write=~/x, edit-tracked",
        "- `* x`",
        "`",
        "```",
        "~~~",
        "<!--",
        "-->",
        "<!-- cmdgate-signature: key=k sig=vault:v1:AA== -->",
        "é",
        "\u{feff}",
        "*",
        "\\",
        "1. ",
        "=",
        "    ",
    ]);
    prop::collection::vec(frag, 0..40).prop_map(|v| v.concat())
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![fragments(), any::<String>()]
}

fn key() -> SigningKey {
    SigningKey::from_bytes(&[3; 32])
}

fn keys() -> PinnedKeys {
    let mut k = PinnedKeys::new();
    k.pin("ops", 1, key().verifying_key()).expect("pins");
    k
}

/// Reference glob: `*` matches any run of characters. Exponential, fine for short strings.
fn naive_glob(p: &[char], s: &[char]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some(('*', rest)) => (0..=s.len()).any(|i| naive_glob(rest, &s[i..])),
        Some((c, rest)) => s.first() == Some(c) && naive_glob(rest, &s[1..]),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn canonicalisation_is_idempotent(t in text()) {
        let once = canonical_text(&t);
        prop_assert_eq!(canonical_text(&once), once);
    }

    #[test]
    fn a_trailer_does_not_change_the_canonical_bytes(t in text(), crlf in any::<bool>(), extra in 0usize..3) {
        let trailer = "<!-- cmdgate-signature: key=ops sig=vault:v1:AAAA -->";
        let nl = if crlf { "\r\n" } else { "\n" };
        let with = format!("{t}{nl}{trailer}{}", nl.repeat(extra));
        prop_assert_eq!(canonical_text(&with), canonical_text(&t));
    }

    #[test]
    fn crlf_and_lf_canonicalise_alike(t in text()) {
        prop_assert_eq!(canonical_text(&t.replace('\n', "\r\n")), canonical_text(&t));
    }

    #[test]
    fn parse_and_verify_never_panic(t in text()) {
        let _ = parse(&t);
        let _ = verify(&t, &keys());
        let _ = PinnedKeys::parse(&t);
        let _ = Pattern::parse(&t);
    }

    #[test]
    fn glob_words_match_like_the_reference(
        pat in "[ab*]{1,8}",
        s in "[ab]{0,8}",
    ) {
        prop_assume!(pat != "*" && !pat.contains("**"));
        let p = Pattern::parse(&format!("x {pat}")).expect("valid glob");
        let pc: Vec<char> = pat.chars().collect();
        let sc: Vec<char> = s.chars().collect();
        prop_assert_eq!(p.matches(&["x", &s]), naive_glob(&pc, &sc), "{} vs {}", pat, s);
    }

    #[test]
    fn literal_patterns_match_their_own_words(ws in prop::collection::vec("[a-z0-9./=-]{1,6}", 1..6)) {
        let p = Pattern::parse(&ws.join(" ")).expect("literal words");
        let argv: Vec<&str> = ws.iter().map(String::as_str).collect();
        prop_assert!(p.matches(&argv));
        let mut longer = argv.clone();
        longer.push("extra");
        prop_assert!(!p.matches(&longer), "no trailing `*`, no extra words");
        let open = Pattern::parse(&format!("{} *", ws.join(" "))).expect("with *");
        prop_assert!(open.matches(&argv) && open.matches(&longer));
    }

}

proptest! {
    // Each case signs or derives keys: ed25519 in a debug build is slow, so fewer cases.
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn signing_round_trips(t in text()) {
        let has_trailer_line = t.split('\n').any(|l| l.contains("cmdgate-signature"));
        prop_assume!(!has_trailer_line);
        let doc = sign(&t, "ops", 1, &key()).expect("signs");
        match (verify(&doc, &keys()), parse(&t)) {
            (Ok(v), Ok(map)) => prop_assert_eq!(v.map, map),
            (Err(VerifyError::InvalidMap(d1)), Err(d2)) => prop_assert_eq!(d1, d2),
            (v, p) => prop_assert!(false, "verify {:?} vs parse {:?}", v.err(), p.err()),
        }
    }

    #[test]
    fn any_changed_character_breaks_the_signature(pos in any::<prop::sample::Index>(), c in any::<char>()) {
        prop_assume!(c != '\n' && c != '\r');
        let doc = sign(STARTER_MAP, "ops", 1, &key()).expect("signs");
        let body_chars: Vec<(usize, char)> = canonical_text(&doc)
            .char_indices()
            .filter(|&(_, ch)| ch != '\n')
            .collect();
        let (at, old) = body_chars[pos.index(body_chars.len())];
        prop_assume!(old != c);
        let mut tampered = doc.clone();
        tampered.replace_range(at..at + old.len_utf8(), &c.to_string());
        prop_assert!(verify(&tampered, &keys()).is_err());
    }

    #[test]
    fn pinned_keys_round_trip(
        entries in prop::collection::vec(("[a-z][a-z0-9._-]{0,10}", 1u32..50, any::<[u8; 32]>()), 0..8),
        min in prop::option::of(1u32..3),
    ) {
        let mut keys = PinnedKeys::new();
        for (name, version, seed) in &entries {
            let public = SigningKey::from_bytes(seed).verifying_key();
            // A version may already hold another key: that conflict is the API's to refuse.
            let _ = keys.pin(name, *version, public);
        }
        if let (Some(m), Some((name, _, _))) = (min, entries.first()) {
            let top = keys.key(name).and_then(|k| k.versions().map(|(v, _)| v).max()).unwrap_or(0);
            if m <= top {
                keys.set_min_version(name, m).expect("pinned");
            }
        }
        let file = keys.to_file_string();
        prop_assert_eq!(PinnedKeys::parse(&file).expect("own output parses"), keys);
    }
}

/// Command words the generated maps use (a path, a dash, an escape-free literal each).
const WORDS: [&str; 7] = ["ls", "git", "rm", "/bin/rm", "make", "gh", "cargo"];

/// Noise between sections and entries: prose, code spans, fences holding entry-like lines,
/// other headings, indented code, block quotes, plain items (some of which refuse the map).
fn noise() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "Some prose with a `ls *` code span.\n",
        "```\n- `rm *`\n## Tier 0 — read\n```\n",
        "~~~~\n- `git *`\n~~~\n~~~~\n",
        "### Details\n",
        "    - `ls *`\n",
        "> - `rm *`\n",
        "- plain item\n",
        "- `ls *` <!-- note -->\n",
        "## Notes\n\n- `make *`\n",
        "# Title\n",
    ])
}

/// An entry: command word, arguments, and what follows it (nothing, options, an example).
fn entry() -> impl Strategy<Value = (&'static str, Vec<&'static str>, u8)> {
    (
        prop::sample::select(WORDS.to_vec()),
        prop::collection::vec(
            prop::sample::select(vec![
                "*", "status", "-la", "--force", "push", "x*y", "build", "\\*",
            ]),
            0..3,
        ),
        0u8..8,
    )
}

/// A tier map: front matter (sometimes with `read-packs-off:`), then tier sections (each tier at
/// most once, in any order) of entries with noise between, and sometimes a trailer. Duplicate
/// patterns get a distinct last word, so that many generated maps parse.
fn map_text() -> impl Strategy<Value = String> {
    let section = (
        0u8..4,
        prop::collection::vec(entry(), 0..5),
        prop::option::of(noise()),
    );
    (
        any::<bool>(),
        prop::collection::vec(section, 0..5),
        prop::option::of(noise()),
        any::<bool>(),
    )
        .prop_map(|(packs_off, sections, lead, trailer)| {
            let mut t = String::from("---\nrevision: 2\n");
            if packs_off {
                t.push_str("read-packs-off: gh, kubectl\n");
            }
            t.push_str("---\n\n");
            if let Some(n) = lead {
                t.push_str(n);
                t.push('\n');
            }
            let mut seen_tiers = Vec::new();
            let mut seen_patterns: Vec<String> = Vec::new();
            for (tier, entries, noise) in sections {
                if seen_tiers.contains(&tier) {
                    continue;
                }
                seen_tiers.push(tier);
                let name = ["read", "sandbox", "ask", "deny"][usize::from(tier)];
                t.push_str(&format!("## Tier {tier} — {name}\n\n"));
                for (i, (w, args, extra)) in entries.into_iter().enumerate() {
                    let mut pattern = format!("{w} {}", args.join(" ")).trim_end().to_owned();
                    if seen_patterns.contains(&pattern) {
                        pattern = format!("{pattern} n{}-{i}", seen_patterns.len());
                    }
                    seen_patterns.push(pattern.clone());
                    t.push_str(&format!("- `{pattern}`"));
                    match extra {
                        0 if tier == 1 => t.push_str(" — timeout=5s"),
                        1 => t.push_str("\n  - does not match `zz-no-match`"),
                        2 => t.push_str(" — timeout=5s"),
                        _ => {}
                    }
                    t.push('\n');
                }
                t.push('\n');
                if let Some(n) = noise {
                    t.push_str(n);
                    t.push('\n');
                }
            }
            if trailer {
                t.push_str("<!-- cmdgate-signature: key=k sig=vault:v1:AA== -->\n");
            }
            t
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// The hook's sketch (`tiermap::sketch`) keeps its promise: for a map that parses, exactly the
    /// parsed map's entries whose command word is wanted (same tier, pattern, line, order), the
    /// same `read-packs-off:`, so the same `classify` for every argv of wanted words; and a text
    /// the sketch calls invalid never parses.
    #[test]
    fn the_sketch_is_the_parsed_map_for_the_wanted_words(
        t in prop_oneof![map_text(), text()],
        wanted in prop::collection::vec(prop::sample::select(WORDS.to_vec()), 0..4),
        args in prop::collection::vec(prop::sample::select(vec!["status", "-la", "--force", "push", "xay", "x"]), 0..3),
    ) {
        let sketch = cmdgate_policy::tiermap::sketch(&t, &|w| wanted.contains(&w));
        let parsed = parse(&t);
        if sketch.invalid() {
            prop_assert!(parsed.is_err(), "the sketch called a valid map invalid");
        }
        let Ok(map) = parsed else { return Ok(()) };
        prop_assert!(!sketch.invalid());
        let kept: Vec<_> = map
            .entries()
            .iter()
            .filter(|e| wanted.contains(&e.pattern.command()))
            .map(|e| (e.tier, e.pattern.clone(), e.line))
            .collect();
        let got: Vec<_> = sketch
            .entries()
            .iter()
            .map(|e| (e.tier, e.pattern.clone(), e.line))
            .collect();
        prop_assert_eq!(got, kept);
        prop_assert_eq!(sketch.read_packs_off(), map.read_packs_off.as_slice());
        for w in &wanted {
            let base = w.rsplit('/').next().unwrap_or(w);
            if !wanted.contains(&base) {
                continue;
            }
            let mut argv = vec![*w];
            argv.extend(args.iter().copied());
            prop_assert_eq!(sketch.classify(&argv), map.classify(&argv).map(|(t, _)| t));
        }
    }
}

/// Enough generated maps parse for the property above to mean something.
#[test]
fn generated_maps_often_parse() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = map_text();
    let (mut valid, mut with_entries) = (0, 0);
    for _ in 0..400 {
        let t = strategy.new_tree(&mut runner).expect("tree").current();
        if let Ok(map) = parse(&t) {
            valid += 1;
            if map.entries().len() >= 2 {
                with_entries += 1;
            }
        }
    }
    assert!(
        valid >= 40 && with_entries >= 20,
        "{valid} valid, {with_entries} with entries"
    );
}
