//! The daemon's clock: the one place wall time is read (policy takes time as an argument).

use std::time::{SystemTime, UNIX_EPOCH};

use cmdgate_policy::time::UnixMillis;

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The same instant as the policy crate's type.
pub fn now() -> UnixMillis {
    UnixMillis(u64::try_from(now_ms()).unwrap_or(0))
}
