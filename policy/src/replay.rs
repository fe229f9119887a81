//! Impact preview: past requests replayed through the pure policy under two contexts — the
//! current one and a proposed one (a new tier map, a changed rule) — to show which would now be
//! decided differently, grouped by the pattern that moved them. Nothing is executed: a request the
//! policy would test-run is reported as [`Outcome::TestRun`] on both sides, not run.
//!
//! Both sides are the policy's answer, not what the audit recorded (which also holds people's
//! answers, mirror verdicts and breaker states): the difference is exactly the change's.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::decide::{decide, Context, Decision, Request, Step, Tool};

/// How a request would be decided, before any person or mirror run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Allow,
    TestRun,
    Ask,
    Deny,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "allow",
            Outcome::TestRun => "test-run",
            Outcome::Ask => "ask",
            Outcome::Deny => "deny",
        }
    }
}

/// A step's outcome and the rule that produced it.
pub fn outcome(step: &Step) -> (Outcome, Option<String>) {
    match step {
        Step::Decided(Decision::Allow(e)) => (Outcome::Allow, e.rule.clone()),
        Step::Decided(Decision::Ask(e)) => (Outcome::Ask, e.rule.clone()),
        Step::Decided(Decision::Deny(e)) => (Outcome::Deny, e.rule.clone()),
        Step::TestRun(plan) => (
            Outcome::TestRun,
            (!plan.rules.is_empty()).then(|| plan.rules.join(", ")),
        ),
    }
}

/// What a mirror step may reach (network by domain): `""` for nothing, `network` for the host's
/// whole network, else `network=<hosts>`. A preview shows a change of it like a change of outcome.
pub fn network(step: &Step) -> String {
    match step {
        Step::TestRun(plan) if plan.options.network => "network".to_owned(),
        Step::TestRun(plan) if !plan.options.hosts.is_empty() => format!(
            "network={}",
            plan.options
                .hosts
                .iter()
                .map(|h| h.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
        _ => String::new(),
    }
}

/// One retained request of the audit.
#[derive(Debug, Clone)]
pub struct Past {
    /// Its audit row.
    pub id: i64,
    pub tool: Tool,
    /// Canonical project root.
    pub project: String,
    pub cwd: String,
    /// What the operator reads in examples (the command, or a summary of another tool's input).
    pub shown: String,
}

/// Requests that moved the same way under the same pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// The rule that decides under the proposed context, else the one that decided before
    /// (`(no rule)` for the built-in defaults).
    pub pattern: String,
    pub from: Outcome,
    pub to: Outcome,
    pub count: usize,
    /// Up to [`EXAMPLES`] (audit id, command), oldest first.
    pub examples: Vec<(i64, String)>,
}

/// Examples kept per group.
pub const EXAMPLES: usize = 3;

/// The preview.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    pub replayed: usize,
    pub changed: usize,
    /// Largest groups first.
    pub groups: Vec<Group>,
}

impl Report {
    /// Changes toward a more permissive outcome (deny → ask, ask → allow, …).
    pub fn more_permissive(&self) -> usize {
        self.groups
            .iter()
            .filter(|g| g.to < g.from)
            .map(|g| g.count)
            .sum()
    }
}

/// Replays `past` under `before` and `after`; `contexts` gives the two contexts for a request's
/// project (the tier map is per project), or `None` to skip the request (a project the change is
/// not about). It must give the same contexts for the same project: results are reused for a
/// request (tool, project, cwd) seen before.
pub fn replay<'a, I, F>(past: I, mut contexts: F) -> Report
where
    I: IntoIterator<Item = &'a Past>,
    F: FnMut(&Past) -> Option<(Context<'a>, Context<'a>)>,
{
    let mut groups: BTreeMap<(String, Outcome, Outcome), Group> = BTreeMap::new();
    let mut report = Report::default();
    // `decide` is pure: a request seen before (agents repeat themselves) is not decided again.
    type Side = ((Outcome, Option<String>), String);
    type Both = (Side, Side);
    let mut seen: HashMap<(String, String, String), Both> = HashMap::new();
    for p in past {
        let Some((before, after)) = contexts(p) else {
            continue;
        };
        let req = Request {
            tool: &p.tool,
            project_root: &p.project,
            cwd: &p.cwd,
        };
        report.replayed += 1;
        let key = (format!("{:?}", p.tool), p.project.clone(), p.cwd.clone());
        let (((from, old_rule), old_net), ((to, new_rule), new_net)) = seen
            .entry(key)
            .or_insert_with(|| {
                let (a, b) = (decide(req, before), decide(req, after));
                ((outcome(&a), network(&a)), (outcome(&b), network(&b)))
            })
            .clone();
        if from == to && old_net == new_net {
            continue;
        }
        report.changed += 1;
        let mut pattern = new_rule
            .or(old_rule)
            .unwrap_or_else(|| "(no rule)".to_owned());
        if old_net != new_net {
            let shown = |n: &str| match n {
                "" => "no network".to_owned(),
                n => n.to_owned(),
            };
            pattern = format!("{pattern} ({} → {})", shown(&old_net), shown(&new_net));
        }
        let g = groups
            .entry((pattern.clone(), from, to))
            .or_insert_with(|| Group {
                pattern,
                from,
                to,
                count: 0,
                examples: Vec::new(),
            });
        g.count += 1;
        if g.examples.len() < EXAMPLES {
            g.examples.push((p.id, p.shown.clone()));
        }
    }
    report.groups = groups.into_values().collect();
    report.groups.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.pattern.cmp(&b.pattern))
    });
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{Rule, RuleKind, RuleSet};
    use crate::shell::read::{ReadPolicy, SecretPaths};
    use crate::shell::Limits;
    use crate::tiermap::{parse, Snapshot, VerifiedMap};

    fn snapshot(body: &str) -> Snapshot {
        let map = parse(&format!("---\nrevision: 1\n---\n{body}")).expect("map");
        Snapshot::Verified(VerifiedMap {
            revision: map.revision,
            map,
            key: "test".into(),
            key_version: 1,
            content_hash: crate::tiermap::content_hash(body),
        })
    }

    fn past(id: i64, command: &str) -> Past {
        Past {
            id,
            tool: Tool::Bash {
                command: command.into(),
            },
            project: "/p".into(),
            cwd: "/p".into(),
            shown: command.into(),
        }
    }

    #[test]
    fn a_broader_map_moves_requests_and_groups_them_by_pattern() {
        let old = snapshot("## Tier 2 — ask\n- `cargo publish *`\n");
        let new = snapshot("## Tier 1 — sandbox\n- `cargo *`\n## Tier 3 — deny\n- `rm -rf *`\n");
        let rules: &'static RuleSet = Box::leak(Box::new(RuleSet::new(Vec::new())));
        let secrets = SecretPaths::new::<String>(&[], "/home/a");
        let policy: &'static ReadPolicy<'static> = Box::leak(Box::new(ReadPolicy {
            home: "/home/a".into(),
            cwd: None,
            project: None,
            secrets: std::borrow::Cow::Owned(secrets),
            extension: None,
            listing: None,
            packs: crate::shell::read::PackSet::all(),
        }));
        let ctx = |s: &'static Snapshot| Context {
            snapshot: s,
            rules,
            breaker_open: false,
            read_policy: policy,
            limits: Limits::default(),
            home: "/home/a",
            own_paths: &[],
        };
        let old: &'static Snapshot = Box::leak(Box::new(old));
        let new: &'static Snapshot = Box::leak(Box::new(new));
        let history: Vec<Past> = vec![
            past(1, "cargo publish --dry-run"),
            past(2, "cargo publish"),
            past(3, "rm -rf build"),
            past(4, "ls"),
            past(5, "cargo publish -p x"),
        ];
        let report = replay(&history, |_| Some((ctx(old), ctx(new))));
        assert_eq!(report.replayed, 5);
        assert_eq!(report.changed, 4, "{report:#?}");
        let g = &report.groups[0];
        assert_eq!((g.from, g.to, g.count), (Outcome::Ask, Outcome::TestRun, 3));
        assert!(g.pattern.contains("`cargo *`"), "{g:?}");
        assert_eq!(g.examples.len(), 3);
        assert_eq!(g.examples[0], (1, "cargo publish --dry-run".into()));
        let rm = &report.groups[1];
        assert_eq!(
            (rm.from, rm.to, rm.count),
            (Outcome::TestRun, Outcome::Deny, 1)
        );
        assert_eq!(report.more_permissive(), 3);
        // A widened host list (same outcome) is shown as a change of the pattern's reach.
        let narrow: &'static Snapshot = Box::leak(Box::new(snapshot(
            "## Tier 1 — sandbox\n- `npm ci` — network=registry.npmjs.org\n",
        )));
        let wide: &'static Snapshot = Box::leak(Box::new(snapshot(
            "## Tier 1 — sandbox\n- `npm ci` — network=registry.npmjs.org, evil.example.com\n",
        )));
        let npm = vec![past(1, "npm ci"), past(2, "ls")];
        let report = replay(&npm, |_| Some((ctx(narrow), ctx(wide))));
        assert_eq!(report.changed, 1, "{report:#?}");
        let g = &report.groups[0];
        assert_eq!((g.from, g.to), (Outcome::TestRun, Outcome::TestRun));
        assert!(
            g.pattern.ends_with(
                "(network=registry.npmjs.org → network=registry.npmjs.org,evil.example.com)"
            ),
            "{g:?}"
        );
        // A remembered rejection of one exact command moves only that command.
        let reject = RuleSet::new(vec![Rule {
            id: 9,
            kind: RuleKind::Reject,
            project: "/p".into(),
            key: "cargo publish".into(),
            enabled: true,
            note: None,
        }]);
        let with_rule = Context {
            rules: Box::leak(Box::new(reject)),
            ..ctx(new)
        };
        let report = replay(&history, |_| Some((ctx(new), with_rule)));
        assert_eq!(report.changed, 1, "{report:#?}");
        assert_eq!(report.groups[0].to, Outcome::Deny);
        assert_eq!(report.groups[0].examples[0].0, 2);
    }
}
