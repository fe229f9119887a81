//! Mirrored runs (issue 19): a redeemed ticket's command runs once, in the container mirror, its
//! output streamed to the `cmdgate-run` client as produced; when the whole pid namespace is gone
//! its effects — never its exit status — decide: clean effects are committed to the workspace
//! (with an undo journal), dirty ones rolled back, and a conflict with the host commits nothing.
//!
//! Threads: `mirror::start`, `wait` and `commit` are blocking (the sandbox library execs its
//! single-threaded helper, so no tokio thread forks): the start and the commit run through
//! `off_runtime`, the wait on the blocking pool; two tasks pump stdout and stderr into the
//! response channel through the runtime's poller. A heartbeat frame every `HEARTBEAT_MS` makes a
//! client that went away visible (the write fails, hyper drops the body, the channel closes): the
//! run is killed and nothing is committed.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cmdgate_policy::wire::run::{output_frames, Frame, RunStatus, HEARTBEAT_MS};
use cmdgate_sandbox::commit::{self, CommitConfig, CommitError, JournalLimits};
use cmdgate_sandbox::keeper::Keeper;
use cmdgate_sandbox::mirror::{self, MirrorCommand};
use cmdgate_sandbox::{Effect, HelperCommand, RunAs, RunConfig};
use tokio::sync::{mpsc, Semaphore};

use crate::config::SandboxConfig;
use crate::engine::accept::{self, RunAcceptance};
use crate::engine::decide::off_runtime;
use crate::engine::proxy::{NetworkConfig, Proxy};
use crate::engine::scope::{mirror_helper, MirrorScope};
use crate::engine::tickets::Issued;

/// The audit note that names a run (`run <id>`) on its `run`, apply and undo rows: written and read
/// only through [`run_note`] and [`run_of_note`].
pub(crate) fn run_note(run_id: &str) -> String {
    format!("run {run_id}")
}

/// The run a note names, if it names one (see [`run_note`]).
pub(crate) fn run_of_note(note: &str) -> Option<&str> {
    note.strip_prefix("run ")
}

/// The facility: where runs keep their state, how the helper starts, limits, concurrency.
pub struct Runs {
    helper: HelperCommand,
    state_dir: PathBuf,
    config: SandboxConfig,
    /// Runs at once; more wait (their client shows nothing until they start).
    slots: Arc<Semaphore>,
    /// How commits are made.
    commit: CommitConfig,
    /// Journal bounds for undo (pruned after each commit).
    journal: JournalLimits,
    /// Why runs cannot happen here (`None`: they can).
    unavailable: Option<String>,
    /// Where the store's operations after a run happen: here (root) or in the mirror helper
    /// (system mode: the daemon holds no capability).
    keeper: Keeper,
    /// One `cmdgate undo` at a time (the library does not serialise undos of one run).
    pub(crate) undo_lock: tokio::sync::Mutex<()>,
    /// What every run hides (cmdgate's own paths, secret paths) and how it judges git.
    scope: MirrorScope,
    /// `[network]`: the proxy of runs whose entry lists hosts (`engine/proxy.rs`).
    network: NetworkConfig,
    /// A helper prepared for the next run (refilled once a run's end frame is sent, off its path):
    /// its exec and cgroup joins are not paid while the agent waits.
    warm: Arc<mirror::Warm>,
    /// A commit added to the journal since the last prune (`after_run` prunes).
    prune_due: AtomicBool,
    /// What is left of committed runs' dirs, disposed of by `after_run` (off the end frame's
    /// path; `commit::Spent`).
    spent: std::sync::Mutex<Vec<commit::Spent>>,
}

/// A started run (or why it did not start), holding its slot.
pub(crate) struct Started {
    run: Result<mirror::MirrorRun, String>,
    _permit: tokio::sync::OwnedSemaphorePermit,
    started: Instant,
}

/// What [`Runs::start_here`] did.
pub(crate) enum StartHere {
    /// The mirror started (or failed to: the run's outcome says so).
    Started(Box<Started>),
    /// Not now: the environment back, for [`Runs::run`].
    Later(Vec<(String, String)>),
}

/// What a finished run came to: for the end frame, the audit row and the breaker.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The sandbox's run id (`cmdgate runs show`, `cmdgate undo`); empty when it never started.
    pub run_id: String,
    pub exit: Option<i32>,
    pub signal: Option<i32>,
    pub status: RunStatus,
    /// The last line the client prints on stderr (empty for a plain commit).
    pub message: String,
    /// The audit's `sandbox` column: effects, verdict, commit or rollback, undo id.
    pub detail: serde_json::Value,
    /// The effects were judged (clean or dirty): what learning may count.
    pub judged: Option<bool>,
    /// A rolled-back run kept for the operator (`cmdgate runs show --diff`, `cmdgate apply`),
    /// with its diff stat when the session is in background mode (the notification's).
    pub kept: Option<Kept>,
    /// What the operator's acceptance made of it (`engine/accept.rs`).
    pub acceptance: RunAcceptance,
}

/// A rolled-back run kept for an apply.
#[derive(Debug, Clone)]
pub struct Kept {
    /// Unix seconds until which it is kept.
    pub until_secs: u64,
    pub stat: Option<commit::DiffStat>,
}

impl Runs {
    pub fn new(
        helper: HelperCommand,
        state_dir: PathBuf,
        config: SandboxConfig,
        max_concurrent: usize,
    ) -> Runs {
        // Whether the helper can build a mirror shows at its first run (a refusal fails the
        // run, which commits nothing).
        let (helper, unavailable) = mirror_helper(config.helper.as_deref(), helper);
        let keeper = Keeper::new(&helper);
        let commit = CommitConfig::default();
        Runs {
            journal: JournalLimits::default(),
            helper,
            state_dir,
            config,
            slots: Arc::new(Semaphore::new(max_concurrent.max(1))),
            commit,
            unavailable,
            keeper,
            undo_lock: tokio::sync::Mutex::new(()),
            scope: MirrorScope::default(),
            network: NetworkConfig::default(),
            warm: Arc::new(mirror::Warm::new()),
            prune_due: AtomicBool::new(false),
            spent: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The daemon's masks, secret paths and git judgement for every run.
    pub fn scoped(mut self, scope: MirrorScope) -> Runs {
        self.scope = scope;
        self
    }

    /// The operator's `[network]` settings for the proxy.
    pub fn with_network(mut self, network: NetworkConfig) -> Runs {
        self.network = network;
        self
    }

    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    pub fn state_dir(&self) -> &std::path::Path {
        &self.state_dir
    }

    /// Repairs what a crash left (interrupted commits rolled back, interrupted undos finished,
    /// orphaned upper dirs discarded). At start, before serving: no run is in flight.
    pub fn recover(&self) -> commit::RecoverReport {
        self.keeper.recover(&self.state_dir)
    }

    /// Committed runs with their undo state.
    pub fn journal(&self) -> Result<Vec<commit::JournalEntry>, String> {
        self.keeper.runs(&self.state_dir)
    }

    /// Restores the workspace to before a committed run (refusing where a later change conflicts).
    pub fn undo(&self, run_id: &str) -> Result<commit::UndoReport, commit::UndoError> {
        self.keeper.undo(&self.state_dir, run_id)
    }

    /// Where the store's operations happen (for the blocking pool).
    pub fn keeper(&self) -> Keeper {
        self.keeper.clone()
    }

    /// A run's time limit (`run_limit`): what `run_config` sets, without building the whole
    /// config (its scope parses the command).
    fn limit_of(&self, issued: &Issued) -> Duration {
        run_limit(issued.plan.options.timeout, self.config.run_limit_secs)
    }

    fn run_config(&self, issued: &Issued) -> RunConfig {
        let mut cfg = RunConfig::new(
            issued.project.clone(),
            self.state_dir.clone(),
            self.helper.clone(),
        );
        let options = &issued.plan.options;
        cfg.limits.timeout = self.limit_of(issued);
        cfg.limits.memory_bytes = self.config.memory_bytes;
        cfg.limits.pids = self.config.pids;
        cfg.limits.cpu_millis = self.config.cpu_millis;
        cfg.limits.scratch_bytes = self.config.scratch_bytes;
        cfg.limits.upper_bytes = self.config.upper_bytes;
        cfg.network = options.network;
        // Network by domain: the run's own namespace, reaching only the proxy.
        cfg.proxy = !options.network && !options.hosts.is_empty();
        cfg.allow_tracked_changes = options.edit_tracked;
        cfg.run_as = Some(RunAs {
            uid: issued.uid,
            gid: issued.gid,
        });
        let home = PathBuf::from(&issued.home);
        cfg.home = Some(home.clone());
        cfg.extra_writable = options
            .extra_writable
            .iter()
            .map(|p| match p.strip_prefix("~/") {
                Some(rest) => home.join(rest),
                None => PathBuf::from(p),
            })
            .collect();
        self.scope.apply(&mut cfg, &issued.command, &options.unmask);
        cfg
    }

    /// Runs a redeemed ticket's command, streaming frames into `tx`; returns once the run is
    /// judged and committed or rolled back. The end frame is the caller's to send. A dirty run
    /// whose refusals have exactly one of the `accepted` signatures (the operator's acceptance,
    /// loaded for the command at redemption) is committed instead of rolled back.
    ///
    /// Steps: start the mirror → its proxy → output pumps and heartbeat → wait → judge the
    /// effects ([`Runs::judge`]) → commit, keep or discard ([`Runs::settle`]) → masked opens.
    pub async fn run(
        &self,
        issued: &Issued,
        env: Vec<(String, String)>,
        tx: mpsc::Sender<Vec<u8>>,
        accepted: &[cmdgate_policy::learn::accept::Accepting],
    ) -> Outcome {
        if let Some(why) = &self.unavailable {
            return failed(issued, String::new(), format!("mirror unavailable: {why}"));
        }
        let Ok(permit) = self.slots.clone().acquire_owned().await else {
            return failed(issued, String::new(), "no run slot".into());
        };
        let (cfg, cmd) = self.what_runs(issued, env);
        let started = Instant::now();
        let warm = self.warm.clone();
        // On this task's thread (`off_runtime`): no pool thread to wake, no wake-up back.
        let run = match off_runtime(move || mirror::start_with(&warm, &cfg, &cmd)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(format!("the mirror did not start: {e}")),
            Err(e) => Err(format!("the start thread failed: {e}")),
        };
        let start = Started {
            run,
            _permit: permit,
            started,
        };
        self.run_started(issued, start, tx, accepted).await
    }

    /// The start of [`Runs::run`] on the caller's thread, for a caller already off the
    /// runtime's workers (the redemption's trip, `redeem.rs`): `None` when the run cannot start
    /// at once (no mirror here, or no free slot): the caller then takes [`Runs::run`].
    pub(crate) fn start_here(&self, issued: &Issued, env: Vec<(String, String)>) -> StartHere {
        if self.unavailable.is_some() {
            return StartHere::Later(env);
        }
        let Ok(permit) = self.slots.clone().try_acquire_owned() else {
            return StartHere::Later(env);
        };
        let (cfg, cmd) = self.what_runs(issued, env);
        let started = Instant::now();
        let run = mirror::start_with(&self.warm, &cfg, &cmd)
            .map_err(|e| format!("the mirror did not start: {e}"));
        StartHere::Started(Box::new(Started {
            run,
            _permit: permit,
            started,
        }))
    }

    /// The run's config and command.
    fn what_runs(&self, issued: &Issued, env: Vec<(String, String)>) -> (RunConfig, MirrorCommand) {
        let cmd = MirrorCommand {
            command: issued.command.clone(),
            cwd: issued.cwd.clone(),
            env,
            since: Some(issued.since),
        };
        (self.run_config(issued), cmd)
    }

    /// [`Runs::run`] from its started mirror on.
    pub(crate) async fn run_started(
        &self,
        issued: &Issued,
        start: Started,
        tx: mpsc::Sender<Vec<u8>>,
        accepted: &[cmdgate_policy::learn::accept::Accepting],
    ) -> Outcome {
        let Started {
            run,
            _permit,
            started,
        } = start;
        let mut run = match run {
            Ok(r) => r,
            Err(why) => return failed(issued, String::new(), why),
        };
        let run_id = run.run_id().to_owned();
        let killer = run.killer();
        let proxy = self.start_proxy(&mut run, &killer, issued).await;
        let pumps = pump_output(&mut run, &tx, &killer);
        let heartbeat = heartbeat(tx.clone(), killer);
        let home = PathBuf::from(&issued.home);
        let waited = tokio::task::spawn_blocking(move || {
            let finished = run.wait();
            // What the policy refuses besides the sandbox's judgement reads the file system
            // (the agent's home, canonical): here, off the async runtime.
            finished.map(|f| {
                let refused =
                    crate::engine::testrun::protected_effects(&f.run.effects, Some(&home));
                (f, refused)
            })
        })
        .await;
        // Every byte of output is in the channel before the end frame can follow it.
        for p in pumps {
            let _ = p.await;
        }
        heartbeat.abort();
        let network = match proxy {
            Some(p) => Some(p.finish().await),
            None => None,
        };
        let (finished, refused) = match waited {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => return failed(issued, run_id, format!("sandbox error: {e}")),
            Err(e) => return failed(issued, run_id, format!("the run thread failed: {e}")),
        };
        let client_gone = tx.is_closed();
        let limit = self.limit_of(issued);
        let mut detail = run_detail(
            &run_id,
            &finished,
            network.as_ref(),
            (limit, issued.tool_timeout_ms),
            started,
        );
        let ended = Ended {
            run_id: &run_id,
            finished: &finished,
            network: network.as_ref(),
            refused,
            client_gone,
        };
        let mut outcome = self.judge(issued, ended, accepted);
        let effects: Vec<Effect> = finished.run.effects.clone();
        self.settle(issued, &mut outcome, &mut detail, finished)
            .await;
        detail["status"] = serde_json::json!(outcome.status.as_str());
        detail["effects"] = serde_json::to_value(&effects).unwrap_or_default();
        detail["acceptance"] = outcome
            .acceptance
            .detail(&issued.plan.key, issued.classification.as_deref());
        note_masked_opens(issued, &effects, &mut outcome, &mut detail);
        outcome.detail = detail;
        outcome
    }

    /// What follows a run once its end frame is sent: the journal pruned when a commit added to
    /// it (safe while other runs commit), and the next run's helper prepared (`mirror::Warm`) —
    /// so that neither its command (two cores) nor its end — the judgement, the commit, the
    /// audit row the client waits for — shares the CPU with this work. A failed prepare only
    /// means the next run prepares its own.
    pub fn after_run(&self, issued: &Issued) {
        let spent = self
            .spent
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default();
        if !spent.is_empty() {
            tokio::task::spawn_blocking(move || drop(spent));
        }
        if self.prune_due.swap(false, Ordering::Relaxed) {
            let (keeper, state_dir, limits) =
                (self.keeper.clone(), self.state_dir.clone(), self.journal);
            tokio::task::spawn_blocking(move || keeper.prune(&state_dir, &limits));
        }
        if self.unavailable.is_some() {
            return;
        }
        let (warm, cfg) = (self.warm.clone(), self.run_config(issued));
        tokio::task::spawn_blocking(move || warm.fill(&cfg));
    }

    /// The proxy of a run whose entry lists hosts. Its listener arrives from the run's pid 1
    /// during setup; when setup failed (no listener) or the proxy cannot start, the run is
    /// killed (and reports why).
    async fn start_proxy(
        &self,
        run: &mut mirror::MirrorRun,
        killer: &mirror::Killer,
        issued: &Issued,
    ) -> Option<Proxy> {
        let handoff = run.take_proxy()?;
        let listener = tokio::task::spawn_blocking(move || handoff.receive())
            .await
            .ok()
            .flatten();
        let patterns = issued.plan.options.hosts.clone();
        match listener.map(|l| Proxy::start(l, patterns, self.network.clone())) {
            Some(Ok(p)) => Some(p),
            Some(Err(_)) | None => {
                killer.kill();
                None
            }
        }
    }

    /// What the run came to, from its effects (never its exit status): killed or timed out ⇒
    /// failed; a refused host, dirty effects or a protected path ⇒ rolled back, unless the
    /// operator accepted exactly these refused effects (`accepted`); else committed (the commit
    /// itself is [`Runs::settle`]'s). `refused`: what the policy refuses besides the sandbox's
    /// judgement (a persistence file, `.claude/` or another repository's config or hooks, at any
    /// depth, as for test-runs: `testrun::protected_effects`).
    fn judge(
        &self,
        issued: &Issued,
        ended: Ended<'_>,
        accepted: &[cmdgate_policy::learn::accept::Accepting],
    ) -> Outcome {
        let Ended {
            run_id,
            finished,
            network,
            refused,
            client_gone,
        } = ended;
        let tr = &finished.run;
        let refused_network = network.map(|n| n.refusals()).unwrap_or_default();
        let base = |status: RunStatus, message: String, judged: Option<bool>| Outcome {
            run_id: run_id.to_owned(),
            exit: tr.exit,
            signal: tr.signal,
            status,
            message,
            detail: serde_json::Value::Null,
            judged,
            kept: None,
            acceptance: RunAcceptance::None,
        };
        let proxied = network.is_some();
        // The sandbox's reasons; a direct connect in a proxy run says how to reach out instead.
        let sandbox_why: Vec<String> = tr
            .why
            .iter()
            .map(|w| match proxied && w.starts_with("network attempted") {
                true => format!(
                    "{w}, around the proxy (only the entry's hosts are reachable, through \
                     cmdgate's proxy in $HTTPS_PROXY)"
                ),
                false => w.clone(),
            })
            .collect();
        if finished.killed || client_gone {
            base(
                RunStatus::Failed,
                format!(
                    "cmdgate: the run of `{}` was killed because its client went away (the Bash \
                     tool's timeout, an interrupt); nothing it did was committed.",
                    issued.command
                ),
                None,
            )
        } else if tr.timed_out {
            base(
                RunStatus::Failed,
                format!(
                    "cmdgate: `{}` ran past its {} s limit in the mirror and was killed; nothing \
                     was committed (the Bash tool's `timeout` does not extend it). If it needs \
                     longer, ask the user for a `timeout=` on its tier-map entry or a larger \
                     `[sandbox] run_limit_secs`.",
                    issued.command,
                    self.limit_of(issued).as_secs()
                ),
                None,
            )
        } else if !refused_network.is_empty()
            || (proxied && sandbox_why.iter().any(|w| w.contains("around the proxy")))
        {
            // Network by domain: a refused host is named first, with what the entry allows.
            let mut why = refused_network.clone();
            why.extend(sandbox_why.iter().chain(&refused).cloned());
            base(
                RunStatus::RolledBack,
                network_message(&issued.command, &why, &issued.plan.options.hosts),
                Some(false),
            )
        } else if over_a_limit(&tr.effects) {
            // Killed or starved by the kernel partway: never committed, nor acceptable.
            let mut o = base(
                RunStatus::RolledBack,
                limit_message(&issued.command, &tr.effects, &self.config),
                Some(false),
            );
            o.acceptance =
                RunAcceptance::NotAcceptable("the run went over a limit of the mirror".into());
            o
        } else if !tr.clean || !refused.is_empty() {
            let why = match (tr.clean, tr.why.is_empty()) {
                (true, _) => refused.clone(),
                (false, true) => vec!["the sandbox judged the run not clean".to_owned()],
                (false, false) => sandbox_why.iter().chain(&refused).cloned().collect(),
            };
            let secrets = cmdgate_policy::secrets::SecretPaths::builtin(
                &issued.home,
                self.scope.secret_paths(),
            );
            match accept::signature(tr, &refused, &issued.project, &secrets) {
                Ok(signature) => match accepted.iter().find(|a| a.signature == signature) {
                    // The operator applied exactly these effects of this command K times.
                    Some(a) => {
                        let mut o = base(
                            RunStatus::Committed,
                            format!(
                                "cmdgate: committed by the operator's acceptance: they applied \
                                 these changes by `{}` {} times before ({signature}).",
                                issued.command,
                                a.applies.len()
                            ),
                            None,
                        );
                        o.acceptance = RunAcceptance::Accepted {
                            signature,
                            provenance: a.applies.clone(),
                        };
                        o
                    }
                    None => {
                        let mut o = base(
                            RunStatus::RolledBack,
                            rollback_message(&issued.command, &why),
                            Some(false),
                        );
                        o.acceptance = RunAcceptance::Signature(signature);
                        o
                    }
                },
                Err(not) => {
                    let mut o = base(
                        RunStatus::RolledBack,
                        rollback_message(&issued.command, &why),
                        Some(false),
                    );
                    o.acceptance = RunAcceptance::NotAcceptable(not.to_string());
                    o
                }
            }
        } else {
            base(RunStatus::Committed, String::new(), Some(true))
        }
    }

    /// What happens to the run's upper dir after the judgement: committed (a conflict or a
    /// refusal of the commit changes the outcome), kept for the operator after a rollback, or
    /// discarded.
    async fn settle(
        &self,
        issued: &Issued,
        outcome: &mut Outcome,
        detail: &mut serde_json::Value,
        finished: mirror::Finished,
    ) {
        if outcome.status == RunStatus::Committed {
            self.commit(issued, outcome, detail, finished).await;
        } else if outcome.status == RunStatus::RolledBack
            && self.config.keep_rolled_back_secs > 0
            && !over_a_limit(&finished.run.effects)
        {
            // A run killed at a limit is not kept: its effects stop partway (nothing to apply),
            // and a disk filled to its limit would stay filled.
            // Kept for the operator: `cmdgate runs show RUN --diff`, then `cmdgate apply RUN`.
            outcome.kept = self.keep(finished.kept, issued.background).await;
            if let Some(k) = &outcome.kept {
                detail["kept_until"] = serde_json::json!(k.until_secs);
                outcome.message.push_str(&format!(
                    " The operator can review it (`cmdgate runs show {} --diff`) and apply \
                     it.",
                    outcome.run_id
                ));
            }
        } else {
            let kept = finished.kept;
            // A discard that fails leaves a dir `recover` removes at the next start.
            let _ = tokio::task::spawn_blocking(move || kept.discard()).await;
        }
    }

    /// Commits a clean run (then prunes the journal off the run's path); a conflict with the
    /// host or a refused entry commits nothing and changes the outcome.
    async fn commit(
        &self,
        issued: &Issued,
        outcome: &mut Outcome,
        detail: &mut serde_json::Value,
        finished: mirror::Finished,
    ) {
        let scratch: Vec<String> = finished
            .uncommitted_writes()
            .map(|e| e.to_string())
            .collect();
        let kept_writes: Vec<String> = finished
            .kept
            .kept_writes()
            .map(|p| p.display().to_string())
            .collect();
        let (exit, signal) = (finished.run.exit, finished.run.signal);
        let kept = finished.kept;
        let cfg = self.commit.clone();
        let keeper = self.keeper.clone();
        let committed = off_runtime(move || keeper.commit_spent(kept, &cfg)).await;
        if matches!(committed, Ok(Ok(_))) {
            // The journal is pruned after the end frame is written (`after_run`): it reads every
            // journaled manifest, and on two cores it had shared the CPU with the run's row and
            // end frame.
            self.prune_due.store(true, Ordering::Relaxed);
        }
        match committed {
            Ok(Ok((report, spent))) => {
                // What is left of the run's dirs goes to the trash after the end frame too
                // (`after_run`): two renames and the reaper's removal of the trees, which had
                // run beside the run's row and end frame. A crash first leaves it to `recover`.
                if let Ok(mut later) = self.spent.lock() {
                    later.push(spent);
                }
                detail["commit"] = serde_json::to_value(&report).unwrap_or_default();
                detail["undo"] = serde_json::json!(report.run_id);
                if !scratch.is_empty() {
                    let kept = if kept_writes.is_empty() {
                        String::new()
                    } else {
                        format!(" and the entry's write= paths ({})", kept_writes.join(", "))
                    };
                    let line = format!(
                        "cmdgate: committed. Writes outside the workspace{kept} stayed in \
                         the mirror and are gone: {}",
                        scratch.join("; ")
                    );
                    outcome.message = match outcome.message.is_empty() {
                        true => line,
                        false => format!("{} {line}", outcome.message),
                    };
                }
            }
            Ok(Err(CommitError::Conflict { problems, kept })) => {
                let _ = kept.discard();
                let named: Vec<String> = problems.iter().map(|c| c.to_string()).collect();
                detail["conflicts"] = serde_json::json!(named);
                outcome.status = RunStatus::Conflict;
                outcome.judged = None;
                outcome.message = format!(
                    "cmdgate: nothing of `{}` was committed: what it changed was changed on \
                     the host while it ran ({}). Run it again.",
                    issued.command,
                    named.join("; ")
                );
            }
            Ok(Err(CommitError::Refused { problems, kept })) => {
                let _ = kept.discard();
                let named: Vec<String> = problems.iter().map(|c| c.to_string()).collect();
                detail["refused"] = serde_json::json!(named);
                outcome.status = RunStatus::RolledBack;
                outcome.judged = Some(false);
                outcome.message = rollback_message(&issued.command, &named);
                outcome.acceptance = RunAcceptance::NotAcceptable(format!(
                    "the commit refused: {}",
                    named.join("; ")
                ));
            }
            Ok(Err(e)) => {
                let why = format!("commit failed: {e}");
                if let CommitError::Killed(kept) | CommitError::Io { kept, .. } = e {
                    let _ = kept.discard();
                }
                *outcome = failed(issued, outcome.run_id.clone(), why);
                outcome.exit = exit;
                outcome.signal = signal;
            }
            Err(e) => {
                *outcome = failed(
                    issued,
                    outcome.run_id.clone(),
                    format!("the commit thread failed: {e}"),
                );
            }
        }
    }
}

/// How a run ended, for [`Runs::judge`].
struct Ended<'a> {
    run_id: &'a str,
    finished: &'a mirror::Finished,
    /// The proxy's report, when the run had one.
    network: Option<&'a crate::engine::proxy::Report>,
    /// What the policy refuses besides the sandbox's judgement (`testrun::protected_effects`).
    refused: Vec<String>,
    /// The client went away (the response channel closed).
    client_gone: bool,
}

/// The outcome of a run that could not be finished or judged: nothing was committed.
fn failed(issued: &Issued, run_id: String, why: String) -> Outcome {
    Outcome {
        run_id,
        exit: None,
        signal: None,
        status: RunStatus::Failed,
        message: format!(
            "cmdgate: the run of `{}` could not be finished ({why}); nothing was committed. \
             Retry, or tell the user (`cmdgate status`).",
            issued.command
        ),
        detail: serde_json::json!({"status": "failed", "why": why}),
        judged: None,
        kept: None,
        acceptance: RunAcceptance::None,
    }
}

/// Two tasks copy the run's stdout and stderr into the response channel as frames, reading the
/// pipes through the runtime's poller (no thread per pipe); a closed channel (the client went
/// away) kills the run, and the rest is drained. A pipe the runtime cannot poll kills the run
/// too (its output could not reach the client): nothing of it is committed.
fn pump_output(
    run: &mut mirror::MirrorRun,
    tx: &mpsc::Sender<Vec<u8>>,
    killer: &mirror::Killer,
) -> Vec<tokio::task::JoinHandle<()>> {
    use tokio::io::AsyncReadExt;
    [(run.take_stdout(), false), (run.take_stderr(), true)]
        .into_iter()
        .filter_map(|(f, is_err)| f.map(|f| (f, is_err)))
        .map(|(file, is_err)| {
            let tx = tx.clone();
            let killer = killer.clone();
            tokio::spawn(async move {
                let Ok(mut pipe) = tokio::net::unix::pipe::Receiver::from_file(file) else {
                    killer.kill();
                    return;
                };
                let mut buf = vec![0u8; 16 * 1024];
                let mut gone = false;
                loop {
                    match pipe.read(&mut buf).await {
                        Ok(0) => break,
                        Ok(n) if !gone => {
                            let frames = output_frames(is_err, &buf[..n]);
                            if tx.send(frames).await.is_err() {
                                // The client went away: kill the run, drain what is left.
                                gone = true;
                                killer.kill();
                            }
                        }
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            })
        })
        .collect()
}

/// A heartbeat frame every `HEARTBEAT_MS`: a client that went away makes the send fail, and the
/// run is killed.
fn heartbeat(tx: mpsc::Sender<Vec<u8>>, killer: mirror::Killer) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let beat = Frame::Heartbeat.encode();
        loop {
            tokio::time::sleep(Duration::from_millis(HEARTBEAT_MS)).await;
            if tx.send(beat.clone()).await.is_err() {
                killer.kill();
                return;
            }
        }
    })
}

/// The audit's `sandbox` column of a finished run, before its settlement adds to it.
fn run_detail(
    run_id: &str,
    finished: &mirror::Finished,
    network: Option<&crate::engine::proxy::Report>,
    (limit, tool_timeout_ms): (Duration, Option<u64>),
    started: Instant,
) -> serde_json::Value {
    let tr = &finished.run;
    serde_json::json!({
        "network": network,
        "run_id": run_id,
        "exit": tr.exit,
        "signal": tr.signal,
        "timed_out": tr.timed_out,
        "limit_s": limit.as_secs(),
        "tool_timeout_ms": tool_timeout_ms,
        "killed": finished.killed,
        "duration_ms": started.elapsed().as_millis() as u64,
        "built_ahead": finished.built_ahead,
        "secrets_watched": finished.secrets_watched,
        "phases_us": finished.phases,
        "clean": tr.clean,
        "why": tr.why,
        "effects": tr.effects,
    })
}

/// Opens of masked paths (secrets, cmdgate's own files) go on the row and the client's last line.
fn note_masked_opens(
    issued: &Issued,
    effects: &[Effect],
    outcome: &mut Outcome,
    detail: &mut serde_json::Value,
) {
    let masked = crate::engine::apply::masked_opens(effects, &issued.home);
    if masked.is_empty() {
        return;
    }
    detail["masked_opens"] = serde_json::json!(masked);
    let line = format!(
        "cmdgate: `{}` tried to open paths cmdgate masks (secrets, cmdgate's own files); \
         in the mirror they are empty: {}. If the command needs one, ask the user.",
        issued.command,
        masked.join(", ")
    );
    outcome.message = if outcome.message.is_empty() {
        line
    } else {
        format!("{} {line}", outcome.message)
    };
}

impl Runs {
    /// Keeps a rolled-back run's upper dir for `keep_rolled_back_secs`, then bounds what all kept
    /// runs hold (`keep_rolled_back_bytes`, oldest first; expired ones by `commit::prune`).
    /// With `stat`, the diff stat for a notification. `None` when it could not be kept.
    async fn keep(&self, kept: mirror::KeptUpper, stat: bool) -> Option<Kept> {
        let ttl = Duration::from_secs(self.config.keep_rolled_back_secs);
        let until_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            + ttl.as_secs();
        let (bytes, limits) = (self.config.keep_rolled_back_bytes, self.journal);
        // Where the store's privileges are: in this process when it is root, else in the mirror
        // helper (system mode: the kept upper holds the agent's files and overlay markers).
        let keeper = self.keeper.clone();
        let _one_at_a_time = self.undo_lock.lock().await;
        tokio::task::spawn_blocking(move || {
            match keeper.keep(kept, ttl.as_secs(), bytes, &limits, stat) {
                Ok(Some(stat)) => Some(Kept { until_secs, stat }),
                Ok(None) => None,
                Err(why) => {
                    eprintln!("cmdgate: keeping a rolled-back run: {why}");
                    None
                }
            }
        })
        .await
        .ok()
        .flatten()
    }
}

/// A run's limit: its tier-map entry's `timeout=` (the operator signed it), else `[sandbox]
/// run_limit_secs`. Never the Bash tool's `timeout`: Claude Code 2.1.332 does not kill a command
/// at it but moves it to the background and tells the model it will be notified, so killing the
/// run there would contradict what the model was told; the run goes on, and its end (committed,
/// rolled back, or killed here) reaches the model through the background task's output.
fn run_limit(entry: Option<Duration>, run_limit_secs: u64) -> Duration {
    entry.unwrap_or(Duration::from_secs(run_limit_secs))
}

/// The client's last line after a rollback for a host the entry does not allow.
fn network_message(
    command: &str,
    why: &[String],
    allowed: &[cmdgate_policy::net::HostPattern],
) -> String {
    let allowed: Vec<String> = allowed.iter().map(|h| h.to_string()).collect();
    format!(
        "cmdgate rolled back `{command}`: {}. Nothing it did reached the workspace (its output \
         above is real). The entry allows {}; if the command needs another host, ask the user \
         to add it to the entry's `network=` list.",
        why.join("; "),
        allowed.join(", ")
    )
}

/// Whether the run went over a limit of the mirror (a `LimitHit` effect): the kernel or the
/// upper dirs' guard stopped it partway.
fn over_a_limit(effects: &[Effect]) -> bool {
    effects.iter().any(|e| matches!(e, Effect::LimitHit { .. }))
}

/// The client's last line after a run went over a limit of the mirror: each limit it went over
/// (its `LimitHit` effects), with its value and the setting that holds it.
fn limit_message(
    command: &str,
    effects: &[Effect],
    config: &crate::config::SandboxConfig,
) -> String {
    let size = |bytes: u64| match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30)),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b => format!("{b} bytes"),
    };
    let over: Vec<String> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::LimitHit { limit, .. } => Some(match limit.as_str() {
                "memory" => format!(
                    "its memory limit ({}, `[sandbox] memory_bytes`): the kernel killed a \
                     process of it",
                    size(cmdgate_sandbox::config::memory_limit(config.memory_bytes))
                ),
                "pids" => format!(
                    "its limit of {} processes and threads (`[sandbox] pids`): a process or \
                     thread of it could not start",
                    config.pids
                ),
                "upper" => format!(
                    "its limit on what it may add to the disk ({}, `[sandbox] upper_bytes`), \
                     or the disk's last free space (256 MiB or 1 % of it): it was killed",
                    size(config.upper_bytes)
                ),
                other => format!("its `{other}` limit"),
            }),
            _ => None,
        })
        .collect();
    format!(
        "cmdgate rolled back `{command}`: it went over {}. Nothing it did reached the \
         workspace (its output above is real). If the command needs more, ask the user to \
         raise the limit in cmdgate's config.",
        over.join("; and ")
    )
}

/// The client's last line after a rollback: what was refused and what the agent can do.
fn rollback_message(command: &str, why: &[String]) -> String {
    format!(
        "cmdgate rolled back `{command}`: {}. Nothing it did reached the workspace (its output \
         above is real). Change only build outputs and untracked files from commands, edit \
         tracked files with the Edit/Write tools, or ask the user to allow it.",
        why.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_the_entrys_or_the_configured_one_never_the_tools_timeout() {
        assert_eq!(run_limit(None, 600), Duration::from_secs(600));
        assert_eq!(
            run_limit(Some(Duration::from_secs(3600)), 600),
            Duration::from_secs(3600)
        );
        assert_eq!(
            run_limit(Some(Duration::from_secs(5)), 600),
            Duration::from_secs(5)
        );
    }
}
