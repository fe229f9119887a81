//! The remembered and learned rules the engine decides with: one `RuleSet` swapped whole when a
//! rule changes (a decision holds one `Arc` for its whole run), reloaded from the store after every
//! committed change, and a flag that refuses routed calls while the set in memory may be older than
//! the store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use cmdgate_policy::decide::{Rule, RuleKind, RuleSet};
use rusqlite::Connection;
use tokio::sync::Mutex;

use crate::store::{state, Store, StoreError};

/// Why the rules could not be reloaded.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("cannot read the rules: {0}")]
    Store(#[from] StoreError),
    #[error("stored rule {id} has an unknown kind {kind:?}")]
    UnknownKind { id: i64, kind: String },
    #[error("the in-memory rules lock is poisoned (an earlier reload panicked)")]
    Poisoned,
}

/// The engine's rules.
pub(crate) struct Rules {
    /// Swapped whole when a rule changes.
    set: RwLock<Arc<RuleSet>>,
    /// Serialises `reload` (see there).
    reload: Mutex<()>,
    /// The rules in memory may be older than the store (a reload failed after a committed change):
    /// routed calls are refused until a reload succeeds.
    stale: AtomicBool,
}

/// A stored rule kind as the policy knows it.
pub fn rule_kind(kind: &str) -> Option<RuleKind> {
    match kind {
        "approve" => Some(RuleKind::Approve),
        "reject" => Some(RuleKind::Reject),
        "always_ask" => Some(RuleKind::AlwaysAsk),
        "learned" => Some(RuleKind::Learned),
        _ => None,
    }
}

/// Every stored rule, or the first one whose kind is unknown.
pub(crate) fn load(conn: &Connection) -> Result<Result<RuleSet, (i64, String)>, StoreError> {
    let mut rules = Vec::new();
    for r in state::rules(conn)? {
        let Some(kind) = rule_kind(&r.kind) else {
            return Ok(Err((r.id, r.kind)));
        };
        rules.push(Rule {
            id: r.id,
            kind,
            project: r.project,
            key: r.key,
            enabled: r.enabled,
            note: r.note,
        });
    }
    Ok(Ok(RuleSet::new(rules)))
}

impl Rules {
    pub(crate) fn new(set: RuleSet) -> Rules {
        Rules {
            set: RwLock::new(Arc::new(set)),
            reload: Mutex::new(()),
            stale: AtomicBool::new(false),
        }
    }

    /// The current set.
    pub(crate) fn current(&self) -> Arc<RuleSet> {
        match self.set.read() {
            Ok(r) => r.clone(),
            // A poisoned lock: no rules at all is safe (rules only allow by approval or learning;
            // the rejections lost make nothing run that the tier map and sandbox would not allow).
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    /// Whether the set in memory may be older than the store.
    pub(crate) fn is_stale(&self) -> bool {
        self.stale.load(Ordering::Acquire)
    }

    pub(crate) async fn reload(&self, store: &Store) -> Result<(), ReloadError> {
        // One reload at a time, read and install together: a reload that read the rules before a
        // later change committed must not install its older set after that change's own reload
        // (a just-remembered rejection would silently stop matching).
        let _one_at_a_time = self.reload.lock().await;
        let result = match store.read(load).await {
            Ok(Ok(set)) => match self.set.write() {
                Ok(mut r) => {
                    *r = Arc::new(set);
                    Ok(())
                }
                Err(_) => Err(ReloadError::Poisoned),
            },
            Ok(Err((id, kind))) => Err(ReloadError::UnknownKind { id, kind }),
            Err(e) => Err(e.into()),
        };
        // Neither the old set (a disabled approval would still allow) nor an empty one (a
        // remembered rejection would stop matching) is safe to decide with: refuse until it loads.
        self.stale.store(result.is_err(), Ordering::Release);
        result
    }
}
