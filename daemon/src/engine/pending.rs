//! Pending approvals (background mode): an "ask" held in memory while the operator answers it from
//! `cmdgate approve|reject ID`, or denied when nobody does in time.
//!
//! The registry only keeps the waiting requests and hands each answer to its waiter; the daemon
//! writes the audit rows. Whoever removes a request from the registry owns its answer: the operator's
//! `take` or the waiter's `withdraw` at its deadline, never both. A pending request's id is the audit
//! row id of the "ask" that created it, so `cmdgate audit show ID` shows what is being asked.
//!
//! Nothing here is persisted: after a restart there is nothing to approve (the waiting hooks were
//! answered deny when the daemon stopped, or gave up on their own), so a stale approval can never
//! let a request run later.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cmdgate_policy::wire::Verdict;
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, watch};

/// What `cmdgate pending` shows of one waiting request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingInfo {
    /// The audit row id of the "ask".
    pub id: i64,
    pub at_ms: i64,
    /// When it is denied unless answered.
    pub deadline_ms: i64,
    pub session: String,
    pub tool_use_id: String,
    pub project: Option<String>,
    pub cwd: Option<String>,
    pub tool: String,
    /// The command (Bash) or a summary of the tool call.
    pub command: Option<String>,
    /// Why it needs a person (the engine's reason).
    pub reason: String,
    /// Whether `--remember` can turn the answer into a rule (Bash commands only).
    pub rememberable: bool,
}

/// The operator's answer, as the waiter passes it to the hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub verdict: Verdict,
    pub reason: String,
    /// `rule #N` when the answer was remembered.
    pub rule: Option<String>,
    /// The audit row of the answer.
    pub audit_id: i64,
    /// For the model with an approval: the operator's note (`DecideResponse::context`).
    pub context: Option<String>,
}

/// How a wait ends other than by the deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Answered(Answer),
    /// No answer will come (the daemon is stopping, the answer could not be recorded): deny.
    Cancelled(String),
}

struct Slot {
    info: PendingInfo,
    /// The canonical command key a remembered rule would use; `None` for non-Bash tools.
    key: Option<String>,
    tx: oneshot::Sender<Outcome>,
}

/// A request taken by the operator: its facts and the channel to its waiter.
pub struct Taken {
    pub info: PendingInfo,
    pub key: Option<String>,
    tx: oneshot::Sender<Outcome>,
}

impl Taken {
    /// Hands the outcome to the waiter; `false` when it stopped waiting (its hook went away).
    pub fn answer(self, outcome: Outcome) -> bool {
        self.tx.send(outcome).is_ok()
    }
}

/// The waiting requests.
pub struct Pending {
    slots: Mutex<BTreeMap<i64, Slot>>,
    stopping: AtomicBool,
    /// A generation raised whenever a request is held or leaves, for whoever shows the list live
    /// (the web console's event stream).
    changes: watch::Sender<u64>,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            slots: Mutex::default(),
            stopping: AtomicBool::default(),
            changes: watch::Sender::new(0),
        }
    }
}

/// A waiter's claim on its request; dropping it (the hook disconnected, the daemon gave up)
/// withdraws the request so nobody can answer what no one waits for.
pub struct Ticket<'a> {
    pending: &'a Pending,
    id: i64,
    pub rx: oneshot::Receiver<Outcome>,
}

impl Ticket<'_> {
    /// Removes the request at its deadline; `false` when the operator took it first (the answer is
    /// then on its way through `rx`).
    pub fn withdraw(&self) -> bool {
        self.pending.remove(self.id).is_some()
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.pending.remove(self.id);
    }
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i64, Slot>> {
        // A poisoned map still holds valid entries (no invariant spans an unwind).
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn remove(&self, id: i64) -> Option<Slot> {
        let slot = self.lock().remove(&id);
        if slot.is_some() {
            self.changed();
        }
        slot
    }

    fn changed(&self) {
        self.changes.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Changes whenever a request is held or leaves the registry.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Registers a waiting request; `None` when the daemon is stopping (the caller denies).
    pub fn hold(&self, info: PendingInfo, key: Option<String>) -> Option<Ticket<'_>> {
        let (tx, rx) = oneshot::channel();
        let id = info.id;
        {
            let mut slots = self.lock();
            if self.stopping.load(Ordering::Acquire) || slots.contains_key(&id) {
                return None;
            }
            slots.insert(id, Slot { info, key, tx });
        }
        self.changed();
        Some(Ticket {
            pending: self,
            id,
            rx,
        })
    }

    /// The waiting requests, oldest first.
    pub fn list(&self) -> Vec<PendingInfo> {
        self.lock().values().map(|s| s.info.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A waiting request's facts, without taking it.
    pub fn peek(&self, id: i64) -> Option<PendingInfo> {
        self.lock().get(&id).map(|s| s.info.clone())
    }

    /// Takes a request to answer it; `None` when it is not waiting (answered, timed out, withdrawn,
    /// or from before a restart).
    pub fn take(&self, id: i64) -> Option<Taken> {
        self.remove(id).map(|s| Taken {
            info: s.info,
            key: s.key,
            tx: s.tx,
        })
    }

    /// Refuses new holds and cancels every waiting request (shutdown); returns how many.
    pub fn cancel_all(&self, why: &str) -> usize {
        let drained: Vec<Slot> = {
            let mut slots = self.lock();
            self.stopping.store(true, Ordering::Release);
            std::mem::take(&mut *slots).into_values().collect()
        };
        let n = drained.len();
        self.changed();
        for s in drained {
            let _ = s.tx.send(Outcome::Cancelled(why.to_owned()));
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: i64) -> PendingInfo {
        PendingInfo {
            id,
            at_ms: 1,
            deadline_ms: 2,
            session: "s".into(),
            tool_use_id: format!("t{id}"),
            project: Some("/p".into()),
            cwd: Some("/p".into()),
            tool: "Bash".into(),
            command: Some("make deploy".into()),
            reason: "tier 2".into(),
            rememberable: true,
        }
    }

    fn answer(id: i64) -> Outcome {
        Outcome::Answered(Answer {
            verdict: Verdict::Allow,
            reason: "ok".into(),
            rule: None,
            audit_id: id,
            context: None,
        })
    }

    #[tokio::test]
    async fn an_answer_reaches_its_waiter_once() {
        let p = Pending::default();
        let mut ticket = p.hold(info(7), Some("make deploy".into())).unwrap();
        assert_eq!(p.list().len(), 1);
        let taken = p.take(7).unwrap();
        assert_eq!(taken.key.as_deref(), Some("make deploy"));
        assert!(p.take(7).is_none(), "a second answer finds nothing");
        assert!(taken.answer(answer(8)));
        assert!(!ticket.withdraw(), "the operator took it first");
        assert_eq!((&mut ticket.rx).await.unwrap(), answer(8));
        assert!(p.is_empty());
    }

    #[test]
    fn a_withdrawn_request_cannot_be_answered() {
        let p = Pending::default();
        let ticket = p.hold(info(1), None).unwrap();
        assert!(ticket.withdraw());
        assert!(p.take(1).is_none());
    }

    #[test]
    fn dropping_the_ticket_withdraws_the_request() {
        let p = Pending::default();
        drop(p.hold(info(1), None).unwrap());
        assert!(p.take(1).is_none());
        assert!(p.is_empty());
    }

    #[test]
    fn an_answer_to_a_waiter_that_left_is_reported_undelivered() {
        let p = Pending::default();
        let ticket = p.hold(info(1), None).unwrap();
        let taken = p.take(1).unwrap();
        drop(ticket);
        assert!(!taken.answer(answer(2)));
    }

    #[tokio::test]
    async fn shutdown_cancels_every_waiter_and_refuses_new_ones() {
        let p = Pending::default();
        let mut a = p.hold(info(1), None).unwrap();
        let mut b = p.hold(info(2), None).unwrap();
        assert_eq!(p.cancel_all("stopping"), 2);
        assert_eq!(
            (&mut a.rx).await.unwrap(),
            Outcome::Cancelled("stopping".into())
        );
        assert_eq!(
            (&mut b.rx).await.unwrap(),
            Outcome::Cancelled("stopping".into())
        );
        assert!(p.hold(info(3), None).is_none());
    }

    #[test]
    fn one_request_is_held_once() {
        let p = Pending::default();
        let _t = p.hold(info(1), None).unwrap();
        assert!(p.hold(info(1), None).is_none());
    }
}
