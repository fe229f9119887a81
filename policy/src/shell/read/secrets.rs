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

/// Appends the components of `p` to `out`, borrowing from the table's text when it is the
/// table's: one vector for every pattern of a list, not one per pattern (the hook compiles the
/// whole table on every call).
fn push_comps(p: &Comp, out: &mut Vec<Comp>) {
    // One pass over the bytes (a `str::split` costs more than the rest of the compile).
    let text: &str = p;
    let b = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i <= b.len() {
        if i == b.len() || b[i] == b'/' {
            let c = &b[start..i];
            if !c.is_empty() && c != b"." {
                out.push(match p {
                    Comp::Table(t) => Comp::Table(&t[start..i]),
                    Comp::Shared(_) => Comp::Shared(Arc::from(&text[start..i])),
                });
            }
            start = i + 1;
        }
        i += 1;
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

/// `p` without its first `n` bytes, borrowed like the whole.
fn tail_of(p: &Comp, n: usize) -> Comp {
    match p {
        Comp::Table(s) => Comp::Table(&s[n..]),
        Comp::Shared(s) => Comp::Shared(Arc::from(&s[n..])),
    }
}

/// "No anchor" in [`Index`]'s chains.
const NONE: u32 = u32::MAX;
/// Buckets of [`Index`] (a power of two).
const BUCKETS: usize = 64;

/// One anchored pattern: its components below the home directory (or below `/`) as a range of
/// [`SecretPaths::comps`], and where it is anchored.
#[derive(Debug, Clone)]
struct Anchor {
    start: u32,
    len: u32,
    /// The index in [`SecretPaths::homes`] of a `~/…` pattern; `None` for a `/…` pattern.
    home: Option<u32>,
}

/// The anchored patterns by the first component of their tail: a path component can only begin
/// a match of a tail whose first component matches it, and a literal component matches a literal
/// pattern component only when they are equal. So a lookup gives every anchor whose first
/// component equals the component, plus `wild`: those whose first component has `*` or `?`, or
/// that have no component at all. A component that is itself a glob is judged against every
/// anchor. Chained hash buckets (FNV-1a), built in one pass, no allocation per anchor.
#[derive(Debug, Clone, Default)]
struct Index {
    /// Anchors in the bucket of their first component.
    at: Chains,
    wild: Vec<u32>,
}

fn bucket(c: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in c.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h as usize) & (BUCKETS - 1)
}

/// [`bucket`] of `c` in ASCII lower case.
fn bucket_folded(c: &[u8]) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in c {
        h ^= u64::from(b.to_ascii_lowercase());
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h as usize) & (BUCKETS - 1)
}

/// Items of a list chained by bucket: `heads[b]` is the last item put in bucket `b`, `next[i]`
/// the one before item `i` in its bucket.
#[derive(Debug, Clone)]
struct Chains {
    heads: [u32; BUCKETS],
    next: Vec<u32>,
}

impl Default for Chains {
    fn default() -> Chains {
        Chains {
            heads: [NONE; BUCKETS],
            next: Vec::new(),
        }
    }
}

impl Chains {
    /// Puts the next item (index `next.len()`) in bucket `b`.
    fn push(&mut self, b: usize) {
        let i = self.next.len() as u32;
        self.next.push(self.heads[b]);
        self.heads[b] = i;
    }

    /// Gives the next item no bucket.
    fn skip(&mut self) {
        self.next.push(NONE);
    }

    /// The items of bucket `b`.
    fn of(&self, b: usize) -> impl Iterator<Item = usize> + '_ {
        let mut i = self.heads[b];
        std::iter::from_fn(move || {
            let at = i;
            (at != NONE).then(|| {
                i = self.next[at as usize];
                at as usize
            })
        })
    }
}

fn wild(s: &str) -> bool {
    s.bytes().any(|b| b == b'*' || b == b'?')
}

/// A compiled secret list for one home directory.
#[derive(Debug, Clone)]
pub struct SecretPaths {
    /// The components of every anchored pattern's tail, one after another.
    comps: Vec<Comp>,
    /// The home directories' components: the first is the one compiled for, the others come from
    /// [`SecretPaths::add_home`].
    homes: Vec<Vec<Comp>>,
    /// Anchored patterns (`~` stands for each home it was compiled for). The tail of one (the
    /// part below the home directory, or all of a `/…` pattern), found anywhere inside an
    /// argument, is a secret even when the argument is relative to a directory we do not know
    /// (`../.ssh/id_rsa`); a `/…` pattern's tail is only looked for in a relative path from an
    /// unknown directory, or one that climbs (`../../etc/shadow`): a path known to be elsewhere
    /// (`/home/me/proj/root`, or `root` in a known cwd) is judged by the anchored pattern alone.
    anchors: Vec<Anchor>,
    /// The anchors by the first component of their tail.
    index: Index,
    /// File-name patterns matched against every component (lower case).
    names: Vec<Comp>,
    /// The same patterns sorted by shape, for the literal case on the hook's fast path.
    shapes: NameShapes,
}

/// Name patterns by shape: a literal component is checked with `==`, `ends_with` and
/// `starts_with` for most of them (no lower-cased copy, no matcher run), each against only the
/// patterns it could meet: whole names in the bucket of its hash, suffixes in the bucket of its
/// last byte, prefixes in that of its first (ASCII case folded).
#[derive(Debug, Clone, Default)]
struct NameShapes {
    /// No wildcard: the whole name.
    exact: Vec<Comp>,
    exact_at: Chains,
    /// `*` then literal text (`*.pem`): the literal suffix.
    suffix: Vec<Comp>,
    suffix_at: Chains,
    /// Literal text then `*` (`.env.*`): the literal prefix.
    prefix: Vec<Comp>,
    prefix_at: Chains,
    /// Anything else (`client_secret*.json`, `?`), and an empty suffix (`*`), tried for every
    /// name.
    general: Vec<Comp>,
}

/// The bucket of a name's (or pattern's) last or first byte, folded; `None` for an empty one.
fn byte_bucket(b: Option<&u8>) -> Option<usize> {
    b.map(|b| usize::from(b.to_ascii_lowercase()) & (BUCKETS - 1))
}

impl NameShapes {
    fn add(&mut self, n: &Comp) {
        // The part after or before the `*`, borrowed like the whole.
        let part = |start: usize, end: usize| match n {
            Comp::Table(s) => Comp::Table(&s[start..end]),
            Comp::Shared(s) => Comp::Shared(Arc::from(&s[start..end])),
        };
        if !wild(n) {
            self.exact_at.push(bucket_folded(n.as_bytes()));
            self.exact.push(n.clone());
        } else if let Some(b) = n
            .strip_prefix('*')
            .filter(|r| !wild(r))
            .and_then(|r| byte_bucket(r.as_bytes().last()))
        {
            self.suffix_at.push(b);
            self.suffix.push(part(1, n.len()));
        } else if let Some(b) = n
            .strip_suffix('*')
            .filter(|r| !wild(r))
            .and_then(|r| byte_bucket(r.as_bytes().first()))
        {
            self.prefix_at.push(b);
            self.prefix.push(part(0, n.len() - 1));
        } else {
            self.general.push(n.clone());
        }
    }

    /// Does the literal name `name` match one of the (lower-case) patterns, ignoring ASCII case?
    fn literal(&self, name: &str) -> bool {
        let b = name.as_bytes();
        let ends = |s: &[u8]| b.len() >= s.len() && b[b.len() - s.len()..].eq_ignore_ascii_case(s);
        let starts = |s: &[u8]| b.len() >= s.len() && b[..s.len()].eq_ignore_ascii_case(s);
        let exact = || {
            self.exact_at
                .of(bucket_folded(b))
                .any(|i| b.eq_ignore_ascii_case(self.exact[i].as_bytes()))
        };
        let suffix = || {
            byte_bucket(b.last()).is_some_and(|at| {
                self.suffix_at
                    .of(at)
                    .any(|i| ends(self.suffix[i].as_bytes()))
            })
        };
        let prefix = || {
            byte_bucket(b.first()).is_some_and(|at| {
                self.prefix_at
                    .of(at)
                    .any(|i| starts(self.prefix[i].as_bytes()))
            })
        };
        (exact()
            || suffix()
            || prefix()
            || self
                .general
                .iter()
                .any(|g| literal_matches_folded(b, g.as_bytes())))
            && !NOT_SECRET_NAMES
                .iter()
                .any(|(n, _)| b.eq_ignore_ascii_case(n.as_bytes()))
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
            comps: Vec::with_capacity(patterns.len() * 2),
            homes: Vec::new(),
            anchors: Vec::with_capacity(patterns.len()),
            index: Index::default(),
            names: Vec::with_capacity(patterns.len()),
            shapes: NameShapes::default(),
        };
        out.push_home(home);
        for p in patterns {
            if p.starts_with("~/") {
                out.push_anchor(&tail_of(p, 2), Some(0));
            } else if p.starts_with('/') {
                out.push_anchor(p, None);
            } else if !p.is_empty() {
                let lower = lower_of(p);
                out.shapes.add(&lower);
                out.names.push(lower);
            }
        }
        out
    }

    fn push_home(&mut self, home: &str) {
        let mut comps = Vec::new();
        push_comps(&Comp::Shared(Arc::from(home)), &mut comps);
        self.homes.push(comps);
    }

    /// Adds the anchored pattern whose tail is `tail` (components after `~/`, or all of a `/…`
    /// pattern), at home `home` (`None`: at `/`).
    fn push_anchor(&mut self, tail: &Comp, home: Option<usize>) {
        let start = self.comps.len();
        push_comps(tail, &mut self.comps);
        let len = self.comps.len() - start;
        let at = self.anchors.len() as u32;
        self.anchors.push(Anchor {
            start: start as u32,
            len: len as u32,
            home: home.map(|h| h as u32),
        });
        match self.comps.get(start).filter(|_| len > 0) {
            Some(first) if !wild(first) => self.index.at.push(bucket(first)),
            _ => {
                self.index.at.skip();
                self.index.wild.push(at);
            }
        }
    }

    /// Also anchors the `~/` patterns of `patterns` at a second home `home` (the password
    /// database's, when the agent's `$HOME` says another): a secret under either home is one.
    pub fn add_home<S: AsRef<str>>(&mut self, patterns: &[S], home: &str) {
        self.push_home(home);
        let at = self.homes.len() - 1;
        for p in patterns {
            if let Some(rest) = p.as_ref().strip_prefix("~/") {
                self.push_anchor(&Comp::Shared(Arc::from(rest)), Some(at));
            }
        }
    }

    fn tail(&self, a: &Anchor) -> &[Comp] {
        &self.comps[a.start as usize..(a.start + a.len) as usize]
    }

    /// Is `f` true for an anchor whose tail may begin with the path component `c` (every anchor
    /// when `c` is a glob part, with `glob`)? Only these can match with their first component at
    /// `c`, or have no component ([`Index`]).
    fn any_anchor_at(&self, c: &str, glob: bool, mut f: impl FnMut(&Anchor) -> bool) -> bool {
        if glob && wild(c) {
            return self.anchors.iter().any(f);
        }
        if self
            .index
            .at
            .of(bucket(c))
            .any(|i| *self.comps[self.anchors[i].start as usize] == *c && f(&self.anchors[i]))
        {
            return true;
        }
        self.index
            .wild
            .iter()
            .any(|&i| f(&self.anchors[i as usize]))
    }

    /// Does `path` (a file name, `~` already expanded, relative to each of `cwds`, or to an unknown
    /// directory when `cwds` is empty) name a secret? With `glob`, `*` and `?` in `path` are
    /// wildcards and the question is whether any file it matches could be a secret.
    pub fn matches(&self, path: &str, cwds: &[String], glob: bool) -> bool {
        let own = components(path);
        // A relative path that climbs (`../../etc/shadow`) may be meant from anywhere.
        let unknown_base = !path.starts_with('/') && (cwds.is_empty() || own.contains(&".."));
        if self.named(&own, glob) || self.holds_tail(&own, unknown_base, glob) {
            return true;
        }
        let check = |abs: Vec<&str>| {
            let abs = normalize(abs);
            self.anchored_prefix(&abs, glob) || self.named(&abs, glob)
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

    /// Does a component of `comps` match a name pattern?
    fn named(&self, comps: &[&str], glob: bool) -> bool {
        comps.iter().any(|c| self.name_matches(c, glob))
    }

    /// Does the tail of an anchored pattern (of a `/…` pattern only when `rooted_too`) run
    /// somewhere inside `path`?
    fn holds_tail(&self, path: &[&str], rooted_too: bool, glob: bool) -> bool {
        (0..path.len()).any(|i| {
            self.any_anchor_at(path[i], glob, |a| {
                let t = self.tail(a);
                (a.home.is_some() || rooted_too)
                    && !t.is_empty()
                    && path.len() - i >= t.len()
                    && t.iter().zip(&path[i..]).all(|(p, c)| may_match(c, p, glob))
            })
        })
    }

    /// Does the absolute, normalised `abs` start with an anchored pattern (is it one, or inside
    /// one)?
    fn anchored_prefix(&self, abs: &[&str], glob: bool) -> bool {
        let below = |at: usize, home: Option<u32>| {
            let rest = &abs[at..];
            let fits = |a: &Anchor| {
                let t = self.tail(a);
                a.home == home
                    && rest.len() >= t.len()
                    && t.iter().zip(rest).all(|(p, c)| may_match(c, p, glob))
            };
            match rest.first() {
                Some(c) => self.any_anchor_at(c, glob, fits),
                // Only an anchor without components can fit nothing.
                None => self
                    .index
                    .wild
                    .iter()
                    .any(|&i| fits(&self.anchors[i as usize])),
            }
        };
        below(0, None)
            || self.homes.iter().enumerate().any(|(h, home)| {
                abs.len() >= home.len()
                    && home.iter().zip(abs).all(|(p, c)| may_match(c, p, glob))
                    && below(home.len(), Some(h as u32))
            })
    }
}

impl SecretPaths {
    /// Could a recursive search of `root` (absolute, `~` expanded; with `glob`, `*` and `?` are
    /// wildcards) reach an anchored secret: is `root` one of them, inside one, or above one (`/`,
    /// `/home`, `~`, `~/.config`)? Lexical: `..` is resolved, symlinks are not seen.
    pub fn tree_holds_anchored(&self, root: &str, glob: bool) -> bool {
        let comps = normalized(root);
        // Where the pattern and the path both have components, they agree.
        let agrees = |pattern: &[Comp], path: &[&str]| {
            pattern.iter().zip(path).all(|(p, c)| may_match(c, p, glob))
        };
        let below = |at: usize, home: Option<u32>| match comps.get(at) {
            Some(c) => self.any_anchor_at(c, glob, |a| {
                a.home == home && agrees(self.tail(a), &comps[at..])
            }),
            // `root` ends at or above where the anchors of `home` begin: it holds every one.
            None => self.anchors.iter().any(|a| a.home == home),
        };
        below(0, None)
            || self
                .homes
                .iter()
                .enumerate()
                .any(|(h, home)| agrees(home, &comps) && below(home.len(), Some(h as u32)))
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
        if glob && wild(c) {
            let lower = c.to_ascii_lowercase();
            return self.names.iter().any(|n| may_match(&lower, n, true));
        }
        self.shapes.literal(c)
    }

    /// The rest of every anchored secret path whose tail starts with the entry `name`: `[]` for
    /// `.ssh` (of `~/.ssh`), `["gh"]` for `.config` (of `~/.config/gh`). Case is ignored.
    pub fn tails_after<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s [Comp]> + 's {
        // `/…` tails name one place, not a name found anywhere: the listed directory is not `/`
        // (rule 1 refuses a search of any place above an anchored secret).
        self.anchors
            .iter()
            .filter(|a| a.home.is_some())
            .filter_map(move |a| {
                let (first, rest) = self.tail(a).split_first()?;
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

/// [`literal_matches`] ignoring the ASCII case of `a` (`b`, a name pattern, is in lower case).
fn literal_matches_folded(a: &[u8], b: &[u8]) -> bool {
    literal_matches_as(a, b, |c| c.to_ascii_lowercase())
}

/// Does the literal name `a` match the pattern `b` (`*`, `?`)? Greedy with one backtrack point,
/// no allocation: this runs for every argument of every command on the hook's fast path.
fn literal_matches(a: &[u8], b: &[u8]) -> bool {
    literal_matches_as(a, b, |c| c)
}

/// [`literal_matches`], with each byte of `a` seen through `fold`.
#[inline]
fn literal_matches_as(a: &[u8], b: &[u8], fold: impl Fn(u8) -> u8) -> bool {
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < a.len() {
        let c = fold(a[i]);
        if j < b.len() && (b[j] == b'?' || b[j] == c) && b[j] != b'*' {
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
