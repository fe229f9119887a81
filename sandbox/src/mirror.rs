//! A mirrored run (issue 19): the command runs once, in the container mirror, as the real run.
//! Its output streams to the caller as produced; when the whole pid namespace is gone its
//! effects are judged and its workspace upper dir is kept (on the workspace's mount) for
//! [`crate::commit::commit`], [`KeptUpper::discard`] or [`KeptUpper::keep_for`].
//!
//! ```text
//! start() ── pipes ──▶ helper fds 3,4 ──▶ pid 1 ──▶ bash -O expand_aliases -c CMD (writes them)
//!    │                   upper = <store>/runs/<id>/upper (same mount as the workspace)
//!    ▼
//! MirrorRun: take_stdout/take_stderr (read as produced), killer() (hang up ⇒ SIGKILL pid 1)
//!    │ wait()
//!    ▼
//! Finished { run: TestRun (effects, verdict), killed, kept: KeptUpper }
//! ```

use crate::config::RunConfig;
use crate::model::{Area, Effect, TestRun};
use crate::protocol::{HelperReply, HelperRequest, KeptTree, MirrorSpec, ParentMessage};
use crate::run::{judge, prepare, Prepared, SandboxError};
use crate::store::{self, Store};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::ChildStdin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What to run, as the caller (Claude Code's Bash tool, through the ticket client) would have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorCommand {
    /// The exact command, evaluated like Claude Code does: bash with alias expansion on.
    pub command: String,
    /// The caller's working directory (absolute; read-only unless inside a writable tree).
    pub cwd: PathBuf,
    /// The caller's environment; [`filter_env`] is applied by [`start`].
    pub env: Vec<(String, String)>,
    /// When the run began for its caller (a precise `CLOCK_REALTIME` reading, e.g. when the
    /// daemon decided it): the boundary of "changed on the host after the run started" is the
    /// earlier of it and the helper's receipt of the `Run` ([`crate::clock`]). `None`: the
    /// receipt. An earlier boundary only counts more host changes as the run's conflicts, and
    /// the coarse clock has usually passed it by the time the command starts, so pid 1 does
    /// not wait for the next tick.
    pub since: Option<crate::clock::Stamp>,
}

/// Drop what must not reach the command: cmdgate's own settings (`CMDGATE_*`: sockets, escape
/// hatch), the dynamic loader's knobs (`LD_*`), startup files and options bash would read on its
/// own (`BASH_ENV`, `ENV`, `SHELLOPTS`, `BASHOPTS`), exported functions (`BASH_FUNC_*`, which
/// change what a command name means behind the analysis), and a `TMPDIR` other than `/tmp` (the
/// mirror's /tmp is fresh scratch; a host temp path would not exist there).
pub fn filter_env(env: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| {
            !(k.starts_with("CMDGATE_")
                || k.starts_with("LD_")
                || k.starts_with("BASH_FUNC_")
                || ["BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "TMPDIR"].contains(&k.as_str()))
        })
        .cloned()
        .collect();
    out.push(("TMPDIR".into(), "/tmp".into()));
    out
}

/// A running mirrored run.
pub struct MirrorRun {
    prepared: Prepared,
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    stdout: Option<std::fs::File>,
    stderr: Option<std::fs::File>,
    proxy: Option<crate::net::Handoff>,
    config: RunConfig,
    store: Store,
    /// The kept `write=` trees.
    extra: Vec<KeptTree>,
    waited: bool,
}

impl Drop for MirrorRun {
    /// Dropped without `wait`: kill the run, reap the helper, discard the upper dir.
    fn drop(&mut self) {
        if !self.waited {
            self.killer().kill();
            self.prepared.finish();
            let _ = remove_tree(&self.store.runs().join(&self.prepared.run_id));
            for k in &self.extra {
                let _ = remove_tree(&k.keep);
            }
        }
    }
}

/// Kills a mirrored run from any thread (the client went away): the helper sees its parent
/// hang up and SIGKILLs the run's pid 1, so every process of the run dies; the run is then
/// `killed` and [`crate::commit::commit`] refuses it.
#[derive(Clone)]
pub struct Killer(Arc<Mutex<Option<ChildStdin>>>);

impl Killer {
    /// Kill the run (idempotent).
    pub fn kill(&self) {
        if let Ok(mut stdin) = self.0.lock() {
            drop(stdin.take());
        }
    }
}

/// A finished mirrored run: the pid namespace is gone, the effects are judged.
pub struct Finished {
    /// Exit status, effects and verdict (stdout/stderr are empty: they were streamed).
    /// `clean` ignores the exit status and scratch writes (see `verdict::Outcome::mirrored`).
    pub run: TestRun,
    /// The caller killed the run ([`Killer`]); nothing of it may be committed.
    pub killed: bool,
    /// The workspace's upper dir, waiting for commit, discard or keep.
    pub kept: KeptUpper,
    /// The run's mirror was built ahead of it, by the warm helper (checked at the run to be
    /// the one a mirror built then would be), not when it started.
    pub built_ahead: bool,
    /// Its mirror's secret walk was kept valid by a watch since the mirror was built
    /// (`walkwatch`), not done again when the run started.
    pub secrets_watched: bool,
    /// Where the run's time went.
    pub phases: crate::protocol::RunPhases,
}

impl Finished {
    /// Writes to /tmp, /run, /dev/shm: stayed in the mirror's scratch space, never committed
    /// (tell the agent).
    pub fn scratch_writes(&self) -> impl Iterator<Item = &Effect> {
        self.run
            .effects
            .iter()
            .filter(|e| e.location().is_some_and(|(a, _)| a == Area::Scratch))
    }

    /// Every write a commit leaves behind (tell the agent): the scratch trees, `$HOME` outside
    /// the kept `write=` trees, and a `write=` path that could not be kept (a symbolic link on
    /// the way, no place on its mount) — only the workspace and the kept trees are committed.
    pub fn uncommitted_writes(&self) -> impl Iterator<Item = &Effect> {
        self.run.effects.iter().filter(|e| match e.location() {
            Some((Area::Scratch | Area::Home, _)) => true,
            Some((Area::Extra, p)) => !self.kept.kept_writes().any(|k| p.starts_with(k)),
            _ => false,
        })
    }
}

/// What `runs/<id>/meta.json` records about a kept upper dir.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub run_id: String,
    pub workspace: PathBuf,
    /// The run's start, before the mirror was built (see `RawRun::started`).
    pub started: [i64; 2],
    pub killed: bool,
    /// Unix seconds until which a rolled-back run is kept for a later apply (`keep_for`).
    pub keep_until: Option<u64>,
    /// The kept `write=` trees (committed with the workspace).
    #[serde(default)]
    pub extra: Vec<KeptTree>,
}

/// The kept upper dir of a finished mirrored run. Dropping it unused discards it.
pub struct KeptUpper {
    pub(crate) store: Store,
    pub(crate) meta: Meta,
    pub(crate) done: bool,
    /// The state dir whose store holds it (the helper finds it again from there).
    pub(crate) state_dir: PathBuf,
    /// Discard and commit go through this helper (a non-root caller: `keeper`).
    pub(crate) helper: Option<crate::config::HelperCommand>,
}

impl std::fmt::Debug for KeptUpper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptUpper")
            .field("dir", &self.dir())
            .field("meta", &self.meta)
            .finish()
    }
}

impl KeptUpper {
    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.meta.run_id
    }
    /// The workspace the run mirrored.
    pub fn workspace(&self) -> &Path {
        &self.meta.workspace
    }
    /// `<store>/runs/<id>`.
    pub fn dir(&self) -> PathBuf {
        self.store.runs().join(&self.meta.run_id)
    }
    /// The overlay upper dir itself (root-only; never hand it to the agent).
    pub fn upper(&self) -> PathBuf {
        self.dir().join("upper")
    }
    /// The `write=` paths mirrored for a commit (canonical host directories): their effects
    /// are committed with the workspace's. Writes elsewhere outside the workspace are not.
    pub fn kept_writes(&self) -> impl Iterator<Item = &Path> {
        self.meta.extra.iter().map(|k| k.target.as_path())
    }
    /// Every dir this run keeps: the workspace's, then each `write=` tree's.
    pub(crate) fn dirs(&self) -> Vec<PathBuf> {
        std::iter::once(self.dir())
            .chain(self.meta.extra.iter().map(|k| k.keep.clone()))
            .collect()
    }
    /// Remove the kept dirs, through the helper when this process may not (`keeper`).
    pub(crate) fn remove(&self) -> std::io::Result<()> {
        if let Some(helper) = &self.helper {
            return crate::keeper::discard_through(helper, &self.state_dir, &self.meta.run_id);
        }
        let mut first = Ok(());
        for d in self.dirs() {
            if let (Err(e), Ok(())) = (dispose(&d, &d), &first) {
                first = Err(e);
            }
        }
        first
    }
    /// Remove the upper dirs (rollback). O(files).
    pub fn discard(mut self) -> std::io::Result<()> {
        self.done = true;
        self.remove()
    }
    /// Keep the upper dirs for `ttl` (an operator may apply it later; [`load_kept`]); pruned by
    /// `commit::prune` after that.
    pub fn keep_for(mut self, ttl: Duration) -> std::io::Result<()> {
        self.meta.keep_until = Some(unix_now() + ttl.as_secs());
        // The overlays' work dirs are not kept (bookkeeping of the gone mounts).
        for d in self.dirs() {
            let _ = dispose(&d, &d.join("work"));
        }
        // The overlays are `volatile` (`setup::overlay_options`): nothing flushed the run's
        // writes. Flush them before recording the run as kept, so a kept run that survives a
        // crash (its `meta.json` does) also has its content; without `meta.json` recovery
        // discards it.
        for d in self.dirs() {
            let dir = std::fs::File::open(&d)?;
            nix::unistd::syncfs(&dir)?;
        }
        // Each `write=` tree's dir carries the same record, so recovery keeps it too.
        for d in self.dirs() {
            write_meta(&d, &self.meta)?;
        }
        self.done = true;
        Ok(())
    }
}

impl Drop for KeptUpper {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.remove();
        }
    }
}

/// The `write=` paths of `config` a mirrored run keeps for its commit, canonical: existing
/// directories with no symbolic link below `$HOME` (or anywhere, outside it: a link the agent
/// planted would aim the commit elsewhere), apart from the workspace and the system trees,
/// none inside another. The others keep today's treatment (a scratch overlay, never committed).
fn kept_writes(config: &RunConfig) -> Vec<PathBuf> {
    let home = config.home.as_deref();
    let mut out: Vec<PathBuf> = Vec::new();
    let mut paths = config.extra_writable.clone();
    paths.sort_by_key(|p| p.components().count());
    for p in paths {
        let Ok(real) = p.canonicalize() else {
            continue;
        };
        let expected = match home.and_then(|h| p.strip_prefix(h).ok().map(|r| (h, r))) {
            Some((h, rel)) => h.canonicalize().map(|h| h.join(rel)).ok(),
            None => Some(p.clone()),
        };
        let system = ["/tmp", "/run", "/dev", "/proc", "/sys", "/"]
            .iter()
            .any(|s| real == Path::new(s) || (*s != "/" && real.starts_with(s)));
        let ws = &config.workspace;
        if expected.as_ref() != Some(&real)
            || !real.is_dir()
            || system
            || real.starts_with(ws)
            || ws.starts_with(&real)
            || out.iter().any(|o| real.starts_with(o))
        {
            continue;
        }
        out.push(real);
    }
    out
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Remove `dir`, the kept run dir `run_dir` or a directory in it, off the caller's path: moved
/// into its store's `trash/` and removed by the reaper (`trash::dispose`); in place when
/// `run_dir` is not in a store's `runs/`.
fn dispose(run_dir: &Path, dir: &Path) -> std::io::Result<()> {
    match Store::of_run_dir(run_dir) {
        Some(store) => crate::trash::dispose(dir, &store.trash()),
        None => remove_tree(dir),
    }
}

pub(crate) fn remove_tree(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

pub(crate) fn write_meta(dir: &Path, meta: &Meta) -> std::io::Result<()> {
    let tmp = dir.join("meta.json.tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec(meta).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(tmp, dir.join("meta.json"))
}

/// A kept run by id (kept with [`KeptUpper::keep_for`], or finished before a daemon restart).
pub fn load_kept(state_dir: &Path, run_id: &str) -> Result<KeptUpper, SandboxError> {
    valid_id(run_id)?;
    for store in store::stores(state_dir) {
        let dir = store.runs().join(run_id);
        let Ok(bytes) = std::fs::read(dir.join("meta.json")) else {
            continue;
        };
        let meta: Meta = serde_json::from_slice(&bytes)
            .map_err(|e| SandboxError::Config(format!("kept run {run_id}: {e}")))?;
        return Ok(KeptUpper {
            store,
            meta,
            done: true, // loaded: stays on disk unless discarded or committed explicitly
            state_dir: state_dir.to_path_buf(),
            helper: None,
        });
    }
    Err(SandboxError::Config(format!("no kept run {run_id}")))
}

pub(crate) fn valid_id(run_id: &str) -> Result<(), SandboxError> {
    if run_id.is_empty()
        || !run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(SandboxError::Config(format!("bad run id {run_id:?}")));
    }
    Ok(())
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| SandboxError::Helper("output pipe".into(), e.into()))
}

/// The stores of the kept `write=` trees (each on its own mount, outside it).
fn extra_stores(config: &RunConfig) -> Vec<(PathBuf, Store)> {
    kept_writes(config)
        .into_iter()
        // No place on its mount: it stays a scratch overlay (never committed).
        .filter_map(|t| {
            let s = store::for_workspace(&t, &config.state_dir).ok()?;
            Some((t, s))
        })
        .collect()
}

/// Make `runs/<run id>-w<n>` in each kept `write=` tree's store.
pub(crate) fn keep_extra(
    stores: &[(PathBuf, Store)],
    run_id: &str,
) -> Result<Vec<KeptTree>, SandboxError> {
    let mut out: Vec<KeptTree> = Vec::new();
    for (n, (target, s)) in stores.iter().enumerate() {
        let keep = s.runs().join(format!("{run_id}-w{n}"));
        if let Err(e) = std::fs::create_dir(&keep) {
            for k in &out {
                let _ = remove_tree(&k.keep);
            }
            return Err(SandboxError::Config(format!(
                "kept upper dir {}: {e}",
                keep.display()
            )));
        }
        out.push(KeptTree {
            target: target.clone(),
            keep,
        });
    }
    Ok(out)
}

/// One prepared helper kept ready for the next mirrored run (see [`crate::run::Prepared`]):
/// the helper's exec, its lock file and the cgroup v1 joins (an RCU grace period each) happen
/// before the command is known. What a prepared helper holds is bound to no run: the request
/// (workspace, masks, limits, command) and the output pipes come with the `Run`, the mount
/// namespace is copied then, and it serves one run only. Dropping it stops the helper.
#[derive(Default)]
pub struct Warm {
    slot: Mutex<Option<Prepared>>,
    /// A fill under way: [`Warm::take`] waits for it (at most [`Warm::FILL_WAIT`]) rather
    /// than starting a helper of its own, which would have the whole preparation still ahead.
    filling: Mutex<bool>,
    filled: std::sync::Condvar,
}

impl Warm {
    /// An empty slot.
    pub fn new() -> Warm {
        Warm::default()
    }

    /// Prepare a helper for the next run with `config`'s helper and state dir, unless one is
    /// ready (blocking: call it off the async runtime, after a run started).
    pub fn fill(&self, config: &RunConfig) -> Result<(), SandboxError> {
        if self.slot.lock().map_or(true, |s| s.is_some()) {
            return Ok(());
        }
        match self.filling.lock() {
            Ok(mut filling) if !*filling => *filling = true,
            _ => return Ok(()),
        }
        let filled = self.fill_now(config);
        if let Ok(mut filling) = self.filling.lock() {
            *filling = false;
        }
        self.filled.notify_all();
        filled
    }

    /// How long [`Warm::take`] waits for a fill under way.
    const FILL_WAIT: Duration = Duration::from_millis(500);

    fn fill_now(&self, config: &RunConfig) -> Result<(), SandboxError> {
        // The overlay of the project this config is for, made ahead: the next run is likely
        // in the same one (used only if it is, `helper::PreparedOverlay::still_for`).
        let overlay = config.workspace.canonicalize().ok().and_then(|ws| {
            let store = store::for_workspace(&ws, &config.state_dir).ok()?;
            Some((ws, store.runs()))
        });
        // And the whole mirror of a run with this config (`helper::Whole`), with the kept dirs
        // of its `write=` trees, but for runs with a proxy (its hand-off is made per run).
        let whole = run_config(config, &[])
            .ok()
            .filter(|(c, _, _)| !c.proxy)
            .map(|(c, _, extra)| (c, extra));
        let prepared = crate::run::prepare_ahead(config, overlay, whole)?;
        if let Ok(mut slot) = self.slot.lock() {
            if slot.is_none() {
                *slot = Some(prepared);
            }
        }
        Ok(())
    }

    /// The ready helper, if it was started for `config`'s helper and state dir and still lives.
    fn take(&self, config: &RunConfig) -> Option<Prepared> {
        let deadline = std::time::Instant::now() + Self::FILL_WAIT;
        let mut filling = self.filling.lock().ok()?;
        while *filling {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            filling = self.filled.wait_timeout(filling, left).ok()?.0;
        }
        drop(filling);
        let mut prepared = self.slot.lock().ok()?.take()?;
        (prepared.helper == config.helper
            && prepared.state_dir() == config.state_dir
            && prepared.alive())
        .then_some(prepared)
    }
}

/// Each kept `write=` tree with its store ([`extra_stores`]).
pub(crate) type KeptStores = Vec<(PathBuf, Store)>;

/// A mirrored run's config as its request carries it: the workspace and home canonical, the
/// environment `env` filtered ([`filter_env`]), the stores masked, the kept `write=` trees
/// (each with its store) writable as the canonical paths they mount.
fn run_config(
    config: &RunConfig,
    env: &[(String, String)],
) -> Result<(RunConfig, Store, KeptStores), SandboxError> {
    let mut config = config.clone();
    config.workspace = config.workspace.canonicalize().map_err(|e| {
        SandboxError::Config(format!("workspace {}: {e}", config.workspace.display()))
    })?;
    if let Some(home) = &config.home {
        config.home = home.canonicalize().ok();
    }
    config.env = filter_env(env);
    let store = store::for_workspace(&config.workspace, &config.state_dir)
        .map_err(|e| SandboxError::Config(e.to_string()))?;
    let extra_stores = extra_stores(&config);
    // Other runs' upper dirs and the journal's pre-images are never readable from inside.
    for root in std::iter::once(&store.root).chain(extra_stores.iter().map(|(_, s)| &s.root)) {
        if !config.masks.contains(root) {
            config.masks.push(root.clone());
        }
    }
    // The verdict and the helper see each kept tree as the canonical path it mounts.
    for (target, _) in &extra_stores {
        if !config.extra_writable.contains(target) {
            config.extra_writable.push(target.clone());
        }
    }
    Ok((config, store, extra_stores))
}

/// Start `cmd` in a mirror of `config.workspace` (the helper is running it when this returns).
/// `config.limits.scratch_bytes` bounds /tmp and $HOME writes; `config.limits.upper_bytes` the
/// workspace's upper dir.
pub fn start(config: &RunConfig, cmd: &MirrorCommand) -> Result<MirrorRun, SandboxError> {
    start_with(&Warm::new(), config, cmd)
}

/// [`start`] on `warm`'s prepared helper when it has one for `config` (a fresh one otherwise,
/// or when the prepared one fails before the command was handed over).
pub fn start_with(
    warm: &Warm,
    config: &RunConfig,
    cmd: &MirrorCommand,
) -> Result<MirrorRun, SandboxError> {
    if !cmd.cwd.is_absolute() {
        return Err(SandboxError::Config(format!(
            "cwd {} is not absolute",
            cmd.cwd.display()
        )));
    }
    let (config, store, extra_stores) = run_config(config, &cmd.env)?;
    if config.proxy && config.network {
        return Err(SandboxError::Config(
            "a proxy run keeps its own network namespace: not with `network`".into(),
        ));
    }
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (proxy_ours, proxy_theirs) = match config.proxy {
        true => {
            let (a, b) = crate::init::socket_pair().ok_or_else(|| {
                SandboxError::Helper(
                    "proxy hand-off socket".into(),
                    std::io::Error::last_os_error(),
                )
            })?;
            (Some(a), Some(b))
        }
        false => (None, None),
    };
    let mut fds = vec![out_w.as_raw_fd(), err_w.as_raw_fd()];
    fds.extend(proxy_theirs.as_ref().map(AsRawFd::as_raw_fd));
    // The pipes go to the helper before the `Run` (it takes them with it). A prepared helper that
    // died meanwhile fails here, before anything of the run exists: start a fresh one.
    let mut prepared = match warm.take(&config) {
        Some(mut ready) => match ready.send_fds(&fds) {
            Ok(()) => ready,
            Err(_) => {
                drop(ready);
                let mut fresh = prepare(&config)?;
                fresh.send_fds(&fds)?;
                fresh
            }
        },
        None => {
            let mut fresh = prepare(&config)?;
            fresh.send_fds(&fds)?;
            fresh
        }
    };
    // Only the helper (and then the command) holds the write ends; only pid 1 the hand-off.
    drop((out_w, err_w, proxy_theirs));
    let run_id = prepared.run_id.clone();
    let keep = store.runs().join(&run_id);
    // A helper prepared for this project made the kept dir (its overlay's upper and work are
    // in it); one prepared for another project made it in that project's store: removed.
    match prepared.kept_ahead.take() {
        Some(ahead) if ahead == keep => {}
        other => {
            if let Some(ahead) = other {
                let _ = remove_tree(&ahead);
            }
            std::fs::create_dir(&keep).map_err(|e| {
                SandboxError::Config(format!("kept upper dir {}: {e}", keep.display()))
            })?;
        }
    }
    // The kept `write=` trees' dirs made with a mirror built ahead serve the run when they are
    // the ones it would make (the same trees, in the same stores); else they go.
    let ahead = std::mem::take(&mut prepared.extra_ahead);
    let wanted: Vec<PathBuf> = (0..extra_stores.len())
        .map(|n| extra_stores[n].1.runs().join(format!("{run_id}-w{n}")))
        .collect();
    let same = ahead.len() == extra_stores.len()
        && ahead
            .iter()
            .zip(extra_stores.iter().zip(&wanted))
            .all(|(k, ((target, _), keep))| k.target == *target && k.keep == *keep);
    let made = match same {
        true => Ok(ahead),
        false => {
            for k in &ahead {
                let _ = remove_tree(&k.keep);
            }
            keep_extra(&extra_stores, &run_id)
        }
    };
    let extra = match made {
        Ok(extra) => extra,
        Err(e) => {
            let _ = remove_tree(&keep);
            return Err(e);
        }
    };
    let request = HelperRequest {
        run_id,
        command: cmd.command.clone(),
        config: config.clone(),
        mirror: Some(MirrorSpec {
            keep,
            cwd: cmd.cwd.clone(),
            upper_bytes: config.limits.upper_bytes,
            extra: extra.clone(),
            since: cmd.since,
        }),
    };
    let dirs = std::iter::once(store.runs().join(&prepared.run_id))
        .chain(extra.iter().map(|k| k.keep.clone()));
    let dirs: Vec<PathBuf> = dirs.collect();
    if let Err(e) = prepared.send(&ParentMessage::Run(Box::new(request))) {
        for d in &dirs {
            let _ = remove_tree(d);
        }
        return Err(e);
    }
    let stdin = Arc::new(Mutex::new(prepared.stdin.take()));
    Ok(MirrorRun {
        prepared,
        stdin,
        stdout: Some(std::fs::File::from(out_r)),
        stderr: Some(std::fs::File::from(err_r)),
        proxy: proxy_ours.map(crate::net::Handoff),
        config,
        store,
        extra,
        waited: false,
    })
}

impl MirrorRun {
    /// The run's id (names its kept upper dir and, once committed, its journal).
    pub fn run_id(&self) -> &str {
        &self.prepared.run_id
    }

    /// The command's stdout, as produced (the read end of the pipe the command writes).
    /// EOF once every process of the run is gone. Take it once; read it while the run runs
    /// (a full pipe blocks the command).
    pub fn take_stdout(&mut self) -> Option<std::fs::File> {
        self.stdout.take()
    }

    /// The command's stderr; see [`MirrorRun::take_stdout`].
    pub fn take_stderr(&mut self) -> Option<std::fs::File> {
        self.stderr.take()
    }

    /// Network by domain ([`RunConfig::proxy`]): the hand-off that yields the proxy's listener,
    /// made inside the run's network namespace ([`crate::net::Handoff::receive`]). Take it once.
    pub fn take_proxy(&mut self) -> Option<crate::net::Handoff> {
        self.proxy.take()
    }

    /// A handle that kills the run from another thread.
    pub fn killer(&self) -> Killer {
        Killer(self.stdin.clone())
    }

    /// Wait until the whole pid namespace is gone and the effects are judged. Output not taken
    /// is drained meanwhile (so the command never blocks on it).
    pub fn wait(mut self) -> Result<Finished, SandboxError> {
        let drains: Vec<_> = [self.stdout.take(), self.stderr.take()]
            .into_iter()
            .flatten()
            .map(|mut f| std::thread::spawn(move || std::io::copy(&mut f, &mut std::io::sink())))
            .collect();
        self.waited = true;
        let reply = self.prepared.receive();
        if let Ok(mut stdin) = self.stdin.lock() {
            drop(stdin.take());
        }
        match reply {
            // The run is over: the helper's own exit and bookkeeping need not hold up the result.
            Ok(HelperReply::Done(_)) => self.prepared.finish_later(),
            _ => self.prepared.finish(),
        }
        for d in drains {
            let _ = d.join();
        }
        let dir = self.store.runs().join(&self.prepared.run_id);
        let meta = Meta {
            run_id: self.prepared.run_id.clone(),
            workspace: self.config.workspace.clone(),
            started: [0, 0],
            killed: false,
            keep_until: None,
            extra: std::mem::take(&mut self.extra),
        };
        let mut kept = KeptUpper {
            store: self.store.clone(),
            meta,
            done: false, // dropped on an error below: every kept dir removed
            state_dir: self.config.state_dir.clone(),
            helper: crate::keeper::privileged(&self.config.helper),
        };
        let raw = match reply {
            Ok(HelperReply::Done(raw)) => raw,
            Ok(HelperReply::Failed { stage, message }) => {
                return Err(SandboxError::Setup { stage, message });
            }
            Ok(HelperReply::Ready | HelperReply::Store(_)) => {
                return Err(SandboxError::NoAnswer(
                    "answered Ready or Store to Run".into(),
                ));
            }
            Err(e) => return Err(e),
        };
        kept.meta.started = raw.started;
        kept.meta.killed = raw.killed;
        // The overlays' work dirs are bookkeeping of the (gone) mounts, never part of a commit
        // (which reads only `upper`): they go with the run's dir, whenever that is disposed of
        // (`commit::Spent`, `discard`), or out of it when the run is kept (`keep_for`).
        // The record a helper process finds the run by (`load_kept`): a non-root caller commits,
        // discards and keeps through one. A root caller holds the run here, and a run without
        // `keep_until` is discarded at the next start with or without a record (`recover`); a
        // kept one gets its record from `keep_for`. No file to create and remove on the path.
        if kept.helper.is_some() {
            if let Err(e) = write_meta(&dir, &kept.meta) {
                kept.done = false; // dropped below: discarded
                return Err(SandboxError::Helper("kept run metadata".into(), e));
            }
        }
        let (killed, built_ahead, secrets_watched, phases) =
            (raw.killed, raw.built_ahead, raw.secrets_watched, raw.phases);
        let run = judge(&self.config, raw, true);
        Ok(Finished {
            run,
            killed,
            kept,
            built_ahead,
            secrets_watched,
            phases,
        })
    }
}
