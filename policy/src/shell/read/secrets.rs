//! Secret paths: which arguments name a file whose contents must not reach the model.
//!
//! A pattern starting with `~/` or `/` is anchored: it covers that path and everything under it,
//! each component may use `*` and `?`. Any other pattern is a file-name pattern matched against every
//! component of a path (`.env`, `*.pem`, `id_rsa*`), ignoring case, except the template names of
//! [`crate::secrets::NOT_SECRET_NAMES`] when spelled literally. Paths that are globs are treated as
//! every file they could match. Symlinks cannot be seen without IO: a link to a secret is not
//! caught. The list itself is [`crate::secrets::SECRET_TABLE`].

use std::borrow::Cow;
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
    /// `SECRET_PATTERNS[pat][start..end]`: the built-in table's text as the build-time compile
    /// ([`built`]) keeps it, by offsets: `static` data without pointers needs no relocation at
    /// the start of a static-PIE hook (a pointer per component would be written on every call).
    Built { pat: u16, start: u16, end: u16 },
    /// The build-time compile's lower-cased names, by offsets in one text.
    Lower { start: u16, end: u16 },
    /// Text made at run time.
    Shared(Arc<str>),
}

impl Deref for Comp {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Comp::Table(s) => s,
            Comp::Built { pat, start, end } => {
                &built::PATTERNS[usize::from(*pat)][usize::from(*start)..usize::from(*end)]
            }
            Comp::Lower { start, end } => &built::LOWER[usize::from(*start)..usize::from(*end)],
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
                    _ => Comp::Shared(Arc::from(&text[start..i])),
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
        _ => Comp::Shared(Arc::from(&p[n..])),
    }
}

/// "No anchor" in [`Index`]'s chains.
const NONE: u32 = u32::MAX;
/// Buckets of [`Index`] (a power of two).
const BUCKETS: usize = 64;

/// One anchored pattern: its components below the home directory (or below `/`) as a range of
/// [`SecretPaths::comps`], and where it is anchored.
#[derive(Debug, Clone, Copy)]
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
    wild: Cow<'static, [u32]>,
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
    next: Cow<'static, [u32]>,
}

impl Default for Chains {
    fn default() -> Chains {
        Chains {
            heads: [NONE; BUCKETS],
            next: Cow::Borrowed(&[]),
        }
    }
}

impl Chains {
    /// Puts the next item (index `next.len()`) in bucket `b`.
    fn push(&mut self, b: usize) {
        let i = self.next.len() as u32;
        let before = self.heads[b];
        self.next.to_mut().push(before);
        self.heads[b] = i;
    }

    /// Gives the next item no bucket.
    fn skip(&mut self) {
        self.next.to_mut().push(NONE);
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

/// Working directories prepared for [`SecretPaths::matches_from`] (by [`SecretPaths::bases`],
/// for the list that made them).
#[derive(Debug, Clone, Default)]
pub struct Bases(Vec<Base>);

#[derive(Debug, Clone)]
struct Base {
    /// The directory's components (`.` and empty ones dropped, `..` kept).
    comps: Vec<String>,
    /// No component is `..`.
    plain: bool,
    /// Whether a component matches a name pattern: as a literal name, and as a glob part.
    named: [bool; 2],
}

/// A compiled secret list for one home directory.
#[derive(Debug, Clone)]
pub struct SecretPaths {
    /// The components of every anchored pattern's tail, one after another.
    comps: Cow<'static, [Comp]>,
    /// The home directories' components: the first is the one compiled for, the others come from
    /// [`SecretPaths::add_home`].
    homes: Vec<Vec<Comp>>,
    /// Anchored patterns (`~` stands for each home it was compiled for). The tail of one (the
    /// part below the home directory, or all of a `/…` pattern), found anywhere inside an
    /// argument, is a secret even when the argument is relative to a directory we do not know
    /// (`../.ssh/id_rsa`); a `/…` pattern's tail is only looked for in a relative path from an
    /// unknown directory, or one that climbs (`../../etc/shadow`): a path known to be elsewhere
    /// (`/home/me/proj/root`, or `root` in a known cwd) is judged by the anchored pattern alone.
    anchors: Cow<'static, [Anchor]>,
    /// The anchors by the first component of their tail.
    index: Index,
    /// File-name patterns matched against every component (lower case).
    names: Cow<'static, [Comp]>,
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
    exact: Cow<'static, [Comp]>,
    exact_at: Chains,
    /// `*` then literal text (`*.pem`): the literal suffix.
    suffix: Cow<'static, [Comp]>,
    suffix_at: Chains,
    /// Literal text then `*` (`.env.*`): the literal prefix.
    prefix: Cow<'static, [Comp]>,
    prefix_at: Chains,
    /// Anything else (`client_secret*.json`, `?`), and an empty suffix (`*`), tried for every
    /// name.
    general: Cow<'static, [Comp]>,
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
            _ => Comp::Shared(Arc::from(&n[start..end])),
        };
        if !wild(n) {
            self.exact_at.push(bucket_folded(n.as_bytes()));
            self.exact.to_mut().push(n.clone());
        } else if let Some(b) = n
            .strip_prefix('*')
            .filter(|r| !wild(r))
            .and_then(|r| byte_bucket(r.as_bytes().last()))
        {
            self.suffix_at.push(b);
            self.suffix.to_mut().push(part(1, n.len()));
        } else if let Some(b) = n
            .strip_suffix('*')
            .filter(|r| !wild(r))
            .and_then(|r| byte_bucket(r.as_bytes().first()))
        {
            self.prefix_at.push(b);
            self.prefix.to_mut().push(part(0, n.len() - 1));
        } else {
            self.general.to_mut().push(n.clone());
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
                .any(|g| tail_fits(b, g.as_bytes()) && literal_matches_folded(b, g.as_bytes())))
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
            comps: Cow::Owned(Vec::with_capacity(patterns.len() * 2)),
            homes: Vec::new(),
            anchors: Cow::Owned(Vec::with_capacity(patterns.len())),
            index: Index::default(),
            names: Cow::Owned(Vec::with_capacity(patterns.len())),
            shapes: NameShapes::default(),
        };
        out.push_home(home);
        for p in patterns {
            out.push_pattern(p);
        }
        out
    }

    /// The built-in table ([`crate::secrets::SECRET_PATTERNS`], compiled at build time by
    /// [`built`]) for `home`, then `extra` as [`SecretPaths::compile`] adds them: the same list,
    /// without the compile on every call (`policy/tests/it/secret_index.rs` compares the two).
    pub(crate) fn builtin_with(home: &str, extra: &[Comp]) -> SecretPaths {
        let mut out = SecretPaths {
            comps: Cow::Borrowed(&built::COMPS),
            homes: Vec::with_capacity(1),
            anchors: Cow::Borrowed(&built::ANCHORS),
            index: Index {
                at: built::ANCHORS_AT,
                wild: Cow::Borrowed(&built::WILD),
            },
            names: Cow::Borrowed(&built::NAMES),
            shapes: NameShapes {
                exact: Cow::Borrowed(&built::EXACT),
                exact_at: built::EXACT_AT,
                suffix: Cow::Borrowed(&built::SUFFIX),
                suffix_at: built::SUFFIX_AT,
                prefix: Cow::Borrowed(&built::PREFIX),
                prefix_at: built::PREFIX_AT,
                general: Cow::Borrowed(&built::GENERAL),
            },
        };
        out.push_home(home);
        for p in extra {
            out.push_pattern(p);
        }
        out
    }

    /// Adds one pattern of the list being compiled (anchored at the first home).
    fn push_pattern(&mut self, p: &Comp) {
        if p.starts_with("~/") {
            self.push_anchor(&tail_of(p, 2), Some(0));
        } else if p.starts_with('/') {
            self.push_anchor(p, None);
        } else if !p.is_empty() {
            let lower = lower_of(p);
            self.shapes.add(&lower);
            self.names.to_mut().push(lower);
        }
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
        push_comps(tail, self.comps.to_mut());
        let len = self.comps.len() - start;
        let at = self.anchors.len() as u32;
        self.anchors.to_mut().push(Anchor {
            start: start as u32,
            len: len as u32,
            home: home.map(|h| h as u32),
        });
        match self.comps.get(start).filter(|_| len > 0) {
            Some(first) if !wild(first) => self.index.at.push(bucket(first)),
            _ => {
                self.index.at.skip();
                self.index.wild.to_mut().push(at);
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
        self.matches_from(path, &self.bases(cwds), glob)
    }

    /// The directories `cwds` prepared for many [`SecretPaths::matches_from`] calls: each one's
    /// components, split once, and whether one of them has a secret name.
    pub fn bases(&self, cwds: &[String]) -> Bases {
        Bases(
            cwds.iter()
                .map(|cwd| {
                    let comps: Vec<String> =
                        components(cwd).into_iter().map(String::from).collect();
                    let refs: Vec<&str> = comps.iter().map(String::as_str).collect();
                    Base {
                        plain: !refs.contains(&".."),
                        named: [self.named(&refs, false), self.named(&refs, true)],
                        comps,
                    }
                })
                .collect(),
        )
    }

    /// [`SecretPaths::matches`] with the directories prepared by [`SecretPaths::bases`]: the same
    /// answer. A relative path without `..` below a directory without `..` is that directory's
    /// components and then its own, so whether one of them has a secret name is known from the
    /// two parts: the directory's, prepared once, and the path's, looked at first.
    pub fn matches_from(&self, path: &str, bases: &Bases, glob: bool) -> bool {
        let own = components(path);
        let climbs = own.contains(&"..");
        // A relative path that climbs (`../../etc/shadow`) may be meant from anywhere.
        let unknown_base = !path.starts_with('/') && (bases.0.is_empty() || climbs);
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
        bases.0.iter().any(|base| {
            let mut abs: Vec<&str> = Vec::with_capacity(base.comps.len() + own.len());
            abs.extend(base.comps.iter().map(String::as_str));
            abs.extend(own.iter().copied());
            if base.plain && !climbs {
                // Nothing to normalise; no component of `own` has a secret name (above).
                self.anchored_prefix(&abs, glob) || base.named[usize::from(glob)]
            } else {
                check(abs)
            }
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

/// The components of `p` that count ([`is_component`]), in order: what `p.split('/')` filtered
/// gives, in one pass over the bytes (a `split` searches for each `/` anew: this runs for every
/// argument of every command on the hook's fast path).
fn components(p: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, b) in p.bytes().enumerate() {
        if b == b'/' {
            let c = &p[start..i];
            if is_component(&c) {
                out.push(c);
            }
            start = i + 1;
        }
    }
    let last = &p[start..];
    if is_component(&last) {
        out.push(last);
    }
    out
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

/// Necessary for the literal name `name` to match the pattern `p` (`*`, `?`): the pattern's
/// literal text after its last wildcard ends the name, ASCII case ignored. A cheap reject before
/// [`literal_matches_folded`], which tries every position of the name for each `*`
/// (`*service-account*.json` against every component of every argument).
fn tail_fits(name: &[u8], p: &[u8]) -> bool {
    let from = p
        .iter()
        .rposition(|&c| c == b'*' || c == b'?')
        .map_or(0, |i| i + 1);
    let tail = &p[from..];
    name.len() >= tail.len() && name[name.len() - tail.len()..].eq_ignore_ascii_case(tail)
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

/// The built-in table ([`crate::secrets::SECRET_PATTERNS`]) compiled at build time: what
/// [`SecretPaths::compile`] makes of it, less the home directory, as `static` data (`const fn`s
/// doing the compile's steps: components, anchors and their buckets, lower-cased names by shape
/// and their buckets). The hook answers one call per process, where compiling the table cost
/// more than anything else of a fast-path read but the parse; `SecretPaths::builtin` borrows
/// this instead. `policy/tests/it/secret_index.rs` checks that both compiles are equal.
mod built {
    use super::{Anchor, Chains, Comp, BUCKETS, NONE};
    use crate::secrets::SECRET_PATTERNS as P;
    use std::borrow::Cow;

    /// Where a pattern's tail starts and where it is anchored; a name pattern is not anchored.
    #[derive(Clone, Copy, PartialEq)]
    enum Kind {
        /// `~/…`: the tail after the `~/`.
        Home,
        /// `/…`: all of it.
        Root,
        /// Any other non-empty pattern.
        Name,
        /// The empty pattern: nothing.
        Empty,
    }

    const fn kind(p: &str) -> Kind {
        let b = p.as_bytes();
        if b.len() >= 2 && b[0] == b'~' && b[1] == b'/' {
            Kind::Home
        } else if !b.is_empty() && b[0] == b'/' {
            Kind::Root
        } else if b.is_empty() {
            Kind::Empty
        } else {
            Kind::Name
        }
    }

    /// `s[start..end]`, at `/` or `*` boundaries (ASCII: always characters' boundaries).
    const fn sub(s: &'static str, start: usize, end: usize) -> &'static str {
        sub_bytes(s.as_bytes(), start, end)
    }

    const fn sub_bytes(b: &'static [u8], start: usize, end: usize) -> &'static str {
        let (head, _) = b.split_at(end);
        let (_, part) = head.split_at(start);
        match std::str::from_utf8(part) {
            Ok(s) => s,
            Err(_) => panic!("a secret pattern split inside a character"),
        }
    }

    /// The tail of an anchored pattern (`super::tail_of`).
    const fn tail(p: &'static str) -> &'static str {
        match kind(p) {
            Kind::Home => sub(p, 2, p.len()),
            _ => p,
        }
    }

    const fn wild(b: &[u8]) -> bool {
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'*' || b[i] == b'?' {
                return true;
            }
            i += 1;
        }
        false
    }

    /// The `n`-th component of `t` as (start, end) (`super::push_comps`: no empty ones, no `.`),
    /// or `None` past the last.
    const fn comp(t: &[u8], n: usize) -> Option<(usize, usize)> {
        let mut seen = 0;
        let mut start = 0;
        let mut i = 0;
        while i <= t.len() {
            if i == t.len() || t[i] == b'/' {
                let len = i - start;
                if len > 0 && !(len == 1 && t[start] == b'.') {
                    if seen == n {
                        return Some((start, i));
                    }
                    seen += 1;
                }
                start = i + 1;
            }
            i += 1;
        }
        None
    }

    const fn comp_count(t: &[u8]) -> usize {
        let mut n = 0;
        while comp(t, n).is_some() {
            n += 1;
        }
        n
    }

    const fn anchored(p: &str) -> bool {
        matches!(kind(p), Kind::Home | Kind::Root)
    }

    const fn count_anchors() -> (usize, usize) {
        let (mut anchors, mut comps) = (0, 0);
        let mut i = 0;
        while i < P.len() {
            if anchored(P[i]) {
                anchors += 1;
                comps += comp_count(tail(P[i]).as_bytes());
            }
            i += 1;
        }
        (anchors, comps)
    }

    const N_ANCHORS: usize = count_anchors().0;
    const N_COMPS: usize = count_anchors().1;

    /// Filler of the arrays before they are written.
    const EMPTY: Comp = Comp::Lower { start: 0, end: 0 };

    /// Sets `a[i]` (an assignment would drop the old value, which a `const fn` cannot).
    const fn put(a: &mut [Comp], i: usize, c: Comp) {
        std::mem::forget(std::mem::replace(&mut a[i], c));
    }

    const fn make_comps() -> [Comp; N_COMPS] {
        let mut out = [EMPTY; N_COMPS];
        let mut k = 0;
        let mut i = 0;
        while i < P.len() {
            if anchored(P[i]) {
                let t = tail(P[i]);
                // Where the tail starts in the pattern.
                let at = P[i].len() - t.len();
                let mut n = 0;
                while let Some((start, end)) = comp(t.as_bytes(), n) {
                    let c = Comp::Built {
                        pat: i as u16,
                        start: (at + start) as u16,
                        end: (at + end) as u16,
                    };
                    put(&mut out, k, c);
                    k += 1;
                    n += 1;
                }
            }
            i += 1;
        }
        out
    }

    const fn make_anchors() -> [Anchor; N_ANCHORS] {
        let mut out = [Anchor {
            start: 0,
            len: 0,
            home: None,
        }; N_ANCHORS];
        let (mut k, mut start) = (0, 0);
        let mut i = 0;
        while i < P.len() {
            if anchored(P[i]) {
                let len = comp_count(tail(P[i]).as_bytes());
                out[k] = Anchor {
                    start: start as u32,
                    len: len as u32,
                    home: match kind(P[i]) {
                        Kind::Home => Some(0),
                        _ => None,
                    },
                };
                start += len;
                k += 1;
            }
            i += 1;
        }
        out
    }

    /// `super::bucket` of `b`, folded or not.
    const fn hash(b: &[u8], fold: bool) -> usize {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut i = 0;
        while i < b.len() {
            let c = if fold {
                b[i].to_ascii_lowercase()
            } else {
                b[i]
            };
            h ^= c as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
            i += 1;
        }
        (h as usize) & (BUCKETS - 1)
    }

    /// The index in the table of each anchored pattern.
    const fn make_anchored() -> [usize; N_ANCHORS] {
        let mut out = [0; N_ANCHORS];
        let (mut k, mut i) = (0, 0);
        while i < P.len() {
            if anchored(P[i]) {
                out[k] = i;
                k += 1;
            }
            i += 1;
        }
        out
    }

    const ANCHORED: [usize; N_ANCHORS] = make_anchored();

    /// The first component of anchor `k`'s tail when it has one without a wildcard (it is in a
    /// bucket).
    const fn first_of(k: usize) -> Option<&'static [u8]> {
        let t = tail(P[ANCHORED[k]]).as_bytes();
        match comp(t, 0) {
            Some((start, end)) if !wild(sub_bytes(t, start, end).as_bytes()) => {
                Some(sub_bytes(t, start, end).as_bytes())
            }
            _ => None,
        }
    }

    const fn count_wild() -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < N_ANCHORS {
            if first_of(i).is_none() {
                n += 1;
            }
            i += 1;
        }
        n
    }

    const N_WILD: usize = count_wild();

    const fn make_wild() -> [u32; N_WILD] {
        let mut out = [0; N_WILD];
        let (mut k, mut i) = (0, 0);
        while i < N_ANCHORS {
            if first_of(i).is_none() {
                out[k] = i as u32;
                k += 1;
            }
            i += 1;
        }
        out
    }

    /// `super::Chains` of `n` items with buckets `b[i]` (`NONE`: skipped).
    const fn chain<const N: usize>(b: &[usize; N]) -> ([u32; BUCKETS], [u32; N]) {
        let mut heads = [NONE; BUCKETS];
        let mut next = [NONE; N];
        let mut i = 0;
        while i < N {
            if b[i] != NONE as usize {
                next[i] = heads[b[i]];
                heads[b[i]] = i as u32;
            }
            i += 1;
        }
        (heads, next)
    }

    const fn anchor_buckets() -> [usize; N_ANCHORS] {
        let mut out = [NONE as usize; N_ANCHORS];
        let mut i = 0;
        while i < N_ANCHORS {
            if let Some(first) = first_of(i) {
                out[i] = hash(first, false);
            }
            i += 1;
        }
        out
    }

    const ANCHOR_CHAINS: ([u32; BUCKETS], [u32; N_ANCHORS]) = chain(&anchor_buckets());
    static ANCHOR_NEXT: [u32; N_ANCHORS] = ANCHOR_CHAINS.1;

    // Names: every name pattern lower-cased into one buffer (`super::lower_of`).
    const fn name_bytes() -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < P.len() {
            if matches!(kind(P[i]), Kind::Name) {
                n += P[i].len();
            }
            i += 1;
        }
        n
    }

    const fn name_count() -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < P.len() {
            if matches!(kind(P[i]), Kind::Name) {
                n += 1;
            }
            i += 1;
        }
        n
    }

    const N_NAME_BYTES: usize = name_bytes();
    const N_NAMES: usize = name_count();

    const fn lowered() -> [u8; N_NAME_BYTES] {
        let mut out = [0; N_NAME_BYTES];
        let mut k = 0;
        let mut i = 0;
        while i < P.len() {
            if matches!(kind(P[i]), Kind::Name) {
                let b = P[i].as_bytes();
                let mut j = 0;
                while j < b.len() {
                    out[k] = b[j].to_ascii_lowercase();
                    k += 1;
                    j += 1;
                }
            }
            i += 1;
        }
        out
    }

    const LOWERED: &[u8; N_NAME_BYTES] = &lowered();
    /// The lower-cased names' text, what [`Comp::Lower`] points into.
    pub(super) static LOWER: &str = sub_bytes(LOWERED, 0, N_NAME_BYTES);
    /// The table's patterns, what [`Comp::Built`] points into.
    pub(super) static PATTERNS: &[&str] = P;
    // Offsets fit a `u16`.
    const _: () = assert!(P.len() <= u16::MAX as usize && N_NAME_BYTES <= u16::MAX as usize);
    const _: () = {
        let mut i = 0;
        while i < P.len() {
            assert!(P[i].len() <= u16::MAX as usize);
            i += 1;
        }
    };

    /// The lower-cased names as (start, end) in [`LOWERED`].
    const fn name_spans() -> [(usize, usize); N_NAMES] {
        let mut out = [(0, 0); N_NAMES];
        let (mut k, mut at) = (0, 0);
        let mut i = 0;
        while i < P.len() {
            if matches!(kind(P[i]), Kind::Name) {
                out[k] = (at, at + P[i].len());
                at += P[i].len();
                k += 1;
            }
            i += 1;
        }
        out
    }

    const SPANS: [(usize, usize); N_NAMES] = name_spans();

    const fn name(i: usize) -> &'static [u8] {
        sub_bytes(LOWERED, SPANS[i].0, SPANS[i].1).as_bytes()
    }

    /// `super::NameShapes::add`: the shape of a lower-cased name, and the part of it kept.
    #[derive(Clone, Copy, PartialEq)]
    enum Shape {
        Exact,
        Suffix,
        Prefix,
        General,
    }

    const fn shape(n: &[u8]) -> Shape {
        if !wild(n) {
            return Shape::Exact;
        }
        if !n.is_empty() && n[0] == b'*' && n.len() > 1 && !wild(n.split_at(1).1) {
            return Shape::Suffix;
        }
        if !n.is_empty()
            && n[n.len() - 1] == b'*'
            && n.len() > 1
            && !wild(n.split_at(n.len() - 1).0)
        {
            return Shape::Prefix;
        }
        Shape::General
    }

    const fn shape_count(s: Shape) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < N_NAMES {
            if same(shape(name(i)), s) {
                n += 1;
            }
            i += 1;
        }
        n
    }

    const N_EXACT: usize = shape_count(Shape::Exact);
    const N_SUFFIX: usize = shape_count(Shape::Suffix);
    const N_PREFIX: usize = shape_count(Shape::Prefix);
    const N_GENERAL: usize = shape_count(Shape::General);

    const fn same(a: Shape, b: Shape) -> bool {
        a as u8 == b as u8
    }

    /// The part of name `n` of shape `s` that is kept: without the `*` of a suffix or prefix.
    const fn kept(n: &'static [u8], s: Shape) -> &'static [u8] {
        let (start, end) = match s {
            Shape::Suffix => (1, n.len()),
            Shape::Prefix => (0, n.len() - 1),
            _ => (0, n.len()),
        };
        sub_bytes(n, start, end).as_bytes()
    }

    /// The names of shape `s`, their kept parts.
    const fn of_shape<const N: usize>(s: Shape) -> [Comp; N] {
        let mut out = [EMPTY; N];
        let (mut k, mut i) = (0, 0);
        while i < N_NAMES {
            if same(shape(name(i)), s) {
                let (start, end) = match s {
                    Shape::Suffix => (SPANS[i].0 + 1, SPANS[i].1),
                    Shape::Prefix => (SPANS[i].0, SPANS[i].1 - 1),
                    _ => SPANS[i],
                };
                let c = Comp::Lower {
                    start: start as u16,
                    end: end as u16,
                };
                put(&mut out, k, c);
                k += 1;
            }
            i += 1;
        }
        out
    }

    /// The buckets of the names of shape `s` (`super::NameShapes::add`).
    const fn buckets_of_shape<const N: usize>(s: Shape) -> [usize; N] {
        let mut at = [NONE as usize; N];
        let (mut k, mut i) = (0, 0);
        while i < N_NAMES {
            if same(shape(name(i)), s) {
                let b = kept(name(i), s);
                at[k] = match s {
                    Shape::Exact => hash(b, true),
                    Shape::Suffix => (b[b.len() - 1].to_ascii_lowercase() as usize) & (BUCKETS - 1),
                    Shape::Prefix => (b[0].to_ascii_lowercase() as usize) & (BUCKETS - 1),
                    Shape::General => NONE as usize,
                };
                k += 1;
            }
            i += 1;
        }
        at
    }

    const fn make_names() -> [Comp; N_NAMES] {
        let mut out = [EMPTY; N_NAMES];
        let mut i = 0;
        while i < N_NAMES {
            let c = Comp::Lower {
                start: SPANS[i].0 as u16,
                end: SPANS[i].1 as u16,
            };
            put(&mut out, i, c);
            i += 1;
        }
        out
    }

    pub(super) static COMPS: [Comp; N_COMPS] = make_comps();
    pub(super) static ANCHORS: [Anchor; N_ANCHORS] = make_anchors();
    pub(super) static WILD: [u32; N_WILD] = make_wild();
    pub(super) const ANCHORS_AT: Chains = Chains {
        heads: ANCHOR_CHAINS.0,
        next: Cow::Borrowed(&ANCHOR_NEXT),
    };
    pub(super) static NAMES: [Comp; N_NAMES] = make_names();

    pub(super) static EXACT: [Comp; N_EXACT] = of_shape(Shape::Exact);
    pub(super) static SUFFIX: [Comp; N_SUFFIX] = of_shape(Shape::Suffix);
    pub(super) static PREFIX: [Comp; N_PREFIX] = of_shape(Shape::Prefix);
    pub(super) static GENERAL: [Comp; N_GENERAL] = of_shape(Shape::General);
    const EXACT_CHAINS: ([u32; BUCKETS], [u32; N_EXACT]) = chain(&buckets_of_shape(Shape::Exact));
    const SUFFIX_CHAINS: ([u32; BUCKETS], [u32; N_SUFFIX]) =
        chain(&buckets_of_shape(Shape::Suffix));
    const PREFIX_CHAINS: ([u32; BUCKETS], [u32; N_PREFIX]) =
        chain(&buckets_of_shape(Shape::Prefix));
    static EXACT_NEXT: [u32; N_EXACT] = EXACT_CHAINS.1;
    static SUFFIX_NEXT: [u32; N_SUFFIX] = SUFFIX_CHAINS.1;
    static PREFIX_NEXT: [u32; N_PREFIX] = PREFIX_CHAINS.1;
    pub(super) const EXACT_AT: Chains = Chains {
        heads: EXACT_CHAINS.0,
        next: Cow::Borrowed(&EXACT_NEXT),
    };
    pub(super) const SUFFIX_AT: Chains = Chains {
        heads: SUFFIX_CHAINS.0,
        next: Cow::Borrowed(&SUFFIX_NEXT),
    };
    pub(super) const PREFIX_AT: Chains = Chains {
        heads: PREFIX_CHAINS.0,
        next: Cow::Borrowed(&PREFIX_NEXT),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The cheap reject never rejects a name the matcher would match: any name and pattern
        /// over a small alphabet (so matches happen), in both cases.
        #[test]
        fn tail_fits_whenever_the_name_matches(
            name in "[aAbB.*?-]{0,12}",
            pattern in "[ab.*?-]{0,8}",
        ) {
            let (n, p) = (name.as_bytes(), pattern.as_bytes());
            if literal_matches_folded(n, p) {
                prop_assert!(tail_fits(n, p), "{name} matches {pattern}");
            }
        }
    }

    /// `matches` as it was before the directories were prepared (`bases`): every directory's
    /// components joined with the path's, normalised, then the anchored and name checks.
    fn matches_joined(s: &SecretPaths, path: &str, cwds: &[String], glob: bool) -> bool {
        let own: Vec<&str> = path.split('/').filter(is_component).collect();
        let unknown_base = !path.starts_with('/') && (cwds.is_empty() || own.contains(&".."));
        if s.named(&own, glob) || s.holds_tail(&own, unknown_base, glob) {
            return true;
        }
        let check = |abs: Vec<&str>| {
            let abs = normalize(abs);
            s.anchored_prefix(&abs, glob) || s.named(&abs, glob)
        };
        if path.starts_with('/') {
            return check(own);
        }
        cwds.iter().any(|cwd| {
            let mut abs: Vec<&str> = cwd.split('/').filter(is_component).collect();
            abs.extend(own.iter().copied());
            check(abs)
        })
    }

    /// Paths over components that meet the table (secret names, secret directories, the home
    /// directory's, globs, `.` and `..`, empty ones).
    fn path() -> impl Strategy<Value = String> {
        let comp = prop::sample::select(vec![
            "",
            ".",
            "..",
            "home",
            "me",
            ".ssh",
            "id_rsa",
            ".env",
            ".env.example",
            "src",
            "*",
            "*.pem",
            "x?",
            ".aws",
            "credentials",
            "etc",
            "shadow",
            "proj",
            "a.json",
            ".E*",
        ]);
        (any::<bool>(), prop::collection::vec(comp, 0..6)).prop_map(|(abs, comps)| {
            let joined = comps.join("/");
            if abs {
                format!("/{joined}")
            } else {
                joined
            }
        })
    }

    proptest! {
        /// Prepared directories give every answer the joined walk gives, for literal paths and
        /// globs, with no, one or two directories (secret ones, ones with `..`, relative ones).
        #[test]
        fn prepared_bases_answer_as_the_joined_walk(
            p in path(),
            cwds in prop::collection::vec(path(), 0..3),
            glob in any::<bool>(),
        ) {
            let s = SecretPaths::new(crate::secrets::SECRET_PATTERNS, "/home/me");
            prop_assert_eq!(
                s.matches_from(&p, &s.bases(&cwds), glob),
                matches_joined(&s, &p, &cwds, glob),
                "{} in {:?}", p, cwds
            );
        }

        /// The one-pass split is `split('/')` without the empty and `.` components.
        #[test]
        fn components_as_the_split_gives_them(p in "[a./]{0,12}") {
            let want: Vec<&str> = p.split('/').filter(is_component).collect();
            prop_assert_eq!(components(&p), want);
        }
    }

    #[test]
    fn tail_fits_rejects_a_name_without_the_patterns_end() {
        assert!(tail_fits(
            b"My-Service-Account.JSON",
            b"*service-account*.json"
        ));
        assert!(!tail_fits(
            b"service-account.yaml",
            b"*service-account*.json"
        ));
        assert!(!tail_fits(b"json", b"*.json"));
        assert!(tail_fits(b"anything", b"a*"));
    }
}
