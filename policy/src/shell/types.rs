//! The data model of a shell analysis, shared by the read classifier, the decision engine, the hook
//! and the audit.

use serde::{Deserialize, Serialize};

/// Bounds on what the analyzer accepts. Anything beyond them is [`Unanalyzable`], never a guess.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Longest command string accepted, in bytes: a huge command is a denial-of-review vector.
    pub max_len: usize,
    /// Deepest nesting of substitutions / `bash -c` re-entries: bounds recursion on hostile input.
    pub max_depth: usize,
    /// Most simple commands in one analysis: bounds the work of every later stage.
    pub max_commands: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_len: 64 * 1024,
            max_depth: 16,
            max_commands: 512,
        }
    }
}

/// The result of analysing one command string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Analysis {
    /// The string parsed; these are all the simple commands that could execute.
    Parsed(Script),
    /// The string cannot be analysed with confidence. Terminal: never allowed.
    Unanalyzable(Unanalyzable),
}

/// Why a command string could not be analysed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum Unanalyzable {
    /// Longer than [`Limits::max_len`].
    TooLarge { len: usize, max: usize },
    /// Nesting deeper than [`Limits::max_depth`].
    TooDeep { max: usize },
    /// More simple commands than [`Limits::max_commands`].
    TooManyCommands { max: usize },
    /// The shell grammar rejected it (including unterminated quotes, heredocs, substitutions).
    ParseError { message: String },
    /// Contains a byte the analyzer refuses to reason about (NUL, invalid UTF-8 after decoding).
    BadInput { message: String },
}

/// Every simple command a string would execute, in source order (outer before inner).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Script {
    pub commands: Vec<SimpleCommand>,
    /// Functions defined in the string: calling one of these names runs its (already listed) body.
    pub functions: Vec<String>,
}

/// One simple command, after wrapper unwrapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimpleCommand {
    /// The argv as far as it is static; `argv[0]` is the command that really runs (wrappers removed).
    /// Empty when the command is only assignments and/or redirections.
    pub argv: Vec<Word>,
    /// Wrappers that were peeled off, outermost first, with their own argv (`["sudo", "-u", "x"]`).
    pub wrappers: Vec<Vec<Word>>,
    /// `NAME=value` prefixes (including those given to `env`).
    pub env: Vec<Assignment>,
    /// Redirections attached to this command (and to the compound command enclosing it).
    pub redirects: Vec<Redirect>,
    /// Where in the string it sits: top level, inside `$( )`, a `bash -c` re-entry, ...
    pub context: Context,
}

/// A word of argv: either fully known, or containing an expansion whose value is unknown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "text", rename_all = "snake_case")]
pub enum Word {
    /// Quote removal done; the exact string the program receives. One exception: an unquoted
    /// leading `~` (alone or `~/…`) is kept as `~`, for the consumer to resolve against the home
    /// directory it knows (the analyzer has none).
    Static(String),
    /// Contains `$VAR`, `$( )`, globs, `~user`, arithmetic, ...: the raw source text.
    Dynamic(String),
}

/// `NAME=value` before a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub name: String,
    pub value: Word,
}

/// A redirection and its target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redirect {
    /// The explicit fd (`2>`), if any.
    pub fd: Option<u32>,
    pub kind: RedirectKind,
    /// The file (or fd number for duplications, or the heredoc/here-string body).
    pub target: Word,
}

/// What a redirection does to its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedirectKind {
    /// `<`
    Read,
    /// `>` and `>|`
    Write,
    /// `>>`
    Append,
    /// `<>`
    ReadWrite,
    /// `&>` / `>&file`: stdout and stderr to a file.
    WriteBoth,
    /// `&>>`
    AppendBoth,
    /// `>&N`, `<&N`, `>&-`: fd duplication or close, no file touched.
    Duplicate,
    /// `<<` / `<<-`: the body is in `target`.
    HereDoc,
    /// `<<<`: the word is in `target`.
    HereString,
}

impl RedirectKind {
    /// Does this redirection open its target for writing?
    pub fn writes(self) -> bool {
        match self {
            RedirectKind::Write
            | RedirectKind::Append
            | RedirectKind::ReadWrite
            | RedirectKind::WriteBoth
            | RedirectKind::AppendBoth => true,
            RedirectKind::Read
            | RedirectKind::Duplicate
            | RedirectKind::HereDoc
            | RedirectKind::HereString => false,
        }
    }
}

/// Where a simple command was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Context {
    /// Directly in the string (lists, pipelines, subshells, groups, if/for/while/case bodies).
    TopLevel,
    /// Inside `$( )` or backticks.
    CommandSubstitution,
    /// Inside `<( )` or `>( )`.
    ProcessSubstitution,
    /// Inside a function body defined in the string.
    FunctionBody,
    /// Re-entered from `bash -c`, `sh -c`, `eval`, or a heredoc / here-string fed to a shell.
    Reentered,
}

impl Word {
    /// The value when it is fully known.
    pub fn as_static(&self) -> Option<&str> {
        match self {
            Word::Static(s) => Some(s),
            Word::Dynamic(_) => None,
        }
    }

    /// The static value, or the raw source text of a dynamic word.
    pub fn text(&self) -> &str {
        match self {
            Word::Static(s) | Word::Dynamic(s) => s,
        }
    }

    /// True for [`Word::Dynamic`].
    pub fn is_dynamic(&self) -> bool {
        matches!(self, Word::Dynamic(_))
    }
}
