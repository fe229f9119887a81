//! The closed message sets spoken over pipes: parent ⇄ helper, and the run's pid 1 → helper.
//! One JSON value per line; unknown messages are errors, never guessed at.

use crate::config::RunConfig;
use crate::model::Effect;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// Parent → helper, one per line on the helper's stdin: `Prepare` (optional, ahead of time), then
/// `Run`. Stdin then stays open: its hang-up tells the helper nobody waits and the run must die.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ParentMessage {
    /// Take the lock and create the run's cgroups, moving the helper into them. On cgroup v1 that
    /// move costs an RCU grace period (milliseconds): a warm helper pays it before the command
    /// is known.
    Prepare {
        /// The run's id.
        run_id: String,
        /// State directory (lock files, scratch mount points).
        state_dir: PathBuf,
        /// The workspace overlay to make ahead, for a next run expected in the same project
        /// (the previous run's): used only by a `Run` for that workspace and kept dir, while
        /// the workspace is the directory it was made on (`helper::PreparedOverlay`).
        #[serde(default)]
        overlay: Option<OverlayAhead>,
        /// The run expected next (the previous run's request for the same project, its command
        /// empty): the helper builds its whole mirror ahead — pid 1 forked, the mirror built,
        /// waiting for the command (`helper::Whole`) — used only by a `Run` whose request is
        /// this one but for the command, its working directory and environment, after the
        /// re-checks of `helper::Whole::serves`; otherwise torn down and the run built at `Run`.
        #[serde(default)]
        whole: Option<Box<HelperRequest>>,
    },
    /// Run a command (preparing first if `Prepare` was not sent).
    Run(Box<HelperRequest>),
    /// An operation on the mirror store after a run (commit, discard, undo, …), for a caller
    /// without the privileges (`keeper`): the only message of its process.
    Store(crate::keeper::StoreOp),
}

/// A workspace overlay to make ahead ([`ParentMessage::Prepare`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlayAhead {
    /// The workspace (canonical).
    pub workspace: PathBuf,
    /// The run's kept dir in the workspace's store (`<store>/runs/<run id>`), made empty by the
    /// library for this run: receives `upper` and `work` as a mirrored run's `MirrorSpec::keep`.
    pub keep: PathBuf,
}

/// What to run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HelperRequest {
    /// Unique id of the run (names the scratch dir, lock file and cgroups).
    pub run_id: String,
    /// The command, passed to `bash -c`.
    pub command: String,
    /// Everything else.
    pub config: RunConfig,
    /// Set for a mirrored run (the run IS the real run; its workspace upper dir is kept for a
    /// commit); `None` for a test-run (everything on the scratch tmpfs, output bounded).
    pub mirror: Option<MirrorSpec>,
}

/// What makes a run a mirrored run (issue 19): kept upper dir, streamed output, caller's cwd.
///
/// The command's stdout and stderr are the helper's fds 3 and 4 (pipes the library made): the
/// command writes them directly, so output streams as produced and is never bounded or copied.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MirrorSpec {
    /// Directory on the workspace's mount (outside the workspace, root-only) that receives the
    /// workspace overlay's `upper` and `work` dirs; they outlive the run for the commit.
    pub keep: PathBuf,
    /// Working directory of the command (the caller's; any absolute path, read-only outside
    /// the writable trees).
    pub cwd: PathBuf,
    /// Bytes the run may add to the workspace's filesystem (the upper dir is not on a sized
    /// tmpfs): past it, or when the filesystem's free space falls below 5 %, the run is killed
    /// and a `LimitHit` is reported. Measured with statfs, so other writers count too (errs
    /// toward killing).
    pub upper_bytes: u64,
    /// The tier-map entry's `write=` paths that are mirrored like the workspace: each gets its
    /// own overlay (mounted over `$HOME`'s when inside it) whose `upper`/`work` dirs go into
    /// `keep`, on that path's own mount, for the commit.
    #[serde(default)]
    pub extra: Vec<KeptTree>,
    /// The caller's start of the run ([`crate::mirror::MirrorCommand::since`]): the run's
    /// boundary is the earlier of it and the helper's receipt of the `Run`.
    #[serde(default)]
    pub since: Option<crate::clock::Stamp>,
}

/// A `write=` path mirrored for a commit: the host directory and where its upper dir is kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptTree {
    /// The host directory (canonical: no symbolic link in any component).
    pub target: PathBuf,
    /// Root-only directory on `target`'s mount, outside it: receives `upper` and `work`.
    pub keep: PathBuf,
}

/// Helper → parent (one line per message on the helper's stdout).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum HelperReply {
    /// Prepared: lock held, cgroups created and joined; waiting for `Run`.
    Ready,
    /// The run completed (whatever its verdict); the mirror is gone.
    Done(RawRun),
    /// The answer to `ParentMessage::Store`.
    Store(crate::keeper::StoreReply),
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
    /// Whether the parent hung up (or asked for the kill) and the run was killed for it.
    #[serde(default)]
    pub killed: bool,
    /// `CLOCK_REALTIME` (seconds, nanoseconds) taken when the helper received the `Run`, before
    /// the mirror was built; pid 1 starts the command only once the coarse clock has passed it
    /// (`clock`): a host path whose ctime is not before it changed while the run could see it.
    #[serde(default)]
    pub started: [i64; 2],
    /// The run ran in a mirror built ahead of it (`helper::Whole`), not one built at `Run`.
    #[serde(default)]
    pub built_ahead: bool,
    /// The secret walk of a mirror built ahead was kept valid by its watch (`walkwatch`), not
    /// done again at `Run`.
    #[serde(default)]
    pub secrets_watched: bool,
    /// Where the run's time went ([`RunPhases`]).
    #[serde(default)]
    pub phases: RunPhases,
}

/// `d` in whole microseconds (saturating), as [`RunPhases`] counts.
pub(crate) fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Where a run's time went, in microseconds, for `cmdgate runs` and the runs bench: what the
/// mirror costs apart from the command, and how much slower the command itself ran in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunPhases {
    /// From the helper's start on the run (the `Run`, or for a mirror built ahead the start of
    /// its re-checks, plus the time from the command's arrival at its builder) to pid 1 forked
    /// or handed the command: the mirror's setup left on the run's path.
    pub ready_us: u64,
    /// The command itself, from pid 1's fork of `bash -c` to its exit, as pid 1 timed it (0
    /// when pid 1 did not say: the command never started, or pid 1 was killed).
    pub command_us: u64,
    /// From pid 1's end to the answer: the kernel counters read and the effects walked.
    pub effects_us: u64,
}

/// What a mirror built ahead waits for (`helper::Whole`): the command and what comes with it,
/// handed from the helper to the builder and from the builder to pid 1 (one line after the
/// output pipes, which travel by SCM_RIGHTS).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Go {
    /// The command, for `bash -c`.
    pub command: String,
    /// The command's working directory (inside the mirror).
    pub cwd: PathBuf,
    /// The command's environment (`RunConfig::command_env` of the `Run`).
    pub env: Vec<(String, String)>,
    /// The run's start (`RawRun::started`): pid 1 starts the command once the coarse clock has
    /// passed it.
    pub started: [i64; 2],
}

/// Run's pid 1 → helper, streamed as they happen (so a timeout still keeps what was seen).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum InitMessage {
    /// The mirror is built and pid 1 waits for its command ([`Go`]; a mirror built ahead).
    Prepared,
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
        /// How long it ran, from its fork to its end (microseconds).
        #[serde(default)]
        ran_us: u64,
    },
}
