//! The operator's rule verbs on the admin socket: list (with the rules' revision), show (a rule, the
//! audit rows it came from and the decisions it made), add, enable, disable, remove.
//!
//! Every edit may carry the revision the operator saw (`if_revision`). The check and the change run
//! in one store write job — the store has a single writer, so the two are atomic with respect to
//! every other change, learned promotions included — and a stale expectation is a `409` that names
//! the current revision, with nothing changed. Every change is audited (a `rule` row in the same
//! transaction) and the daemon's rule snapshot is reloaded before the answer.

use std::path::Path;

use cmdgate_policy::decide::RuleRef;
use cmdgate_policy::decide::{canonical_key, RuleKind};
use cmdgate_policy::secrets::SecretPaths;
use cmdgate_policy::shell::read::{classify, PackSet, ReadPolicy, ReadVerdict};
use cmdgate_policy::shell::{self, Analysis, Limits};
use serde::{Deserialize, Serialize};

use crate::clock;

/// Whether the hook's built-in read list allows `script` locally (so the daemon never sees it).
/// The secret paths are resolved against this process's home: a secret named by the agent's absolute
/// home path may be judged a read here, which only refuses a rule, never allows a call.
fn is_fast_path_read(script: &shell::Script, extra_secrets: &[String], packs: PackSet) -> bool {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/nonexistent".into());
    let policy = ReadPolicy {
        home: home.clone(),
        cwd: None,
        project: None,
        secrets: std::borrow::Cow::Owned(SecretPaths::builtin(&home, extra_secrets)),
        extension: None,
        listing: None,
        packs,
    };
    classify(script, &policy) == ReadVerdict::PureRead
}
use crate::engine::rules::rule_kind;
use crate::engine::Engine;
use crate::store::audit::{self, Entry, Kind, RuleChange};
use crate::store::state::{self, RevisionConflict, RuleShown, StoredRule};
use crate::store::StoreError;

/// Most matched decisions `show` returns (newest first).
const SHOW_MATCHED: u32 = 50;
/// Most history rows (add, enable, disable, promotion) `show` returns.
const SHOW_HISTORY: u32 = 200;

/// How a rule is named in decisions and audit rows.
fn label(id: i64) -> String {
    RuleRef(id).to_string()
}

/// Why a rule verb did not change (or show) anything.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    /// The request itself is refused (a bad kind, command or project).
    #[error("{0}")]
    Invalid(String),
    #[error("no rule {0}")]
    NotFound(i64),
    /// The edit was made against an old revision: nothing changed.
    #[error(transparent)]
    Conflict(RevisionConflict),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The change is committed, but the engine's rules could not be reloaded.
    #[error("the change was committed ({committed}) but the rules could not be reloaded: {error}")]
    NotReloaded {
        /// What was committed (its JSON).
        committed: String,
        error: crate::engine::rules::ReloadError,
    },
}

/// `POST /admin/rules`: the rule added, and the rules' revision after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleAdded {
    pub id: i64,
    /// The command's canonical key.
    pub key: String,
    /// The canonical project root.
    pub project: String,
    pub revision: i64,
}

/// `POST /admin/rules/{id}/enable|disable`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleEnabled {
    pub id: i64,
    pub enabled: bool,
    pub revision: i64,
}

/// `DELETE /admin/rules/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleRemoved {
    pub id: i64,
    /// Always true (a missing rule is an error).
    pub removed: bool,
    pub revision: i64,
}

/// A rule to add (`cmdgate rules remember`).
#[derive(Debug, Clone)]
pub struct NewRuleRequest {
    /// `approve`, `reject`, `always_ask`.
    pub kind: String,
    /// The project root (canonicalised here).
    pub project: String,
    /// The command exactly as the agent would send it.
    pub command: String,
    pub note: Option<String>,
    /// Apply only if the rules are still at this revision.
    pub if_revision: Option<i64>,
}

/// The audit row of an operator's change to one rule.
fn change_entry(rule: &StoredRule, what: RuleChange, revision: i64) -> Entry {
    Entry {
        at_ms: clock::now_ms(),
        kind: Kind::Rule,
        project: Some(rule.project.clone()),
        command: Some(rule.key.clone()),
        decision: Some(what.into()),
        rule: Some(label(rule.id)),
        reason: Some(format!(
            "the operator's {what} of {} {} (rules revision {revision})",
            rule.kind,
            label(rule.id)
        )),
        ..Entry::default()
    }
}

impl Engine {
    /// Reloads the engine's rules after a committed change; the answer says if that failed (the
    /// change stays committed and is picked up by the next reload).
    async fn after_rule_change<T: serde::Serialize>(&self, ok: T) -> Result<T, RuleError> {
        match self.reload_rules().await {
            Ok(()) => Ok(ok),
            Err(error) => Err(RuleError::NotReloaded {
                committed: serde_json::to_string(&ok).unwrap_or_default(),
                error,
            }),
        }
    }

    /// `GET /admin/rules`: the revision and every rule, read together.
    pub async fn rules_list(&self) -> Result<(i64, Vec<StoredRule>), StoreError> {
        self.store.read(state::rules_at_revision).await
    }

    /// `GET /admin/rules/{id}`: the rule, the audit rows it came from, its history and the latest
    /// decisions it made.
    pub async fn rule_show(&self, id: i64) -> Result<RuleShown, RuleError> {
        self.store
            .read(move |c| state::rule_shown(c, id, SHOW_HISTORY, SHOW_MATCHED))
            .await?
            .ok_or(RuleError::NotFound(id))
    }

    /// `POST /admin/rules`: remember a decision (approve, reject, always-ask) for one exact command
    /// in one project. Learned entries come only from the daemon's own promotion.
    pub async fn rules_add(&self, add: NewRuleRequest) -> Result<RuleAdded, RuleError> {
        let change = match rule_kind(&add.kind) {
            Some(RuleKind::Approve) => RuleChange::Approve,
            Some(RuleKind::Reject) => RuleChange::Reject,
            Some(RuleKind::AlwaysAsk) => RuleChange::AlwaysAsk,
            Some(RuleKind::Learned) | None => {
                return Err(RuleError::Invalid(format!(
                    "rule kind {:?} is not approve, reject or always_ask",
                    add.kind
                )))
            }
        };
        let key = match shell::analyze(&add.command, &Limits::default()) {
            Analysis::Parsed(script) => {
                if add.kind != "approve"
                    && is_fast_path_read(
                        &script,
                        &self.config.secret_paths,
                        self.config.read_packs().unwrap_or_else(|_| PackSet::none()),
                    )
                {
                    return Err(RuleError::Invalid(format!(
                            "`{}` is a read: the hook allows it locally without asking the daemon, so a {} rule \
                             would never match. To make reading a file need a person, add its path to \
                             `secret_paths` in config.toml (secret paths always reach the daemon).",
                            add.command, add.kind
                    )));
                }
                canonical_key(&script)
            }
            Analysis::Unanalyzable(u) => {
                return Err(RuleError::Invalid(format!(
                    "the command cannot be analysed: {u:?}"
                )))
            }
        };
        // Rules match the canonical project root only; a relative path would name whatever
        // directory the daemon runs in.
        if !Path::new(&add.project).is_absolute() {
            return Err(RuleError::Invalid(format!(
                "the project {:?} is not an absolute path",
                add.project
            )));
        }
        // Canonicalising reads the file system: on the blocking pool, not the async runtime.
        let given = add.project.clone();
        let project = tokio::task::spawn_blocking(move || {
            std::fs::canonicalize(&given)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or(given)
        })
        .await
        .unwrap_or_else(|_| add.project.clone());
        let rule = state::NewRule {
            kind: add.kind.clone(),
            project: project.clone(),
            key: key.clone(),
            note: add.note.clone(),
            created_by: "operator".into(),
            provenance: Vec::new(),
        };
        let entry = Entry {
            at_ms: clock::now_ms(),
            kind: Kind::Rule,
            project: Some(project.clone()),
            command: Some(add.command.clone()),
            decision: Some(change.into()),
            note: add.note.clone(),
            ..Entry::default()
        };
        let if_revision = add.if_revision;
        let result = self
            .store
            .write(move |c| {
                state::edit_rules(c, if_revision, |c| {
                    let id = state::add_rule(c, &rule, clock::now_ms())?;
                    let revision = state::rules_revision(c)?;
                    audit::append(
                        c,
                        Entry {
                            rule: Some(label(id)),
                            reason: Some(format!(
                                "the operator's {} {} (rules revision {revision})",
                                rule.kind,
                                label(id)
                            )),
                            ..entry
                        },
                    )?;
                    Ok(id)
                })
            })
            .await;
        match result {
            Ok(Ok((id, revision))) => {
                self.after_rule_change(RuleAdded {
                    id,
                    key,
                    project,
                    revision,
                })
                .await
            }
            Ok(Err(c)) => Err(RuleError::Conflict(c)),
            Err(e) => Err(e.into()),
        }
    }

    /// `POST /admin/rules/{id}/enable|disable`.
    pub async fn rules_set_enabled(
        &self,
        id: i64,
        enabled: bool,
        if_revision: Option<i64>,
    ) -> Result<RuleEnabled, RuleError> {
        let what = if enabled {
            RuleChange::Enable
        } else {
            RuleChange::Disable
        };
        let result = self
            .store
            .write(move |c| {
                state::edit_rules(c, if_revision, |c| {
                    let Some(rule) = state::rule(c, id)? else {
                        return Ok(false);
                    };
                    state::set_rule_enabled(c, id, enabled, clock::now_ms())?;
                    let revision = state::rules_revision(c)?;
                    audit::append(c, change_entry(&rule, what, revision))?;
                    Ok(true)
                })
            })
            .await;
        match result {
            Ok(Ok((true, revision))) => {
                self.after_rule_change(RuleEnabled {
                    id,
                    enabled,
                    revision,
                })
                .await
            }
            Ok(Ok((false, _))) => Err(RuleError::NotFound(id)),
            Ok(Err(c)) => Err(RuleError::Conflict(c)),
            Err(e) => Err(e.into()),
        }
    }

    /// `DELETE /admin/rules/{id}`: the rule goes; its audit rows stay.
    pub async fn rules_remove(
        &self,
        id: i64,
        if_revision: Option<i64>,
    ) -> Result<RuleRemoved, RuleError> {
        let result = self
            .store
            .write(move |c| {
                state::edit_rules(c, if_revision, |c| {
                    let Some(rule) = state::rule(c, id)? else {
                        return Ok(false);
                    };
                    state::remove_rule(c, id)?;
                    let revision = state::rules_revision(c)?;
                    audit::append(c, change_entry(&rule, RuleChange::Remove, revision))?;
                    Ok(true)
                })
            })
            .await;
        match result {
            Ok(Ok((true, revision))) => {
                self.after_rule_change(RuleRemoved {
                    id,
                    removed: true,
                    revision,
                })
                .await
            }
            Ok(Ok((false, _))) => Err(RuleError::NotFound(id)),
            Ok(Err(c)) => Err(RuleError::Conflict(c)),
            Err(e) => Err(e.into()),
        }
    }
}
