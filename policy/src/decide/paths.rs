//! Lexical path resolution for policy checks: `~`, `$HOME`, relative paths and `..`, without IO.
//!
//! The policy cannot follow symlinks (no IO), so these answers are about what a path *says*; the
//! sandbox's effects diff is what catches a symlink planted to point elsewhere.

use crate::shell::Word;

/// Where relative paths and `~` resolve, as values.
#[derive(Debug, Clone, Copy)]
pub struct Base<'a> {
    pub home: &'a str,
    pub cwd: &'a str,
}

/// Resolves a word to an absolute, normalised path when its value is known (or is `~`/`$HOME`
/// based), else `None`.
pub fn resolve(word: &Word, base: Base<'_>) -> Option<String> {
    let text = match word {
        Word::Static(s) => s.as_str(),
        Word::Dynamic(raw) => {
            let rest = raw
                .strip_prefix("${HOME}")
                .or_else(|| raw.strip_prefix("$HOME"))
                .or_else(|| raw.strip_prefix("\"$HOME\""))
                .or_else(|| raw.strip_prefix("\"${HOME}\""))?;
            if rest.contains(['$', '`', '*', '?', '[', '{']) {
                return None;
            }
            return Some(normalise(&format!(
                "{}/{}",
                base.home,
                rest.trim_matches('"')
            )));
        }
    };
    Some(resolve_str(text, base))
}

/// [`resolve`] for a string already known to be static.
pub fn resolve_str(text: &str, base: Base<'_>) -> String {
    let joined = if text == "~" {
        base.home.to_owned()
    } else if let Some(rest) = text.strip_prefix("~/") {
        format!("{}/{rest}", base.home)
    } else if text.starts_with('/') {
        text.to_owned()
    } else {
        format!("{}/{text}", base.cwd)
    };
    normalise(&joined)
}

/// Collapses `//`, `.` and `..` lexically; the result starts with `/` and has no trailing `/`
/// (except the root itself).
pub fn normalise(path: &str) -> String {
    // Most paths are already normal (resolved by the kernel, or built from a normal cwd and a
    // plain name): one pass over the bytes instead of a split and a rebuild.
    if is_normal(path) {
        return path.to_owned();
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        "/".to_owned()
    } else {
        let mut out = String::with_capacity(path.len());
        for p in parts {
            out.push('/');
            out.push_str(p);
        }
        out
    }
}

/// Is `path` what [`normalise`] makes of it: absolute, no empty, `.` or `..` component, no
/// trailing `/` (except the root)?
fn is_normal(path: &str) -> bool {
    let b = path.as_bytes();
    if b.first() != Some(&b'/') {
        return false;
    }
    if b.len() == 1 {
        return true;
    }
    // Each component after a `/`, the last one too: its length so far, and whether it is only
    // dots so far (`.` and `..` are the components of at most two dots and nothing else).
    let bad = |len: usize, dots: bool| len == 0 || (dots && len <= 2);
    let (mut len, mut dots) = (0usize, true);
    for &c in &b[1..] {
        if c == b'/' {
            if bad(len, dots) {
                return false;
            }
            (len, dots) = (0, true);
        } else {
            len += 1;
            dots &= c == b'.';
        }
    }
    !bad(len, dots)
}

/// Is `path` equal to `dir` or inside it? Both normalised.
pub fn is_within(path: &str, dir: &str) -> bool {
    // The byte after `dir` first: it rejects most paths without comparing the long prefix they
    // share with `dir` (musl's `memcmp` goes byte by byte).
    dir == "/"
        || path == dir
        || (path.as_bytes().get(dir.len()) == Some(&b'/') && path.starts_with(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The one-pass check is the definition: absolute, and no component after the first `/`
        /// is empty, `.` or `..` (so `/` alone is normal, `/a/` is not).
        #[test]
        fn is_normal_is_its_definition(p in "[a./]{0,10}") {
            let want = p.starts_with('/')
                && (p == "/" || p[1..].split('/').all(|c| !matches!(c, "" | "." | "..")));
            prop_assert_eq!(is_normal(&p), want, "{:?}", p);
        }
    }

    const BASE: Base<'static> = Base {
        home: "/home/agent",
        cwd: "/home/agent/proj",
    };

    /// The fast path answers as the split does, for paths made of the pieces that matter.
    #[test]
    fn normalise_of_a_normal_path_is_the_path() {
        use proptest::prelude::*;
        let piece = prop::sample::select(vec!["", ".", "..", "a", "b.c", "...", ".x", "x."]);
        let path = (any::<bool>(), prop::collection::vec(piece, 0..6))
            .prop_map(|(abs, v)| format!("{}{}", if abs { "/" } else { "" }, v.join("/")));
        proptest!(ProptestConfig::with_cases(4000), |(p in path)| {
            let slow = {
                let parts: Vec<&str> = p.split('/').fold(Vec::new(), |mut v, c| {
                    match c {
                        "" | "." => {}
                        ".." => {
                            v.pop();
                        }
                        c => v.push(c),
                    }
                    v
                });
                format!("/{}", parts.join("/"))
            };
            prop_assert_eq!(normalise(&p), slow.clone());
            prop_assert_eq!(is_normal(&p), p == slow);
        });
    }

    #[test]
    fn resolution_table() {
        for (input, want) in [
            ("~", "/home/agent"),
            ("~/", "/home/agent"),
            ("~/.ssh/id_rsa", "/home/agent/.ssh/id_rsa"),
            ("src/../..", "/home/agent"),
            ("../../..", "/"),
            ("/etc//passwd/", "/etc/passwd"),
            (".", "/home/agent/proj"),
            ("/../..", "/"),
        ] {
            assert_eq!(
                resolve(&Word::Static(input.into()), BASE).as_deref(),
                Some(want),
                "{input}"
            );
        }
        assert_eq!(
            resolve(&Word::Dynamic("$HOME/.aws".into()), BASE).as_deref(),
            Some("/home/agent/.aws")
        );
        assert_eq!(
            resolve(&Word::Dynamic("${HOME}".into()), BASE).as_deref(),
            Some("/home/agent")
        );
        assert_eq!(resolve(&Word::Dynamic("$X/y".into()), BASE), None);
        assert_eq!(resolve(&Word::Dynamic("$HOME/$X".into()), BASE), None);
    }

    #[test]
    fn within() {
        assert!(is_within("/home/agent/x", "/home/agent"));
        assert!(is_within("/home/agent", "/home/agent"));
        assert!(!is_within("/home/agentx", "/home/agent"));
        assert!(is_within("/anything", "/"));
    }
}
