//! Who may use which socket, whose a session is, and what a refused peer costs. The kernel names
//! every peer (`SO_PEERCRED` for uid and primary gid, `SO_PEERGROUPS` for the supplementary groups
//! that group-based access — `cmdgate-agents`, `cmdgate-operators` — rests on); nothing here
//! trusts what a request says about who sent it.
//!
//! - A peer passes when its uid is listed, or its primary or any supplementary group is. Empty
//!   lists mean the daemon's own uid only (user mode); root is never implied.
//! - A refused peer is counted per uid and audited as an integrity event (the first refusal of a
//!   uid and then each power of ten, so a flood cannot fill the disk), and never reaches a
//!   breaker: the global breaker would let any local user who can reach the socket make every
//!   agent read-only.
//! - A session belongs to the uid that opened it: a request naming another uid's session is
//!   refused before the engine sees it, so it cannot trip that session's breaker, borrow its
//!   escape hatch or its pending approvals. Bindings are pruned after a day without use and
//!   stored (`session_owners`): a new binding at once, its last use at most every
//!   `SESSION_TOUCH_MS`; a restart restores them, counting each as used `SESSION_TOUCH_MS` after
//!   its stored time, so a restart never frees a session for another uid early.

use std::collections::HashMap;
use std::sync::Mutex;

use cmdgate_policy::time::UnixMillis;

use crate::config::Peers;
use crate::engine::Role;

/// Does the peer (`uid`, primary `gid`, supplementary `groups`) pass `peers` on the `role`'s
/// socket? `own_uid` is the daemon's uid: the peer allowed when the lists are empty.
pub fn allows(peers: &Peers, own_uid: u32, role: Role, uid: u32, gid: u32, groups: &[u32]) -> bool {
    let (uids, gids) = match role {
        Role::Agent => (&peers.decide_uids, &peers.decide_gids),
        Role::Admin => (&peers.admin_uids, &peers.admin_gids),
    };
    if uids.is_empty() && gids.is_empty() {
        return uid == own_uid;
    }
    uids.contains(&uid) || gids.contains(&gid) || groups.iter().any(|g| gids.contains(g))
}

/// Refused connections per uid.
#[derive(Debug, Default)]
pub struct Refusals {
    per_uid: Mutex<HashMap<u32, u64>>,
}

impl Refusals {
    /// Counts one refusal of `uid`; returns the uid's count and whether this one is audited.
    pub fn count(&self, uid: u32) -> (u64, bool) {
        let mut map = self.per_uid.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(uid).or_insert(0);
        *n += 1;
        (*n, is_power_of_ten(*n))
    }

    /// Every refused uid with its count, by uid.
    pub fn snapshot(&self) -> Vec<(u32, u64)> {
        let map = self.per_uid.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<(u32, u64)> = map.iter().map(|(u, n)| (*u, *n)).collect();
        v.sort_unstable();
        v
    }

    /// All refusals together.
    pub fn total(&self) -> u64 {
        let map = self.per_uid.lock().unwrap_or_else(|p| p.into_inner());
        map.values().sum()
    }
}

fn is_power_of_ten(mut n: u64) -> bool {
    while n >= 10 && n.is_multiple_of(10) {
        n /= 10;
    }
    n == 1
}

/// How long a session binding outlives its last use.
pub const SESSION_IDLE_MS: u64 = 24 * 60 * 60 * 1000;
/// Bound on remembered sessions; past it idle ones are pruned.
const MAX_SESSIONS: usize = 100_000;

/// How stale a stored binding's last use may be: a use is stored when the stored one is older.
pub const SESSION_TOUCH_MS: u64 = 60 * 60 * 1000;

/// A binding in memory: owner, last use, last use as stored.
#[derive(Debug, Clone, Copy)]
struct Binding {
    uid: u32,
    seen: UnixMillis,
    stored: UnixMillis,
}

/// Sessions and the uid that opened each.
#[derive(Debug, Default)]
pub struct SessionOwners {
    map: Mutex<HashMap<String, Binding>>,
}

/// A claim that passed; `store` says the binding (or its last use) must be written now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claimed {
    pub store: bool,
}

impl SessionOwners {
    /// Binds `session` to `uid` if it is new; `Err(owner)` when another uid opened it.
    pub fn claim(&self, session: &str, uid: u32, now: UnixMillis) -> Result<Claimed, u32> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_SESSIONS && !map.contains_key(session) {
            map.retain(|_, b| b.seen.plus(SESSION_IDLE_MS) > now);
        }
        match map.get_mut(session) {
            Some(b) if b.uid == uid => {
                b.seen = now;
                let store = b.stored.plus(SESSION_TOUCH_MS) <= now;
                if store {
                    b.stored = now;
                }
                Ok(Claimed { store })
            }
            Some(b) if b.seen.plus(SESSION_IDLE_MS) <= now => {
                *b = Binding {
                    uid,
                    seen: now,
                    stored: now,
                };
                Ok(Claimed { store: true })
            }
            Some(b) => Err(b.uid),
            None => {
                let b = Binding {
                    uid,
                    seen: now,
                    stored: now,
                };
                map.insert(session.to_owned(), b);
                Ok(Claimed { store: true })
            }
        }
    }

    /// The bindings a previous run stored (`session`, `uid`, stored last use in ms): each counts
    /// as used `SESSION_TOUCH_MS` after its stored time (a later use may not have been stored),
    /// but not after `now`.
    pub fn restore(&self, rows: Vec<(String, u32, i64)>, now: UnixMillis) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        for (session, uid, seen_ms) in rows {
            let stored = UnixMillis(u64::try_from(seen_ms).unwrap_or(0));
            let seen = UnixMillis(stored.plus(SESSION_TOUCH_MS).0.min(now.0));
            map.insert(session, Binding { uid, seen, stored });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_pass_by_uid_primary_or_supplementary_group() {
        let peers = Peers {
            decide_gids: vec![900],
            admin_gids: vec![901],
            ..Peers::default()
        };
        assert!(allows(&peers, 0, Role::Agent, 1001, 1001, &[1001, 900]));
        assert!(allows(&peers, 0, Role::Agent, 1001, 900, &[]));
        assert!(!allows(&peers, 0, Role::Agent, 1001, 1001, &[1001, 901]));
        assert!(allows(&peers, 0, Role::Admin, 1002, 1002, &[901]));
        // Empty lists: the daemon's own uid, root not implied.
        let none = Peers::default();
        assert!(allows(&none, 77, Role::Admin, 77, 77, &[]));
        assert!(!allows(&none, 77, Role::Admin, 0, 0, &[0]));
    }

    #[test]
    fn refusals_are_counted_per_uid_and_audited_sparsely() {
        let r = Refusals::default();
        let audited: Vec<u64> = (0..1000)
            .map(|_| r.count(5))
            .filter(|(_, a)| *a)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(audited, vec![1, 10, 100, 1000]);
        assert_eq!(r.count(6), (1, true));
        assert_eq!(r.snapshot(), vec![(5, 1000), (6, 1)]);
        assert_eq!(r.total(), 1001);
    }

    #[test]
    fn a_session_belongs_to_the_uid_that_opened_it() {
        let s = SessionOwners::default();
        let t = UnixMillis(1_000);
        let new = Ok(Claimed { store: true });
        let known = Ok(Claimed { store: false });
        assert_eq!(s.claim("s1", 1001, t), new);
        assert_eq!(s.claim("s1", 1001, t.plus(5)), known);
        assert_eq!(s.claim("s1", 1002, t.plus(6)), Err(1001));
        assert_eq!(s.claim("s2", 1002, t), new);
        // A use is stored again once the stored one is `SESSION_TOUCH_MS` old.
        assert_eq!(s.claim("s2", 1002, t.plus(SESSION_TOUCH_MS)), new);
        assert_eq!(s.claim("s2", 1002, t.plus(SESSION_TOUCH_MS + 1)), known);
        // A day after its last use the binding is forgotten.
        assert_eq!(s.claim("s1", 1002, t.plus(5 + SESSION_IDLE_MS)), new);
    }

    #[test]
    fn restored_bindings_count_as_used_up_to_a_touch_after_their_stored_use() {
        let t = UnixMillis(10 * SESSION_IDLE_MS);
        let s = SessionOwners::default();
        let stored = i64::try_from(t.0).unwrap();
        // (The daemon restarted well after that.)
        s.restore(
            vec![("s1".into(), 1001, stored)],
            t.plus(3 * SESSION_TOUCH_MS),
        );
        // Stored at t, perhaps used until t + TOUCH: not another uid's before t + TOUCH + a day.
        assert_eq!(
            s.claim("s1", 1002, t.plus(SESSION_TOUCH_MS + SESSION_IDLE_MS - 1)),
            Err(1001)
        );
        assert_eq!(
            s.claim("s1", 1002, t.plus(SESSION_TOUCH_MS + SESSION_IDLE_MS)),
            Ok(Claimed { store: true })
        );
        // Never counted as used after the restart itself.
        let s = SessionOwners::default();
        s.restore(vec![("s2".into(), 1001, stored)], t.plus(1));
        assert!(s.claim("s2", 1002, t.plus(1 + SESSION_IDLE_MS)).is_ok());
    }
}
