//! The walker: parse a command string with brush-parser and list every simple command that could
//! execute, descending into every construct that runs code.

use brush_parser::ast;
use brush_parser::ParserOptions;

use super::types::{
    Analysis, Assignment, Context, Limits, Redirect, RedirectKind, Script, SimpleCommand,
    Unanalyzable, Word,
};
use super::words::{self, Embedded};

/// Hard ceiling on lexical nesting handed to the parser, whatever [`Limits::max_depth`] says: the
/// parser recurses once per level and overflows its stack a little beyond 64 levels on a 2 MiB
/// thread (measured, debug build).
const MAX_LEXICAL_NESTING: usize = 48;

/// Ceiling on nested parentheses (subshells, arithmetic, substitutions, extglobs together): see
/// [`prescreen`]. Real commands rarely go past four.
const MAX_PAREN_NESTING: usize = 10;

/// Ceiling on nested `${…}` / `$(…)` expansions, for the same reason (in the word parser).
const MAX_EXPANSION_NESTING: usize = 6;

/// Ceiling on nested `case` statements, for the same reason.
const MAX_CASE_NESTING: usize = 6;

/// Analyse a command string as Claude Code's Bash tool would run it.
///
/// Never panics; anything it cannot analyse with confidence is [`Analysis::Unanalyzable`].
pub fn analyze(cmd: &str, limits: &Limits) -> Analysis {
    if cmd.len() > limits.max_len {
        return Analysis::Unanalyzable(Unanalyzable::TooLarge {
            len: cmd.len(),
            max: limits.max_len,
        });
    }
    let mut walker = Walker {
        limits,
        options: ParserOptions::default(),
        script: Script::default(),
    };
    let frame = Frame {
        depth: 0,
        ctx: Context::TopLevel,
        wrappers: Vec::new(),
        env: Vec::new(),
        redirects: Vec::new(),
    };
    match walker.script(cmd, &frame) {
        Ok(()) => Analysis::Parsed(walker.script),
        Err(u) => Analysis::Unanalyzable(u),
    }
}

pub(super) struct Walker<'l> {
    pub(super) limits: &'l Limits,
    pub(super) options: ParserOptions,
    pub(super) script: Script,
}

/// What the enclosing constructs impose on every command found inside them.
#[derive(Debug, Clone)]
pub(super) struct Frame {
    /// Substitution / re-entry nesting depth (bounded by [`Limits::max_depth`]).
    pub(super) depth: usize,
    pub(super) ctx: Context,
    /// Wrappers of the command that re-entered this script (`sudo bash -c …`).
    pub(super) wrappers: Vec<Vec<Word>>,
    /// Environment prefixes of the command that re-entered this script.
    pub(super) env: Vec<Assignment>,
    /// Redirections of enclosing compound commands (or of the re-entering command).
    pub(super) redirects: Vec<Redirect>,
}

impl Frame {
    fn nested(&self, ctx: Context) -> Frame {
        Frame {
            depth: self.depth + 1,
            ctx,
            wrappers: self.wrappers.clone(),
            env: self.env.clone(),
            // A substitution's output goes to the word, not to the enclosing redirection.
            redirects: Vec::new(),
        }
    }
}

impl Walker<'_> {
    /// Analyse a complete script (the input, a substitution body, a re-entered string).
    pub(super) fn script(&mut self, text: &str, frame: &Frame) -> Result<(), Unanalyzable> {
        if frame.depth > self.limits.max_depth {
            return Err(Unanalyzable::TooDeep {
                max: self.limits.max_depth,
            });
        }
        prescreen(text, self.limits)?;
        let mut parser =
            brush_parser::Parser::new(std::io::Cursor::new(text.as_bytes()), &self.options);
        let program = parser
            .parse_program()
            .map_err(|e| Unanalyzable::ParseError {
                message: e.to_string(),
            })?;
        for list in &program.complete_commands {
            self.compound_list(list, frame)?;
        }
        Ok(())
    }

    /// Record one command; enforces [`Limits::max_commands`].
    pub(super) fn push(&mut self, cmd: SimpleCommand) -> Result<(), Unanalyzable> {
        if self.script.commands.len() >= self.limits.max_commands {
            return Err(Unanalyzable::TooManyCommands {
                max: self.limits.max_commands,
            });
        }
        self.script.commands.push(cmd);
        Ok(())
    }

    fn compound_list(
        &mut self,
        list: &ast::CompoundList,
        frame: &Frame,
    ) -> Result<(), Unanalyzable> {
        for item in &list.0 {
            for (_, pipeline) in &item.0 {
                for command in &pipeline.seq {
                    self.command(command, frame)?;
                }
            }
        }
        Ok(())
    }

    fn with_redirects(
        &mut self,
        redirects: Option<&ast::RedirectList>,
        frame: &Frame,
    ) -> Result<Frame, Unanalyzable> {
        let mut inner = frame.clone();
        if let Some(list) = redirects {
            for r in &list.0 {
                let r = self.redirect(r, frame)?;
                inner.redirects.push(r);
            }
        }
        Ok(inner)
    }

    fn command(&mut self, command: &ast::Command, frame: &Frame) -> Result<(), Unanalyzable> {
        match command {
            ast::Command::Simple(s) => self.simple(s, frame),
            ast::Command::Compound(c, redirects) => {
                let inner = self.with_redirects(redirects.as_ref(), frame)?;
                self.compound(c, &inner)
            }
            ast::Command::Function(f) => {
                self.script.functions.push(f.fname.value.clone());
                let mut inner = frame.clone();
                inner.ctx = Context::FunctionBody;
                let inner = self.with_redirects(f.body.1.as_ref(), &inner)?;
                self.compound(&f.body.0, &inner)
            }
            ast::Command::ExtendedTest(t, redirects) => {
                let inner = self.with_redirects(redirects.as_ref(), frame)?;
                let mut argv = vec![Word::Static("[[".to_owned())];
                self.extended_test(&t.expr, &mut argv, &inner)?;
                argv.push(Word::Static("]]".to_owned()));
                self.push(SimpleCommand {
                    argv,
                    wrappers: inner.wrappers.clone(),
                    env: inner.env.clone(),
                    redirects: inner.redirects.clone(),
                    context: inner.ctx,
                })
            }
        }
    }

    fn compound(&mut self, c: &ast::CompoundCommand, frame: &Frame) -> Result<(), Unanalyzable> {
        match c {
            ast::CompoundCommand::Arithmetic(a) => self.arithmetic(&a.expr.value, frame),
            ast::CompoundCommand::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&e.value, frame)?;
                }
                self.compound_list(&f.body.list, frame)
            }
            ast::CompoundCommand::BraceGroup(b) => self.compound_list(&b.list, frame),
            ast::CompoundCommand::Subshell(s) => self.compound_list(&s.list, frame),
            ast::CompoundCommand::ForClause(f) => {
                // The loop variable is assigned in the current shell: `for PATH in …` matters.
                let value = match &f.values {
                    Some(values) => {
                        let mut texts = Vec::new();
                        let mut dynamic = false;
                        for v in values {
                            match self.word(v, frame)? {
                                Word::Static(s) => texts.push(s),
                                Word::Dynamic(s) => {
                                    dynamic = true;
                                    texts.push(s);
                                }
                            }
                        }
                        let joined = texts.join(" ");
                        if dynamic || texts.len() != 1 {
                            Word::Dynamic(joined)
                        } else {
                            Word::Static(joined)
                        }
                    }
                    None => Word::Dynamic("\"$@\"".to_owned()),
                };
                self.push(SimpleCommand {
                    argv: Vec::new(),
                    wrappers: frame.wrappers.clone(),
                    env: vec![Assignment {
                        name: f.variable_name.clone(),
                        value,
                    }],
                    redirects: Vec::new(),
                    context: frame.ctx,
                })?;
                self.compound_list(&f.body.list, frame)
            }
            ast::CompoundCommand::CaseClause(c) => {
                self.word(&c.value, frame)?;
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(p, frame)?;
                    }
                    if let Some(cmd) = &item.cmd {
                        self.compound_list(cmd, frame)?;
                    }
                }
                Ok(())
            }
            ast::CompoundCommand::IfClause(i) => {
                self.compound_list(&i.condition, frame)?;
                self.compound_list(&i.then, frame)?;
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.compound_list(c, frame)?;
                    }
                    self.compound_list(&e.body, frame)?;
                }
                Ok(())
            }
            ast::CompoundCommand::WhileClause(w) | ast::CompoundCommand::UntilClause(w) => {
                self.compound_list(&w.0, frame)?;
                self.compound_list(&w.1.list, frame)
            }
            ast::CompoundCommand::Coprocess(c) => self.command(&c.body, frame),
        }
    }

    fn extended_test(
        &mut self,
        e: &ast::ExtendedTestExpr,
        argv: &mut Vec<Word>,
        frame: &Frame,
    ) -> Result<(), Unanalyzable> {
        use ast::ExtendedTestExpr as E;
        match e {
            E::And(a, b) | E::Or(a, b) => {
                self.extended_test(a, argv, frame)?;
                argv.push(Word::Static(
                    if matches!(e, E::And(..)) { "&&" } else { "||" }.to_owned(),
                ));
                self.extended_test(b, argv, frame)
            }
            E::Not(a) => {
                argv.push(Word::Static("!".to_owned()));
                self.extended_test(a, argv, frame)
            }
            E::Parenthesized(a) => {
                argv.push(Word::Static("(".to_owned()));
                self.extended_test(a, argv, frame)?;
                argv.push(Word::Static(")".to_owned()));
                Ok(())
            }
            E::UnaryTest(p, w) => {
                argv.push(Word::Static(p.to_string()));
                let word = self.word(w, frame)?;
                if matches!(p, ast::UnaryPredicate::ShellVariableIsSetAndAssigned) {
                    // `-v a[i]` evaluates the subscript arithmetically.
                    self.arithmetic_operand(&word, frame)?;
                }
                argv.push(word);
                Ok(())
            }
            E::BinaryTest(p, l, r) => {
                let l = self.word(l, frame)?;
                let r = self.word(r, frame)?;
                let arithmetic = p.to_string();
                if matches!(
                    arithmetic.as_str(),
                    "-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge"
                ) {
                    self.arithmetic_operand(&l, frame)?;
                    self.arithmetic_operand(&r, frame)?;
                }
                argv.push(l);
                argv.push(Word::Static(arithmetic));
                argv.push(r);
                Ok(())
            }
        }
    }

    /// An operand `[[` evaluates as arithmetic: only an integer literal is predictable.
    fn arithmetic_operand(&mut self, w: &Word, frame: &Frame) -> Result<(), Unanalyzable> {
        let text = match w {
            Word::Static(s) => s,
            Word::Dynamic(s) => s,
        };
        let literal = matches!(w, Word::Static(_))
            && !text.is_empty()
            && text
                .trim_start_matches(['-', '+'])
                .bytes()
                .all(|c| c.is_ascii_digit());
        if literal {
            return Ok(());
        }
        self.embedded(Embedded::Arithmetic(text.clone()), frame)
    }

    /// Arithmetic evaluation (`(( ))`, `$(( ))`, `for ((;;))`).
    fn arithmetic(&mut self, expr: &str, frame: &Frame) -> Result<(), Unanalyzable> {
        if expr.contains('$') || expr.contains('`') {
            let c = words::convert(&format!("\"{}\"", expr.replace('"', "")), &self.options)?;
            for e in c.embedded {
                self.embedded(e, frame)?;
            }
        }
        if words::arithmetic_references_variables(expr) {
            self.embedded(Embedded::Arithmetic(expr.to_owned()), frame)?;
        }
        Ok(())
    }

    /// Code found inside a word.
    fn embedded(&mut self, e: Embedded, frame: &Frame) -> Result<(), Unanalyzable> {
        match e {
            Embedded::CommandSubstitution(text) => {
                self.script(&text, &frame.nested(Context::CommandSubstitution))
            }
            Embedded::Arithmetic(expr) => self.push(SimpleCommand {
                argv: vec![Word::Dynamic(format!("$(({expr}))"))],
                wrappers: frame.wrappers.clone(),
                env: frame.env.clone(),
                redirects: Vec::new(),
                context: frame.ctx,
            }),
            Embedded::PromptExpansion(p) => {
                let name = p
                    .strip_prefix("${")
                    .and_then(|s| s.strip_suffix('}'))
                    .or(p.strip_prefix('$'))
                    .unwrap_or(&p);
                self.push(SimpleCommand {
                    argv: vec![Word::Dynamic(format!("${{{name}@P}}"))],
                    wrappers: frame.wrappers.clone(),
                    env: frame.env.clone(),
                    redirects: Vec::new(),
                    context: frame.ctx,
                })
            }
        }
    }

    /// Convert a word and analyse the code inside it.
    pub(super) fn word(&mut self, w: &ast::Word, frame: &Frame) -> Result<Word, Unanalyzable> {
        let c = words::convert(&w.value, &self.options)?;
        for e in c.embedded {
            self.embedded(e, frame)?;
        }
        Ok(c.word)
    }

    fn process_substitution(
        &mut self,
        kind: &ast::ProcessSubstitutionKind,
        sub: &ast::SubshellCommand,
        frame: &Frame,
    ) -> Result<Word, Unanalyzable> {
        if frame.depth + 1 > self.limits.max_depth {
            return Err(Unanalyzable::TooDeep {
                max: self.limits.max_depth,
            });
        }
        self.compound_list(&sub.list, &frame.nested(Context::ProcessSubstitution))?;
        Ok(Word::Dynamic(format!("{kind}({})", sub.list)))
    }

    fn assignment(
        &mut self,
        a: &ast::Assignment,
        raw: &ast::Word,
        frame: &Frame,
    ) -> Result<Assignment, Unanalyzable> {
        let name = match &a.name {
            ast::AssignmentName::VariableName(n) => n.clone(),
            ast::AssignmentName::ArrayElementName(n, index) => {
                self.arithmetic(index, frame)?;
                format!("{n}[{index}]")
            }
        };
        let value = match &a.value {
            ast::AssignmentValue::Scalar(w) => self.word(w, frame)?,
            ast::AssignmentValue::Array(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        self.word(k, frame)?;
                    }
                    self.word(v, frame)?;
                }
                Word::Dynamic(raw.value.clone())
            }
        };
        let value = if a.append {
            // `X+=v`: the result depends on the old value.
            Word::Dynamic(raw.value.clone())
        } else {
            value
        };
        Ok(Assignment { name, value })
    }

    fn redirect(&mut self, r: &ast::IoRedirect, frame: &Frame) -> Result<Redirect, Unanalyzable> {
        let fd_of = |fd: &Option<i32>| fd.and_then(|f| u32::try_from(f).ok());
        Ok(match r {
            ast::IoRedirect::File(fd, kind, target) => {
                let target_word = match target {
                    ast::IoFileRedirectTarget::Filename(w)
                    | ast::IoFileRedirectTarget::Duplicate(w) => self.word(w, frame)?,
                    ast::IoFileRedirectTarget::Fd(n) => Word::Static(n.to_string()),
                    ast::IoFileRedirectTarget::ProcessSubstitution(k, sub) => {
                        self.process_substitution(k, sub, frame)?
                    }
                };
                let kind = match kind {
                    ast::IoFileRedirectKind::Read => RedirectKind::Read,
                    ast::IoFileRedirectKind::Write | ast::IoFileRedirectKind::Clobber => {
                        RedirectKind::Write
                    }
                    ast::IoFileRedirectKind::Append => RedirectKind::Append,
                    ast::IoFileRedirectKind::ReadAndWrite => RedirectKind::ReadWrite,
                    ast::IoFileRedirectKind::DuplicateInput
                    | ast::IoFileRedirectKind::DuplicateOutput => {
                        let is_fd = match &target_word {
                            Word::Static(s) => {
                                let digits = s.strip_suffix('-').unwrap_or(s);
                                s == "-"
                                    || (!digits.is_empty()
                                        && digits.bytes().all(|c| c.is_ascii_digit()))
                            }
                            Word::Dynamic(_) => false,
                        };
                        if is_fd {
                            RedirectKind::Duplicate
                        } else if matches!(kind, ast::IoFileRedirectKind::DuplicateOutput) {
                            // `>&file` is `&>file`; `>&$x` may be either: assume the write.
                            RedirectKind::WriteBoth
                        } else {
                            RedirectKind::Read
                        }
                    }
                };
                Redirect {
                    fd: fd_of(fd),
                    kind,
                    target: target_word,
                }
            }
            ast::IoRedirect::HereDocument(fd, doc) => {
                let target = if doc.requires_expansion {
                    let c = words::convert_heredoc(&doc.doc.value, &self.options)?;
                    for e in c.embedded {
                        self.embedded(e, frame)?;
                    }
                    c.word
                } else {
                    Word::Static(doc.doc.value.clone())
                };
                Redirect {
                    fd: fd_of(fd),
                    kind: RedirectKind::HereDoc,
                    target,
                }
            }
            ast::IoRedirect::HereString(fd, w) => {
                let target = self.word(w, frame)?;
                Redirect {
                    fd: fd_of(fd),
                    kind: RedirectKind::HereString,
                    target,
                }
            }
            ast::IoRedirect::OutputAndError(w, append) => {
                let target = self.word(w, frame)?;
                let kind = if *append {
                    RedirectKind::AppendBoth
                } else {
                    RedirectKind::WriteBoth
                };
                Redirect {
                    fd: None,
                    kind,
                    target,
                }
            }
        })
    }

    fn item(
        &mut self,
        item: &ast::CommandPrefixOrSuffixItem,
        in_prefix: bool,
        argv: &mut Vec<Word>,
        env: &mut Vec<Assignment>,
        redirects: &mut Vec<Redirect>,
        frame: &Frame,
    ) -> Result<(), Unanalyzable> {
        match item {
            ast::CommandPrefixOrSuffixItem::IoRedirect(r) => {
                redirects.push(self.redirect(r, frame)?)
            }
            ast::CommandPrefixOrSuffixItem::Word(w) => argv.push(self.word(w, frame)?),
            ast::CommandPrefixOrSuffixItem::AssignmentWord(a, raw) => {
                if in_prefix {
                    env.push(self.assignment(a, raw, frame)?);
                } else {
                    // `export A=$(…)`, `declare x=1`: an argument; its substitutions run.
                    argv.push(self.word(raw, frame)?);
                }
            }
            ast::CommandPrefixOrSuffixItem::ProcessSubstitution(k, sub) => {
                argv.push(self.process_substitution(k, sub, frame)?);
            }
        }
        Ok(())
    }

    fn simple(&mut self, s: &ast::SimpleCommand, frame: &Frame) -> Result<(), Unanalyzable> {
        let mut argv = Vec::new();
        let mut env = frame.env.clone();
        let mut redirects = frame.redirects.clone();
        for item in s.prefix.iter().flat_map(|p| p.0.iter()) {
            self.item(item, true, &mut argv, &mut env, &mut redirects, frame)?;
        }
        if let Some(name) = &s.word_or_name {
            argv.push(self.word(name, frame)?);
        }
        for item in s.suffix.iter().flat_map(|p| p.0.iter()) {
            self.item(item, false, &mut argv, &mut env, &mut redirects, frame)?;
        }
        let cmd = SimpleCommand {
            argv,
            wrappers: frame.wrappers.clone(),
            env,
            redirects,
            context: frame.ctx,
        };
        if cmd.argv.is_empty() {
            return self.push(cmd);
        }
        self.resolve(cmd, frame)
    }
}

/// Cheap checks before the parser sees a string: bytes we refuse, and nesting the parser's
/// recursion could not survive.
fn prescreen(text: &str, limits: &Limits) -> Result<(), Unanalyzable> {
    if text.len() > limits.max_len {
        return Err(Unanalyzable::TooLarge {
            len: text.len(),
            max: limits.max_len,
        });
    }
    if text.contains('\0') {
        return Err(Unanalyzable::BadInput {
            message: "contains a NUL byte".to_owned(),
        });
    }
    let b = text.as_bytes();
    // brush-parser's tilde rule parses `~N` with an unchecked integer parse: refuse long digit runs.
    for (i, &c) in b.iter().enumerate() {
        if c == b'~' {
            let rest = &b[i + 1..];
            let rest = rest
                .strip_prefix(b"+")
                .or_else(|| rest.strip_prefix(b"-"))
                .unwrap_or(rest);
            let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
            if digits >= 18 {
                return Err(Unanalyzable::BadInput {
                    message: "tilde followed by a huge number".to_owned(),
                });
            }
        }
    }
    // brush-parser parses a redirection's fd number (`99999999999>x`) with an unchecked i32 parse.
    let mut digits = 0;
    for &c in b {
        if c.is_ascii_digit() {
            digits += 1;
        } else {
            if digits >= 10 && (c == b'<' || c == b'>') {
                return Err(Unanalyzable::BadInput {
                    message: "file descriptor number too large".to_owned(),
                });
            }
            digits = 0;
        }
    }
    // brush-parser's tokenizer loops forever, allocating, on a here-document whose delimiter is
    // not a plain word (`$( << (( x #`, `$(<<  n `): see `plain_heredoc_delimiter`.
    let mut at = 0;
    while let Some(k) = text[at..].find("<<") {
        let start = at + k + 2;
        at = start;
        let rest = &b[start..];
        if rest.first() == Some(&b'<') {
            at += 1;
            continue;
        }
        let rest = rest.strip_prefix(b"-").unwrap_or(rest);
        if !plain_heredoc_delimiter(rest) {
            return Err(Unanalyzable::ParseError {
                message: "here-document delimiter is not a plain word".to_owned(),
            });
        }
    }
    // brush-parser backtracks exponentially on unclosed parentheses (each level doubles the time:
    // 20 levels take ~90 ms, 24 over a second, measured in release): bound their nesting.
    let mut parens: usize = 0;
    for &c in b {
        match c {
            b'(' => {
                parens += 1;
                if parens > MAX_PAREN_NESTING {
                    return Err(Unanalyzable::TooDeep {
                        max: limits.max_depth,
                    });
                }
            }
            b')' => parens = parens.saturating_sub(1),
            _ => {}
        }
    }
    // brush-parser's word parser backtracks exponentially on unclosed nested `${…}` / `$(…)`
    // (`"${x/$(a/${x/$(a/…"`: 12 levels take 50 ms, 16 over half a second, measured in release).
    let mut expansions: usize = 0;
    for (i, &c) in b.iter().enumerate() {
        match c {
            // An unclosed array index (`${a[$i}`) nests too: its `}` does not close anything.
            b'[' => {
                expansions += 1;
                if expansions > MAX_EXPANSION_NESTING {
                    return Err(Unanalyzable::TooDeep {
                        max: limits.max_depth,
                    });
                }
            }
            b']' => expansions = expansions.saturating_sub(1),
            b'$' if matches!(b.get(i + 1), Some(b'{' | b'(')) => {
                expansions += 1;
                if expansions > MAX_EXPANSION_NESTING {
                    return Err(Unanalyzable::TooDeep {
                        max: limits.max_depth,
                    });
                }
            }
            b'}' | b')' => expansions = expansions.saturating_sub(1),
            _ => {}
        }
    }
    // The same for unclosed nested `case` (12 levels take ~50 ms, 16 over a second).
    let mut cases: usize = 0;
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        match word {
            "case" => {
                cases += 1;
                if cases > MAX_CASE_NESTING {
                    return Err(Unanalyzable::TooDeep {
                        max: limits.max_depth,
                    });
                }
            }
            "esac" => cases = cases.saturating_sub(1),
            _ => {}
        }
    }
    let max = limits.max_depth.saturating_mul(3).min(MAX_LEXICAL_NESTING);
    if lexical_nesting(b) > max {
        return Err(Unanalyzable::TooDeep {
            max: limits.max_depth,
        });
    }
    Ok(())
}

/// Is the here-document delimiter at the start of `rest` (after at most one blank) a plain word
/// of letters, digits and a little punctuation, optionally quoted? brush-parser's tokenizer loops
/// forever, allocating, on delimiters that start with an operator or contain substitutions
/// (`$( << (( x #`, `<< $( & x #`); bash rejects or never uses those, so refusing them costs
/// nothing. Two or more blanks before the word loop the same way inside a substitution: there
/// brush keeps the first blank as a token of its own, takes it as the tag, trims it to nothing,
/// and at the end of the input "finds" that empty tag again and again (`$(<<  n ` grew without
/// bound). Bash accepts `<<  EOF`; refused here, it is only no longer a local read.
fn plain_heredoc_delimiter(rest: &[u8]) -> bool {
    let start = rest
        .iter()
        .position(|c| *c != b' ' && *c != b'\t')
        .unwrap_or(rest.len());
    if start > 1 {
        return false;
    }
    let rest = &rest[start..];
    let mut word = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let c = rest[i];
        match c {
            b'\'' | b'"' => {
                let Some(len) = rest[i + 1..].iter().position(|d| *d == c) else {
                    return false;
                };
                word.extend_from_slice(&rest[i + 1..i + 1 + len]);
                i += len + 2;
            }
            b'\\' => {
                if let Some(&n) = rest.get(i + 1) {
                    word.push(n);
                }
                i += 2;
            }
            b' ' | b'\t' | b'\n' | b'|' | b'&' | b';' | b'<' | b'>' | b'(' | b')' => break,
            _ => {
                word.push(c);
                i += 1;
            }
        }
    }
    // Only the characters delimiters are made of (`EOF`, `END_OF-TEXT`, `'SQL.v2'`): brush also
    // takes a closing brace as the end of a `${` it is inside (`"${<< } $(  ` looped like the
    // blanks above), and substitutions, globs and operators were never a delimiter one would use.
    !word.is_empty()
        && word.iter().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(
                    c,
                    b'_' | b'.' | b'-' | b'+' | b':' | b'/' | b'@' | b'%' | b',' | b'=' | b'^'
                )
        })
}

/// An over-estimate of how deeply the parser will recurse: brackets, braces, backticks and
/// compound-command keywords open a level; their closers end one (never below zero).
fn lexical_nesting(b: &[u8]) -> usize {
    let mut depth: usize = 0;
    let mut max = 0;
    let mut i = 0;
    let mut in_backtick = false;
    while i < b.len() {
        let c = b[i];
        match c {
            b'(' | b'{' | b'[' => depth += 1,
            b')' | b'}' | b']' => depth = depth.saturating_sub(1),
            b'`' => {
                if in_backtick {
                    depth = depth.saturating_sub(1);
                } else {
                    depth += 1;
                }
                in_backtick = !in_backtick;
            }
            b'"' | b'\'' => {}
            c if c.is_ascii_alphabetic() => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                let at_word_start = start == 0 || !b[start - 1].is_ascii_alphanumeric();
                if at_word_start {
                    match &b[start..i] {
                        b"if" | b"while" | b"until" | b"for" | b"case" | b"select"
                        | b"function" => depth += 1,
                        b"fi" | b"done" | b"esac" => depth = depth.saturating_sub(1),
                        _ => {}
                    }
                }
                max = max.max(depth);
                continue;
            }
            _ => {}
        }
        max = max.max(depth);
        i += 1;
    }
    max
}
