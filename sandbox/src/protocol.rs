//! The closed message sets spoken over pipes: parent ⇄ helper, and the run's pid 1 → helper.
//! One JSON value per line; unknown messages are errors, never guessed at.

use crate::config::RunConfig;
use crate::model::Effect;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Parent → helper (one line on the helper's stdin; stdin then stays open: its hang-up tells the
/// helper that the parent died and the run must be killed).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HelperRequest {
    /// Unique id of the run (names the scratch dir, lock file and cgroups).
    pub run_id: String,
    /// The command, passed to `bash -c`.
    pub command: String,
    /// Everything else.
    pub config: RunConfig,
}

/// Helper → parent (one line on the helper's stdout).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum HelperReply {
    /// The run completed (whatever its verdict); the mirror is gone.
    Done(RawRun),
    /// The sandbox could not be set up or supervised; nothing ran unsandboxed.
    Failed {
        /// Which stage failed (e.g. "mirror setup").
        stage: String,
        /// The error and its causes.
        message: String,
    },
}

/// A finished run before the verdict (which needs the real workspace's git index).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RawRun {
    /// Exit code of `bash -c`.
    pub exit: Option<i32>,
    /// Terminating signal of `bash -c`.
    pub signal: Option<i32>,
    /// Whether the timeout fired.
    pub timed_out: bool,
    /// Time spent in the helper.
    pub duration: Duration,
    /// Bounded stdout.
    pub stdout: String,
    /// Bounded stderr.
    pub stderr: String,
    /// Whether output was cut.
    pub output_truncated: bool,
    /// All effects.
    pub effects: Vec<Effect>,
}

/// Run's pid 1 → helper, streamed as they happen (so a timeout still keeps what was seen).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum InitMessage {
    /// Building the mirror failed: nothing of the command ran.
    SetupFailed {
        /// The failed step and its cause.
        message: String,
    },
    /// An attempt observed by the syscall supervisor.
    Effect(Effect),
    /// `bash -c` ended.
    Exited {
        /// Exit code.
        exit: Option<i32>,
        /// Signal.
        signal: Option<i32>,
    },
}
