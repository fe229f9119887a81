//! Parsing `CLAUDE_CMDS.md` into a [`TierMap`], collecting every diagnostic before failing closed.
//!
//! The accepted grammar is specified in `docs/tiermap.md`. The parser is strict wherever leniency
//! could silently drop a rule: a misspelt tier heading, a list item that is almost an entry, an
//! option it does not know, an unclosed code fence — each is an error, never ignored prose.

use super::canonical::{body_len, is_trailer_like, lines};
use super::pattern::Pattern;
use super::{Diagnostic, Tier, FILE_NAME};
use crate::shell::read::{Pack, PackSet};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Largest tier map accepted, in bytes. A map is reviewed by a person; anything bigger is a
/// denial-of-review vector, and it bounds the parser's work on hostile input.
pub const MAX_MAP_BYTES: usize = 256 * 1024;

/// Options that take no value (they end a `network=` host list).
const FLAG_OPTIONS: [&str; 3] = ["network", "edit-tracked", "direct"];

/// Longest sandbox timeout an entry may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// Per-entry settings for the test-run in the container mirror (tier 1 entries only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxOptions {
    /// `timeout=120s`: overrides the daemon's default test-run timeout for slow builds and tests.
    pub timeout: Option<Duration>,
    /// `network` (bare): the run keeps the host's network namespace, unfiltered; network use is
    /// reported but not counted against the run. Prefer a host list.
    pub network: bool,
    /// `network=registry.npmjs.org,*.crates.io`: the run keeps its own network namespace (loopback
    /// only) and reaches these hosts, and nothing else, through cmdgate's HTTP proxy
    /// (`HTTPS_PROXY`, …); a refused attempt makes the run dirty (docs/tiermap.md, "Network by
    /// domain"). Never set together with `network` or `direct`.
    pub hosts: Vec<crate::net::HostPattern>,
    /// `write=~/.cargo/registry`: paths outside the workspace whose changes do not make a run dirty
    /// (build caches). Absolute, or `~/`-relative to the agent's home; never `..`.
    pub extra_writable: Vec<String>,
    /// `edit-tracked`: changes to files tracked by version control are clean (formatters). Protected
    /// paths (`.git/`, `.claude/`, `CLAUDE_CMDS.md`) stay protected regardless.
    pub edit_tracked: bool,
    /// `direct`: the older form for commands that need host services the mirror cannot give (a
    /// docker socket, a desktop session): test-run in the mirror, then, when clean, run again on
    /// the host. Without it a tier-1 command runs once, in the mirror, and its clean effects are
    /// committed (docs/tiermap.md says when to use it and what it costs).
    pub direct: bool,
    /// `unmask=~/.npmrc`: a secret path the mirror masks by default (the policy's secret table or
    /// the operator's `secret_paths`) that this entry's commands may read (a publish step that
    /// needs its registry token). Absolute, or `~/`-relative to the agent's home; never `..`.
    /// cmdgate's own paths stay masked whatever an entry says, and a command that *names* a
    /// secret is still asked about.
    pub unmask: Vec<String>,
}

impl SandboxOptions {
    /// Whether no option was given.
    pub fn is_default(&self) -> bool {
        *self == SandboxOptions::default()
    }
}

/// One command pattern in one tier, with where it was written so decisions can name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The section it was listed under.
    pub tier: Tier,
    /// What argv it matches.
    pub pattern: Pattern,
    /// Test-run settings; always default outside tier 1.
    pub options: SandboxOptions,
    /// 1-based line in `CLAUDE_CMDS.md`, so a decision can say which rule produced it.
    pub line: usize,
    /// Commands written under the entry that it must (or must not) decide, checked at parse time
    /// so a pattern that does not say what its author meant is refused with the line.
    pub examples: Vec<Example>,
}

/// An example under an entry: `  - matches `git push origin main`` or
/// `  - does not match `git push --force``.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// The command as the agent would send it (one simple command).
    pub command: String,
    /// `matches`: the map classifies it under this entry's tier (and the entry's pattern matches);
    /// `does not match`: the entry's pattern does not match it.
    pub must_match: bool,
    /// 1-based line of the example.
    pub line: usize,
}

impl Entry {
    /// The rule's name for decisions and audit rows: ``CLAUDE_CMDS.md:23 `git push --force *` ``.
    pub fn rule(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{FILE_NAME}:{} `{}`", self.line, self.pattern)
    }
}

/// A parsed tier map. Not yet trusted: only [`super::verify`] makes a [`super::VerifiedMap`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierMap {
    /// `revision:` from the front matter; must grow with every signed map (replay protection).
    pub revision: u64,
    /// `project:` from the front matter, informational (shown by `cmdgate status`).
    pub project: Option<String>,
    /// `description:` from the front matter, informational.
    pub description: Option<String>,
    /// `read-packs-off:` from the front matter: read packs (`gh`, `aws`, …) switched off in this
    /// project; their commands are then not reads (docs/reads.md).
    pub read_packs_off: Vec<Pack>,
    /// Every entry of every tier, in file order.
    entries: Vec<Entry>,
}

impl TierMap {
    /// `packs` less the ones this map switches off.
    pub fn read_packs(&self, packs: PackSet) -> PackSet {
        self.read_packs_off
            .iter()
            .fold(packs, |acc, p| acc.without(*p))
    }

    /// Every entry, in file order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entries of one tier, in file order.
    pub fn entries_in(&self, tier: Tier) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(move |e| e.tier == tier)
    }

    /// The strictest tier with an entry matching `argv`, and the first such entry in file order.
    ///
    /// Tiers are tried deny, ask, sandbox, read: if `git push --force x` matches both
    /// `git push *` (ask) and `git push --force *` (deny), it is denied. Entries of the restricting
    /// tiers (ask, deny) also match when `argv[0]` is a path to the command (`/bin/rm`); read and
    /// sandbox entries need the exact command word, so `./git status` is never `git status *`.
    pub fn classify(&self, argv: &[&str]) -> Option<(Tier, &Entry)> {
        for tier in [Tier::Deny, Tier::Ask, Tier::Sandbox, Tier::Read] {
            let restricting = tier >= Tier::Ask;
            for e in self.entries_in(tier) {
                let hit = if restricting {
                    e.pattern.matches_any_command_path(argv)
                } else {
                    e.pattern.matches(argv)
                };
                if hit {
                    return Some((tier, e));
                }
            }
        }
        None
    }
}

/// Parses a whole `CLAUDE_CMDS.md`. A signature trailer on the last line is ignored here (checking
/// it is [`super::verify`]'s job); a trailer anywhere else is an error. Returns every diagnostic,
/// in line order, if there is any.
pub fn parse(text: &str) -> Result<TierMap, Vec<Diagnostic>> {
    let mut p = Parser {
        diags: Vec::new(),
        only: None,
    };
    if text.len() > MAX_MAP_BYTES {
        p.err(
            0,
            format!(
                "tier map is {} bytes, more than the limit of {MAX_MAP_BYTES}",
                text.len()
            ),
        );
        return Err(p.diags);
    }
    let all = lines(text);
    let body_end = p.check_trailers(&all);
    let lines = &all[..body_end];

    if lines.first().is_some_and(|l| l.starts_with('\u{feff}')) {
        p.err(
            1,
            "the file starts with a byte order mark; save it as UTF-8 without one",
        );
    }
    p.check_hidden_characters(lines);
    let (front, body_start) = p.front_matter(lines);
    let entries = match body_start {
        Some(start) => p.body(lines, start),
        None => Vec::new(),
    };
    if p.diags.is_empty() {
        if let Some(revision) = front.revision {
            let map = TierMap {
                revision,
                project: front.project,
                description: front.description,
                read_packs_off: front.read_packs_off,
                entries,
            };
            p.diags.extend(super::examples::check(&map));
            if p.diags.is_empty() {
                return Ok(map);
            }
        }
    }
    p.diags.sort_by_key(|d| d.line);
    Err(p.diags)
}

/// The entries of a tier map that some commands could meet, read by [`sketch`]: untrusted, never a
/// map (it cannot be verified or used to decide), only the hook's way to learn cheaply whether the
/// whole map matters for one command string.
#[derive(Debug, Clone)]
pub struct Sketch {
    /// `read-packs-off:` and the wanted entries, in file order; `revision` is meaningless.
    map: TierMap,
    /// Whether the structural pass already found the text invalid.
    invalid: bool,
}

impl Sketch {
    /// [`TierMap::classify`]'s tier for `argv`.
    pub fn classify(&self, argv: &[&str]) -> Option<Tier> {
        self.map.classify(argv).map(|(tier, _)| tier)
    }

    /// [`TierMap::read_packs`].
    pub fn read_packs(&self, packs: PackSet) -> PackSet {
        self.map.read_packs(packs)
    }

    /// The entries kept, in file order (options and examples are not read: always empty).
    pub fn entries(&self) -> &[Entry] {
        &self.map.entries
    }

    /// `read-packs-off:` as read.
    pub fn read_packs_off(&self) -> &[Pack] {
        &self.map.read_packs_off
    }

    /// The text is certainly not a valid map ([`parse`] refuses it; the converse does not hold:
    /// the sketch skips most of the checks).
    pub fn invalid(&self) -> bool {
        self.invalid
    }
}

/// The entries of `text` whose command word `wanted` accepts, for a hook call that must know
/// whether the map could change its answer before paying for [`parse`] (about 0.5 M instructions
/// for the starter map; this is a fraction of it).
///
/// The promise, for every `text` that [`parse`] accepts: the sketch has exactly the entries of the
/// parsed map whose command word `wanted` accepts (a word with a backslash escape is always
/// kept), with the same tier, pattern and order, and the same `read-packs-off:`; so for any argv
/// whose `argv[0]` and last component of `argv[0]` `wanted` accepts, [`Sketch::classify`] gives
/// what the parsed map's `classify` gives. It is the same parser (headings, fences, list items,
/// front matter, trailer), skipping only checks that refuse a map: invisible characters, HTML
/// comments, stray trailers and carriage returns inside lines, entry options, examples,
/// duplicate patterns, and the parse of unwanted patterns. For a text `parse` refuses the sketch
/// may say anything: such a map is no map either way.
pub fn sketch(text: &str, wanted: &dyn Fn(&str) -> bool) -> Sketch {
    let mut p = Parser {
        diags: Vec::new(),
        only: Some(wanted),
    };
    let empty = |invalid| Sketch {
        map: TierMap {
            revision: 0,
            project: None,
            description: None,
            read_packs_off: Vec::new(),
            entries: Vec::new(),
        },
        invalid,
    };
    if text.len() > MAX_MAP_BYTES {
        return empty(true);
    }
    let all = lines(text);
    let body_end = p.check_trailers(&all);
    let lines = &all[..body_end];
    let (front, body_start) = p.front_matter(lines);
    let entries = match body_start {
        Some(start) => p.body(lines, start),
        None => return empty(true),
    };
    Sketch {
        map: TierMap {
            revision: front.revision.unwrap_or(0),
            project: None,
            description: None,
            read_packs_off: front.read_packs_off,
            entries,
        },
        invalid: !p.diags.is_empty() || front.revision.is_none(),
    }
}

/// The front matter's values as far as they parsed; missing ones are reported separately.
#[derive(Default)]
struct FrontMatter {
    /// `revision:`; `None` until a valid one is seen (absence is an error).
    revision: Option<u64>,
    /// `project:`, informational.
    project: Option<String>,
    /// `description:`, informational.
    description: Option<String>,
    /// `read-packs-off:`, the packs switched off.
    read_packs_off: Vec<Pack>,
}

#[derive(Clone, Copy)]
enum Section {
    /// Before any tier heading, or under a heading that is not a tier.
    Prose,
    /// Under `## Tier N — name`.
    Tier(Tier),
    /// Under a heading that tried to be a tier and failed: its entries are not reported again.
    Broken,
}

/// Parsing state shared by the passes over the file.
struct Parser<'w> {
    /// Every problem found so far: parsing goes on after an error so the operator sees them all.
    diags: Vec<Diagnostic>,
    /// [`sketch`]: build only the entries whose command word this accepts, and skip the checks
    /// that cannot move an entry. `None`: the whole parse.
    only: Option<&'w dyn Fn(&str) -> bool>,
}

impl Parser<'_> {
    fn err(&mut self, line: usize, message: impl Into<String>) {
        self.diags.push(Diagnostic::new(FILE_NAME, line, message));
    }

    /// Reports characters that make the text a reviewer sees differ from the text cmdgate parses:
    /// zero-width and other invisible characters, and bidirectional overrides ("Trojan Source").
    fn check_hidden_characters(&mut self, lines: &[&str]) {
        for (i, line) in lines.iter().enumerate() {
            // A leading BOM on line 1 has its own message.
            let line = if i == 0 {
                line.trim_start_matches('\u{feff}')
            } else {
                line
            };
            // Every hidden character is outside ASCII.
            if line.is_ascii() {
                continue;
            }
            if let Some(c) = line.chars().find(|&c| is_hidden(c)) {
                self.err(
                    i + 1,
                    format!(
                        "invisible or bidirectional control character U+{:04X}: remove it",
                        u32::from(c)
                    ),
                );
            }
        }
    }

    /// Reports misplaced or duplicated trailers; returns how many lines form the body (the file
    /// without its final trailer and the empty lines around it).
    fn check_trailers(&mut self, lines: &[&str]) -> usize {
        let end = body_len(lines);
        // The designated trailer: the last non-empty line, if it looks like one (every non-empty
        // line at or after `end` does).
        let designated = lines
            .iter()
            .rposition(|l| !l.is_empty())
            .filter(|&i| i >= end);
        for (i, l) in lines.iter().enumerate() {
            if !is_trailer_like(l) || Some(i) == designated {
                continue;
            }
            match designated {
                Some(d) => self.err(
                    i + 1,
                    format!(
                        "duplicate signature trailer (the trailer is on line {})",
                        d + 1
                    ),
                ),
                None => self.err(i + 1, "the signature trailer must be the last line"),
            }
        }
        // Trailer-like lines before `end` were reported above; the body stops at `end` either way.
        end
    }

    /// Parses the `---` block. Returns the values and the index of the first body line, or `None`
    /// when the block is not closed (the rest of the file cannot be told apart from it).
    fn front_matter(&mut self, lines: &[&str]) -> (FrontMatter, Option<usize>) {
        let mut fm = FrontMatter::default();
        let first = lines.first().map(|l| l.trim_start_matches('\u{feff}'));
        if first != Some("---") {
            self.err(1, "missing front matter: the file must start with a `---` line, then `revision: N`, then `---`");
            return (fm, Some(0));
        }
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, &line) in lines.iter().enumerate().skip(1) {
            let ln = i + 1;
            if line == "---" {
                if fm.revision.is_none() && !seen.contains_key("revision") {
                    self.err(1, "missing `revision:` in the front matter");
                }
                return (fm, Some(i + 1));
            }
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            if line.contains('\r') {
                self.err(
                    ln,
                    "carriage return inside a line; use LF or CRLF line endings only",
                );
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                self.err(
                    ln,
                    format!("expected `key: value` in the front matter, found `{t}`"),
                );
                continue;
            };
            let (key, value) = (key.trim(), value.trim());
            if let Some(first) = seen.get(key) {
                self.err(
                    ln,
                    format!("duplicate front-matter key `{key}` (first on line {first})"),
                );
                continue;
            }
            seen.insert(key, ln);
            match key {
                "revision" => match parse_revision(value) {
                    Ok(r) => fm.revision = Some(r),
                    Err(m) => self.err(ln, m),
                },
                "project" | "description" if value.is_empty() => self.err(
                    ln,
                    format!("`{key}:` has an empty value; give one or remove the line"),
                ),
                "project" => fm.project = Some(value.to_owned()),
                "description" => fm.description = Some(value.to_owned()),
                "read-packs-off" => match PackSet::all().without_named(value) {
                    Ok(on) => {
                        fm.read_packs_off = Pack::ALL
                            .iter()
                            .copied()
                            .filter(|p| !on.contains(*p))
                            .collect();
                    }
                    Err(m) => self.err(ln, m),
                },
                _ => self.err(
                    ln,
                    format!(
                        "unknown front-matter key `{key}` (known: revision, project, description, \
                         read-packs-off)"
                    ),
                ),
            }
        }
        self.err(
            1,
            "the front matter is not closed: add a `---` line after it",
        );
        (fm, None)
    }

    fn body(&mut self, lines: &[&str], start: usize) -> Vec<Entry> {
        let mut entries: Vec<Entry> = Vec::new();
        let mut section = Section::Prose;
        // `BTreeMap`s, not `HashMap`s: random keys cost the hook a `getrandom` per Bash call.
        let mut tier_lines: BTreeMap<Tier, usize> = BTreeMap::new();
        let mut patterns: BTreeMap<String, (Tier, usize)> = BTreeMap::new();
        // (marker char, marker length, line it opened on)
        let mut fence: Option<(char, usize, usize)> = None;
        // What the previous line was, for lazy continuations and setext underlines.
        let mut prev = Prev::Blank;

        for (i, &line) in lines.iter().enumerate().skip(start) {
            let ln = i + 1;
            let t = line.trim_start();
            let indent = line.len() - t.len();

            if let Some((c, n, _)) = fence {
                let run = t.chars().take_while(|&x| x == c).count();
                if run >= n && t[run * c.len_utf8()..].trim().is_empty() {
                    fence = None;
                }
                prev = Prev::Blank;
                continue;
            }
            if let Some(c) = [('`', "```"), ('~', "~~~")]
                .into_iter()
                .find_map(|(c, fence)| t.starts_with(fence).then_some(c))
            {
                let n = t.chars().take_while(|&x| x == c).count();
                fence = Some((c, n, ln));
                prev = Prev::Blank;
                continue;
            }
            if t.is_empty() {
                prev = Prev::Blank;
                continue;
            }
            // Each of these refuses the map, so a sketch (which promises nothing for a refused
            // map) need not look: it reads the line as the parse of a clean map would.
            if self.only.is_none() {
                if is_trailer_like(line) {
                    // Reported by check_trailers already.
                    prev = Prev::Prose;
                    continue;
                }
                if line.contains("<!--") {
                    self.err(
                        ln,
                        "html comments are not allowed: they hide text from the rendered view",
                    );
                    prev = Prev::Prose;
                    continue;
                }
                if line.contains('\r') {
                    self.err(
                        ln,
                        "carriage return inside a line; use LF or CRLF line endings only",
                    );
                    prev = Prev::Prose;
                    continue;
                }
            }
            if !indent_is_code(line) && t.starts_with('#') {
                let level = t.chars().take_while(|&c| c == '#').count();
                let rest = &t[level..];
                if level <= 6 && (rest.is_empty() || rest.starts_with([' ', '\t'])) {
                    let title = rest.trim();
                    match level {
                        1 => section = Section::Prose,
                        2 => section = self.section_heading(ln, title, &mut tier_lines),
                        _ => {}
                    }
                    prev = Prev::Blank;
                    continue;
                }
            }
            if matches!(prev, Prose) && is_setext_underline(t) && !indent_is_code(line) {
                self.err(ln, "setext headings (text underlined with `===` or `---`) are not supported; write `## Heading`");
                prev = Prev::Blank;
                continue;
            }
            let item = list_item(t);
            if let (Section::Tier(_), Some(content), Prev::Entry) = (section, item, prev) {
                if indent > 0 && !indent_is_code(line) {
                    if self.only.is_some() {
                        // An example never moves an entry.
                        continue;
                    }
                    if let Some(example) = self.example(ln, content) {
                        if let Some(e) = entries.last_mut().filter(|e| e.line < ln) {
                            e.examples.push(example);
                        }
                    }
                    continue;
                }
            }
            match (section, item) {
                (Section::Tier(tier), Some(content)) => {
                    if indent > 0 {
                        self.err(ln, "entries must start at the beginning of the line (nested lists are not entries)");
                    } else if let Some(entry) = self.entry(ln, tier, content) {
                        if self.only.is_some() {
                            // A duplicate only refuses the map: the sketch keeps both.
                            entries.push(entry);
                        } else {
                            let key = entry.pattern.as_str().to_owned();
                            if let Some(&(t0, l0)) = patterns.get(&key) {
                                self.err(
                                    ln,
                                    format!("`{key}` is already listed in {t0} on line {l0}"),
                                );
                            } else {
                                patterns.insert(key, (tier, ln));
                                entries.push(entry);
                            }
                        }
                    }
                    prev = Prev::Entry;
                }
                (Section::Tier(_), None) => {
                    let quoted = t.strip_prefix('>').map(str::trim_start);
                    if quoted.is_some_and(|q| list_item(q).is_some()) {
                        self.err(ln, "entries must not be inside a block quote");
                    } else if matches!(prev, Prev::Entry) {
                        self.err(
                            ln,
                            "an entry must fit on one line; leave a blank line before prose",
                        );
                    } else if matches!(prev, Prev::Blank) && t.starts_with('`') {
                        // A paragraph that starts with a code span reads as an entry that lost its
                        // `- `; continuation lines of prose may start with one freely.
                        self.err(ln, "an entry must be a list item: start the line with `- `");
                    }
                    prev = Prev::Prose;
                }
                (Section::Prose, Some(content)) => {
                    if content.starts_with('`') {
                        self.err(ln, "entry outside a tier section: put it under a `## Tier N — name` heading");
                    }
                    prev = Prev::Prose;
                }
                (Section::Prose | Section::Broken, _) => prev = Prev::Prose,
            }
        }
        if let Some((_, _, opened)) = fence {
            self.err(opened, "the code fence opened here is never closed");
        }
        entries
    }

    fn section_heading(
        &mut self,
        ln: usize,
        title: &str,
        seen: &mut BTreeMap<Tier, usize>,
    ) -> Section {
        let first_word = title.split_whitespace().next().unwrap_or("");
        if !first_word.eq_ignore_ascii_case("tier") {
            return Section::Prose;
        }
        match parse_tier_heading(title) {
            Ok(tier) => {
                if let Some(first) = seen.get(&tier) {
                    self.err(
                        ln,
                        format!("second `{tier}` section (the first is on line {first})"),
                    );
                    return Section::Broken;
                }
                seen.insert(tier, ln);
                Section::Tier(tier)
            }
            Err(m) => {
                self.err(ln, m);
                Section::Broken
            }
        }
    }

    fn entry(&mut self, ln: usize, tier: Tier, content: &str) -> Option<Entry> {
        let Some(after_tick) = content.strip_prefix('`') else {
            self.err(ln, "a list item in a tier section must be an entry: a pattern in backticks, like - `cargo build *`");
            return None;
        };
        if after_tick.starts_with('`') {
            self.err(ln, "write the pattern in single backticks");
            return None;
        }
        let Some(close) = after_tick.find('`') else {
            self.err(ln, "the pattern's closing backtick is missing");
            return None;
        };
        let pattern_text = &after_tick[..close];
        let rest = &after_tick[close + 1..];
        if let Some(wanted) = self.only {
            // The command word as `Pattern::parse` reads it (a literal; escapes kept to be safe).
            let word = pattern_text.split_ascii_whitespace().next().unwrap_or("");
            if !word.contains('\\') && !wanted(word) {
                return None;
            }
            // Options only refuse a map or tune a test-run; the sketch never runs anything.
            return Some(Entry {
                tier,
                pattern: Pattern::parse(pattern_text).ok()?,
                options: SandboxOptions::default(),
                line: ln,
                examples: Vec::new(),
            });
        }
        let pattern = match Pattern::parse(pattern_text) {
            Ok(p) => Some(p),
            Err(e) => {
                self.err(ln, format!("malformed pattern `{pattern_text}`: {e}"));
                None
            }
        };
        let options = self.options(ln, tier, rest);
        Some(Entry {
            tier,
            pattern: pattern?,
            options: options?,
            line: ln,
            examples: Vec::new(),
        })
    }

    /// An indented list item right under an entry: `matches `CMD`` or `does not match `CMD``.
    fn example(&mut self, ln: usize, content: &str) -> Option<Example> {
        let (must_match, rest) = if let Some(r) = content.strip_prefix("matches ") {
            (true, r)
        } else if let Some(r) = content.strip_prefix("does not match ") {
            (false, r)
        } else {
            self.err(ln, "an indented item under an entry must be an example: `- matches `CMD`` or `- does not match `CMD``");
            return None;
        };
        let rest = rest.trim();
        let command = rest
            .strip_prefix('`')
            .and_then(|r| r.strip_suffix('`'))
            .filter(|c| !c.is_empty() && !c.contains('`'));
        match command {
            Some(c) => Some(Example {
                command: c.to_owned(),
                must_match,
                line: ln,
            }),
            None => {
                self.err(ln, "write the example's command in single backticks, alone after `matches` / `does not match`");
                None
            }
        }
    }

    fn options(&mut self, ln: usize, tier: Tier, rest: &str) -> Option<SandboxOptions> {
        let mut o = SandboxOptions::default();
        if rest.trim().is_empty() {
            return Some(o);
        }
        let r = rest.trim_start();
        let after_sep = (rest.len() > r.len())
            .then(|| ["—", "–", "--", "-"].iter().find_map(|s| r.strip_prefix(s)))
            .flatten()
            .filter(|a| a.starts_with([' ', '\t']));
        let Some(list) = after_sep else {
            self.err(ln, "after the pattern, write ` — ` and then options, like `- `cargo test *` — timeout=300s, network`");
            return None;
        };
        if tier != Tier::Sandbox {
            self.err(
                ln,
                format!("options apply only to tier 1 (sandbox) entries, not to {tier}"),
            );
            return None;
        }
        let before = self.diags.len();
        let mut seen: Vec<&str> = Vec::new();
        // After `network=HOST`, further comma-separated words without `=` that are not option
        // names are more hosts: `network=registry.npmjs.org, *.crates.io`.
        let mut in_hosts = false;
        for opt in list.split(',').map(str::trim) {
            let (name, value) = match opt.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim())),
                None => (opt, None),
            };
            if opt.is_empty() {
                self.err(ln, "empty option (a stray comma?)");
                continue;
            }
            if in_hosts && value.is_none() && !FLAG_OPTIONS.contains(&name) {
                self.host(ln, &mut o, opt);
                continue;
            }
            in_hosts = false;
            if name != "write" && name != "unmask" && seen.contains(&name) {
                self.err(ln, format!("option `{name}` given twice"));
                continue;
            }
            seen.push(name);
            match (name, value) {
                ("network", None) => o.network = true,
                ("network", Some(v)) => {
                    in_hosts = true;
                    self.host(ln, &mut o, v);
                }
                ("edit-tracked", None) => o.edit_tracked = true,
                ("direct", None) => o.direct = true,
                ("timeout", Some(v)) => match parse_timeout(v) {
                    Ok(d) => o.timeout = Some(d),
                    Err(m) => self.err(ln, m),
                },
                ("write", Some(v)) => match check_write_path(v) {
                    Ok(()) if o.extra_writable.iter().any(|p| p == v) => {
                        self.err(ln, format!("`write={v}` given twice"))
                    }
                    Ok(()) => o.extra_writable.push(v.to_owned()),
                    Err(m) => self.err(ln, m),
                },
                ("unmask", Some(v)) => match check_path("unmask", v) {
                    Ok(()) if o.unmask.iter().any(|p| p == v) => {
                        self.err(ln, format!("`unmask={v}` given twice"))
                    }
                    Ok(()) => o.unmask.push(v.to_owned()),
                    Err(m) => self.err(ln, m),
                },
                ("edit-tracked" | "direct", Some(_)) => {
                    self.err(ln, format!("option `{name}` takes no value"))
                }
                ("timeout" | "write" | "unmask", None) => {
                    self.err(ln, format!("option `{name}` needs a value: `{name}=...`"))
                }
                _ => self.err(
                    ln,
                    format!("unknown option `{opt}` (known: timeout=<N>s, network, network=<hosts>, write=<path>, unmask=<path>, edit-tracked, direct)"),
                ),
            }
        }
        if !o.hosts.is_empty() && o.direct {
            self.err(
                ln,
                "`network=<hosts>` applies to runs in the mirror; a `direct` entry runs again on \
                 the host with the host's network (use bare `network` there, or drop `direct`)",
            );
        }
        (self.diags.len() == before).then_some(o)
    }

    /// One host of `network=`.
    fn host(&mut self, ln: usize, o: &mut SandboxOptions, text: &str) {
        match crate::net::HostPattern::parse(text) {
            Ok(h) if o.hosts.contains(&h) => {
                self.err(ln, format!("host `{h}` listed twice in `network=`"))
            }
            Ok(h) => o.hosts.push(h),
            Err(m) => self.err(ln, m),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Prev {
    Blank,
    Prose,
    Entry,
}
use Prev::Prose;

/// Characters that are invisible or reorder text when rendered, so a reviewer would not see what
/// the parser sees (a zero-width space inside a deny pattern makes it match nothing).
fn is_hidden(c: char) -> bool {
    matches!(c,
        '\u{00AD}'                  // soft hyphen
        | '\u{180E}'                // Mongolian vowel separator
        | '\u{200B}'..='\u{200F}'   // zero-width space/joiners, LRM, RLM
        | '\u{202A}'..='\u{202E}'   // bidi embeddings and overrides
        | '\u{2060}'..='\u{2064}'   // word joiner, invisible operators
        | '\u{2066}'..='\u{2069}'   // bidi isolates
        | '\u{FEFF}'                // zero-width no-break space (BOM)
    )
}

/// Four or more leading spaces (or a tab) make an indented code block in Markdown.
fn indent_is_code(line: &str) -> bool {
    line.starts_with('\t') || line.starts_with("    ")
}

fn is_setext_underline(t: &str) -> bool {
    let t = t.trim_end();
    !t.is_empty() && (t.chars().all(|c| c == '=') || t.chars().all(|c| c == '-'))
}

/// The content of a list item (`- x`, `* x`, `+ x`, `1. x`, `1) x`), if the line is one.
fn list_item(t: &str) -> Option<&str> {
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    let marker_len = if digits > 0 && digits <= 9 && t[digits..].starts_with(['.', ')']) {
        digits + 1
    } else if t.starts_with(['-', '*', '+']) {
        1
    } else {
        return None;
    };
    let rest = &t[marker_len..];
    if rest.is_empty() {
        Some("")
    } else if rest.starts_with([' ', '\t']) {
        Some(rest.trim_start())
    } else {
        None
    }
}

fn parse_revision(v: &str) -> Result<u64, String> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`revision:` must be a positive whole number, found `{v}`"
        ));
    }
    if v.bytes().all(|b| b == b'0') {
        return Err("`revision:` must be at least 1".to_owned());
    }
    if v.starts_with('0') {
        return Err(format!(
            "`revision:` must not have leading zeros, found `{v}`"
        ));
    }
    v.parse::<u64>()
        .map_err(|_| format!("`revision:` {v} is too large"))
}

fn parse_timeout(v: &str) -> Result<Duration, String> {
    let bad = || format!("`timeout={v}` is not a duration like `90s` or `10m`");
    let (num, mult) = if let Some(n) = v.strip_suffix('s') {
        (n, 1)
    } else if let Some(n) = v.strip_suffix('m') {
        (n, 60)
    } else {
        return Err(bad());
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) || num.len() > 6 {
        return Err(bad());
    }
    let secs = num.parse::<u64>().map_err(|_| bad())? * mult;
    if secs == 0 || secs > MAX_TIMEOUT.as_secs() {
        return Err(format!(
            "`timeout={v}` must be between 1s and {}s",
            MAX_TIMEOUT.as_secs()
        ));
    }
    Ok(Duration::from_secs(secs))
}

fn check_write_path(v: &str) -> Result<(), String> {
    check_path("write", v)
}

/// A path option's value (`write=`, `unmask=`): absolute or `~/`, not a whole tree, no spaces,
/// control characters, `*`, `.` or `..`.
fn check_path(opt: &str, v: &str) -> Result<(), String> {
    let rel = if let Some(r) = v.strip_prefix("~/") {
        r
    } else if let Some(r) = v.strip_prefix('/') {
        r
    } else {
        return Err(format!(
            "`{opt}={v}` must be an absolute path or start with `~/`"
        ));
    };
    if rel.trim_matches('/').is_empty() {
        return Err(format!(
            "`{opt}={v}` names a whole tree; name a directory inside it"
        ));
    }
    if v.chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '*')
    {
        return Err(format!(
            "`{opt}={v}` must not contain spaces, control characters or `*`"
        ));
    }
    if rel.split('/').any(|c| c == ".." || c == ".") {
        return Err(format!(
            "`{opt}={v}` must not contain `.` or `..` components"
        ));
    }
    Ok(())
}

/// `Tier 2 — ask` (case-insensitive; separator `—`, `–`, `-` or `:`) ⇒ the tier.
fn parse_tier_heading(title: &str) -> Result<Tier, String> {
    let help = "write tier headings as `## Tier 0 — read`, `## Tier 1 — sandbox`, `## Tier 2 — ask`, `## Tier 3 — deny`";
    let rest = title[4..].trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Some(tier) = digits
        .parse::<u8>()
        .ok()
        .and_then(Tier::from_number)
        .filter(|_| digits.len() == 1)
    else {
        return Err(format!("unrecognised tier heading `## {title}`: {help}"));
    };
    let after = rest[digits.len()..].trim_start();
    let name = ["—", "–", "-", ":"]
        .iter()
        .find_map(|s| after.strip_prefix(s))
        .map(str::trim);
    match name {
        Some(n) if n.eq_ignore_ascii_case(tier.name()) => Ok(tier),
        Some(n) if !n.is_empty() => Err(format!(
            "tier {} is named `{}`, not `{n}`: {help}",
            tier.number(),
            tier.name()
        )),
        _ => Err(format!("unrecognised tier heading `## {title}`: {help}")),
    }
}
