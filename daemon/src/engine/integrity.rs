//! Audit writes that failed. A decision whose row cannot be written is denied (the pipeline's
//! `fail_closed`), but the missing row is itself an integrity event: it is logged, counted, and
//! shown by `cmdgate status` (`audit_failures`), so an audit with holes is never silent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::clock;

/// The latest failed audit write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditFailure {
    pub at_ms: i64,
    /// Which row could not be written (`decision`, `refused peer`, …).
    pub what: String,
    pub error: String,
}

/// What `cmdgate status` shows about failed audit writes since the daemon started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditFailures {
    pub count: u64,
    pub last: Option<AuditFailure>,
}

/// The counter the engine keeps.
#[derive(Debug, Default)]
pub(crate) struct AuditIntegrity {
    count: AtomicU64,
    last: Mutex<Option<AuditFailure>>,
}

impl AuditIntegrity {
    /// Records (and logs) a failed audit write of `what`.
    pub(crate) fn failed(&self, what: &str, error: &dyn std::fmt::Display) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let error = error.to_string();
        eprintln!("cmdgated: INTEGRITY: the audit row of a {what} could not be written: {error}");
        let failure = AuditFailure {
            at_ms: clock::now_ms(),
            what: what.to_owned(),
            error,
        };
        match self.last.lock() {
            Ok(mut last) => *last = Some(failure),
            Err(poisoned) => *poisoned.into_inner() = Some(failure),
        }
    }

    pub(crate) fn summary(&self) -> AuditFailures {
        AuditFailures {
            count: self.count.load(Ordering::Relaxed),
            last: match self.last.lock() {
                Ok(last) => last.clone(),
                Err(poisoned) => poisoned.into_inner().clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_is_counted_and_the_last_kept() {
        let i = AuditIntegrity::default();
        assert_eq!(i.summary(), AuditFailures::default());
        i.failed("decision", &"disk full");
        i.failed("refused peer", &"the store writer has stopped");
        let s = i.summary();
        assert_eq!(s.count, 2);
        let last = s.last.unwrap();
        assert_eq!(last.what, "refused peer");
        assert_eq!(last.error, "the store writer has stopped");
    }
}
