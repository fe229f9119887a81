//! Secret paths for the hook's own tools: where a Read/Glob/Grep/LS is not a harmless read, so it
//! goes to the daemon instead of the fast path. The list is the policy's (`cmdgate_policy::secrets`,
//! the same table the daemon and the Bash path use); this module applies it to the file system:
//! paths are judged lexically (after `~`, `.` and `..` are resolved against the cwd) and again
//! after symlinks are resolved, so `ln -s ~/.ssh/id_ed25519 notes.txt` does not turn a key into a
//! note.

use std::path::{Component, Path, PathBuf};

use cmdgate_policy::secrets::SecretPaths;
use cmdgate_policy::shell::read::MAX_LISTING;

/// One level of `dir` for the policy's recursive-read rule 3: entry names, or `None` when it
/// cannot be read (or an entry cannot) or has more than `MAX_LISTING` entries. Links are not
/// followed into: names only.
pub fn list_dir(dir: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).ok()? {
        if out.len() == MAX_LISTING {
            return None;
        }
        out.push(entry.ok()?.file_name().to_string_lossy().into_owned());
    }
    Some(out)
}

/// The policy's secret list (shared with the daemon) for `home`, with `$CMDGATE_SECRET_PATHS`;
/// anchored at `also` as well (system mode's home in the password database, when `$HOME` differs).
pub fn policy_secrets(home: &str, extra: &[PathBuf], also: Option<&Path>) -> SecretPaths {
    let extra: Vec<String> = extra.iter().map(|p| p.display().to_string()).collect();
    match also.and_then(Path::to_str) {
        Some(other) => SecretPaths::builtin_homes(&[home, other], &extra),
        None => SecretPaths::builtin(home, &extra),
    }
}

/// The secret-path judge for one hook call.
pub struct Secrets<'a> {
    pub home: Option<&'a Path>,
    /// The policy's table compiled for `home`, with the operator's extra paths.
    pub paths: &'a SecretPaths,
}

/// `path` made absolute against `cwd`, with `~` expanded and `.`/`..` resolved without touching the
/// file system.
pub fn normalize(path: &str, cwd: &Path, home: Option<&Path>) -> PathBuf {
    let joined = if path == "~" || path.starts_with("~/") {
        match home {
            Some(h) => h.join(path.trim_start_matches('~').trim_start_matches('/')),
            None => cwd.join(path),
        }
    } else {
        cwd.join(path)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

impl Secrets<'_> {
    fn lexically_secret(&self, p: &Path) -> bool {
        self.paths.matches(&p.to_string_lossy(), &[], false)
    }

    /// Is the file or directory at `p` (absolute, normalized) secret, or does it lead to one through
    /// symlinks?
    pub fn is_secret(&self, p: &Path) -> bool {
        if self.lexically_secret(p) {
            return true;
        }
        match std::fs::canonicalize(p) {
            Ok(real) => real != p && self.lexically_secret(&real),
            // Does not exist (yet): nothing to resolve.
            Err(_) => false,
        }
    }

    /// Would searching the tree at `dir` reach a secret? True when `dir` is secret, is an ancestor of
    /// a secret root (`/`, `$HOME`), or holds a secret-named entry at its top level (`.env`, `.ssh`).
    pub fn tree_has_secret(&self, dir: &Path) -> bool {
        if self.is_secret(dir) {
            return true;
        }
        let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        if self
            .paths
            .tree_holds_anchored(&dir.to_string_lossy(), false)
            || self
                .paths
                .tree_holds_anchored(&real.to_string_lossy(), false)
        {
            return true;
        }
        match std::fs::read_dir(&real) {
            Ok(entries) => entries.flatten().any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                self.paths.secret_name(&name)
                    || self.paths.tails_after(&name).any(|rest| rest.is_empty())
            }),
            Err(_) => false,
        }
    }

    /// Does a glob pattern name something secret (`**/.env`, `~/.ssh/*`, `*.pem`), searched from
    /// `cwd`? Each `{a,b}` alternative is judged on its own.
    pub fn pattern_names_secret(&self, pattern: &str, cwd: &Path) -> bool {
        expand_braces(pattern)
            .iter()
            .any(|alt| self.alternative_names_secret(alt, cwd))
    }

    fn alternative_names_secret(&self, pattern: &str, cwd: &Path) -> bool {
        let widened = widen(pattern);
        // A part that could be a secret's name (`.e*`, `id_*`, `*.pem`), or a literal part that
        // is a secret directory wherever it is (`.ssh`, `.aws`).
        if widened.split('/').any(|part| {
            self.paths.name_may_match(part)
                || (!part.contains(['*', '?'])
                    && self.paths.tails_after(part).any(|rest| rest.is_empty()))
        }) {
            return true;
        }
        // The directory the pattern starts from may be secret itself.
        let literal: String = pattern
            .chars()
            .take_while(|c| !matches!(c, '*' | '?' | '[' | '{'))
            .collect();
        let base_text = match literal.rfind('/') {
            Some(i) => &literal[..=i],
            None => ".",
        };
        if self.is_secret(&normalize(base_text, cwd, self.home)) {
            return true;
        }
        // The places the pattern names, up to its first `**` (which walks everything below): at,
        // inside or above a secret root (`~/.ss*/id`, `/etc/sh*`; `~/**` walks into `~/.ssh`).
        let absolute = normalize(&widened, cwd, self.home).display().to_string();
        let upto = match absolute.find("/**") {
            Some(0) => "/",
            Some(i) => &absolute[..i],
            None => absolute.as_str(),
        };
        self.paths.tree_holds_anchored(upto, true)
    }
}

/// `{a,b}` alternatives expanded (at most 64 results; beyond, or for nested groups, a `*` stands in,
/// which over-approximates).
fn expand_braces(glob: &str) -> Vec<String> {
    let Some(open) = glob.find('{') else {
        return vec![glob.to_string()];
    };
    let Some(close) = glob[open..].find('}').map(|i| open + i) else {
        return vec![glob.replace('{', "*")];
    };
    let inner = &glob[open + 1..close];
    if inner.contains('{') {
        return vec![format!("{}*{}", &glob[..open], &glob[close + 1..])];
    }
    let mut out = Vec::new();
    for alt in inner.split(',') {
        for rest in expand_braces(&glob[close + 1..]) {
            out.push(format!("{}{alt}{rest}", &glob[..open]));
            if out.len() > 64 {
                return vec![widen(glob)];
            }
        }
    }
    out
}

/// A glob with `[…]` as `?` and `{…}` as `*` (over-approximation: only routes more calls).
fn widen(glob: &str) -> String {
    let mut out = String::with_capacity(glob.len());
    let mut chars = glob.chars();
    while let Some(c) = chars.next() {
        match c {
            '[' => {
                for d in chars.by_ref() {
                    if d == ']' {
                        break;
                    }
                }
                out.push('?');
            }
            '{' => {
                for d in chars.by_ref() {
                    if d == '}' {
                        break;
                    }
                }
                out.push('*');
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge() -> Secrets<'static> {
        let paths: &'static SecretPaths = Box::leak(Box::new(policy_secrets("/home/u", &[], None)));
        Secrets {
            home: Some(Path::new("/home/u")),
            paths,
        }
    }

    #[test]
    fn normalizes() {
        let cwd = Path::new("/w/p");
        assert_eq!(normalize("a/../b", cwd, None), PathBuf::from("/w/p/b"));
        assert_eq!(
            normalize("../../../../etc/shadow", cwd, None),
            PathBuf::from("/etc/shadow")
        );
        assert_eq!(
            normalize("~/.ssh/id_rsa", cwd, Some(Path::new("/home/u"))),
            PathBuf::from("/home/u/.ssh/id_rsa")
        );
    }

    #[test]
    fn secret_table() {
        let s = judge();
        for p in [
            "/home/u/.ssh/id_ed25519",
            "/home/u/.aws/credentials",
            "/w/.env",
            "/w/.env.production",
            "/w/certs/server.key",
            "/etc/shadow",
            "/proc/self/environ",
            "/home/u/.claude/.credentials.json",
            "/other/.ssh/config",
        ] {
            assert!(s.is_secret(Path::new(p)), "{p}");
        }
        for p in [
            "/w/src/main.rs",
            "/w/.env.example",
            "/etc/hostname",
            "/home/u/notes.txt",
            "/w/keyboard.rs",
        ] {
            assert!(!s.is_secret(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn trees_that_contain_secrets() {
        let s = judge();
        assert!(s.tree_has_secret(Path::new("/")));
        assert!(s.tree_has_secret(Path::new("/home/u")));
        assert!(s.tree_has_secret(Path::new("/home")));
    }

    #[test]
    fn glob_patterns() {
        let s = judge();
        let cwd = Path::new("/w");
        for p in [
            "**/.env",
            "/home/u/.ssh/*",
            "**/*.pem",
            "**/.e*",
            "**/id_*",
            "~/.aws/**",
            "**/*.{pem,txt}",
            "**/.[e]nv",
        ] {
            assert!(s.pattern_names_secret(p, cwd), "{p}");
        }
        for p in ["**/*.rs", "src/**/*.ts", "*.md", "**/*.{rs,toml}"] {
            assert!(!s.pattern_names_secret(p, cwd), "{p}");
        }
    }

    proptest::proptest! {
        #[test]
        fn normalize_is_absolute_idempotent_and_dot_free(path in "[a-z./~]{0,30}") {
            let cwd = Path::new("/w/p");
            let once = normalize(&path, cwd, Some(Path::new("/home/u")));
            proptest::prop_assert!(once.is_absolute());
            proptest::prop_assert!(!once.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)));
            let text = once.display().to_string();
            proptest::prop_assert_eq!(normalize(&text, cwd, Some(Path::new("/home/u"))), once);
        }

        #[test]
        fn brace_expansion_never_panics_and_keeps_plain_globs(glob in "[a-z*?\\[\\]{},.]{0,12}") {
            let alts = expand_braces(&glob);
            proptest::prop_assert!(!alts.is_empty());
            if !glob.contains('{') {
                proptest::prop_assert_eq!(alts, vec![glob.clone()]);
            }
        }
    }
}
