//! Secret paths: which arguments name a file whose contents must not reach the model.
//!
//! A pattern starting with `~/` or `/` is anchored: it covers that path and everything under it,
//! each component may use `*` and `?`. Any other pattern is a file-name pattern matched against every
//! component of a path (`.env`, `*.pem`, `id_rsa*`), ignoring case, except the template names of
//! [`crate::secrets::NOT_SECRET_NAMES`] when spelled literally. Paths that are globs are treated as
//! every file they could match. Symlinks cannot be seen without IO: a link to a secret is not
//! caught. The list itself is [`crate::secrets::SECRET_TABLE`].

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use crate::secrets::NOT_SECRET_NAMES;

/// One component (or name pattern) of a compiled secret list: borrowed from the built-in table,
/// or shared (the home directory's components, the operator's extra paths). Compiling the table
/// copies no text: the hook compiles it on every call, where a string per component cost a
/// quarter of a fast-path read.
#[derive(Clone)]
pub enum Comp {
    /// Text of the built-in table.
    Table(&'static str),
    /// Text made at run time.
    Shared(Arc<str>),
}

impl Deref for Comp {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Comp::Table(s) => s,
            Comp::Shared(s) => s,
        }
    }
}

impl PartialEq for Comp {
    fn eq(&self, other: &Comp) -> bool {
        **self == **other
    }
}

impl fmt::Debug for Comp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// The components of a pattern, borrowing from the table's text when it is the table's.
fn comps_of(p: &Comp) -> Vec<Comp> {
    // Straight from the split: no `components` vector in between (the hook compiles the whole
    // table on every call).
    match p {
        Comp::Table(s) => s.split('/').filter(is_component).map(Comp::Table).collect(),
        Comp::Shared(s) => s
            .split('/')
            .filter(is_component)
            .map(|c| Comp::Shared(Arc::from(c)))
            .collect(),
    }
}

/// `p` in lower case, borrowed when it already is.
fn lower_of(p: &Comp) -> Comp {
    if p.bytes().any(|b| b.is_ascii_uppercase()) {
        Comp::Shared(Arc::from(p.to_ascii_lowercase()))
    } else {
        p.clone()
    }
}

/// A compiled secret list for one home directory.
#[derive(Debug, Clone)]
pub struct SecretPaths {
    /// Anchored patterns as absolute components (`~` already replaced by the home directory).
    anchored: Vec<Vec<Comp>>,
    /// The part of each anchored pattern below the home directory (or all of it for `/…`
    /// patterns): found anywhere inside an argument, it is a secret even when the argument is
    /// relative to a directory we do not know (`../.ssh/id_rsa`).
    tails: Vec<Vec<Comp>>,
    /// Per tail: does it come from a `/…` pattern? Such a tail is only looked for in a relative
    /// path from an unknown directory, or one that climbs (`../../etc/shadow`); a path known to be
    /// elsewhere (`/home/me/proj/root`, or `root` in a known cwd) is judged by `anchored` alone.
    rooted: Vec<bool>,
    /// File-name patterns matched against every component (lower case).
    names: Vec<Comp>,
    /// The same patterns sorted by shape, for the literal case on the hook's fast path.
    shapes: NameShapes,
}

/// Name patterns by shape: a literal component is checked with `==`, `ends_with` and
/// `starts_with` for most of them (one lower-casing per component, no matcher run).
#[derive(Debug, Clone, Default)]
struct NameShapes {
    /// No wildcard: the whole name.
    exact: Vec<Comp>,
    /// `*` then literal text (`*.pem`): the literal suffix.
    suffix: Vec<Comp>,
    /// Literal text then `*` (`.env.*`): the literal prefix.
    prefix: Vec<Comp>,
    /// Anything else (`client_secret*.json`, `?`).
    general: Vec<Comp>,
}

impl NameShapes {
    fn add(&mut self, n: &Comp) {
        let wild = |s: &str| s.contains(['*', '?']);
        // The part after or before the `*`, borrowed like the whole.
        let part = |start: usize, end: usize| match n {
            Comp::Table(s) => Comp::Table(&s[start..end]),
            Comp::Shared(s) => Comp::Shared(Arc::from(&s[start..end])),
        };
        if !wild(n) {
            self.exact.push(n.clone());
        } else if n.strip_prefix('*').is_some_and(|r| !wild(r)) {
            self.suffix.push(part(1, n.len()));
        } else if n.strip_suffix('*').is_some_and(|r| !wild(r)) {
            self.prefix.push(part(0, n.len() - 1));
        } else {
            self.general.push(n.clone());
        }
    }

    /// Does the literal, lower-cased name `lower` match one of the patterns?
    fn literal(&self, lower: &str) -> bool {
        (self.exact.iter().any(|e| &**e == lower)
            || self.suffix.iter().any(|s| lower.ends_with(&**s))
            || self.prefix.iter().any(|p| lower.starts_with(&**p))
            || self
                .general
                .iter()
                .any(|g| literal_matches(lower.as_bytes(), g.as_bytes())))
            && !NOT_SECRET_NAMES.iter().any(|(n, _)| *n == lower)
    }
}

impl SecretPaths {
    /// Compile `patterns` (see the module docs) for the home directory `home`.
    pub fn new<S: AsRef<str>>(patterns: &[S], home: &str) -> SecretPaths {
        let patterns: Vec<Comp> = patterns
            .iter()
            .map(|p| Comp::Shared(Arc::from(p.as_ref())))
            .collect();
        SecretPaths::compile(&patterns, home)
    }

    /// [`SecretPaths::new`] for patterns that may borrow the built-in table's text.
    pub(crate) fn compile(patterns: &[Comp], home: &str) -> SecretPaths {
        let mut out = SecretPaths {
            anchored: Vec::new(),
            tails: Vec::new(),
            rooted: Vec::new(),
            names: Vec::new(),
            shapes: NameShapes::default(),
        };
        let home_comps = comps_of(&Comp::Shared(Arc::from(home)));
        for p in patterns {
            if p.starts_with("~/") {
                let rest = match p {
                    Comp::Table(s) => Comp::Table(&s[2..]),
                    Comp::Shared(s) => Comp::Shared(Arc::from(&s[2..])),
                };
                let tail = comps_of(&rest);
                let mut full = Vec::with_capacity(home_comps.len() + tail.len());
                full.extend(home_comps.iter().cloned());
                full.extend(tail.iter().cloned());
                out.anchored.push(full);
                out.tails.push(tail);
                out.rooted.push(false);
            } else if p.starts_with('/') {
                let full = comps_of(p);
                out.tails.push(full.clone());
                out.rooted.push(true);
                out.anchored.push(full);
            } else if !p.is_empty() {
                let lower = lower_of(p);
                out.shapes.add(&lower);
                out.names.push(lower);
            }
        }
        out
    }

    /// Also anchors the `~/` patterns of `patterns` at a second home `home` (the password
    /// database's, when the agent's `$HOME` says another): a secret under either home is one.
    pub fn add_home<S: AsRef<str>>(&mut self, patterns: &[S], home: &str) {
        let home_comps = comps_of(&Comp::Shared(Arc::from(home)));
        for p in patterns {
            if let Some(rest) = p.as_ref().strip_prefix("~/") {
                let tail = comps_of(&Comp::Shared(Arc::from(rest)));
                let mut full = Vec::with_capacity(home_comps.len() + tail.len());
                full.extend(home_comps.iter().cloned());
                full.extend(tail.iter().cloned());
                self.anchored.push(full);
                self.tails.push(tail);
                self.rooted.push(false);
            }
        }
    }

    /// Does `path` (a file name, `~` already expanded, relative to each of `cwds`, or to an unknown
    /// directory when `cwds` is empty) name a secret? With `glob`, `*` and `?` in `path` are
    /// wildcards and the question is whether any file it matches could be a secret.
    pub fn matches(&self, path: &str, cwds: &[String], glob: bool) -> bool {
        let may_match = |a: &str, b: &str| may_match(a, b, glob);
        let prefix_matches = |path: &[&str], pattern: &[Comp]| {
            path.len() >= pattern.len() && pattern.iter().zip(path).all(|(p, c)| may_match(c, p))
        };
        let contains_run = |path: &[&str], run: &[Comp]| {
            !run.is_empty()
                && path
                    .windows(run.len())
                    .any(|w| w.iter().zip(run).all(|(c, p)| may_match(c, p)))
        };
        let named = |comps: &[&str]| comps.iter().any(|c| self.name_matches(c, glob));
        let own = components(path);
        // A relative path that climbs (`../../etc/shadow`) may be meant from anywhere.
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
}

impl SecretPaths {
    /// Could a recursive search of `root` (absolute, `~` expanded; with `glob`, `*` and `?` are
    /// wildcards) reach an anchored secret: is `root` one of them, inside one, or above one (`/`,
    /// `/home`, `~`, `~/.config`)? Lexical: `..` is resolved, symlinks are not seen.
    pub fn tree_holds_anchored(&self, root: &str, glob: bool) -> bool {
        let comps = normalized(root);
        self.anchored.iter().any(|a| {
            a.iter()
                .zip(&comps)
                .all(|(pattern, c)| may_match(c, pattern, glob))
        })
    }

    /// Could a file picked by the include filter `filter` (a `grep --include`, `rg --glob` or
    /// Claude Code Grep `glob`; only the last `/` component is a file name) have a secret file
    /// name (`.env`, `*.pem`, `id_rsa`, …)? In these tools `*` matches a leading dot, so `*.rs`
    /// picks `.env.rs` (a `.env.*` file); a filter whose first character is a class without the
    /// dot (`[!.]*.rs`, `[^.]*.rs`) picks no dot file. Case is ignored; `[…]` and `{…}` are
    /// widened, so the answer errs towards yes.
    pub fn filter_may_select_secret(&self, filter: &str) -> bool {
        let last = filter
            .rsplit('/')
            .next()
            .unwrap_or(filter)
            .to_ascii_lowercase();
        if last.is_empty() || last.contains('\\') {
            return true;
        }
        let no_dot_files = (last.starts_with("[!") || last.starts_with("[^"))
            && last[2..]
                .split(']')
                .next()
                .is_some_and(|class| class.contains('.'));
        let alternatives = widen_filter(&last);
        alternatives.iter().any(|alt| {
            self.names.iter().any(|n| {
                let n = n.to_ascii_lowercase();
                !(no_dot_files && n.starts_with('.')) && may_match_with(alt, &n, true, false)
            })
        })
    }
}

impl SecretPaths {
    /// Is the directory entry `name` a secret file name (`.env`, `*.pem`, `id_rsa`, …)? Case is
    /// ignored (`.ENV` on a case-insensitive file system is `.env`).
    pub fn secret_name(&self, name: &str) -> bool {
        self.name_matches(name, false)
    }

    /// Could a file or directory whose name matches the glob part `part` (`*`, `?`; `[…]` and
    /// `{…}` widened by the caller) have a secret name? A part of only `*` matches every name and
    /// selects nothing by itself: it is not counted. As in bash, a leading wildcard does not match
    /// a leading dot (`*.rs` lists no `.env.rs`; `.e*` does reach `.env`). For names-only listings
    /// (Claude Code's Glob): a part that starts with a wildcard selects by extension, so it is
    /// judged against the extension-like patterns (`*.pem`), not against the table's whole file
    /// names (`credentials.json`), which only a part spelling their start reaches
    /// (`cred*.json`). Contents-reading globs go through [`SecretPaths::matches`], which counts all.
    pub fn name_may_match(&self, part: &str) -> bool {
        if part.chars().all(|c| c == '*') {
            return false;
        }
        let lower = part.to_ascii_lowercase();
        if !lower.contains(['*', '?']) {
            return self.shapes.literal(&lower);
        }
        let leading_wildcard = lower.starts_with(['*', '?']);
        self.names.iter().any(|n| {
            !(leading_wildcard && self.shapes.exact.contains(n))
                && may_match_with(&lower, n, true, true)
        })
    }

    /// Does the path component `c` (with `glob`: a glob part) match a name pattern? Case is
    /// ignored; a literal template name (`.env.example`) does not.
    fn name_matches(&self, c: &str, glob: bool) -> bool {
        let lower = c.to_ascii_lowercase();
        if glob && lower.contains(['*', '?']) {
            return self.names.iter().any(|n| may_match(&lower, n, true));
        }
        self.shapes.literal(&lower)
    }

    /// The rest of every anchored secret path whose tail starts with the entry `name`: `[]` for
    /// `.ssh` (of `~/.ssh`), `["gh"]` for `.config` (of `~/.config/gh`). Case is ignored.
    pub fn tails_after<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s [Comp]> + 's {
        // `/…` tails name one place, not a name found anywhere: the listed directory is not `/`
        // (rule 1 refuses a search of any place above an anchored secret).
        self.tails
            .iter()
            .zip(&self.rooted)
            .filter(|(_, rooted)| !**rooted)
            .filter_map(move |(t, _)| {
                let (first, rest) = t.split_first()?;
                (may_match(name, first, false)
                    || may_match(
                        &name.to_ascii_lowercase(),
                        &first.to_ascii_lowercase(),
                        false,
                    ))
                .then_some(rest)
            })
    }
}

/// A filter glob's alternatives with `**` as `*`, `[…]` as `?` and `{a,b}` expanded (one level;
/// nested or too many groups become `*`).
fn widen_filter(glob: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '[' => {
                for d in chars.by_ref() {
                    if d == ']' {
                        break;
                    }
                }
                out.iter_mut().for_each(|o| o.push('?'));
            }
            '{' => {
                let mut inner = String::new();
                let mut nested = false;
                for d in chars.by_ref() {
                    if d == '}' {
                        break;
                    }
                    nested |= d == '{';
                    inner.push(d);
                }
                let alts: Vec<&str> = inner.split(',').collect();
                if nested || out.len() * alts.len() > 64 {
                    out.iter_mut().for_each(|o| o.push('*'));
                } else {
                    out = out
                        .iter()
                        .flat_map(|o| alts.iter().map(move |a| format!("{o}{a}")))
                        .collect();
                }
            }
            c => out.iter_mut().for_each(|o| o.push(c)),
        }
    }
    for o in &mut out {
        while o.contains("**") {
            *o = o.replace("**", "*");
        }
    }
    out
}

/// The components of `p` with `.` dropped and `..` resolved lexically.
pub(crate) fn normalized(p: &str) -> Vec<&str> {
    normalize(components(p))
}

fn components(p: &str) -> Vec<&str> {
    p.split('/').filter(is_component).collect()
}

/// A path component that counts: not empty (`//`), not `.`.
fn is_component(c: &&str) -> bool {
    !c.is_empty() && *c != "."
}

/// Resolve `..` lexically.
fn normalize(comps: Vec<&str>) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::with_capacity(comps.len());
    for c in comps {
        if c == ".." {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out
}

/// Could some file name match both `a` and the secret pattern `b`? `b` may contain `*` and `?`;
/// so may `a` when `a_glob` (other glob syntax — `[…]`, `{…}` — was widened to these before),
/// otherwise `a` is a literal name. A wildcard at the start of a component does not match a
/// leading dot, as in bash without `dotglob`.
pub(crate) fn may_match(a: &str, b: &str, a_glob: bool) -> bool {
    may_match_with(a, b, a_glob, true)
}

/// [`may_match`], with `dot_rule` saying whether a leading wildcard in `a` skips a leading dot
/// (bash globs) or not (`grep --include`, ripgrep globs).
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
    // dp[i][j]: can a[i..] and b[j..] match a common string? Filled from the ends, iteratively
    // (no recursion: an argument may be tens of kilobytes long).
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

/// Does the literal name `a` match the pattern `b` (`*`, `?`)? Greedy with one backtrack point,
/// no allocation: this runs for every argument of every command on the hook's fast path.
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
