//! The escape hatch of system mode: an operator's grant, held by the daemon, that makes cmdgate
//! step aside for one agent uid or one session until an expiry. The agent's environment cannot
//! grant it (the system-mode hook reads no `CMDGATE_ESCAPE_HATCH`); the operator grants and revokes
//! it on the admin socket (`cmdgate escape-hatch`), and every grant, revocation and use is audited
//! by the daemon. Grants are stored with their audit row (`escape_hatches`, in the same
//! transaction) and restored at start: a restart neither ends an operator's grant early nor
//! revives a revoked or expired one.

use std::sync::Mutex;

use cmdgate_policy::time::UnixMillis;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::engine::{Engine, Peer};
use crate::store::audit::{self, Entry, HatchChange, Kind};
use crate::store::state::{self, HatchRow};
use crate::store::StoreError;

/// The longest grant: a hatch is for an incident, not a policy.
pub const MAX_GRANT_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// Who a grant covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HatchScope {
    /// Every call from this agent uid (the peer's uid as the kernel reports it).
    Uid(u32),
    /// Every call naming this session (only from the uid that opened it: sessions are bound).
    Session(String),
}

impl std::fmt::Display for HatchScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HatchScope::Uid(u) => write!(f, "uid {u}"),
            HatchScope::Session(s) => write!(f, "session {s}"),
        }
    }
}

/// One grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub id: u64,
    pub scope: HatchScope,
    /// The operator's words, shown to the agent and kept in the audit.
    pub reason: String,
    pub granted_at: UnixMillis,
    pub until: UnixMillis,
    /// The operator's peer credentials as the admin socket saw them.
    pub granted_by: String,
}

/// Why a grant was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("an escape hatch needs a reason")]
    NoReason,
    #[error("an escape hatch needs a duration between 1 minute and 7 days")]
    Duration,
}

/// The daemon's grants.
#[derive(Debug, Default)]
pub struct EscapeHatches {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    grants: Vec<Grant>,
}

impl EscapeHatches {
    /// Records a grant for `scope` lasting `duration_ms` from `now`.
    pub fn grant(
        &self,
        scope: HatchScope,
        reason: &str,
        duration_ms: u64,
        granted_by: String,
        now: UnixMillis,
    ) -> Result<Grant, GrantError> {
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(GrantError::NoReason);
        }
        if !(60_000..=MAX_GRANT_MS).contains(&duration_ms) {
            return Err(GrantError::Duration);
        }
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.next_id += 1;
        let grant = Grant {
            id: inner.next_id,
            scope,
            reason: reason.to_owned(),
            granted_at: now,
            until: now.plus(duration_ms),
            granted_by,
        };
        inner.grants.push(grant.clone());
        Ok(grant)
    }

    /// The grants a previous run stored (in force at start) and the highest id ever used, so
    /// ids are never reused.
    pub fn restore(&self, rows: Vec<HatchRow>, max_id: i64) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.next_id = inner.next_id.max(u64::try_from(max_id).unwrap_or(0));
        for r in rows {
            let scope = match (r.uid, r.session) {
                (Some(uid), None) => HatchScope::Uid(uid),
                (None, Some(session)) => HatchScope::Session(session),
                _ => continue,
            };
            inner.grants.push(Grant {
                id: u64::try_from(r.id).unwrap_or(0),
                scope,
                reason: r.reason,
                granted_at: UnixMillis(u64::try_from(r.granted_ms).unwrap_or(0)),
                until: UnixMillis(u64::try_from(r.until_ms).unwrap_or(0)),
                granted_by: r.granted_by,
            });
        }
    }

    /// Grant `id`, if it is held.
    pub fn get(&self, id: u64) -> Option<Grant> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.grants.iter().find(|g| g.id == id).cloned()
    }

    /// Ends grant `id`; the grant, or `None` when there was none.
    pub fn revoke(&self, id: u64) -> Option<Grant> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let at = inner.grants.iter().position(|g| g.id == id)?;
        Some(inner.grants.remove(at))
    }

    /// The grant covering a call from `uid` in `session` at `now`, if any (a uid grant first).
    pub fn active(&self, uid: u32, session: &str, now: UnixMillis) -> Option<Grant> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.grants.retain(|g| g.until > now);
        inner
            .grants
            .iter()
            .find(|g| g.scope == HatchScope::Uid(uid))
            .or_else(|| {
                inner
                    .grants
                    .iter()
                    .find(|g| matches!(&g.scope, HatchScope::Session(s) if s == session))
            })
            .cloned()
    }

    /// Every grant still in force at `now`, oldest first.
    pub fn list(&self, now: UnixMillis) -> Vec<Grant> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.grants.retain(|g| g.until > now);
        inner.grants.clone()
    }
}

impl Engine {
    /// Grants the escape hatch (the operator's request on the admin socket), audited.
    pub async fn grant_hatch(
        &self,
        operator: Peer,
        scope: HatchScope,
        reason: &str,
        minutes: u64,
    ) -> Result<Result<Grant, GrantError>, StoreError> {
        let grant = match self.hatches.grant(
            scope,
            reason,
            minutes.saturating_mul(60_000),
            operator.to_string(),
            clock::now(),
        ) {
            Ok(g) => g,
            Err(e) => return Ok(Err(e)),
        };
        // Stored with its audit row; a grant the store did not take is no grant.
        if let Err(e) = self
            .audit_hatch(&grant, operator, HatchChange::Granted)
            .await
        {
            self.hatches.revoke(grant.id);
            return Err(e);
        }
        Ok(Ok(grant))
    }

    /// Ends a grant now, audited; `None` when there is no such grant in force.
    pub async fn revoke_hatch(&self, operator: Peer, id: u64) -> Result<Option<Grant>, StoreError> {
        let Some(grant) = self.hatches.get(id) else {
            return Ok(None);
        };
        // Stored first: a revocation the store did not take must not come back at a restart
        // while this run of the daemon believes it gone.
        self.audit_hatch(&grant, operator, HatchChange::Revoked)
            .await?;
        Ok(self.hatches.revoke(id).or(Some(grant)))
    }

    async fn audit_hatch(
        &self,
        grant: &Grant,
        operator: Peer,
        what: HatchChange,
    ) -> Result<(), StoreError> {
        let now_ms = clock::now_ms();
        let entry = Entry {
            at_ms: now_ms,
            kind: Kind::EscapeHatch,
            session: match &grant.scope {
                HatchScope::Session(s) => Some(s.clone()),
                HatchScope::Uid(_) => None,
            },
            decision: Some(what.into()),
            reason: Some(grant.reason.clone()),
            peer: Some(operator.to_string()),
            note: Some(format!(
                "escape hatch #{} {what} for {} until {} ms",
                grant.id, grant.scope, grant.until.0
            )),
            ..Entry::default()
        };
        let row = HatchRow {
            id: i64::try_from(grant.id).unwrap_or(i64::MAX),
            uid: match &grant.scope {
                HatchScope::Uid(u) => Some(*u),
                HatchScope::Session(_) => None,
            },
            session: match &grant.scope {
                HatchScope::Session(s) => Some(s.clone()),
                HatchScope::Uid(_) => None,
            },
            reason: grant.reason.clone(),
            granted_ms: i64::try_from(grant.granted_at.0).unwrap_or(i64::MAX),
            until_ms: i64::try_from(grant.until.0).unwrap_or(i64::MAX),
            granted_by: grant.granted_by.clone(),
        };
        let granted = what == HatchChange::Granted;
        self.store
            .write(move |c| {
                if granted {
                    state::put_hatch(c, &row)?;
                } else {
                    state::revoke_hatch(c, row.id, now_ms)?;
                }
                audit::append(c, entry).map(|_| ())
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    #[test]
    fn a_grant_covers_its_uid_or_session_until_it_expires() {
        let h = EscapeHatches::default();
        let t0 = UnixMillis(1_000_000);
        let g = h
            .grant(
                HatchScope::Uid(1001),
                "incident 7",
                10 * MIN,
                "uid=5".into(),
                t0,
            )
            .unwrap();
        assert_eq!(
            h.active(1001, "any", t0.plus(MIN)).map(|g| g.id),
            Some(g.id)
        );
        assert_eq!(h.active(1002, "any", t0.plus(MIN)), None);
        assert_eq!(h.active(1001, "any", t0.plus(10 * MIN)), None, "expired");
        assert!(h.list(t0.plus(10 * MIN)).is_empty());
        let s = h
            .grant(
                HatchScope::Session("s1".into()),
                "debug",
                MIN,
                "uid=5".into(),
                t0,
            )
            .unwrap();
        assert_eq!(h.active(1003, "s1", t0).map(|g| g.id), Some(s.id));
        assert_eq!(h.active(1003, "s2", t0), None);
        assert_eq!(h.revoke(s.id).map(|g| g.id), Some(s.id));
        assert_eq!(h.active(1003, "s1", t0), None);
        assert_eq!(h.revoke(s.id), None);
    }

    #[test]
    fn a_grant_needs_a_reason_and_a_bounded_duration() {
        let h = EscapeHatches::default();
        let t0 = UnixMillis(0);
        assert_eq!(
            h.grant(HatchScope::Uid(1), " ", MIN, String::new(), t0),
            Err(GrantError::NoReason)
        );
        assert_eq!(
            h.grant(HatchScope::Uid(1), "r", 0, String::new(), t0),
            Err(GrantError::Duration)
        );
        assert_eq!(
            h.grant(HatchScope::Uid(1), "r", MAX_GRANT_MS + 1, String::new(), t0),
            Err(GrantError::Duration)
        );
    }
}
