//! Table tests for parsing `CLAUDE_CMDS.md`: accepted maps, and every diagnostic with its line.

use cmdgate_policy::tiermap::{parse, Tier, TierMap, MAX_MAP_BYTES, STARTER_MAP};
use std::time::Duration;

/// Parses `src`, expecting failure with exactly these (line, message fragment) diagnostics in order.
fn fails(src: &str, expect: &[(usize, &str)]) {
    let diags = match parse(src) {
        Ok(map) => panic!("expected diagnostics {expect:?}, parsed {map:#?}\n--- input ---\n{src}"),
        Err(d) => d,
    };
    let got: Vec<(usize, String)> = diags.iter().map(|d| (d.line, d.message.clone())).collect();
    assert_eq!(
        got.len(),
        expect.len(),
        "diagnostics {got:#?}\nexpected {expect:?}\n--- input ---\n{src}"
    );
    for ((gl, gm), (el, em)) in got.iter().zip(expect) {
        assert!(
            gl == el && gm.contains(em),
            "got {got:#?}\nexpected {expect:?}\n--- input ---\n{src}"
        );
    }
}

fn ok(src: &str) -> TierMap {
    parse(src)
        .unwrap_or_else(|d| panic!("expected a map, got {}\n--- input ---\n{src}", render(&d)))
}

fn render(d: &[cmdgate_policy::tiermap::Diagnostic]) -> String {
    d.iter().map(|d| format!("\n  {d}")).collect()
}

/// Front matter (lines 1-3) then `body` from line 4.
fn doc(body: &str) -> String {
    format!("---\nrevision: 3\n---\n{body}")
}

#[test]
fn starter_map_parses() {
    let map = ok(STARTER_MAP);
    assert_eq!(map.revision, 1);
    assert!(map.entries_in(Tier::Read).count() >= 5);
    assert!(map.entries_in(Tier::Sandbox).count() >= 5);
    assert!(map.entries_in(Tier::Ask).count() >= 5);
    assert!(map.entries_in(Tier::Deny).count() >= 5);
    let tier = |argv: &[&str]| map.classify(argv).map(|(t, _)| t);
    assert_eq!(
        tier(&["git", "push", "--force", "origin"]),
        Some(Tier::Deny)
    );
    assert_eq!(tier(&["git", "push", "origin", "main"]), Some(Tier::Ask));
    assert_eq!(tier(&["cargo", "test", "--workspace"]), Some(Tier::Sandbox));
    assert_eq!(tier(&["ls", "-la"]), Some(Tier::Read));
    assert_eq!(tier(&["rm", "-rf", "/"]), Some(Tier::Deny));
    let fmt = map
        .classify(&["cargo", "fmt", "--all"])
        .expect("cargo fmt listed")
        .1;
    assert!(fmt.options.edit_tracked);
}

#[test]
fn diagnostics_table() {
    let big = doc(&"x".repeat(MAX_MAP_BYTES));
    #[rustfmt::skip]
    let cases: &[(&str, &[(usize, &str)])] = &[
        // Front matter.
        ("## Tier 0 — read\n- `ls`\n",                 &[(1, "missing front matter")]),
        ("",                                           &[(1, "missing front matter")]),
        ("---\nproject: x\n---\n",                     &[(1, "missing `revision:`")]),
        ("---\nrevision: 0\n---\n",                    &[(2, "at least 1")]),
        ("---\nrevision: 000\n---\n",                  &[(2, "at least 1")]),
        ("---\nrevision: -1\n---\n",                   &[(2, "positive whole number")]),
        ("---\nrevision: 1.5\n---\n",                  &[(2, "positive whole number")]),
        ("---\nrevision:\n---\n",                      &[(2, "positive whole number")]),
        ("---\nrevision: 007\n---\n",                  &[(2, "leading zeros")]),
        ("---\nrevision: 99999999999999999999\n---\n", &[(2, "too large")]),
        ("---\nrevision: 1\nrevision: 2\n---\n",       &[(3, "duplicate front-matter key `revision` (first on line 2)")]),
        ("---\nrevision: 1\nproject: a\nproject: a\n---\n", &[(4, "duplicate front-matter key `project`")]),
        ("---\nrevison: 1\n---\n",                     &[(1, "missing `revision:`"), (2, "unknown front-matter key `revison`")]),
        ("---\nrevision 1\n---\n",                     &[(1, "missing `revision:`"), (2, "expected `key: value`")]),
        ("---\nrevision: 1\nproject:\n---\n",          &[(3, "empty value")]),
        ("---\nrevision: 1\n## Tier 0 — read\n",       &[(1, "not closed")]),
        ("\u{feff}---\nrevision: 1\n---\n",            &[(1, "byte order mark")]),
        ("---\nrevision: 1\nproject: a\rb\n---\n",      &[(3, "carriage return inside a line")]),
        (&big,                                         &[(0, "more than the limit")]),
        // Sections.
        (&doc("- `ls`\n"),                             &[(4, "entry outside a tier section")]),
        (&doc("## Notes\n\n- `ls`\n"),                 &[(6, "entry outside a tier section")]),
        (&doc("## Tier 0 — read\n# Title\n- `ls`\n"),  &[(6, "entry outside a tier section")]),
        (&doc("## Tier 3 — denied\n- `rm *`\n"),       &[(4, "tier 3 is named `deny`, not `denied`")]),
        (&doc("## Tier 0 — deny\n- `rm *`\n"),         &[(4, "tier 0 is named `read`, not `deny`")]),
        (&doc("## Tier 4 — other\n- `x`\n"),           &[(4, "unrecognised tier heading")]),
        (&doc("## Tier 0\n- `x`\n"),                   &[(4, "unrecognised tier heading")]),
        (&doc("## Tier 00 — read\n"),                  &[(4, "unrecognised tier heading")]),
        (&doc("## Tier 0 — read (fast)\n"),            &[(4, "not `read (fast)`")]),
        (&doc("## Tier 0 — read\n## Tier 0 — read\n"), &[(5, "second `tier 0 (read)` section (the first is on line 4)")]),
        (&doc("Tier 3 — deny\n---\n- `rm *`\n"),       &[(5, "setext headings"), (6, "entry outside a tier section")]),
        // Entries.
        (&doc("## Tier 0 — read\n- `* foo`\n"),        &[(5, "the command word `*` must be literal")]),
        (&doc("## Tier 0 — read\n- `l*s`\n"),          &[(5, "the command word `l*s` must be literal")]),
        (&doc("## Tier 3 — deny\n- `curl * | sh`\n"),  &[(5, "`|` is a shell operator")]),
        (&doc("## Tier 3 — deny\n- `a && b`\n"),       &[(5, "`&&` is a shell operator")]),
        (&doc("## Tier 3 — deny\n- `cat >x`\n"),       &[(5, "`>x` is a shell operator")]),
        (&doc("## Tier 0 — read\n- `echo \"hi\"`\n"),  &[(5, "contains a quote")]),
        (&doc("## Tier 0 — read\n- `echo $HOME`\n"),   &[(5, "contains `$`")]),
        (&doc("## Tier 0 — read\n- `ls **`\n"),        &[(5, "use a single `*`")]),
        (&doc("## Tier 0 — read\n- `ls a**b`\n"),      &[(5, "use a single `*`")]),
        (&doc("## Tier 0 — read\n- `ls \\q`\n"),       &[(5, "escapes neither")]),
        (&doc("## Tier 0 — read\n- `ls \\`\n"),        &[(5, "escapes neither")]),
        (&doc("## Tier 0 — read\n- ` `\n"),            &[(5, "empty pattern")]),
        (&doc("## Tier 0 — read\n- ``ls``\n"),         &[(5, "single backticks")]),
        (&doc("## Tier 0 — read\n- `ls\n"),            &[(5, "closing backtick is missing")]),
        (&doc("## Tier 0 — read\n- ls -la\n"),         &[(5, "must be an entry")]),
        (&doc("## Tier 0 — read\n-\n"),                &[(5, "must be an entry")]),
        (&doc("## Tier 0 — read\n  - `ls`\n"),         &[(5, "beginning of the line")]),
        (&doc("## Tier 3 — deny\n> - `rm *`\n"),      &[(5, "inside a block quote")]),
        (&doc("## Tier 0 — read\n`ls`\n"),             &[(5, "start the line with `- `")]),
        (&doc("## Tier 0 — read\n- `ls`\n- `ls`\n"),   &[(6, "`ls` is already listed in tier 0 (read) on line 5")]),
        (&doc("## Tier 0 — read\n- `ls *`\n## Tier 3 — deny\n- `ls  *`\n"), &[(7, "already listed in tier 0 (read) on line 5")]),
        (&doc("## Tier 1 — sandbox\n- `make *` — timeout=5s\nnetwork\n"), &[(6, "fit on one line")]),
        (&doc("## Tier 1 — sandbox\n- `make *`\n  continued\n"),    &[(6, "fit on one line")]),
        (&doc("## Tier 0 — read\n\n    - `rm *`\n"),                &[(6, "beginning of the line")]),
        // Options.
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — fast\n"),          &[(5, "unknown option `fast`")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — timeout=120\n"),   &[(5, "not a duration")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — timeout=abc\n"),   &[(5, "not a duration")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — timeout=2h\n"),    &[(5, "not a duration")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — timeout=0s\n"),    &[(5, "between 1s and 3600s")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — timeout=61m\n"),   &[(5, "between 1s and 3600s")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — timeout=-5s\n"),   &[(5, "not a duration")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — timeout\n"),       &[(5, "needs a value")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — network=yes\n"),   &[(5, "`yes`: a single-label name")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — network, network\n"), &[(5, "option `network` given twice")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — timeout=1s, timeout=2s\n"), &[(5, "option `timeout` given twice")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — network,\n"),      &[(5, "empty option")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — write=target\n"),  &[(5, "absolute path or start with `~/`")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — write=/\n"),       &[(5, "whole tree")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — write=~/\n"),      &[(5, "whole tree")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — write=~\n"),       &[(5, "absolute path or start with `~/`")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — write=~/../etc\n"), &[(5, "`..` components")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — write=/tmp/*\n"),  &[(5, "must not contain spaces")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` — write=/a, write=/a\n"), &[(5, "`write=/a` given twice")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` timeout=5s\n"),      &[(5, "write ` — `")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *`— timeout=5s\n"),     &[(5, "write ` — `")]),
        (&doc("## Tier 1 — sandbox\n- `cargo test *` —timeout=5s\n"),     &[(5, "write ` — `")]),
        (&doc("## Tier 0 — read\n- `ls *` — network\n"),                  &[(5, "only to tier 1 (sandbox) entries, not to tier 0 (read)")]),
        (&doc("## Tier 3 — deny\n- `rm *` — timeout=5s\n"),               &[(5, "only to tier 1")]),
        (&doc("## Tier 1 — sandbox\n- `a` — fast, network=1, timeout=9h\n"), &[(5, "unknown option `fast`"), (5, "IP addresses are not allowed"), (5, "not a duration")]),
        // Trailers, comments, fences, stray bytes.
        (&doc("<!-- cmdgate-signature: key=k sig=vault:v1:AA== -->\n## Tier 0 — read\n- `ls`\n"), &[(4, "must be the last line")]),
        (&doc("- x\n<!-- cmdgate-signature: a -->\n<!-- cmdgate-signature: b -->\n"), &[(5, "duplicate signature trailer (the trailer is on line 6)")]),
        (&doc("<!-- cmdgate-signature: a -->\n\n<!-- cmdgate-signature: b -->\n\n"), &[(4, "duplicate signature trailer (the trailer is on line 6)")]),
        (&doc("## Tier 0 — read\n<!--\n- `rm -rf /`\n-->\n"), &[(5, "html comments are not allowed"), (7, "fit on one line")]),
        (&doc("## Tier 0 — read\n```\n- `ls`\n"),      &[(5, "code fence opened here is never closed")]),
        (&doc("## Tier 0 — read\n~~~~\n~~~\n"),        &[(5, "code fence opened here is never closed")]),
        (&doc("## Tier 0 — read\n- `ls`\rx\n"),        &[(5, "carriage return inside a line")]),
        (&doc("## Tier 3 — deny\n- `git push --for\u{200B}ce *`\n"), &[(5, "invisible or bidirectional control character U+200B")]),
        (&doc("## Tier 0 — read\n- `ls` \u{202E}\n"),        &[(5, "U+202E"), (5, "write ` — `")]),
        (&doc("Intro \u{2066}x\u{2069}\n"),                   &[(4, "U+2066")]),
        ("---\nrevision: 1\u{FEFF}\n---\n",                   &[(2, "U+FEFF"), (2, "positive whole number")]),
        // Everything is collected, in line order.
        ("---\nrevision: 0\nfoo: 1\n---\n- `ls`\n## Tier 9 — x\n## Tier 1 — sandbox\n- `a` — b\n",
            &[(2, "at least 1"), (3, "unknown front-matter key"), (5, "entry outside"), (6, "unrecognised tier heading"), (8, "unknown option `b`")]),
    ];
    for (src, expect) in cases {
        fails(src, expect);
    }
}

/// Input, then the entries it yields: (tier, pattern, line).
type AcceptedCase<'a> = (&'a str, &'a [(Tier, &'a str, usize)]);

#[test]
fn accepted_forms_table() {
    #[rustfmt::skip]
    let cases: &[AcceptedCase] = &[
        // Heading spellings: any case, separators — – - :
        (&doc("## Tier 0 — read\n- `ls`\n"),        &[(Tier::Read, "ls", 5)]),
        (&doc("## tier 1 – Sandbox\n- `ls`\n"),     &[(Tier::Sandbox, "ls", 5)]),
        (&doc("## TIER 2 - ASK\n- `ls`\n"),         &[(Tier::Ask, "ls", 5)]),
        (&doc("## Tier 3: deny\n- `ls`\n"),         &[(Tier::Deny, "ls", 5)]),
        (&doc("##   Tier   3  —  deny  \n- `ls`\n"), &[(Tier::Deny, "ls", 5)]),
        // List markers.
        (&doc("## Tier 0 — read\n* `a`\n+ `b`\n1. `c`\n"), &[(Tier::Read, "a", 5), (Tier::Read, "b", 6), (Tier::Read, "c", 7)]),
        // Sub-headings stay in the tier; prose between entries is fine after a blank line.
        (&doc("## Tier 1 — sandbox\n### Rust\n- `cargo build *`\n\nSome prose\nmore `prose`.\n\n- `make`\n"),
            &[(Tier::Sandbox, "cargo build *", 6), (Tier::Sandbox, "make", 11)]),
        // Fenced code and indented code are examples, not entries.
        (&doc("## Tier 0 — read\n```text\n- `rm -rf /`\n```\n- `ls`\n"), &[(Tier::Read, "ls", 8)]),
        // Prose sections, prose lists, headings that merely mention tiers.
        (&doc("# Title\n\nIntro.\n\n- a prose item\n## Tiers explained\n- another\n## Tier 2 — ask\n- `gh *`\n"), &[(Tier::Ask, "gh *", 12)]),
        // Unsigned, signed, CRLF: the trailer is not the parser's business.
        (&doc("## Tier 0 — read\n- `ls`\n<!-- cmdgate-signature: key=k sig=vault:v1:AA== -->\n"), &[(Tier::Read, "ls", 5)]),
        (&doc("## Tier 0 — read\r\n- `ls`\r\n\r\n"),  &[(Tier::Read, "ls", 5)]),
        // Words are split on any whitespace and rejoined with single spaces.
        (&doc("## Tier 0 — read\n- `git   status\t*`\n"), &[(Tier::Read, "git status *", 5)]),
        // Empty tiers and missing tiers are fine.
        (&doc("## Tier 0 — read\n## Tier 3 — deny\n"), &[]),
        ("---\nrevision: 18446744073709551615\n---\n", &[]),
    ];
    for (src, expect) in cases {
        let map = ok(src);
        let got: Vec<(Tier, &str, usize)> = map
            .entries()
            .iter()
            .map(|e| (e.tier, e.pattern.as_str(), e.line))
            .collect();
        assert_eq!(&got, expect, "--- input ---\n{src}");
    }
}

#[test]
fn front_matter_values() {
    let map = ok("---\n# comment\nrevision: 42\n\nproject: cmdgate\ndescription:  a: b  \n---\n");
    assert_eq!(map.revision, 42);
    assert_eq!(map.project.as_deref(), Some("cmdgate"));
    assert_eq!(map.description.as_deref(), Some("a: b"));
}

/// Options text after the pattern, then timeout seconds, network, extra writable, edit-tracked.
type OptionsCase<'a> = (&'a str, Option<u64>, bool, &'a [&'a str], bool);

#[test]
fn options_table() {
    #[rustfmt::skip]
    let cases: &[OptionsCase] = &[
        // options text                                     timeout    network extra_writable           edit_tracked
        ("",                                                None,      false, &[],                     false),
        (" — timeout=120s",                                 Some(120), false, &[],                     false),
        (" — timeout=2m",                                   Some(120), false, &[],                     false),
        (" — timeout=60m",                                  Some(3600), false, &[],                    false),
        (" -- network",                                     None,      true,  &[],                     false),
        (" - edit-tracked",                                 None,      false, &[],                     true),
        (" – write=~/.cargo/registry",                      None,      false, &["~/.cargo/registry"], false),
        (" —  timeout=1s ,network,write=/a,write=~/b , edit-tracked ", Some(1), true, &["/a", "~/b"], true),
    ];
    for (opts, timeout, network, writable, tracked) in cases {
        let src = doc(&format!("## Tier 1 — sandbox\n- `cargo test *`{opts}\n"));
        let map = ok(&src);
        let o = &map.entries()[0].options;
        assert_eq!(o.timeout, timeout.map(Duration::from_secs), "{opts}");
        assert_eq!(o.network, *network, "{opts}");
        assert_eq!(o.extra_writable, *writable, "{opts}");
        assert_eq!(o.edit_tracked, *tracked, "{opts}");
        assert_eq!(o.is_default(), opts.is_empty(), "{opts}");
        assert!(!o.direct, "{opts}");
    }
    let map = ok(&doc(
        "## Tier 1 — sandbox\n- `docker compose *` — direct, network\n",
    ));
    assert!(map.entries()[0].options.direct);
    for bad in [" — direct=yes", " — direct, direct"] {
        let src = doc(&format!("## Tier 1 — sandbox\n- `docker *`{bad}\n"));
        assert!(parse(&src).is_err(), "{bad}");
    }
    assert!(parse(&doc("## Tier 2 — ask\n- `docker *` — direct\n")).is_err());
}

#[test]
fn unmask_names_secret_paths_an_entry_may_read() {
    let map = ok(&doc(
        "## Tier 1 — sandbox\n- `npm publish *` — unmask=~/.npmrc, unmask=/srv/keys/npm\n",
    ));
    assert_eq!(
        map.entries()[0].options.unmask,
        ["~/.npmrc", "/srv/keys/npm"]
    );
    assert!(!map.entries()[0].options.is_default());
    for (bad, says) in [
        (" — unmask=.npmrc", "absolute path or start with `~/`"),
        (" — unmask=~/", "whole tree"),
        (" — unmask=/", "whole tree"),
        (" — unmask=~/../root/.ssh", "`..` components"),
        (" — unmask=~/.ssh/*", "must not contain spaces"),
        (" — unmask", "needs a value"),
        (" — unmask=~/.npmrc, unmask=~/.npmrc", "given twice"),
    ] {
        let src = doc(&format!("## Tier 1 — sandbox\n- `npm publish *`{bad}\n"));
        let d = parse(&src).expect_err(bad);
        assert!(d[0].to_string().contains(says), "{bad}: {}", d[0]);
    }
    assert!(parse(&doc(
        "## Tier 2 — ask\n- `npm publish *` — unmask=~/.npmrc\n"
    ))
    .is_err());
}

#[test]
fn network_host_lists() {
    let hosts = |opts: &str| -> Vec<String> {
        let map = ok(&doc(&format!(
            "## Tier 1 — sandbox\n- `npm install`{opts}\n"
        )));
        let o = &map.entries()[0].options;
        assert!(!o.network, "{opts}: a host list is not the whole network");
        o.hosts.iter().map(|h| h.to_string()).collect()
    };
    assert_eq!(
        hosts(" — network=registry.npmjs.org,*.crates.io"),
        ["registry.npmjs.org", "*.crates.io"]
    );
    assert_eq!(
        hosts(" — timeout=5m, network=Registry.Test.:8080, static.crates.io, edit-tracked"),
        ["registry.test:8080", "static.crates.io"]
    );
    for (bad, says) in [
        (" — network=*", "bare `*`"),
        (" — network=10.0.0.1", "IP addresses"),
        (" — network=localhost", "single-label"),
        (" — network=a.example.com,*", "bare `*`"),
        (" — network=a.example.com, a.example.com", "listed twice"),
        (" — network, network=a.example.com", "given twice"),
        (" — network=a.example.com, direct", "`direct`"),
        (" — network=", "empty host"),
        (" — network=bücher.example", "A-label"),
        // A host after another option is not in the list: an unknown option, not a silent host.
        (
            " — network=a.example.com, write=/x, b.example.com",
            "unknown option `b.example.com`",
        ),
    ] {
        let src = doc(&format!("## Tier 1 — sandbox\n- `npm install`{bad}\n"));
        let d = parse(&src).expect_err(bad);
        let all: Vec<String> = d.iter().map(|d| d.to_string()).collect();
        assert!(all.iter().any(|m| m.contains(says)), "{bad}: {all:?}");
    }
}

#[test]
fn diagnostics_display_file_and_line() {
    let d = parse(&doc("- `ls`\n")).unwrap_err();
    assert_eq!(
        d[0].to_string(),
        "CLAUDE_CMDS.md:4: entry outside a tier section: put it under a `## Tier N — name` heading"
    );
    assert_eq!(
        d[0].clone()
            .in_file("/p/CLAUDE_CMDS.md")
            .to_string()
            .split(": ")
            .next(),
        Some("/p/CLAUDE_CMDS.md:4")
    );
}
