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

/// Is `path` equal to `dir` or inside it? Both normalised.
pub fn is_within(path: &str, dir: &str) -> bool {
    dir == "/"
        || path == dir
        || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Base<'static> = Base {
        home: "/home/agent",
        cwd: "/home/agent/proj",
    };

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
