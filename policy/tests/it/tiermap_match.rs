//! Table tests for pattern matching and for `TierMap::classify` (strictest tier wins).

use cmdgate_policy::tiermap::{parse, Pattern, Tier};

fn words(s: &str) -> Vec<&str> {
    s.split(' ').filter(|w| !w.is_empty()).collect()
}

#[test]
fn pattern_matching_table() {
    #[rustfmt::skip]
    let cases: &[(&str, &str, bool)] = &[
        // pattern                     argv (space-separated)             matches
        // Without a trailing `*`: exactly these words.
        ("npm test",                   "npm test",                        true),
        ("npm test",                   "npm test --watch",                false),
        ("npm test",                   "npm",                             false),
        ("npm test",                   "npm tests",                       false),
        ("rm -rf /",                   "rm -rf /",                        true),
        ("rm -rf /",                   "rm -rf / --no-preserve-root",     false),
        ("rm -rf /",                   "rm -fr /",                        false),
        // Trailing `*`: zero or more further words.
        ("cargo build *",              "cargo build",                     true),
        ("cargo build *",              "cargo build --release",           true),
        ("cargo build *",              "cargo build --release -p a b c",  true),
        ("cargo build *",              "cargo",                           false),
        ("cargo build *",              "cargo test",                      false),
        ("cargo build *",              "cargo buildx",                    false),
        ("make *",                     "make",                            true),
        ("git push --force *",         "git push --force",                true),
        ("git push --force *",         "git push --force origin main",    true),
        ("git push --force *",         "git push origin main --force",    false),
        // `*` before the end: exactly one word.
        ("git * --help",               "git push --help",                 true),
        ("git * --help",               "git --help",                      false),
        ("git * --help",               "git push x --help",               false),
        ("git * --help *",             "git push --help x y",             true),
        ("git * * log",                "git -C dir log",                  true),
        ("git * * log",                "git -C log",                      false),
        // `*` inside a word: any characters (also none) within that one word.
        ("cargo test --features=*",    "cargo test --features=a,b",       true),
        ("cargo test --features=*",    "cargo test --features=",          true),
        ("cargo test --features=*",    "cargo test --feature=a",          false),
        ("cargo test --features=*",    "cargo test --features=a b",       false),
        ("rm -rf /*",                  "rm -rf /home",                    true),
        ("rm -rf /*",                  "rm -rf /",                        true),
        ("rm -rf /*",                  "rm -rf home",                     false),
        ("ls a*b*c",                   "ls abc",                          true),
        ("ls a*b*c",                   "ls aXXbYYc",                      true),
        ("ls a*b*c",                   "ls acb",                          false),
        ("ls a*b*c",                   "ls ab",                           false),
        ("ls a*a",                     "ls a",                            false),
        ("ls a*a",                     "ls aa",                           true),
        ("ls *.rs",                    "ls main.rs",                      true),
        ("ls *.rs",                    "ls main.rsx",                     false),
        ("echo é*ü",                   "echo éaü",                        true),
        ("echo é*ü",                   "echo éü",                         true),
        // Escapes: `\*` is a literal star, `\\` a literal backslash.
        ("echo \\*",                   "echo *",                          true),
        ("echo \\*",                   "echo x",                          false),
        ("echo a\\\\b",                "echo a\\b",                       true),
        ("find . -name \\*.rs",        "find . -name *.rs",               true),
        ("find . -name \\*.rs",        "find . -name main.rs",            false),
        // The command word is exact: a path is another program.
        ("git status *",               "./git status",                    false),
        ("git status *",               "/usr/bin/git status",             false),
        ("./build.sh *",               "./build.sh",                      true),
        ("./build.sh *",               "build.sh",                        false),
        // Empty argv never matches.
        ("ls *",                       "",                                false),
    ];
    for (pattern, argv, expect) in cases {
        let p = Pattern::parse(pattern).unwrap_or_else(|e| panic!("{pattern}: {e}"));
        assert_eq!(p.matches(&words(argv)), *expect, "`{pattern}` vs `{argv}`");
    }
}

#[test]
fn restricting_match_accepts_command_paths() {
    #[rustfmt::skip]
    let cases: &[(&str, &str, bool)] = &[
        ("rm -rf /",     "/bin/rm -rf /",      true),
        ("rm -rf /",     "./rm -rf /",         true),
        ("rm -rf /",     "/bin/xrm -rf /",     false),
        ("rm -rf /",     "rm/ -rf /",          false),
        ("./x.sh",       "/a/x.sh",            false),
        ("git push *",   "/usr/bin/git push",  true),
    ];
    for (pattern, argv, expect) in cases {
        let p = Pattern::parse(pattern).expect(pattern);
        assert_eq!(
            p.matches_any_command_path(&words(argv)),
            *expect,
            "`{pattern}` vs `{argv}`"
        );
    }
}

const MAP: &str = "---
revision: 7
---
## Tier 0 — read
- `ls *`
- `git status *`
- `git push --dry-run *`

## Tier 1 — sandbox
- `cargo build *` — timeout=300s, write=~/.cargo/registry
- `git *`

## Tier 2 — ask
- `git push *`
- `cargo install *`

## Tier 3 — deny
- `git push --force *`
- `rm -rf /`
";

#[test]
fn classify_table() {
    let map = parse(MAP).unwrap_or_else(|d| panic!("{d:?}"));
    #[rustfmt::skip]
    let cases: &[(&str, Option<(Tier, usize)>)] = &[
        // argv                            strictest tier, line of the rule
        ("ls -la",                         Some((Tier::Read, 5))),
        ("git status --short",             Some((Tier::Sandbox, 11))),   // `git *` (tier 1) is stricter than tier 0
        ("cargo build --release",          Some((Tier::Sandbox, 10))),
        ("git log",                        Some((Tier::Sandbox, 11))),
        ("git push origin main",           Some((Tier::Ask, 14))),
        ("git push --dry-run origin",      Some((Tier::Ask, 14))),      // ask beats read
        ("git push --force origin main",   Some((Tier::Deny, 18))),     // deny beats ask and sandbox
        ("/usr/bin/git push --force",      Some((Tier::Deny, 18))),     // restricting tiers see through paths
        ("/usr/bin/git push origin",       Some((Tier::Ask, 14))),
        ("/bin/rm -rf /",                  Some((Tier::Deny, 19))),
        ("./ls -la",                       None),                        // not the `ls` of tier 0
        ("/usr/bin/cargo build",           None),
        ("rm -rf /tmp/x",                  None),
        ("cargo install ripgrep",          Some((Tier::Ask, 15))),
        ("",                               None),
    ];
    for (argv, expect) in cases {
        let got = map.classify(&words(argv)).map(|(t, e)| {
            assert_eq!(t, e.tier);
            (t, e.line)
        });
        assert_eq!(got, *expect, "{argv}");
    }
}

#[test]
fn rules_name_file_line_and_pattern() {
    let map = parse(MAP).expect("parses");
    let (_, e) = map.classify(&["git", "push", "--force"]).expect("denied");
    assert_eq!(e.rule(), "CLAUDE_CMDS.md:18 `git push --force *`");
    let (_, e) = map.classify(&["cargo", "build"]).expect("sandboxed");
    assert_eq!(e.options.timeout.map(|d| d.as_secs()), Some(300));
    assert_eq!(e.options.extra_writable, ["~/.cargo/registry"]);
    assert!(!e.options.network && !e.options.edit_tracked);
}
