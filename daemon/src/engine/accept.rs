//! The operator's acceptance in the daemon (docs/threats.md, "Mirrored runs"): a dirty run's
//! refusals become an effect signature (`policy::learn::accept`), an accepted signature turns
//! the run's rollback into a commit (`runs.rs`, audited as `accepted_run` with source
//! `learned`), an operator's apply counts towards accepting it (`apply.rs`), and a conflict, an
//! undo or a dirty run with another signature withdraws it (`redeem.rs`). The counts live in the
//! command's learning record, in the audit row's transaction; every change is a `learn` row.

use cmdgate_policy::learn::accept::{
    AcceptTransition, Acceptances, Accepting, Change, NotAcceptable, Refused, Signature,
};
use cmdgate_policy::learn::{PromotionConfig, Record};
use cmdgate_policy::secrets::SecretPaths;
use cmdgate_sandbox::verdict::Rule;
use cmdgate_sandbox::{Effect, FileKind, TestRun};
use rusqlite::Connection;
use serde_json::{json, Value};

use crate::clock;
use crate::store::audit::{self, Entry, Kind, LearnChange};
use crate::store::{state, StoreError};

/// What the acceptance made of a run (the run row's `sandbox.acceptance`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAcceptance {
    /// Clean, not judged, or not a rollback: nothing to accept.
    None,
    /// Rolled back with this signature (an operator's apply of it counts).
    Signature(Signature),
    /// Rolled back, and a person must decide each such run.
    NotAcceptable(String),
    /// Its signature was accepted: committed without asking, on these applies.
    Accepted {
        signature: Signature,
        provenance: Vec<i64>,
    },
}

impl RunAcceptance {
    /// The run row's `sandbox.acceptance` (with the learning key and classification it counts
    /// under, for the apply and the undo).
    pub fn detail(&self, key: &str, classification: Option<&str>) -> Value {
        let mut v = match self {
            RunAcceptance::None => return Value::Null,
            RunAcceptance::Signature(s) => json!({"signature": s}),
            RunAcceptance::NotAcceptable(why) => json!({"not_acceptable": why}),
            RunAcceptance::Accepted {
                signature,
                provenance,
            } => json!({"signature": signature, "accepted": provenance}),
        };
        v["key"] = json!(key);
        v["classification"] = json!(classification);
        v
    }
}

/// A dirty mirrored run's refusals as the acceptance sees them: only the sandbox's tracked-file
/// changes can be part of a signature; every other reason (and `also`: the policy's protected
/// paths, refused hosts) is named as not acceptable.
pub fn refusals(run: &TestRun, also: &[String]) -> Vec<Refused> {
    let mut out: Vec<Refused> = also.iter().cloned().map(Refused::Other).collect();
    for (i, r) in run.refusals.iter().enumerate() {
        let why = run.why.get(i).cloned().unwrap_or_default();
        let effect = r.effect.and_then(|e| run.effects.get(e));
        out.push(match (r.rule, effect) {
            (Rule::TrackedChange, Some(e)) => change_of(e).unwrap_or(Refused::Other(why)),
            _ => Refused::Other(why),
        });
    }
    if run.refusals.len() != run.why.len() {
        // A verdict without its data (an older helper): never acceptable.
        out.push(Refused::Other(
            "the verdict's reasons are not itemised".into(),
        ));
    }
    out
}

fn text(p: &std::path::Path) -> Option<String> {
    p.to_str().map(str::to_owned)
}

/// A workspace effect on a pre-existing path as a refused change; `None` for anything else.
fn change_of(e: &Effect) -> Option<Refused> {
    use cmdgate_sandbox::Area;
    let (area, _) = e.location()?;
    if area != Area::Workspace {
        return None;
    }
    let (change, path, to) = match e {
        Effect::Modified { path, .. } => (Change::Modified, path, None),
        Effect::MetadataChanged { path, .. } => (Change::Mode, path, None),
        Effect::Deleted {
            path,
            kind: FileKind::Dir,
            ..
        }
        | Effect::ReplacedDir { path, .. }
        | Effect::Replaced {
            path,
            old: FileKind::Dir,
            ..
        } => (Change::DirectoryGone, path, None),
        Effect::Deleted { path, .. } => (Change::Deleted, path, None),
        Effect::Replaced { path, .. } => (Change::Replaced, path, None),
        Effect::Renamed { from, to, .. } => (Change::Renamed, from, Some(to)),
        _ => return None,
    };
    Some(Refused::Change {
        change,
        path: text(path)?,
        to: match to {
            Some(t) => Some(text(t)?),
            None => None,
        },
    })
}

/// The run's signature, or why it has none. `secret` covers the policy's table and the
/// operator's `secret_paths` for the agent's home; workspace paths are checked as absolute.
pub fn signature(
    run: &TestRun,
    also: &[String],
    project: &std::path::Path,
    secrets: &SecretPaths,
) -> Result<Signature, NotAcceptable> {
    Signature::of(&refusals(run, also), |rel| {
        let abs = project.join(rel);
        abs.to_str()
            .is_none_or(|a| secrets.matches(a, &[], false) || secrets.matches(rel, &[], false))
    })
}

/// The accepted signatures of a command, if its record was gathered under `classification`
/// (another classification: nothing is accepted). `k == 0` accepts nothing.
pub fn accepted(record: Option<&Record>, classification: Option<&str>, k: u32) -> Vec<Accepting> {
    let Some(record) = record else {
        return Vec::new();
    };
    if k == 0 || record.classification.as_deref() != classification {
        return Vec::new();
    }
    record
        .acceptance
        .entries()
        .iter()
        .filter(|a| a.accepted.is_some())
        .cloned()
        .collect()
}

/// What happened, for [`record`].
#[derive(Debug, Clone)]
pub enum Event {
    /// The operator applied a run with this signature (audit row).
    Applied(Signature),
    /// A dirty run whose signature is not accepted.
    Differed,
    /// A conflict or an undo: forget everything.
    Refused,
}

/// Applies an acceptance event of `key` in `project` inside the caller's transaction (audit row
/// `id` caused it); writes a `learn` row for a change. The event counts only under the record's
/// classification (`classification`: the run's; `None` skips the check).
pub fn record(
    c: &Connection,
    project: &str,
    key: &str,
    classification: Option<&str>,
    event: Event,
    id: i64,
    config: &PromotionConfig,
) -> Result<Option<AcceptTransition>, StoreError> {
    let Some(rec) = state::learn_record(c, project, key)? else {
        if !matches!(event, Event::Applied(_)) || config.accept_k == 0 {
            return Ok(None);
        }
        let rec = Record {
            classification: classification.map(str::to_owned),
            ..Record::default()
        };
        return record_in(c, project, key, rec, event, id, config);
    };
    if let (Some(class), Event::Applied(_)) = (classification, &event) {
        if rec.classification.as_deref() != Some(class) {
            // The map reclassified the command since that run: the apply says nothing about it
            // as classified now.
            return Ok(None);
        }
    }
    record_in(c, project, key, rec, event, id, config)
}

fn record_in(
    c: &Connection,
    project: &str,
    key: &str,
    mut rec: Record,
    event: Event,
    id: i64,
    config: &PromotionConfig,
) -> Result<Option<AcceptTransition>, StoreError> {
    let now = clock::now();
    let acceptance: &mut Acceptances = &mut rec.acceptance;
    let transition = match event {
        Event::Applied(sig) => acceptance.applied(sig, id, config.accept_k, config.window_ms, now),
        Event::Differed => acceptance.differed(id),
        Event::Refused => acceptance.refused(id),
    };
    state::put_learn_record(c, project, key, &rec, clock::now_ms())?;
    let Some(t) = &transition else {
        return Ok(None);
    };
    let (decision, note) = match t {
        AcceptTransition::Accepted {
            signature,
            provenance,
        } => (
            LearnChange::AcceptanceLearned,
            format!(
                "the operator applied runs with these refused effects {} times (audit rows \
                 {provenance:?}); later runs with exactly them commit: {signature}",
                provenance.len()
            ),
        ),
        AcceptTransition::Withdrawn {
            signatures,
            because,
        } => (
            LearnChange::AcceptanceWithdrawn,
            format!(
                "acceptance withdrawn because of audit row {because}: {}",
                signatures
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(" | ")
            ),
        ),
    };
    audit::append(
        c,
        Entry {
            at_ms: clock::now_ms(),
            kind: Kind::Learn,
            project: Some(project.to_owned()),
            command: Some(key.to_owned()),
            decision: Some(decision.into()),
            note: Some(note),
            ..Entry::default()
        },
    )?;
    Ok(transition)
}

/// The learning key, classification and signature a run row's `sandbox` column names.
pub fn of_row(sandbox: Option<&str>) -> Option<(String, Option<String>, Option<Signature>)> {
    let v: Value = serde_json::from_str(sandbox?).ok()?;
    let a = v.get("acceptance")?;
    let key = a.get("key")?.as_str()?.to_owned();
    let class = a
        .get("classification")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let sig = a
        .get("signature")
        .and_then(|s| serde_json::from_value(s.clone()).ok());
    Some((key, class, sig))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cmdgate_sandbox::verdict::Refusal;
    use cmdgate_sandbox::Area;
    use std::path::PathBuf;
    use std::time::Duration;

    fn run(effects: Vec<Effect>, refusals: Vec<(Rule, Option<usize>)>) -> TestRun {
        TestRun {
            exit: Some(0),
            signal: None,
            timed_out: false,
            duration: Duration::ZERO,
            stdout: String::new(),
            stderr: String::new(),
            output_truncated: false,
            why: refusals.iter().map(|(r, _)| format!("{r:?}")).collect(),
            refusals: refusals
                .into_iter()
                .map(|(rule, effect)| Refusal { rule, effect })
                .collect(),
            effects,
            clean: false,
        }
    }

    fn modified(p: &str) -> Effect {
        Effect::Modified {
            area: Area::Workspace,
            path: PathBuf::from(p),
            old_size: 1,
            new_size: 2,
        }
    }

    fn secrets() -> SecretPaths {
        SecretPaths::builtin("/home/u", &["/p/vault.txt"])
    }

    #[test]
    fn only_tracked_changes_make_a_signature() {
        let p = std::path::Path::new("/p");
        let r = run(
            vec![
                Effect::Created {
                    area: Area::Workspace,
                    path: "new".into(),
                    kind: FileKind::File,
                    size: 1,
                },
                modified("gen.rs"),
                Effect::Deleted {
                    area: Area::Workspace,
                    path: "old.txt".into(),
                    kind: FileKind::File,
                    size: 1,
                },
            ],
            vec![
                (Rule::TrackedChange, Some(1)),
                (Rule::TrackedChange, Some(2)),
            ],
        );
        let s = signature(&r, &[], p, &secrets()).unwrap();
        assert_eq!(s.lines(), ["deleted old.txt", "modified gen.rs"]);
        // A protected path the policy refused, or any other rule: a person decides.
        assert!(matches!(
            signature(&r, &["changed .mcp.json".into()], p, &secrets()),
            Err(NotAcceptable::Other(_))
        ));
        let net = run(
            vec![
                modified("gen.rs"),
                Effect::Network {
                    target: "inet 1.1.1.1:443".into(),
                    allowed: false,
                },
            ],
            vec![(Rule::TrackedChange, Some(0)), (Rule::Other, Some(1))],
        );
        assert!(signature(&net, &[], p, &secrets()).is_err());
        let dir = run(
            vec![Effect::Deleted {
                area: Area::Workspace,
                path: "src".into(),
                kind: FileKind::Dir,
                size: 9,
            }],
            vec![(Rule::TrackedChange, Some(0))],
        );
        assert!(matches!(
            signature(&dir, &[], p, &secrets()),
            Err(NotAcceptable::Directory(_))
        ));
        // The operator's secret paths, and the policy's, are never accepted.
        for secret in ["vault.txt", ".env", "deploy/id_rsa"] {
            let r = run(vec![modified(secret)], vec![(Rule::TrackedChange, Some(0))]);
            assert!(
                matches!(
                    signature(&r, &[], p, &secrets()),
                    Err(NotAcceptable::Secret(_))
                ),
                "{secret}"
            );
        }
        // A verdict without itemised reasons is never accepted.
        let mut bare = run(
            vec![modified("gen.rs")],
            vec![(Rule::TrackedChange, Some(0))],
        );
        bare.refusals.clear();
        assert!(signature(&bare, &[], p, &secrets()).is_err());
    }

    #[test]
    fn applies_count_under_the_classification_and_a_conflict_forgets() {
        let c = Connection::open_in_memory().unwrap();
        for m in crate::store::migrations::MIGRATIONS {
            c.execute_batch(m).unwrap();
        }
        let config = PromotionConfig {
            accept_k: 2,
            ..PromotionConfig::default()
        };
        let r = run(
            vec![modified("gen.rs")],
            vec![(Rule::TrackedChange, Some(0))],
        );
        let sig = signature(&r, &[], std::path::Path::new("/p"), &secrets()).unwrap();
        let ev = || Event::Applied(sig.clone());
        assert_eq!(
            record(&c, "/p", "make gen", Some("unknown"), ev(), 1, &config).unwrap(),
            None
        );
        // An apply of a run classified otherwise does not count.
        assert_eq!(
            record(
                &c,
                "/p",
                "make gen",
                Some("sandbox `make *`"),
                ev(),
                2,
                &config
            )
            .unwrap(),
            None
        );
        let t = record(&c, "/p", "make gen", Some("unknown"), ev(), 3, &config).unwrap();
        assert!(
            matches!(t, Some(AcceptTransition::Accepted { ref provenance, .. }) if *provenance == vec![1, 3]),
            "{t:?}"
        );
        let rec = state::learn_record(&c, "/p", "make gen").unwrap();
        assert_eq!(accepted(rec.as_ref(), Some("unknown"), 2).len(), 1);
        assert!(accepted(rec.as_ref(), Some("sandbox `make *`"), 2).is_empty());
        assert!(accepted(rec.as_ref(), Some("unknown"), 0).is_empty());
        let t = record(&c, "/p", "make gen", None, Event::Refused, 4, &config).unwrap();
        assert!(matches!(
            t,
            Some(AcceptTransition::Withdrawn { because: 4, .. })
        ));
        let rec = state::learn_record(&c, "/p", "make gen").unwrap();
        assert!(accepted(rec.as_ref(), Some("unknown"), 2).is_empty());
        let learn_rows: i64 = c
            .query_row(
                "SELECT count(*) FROM command_audit WHERE kind = 'learn'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(learn_rows, 2, "learned and withdrawn are audited");
    }
}
