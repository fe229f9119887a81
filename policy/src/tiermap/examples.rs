//! Examples under tier-map entries (`  - matches `git push origin main``, `  - does not match
//! `git pull``), checked whenever a map is parsed — by `cmdgate tiermap verify` and `sign`, and by
//! the daemon at load — so a pattern that does not decide what its author wrote down is refused
//! with the example's line instead of being signed and trusted.
//!
//! An example is read like a command of the agent's: the shell analysis (quotes removed, wrappers
//! such as `env` or `sudo` peeled) must give exactly one simple command with a static argv. A
//! `matches` example must be decided by this entry's tier through the whole map (a stricter entry
//! that takes it first is named); a `does not match` example must not match this entry's pattern.

use super::parse::{Entry, Example};
use super::{Diagnostic, Tier, TierMap, FILE_NAME};
use crate::shell::{self, Analysis, Limits, Word};

/// Every failing example of `map`, with its line.
pub(crate) fn check(map: &TierMap) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    for entry in map.entries() {
        for example in &entry.examples {
            if let Err(message) = check_one(map, entry, example) {
                diags.push(Diagnostic::new(FILE_NAME, example.line, message));
            }
        }
    }
    diags
}

fn check_one(map: &TierMap, entry: &Entry, example: &Example) -> Result<(), String> {
    let argv = example_argv(&example.command)?;
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let restricting = entry.tier >= Tier::Ask;
    let hit = if restricting {
        entry.pattern.matches_any_command_path(&argv)
    } else {
        entry.pattern.matches(&argv)
    };
    let cmd = &example.command;
    let pattern = entry.pattern.as_str();
    match (example.must_match, hit) {
        (true, false) => Err(format!(
            "example `{cmd}` does not match `{pattern}` (line {}), though it says it does",
            entry.line
        )),
        (false, true) => Err(format!(
            "example `{cmd}` matches `{pattern}` (line {}), though it says it does not",
            entry.line
        )),
        (true, true) => match map.classify(&argv) {
            Some((tier, first)) if tier != entry.tier => Err(format!(
                "example `{cmd}` of `{pattern}` ({}) is decided by `{}` on line {} ({tier}) instead: \
                 a stricter tier takes it first",
                entry.tier,
                first.pattern,
                first.line
            )),
            _ => Ok(()),
        },
        (false, false) => Ok(()),
    }
}

/// The argv of an example: one simple command, every word static.
fn example_argv(command: &str) -> Result<Vec<String>, String> {
    let script = match shell::analyze(command, &Limits::default()) {
        Analysis::Parsed(s) => s,
        Analysis::Unanalyzable(why) => {
            return Err(format!("example `{command}` cannot be analysed: {why:?}"))
        }
    };
    let [one] = script.commands.as_slice() else {
        return Err(format!(
            "example `{command}` must be one simple command (it has {})",
            script.commands.len()
        ));
    };
    one.argv
        .iter()
        .map(|w| match w {
            Word::Static(s) => Ok(s.clone()),
            Word::Dynamic(raw) => Err(format!(
                "example `{command}` has `{raw}`, whose value is only known when it runs; write it literally"
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::tiermap::parse;

    /// A map with these body lines after a fixed front matter; the diagnostics' lines and messages.
    fn check(body: &str) -> Result<(), Vec<(usize, String)>> {
        let text = format!("---\nrevision: 1\n---\n{body}");
        parse(&text)
            .map(|_| ())
            .map_err(|d| d.into_iter().map(|d| (d.line, d.message)).collect())
    }

    fn refused(body: &str, line: usize, needle: &str) {
        let diags = check(body).expect_err("the examples were accepted");
        assert!(
            diags.iter().any(|(l, m)| *l == line && m.contains(needle)),
            "no diagnostic on line {line} with {needle:?}: {diags:?}"
        );
    }

    #[test]
    fn examples_that_hold_are_accepted_and_kept() {
        let body = "## Tier 2 — ask\n- `git push *`\n  - matches `git push origin main`\n  - does not match `git pull`\n\
                    ## Tier 3 — deny\n- `git push --force *`\n  - matches `git push --force origin`\n  - matches `/usr/bin/git push --force x`\n";
        assert_eq!(check(body), Ok(()));
        let map = parse(&format!("---\nrevision: 1\n---\n{body}")).unwrap();
        let ask = &map.entries()[0];
        assert_eq!(ask.examples.len(), 2);
        assert_eq!(ask.examples[0].command, "git push origin main");
        assert!(ask.examples[0].must_match);
        assert_eq!(ask.examples[1].line, 7);
        assert!(!ask.examples[1].must_match);
    }

    #[test]
    fn quotes_and_wrappers_are_read_like_the_agents_commands() {
        let body = "## Tier 1 — sandbox\n- `git commit -m *`\n  - matches `git commit -m \"fix: a bug\"`\n  - matches `env FOO=1 git commit -m x`\n";
        assert_eq!(check(body), Ok(()));
    }

    #[test]
    fn failing_examples_are_refused_with_their_line() {
        refused(
            "## Tier 0 — read\n- `git status`\n  - matches `git status -s`\n",
            6,
            "does not match `git status` (line 5)",
        );
        refused(
            "## Tier 3 — deny\n- `rm -rf *`\n  - does not match `rm -rf build`\n",
            6,
            "matches `rm -rf *`",
        );
        // Shadowed: the stricter tier decides the example.
        refused(
            "## Tier 1 — sandbox\n- `cargo *`\n  - matches `cargo publish`\n## Tier 2 — ask\n- `cargo publish *`\n",
            6,
            "decided by `cargo publish *` on line 8",
        );
        refused(
            "## Tier 1 — sandbox\n- `make *`\n  - matches `make a && make b`\n",
            6,
            "one simple command",
        );
        refused(
            "## Tier 1 — sandbox\n- `make *`\n  - matches `make $TARGET`\n",
            6,
            "only known when it runs",
        );
        refused(
            "## Tier 1 — sandbox\n- `make *`\n  - maybe `make`\n",
            6,
            "must be an example",
        );
        refused(
            "## Tier 1 — sandbox\n- `make *`\n  - matches make\n",
            6,
            "single backticks",
        );
    }

    #[test]
    fn a_nested_item_away_from_an_entry_is_still_refused() {
        refused(
            "## Tier 1 — sandbox\n\nprose\n  - matches `make`\n",
            7,
            "nested lists",
        );
    }
}
