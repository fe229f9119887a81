//! What a new tier map widens, against the previous revision: printed by `cmdgate tiermap sign`
//! before it signs, so the person signing sees the expansion and not only the diff.
//!
//! - **More permissive moves**: a pattern listed in a stricter tier before and a more permissive
//!   one now, a pattern dropped from ask or deny (now decided as an unknown command), a new
//!   tier-0 pattern (allowed without a mirror run).
//! - **Shadowed and dead entries**: every instance of the entry is decided by another entry — a
//!   stricter tier's (shadowed: the entry never decides anything) or an earlier one of the same
//!   tier (dead).
//! - **Patterns in two tiers**: commands matched by entries of two tiers (the stricter wins; the
//!   reader of the map may not expect which).
//!
//! Instances are sampled from the pattern itself (each wildcard word stands for an arbitrary word
//! no literal matches, a trailing `*` for zero and for one more word): a stricter entry takes every
//! sample only if it covers the whole pattern, word by word.

use serde::Serialize;

use super::{Entry, PatternWord, Tier, TierMap};

/// A word no literal pattern word is expected to equal: a wildcard's stand-in.
const ANY: &str = "\u{2026}any\u{2026}";

/// A pattern that became more permissive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Move {
    pub pattern: String,
    /// `None`: not listed before (an unknown command).
    pub from: Option<Tier>,
    /// `None`: no longer listed (decided as an unknown command: a mirror run).
    pub to: Option<Tier>,
    /// The line in the new map (0 when no longer listed).
    pub line: usize,
}

/// An entry that never decides anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shadowed {
    pub pattern: String,
    pub tier: Tier,
    pub line: usize,
    /// The entry that takes its commands.
    pub by: String,
    pub by_tier: Tier,
    pub by_line: usize,
    /// Taken by an earlier entry of the same tier (else by a stricter tier).
    pub dead: bool,
}

/// Two entries of different tiers that match a common command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Overlap {
    pub pattern: String,
    pub tier: Tier,
    pub line: usize,
    pub other: String,
    pub other_tier: Tier,
    pub other_line: usize,
    /// A command both match.
    pub example: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Expansion {
    pub previous_revision: Option<u64>,
    pub revision: u64,
    pub more_permissive: Vec<Move>,
    pub shadowed: Vec<Shadowed>,
    /// Overlaps the previous revision did not have.
    pub overlaps: Vec<Overlap>,
    /// Overlaps the previous revision already had (not listed again).
    pub known_overlaps: usize,
}

impl Expansion {
    pub fn is_empty(&self) -> bool {
        self.more_permissive.is_empty() && self.shadowed.is_empty() && self.overlaps.is_empty()
    }
}

/// Sample argvs of an entry's pattern.
fn samples(e: &Entry) -> Vec<Vec<String>> {
    let mut base: Vec<String> = Vec::new();
    let mut open = false;
    for w in e.pattern.words() {
        match w {
            PatternWord::Literal(s) => base.push(s.clone()),
            PatternWord::Glob(pieces) => base.push(pieces.join(ANY)),
            PatternWord::One => base.push(ANY.to_owned()),
            PatternWord::Rest => open = true,
        }
    }
    let mut out = vec![base.clone()];
    if open {
        base.push(ANY.to_owned());
        out.push(base);
    }
    out
}

fn matches(e: &Entry, argv: &[&str]) -> bool {
    if e.tier >= Tier::Ask {
        e.pattern.matches_any_command_path(argv)
    } else {
        e.pattern.matches(argv)
    }
}

/// The expansion of `new` against `old` (the previous revision, when there is one).
pub fn expansion(old: Option<&TierMap>, new: &TierMap) -> Expansion {
    let mut x = Expansion {
        previous_revision: old.map(|m| m.revision),
        revision: new.revision,
        ..Expansion::default()
    };
    if let Some(old) = old {
        for o in old.entries() {
            let now = new
                .entries()
                .iter()
                .find(|n| n.pattern.as_str() == o.pattern.as_str());
            match now {
                Some(n) if n.tier < o.tier => x.more_permissive.push(Move {
                    pattern: n.pattern.as_str().to_owned(),
                    from: Some(o.tier),
                    to: Some(n.tier),
                    line: n.line,
                }),
                None if o.tier >= Tier::Ask => x.more_permissive.push(Move {
                    pattern: o.pattern.as_str().to_owned(),
                    from: Some(o.tier),
                    to: None,
                    line: 0,
                }),
                _ => {}
            }
        }
    }
    for n in new.entries_in(Tier::Read) {
        let before = old.is_some_and(|m| {
            m.entries()
                .iter()
                .any(|o| o.pattern.as_str() == n.pattern.as_str())
        });
        if !before {
            x.more_permissive.push(Move {
                pattern: n.pattern.as_str().to_owned(),
                from: None,
                to: Some(Tier::Read),
                line: n.line,
            });
        }
    }
    x.overlaps = overlaps(new);
    if let Some(old) = old {
        let before: Vec<(String, String)> = overlaps(old)
            .into_iter()
            .map(|o| (o.pattern, o.other))
            .collect();
        let all = x.overlaps.len();
        x.overlaps
            .retain(|o| !before.iter().any(|(p, q)| *p == o.pattern && *q == o.other));
        x.known_overlaps = all - x.overlaps.len();
    }
    for e in new.entries() {
        let mine = samples(e);
        let takers: Vec<&Entry> = mine
            .iter()
            .filter_map(|s| {
                let argv: Vec<&str> = s.iter().map(String::as_str).collect();
                new.classify(&argv).map(|(_, t)| t)
            })
            .collect();
        if takers.len() == mine.len() && takers.iter().all(|t| t.line != e.line) {
            let by = takers[0];
            x.shadowed.push(Shadowed {
                pattern: e.pattern.as_str().to_owned(),
                tier: e.tier,
                line: e.line,
                by: by.pattern.as_str().to_owned(),
                by_tier: by.tier,
                by_line: by.line,
                dead: by.tier == e.tier,
            });
        }
    }
    x
}

/// Pairs of entries of different tiers that match a common command.
fn overlaps(map: &TierMap) -> Vec<Overlap> {
    let mut out = Vec::new();
    for e in map.entries() {
        let mine = samples(e);
        for other in map.entries() {
            if other.tier <= e.tier {
                continue;
            }
            let theirs = samples(other);
            let common = mine.iter().chain(theirs.iter()).find(|s| {
                let argv: Vec<&str> = s.iter().map(String::as_str).collect();
                matches(e, &argv) && matches(other, &argv)
            });
            if let Some(s) = common {
                out.push(Overlap {
                    pattern: e.pattern.as_str().to_owned(),
                    tier: e.tier,
                    line: e.line,
                    other: other.pattern.as_str().to_owned(),
                    other_tier: other.tier,
                    other_line: other.line,
                    example: s.join(" ").replace(ANY, "…"),
                });
            }
        }
    }
    out
}

/// The expansion in words, one line each (what `cmdgate tiermap sign` prints).
pub fn describe(x: &Expansion) -> Vec<String> {
    let tier =
        |t: Option<Tier>| t.map_or("not listed (a mirror run)".to_owned(), |t| t.to_string());
    let mut out = Vec::new();
    for m in &x.more_permissive {
        out.push(format!(
            "more permissive: `{}` {} → {}{}",
            m.pattern,
            m.from.map_or("not listed".to_owned(), |t| t.to_string()),
            tier(m.to),
            if m.line > 0 {
                format!(" (line {})", m.line)
            } else {
                String::new()
            }
        ));
    }
    for s in &x.shadowed {
        out.push(format!(
            "{}: `{}` ({}, line {}) never decides: `{}` ({}, line {}) takes every command it matches",
            if s.dead { "dead" } else { "shadowed" },
            s.pattern,
            s.tier,
            s.line,
            s.by,
            s.by_tier,
            s.by_line
        ));
    }
    for o in &x.overlaps {
        out.push(format!(
            "in two tiers: `{}` ({}, line {}) and `{}` ({}, line {}) both match `{}`; {} wins",
            o.pattern, o.tier, o.line, o.other, o.other_tier, o.other_line, o.example, o.other_tier
        ));
    }
    if x.known_overlaps > 0 {
        out.push(format!(
            "({} pattern pairs in two tiers were already in the previous revision)",
            x.known_overlaps
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiermap::parse;

    fn map(revision: u64, body: &str) -> TierMap {
        parse(&format!("---\nrevision: {revision}\n---\n{body}")).expect("map")
    }

    #[test]
    fn a_broader_map_shows_its_moves_shadows_and_overlaps() {
        let old = map(
            1,
            "## Tier 1 — sandbox\n- `cargo build *`\n## Tier 2 — ask\n- `git push *`\n- `make deploy`\n",
        );
        let new = map(
            2,
            "## Tier 0 — read\n- `git log *`\n## Tier 1 — sandbox\n- `git push *`\n- `cargo *`\n- `cargo build *`\n\
             ## Tier 3 — deny\n- `git push --force *`\n- `cargo publish`\n- `rm *`\n## Tier 2 — ask\n- `rm -rf *`\n",
        );
        let x = expansion(Some(&old), &new);
        let lines = describe(&x);
        let has = |needle: &str| {
            assert!(
                lines.iter().any(|l| l.contains(needle)),
                "no {needle:?} in {lines:#?}"
            )
        };
        has("more permissive: `git push *` tier 2 (ask) → tier 1 (sandbox)");
        has("more permissive: `make deploy` tier 2 (ask) → not listed");
        has("more permissive: `git log *` not listed → tier 0 (read)");
        has("dead: `cargo build *` (tier 1 (sandbox)");
        has("shadowed: `rm -rf *` (tier 2 (ask)");
        has("in two tiers: `git push *`");
        has("`git push --force *` (tier 3 (deny)");
        assert!(
            !lines.iter().any(|l| l.contains("shadowed: `cargo *`")),
            "{lines:#?}"
        );
        assert_eq!(x.previous_revision, Some(1));
    }

    #[test]
    fn an_unchanged_narrow_map_has_no_expansion() {
        let m = map(
            1,
            "## Tier 1 — sandbox\n- `cargo build *`\n## Tier 2 — ask\n- `git push *`\n",
        );
        let x = expansion(Some(&m), &m);
        assert!(x.is_empty(), "{x:#?}");
    }
}
