//! Command patterns of the tier map: an argv prefix with `*` wildcards, and how they match.
//!
//! A pattern is split on ASCII whitespace into words. Each word is one of:
//!
//! - a literal, matching exactly that argv word (`\*` is a literal star, `\\` a literal backslash);
//! - a lone `*` as the **last** word: zero or more further argv words (`cargo build *` matches
//!   `cargo build` and `cargo build --release -p x`);
//! - a lone `*` anywhere else: exactly one argv word (`git * --help`);
//! - a word containing `*` with other characters: a glob over that single argv word, where `*`
//!   matches any run of characters, `/` included (`--features=*`, `/*`).
//!
//! Without a trailing `*` the pattern matches only argv of exactly its length. The command word
//! (the first) must be a plain literal. Quotes, `$`, backticks and shell operators are rejected: a
//! pattern matches the argv of one simple command after the shell has done its work, so a quote or
//! a `|` in a pattern could never match and would only give a false sense of coverage.

use std::fmt;
use std::str::FromStr;

/// Why a pattern was rejected. Messages are lowercase fragments for a diagnostic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Nothing between the backticks.
    #[error("empty pattern")]
    Empty,
    /// `* foo` or `ca*go build`: a wildcard command word would cover unknown programs.
    #[error("the command word `{0}` must be literal, without `*`")]
    CommandNotLiteral(String),
    /// `curl * | sh`: operators separate commands; each command is matched on its own.
    #[error(
        "`{0}` is a shell operator; a pattern matches the argv of one command, so list each command on its own"
    )]
    ShellOperator(String),
    /// Quotes never survive into argv.
    #[error("`{0}` contains a quote; patterns are split on whitespace and match argv after quote removal")]
    Quote(String),
    /// `$VAR`, `$(...)` and backticks are expansions the shell performs before argv exists.
    #[error("`{0}` contains `$`; patterns match argv after expansion, write the literal value")]
    Expansion(String),
    /// `**` would read as a recursive glob; it means nothing more than `*` here.
    #[error("`{0}` is not a wildcard here; use a single `*`")]
    DoubleStar(String),
    /// A backslash may only escape `*` or `\`.
    #[error("`{0}` has a backslash that escapes neither `*` nor `\\`")]
    BadEscape(String),
    /// Tabs are separators; other control characters are never intended.
    #[error("pattern contains a control character")]
    ControlChar,
}

/// One word of a [`Pattern`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternWord {
    /// Matches exactly this argv word (escapes already resolved).
    Literal(String),
    /// Matches one argv word: the literal pieces between `*`s, in order, first anchored at the
    /// start and last at the end. Always at least two pieces.
    Glob(Vec<String>),
    /// A lone `*` before the last position: exactly one argv word, any value.
    One,
    /// A lone `*` in the last position: zero or more argv words.
    Rest,
}

/// An argv-prefix pattern with `*` wildcards, as written between backticks in the tier map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// The pattern exactly as written (words joined by single spaces), for rule names and audit.
    text: String,
    /// The parsed words; the first is always a [`PatternWord::Literal`].
    words: Vec<PatternWord>,
}

impl Pattern {
    /// Parses a pattern written between backticks.
    pub fn parse(text: &str) -> Result<Pattern, PatternError> {
        if text.chars().any(|c| c.is_control() && c != '\t') {
            return Err(PatternError::ControlChar);
        }
        let raw: Vec<&str> = text.split_ascii_whitespace().collect();
        if raw.is_empty() {
            return Err(PatternError::Empty);
        }
        let last = raw.len() - 1;
        let mut words = Vec::with_capacity(raw.len());
        for (i, w) in raw.iter().enumerate() {
            let word = parse_word(w, i == last)?;
            if i == 0 && !matches!(word, PatternWord::Literal(_)) {
                return Err(PatternError::CommandNotLiteral((*w).to_owned()));
            }
            words.push(word);
        }
        Ok(Pattern {
            text: raw.join(" "),
            words,
        })
    }

    /// The pattern as written, words joined by single spaces.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The parsed words.
    pub fn words(&self) -> &[PatternWord] {
        &self.words
    }

    /// The literal command word (`argv[0]`) this pattern is about.
    pub fn command(&self) -> &str {
        match &self.words[0] {
            PatternWord::Literal(s) => s,
            // Pattern::parse guarantees a literal first word.
            PatternWord::Glob(_) | PatternWord::One | PatternWord::Rest => "",
        }
    }

    /// Whether `argv` matches exactly: `argv[0]` must equal the command word (so `./git` is not
    /// `git`), the following words must match word by word, and without a trailing `*` the lengths
    /// must be equal.
    pub fn matches(&self, argv: &[&str]) -> bool {
        self.matches_with(argv, false)
    }

    /// Like [`Pattern::matches`], but a command word without `/` also matches any path ending in
    /// `/<word>` (`/usr/bin/rm`, `./rm`). Used for restricting tiers (ask, deny), where spelling
    /// out the program's path must not dodge the rule.
    pub fn matches_any_command_path(&self, argv: &[&str]) -> bool {
        self.matches_with(argv, true)
    }

    fn matches_with(&self, argv: &[&str], any_path: bool) -> bool {
        let Some((&cmd, rest_argv)) = argv.split_first() else {
            return false;
        };
        let want = self.command();
        let cmd_ok = cmd == want
            || (any_path
                && !want.contains('/')
                && cmd.rsplit_once('/').is_some_and(|(_, base)| base == want));
        if !cmd_ok {
            return false;
        }
        let pat = &self.words[1..];
        let (fixed, open) = match pat.last() {
            Some(PatternWord::Rest) => (&pat[..pat.len() - 1], true),
            _ => (pat, false),
        };
        if rest_argv.len() < fixed.len() || (!open && rest_argv.len() != fixed.len()) {
            return false;
        }
        fixed.iter().zip(rest_argv).all(|(p, a)| word_matches(p, a))
    }
}

impl FromStr for Pattern {
    type Err = PatternError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Pattern::parse(s)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

const OPERATORS: &[&str] = &[
    "|", "||", "&", "&&", ";", ";;", ">", ">>", "<", "<<", "<<<", "|&", "(", ")",
];

fn parse_word(w: &str, is_last: bool) -> Result<PatternWord, PatternError> {
    if OPERATORS.contains(&w)
        || w.starts_with(['>', '<'])
        || w.starts_with("&>")
        || w.starts_with("2>")
    {
        return Err(PatternError::ShellOperator(w.to_owned()));
    }
    if w.contains(['\'', '"']) {
        return Err(PatternError::Quote(w.to_owned()));
    }
    if w.contains(['$', '`']) {
        return Err(PatternError::Expansion(w.to_owned()));
    }
    if w == "*" {
        return Ok(if is_last {
            PatternWord::Rest
        } else {
            PatternWord::One
        });
    }
    // Split on unescaped stars, resolving escapes.
    let mut pieces = vec![String::new()];
    let mut chars = w.chars();
    let mut prev_star = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('*' | '\\')) => {
                    pieces.last_mut().expect("never empty").push(e);
                    prev_star = false;
                }
                _ => return Err(PatternError::BadEscape(w.to_owned())),
            },
            '*' => {
                if prev_star {
                    return Err(PatternError::DoubleStar(w.to_owned()));
                }
                pieces.push(String::new());
                prev_star = true;
            }
            c => {
                pieces.last_mut().expect("never empty").push(c);
                prev_star = false;
            }
        }
    }
    if pieces.len() == 1 {
        Ok(PatternWord::Literal(pieces.pop().expect("one piece")))
    } else {
        Ok(PatternWord::Glob(pieces))
    }
}

fn word_matches(p: &PatternWord, arg: &str) -> bool {
    match p {
        PatternWord::Literal(s) => s == arg,
        PatternWord::One | PatternWord::Rest => true,
        PatternWord::Glob(pieces) => glob_matches(pieces, arg),
    }
}

/// Star-only glob: the first piece is a prefix, the last a suffix, the middle ones appear in order
/// in between. Greedy leftmost search is exact for `*`-only globs and linear in practice.
fn glob_matches(pieces: &[String], s: &str) -> bool {
    let (first, rest) = pieces.split_first().expect("glob has pieces");
    let (last, middle) = rest.split_last().expect("glob has at least two pieces");
    let Some(mut s) = s.strip_prefix(first.as_str()) else {
        return false;
    };
    if s.len() < last.len() || !s.ends_with(last.as_str()) {
        return false;
    }
    s = &s[..s.len() - last.len()];
    for m in middle {
        match s.find(m.as_str()) {
            Some(i) => s = &s[i + m.len()..],
            None => return false,
        }
    }
    true
}
