//! Learning the operator's acceptance (issue 19, docs/threats.md "Mirrored runs"): a command
//! whose dirty runs a person applied (`cmdgate apply`) K times with the same **effect signature**
//! has later runs with exactly that signature committed without asking.
//!
//! The signature is the exact set of effects that made the run dirty, each as its kind and
//! workspace path ([`Signature::of`]); nothing else about the run widens it. A run that refuses
//! one more path, another kind of change on the same path, or anything that is not a change to a
//! pre-existing workspace file (network, a protected or persistence path, a secret, a directory
//! deleted whole, more than [`MAX_PATHS`] paths) has no acceptable signature: a person decides
//! it every time. The record is kept per project and exact command (the learning record's key)
//! under one classification of the command by the tier map (a reclassification clears it), and
//! it is withdrawn by a conflict, an undo (the person refusing what was committed) or a dirty run
//! of the command with another signature.

use serde::{Deserialize, Serialize};

use super::AuditId;
use crate::decide::protected::{effect_refusal, protected, Touch};
use crate::time::UnixMillis;

/// More refused paths than this in one run: never accepted (a person looks at each such run).
pub const MAX_PATHS: usize = 64;
/// Signatures tracked per command (the oldest candidate is dropped first; accepted ones stay).
pub const MAX_SIGNATURES: usize = 8;

/// What happened to a pre-existing workspace path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Its content changed.
    Modified,
    /// Only its mode changed.
    Mode,
    /// A file or symbolic link was deleted.
    Deleted,
    /// A file or symbolic link changed type (e.g. became a directory).
    Replaced,
    /// It was renamed to another path (`to`).
    Renamed,
    /// A directory was deleted or replaced whole: never accepted (its contents are unbounded).
    DirectoryGone,
}

impl Change {
    fn as_str(self) -> &'static str {
        match self {
            Change::Modified => "modified",
            Change::Mode => "mode",
            Change::Deleted => "deleted",
            Change::Replaced => "replaced",
            Change::Renamed => "renamed",
            Change::DirectoryGone => "directory gone",
        }
    }
}

/// One effect that made a run dirty, as the acceptance sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// A change to a pre-existing workspace path (relative, losslessly escaped text; `to` for a
    /// rename).
    Change {
        change: Change,
        path: String,
        to: Option<String>,
    },
    /// Anything else (network, a syscall, a write outside the workspace, a timeout, …), named.
    Other(String),
}

/// Why a dirty run has no acceptable signature (a person decides each such run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotAcceptable {
    /// Nothing was refused (a clean run needs no acceptance).
    Nothing,
    /// More than [`MAX_PATHS`] refused paths.
    TooMany(usize),
    /// A path that changes the gate or runs code later (tier map, `.claude/`, git config and
    /// hooks, persistence files), with the reason.
    Protected(String),
    /// A secret path.
    Secret(String),
    /// A directory deleted or replaced whole.
    Directory(String),
    /// Not a change to a workspace file (network, a syscall, outside the workspace, …).
    Other(String),
}

impl std::fmt::Display for NotAcceptable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotAcceptable::Nothing => write!(f, "nothing was refused"),
            NotAcceptable::TooMany(n) => {
                write!(f, "{n} refused paths (at most {MAX_PATHS} can be accepted)")
            }
            NotAcceptable::Protected(why) => write!(f, "a protected path: {why}"),
            NotAcceptable::Secret(p) => write!(f, "a secret path: {p}"),
            NotAcceptable::Directory(p) => write!(f, "a directory deleted or replaced whole: {p}"),
            NotAcceptable::Other(why) => write!(f, "not a change to a workspace file: {why}"),
        }
    }
}

/// The exact set of a run's refused effects: sorted, distinct lines `<kind> <path>[ -> <to>]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Signature(Vec<String>);

impl Signature {
    /// The signature of a dirty run's refusals, or why a person must decide it. `secret` says
    /// whether a workspace-relative path is a secret (the policy's table and the operator's).
    pub fn of(
        refused: &[Refused],
        secret: impl Fn(&str) -> bool,
    ) -> Result<Signature, NotAcceptable> {
        if refused.is_empty() {
            return Err(NotAcceptable::Nothing);
        }
        let mut lines = Vec::with_capacity(refused.len());
        for r in refused {
            let (change, path, to) = match r {
                Refused::Other(why) => return Err(NotAcceptable::Other(why.clone())),
                Refused::Change { change, path, to } => (*change, path, to),
            };
            if change == Change::DirectoryGone {
                return Err(NotAcceptable::Directory(path.clone()));
            }
            for p in std::iter::once(path).chain(to) {
                if p.is_empty() || p.starts_with('/') || p.split('/').any(|c| c == "..") {
                    return Err(NotAcceptable::Other(format!("an unusual path {p:?}")));
                }
                if let Some(why) = protected(p).or_else(|| effect_refusal(p, Touch::Changed)) {
                    return Err(NotAcceptable::Protected(why));
                }
                if secret(p) {
                    return Err(NotAcceptable::Secret(p.clone()));
                }
            }
            lines.push(match to {
                Some(to) => format!("{} {path} -> {to}", change.as_str()),
                None => format!("{} {path}", change.as_str()),
            });
        }
        lines.sort();
        lines.dedup();
        if lines.len() > MAX_PATHS {
            return Err(NotAcceptable::TooMany(lines.len()));
        }
        Ok(Signature(lines))
    }

    pub fn lines(&self) -> &[String] {
        &self.0
    }
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

/// One signature of a command and the applies behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepting {
    pub signature: Signature,
    /// The audit rows of the operator's applies since the last reset.
    pub applies: Vec<AuditId>,
    /// When the first of them was made.
    pub since: UnixMillis,
    /// Accepted since then: runs with this signature commit without asking.
    pub accepted: Option<UnixMillis>,
}

/// A change worth auditing.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transition", rename_all = "snake_case")]
pub enum AcceptTransition {
    /// The K-th apply of a signature: from now on its runs commit.
    Accepted {
        signature: Signature,
        provenance: Vec<AuditId>,
    },
    /// Accepted signatures withdrawn because of audit row `because`.
    Withdrawn {
        signatures: Vec<Signature>,
        because: AuditId,
    },
}

/// The acceptance part of a command's learning record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Acceptances(Vec<Accepting>);

impl Acceptances {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn entries(&self) -> &[Accepting] {
        &self.0
    }

    /// The accepted entry for exactly this signature, if any. `k == 0` (off) accepts nothing.
    pub fn accepts(&self, signature: &Signature, k: u32) -> Option<&Accepting> {
        (k > 0)
            .then(|| {
                self.0
                    .iter()
                    .find(|a| a.accepted.is_some() && &a.signature == signature)
            })
            .flatten()
    }

    /// The operator applied a dirty run with `signature` (audit row `id`). The K-th apply within
    /// `window_ms` of the first accepts the signature. `k == 0` (off) records nothing.
    pub fn applied(
        &mut self,
        signature: Signature,
        id: AuditId,
        k: u32,
        window_ms: u64,
        now: UnixMillis,
    ) -> Option<AcceptTransition> {
        if k == 0 {
            return None;
        }
        let at = match self.0.iter().position(|a| a.signature == signature) {
            Some(at) => at,
            None => {
                let candidates = self.0.iter().filter(|a| a.accepted.is_none()).count();
                if candidates >= MAX_SIGNATURES {
                    if let Some(oldest) = self
                        .0
                        .iter()
                        .enumerate()
                        .filter(|(_, a)| a.accepted.is_none())
                        .min_by_key(|(_, a)| a.since)
                        .map(|(i, _)| i)
                    {
                        self.0.remove(oldest);
                    }
                }
                self.0.push(Accepting {
                    signature,
                    applies: Vec::new(),
                    since: now,
                    accepted: None,
                });
                self.0.len() - 1
            }
        };
        let entry = &mut self.0[at];
        if entry.accepted.is_some() {
            entry.applies.push(id);
            return None;
        }
        if now.0.saturating_sub(entry.since.0) > window_ms {
            entry.applies.clear();
            entry.since = now;
        }
        entry.applies.push(id);
        if entry.applies.len() < k as usize {
            return None;
        }
        entry.accepted = Some(now);
        Some(AcceptTransition::Accepted {
            signature: entry.signature.clone(),
            provenance: entry.applies.clone(),
        })
    }

    /// A dirty run of the command whose signature is not accepted (or that has none), audit row
    /// `because`: the accepted signatures are withdrawn (the command did something else than what
    /// the person accepted); candidates keep their applies (nothing was applied here).
    pub fn differed(&mut self, because: AuditId) -> Option<AcceptTransition> {
        let signatures: Vec<Signature> = self
            .0
            .iter()
            .filter(|a| a.accepted.is_some())
            .map(|a| a.signature.clone())
            .collect();
        self.0.retain(|a| a.accepted.is_none());
        (!signatures.is_empty()).then_some(AcceptTransition::Withdrawn {
            signatures,
            because,
        })
    }

    /// A conflict, an undo or a rejection (audit row `because`): everything is forgotten.
    pub fn refused(&mut self, because: AuditId) -> Option<AcceptTransition> {
        let withdrawn = self.differed(because);
        self.0.clear();
        withdrawn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEEK: u64 = 7 * 24 * 3_600_000;

    fn ch(change: Change, path: &str) -> Refused {
        Refused::Change {
            change,
            path: path.into(),
            to: None,
        }
    }

    fn sig(refused: &[Refused]) -> Signature {
        Signature::of(refused, |_| false).unwrap()
    }

    #[test]
    fn the_signature_is_the_exact_set_of_kinds_and_paths() {
        let a = sig(&[
            ch(Change::Modified, "gen/a.rs"),
            ch(Change::Deleted, "old.txt"),
        ]);
        // Order and repeats do not matter.
        let b = sig(&[
            ch(Change::Deleted, "old.txt"),
            ch(Change::Modified, "gen/a.rs"),
            ch(Change::Modified, "gen/a.rs"),
        ]);
        assert_eq!(a, b);
        assert_eq!(a.lines(), ["deleted old.txt", "modified gen/a.rs"]);
        // One more path, another kind on the same path, another path: another signature.
        let more = sig(&[
            ch(Change::Modified, "gen/a.rs"),
            ch(Change::Deleted, "old.txt"),
            ch(Change::Deleted, "tracked.txt"),
        ]);
        let kind = sig(&[
            ch(Change::Deleted, "gen/a.rs"),
            ch(Change::Deleted, "old.txt"),
        ]);
        let fewer = sig(&[ch(Change::Modified, "gen/a.rs")]);
        for other in [&more, &kind, &fewer] {
            assert_ne!(&a, other);
        }
        let renamed = sig(&[Refused::Change {
            change: Change::Renamed,
            path: "a".into(),
            to: Some("b".into()),
        }]);
        assert_eq!(renamed.lines(), ["renamed a -> b"]);
    }

    #[test]
    fn protected_secret_directory_and_non_file_effects_are_never_acceptable() {
        type Expect = fn(&NotAcceptable) -> bool;
        let cases: Vec<(Vec<Refused>, Expect)> = vec![
            (vec![], |e| matches!(e, NotAcceptable::Nothing)),
            (vec![ch(Change::Modified, "CLAUDE_CMDS.md")], |e| {
                matches!(e, NotAcceptable::Protected(_))
            }),
            (vec![ch(Change::Modified, ".claude/settings.json")], |e| {
                matches!(e, NotAcceptable::Protected(_))
            }),
            (vec![ch(Change::Modified, ".git/hooks/pre-commit")], |e| {
                matches!(e, NotAcceptable::Protected(_))
            }),
            (vec![ch(Change::Modified, ".mcp.json")], |e| {
                matches!(e, NotAcceptable::Protected(_))
            }),
            (vec![ch(Change::Modified, ".env")], |e| {
                matches!(e, NotAcceptable::Secret(_))
            }),
            (
                vec![Refused::Change {
                    change: Change::Renamed,
                    path: "src/a.rs".into(),
                    to: Some(".envrc".into()),
                }],
                |e| matches!(e, NotAcceptable::Protected(_)),
            ),
            (vec![ch(Change::DirectoryGone, "src")], |e| {
                matches!(e, NotAcceptable::Directory(_))
            }),
            (vec![ch(Change::Modified, "../outside")], |e| {
                matches!(e, NotAcceptable::Other(_))
            }),
            (
                vec![
                    ch(Change::Modified, "a.rs"),
                    Refused::Other("network attempted: inet 1.1.1.1:443".into()),
                ],
                |e| matches!(e, NotAcceptable::Other(_)),
            ),
        ];
        for (refused, expected) in cases {
            let got = Signature::of(&refused, |p| p == ".env").unwrap_err();
            assert!(expected(&got), "{refused:?}: {got}");
        }
        let many: Vec<Refused> = (0..=MAX_PATHS)
            .map(|i| ch(Change::Modified, &format!("f{i}")))
            .collect();
        assert_eq!(
            Signature::of(&many, |_| false),
            Err(NotAcceptable::TooMany(MAX_PATHS + 1))
        );
        assert!(Signature::of(&many[..MAX_PATHS], |_| false).is_ok());
    }

    #[test]
    fn k_applies_of_one_signature_accept_it_and_only_it() {
        let a = sig(&[ch(Change::Modified, "gen/a.rs")]);
        let b = sig(&[ch(Change::Modified, "gen/a.rs"), ch(Change::Deleted, "x")]);
        let mut r = Acceptances::default();
        let now = UnixMillis(1000);
        assert_eq!(r.applied(a.clone(), 1, 3, WEEK, now), None);
        // Another signature's apply does not count towards this one.
        assert_eq!(r.applied(b.clone(), 2, 3, WEEK, now), None);
        assert_eq!(r.applied(a.clone(), 3, 3, WEEK, now), None);
        assert!(r.accepts(&a, 3).is_none());
        assert_eq!(
            r.applied(a.clone(), 4, 3, WEEK, now),
            Some(AcceptTransition::Accepted {
                signature: a.clone(),
                provenance: vec![1, 3, 4]
            })
        );
        assert!(r.accepts(&a, 3).is_some());
        assert!(r.accepts(&b, 3).is_none());
        assert!(r.accepts(&a, 0).is_none(), "k = 0 switches it off");
    }

    #[test]
    fn k_zero_learns_nothing_and_old_applies_expire() {
        let a = sig(&[ch(Change::Modified, "gen/a.rs")]);
        let mut r = Acceptances::default();
        for id in 0..5 {
            assert_eq!(r.applied(a.clone(), id, 0, WEEK, UnixMillis(0)), None);
        }
        assert!(r.is_empty());
        assert_eq!(r.applied(a.clone(), 1, 2, 100, UnixMillis(0)), None);
        // Past the window: the first apply no longer counts.
        assert_eq!(r.applied(a.clone(), 2, 2, 100, UnixMillis(500)), None);
        assert!(matches!(
            r.applied(a.clone(), 3, 2, 100, UnixMillis(550)),
            Some(AcceptTransition::Accepted { provenance, .. }) if provenance == vec![2, 3]
        ));
    }

    #[test]
    fn a_different_run_withdraws_and_a_conflict_or_undo_forgets_everything() {
        let a = sig(&[ch(Change::Modified, "gen/a.rs")]);
        let b = sig(&[ch(Change::Modified, "gen/b.rs")]);
        let accepted = || {
            let mut r = Acceptances::default();
            for id in 1..=2 {
                let _ = r.applied(a.clone(), id, 2, WEEK, UnixMillis(0));
            }
            let _ = r.applied(b.clone(), 3, 2, WEEK, UnixMillis(0));
            assert!(r.accepts(&a, 2).is_some());
            r
        };
        let mut r = accepted();
        assert_eq!(
            r.differed(9),
            Some(AcceptTransition::Withdrawn {
                signatures: vec![a.clone()],
                because: 9
            })
        );
        assert!(r.accepts(&a, 2).is_none());
        // The candidate keeps its apply: one more accepts it.
        assert!(matches!(
            r.applied(b.clone(), 10, 2, WEEK, UnixMillis(0)),
            Some(AcceptTransition::Accepted { .. })
        ));
        let mut r = accepted();
        assert!(matches!(
            r.refused(11),
            Some(AcceptTransition::Withdrawn { because: 11, .. })
        ));
        assert!(r.is_empty());
        assert_eq!(r.differed(12), None, "nothing accepted, nothing withdrawn");
    }

    #[test]
    fn candidates_are_bounded_and_accepted_ones_stay() {
        let mut r = Acceptances::default();
        let a = sig(&[ch(Change::Modified, "keep")]);
        let _ = r.applied(a.clone(), 0, 1, WEEK, UnixMillis(0));
        for i in 0..(MAX_SIGNATURES as i64 + 5) {
            let s = sig(&[ch(Change::Modified, &format!("f{i}"))]);
            let _ = r.applied(s, i + 1, 3, WEEK, UnixMillis(i as u64 + 1));
        }
        assert!(r.entries().len() <= MAX_SIGNATURES + 1);
        assert!(r.accepts(&a, 1).is_some());
    }
}
