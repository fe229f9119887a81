//! What a test-run reports: exit status, bounded output, effects, and the clean/dirty verdict.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// The result of one test-run in the mirror. The mirror is gone by the time this exists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestRun {
    /// Exit code of `bash -c`, when it exited normally.
    pub exit: Option<i32>,
    /// Signal that ended `bash -c`, when it was killed.
    pub signal: Option<i32>,
    /// Whether the wall-clock timeout fired (everything in the run was killed).
    pub timed_out: bool,
    /// Wall-clock time from helper start to teardown.
    #[serde(with = "duration_ms")]
    pub duration: Duration,
    /// The first `limits.output_bytes` of stdout (lossy UTF-8).
    pub stdout: String,
    /// The first `limits.output_bytes` of stderr (lossy UTF-8).
    pub stderr: String,
    /// Whether stdout or stderr was cut to the limit.
    pub output_truncated: bool,
    /// Everything the command did that outlived it or was refused.
    pub effects: Vec<Effect>,
    /// True when every rule of "clean" holds (README, "Container mirror"; `verdict.rs`).
    pub clean: bool,
    /// Why it is not clean (empty when clean); each names the rule and the effect.
    pub why: Vec<String>,
    /// `why` as data, one per reason in the same order: the rule and the effect's index in
    /// `effects` (what the operator's acceptance may learn: `verdict::Rule::TrackedChange`).
    #[serde(default)]
    pub refusals: Vec<crate::verdict::Refusal>,
}

/// Which mirrored tree an effect is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Area {
    /// The workspace (paths relative to it).
    Workspace,
    /// `$HOME` (paths relative to it; shown as `~/...`).
    Home,
    /// `/tmp`, `/dev/shm` or `/run` inside the mirror (paths absolute).
    Scratch,
    /// A configured extra writable path with its own overlay (paths absolute).
    Extra,
}

/// Kind of filesystem object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// Anything else (fifo, socket, device).
    Other,
}

impl std::fmt::Display for FileKind {
    /// Lower-case words, because effects are read by a model and a person in a deny reason.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileKind::File => "file",
            FileKind::Dir => "directory",
            FileKind::Symlink => "symlink",
            FileKind::Other => "special file",
        })
    }
}

/// One change or attempt observed in a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Effect {
    /// A path that did not exist before now exists.
    Created {
        /// Tree it is in.
        area: Area,
        /// Path (relative for workspace/home, absolute otherwise).
        #[serde(with = "lossless_path")]
        path: PathBuf,
        /// What was created.
        kind: FileKind,
        /// Size in bytes (files), 0 otherwise.
        size: u64,
    },
    /// An existing file's content changed.
    Modified {
        /// Tree it is in.
        area: Area,
        /// Path.
        #[serde(with = "lossless_path")]
        path: PathBuf,
        /// Size before.
        old_size: u64,
        /// Size after.
        new_size: u64,
    },
    /// Only mode/owner changed; the bytes are the same.
    MetadataChanged {
        /// Tree it is in.
        area: Area,
        /// Path.
        #[serde(with = "lossless_path")]
        path: PathBuf,
        /// Mode before (permission bits).
        old_mode: u32,
        /// Mode after.
        new_mode: u32,
    },
    /// A path that existed is gone.
    Deleted {
        /// Tree it is in.
        area: Area,
        /// Path.
        #[serde(with = "lossless_path")]
        path: PathBuf,
        /// What was there.
        kind: FileKind,
        /// Its size in bytes (for a directory: the files below it, counted up to 10,000 entries).
        size: u64,
    },
    /// A deletion and a creation with identical content (best effort: overlay has no rename record).
    Renamed {
        /// Tree it is in.
        area: Area,
        /// Old path.
        #[serde(with = "lossless_path")]
        from: PathBuf,
        /// New path.
        #[serde(with = "lossless_path")]
        to: PathBuf,
        /// Size in bytes.
        size: u64,
    },
    /// A directory that existed was replaced by a new one (overlay opaque dir): its old entries are gone.
    ReplacedDir {
        /// Tree it is in.
        area: Area,
        /// Path.
        #[serde(with = "lossless_path")]
        path: PathBuf,
    },
    /// A path changed type (e.g. a file became a directory).
    Replaced {
        /// Tree it is in.
        area: Area,
        /// Path.
        #[serde(with = "lossless_path")]
        path: PathBuf,
        /// What was there.
        old: FileKind,
        /// What is there now.
        new: FileKind,
    },
    /// Processes still alive when `bash -c` returned (killed at teardown).
    BackgroundProcess {
        /// Pid inside the run's pid namespace.
        pid: i32,
        /// Command line, as far as readable.
        command: String,
    },
    /// A connect/sendto the kernel was asked to do; refused unless the run allows network.
    Network {
        /// Address family and address, e.g. `inet 127.0.0.1:8080` or `unix /run/x.sock`.
        target: String,
        /// Whether it was allowed to proceed.
        allowed: bool,
    },
    /// A syscall refused by the seccomp filter (mount, ptrace, unshare, mknod of a device, ...).
    Blocked {
        /// Syscall name.
        syscall: String,
        /// Detail (arguments that matter).
        detail: String,
    },
    /// A filesystem write aimed outside the writable trees (read-only in the mirror, so it
    /// failed; reported because a command that ignores the error would otherwise look clean).
    ReadOnlyWrite {
        /// Syscall name.
        syscall: String,
        /// The path, resolved inside the mirror.
        #[serde(with = "lossless_path")]
        path: PathBuf,
    },
    /// The command opened a masked path (a secret, cmdgate's own files): it found an empty file
    /// or directory (`maskwatch`). Not dirty: the mask answered it; the audit names it.
    MaskedOpen {
        /// The path as the command named it (inside the mirror, which shows host paths).
        #[serde(with = "lossless_path")]
        path: PathBuf,
    },
    /// A cgroup limit was reached (memory, pids).
    LimitHit {
        /// Which limit.
        limit: String,
        /// Counter from the kernel.
        detail: String,
    },
}

impl Effect {
    /// Tree and path of a filesystem effect, if it is one.
    pub fn location(&self) -> Option<(Area, &PathBuf)> {
        match self {
            Effect::Created { area, path, .. }
            | Effect::Modified { area, path, .. }
            | Effect::MetadataChanged { area, path, .. }
            | Effect::Deleted { area, path, .. }
            | Effect::ReplacedDir { area, path }
            | Effect::Replaced { area, path, .. } => Some((*area, path)),
            Effect::Renamed { area, to, .. } => Some((*area, to)),
            Effect::BackgroundProcess { .. }
            | Effect::Network { .. }
            | Effect::Blocked { .. }
            | Effect::ReadOnlyWrite { .. }
            | Effect::MaskedOpen { .. }
            | Effect::LimitHit { .. } => None,
        }
    }
}

impl std::fmt::Display for Effect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn p(area: &Area, path: &std::path::Path) -> String {
            match area {
                Area::Home => format!("~/{}", path.display()),
                Area::Workspace | Area::Scratch | Area::Extra => path.display().to_string(),
            }
        }
        match self {
            Effect::Created {
                area,
                path,
                kind,
                size,
            } => write!(f, "created {kind} {} ({size} B)", p(area, path)),
            Effect::Modified {
                area,
                path,
                old_size,
                new_size,
            } => write!(f, "modified {} ({old_size} -> {new_size} B)", p(area, path)),
            Effect::MetadataChanged {
                area,
                path,
                old_mode,
                new_mode,
            } => write!(
                f,
                "metadata {} (mode {old_mode:o} -> {new_mode:o})",
                p(area, path)
            ),
            Effect::Deleted {
                area,
                path,
                kind,
                size,
            } => write!(f, "deleted {kind} {} ({size} B)", p(area, path)),
            Effect::Renamed {
                area,
                from,
                to,
                size,
            } => write!(f, "renamed {} -> {} ({size} B)", p(area, from), p(area, to)),
            Effect::ReplacedDir { area, path } => write!(f, "replaced dir {}", p(area, path)),
            Effect::Replaced {
                area,
                path,
                old,
                new,
            } => write!(f, "replaced {old} by {new} at {}", p(area, path)),
            Effect::BackgroundProcess { pid, command } => {
                write!(f, "background process {pid} left: {command}")
            }
            Effect::Network { target, allowed } => write!(
                f,
                "network {target} ({})",
                if *allowed { "allowed" } else { "refused" }
            ),
            Effect::Blocked { syscall, detail } => write!(f, "blocked {syscall} {detail}"),
            Effect::ReadOnlyWrite { syscall, path } => {
                write!(f, "write to read-only {} ({syscall})", path.display())
            }
            Effect::LimitHit { limit, detail } => write!(f, "limit {limit} hit: {detail}"),
            Effect::MaskedOpen { path } => {
                write!(f, "opened masked {} (found it empty)", path.display())
            }
        }
    }
}

/// Serialise durations as integer milliseconds (readable JSON, no nested struct).
mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_micros()).unwrap_or(u64::MAX) / 1000)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// Paths in effects keep every byte: a valid UTF-8 path is a JSON string as before; any other is
/// `{"non_utf8": "<escaped>"}` (printable ASCII kept, other bytes `%XX`), so a run that makes a
/// file with a non-UTF-8 name still reports (and judges) that exact name.
pub mod lossless_path {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::path::{Path, PathBuf};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Raw { non_utf8: String },
    }

    /// Serialize a path (see the module docs).
    pub fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        match p.to_str() {
            Some(text) => s.serialize_str(text),
            None => Repr::Raw {
                non_utf8: crate::commit::escape(p),
            }
            .serialize(s),
        }
    }

    /// Deserialize a path written by [`serialize`].
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Text(t) => Ok(PathBuf::from(t)),
            Repr::Raw { non_utf8 } => crate::commit::unescape(&non_utf8)
                .ok_or_else(|| serde::de::Error::custom("bad escaped path")),
        }
    }
}
