//! Turning one shell word into a [`Word`]: quote removal when the value is static, the raw text when
//! it is not, and the code hidden inside it (command substitutions) for the walker to analyse.
//!
//! Tilde: an unquoted `~` at the start of a word (alone or as `~/…`) stays **static** with the `~`
//! kept literally: the analyzer has no home directory, and consumers that do (the read classifier)
//! resolve it. `~user`, `~+`, `~-` and `~N` are dynamic.

use brush_parser::word::{ParameterExpr, WordPiece, WordPieceWithSource};
use brush_parser::ParserOptions;

use super::types::{Unanalyzable, Word};

/// Code found inside a word that runs when the word is expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Embedded {
    /// `$( … )` or backticks: a script to analyse.
    CommandSubstitution(String),
    /// Arithmetic (or a parameter operator evaluated arithmetically) that references variables:
    /// bash evaluates variable *values* as expressions, and `a[$(cmd)]` inside one runs `cmd`.
    Arithmetic(String),
    /// A `${x@P}` prompt expansion: runs substitutions found in the variable's value.
    PromptExpansion(String),
}

/// The outcome of converting one word.
#[derive(Debug)]
pub(crate) struct Converted {
    pub word: Word,
    pub embedded: Vec<Embedded>,
}

/// Parse and convert one word (as the tokenizer gave it, quotes included).
pub(crate) fn convert(raw: &str, options: &ParserOptions) -> Result<Converted, Unanalyzable> {
    if plain(raw) {
        return Ok(Converted {
            word: Word::Static(raw.to_owned()),
            embedded: Vec::new(),
        });
    }
    convert_parsed(raw, options)
}

/// Is `raw` a word of only characters that no quoting, expansion, globbing or splitting
/// touches (ASCII letters and digits, `-_./,:+@%=`; not empty)? Such a word is one unquoted
/// text piece without a glob or brace, so [`convert_parsed`] makes it static and itself: the
/// answer without brush's word parser (~2.5 k instructions a word; most words of most commands
/// are plain). `tests::plain_words_convert_as_parsed` holds the two to each other.
fn plain(raw: &str) -> bool {
    !raw.is_empty()
        && raw.bytes().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(
                    c,
                    b'-' | b'_' | b'.' | b'/' | b',' | b':' | b'+' | b'@' | b'%' | b'='
                )
        })
}

/// [`convert`] through brush's word parser, whatever the word.
fn convert_parsed(raw: &str, options: &ParserOptions) -> Result<Converted, Unanalyzable> {
    let pieces = brush_parser::word::parse(raw, options).map_err(|e| Unanalyzable::ParseError {
        message: format!("cannot parse word {raw:?}: {e}"),
    })?;
    let mut out = Builder::default();
    out.pieces(&pieces, false, options)?;
    Ok(out.finish(raw))
}

/// Convert a heredoc body whose delimiter was unquoted (so `$`, backticks and `\` are live).
pub(crate) fn convert_heredoc(
    raw: &str,
    options: &ParserOptions,
) -> Result<Converted, Unanalyzable> {
    let pieces =
        brush_parser::word::parse_heredoc(raw, options).map_err(|e| Unanalyzable::ParseError {
            message: format!("cannot parse heredoc body: {e}"),
        })?;
    let mut out = Builder::default();
    // Heredoc text is not subject to globbing or brace expansion: treat it as quoted.
    out.pieces(&pieces, true, options)?;
    Ok(out.finish(raw))
}

#[derive(Default)]
struct Builder {
    text: String,
    dynamic: bool,
    embedded: Vec<Embedded>,
}

impl Builder {
    fn finish(self, raw: &str) -> Converted {
        let word = if self.dynamic {
            Word::Dynamic(raw.to_owned())
        } else {
            Word::Static(self.text)
        };
        Converted {
            word,
            embedded: self.embedded,
        }
    }

    fn pieces(
        &mut self,
        pieces: &[WordPieceWithSource],
        quoted: bool,
        options: &ParserOptions,
    ) -> Result<(), Unanalyzable> {
        for (i, p) in pieces.iter().enumerate() {
            match &p.piece {
                WordPiece::Text(t) => {
                    if !quoted && (has_glob(t) || has_brace_expansion(t)) {
                        self.dynamic = true;
                    }
                    self.text.push_str(t);
                }
                WordPiece::SingleQuotedText(t) => self.text.push_str(t),
                WordPiece::AnsiCQuotedText(t) => match decode_ansi_c(t) {
                    Some(s) => self.text.push_str(&s),
                    None => self.dynamic = true,
                },
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, true, options)?;
                }
                WordPiece::TildeExpansion(t) => {
                    use brush_parser::word::TildeExpr;
                    if i == 0 && matches!(t, TildeExpr::Home) {
                        self.text.push('~');
                    } else {
                        self.dynamic = true;
                    }
                }
                WordPiece::ParameterExpansion(e) => {
                    self.dynamic = true;
                    self.parameter(e, options)?;
                }
                WordPiece::CommandSubstitution(c) => {
                    self.dynamic = true;
                    self.embedded.push(Embedded::CommandSubstitution(c.clone()));
                }
                WordPiece::BackquotedCommandSubstitution(c) => {
                    self.dynamic = true;
                    self.embedded
                        .push(Embedded::CommandSubstitution(unescape_backquoted(c)));
                }
                WordPiece::EscapeSequence(s) => {
                    let c = s.strip_prefix('\\').unwrap_or(s);
                    // `\<newline>` is a line continuation: it disappears.
                    if c != "\n" {
                        self.text.push_str(c);
                    }
                }
                WordPiece::ArithmeticExpression(e) => {
                    self.dynamic = true;
                    self.arithmetic(&e.value, options)?;
                }
            }
        }
        Ok(())
    }

    /// Nested text inside `${…}` (defaults, patterns, replacements) is itself a word: look for
    /// substitutions in it; arithmetic parts (offsets, lengths, indices) are arithmetic.
    fn parameter(
        &mut self,
        e: &ParameterExpr,
        options: &ParserOptions,
    ) -> Result<(), Unanalyzable> {
        use brush_parser::word::{Parameter, ParameterTransformOp};
        let param = |p: &Parameter| match p {
            Parameter::NamedWithIndex { index, .. } => Some(index.clone()),
            _ => None,
        };
        let mut nested: Vec<&str> = Vec::new();
        let mut arith: Vec<String> = Vec::new();
        let p = match e {
            ParameterExpr::Parameter { parameter, .. }
            | ParameterExpr::ParameterLength { parameter, .. } => parameter,
            ParameterExpr::UseDefaultValues {
                parameter,
                default_value: v,
                ..
            }
            | ParameterExpr::AssignDefaultValues {
                parameter,
                default_value: v,
                ..
            }
            | ParameterExpr::IndicateErrorIfNullOrUnset {
                parameter,
                error_message: v,
                ..
            }
            | ParameterExpr::UseAlternativeValue {
                parameter,
                alternative_value: v,
                ..
            }
            | ParameterExpr::RemoveSmallestSuffixPattern {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::RemoveLargestSuffixPattern {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::RemoveSmallestPrefixPattern {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::RemoveLargestPrefixPattern {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::UppercaseFirstChar {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::UppercasePattern {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::LowercaseFirstChar {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::LowercasePattern {
                parameter,
                pattern: v,
                ..
            } => {
                if let Some(v) = v {
                    nested.push(v);
                }
                parameter
            }
            ParameterExpr::ReplaceSubstring {
                parameter,
                pattern,
                replacement,
                ..
            } => {
                nested.push(pattern);
                if let Some(r) = replacement {
                    nested.push(r);
                }
                parameter
            }
            ParameterExpr::Substring {
                parameter,
                offset,
                length,
                ..
            } => {
                arith.push(offset.value.clone());
                if let Some(l) = length {
                    arith.push(l.value.clone());
                }
                parameter
            }
            ParameterExpr::Transform { parameter, op, .. } => {
                if matches!(op, ParameterTransformOp::PromptExpand) {
                    self.embedded
                        .push(Embedded::PromptExpansion(parameter.to_string()));
                }
                parameter
            }
            ParameterExpr::VariableNames { .. } | ParameterExpr::MemberKeys { .. } => return Ok(()),
        };
        if let Some(index) = param(p) {
            arith.push(index);
        }
        for n in nested {
            if needs_word_parse(n) {
                let c = convert(n, options)?;
                self.embedded.extend(c.embedded);
            }
        }
        for a in arith {
            self.arithmetic(&a, options)?;
        }
        Ok(())
    }

    /// Arithmetic text: substitutions in it run; identifiers make it unpredictable (see
    /// [`Embedded::Arithmetic`]). Pure numeric arithmetic is harmless.
    fn arithmetic(&mut self, expr: &str, options: &ParserOptions) -> Result<(), Unanalyzable> {
        if needs_word_parse(expr) {
            let c = convert(&format!("\"{}\"", expr.replace('"', "")), options)?;
            self.embedded.extend(c.embedded);
        }
        if arithmetic_references_variables(expr) {
            self.embedded.push(Embedded::Arithmetic(expr.to_owned()));
        }
        Ok(())
    }
}

/// Does this text contain anything that expands (so a word parse could find substitutions)?
fn needs_word_parse(s: &str) -> bool {
    s.contains('$') || s.contains('`')
}

/// True when an arithmetic expression names a variable or expands something.
pub(crate) fn arithmetic_references_variables(expr: &str) -> bool {
    let b = expr.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'$' || c == b'`' || c == b'[' {
            return true;
        }
        if c.is_ascii_digit() {
            // Skip a numeric literal: 0x1f, 2#101, 10 — letters inside a literal are not names.
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'#' || b[i] == b'_') {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            return true;
        }
        i += 1;
    }
    false
}

/// Unquoted glob characters (including extglob's `@(…)`, `!(…)`, `+(…)`).
fn has_glob(t: &str) -> bool {
    let bracket = t.find('[').is_some_and(|i| t[i + 1..].contains(']'));
    bracket
        || t.bytes().any(|c| matches!(c, b'*' | b'?'))
        || t.contains("@(")
        || t.contains("!(")
        || t.contains("+(")
}

/// `{a,b}` or `{1..3}` in unquoted text. `{}` and `{x}` are literal.
fn has_brace_expansion(t: &str) -> bool {
    let b = t.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c != b'{' {
            continue;
        }
        let rest = &t[i + 1..];
        let Some(end) = rest.find('}') else { continue };
        let inner = &rest[..end];
        if inner.contains(',') || inner.contains("..") || inner.contains('{') {
            return true;
        }
    }
    false
}

/// Inside backticks a backslash quotes only `$`, `` ` `` and `\` (brush already removed the
/// backslash before `` ` ``).
fn unescape_backquoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(&n) = chars.peek() {
                if n == '\\' || n == '$' {
                    out.push(n);
                    chars.next();
                    continue;
                }
            }
        }
        out.push(c);
    }
    out
}

/// Decode the body of `$'…'` as bash does. `None` when the result is not representable as a
/// static string (a NUL truncates it in bash; an invalid code point).
pub(crate) fn decode_ansi_c(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    let hex = |it: &mut std::iter::Peekable<std::str::Chars<'_>>, max: usize| -> Option<u32> {
        let mut v: u32 = 0;
        let mut n = 0;
        while n < max {
            match it.peek().and_then(|c| c.to_digit(16)) {
                Some(d) => {
                    v = v * 16 + d;
                    it.next();
                    n += 1;
                }
                None => break,
            }
        }
        (n > 0).then_some(v)
    };
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = it.next() else {
            out.push('\\');
            break;
        };
        let ch = match e {
            'a' => '\x07',
            'b' => '\x08',
            'e' | 'E' => '\x1b',
            'f' => '\x0c',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\x0b',
            '\\' => '\\',
            '\'' => '\'',
            '"' => '"',
            '?' => '?',
            '0'..='7' => {
                let mut v = e.to_digit(8)?;
                for _ in 0..2 {
                    match it.peek().and_then(|c| c.to_digit(8)) {
                        Some(d) => {
                            v = v * 8 + d;
                            it.next();
                        }
                        None => break,
                    }
                }
                char::from_u32(v & 0xff)?
            }
            'x' => match hex(&mut it, 2) {
                Some(v) => char::from_u32(v)?,
                None => {
                    out.push_str("\\x");
                    continue;
                }
            },
            'u' => char::from_u32(hex(&mut it, 4)?)?,
            'U' => char::from_u32(hex(&mut it, 8)?)?,
            'c' => {
                let n = it.next()?;
                char::from_u32((n as u32) & 0x1f)?
            }
            other => {
                out.push('\\');
                other
            }
        };
        if ch == '\0' {
            return None;
        }
        out.push(ch);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn same(raw: &str) -> Result<(), TestCaseError> {
        let options = ParserOptions::default();
        let fast = convert(raw, &options).map(|c| (c.word, c.embedded));
        let parsed = convert_parsed(raw, &options).map(|c| (c.word, c.embedded));
        prop_assert_eq!(fast, parsed, "{:?}", raw);
        Ok(())
    }

    proptest! {
        /// Every word over the plain characters, and every word over them and the characters
        /// that make a word not plain (quotes, `$`, globs, braces, `~`, `\`, extglob, spaces),
        /// converts as brush's word parser and the builder make it.
        #[test]
        fn plain_words_convert_as_parsed(raw in "[a-zA-Z0-9_./,:+@%=-]{1,16}") {
            prop_assert!(plain(&raw));
            same(&raw)?;
        }

        #[test]
        fn other_words_convert_as_parsed(raw in "[a-z0-9_./,:+@%=~*?{}()\\[\\]$'\"`!#& -]{0,12}") {
            same(&raw)?;
        }
    }

    #[test]
    fn plain_is_only_what_nothing_touches() {
        for w in [
            "ls",
            "-la",
            "--stat",
            "src/main.rs",
            "a=b",
            "HEAD:x",
            "+x",
            "@a",
            "%1",
            "1,2",
        ] {
            assert!(plain(w), "{w}");
        }
        for w in [
            "", "~", "~/x", "*.rs", "a?", "[ab]", "{a,b}", "$x", "'q'", "\\n", "@(x)", "a b", "é",
        ] {
            assert!(!plain(w), "{w}");
        }
    }
}
