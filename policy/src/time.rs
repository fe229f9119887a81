//! Time as a value: the policy never reads a clock, callers pass `now` in.

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch, as measured by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UnixMillis(pub u64);

impl UnixMillis {
    /// `self + ms`, saturating: a huge configured duration must not wrap into the past.
    pub fn plus(self, ms: u64) -> UnixMillis {
        UnixMillis(self.0.saturating_add(ms))
    }

    /// `self - ms`, saturating at the epoch.
    pub fn minus(self, ms: u64) -> UnixMillis {
        UnixMillis(self.0.saturating_sub(ms))
    }
}
