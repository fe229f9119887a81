//! Secret paths: where a Read/Glob/Grep/LS is not a harmless read, so it goes to the daemon instead
//! of the fast path. Paths are judged lexically (after `~`, `.` and `..` are resolved against the
//! cwd) and again after symlinks are resolved, so `ln -s ~/.ssh/id_ed25519 notes.txt` does not turn a
//! key into a note.

use std::path::{Component, Path, PathBuf};

use cmdgate_policy::shell::read::{SecretPaths, DEFAULT_SECRET_PATTERNS, MAX_LISTING};

/// Directories (relative to `$HOME`) that hold credentials or cmdgate's own authority.
const HOME_SECRET_DIRS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".password-store",
    ".config/gcloud",
    ".config/gh",
    ".config/cmdgate",
    ".local/share/cmdgate",
    ".local/state/cmdgate",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".claude/.credentials.json",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".git-credentials",
    ".vault-token",
];

/// Absolute paths that are secret on any machine.
const SYSTEM_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/cmdgate",
    "/var/lib/cmdgate",
    "/run/cmdgate",
    "/root",
];

/// Path components that make anything under them secret, wherever they are.
const SECRET_COMPONENTS: &[&str] = &[".ssh", ".gnupg", ".aws", ".password-store"];

/// Is `name` (a file name) a credential by its name alone?
fn secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let env_file = lower == ".env"
        || (lower.starts_with(".env.")
            && !matches!(&lower[5..], "example" | "sample" | "template" | "dist"));
    env_file
        || lower.starts_with("id_rsa")
        || lower.starts_with("id_ed25519")
        || lower.starts_with("id_ecdsa")
        || lower.starts_with("id_dsa")
        || [".pem", ".key", ".p12", ".pfx", ".kdbx", ".keystore", ".jks"]
            .iter()
            .any(|ext| lower.ends_with(ext))
        || matches!(
            lower.as_str(),
            ".htpasswd" | ".pgpass" | ".netrc" | "credentials"
        )
        || (lower == "environ" || lower == "mem") // /proc/<pid>/environ, /proc/<pid>/mem
}

/// Names a wildcard is tried against: if a glob part can match one, the glob may reach a secret.
const SAMPLE_SECRET_NAMES: &[&str] = &[
    ".env",
    ".env.local",
    ".ssh",
    ".aws",
    ".gnupg",
    ".password-store",
    ".netrc",
    ".npmrc",
    ".pgpass",
    ".pypirc",
    ".git-credentials",
    ".vault-token",
    "id_rsa",
    "id_ed25519",
    "id_ecdsa",
    "server.pem",
    "server.key",
    "cert.p12",
    "cert.pfx",
    "db.kdbx",
    "credentials",
    "environ",
    "mem",
];

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
                return vec!["*".to_string()];
            }
        }
    }
    out
}

/// Over-approximating glob match of one path part: `*` any run, `?` and `[...]` any one character,
/// `{a,b}` either. Over-approximation only routes more calls to the daemon.
fn glob_may_match(glob: &str, name: &str) -> bool {
    expand_braces(glob).iter().any(|g| glob_match_one(g, name))
}

fn glob_match_one(glob: &str, name: &str) -> bool {
    let mut tokens: Vec<Option<char>> = Vec::new(); // None = any run, Some('\0') = any one char
    let mut chars = glob.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' => tokens.push(None),
            '?' => tokens.push(Some('\0')),
            '[' => {
                for c in chars.by_ref() {
                    if c == ']' {
                        break;
                    }
                }
                tokens.push(Some('\0'));
            }
            c => tokens.push(Some(c.to_ascii_lowercase())),
        }
    }
    let name: Vec<char> = name.chars().collect();
    // dp[i][j]: tokens[..i] match name[..j]
    let mut dp = vec![vec![false; name.len() + 1]; tokens.len() + 1];
    dp[0][0] = true;
    for i in 1..=tokens.len() {
        for j in 0..=name.len() {
            dp[i][j] = match tokens[i - 1] {
                None => dp[i - 1][j] || (j > 0 && dp[i][j - 1]),
                Some('\0') => j > 0 && dp[i - 1][j - 1],
                Some(c) => j > 0 && dp[i - 1][j - 1] && name[j - 1] == c,
            };
        }
    }
    dp[tokens.len()][name.len()]
}

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

/// The policy's secret list (shared with the daemon) for `home`, with `$CMDGATE_SECRET_PATHS`.
pub fn policy_secrets(home: &str, extra: &[PathBuf]) -> SecretPaths {
    let mut patterns: Vec<String> = DEFAULT_SECRET_PATTERNS
        .iter()
        .map(|p| (*p).to_owned())
        .collect();
    patterns.extend(extra.iter().map(|p| p.display().to_string()));
    SecretPaths::new(&patterns, home)
}

/// The secret-path judge for one hook call.
pub struct Secrets<'a> {
    pub home: Option<&'a Path>,
    pub extra: &'a [PathBuf],
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
    fn roots(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = SYSTEM_SECRETS.iter().map(PathBuf::from).collect();
        if let Some(h) = self.home {
            v.extend(HOME_SECRET_DIRS.iter().map(|d| h.join(d)));
        }
        v.extend(self.extra.iter().cloned());
        v
    }

    fn lexically_secret(&self, p: &Path) -> bool {
        if self.roots().iter().any(|r| p.starts_with(r)) {
            return true;
        }
        p.components().any(|c| match c {
            Component::Normal(n) => {
                let n = n.to_string_lossy();
                SECRET_COMPONENTS.contains(&n.as_ref()) || secret_name(&n)
            }
            _ => false,
        })
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
    /// a secret root (`/`, `$HOME`), or holds a secret-named entry at its top level (`.env`).
    pub fn tree_has_secret(&self, dir: &Path) -> bool {
        if self.is_secret(dir) {
            return true;
        }
        let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        if self
            .roots()
            .iter()
            .any(|r| r.starts_with(dir) || r.starts_with(&real))
        {
            return true;
        }
        match std::fs::read_dir(&real) {
            Ok(entries) => entries.flatten().any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                SECRET_COMPONENTS.contains(&name.as_ref()) || secret_name(&name)
            }),
            Err(_) => false,
        }
    }

    /// Does a glob pattern name something secret (`**/.env`, `~/.ssh/*`, `*.pem`)?
    pub fn pattern_names_secret(&self, pattern: &str, cwd: &Path) -> bool {
        if pattern.split('/').any(|part| {
            SECRET_COMPONENTS.contains(&part)
                || secret_name(part)
                || secret_name(part.trim_start_matches('*'))
        }) {
            return true;
        }
        // A wildcard part that could match a secret name (`.e*`, `id_*`, `*.{pem,txt}`).
        if pattern.split('/').any(|part| {
            // A bare `*`/`**` matches every name, secret or not: it walks, the other parts select.
            part.contains(['*', '?', '[', '{'])
                && part.chars().any(|c| c != '*')
                && SAMPLE_SECRET_NAMES
                    .iter()
                    .any(|name| glob_may_match(part, name))
        }) {
            return true;
        }
        // The directory the pattern starts from: a `**` below an ancestor of a secret root walks
        // into it.
        let literal: String = pattern
            .chars()
            .take_while(|c| !matches!(c, '*' | '?' | '[' | '{'))
            .collect();
        let base_text = match literal.rfind('/') {
            Some(i) => &literal[..=i],
            None => ".",
        };
        let base = normalize(base_text, cwd, self.home);
        self.is_secret(&base)
            || (pattern.contains("**") && self.roots().iter().any(|r| r.starts_with(&base)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge() -> Secrets<'static> {
        Secrets {
            home: Some(Path::new("/home/u")),
            extra: &[],
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
            "/home/u/.config/cmdgate/trusted-keys",
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
        fn glob_matcher_never_panics_and_star_matches_all(glob in "[a-z*?\\[\\]{},.]{0,12}", name in "[a-z.]{0,12}") {
            let _ = glob_may_match(&glob, &name);
            proptest::prop_assert!(glob_may_match("*", &name));
        }
    }
}
