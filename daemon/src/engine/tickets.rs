//! One-use run tickets: issued by the decision pipeline for a Bash call it runs in the mirror,
//! redeemed by the `cmdgate-run` client on the decide socket (see `cmdgate_policy::wire::run`).
//!
//! A ticket is 32 random bytes; the registry keeps only its SHA-256, bound to what was decided: the
//! session and tool_use_id, the project, the directory the command runs in, the exact command, the
//! tier map revision and the uid of the peer that asked (`SO_PEERCRED`). It is redeemable once,
//! until it expires, by a peer with that uid from that directory; any redemption attempt removes
//! it (a thief's try burns it for the owner too: nothing runs twice or for someone else). Tickets
//! live in memory only: a daemon restart invalidates every one.
//!
//! The registry also remembers, for a while after issue, which tool_use_id got which ticket, so an
//! outcome reporting the original command instead of the client (Claude Code ignored
//! `updatedInput`) is recognised as an integrity event.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cmdgate_policy::decide::TestRunPlan;
use sha2::{Digest, Sha256};

/// How long a routed call's ticket is remembered for the integrity check of its outcome.
const ROUTED_MEMORY: Duration = Duration::from_secs(6 * 3600);
/// Most tickets waiting at once (a flood of decide calls must not grow memory without bound).
const MAX_OPEN: usize = 4096;
/// Most routed calls remembered for the integrity check.
const MAX_ROUTED: usize = 65_536;

/// What a ticket was issued for.
#[derive(Debug, Clone)]
pub struct Issued {
    /// Claude Code's session (the breaker's scope) and the call's id.
    pub session: String,
    pub agent_id: Option<String>,
    pub tool_use_id: String,
    /// The project root (canonical): the workspace the mirror overlays and commits into.
    pub project: PathBuf,
    /// The directory the command runs in (canonical): the client must redeem from here.
    pub cwd: PathBuf,
    /// The exact command run in the mirror (without a leading `cd DIR &&` kept outside).
    pub command: String,
    /// The whole command as the agent wrote it (for the audit and learning).
    pub original: String,
    /// The decision's plan: options of the tier-1 entries, rule key, rules, revision.
    pub plan: TestRunPlan,
    /// The tier map revision decided under; a different revision at redemption refuses.
    pub revision: Option<u64>,
    /// The command's classification under that map (what its learning evidence counts under).
    pub classification: Option<String>,
    /// The decide call's peer: only this uid may redeem.
    pub uid: u32,
    pub gid: u32,
    /// The agent's home (for the mirror's $HOME overlay and `write=~/...` paths).
    pub home: String,
    /// The Bash tool's `timeout` (ms) when the agent gave one: audited, never the run's limit
    /// (Claude Code moves a command still running at it to the background: `runs::run_limit`).
    pub tool_timeout_ms: Option<u64>,
    /// The decision's audit row.
    pub decision_id: i64,
    /// When that row was committed without its fsync (`Store::write_deferred`): the redemption
    /// waits for it to be on disk before anything runs. `None`: it already was.
    pub durable: Option<crate::store::Durable>,
    /// The session is in background mode (asks go to the operator): a rolled-back run becomes
    /// a notification.
    pub background: bool,
    /// When the run was decided (`CLOCK_REALTIME`, precise): its boundary for host changes
    /// that conflict with its effects (`MirrorCommand::since`). Taken before the answer, it is
    /// usually a scheduler tick behind by the time the command starts, so the run's pid 1 need
    /// not wait for the coarse clock to pass it (`cmdgate_sandbox::clock`).
    pub since: cmdgate_sandbox::clock::Stamp,
}

/// Why a redemption was refused (each is audited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Unknown,
    Expired,
    WrongUid { expected: u32, got: u32 },
    WrongCwd { expected: PathBuf, got: PathBuf },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Unknown => write!(
                f,
                "the ticket is unknown or already used (a ticket runs its command once; a daemon \
                 restart forgets every ticket)"
            ),
            Refusal::Expired => write!(f, "the ticket expired before it was redeemed"),
            Refusal::WrongUid { expected, got } => write!(
                f,
                "the ticket was issued to uid {expected}, and uid {got} tried to redeem it"
            ),
            Refusal::WrongCwd { expected, got } => write!(
                f,
                "the ticket runs in {} but was redeemed from {}",
                expected.display(),
                got.display()
            ),
        }
    }
}

struct Open {
    issued: Issued,
    expires: Instant,
}

/// A routed call remembered for its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    /// The ticket as the client would be given it (the outcome's command must name it).
    pub ticket: String,
    pub session: String,
    pub decision_id: i64,
    /// The original command (what Claude Code runs if it ignores `updatedInput`).
    pub original: String,
}

#[derive(Default)]
struct Inner {
    open: HashMap<[u8; 32], Open>,
    routed: HashMap<String, (Instant, Routed)>,
}

/// The registry.
pub struct Tickets {
    ttl: Duration,
    inner: Mutex<Inner>,
}

fn hash(ticket: &str) -> [u8; 32] {
    Sha256::digest(ticket.as_bytes()).into()
}

/// A short, non-secret name of a ticket for the audit (its hash's first 12 hex digits).
pub fn ticket_name(ticket: &str) -> String {
    hash(ticket)
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Tickets {
    pub fn new(ttl: Duration) -> Tickets {
        Tickets {
            ttl,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned registry: its maps are still consistent (every change is one insert/remove).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Issues a ticket from 32 random bytes. `None` when too many are open (the caller asks a
    /// person instead).
    pub fn issue(&self, issued: Issued, random: &[u8; 32], now: Instant) -> Option<String> {
        let ticket = cmdgate_policy::wire::run::ticket_from(random);
        let mut inner = self.lock();
        inner.open.retain(|_, o| o.expires > now);
        inner
            .routed
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < ROUTED_MEMORY);
        if inner.open.len() >= MAX_OPEN {
            return None;
        }
        if inner.routed.len() >= MAX_ROUTED {
            // Forget the oldest half rather than refuse: the check is a detector, not a gate.
            let mut ages: Vec<Instant> = inner.routed.values().map(|(at, _)| *at).collect();
            ages.sort();
            let cut = ages[ages.len() / 2];
            inner.routed.retain(|_, (at, _)| *at > cut);
        }
        inner.routed.insert(
            issued.tool_use_id.clone(),
            (
                now,
                Routed {
                    ticket: ticket.clone(),
                    session: issued.session.clone(),
                    decision_id: issued.decision_id,
                    original: issued.original.clone(),
                },
            ),
        );
        inner.open.insert(
            hash(&ticket),
            Open {
                issued,
                expires: now + self.ttl,
            },
        );
        Some(ticket)
    }

    /// Sets the decision row of an issued ticket (the row is written after issue, in the same
    /// pipeline step).
    pub fn set_decision(
        &self,
        ticket: &str,
        decision_id: i64,
        durable: Option<crate::store::Durable>,
    ) {
        let mut inner = self.lock();
        let mut tool_use = None;
        if let Some(o) = inner.open.get_mut(&hash(ticket)) {
            o.issued.decision_id = decision_id;
            o.issued.durable = durable;
            tool_use = Some(o.issued.tool_use_id.clone());
        }
        if let Some((_, r)) = tool_use.and_then(|t| inner.routed.get_mut(&t)) {
            r.decision_id = decision_id;
        }
    }

    /// Withdraws a ticket that was never handed out (its decision could not be audited).
    pub fn withdraw(&self, ticket: &str) {
        let mut inner = self.lock();
        if let Some(o) = inner.open.remove(&hash(ticket)) {
            inner.routed.remove(&o.issued.tool_use_id);
        }
    }

    /// Redeems a ticket for a peer with `uid` in `cwd` (canonical). Any attempt uses the ticket up.
    pub fn redeem(
        &self,
        ticket: &str,
        uid: u32,
        cwd: &std::path::Path,
        now: Instant,
    ) -> Result<Issued, (Refusal, Option<Box<Issued>>)> {
        let Some(open) = self.lock().open.remove(&hash(ticket)) else {
            return Err((Refusal::Unknown, None));
        };
        if open.expires <= now {
            return Err((Refusal::Expired, Some(Box::new(open.issued))));
        }
        if open.issued.uid != uid {
            let expected = open.issued.uid;
            return Err((
                Refusal::WrongUid { expected, got: uid },
                Some(Box::new(open.issued)),
            ));
        }
        if open.issued.cwd != cwd {
            let expected = open.issued.cwd.clone();
            return Err((
                Refusal::WrongCwd {
                    expected,
                    got: cwd.to_path_buf(),
                },
                Some(Box::new(open.issued)),
            ));
        }
        Ok(open.issued)
    }

    /// The routed call with this tool_use_id, if one was issued a ticket recently.
    pub fn routed(&self, tool_use_id: &str) -> Option<Routed> {
        self.lock().routed.get(tool_use_id).map(|(_, r)| r.clone())
    }

    /// Tickets waiting to be redeemed.
    pub fn open(&self) -> usize {
        self.lock().open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued(uid: u32, cwd: &str) -> Issued {
        Issued {
            session: "s".into(),
            agent_id: None,
            tool_use_id: "t1".into(),
            project: "/p".into(),
            cwd: cwd.into(),
            command: "make".into(),
            original: "make".into(),
            plan: TestRunPlan {
                command: "make".into(),
                key: "make".into(),
                options: Default::default(),
                why: String::new(),
                rules: Vec::new(),
                revision: Some(3),
            },
            revision: Some(3),
            classification: None,
            uid,
            gid: uid,
            home: "/home/a".into(),
            tool_timeout_ms: None,
            decision_id: 0,
            durable: None,
            background: false,
            since: [0, 0],
        }
    }

    #[test]
    fn once_by_its_owner_from_its_directory_before_it_expires() {
        let t = Tickets::new(Duration::from_secs(60));
        let now = Instant::now();
        let a = t.issue(issued(1000, "/p/sub"), &[1; 32], now).unwrap();
        assert!(cmdgate_policy::wire::run::is_ticket(&a));
        assert_eq!(t.routed("t1").unwrap().ticket, a);
        let ok = t.redeem(&a, 1000, "/p/sub".as_ref(), now).unwrap();
        assert_eq!(ok.command, "make");
        assert_eq!(
            t.redeem(&a, 1000, "/p/sub".as_ref(), now).unwrap_err().0,
            Refusal::Unknown,
            "used once"
        );

        let b = t.issue(issued(1000, "/p"), &[2; 32], now).unwrap();
        assert!(matches!(
            t.redeem(&b, 1001, "/p".as_ref(), now).unwrap_err().0,
            Refusal::WrongUid { .. }
        ));
        assert_eq!(
            t.redeem(&b, 1000, "/p".as_ref(), now).unwrap_err().0,
            Refusal::Unknown,
            "a thief's attempt burns it"
        );

        let c = t.issue(issued(1000, "/p"), &[3; 32], now).unwrap();
        assert!(matches!(
            t.redeem(&c, 1000, "/elsewhere".as_ref(), now)
                .unwrap_err()
                .0,
            Refusal::WrongCwd { .. }
        ));

        let d = t.issue(issued(1000, "/p"), &[4; 32], now).unwrap();
        assert_eq!(
            t.redeem(&d, 1000, "/p".as_ref(), now + Duration::from_secs(61))
                .unwrap_err()
                .0,
            Refusal::Expired
        );
        assert_eq!(t.open(), 0);
    }

    #[test]
    fn withdrawn_tickets_are_gone() {
        let t = Tickets::new(Duration::from_secs(60));
        let now = Instant::now();
        let a = t.issue(issued(1, "/p"), &[9; 32], now).unwrap();
        t.set_decision(&a, 42, None);
        assert_eq!(t.routed("t1").unwrap().decision_id, 42);
        t.withdraw(&a);
        assert_eq!(t.open(), 0);
        assert!(t.routed("t1").is_none());
        assert_eq!(ticket_name(&a).len(), 12);
    }
}
