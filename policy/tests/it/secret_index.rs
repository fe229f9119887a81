//! The secret-path matcher's index against the plain walk it replaced: the compiled list
//! (`SecretPaths`) looks an argument's components up by the first component of each anchored
//! pattern and checks names without a lower-cased copy; [`reference`] is the matcher before that
//! (session 6: every anchored pattern and every tail tried against every argument). Both must
//! answer every question the same, for the built-in table with generated homes, extra patterns
//! and second homes, on generated paths, cwds and globs.

use cmdgate_policy::secrets::{SecretPaths, SECRET_PATTERNS};
use proptest::prelude::*;

/// The matcher as it was before the index (policy/src/shell/read/secrets.rs at ceb52a5), with
/// its text in `String`s: the reference the indexed one must equal.
mod reference {
    use cmdgate_policy::secrets::NOT_SECRET_NAMES;

    pub struct Linear {
        anchored: Vec<Vec<String>>,
        tails: Vec<Vec<String>>,
        rooted: Vec<bool>,
        names: Vec<String>,
        exact: Vec<String>,
        suffix: Vec<String>,
        prefix: Vec<String>,
        general: Vec<String>,
    }

    fn comps_of(p: &str) -> Vec<String> {
        p.split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(str::to_owned)
            .collect()
    }

    fn components(p: &str) -> Vec<&str> {
        p.split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect()
    }

    fn normalize(comps: Vec<&str>) -> Vec<&str> {
        let mut out = Vec::new();
        for c in comps {
            if c == ".." {
                out.pop();
            } else {
                out.push(c);
            }
        }
        out
    }

    fn wild(s: &str) -> bool {
        s.contains(['*', '?'])
    }

    impl Linear {
        pub fn new(patterns: &[String], home: &str) -> Linear {
            let mut out = Linear {
                anchored: Vec::new(),
                tails: Vec::new(),
                rooted: Vec::new(),
                names: Vec::new(),
                exact: Vec::new(),
                suffix: Vec::new(),
                prefix: Vec::new(),
                general: Vec::new(),
            };
            let home_comps = comps_of(home);
            for p in patterns {
                if let Some(rest) = p.strip_prefix("~/") {
                    out.anchor_at_home(&home_comps, rest);
                } else if p.starts_with('/') {
                    let full = comps_of(p);
                    out.tails.push(full.clone());
                    out.rooted.push(true);
                    out.anchored.push(full);
                } else if !p.is_empty() {
                    let n = p.to_ascii_lowercase();
                    if !wild(&n) {
                        out.exact.push(n.clone());
                    } else if n.strip_prefix('*').is_some_and(|r| !wild(r)) {
                        out.suffix.push(n[1..].to_owned());
                    } else if n.strip_suffix('*').is_some_and(|r| !wild(r)) {
                        out.prefix.push(n[..n.len() - 1].to_owned());
                    } else {
                        out.general.push(n.clone());
                    }
                    out.names.push(n);
                }
            }
            out
        }

        pub fn add_home(&mut self, patterns: &[String], home: &str) {
            let home_comps = comps_of(home);
            for p in patterns {
                if let Some(rest) = p.strip_prefix("~/") {
                    self.anchor_at_home(&home_comps, rest);
                }
            }
        }

        /// A `~/` pattern (`rest`, after the `~/`) anchored at a home.
        fn anchor_at_home(&mut self, home_comps: &[String], rest: &str) {
            let tail = comps_of(rest);
            let mut full = home_comps.to_vec();
            full.extend(tail.iter().cloned());
            self.anchored.push(full);
            self.tails.push(tail);
            self.rooted.push(false);
        }

        fn literal(&self, lower: &str) -> bool {
            (self.exact.iter().any(|e| e == lower)
                || self.suffix.iter().any(|s| lower.ends_with(s.as_str()))
                || self.prefix.iter().any(|p| lower.starts_with(p.as_str()))
                || self
                    .general
                    .iter()
                    .any(|g| literal_matches(lower.as_bytes(), g.as_bytes())))
                && !NOT_SECRET_NAMES.iter().any(|(n, _)| *n == lower)
        }

        pub fn matches(&self, path: &str, cwds: &[String], glob: bool) -> bool {
            let mm = |a: &str, b: &str| may_match(a, b, glob);
            let prefix_matches = |path: &[&str], pattern: &[String]| {
                path.len() >= pattern.len() && pattern.iter().zip(path).all(|(p, c)| mm(c, p))
            };
            let contains_run = |path: &[&str], run: &[String]| {
                !run.is_empty()
                    && path
                        .windows(run.len())
                        .any(|w| w.iter().zip(run).all(|(c, p)| mm(c, p)))
            };
            let named = |comps: &[&str]| comps.iter().any(|c| self.name_matches(c, glob));
            let own = components(path);
            let unknown_base = !path.starts_with('/') && (cwds.is_empty() || own.contains(&".."));
            if named(&own)
                || self
                    .tails
                    .iter()
                    .zip(&self.rooted)
                    .any(|(t, rooted)| (!rooted || unknown_base) && contains_run(&own, t))
            {
                return true;
            }
            let check = |abs: Vec<&str>| {
                let abs = normalize(abs);
                self.anchored.iter().any(|a| prefix_matches(&abs, a)) || named(&abs)
            };
            if path.starts_with('/') {
                return check(own);
            }
            cwds.iter().any(|cwd| {
                let mut abs = components(cwd);
                abs.extend(own.iter().copied());
                check(abs)
            })
        }

        pub fn tree_holds_anchored(&self, root: &str, glob: bool) -> bool {
            let comps = normalize(components(root));
            self.anchored
                .iter()
                .any(|a| a.iter().zip(&comps).all(|(p, c)| may_match(c, p, glob)))
        }

        pub fn secret_name(&self, name: &str) -> bool {
            self.name_matches(name, false)
        }

        pub fn name_may_match(&self, part: &str) -> bool {
            if part.chars().all(|c| c == '*') {
                return false;
            }
            let lower = part.to_ascii_lowercase();
            if !wild(&lower) {
                return self.literal(&lower);
            }
            let leading_wildcard = lower.starts_with(['*', '?']);
            self.names.iter().any(|n| {
                !(leading_wildcard && self.exact.contains(n))
                    && may_match_with(&lower, n, true, true)
            })
        }

        fn name_matches(&self, c: &str, glob: bool) -> bool {
            let lower = c.to_ascii_lowercase();
            if glob && wild(&lower) {
                return self.names.iter().any(|n| may_match(&lower, n, true));
            }
            self.literal(&lower)
        }

        pub fn tails_after(&self, name: &str) -> Vec<Vec<String>> {
            self.tails
                .iter()
                .zip(&self.rooted)
                .filter(|(_, rooted)| !**rooted)
                .filter_map(|(t, _)| {
                    let (first, rest) = t.split_first()?;
                    (may_match(name, first, false)
                        || may_match(
                            &name.to_ascii_lowercase(),
                            &first.to_ascii_lowercase(),
                            false,
                        ))
                    .then(|| rest.to_vec())
                })
                .collect()
        }
    }

    pub fn may_match(a: &str, b: &str, a_glob: bool) -> bool {
        may_match_with(a, b, a_glob, true)
    }

    fn may_match_with(a: &str, b: &str, a_glob: bool, dot_rule: bool) -> bool {
        let a = a.as_bytes();
        let b = b.as_bytes();
        let wild = |c: u8| c == b'*' || c == b'?';
        if let (Some(&x), Some(&y)) = (a.first(), b.first()) {
            if dot_rule && a_glob && wild(x) && y == b'.' {
                return false;
            }
        }
        let a_wild = a_glob && a.iter().any(|&c| wild(c));
        if !a_wild {
            return literal_matches(a, b);
        }
        let w = b.len() + 1;
        let mut dp = vec![false; (a.len() + 1) * w];
        for i in (0..=a.len()).rev() {
            for j in (0..=b.len()).rev() {
                let at = |i: usize, j: usize| dp[i * w + j];
                let r = if i == a.len() && j == b.len() {
                    true
                } else if a_glob && i < a.len() && a[i] == b'*' {
                    at(i + 1, j) || (j < b.len() && at(i, j + 1))
                } else if j < b.len() && b[j] == b'*' {
                    at(i, j + 1) || (i < a.len() && at(i + 1, j))
                } else if i < a.len() && j < b.len() {
                    (a[i] == b[j] || (a_glob && a[i] == b'?') || b[j] == b'?') && at(i + 1, j + 1)
                } else {
                    false
                };
                dp[i * w + j] = r;
            }
        }
        dp[0]
    }

    fn literal_matches(a: &[u8], b: &[u8]) -> bool {
        let (mut i, mut j) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while i < a.len() {
            if j < b.len() && (b[j] == b'?' || b[j] == a[i]) && b[j] != b'*' {
                i += 1;
                j += 1;
            } else if j < b.len() && b[j] == b'*' {
                star = Some((j, i));
                j += 1;
            } else if let Some((sj, si)) = star {
                j = sj + 1;
                i = si + 1;
                star = Some((sj, si + 1));
            } else {
                return false;
            }
        }
        b[j..].iter().all(|&c| c == b'*')
    }
}

/// Path components the table is made of (each component of each pattern, in its case and in
/// upper case), plus the pieces that make matching hard: `..`, `.`, globs, homes, templates.
fn component() -> impl Strategy<Value = String> {
    let mut pieces: Vec<String> = SECRET_PATTERNS
        .iter()
        .flat_map(|p| p.trim_start_matches("~/").split('/'))
        .filter(|c| !c.is_empty())
        .flat_map(|c| [c.to_owned(), c.to_ascii_uppercase(), c.replace('*', "x")])
        .collect();
    pieces.extend(
        [
            "..",
            ".",
            "~",
            "*",
            "?",
            "**",
            ".*",
            "*.rs",
            "a*",
            "?sh",
            ".e*",
            "home",
            "agent",
            "other",
            "proj",
            "src",
            "main.rs",
            ".env.example",
            ".ENV.Sample",
            "x",
            "é",
            "root",
            "proc",
            "1",
            "task",
            "etc",
        ]
        .map(str::to_owned),
    );
    prop_oneof![
        8 => prop::sample::select(pieces),
        1 => "[a-zA-Z.*?_-]{0,6}",
    ]
}

/// A path of generated components: absolute or relative, possibly with empty components.
fn path() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        prop::collection::vec(component(), 0..6),
        any::<bool>(),
    )
        .prop_map(|(abs, comps, trailing)| {
            let mut p = if abs { "/".to_owned() } else { String::new() };
            p.push_str(&comps.join("/"));
            if trailing {
                p.push('/');
            }
            p
        })
}

/// An absolute directory of generated components.
fn dir() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/home/agent".to_owned()),
        Just("/home/agent/proj".to_owned()),
        Just("/".to_owned()),
        prop::collection::vec(component(), 0..4).prop_map(|c| format!("/{}", c.join("/"))),
    ]
}

/// An extra pattern of generated shape (an operator's `secret_paths`).
fn extra() -> impl Strategy<Value = String> {
    prop_oneof![
        path(),
        path().prop_map(|p| format!("~/{p}")),
        path().prop_map(|p| p.to_ascii_uppercase()),
        Just("~/".to_owned()),
        Just("/".to_owned()),
        Just("~".to_owned()),
        Just(String::new()),
    ]
}

/// The built-in patterns, plus extra ones.
fn patterns() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(extra(), 0..4).prop_map(|extra| {
        let mut all: Vec<String> = SECRET_PATTERNS.iter().map(|p| (*p).to_owned()).collect();
        all.extend(extra);
        all
    })
}

fn tails(t: impl Iterator<Item = Vec<String>>) -> Vec<Vec<String>> {
    let mut v: Vec<Vec<String>> = t.collect();
    v.sort();
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_indexed_matcher_answers_as_the_linear_one(
        patterns in patterns(),
        home in dir(),
        second in prop::option::of(dir()),
        path in path(),
        cwds in prop::collection::vec(dir(), 0..3),
        glob in any::<bool>(),
    ) {
        let mut indexed = SecretPaths::new(&patterns, &home);
        let mut linear = reference::Linear::new(&patterns, &home);
        if let Some(second) = &second {
            indexed.add_home(&patterns, second);
            linear.add_home(&patterns, second);
        }
        prop_assert_eq!(
            indexed.matches(&path, &cwds, glob),
            linear.matches(&path, &cwds, glob),
            "matches({:?}, {:?}, {})", path, cwds, glob
        );
        prop_assert_eq!(
            indexed.tree_holds_anchored(&path, glob),
            linear.tree_holds_anchored(&path, glob),
            "tree_holds_anchored({:?}, {})", path, glob
        );
        let last = path.rsplit('/').next().unwrap_or_default();
        prop_assert_eq!(indexed.secret_name(last), linear.secret_name(last), "secret_name({:?})", last);
        prop_assert_eq!(
            indexed.name_may_match(last),
            linear.name_may_match(last),
            "name_may_match({:?})", last
        );
        prop_assert_eq!(
            tails(indexed.tails_after(last).map(|t| t.iter().map(|c| c.to_string()).collect())),
            tails(linear.tails_after(last).into_iter()),
            "tails_after({:?})", last
        );
    }

    /// The built-in table as the hook and the daemon compile it (`builtin`, `builtin_homes`:
    /// laid out at build time, then the homes and the operator's extra patterns added), against
    /// the reference on the same patterns, and against the same list compiled at run time
    /// (`SecretPaths::new`): every part equal.
    #[test]
    fn the_builtin_compile_answers_as_the_linear_one(
        home in dir(),
        second in prop::option::of(dir()),
        extra in prop::collection::vec(extra(), 0..3),
        paths in prop::collection::vec(path(), 1..8),
        cwds in prop::collection::vec(dir(), 0..2),
        glob in any::<bool>(),
    ) {
        let mut table: Vec<String> = SECRET_PATTERNS.iter().map(|p| (*p).to_owned()).collect();
        table.extend(extra.iter().cloned());
        let mut compiled = SecretPaths::new(&table, &home);
        let (indexed, linear) = match &second {
            Some(s) => {
                let mut l = reference::Linear::new(&table, &home);
                l.add_home(&table, s);
                compiled.add_home(&table, s);
                (SecretPaths::builtin_homes(&[&home, s], &extra), l)
            }
            None => (
                SecretPaths::builtin(&home, &extra),
                reference::Linear::new(&table, &home),
            ),
        };
        prop_assert_eq!(format!("{indexed:?}"), format!("{compiled:?}"));
        for p in &paths {
            prop_assert_eq!(indexed.matches(p, &cwds, glob), linear.matches(p, &cwds, glob), "matches({:?}, {:?}, {})", p, cwds, glob);
            prop_assert_eq!(indexed.tree_holds_anchored(p, glob), linear.tree_holds_anchored(p, glob), "tree({:?})", p);
            let last = p.rsplit('/').next().unwrap_or_default();
            prop_assert_eq!(indexed.secret_name(last), linear.secret_name(last), "secret_name({:?})", last);
            prop_assert_eq!(indexed.name_may_match(last), linear.name_may_match(last), "name_may_match({:?})", last);
            prop_assert_eq!(
                tails(indexed.tails_after(last).map(|t| t.iter().map(|c| c.to_string()).collect())),
                tails(linear.tails_after(last).into_iter()),
                "tails_after({:?})", last
            );
        }
    }
}

/// Every pattern of the table, filled in and anchored at a generated home, is found by both (a
/// generator that never hit a secret would make the properties above vacuous).
#[test]
fn the_properties_see_secrets() {
    let table: Vec<String> = SECRET_PATTERNS.iter().map(|p| (*p).to_owned()).collect();
    let indexed = SecretPaths::builtin::<&str>("/home/agent", &[]);
    let linear = reference::Linear::new(&table, "/home/agent");
    for p in SECRET_PATTERNS {
        let filled = p.replace(['*', '?'], "x");
        let path = match filled.strip_prefix("~/") {
            Some(rest) => format!("/home/agent/{rest}"),
            None if filled.starts_with('/') => filled,
            None => format!("/home/agent/proj/{filled}"),
        };
        assert!(indexed.matches(&path, &[], false), "{path}");
        assert!(linear.matches(&path, &[], false), "{path}");
    }
}
