//! Remembered decisions and learned allowlist entries, as the decision engine sees them: an
//! immutable set looked up by (project root, canonical command key).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::shell::{Redirect, RedirectKind, Script, Word};

/// What a rule says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    /// The operator approved and asked to remember: allow (never over tier 3 or a rejection).
    Approve,
    /// The operator rejected and asked to remember: deny.
    Reject,
    /// The operator wants to be asked every time, even if learned or approved.
    AlwaysAsk,
    /// Promoted by the learning state machine: allow without a test-run.
    Learned,
}

/// How decisions, audit rows and the operator name a stored rule: `rule #12`. The one place that
/// spells it ([`std::fmt::Display`]) and reads it back ([`RuleRef::parse`]); the rule of a tier
/// map is named by its pattern instead, so a `rule` field holds either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleRef(pub i64);

impl RuleRef {
    const PREFIX: &'static str = "rule #";

    /// The stored rule a `rule` field names, if it names one.
    pub fn parse(text: &str) -> Option<RuleRef> {
        text.trim()
            .strip_prefix(Self::PREFIX)?
            .parse()
            .ok()
            .map(RuleRef)
    }
}

impl std::fmt::Display for RuleRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", Self::PREFIX, self.0)
    }
}

impl Rule {
    /// How decisions name this rule.
    pub fn reference(&self) -> RuleRef {
        RuleRef(self.id)
    }
}

/// One rule, scoped to one project root and one exact command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// The store's id, named in decisions (`rule #12`).
    pub id: i64,
    pub kind: RuleKind,
    /// Canonical project root: a rule never matches another checkout or a moved project.
    pub project: String,
    /// [`canonical_key`] of the command.
    pub key: String,
    /// Disabled rules are kept (with their provenance) but never match.
    pub enabled: bool,
    /// The operator's free-text note, shown to the model on a rejection.
    pub note: Option<String>,
}

/// An immutable snapshot of all rules, indexed for lookup.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    rules: Vec<Rule>,
    index: HashMap<(String, String), Vec<usize>>,
}

impl RuleSet {
    pub fn new(rules: Vec<Rule>) -> Self {
        let mut index: HashMap<(String, String), Vec<usize>> = HashMap::new();
        for (i, r) in rules.iter().enumerate() {
            index
                .entry((r.project.clone(), r.key.clone()))
                .or_default()
                .push(i);
        }
        RuleSet { rules, index }
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The enabled rules for exactly this project and command key.
    pub fn lookup(&self, project: &str, key: &str) -> Vec<&Rule> {
        self.index
            .get(&(project.to_owned(), key.to_owned()))
            .map(|ids| {
                ids.iter()
                    .map(|&i| &self.rules[i])
                    .filter(|r| r.enabled)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The exact canonical form of a command, which rules are keyed on: each simple command (env
/// prefixes, wrappers, argv, redirections) with every word shell-quoted, one per line. Two strings
/// that run the same commands with the same words get the same key (`ls  -la` and `ls '-la'`);
/// anything that changes a word changes the key.
pub fn canonical_key(script: &Script) -> String {
    let mut out = String::new();
    for (i, cmd) in script.commands.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let mut words: Vec<String> = Vec::new();
        for a in &cmd.env {
            words.push(format!("{}={}", a.name, quote(&a.value)));
        }
        for w in cmd.wrappers.iter().flatten().chain(&cmd.argv) {
            words.push(quote(w));
        }
        for r in &cmd.redirects {
            words.push(redirect(r));
        }
        out.push_str(&words.join(" "));
    }
    out
}

fn redirect(r: &Redirect) -> String {
    let fd = r.fd.map(|f| f.to_string()).unwrap_or_default();
    let op = match r.kind {
        RedirectKind::Read => "<",
        RedirectKind::Write => ">",
        RedirectKind::Append => ">>",
        RedirectKind::ReadWrite => "<>",
        RedirectKind::WriteBoth => "&>",
        RedirectKind::AppendBoth => "&>>",
        RedirectKind::Duplicate => ">&",
        RedirectKind::HereDoc => "<<",
        RedirectKind::HereString => "<<<",
    };
    format!("{fd}{op}{}", quote(&r.target))
}

/// Static words are single-quoted when they need it; dynamic words keep their source text, marked
/// so a static word can never collide with a dynamic one.
fn quote(w: &Word) -> String {
    match w {
        Word::Static(s)
            if !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b)) =>
        {
            s.clone()
        }
        Word::Static(s) => format!("'{}'", s.replace('\'', r"'\''")),
        Word::Dynamic(raw) => format!("${{dynamic:{raw}}}"),
    }
}

#[cfg(test)]
mod rule_ref_tests {
    use super::RuleRef;

    #[test]
    fn a_rule_reference_reads_back_what_it_writes() {
        assert_eq!(RuleRef(12).to_string(), "rule #12");
        assert_eq!(RuleRef::parse("rule #12"), Some(RuleRef(12)));
        assert_eq!(RuleRef::parse(" rule #7 "), Some(RuleRef(7)));
        for not_one in ["tier 0: ls *", "rule #", "rule #x", "rules #1", "#1"] {
            assert_eq!(RuleRef::parse(not_one), None, "{not_one}");
        }
    }
}
