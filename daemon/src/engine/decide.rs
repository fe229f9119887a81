//! The decision pipeline, one function per step: validate the request's facts, canonicalise its
//! paths (file-system IO, off the async runtime), take one coherent snapshot (tier map, rules,
//! breaker), let the policy decide (twice for a read tool reached through a symbolic link), test-run
//! when the policy asks for it, derive the learning event and the breaker signal, and commit the
//! audit row with the breaker state and learning before the answer leaves.
//!
//! Every early exit is an audited deny (`finish_early`); a deadline or a failed audit write is a
//! deny too (`fail_closed`); a failed test-run is ask, never allow (`after_test_run`).

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cmdgate_policy::breaker::Signal;
use cmdgate_policy::decide::kernel::PathResolver;
use cmdgate_policy::decide::{
    self, after_test_run, Context, Decision, Request, RuleSet, SandboxVerdict, Source, Step, Tool,
};
use cmdgate_policy::learn::{LearnEvent, PromotionContext};
use cmdgate_policy::locations::{Locations, Mode};
use cmdgate_policy::shell::read::{PackSet, ReadPolicy};
use cmdgate_policy::shell::Limits;
use cmdgate_policy::tiermap::Snapshot;
use cmdgate_policy::time::UnixMillis;
use cmdgate_policy::wire::run::{split_leading_cd, RunTicket};
use cmdgate_policy::wire::{self, DecideRequest, DecideResponse, Verdict};
use cmdgate_sandbox::RunAs;

use crate::clock;
use crate::engine::approval_notes::rule_id;
use crate::engine::breakers::{persist_breakers, Changed};
use crate::engine::escape_hatch::Grant;
use crate::engine::learning::{self, apply_learning, with_id};
use crate::engine::lookups::Lookups;
use crate::engine::record::{describe_parts, request_entry, wire_source};
use crate::engine::secret_tables::SecretTables;
use crate::engine::testrun::Target;
use crate::engine::tickets::Issued;
use crate::engine::tiermaps::{MapEvent, Stamps};
use crate::engine::{Engine, EngineError, Peer};
use crate::store::audit::{self, AuditDecision, Entry, Kind, TiermapEvent};
use crate::store::Durable;

/// A request refused before the policy ran.
struct Early {
    entry: Entry,
    why: String,
}

/// The request's facts, validated.
struct Validated {
    tool: Tool,
    /// `CLAUDE_PROJECT_DIR` as the hook sent it (absolute), if any.
    claude_dir: Option<PathBuf>,
}

/// Where the request runs, as the file system resolves it.
struct Place {
    root: PathBuf,
    cwd: PathBuf,
    root_s: String,
    cwd_s: String,
}

/// One coherent snapshot: the tier map, the rules and the breaker, read together.
struct Coherent {
    snapshot: Arc<Snapshot>,
    rules: Arc<RuleSet>,
    breaker_open: bool,
    /// Transitions reading the breaker made (a cooldown ending): persisted with the row.
    breaker_changes: Vec<Changed>,
}

/// What the policy's step came to, with the evidence a test-run gathered.
struct Outcome {
    decision: Decision,
    /// The learning event this decision is (its audit row id is filled in at commit).
    learn: Option<(String, LearnEvent)>,
    /// The command's classification under the map its test-run ran under.
    classified: Option<String>,
    /// A mirrored run (issue 19): the ticket the hook hands `cmdgate-run`. `decision` is then
    /// the ask an older hook falls back to.
    run: Option<RunTicket>,
}

/// What a ticket is bound to besides the plan: the call and the peer that asked.
#[derive(Clone, Copy)]
struct TicketRequest<'a> {
    req: &'a DecideRequest,
    peer: Peer,
}

/// Step 1: the request's facts, validated (no IO).
fn validate(req: &DecideRequest) -> Result<Validated, String> {
    if !Path::new(&req.cwd).is_absolute() {
        return Err(format!("cwd {:?} is not an absolute path", req.cwd));
    }
    let tool = Tool::from_claude(&req.tool_name, &req.tool_input)
        .map_err(|e| format!("unreadable tool call: {e}"))?;
    let claude_dir = (!req.project_dir.is_empty()).then(|| PathBuf::from(&req.project_dir));
    if claude_dir.as_deref().is_some_and(|d| !d.is_absolute()) {
        return Err(format!(
            "project_dir {:?} is not an absolute path",
            req.project_dir
        ));
    }
    Ok(Validated { tool, claude_dir })
}

/// Step 2: the project root (git root of cwd unless the hook named it) and the canonical cwd.
/// Both read the file system: this runs off the runtime's workers (`off_runtime`, from
/// `Engine::prepare`), never on the async runtime.
/// In system mode the hook's `CLAUDE_PROJECT_DIR` counts only when it holds the cwd: the agent's
/// environment (a settings file's `env`) must not borrow another project's map and rules for a
/// command that runs here; otherwise the project is found from the cwd alone.
fn canonicalise(cwd: PathBuf, claude_dir: Option<PathBuf>, mode: Mode) -> Place {
    let claude_dir = match mode {
        Mode::User => claude_dir,
        Mode::System => claude_dir.filter(|dir| {
            let canon = |p: &Path| std::fs::canonicalize(p).ok();
            matches!((canon(dir), canon(&cwd)), (Some(d), Some(c)) if c.starts_with(&d))
        }),
    };
    let (root, _) = crate::engine::project::project_root(&cwd, claude_dir.as_deref());
    let cwd = std::fs::canonicalize(&cwd).unwrap_or(cwd);
    Place {
        root_s: root.to_string_lossy().into_owned(),
        cwd_s: cwd.to_string_lossy().into_owned(),
        root,
        cwd,
    }
}

/// Steps 2–4 as one trip off the runtime's workers finds them: with the tier map and the keys
/// unchanged since they were verified (their stamps), the rules current and the breaker free,
/// the snapshot is taken and the policy judges in that same trip; otherwise the map is loaded on
/// the runtime (audited events, store reads) and the policy judges in a second trip.
enum Trip {
    Judged {
        place: Place,
        coherent: Coherent,
        step: Step,
        home: String,
    },
    Load {
        place: Place,
        /// `None`: not taken (the engine is shutting down); `get` takes them.
        stamps: Option<Stamps>,
        facts: Facts,
    },
}

/// Steps 2–4 done: where the request runs, the snapshot it was judged under, the policy's step
/// and the agent's home.
struct Prepared {
    place: Place,
    coherent: Coherent,
    step: Step,
    home: String,
}

/// What a judgement needs besides the place and the snapshot (owned: it goes to the blocking
/// pool).
struct Facts {
    tool: Tool,
    uid: u32,
    agent_home: Option<String>,
    locations: Locations,
    extra_own: Vec<String>,
    secret_tables: Arc<SecretTables>,
    lookups: Arc<Lookups>,
    packs: PackSet,
}

impl Facts {
    fn judge(self, place: &Place, coherent: &Coherent) -> Judge {
        Judge {
            tool: self.tool,
            place_root: place.root_s.clone(),
            place_cwd: place.cwd_s.clone(),
            snapshot: Arc::clone(&coherent.snapshot),
            rules: Arc::clone(&coherent.rules),
            breaker_open: coherent.breaker_open,
            uid: self.uid,
            agent_home: self.agent_home,
            locations: self.locations,
            extra_own: self.extra_own,
            secret_tables: self.secret_tables,
            lookups: self.lookups,
            packs: self.packs,
        }
    }
}

/// What the policy needs from the engine for one judgement, owned (it runs off the runtime's
/// workers).
/// The model reviewer's re-check judges with it too.
pub(crate) struct Judge {
    pub(crate) tool: Tool,
    pub(crate) place_root: String,
    pub(crate) place_cwd: String,
    pub(crate) snapshot: Arc<Snapshot>,
    pub(crate) rules: Arc<RuleSet>,
    pub(crate) breaker_open: bool,
    pub(crate) uid: u32,
    /// The agent's `$HOME` as the hook sent it: how its shell expands `~`.
    pub(crate) agent_home: Option<String>,
    pub(crate) locations: Locations,
    /// cmdgate's own paths beyond `Locations::own_paths`: the spool in use, the binaries.
    pub(crate) extra_own: Vec<String>,
    /// The secret table per set of homes, with the operator's `secret_paths` (the engine's).
    pub(crate) secret_tables: Arc<SecretTables>,
    /// The `lstat` answers kept across decisions (the engine's, `lookups.rs`).
    pub(crate) lookups: Arc<Lookups>,
    /// The read packs that are on (the operator's `read_packs_off` removed).
    pub(crate) packs: PackSet,
}

/// Step 4: the policy's step, with every path the decision depends on resolved as the kernel
/// resolves it now (`policy::decide::kernel`, resolver `engine::kernel`, shared with the hook):
/// links in every component, hard links, cmdgate's own files under any spelling. `~` is the
/// agent's `$HOME` as the hook saw it (its shell expands `~` with it), else the password
/// database's home for its uid. The resolution, the password database and the listing of a
/// searched directory read the system: this runs off the runtime's workers. Returns the step and
/// the agent's home. Each path is looked up once per judgement (`engine::memo`, made here and
/// dropped with the step), over the engine's kept answers (`engine::lookups`: brought up to date
/// with every change the kernel reported before the judgement starts).
pub(crate) fn judge(j: Judge) -> (Step, String) {
    let lookups = Arc::clone(&j.lookups);
    judge_with(j, &crate::engine::memo::Memo::over(&lookups))
}

/// [`judge`] with the resolver given: the tests judge with and without the memo.
fn judge_with(j: Judge, kernel: &dyn PathResolver) -> (Step, String) {
    let db_home = agent_home(j.uid);
    let home = j
        .agent_home
        .filter(|h| h.starts_with('/'))
        .unwrap_or_else(|| db_home.clone());
    // Registrations and defaults under either home are cmdgate's, and a secret under either
    // home is a secret: the agent's `$HOME` says how its shell expands `~`, never that the real
    // home's keys are somewhere else.
    let mut own_paths = j.locations.own_paths(&home);
    let secrets = if db_home != home {
        own_paths.extend(j.locations.own_paths(&db_home));
        j.secret_tables.for_homes(&[&home, &db_home])
    } else {
        j.secret_tables.for_homes(&[&home])
    };
    own_paths.extend(j.extra_own);
    let read_policy = ReadPolicy {
        home: home.clone(),
        cwd: None,
        project: None,
        secrets: Cow::Borrowed(&secrets),
        extension: None,
        // Lists the cwd / project root for a recursive search of it (only when asked).
        listing: Some(&crate::engine::listing::list_dir),
        packs: j.packs,
    };
    let ctx = Context {
        snapshot: &j.snapshot,
        rules: &j.rules,
        breaker_open: j.breaker_open,
        read_policy: &read_policy,
        limits: Limits::default(),
        home: &home,
        own_paths: &own_paths,
    };
    let request = Request {
        tool: &j.tool,
        project_root: &j.place_root,
        cwd: &j.place_cwd,
    };
    let step = decide::decide_with(request, ctx, kernel);
    // A learned command runs on the host only when nothing in it is code the agent could have
    // changed (`policy::learn::host`); otherwise it keeps running in the mirror (its plan comes
    // from deciding again without the learned rule: the tier-1 options of its parts).
    let step = match (&step, &j.tool) {
        (Step::Decided(Decision::Allow(ev)), Tool::Bash { command })
            if ev.source == Source::Learned =>
        {
            match learned_on_host(command, &j.place_root, &j.place_cwd, &home) {
                Ok(()) => step,
                Err(why) => {
                    let rule = ev.rule.clone().unwrap_or_default();
                    let none = RuleSet::new(Vec::new());
                    match decide::decide_with(
                        request,
                        Context {
                            rules: &none,
                            ..ctx
                        },
                        kernel,
                    ) {
                        Step::TestRun(mut plan) => {
                            plan.why = format!(
                                "learned ({rule}), but {why}, so it keeps running in the mirror; {}",
                                plan.why
                            );
                            Step::TestRun(plan)
                        }
                        other => other,
                    }
                }
            }
        }
        _ => step,
    };
    // The mirror's home (its overlay, its secret masks, `write=~/…` paths): in system mode the
    // password database's, never one the agent's environment names.
    let mirror_home = match j.locations.mode {
        Mode::System => db_home,
        Mode::User => home,
    };
    (step, mirror_home)
}

/// Where a learned command's programs are looked up: the system's directories, never the agent's
/// `PATH`.
const SYSTEM_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// `policy::learn::host::host_runnable` with the file system's answers.
fn learned_on_host(command: &str, root: &str, cwd: &str, home: &str) -> Result<(), String> {
    use cmdgate_policy::learn::host::{host_runnable, Program};
    use std::os::unix::fs::MetadataExt;
    let cmdgate_policy::shell::Analysis::Parsed(script) =
        cmdgate_policy::shell::analyze(command, &Limits::default())
    else {
        return Err("it cannot be analysed".into());
    };
    let resolve = |name: &str| -> Option<Program> {
        SYSTEM_PATH.iter().find_map(|dir| {
            let path = std::fs::canonicalize(Path::new(dir).join(name)).ok()?;
            let meta = std::fs::metadata(&path).ok()?;
            meta.is_file().then(|| Program {
                path: path.to_string_lossy().into_owned(),
                owner_uid: meta.uid(),
                mode: meta.mode() & 0o7777,
            })
        })
    };
    host_runnable(&script, root, cwd, home, &resolve)
}

/// Does the policy's step stand under an escape hatch? The catastrophic list, tier 3 and the
/// operator's own remembered rejections still deny, and a command that cannot be analysed cannot
/// be shown not to be catastrophic, and an allow stays an allow; anything else (a read-only
/// project, an open breaker, a test-run, an ask) the hatch steps aside from.
fn hatch_keeps(step: &Step) -> bool {
    match step {
        Step::Decided(Decision::Deny(e) | Decision::Ask(e)) => {
            matches!(
                e.source,
                Source::Catastrophic | Source::Unanalyzable | Source::Remembered
            ) || (e.source == Source::TierMap && matches!(step, Step::Decided(Decision::Deny(_))))
        }
        Step::Decided(Decision::Allow(_)) => true,
        Step::TestRun(_) => false,
    }
}

/// A tier-1/unknown command (not `direct`) where no mirrored run can happen: refused, never
/// asked (an approved ask would be a bare host run of what may be the agent's own code) and
/// never test-run into an allow (the run on the host would not be the run judged).
fn no_mirror(plan: &decide::TestRunPlan, why: &str) -> Decision {
    let rule = (!plan.rules.is_empty()).then(|| plan.rules.join(", "));
    Decision::Deny(decide::Evidence {
        source: Source::Sandbox,
        rule,
        revision: plan.revision,
        reason: format!(
            "`{}` may only run in cmdgate's mirror, and no mirrored run can happen here ({why}); \
             nothing ran. Tell the user: the daemon needs root for mirrored runs, or the operator \
             can mark the tier-map entry `direct` (test-run, then run on the host) for commands \
             that need it",
            plan.command
        ),
    })
}

/// Step 7: the breaker signal a decision sends (a dirty test-run, a denial, a clean test-run).
/// A sandbox refusal without a run (no mirror here, no ticket) is the daemon's condition, not the
/// agent's conduct: no signal.
fn breaker_signal(decision: &Decision, learn: &Option<(String, LearnEvent)>) -> Option<Signal> {
    match (decision, learn) {
        (_, Some((_, LearnEvent::DirtyTestRun(_)))) => Some(Signal::DirtyTestRun),
        (Decision::Deny(e), None) if e.source == Source::Sandbox => None,
        (Decision::Deny(_), _) => Some(Signal::Denial),
        (_, Some((_, LearnEvent::CleanTestRun(_)))) => Some(Signal::Success),
        _ => None,
    }
}

/// Runs a decision's file-system work (canonicalise, stamps, judgement) where blocking does not
/// hold up the async runtime. On a worker of the multi-threaded runtime (the daemon's),
/// `block_in_place` first gives this worker's queue and I/O driver to another thread, so every
/// other task goes on being served there, then runs `f` on this thread: the decision does not
/// wait for a pool thread to wake and for its answer to wake the runtime again (the blocking
/// pool's two wake-ups on the critical path, about a tenth of a routed decision's time:
/// docs/benchmarks.md, "issue 12, session 8"). Elsewhere (a current-thread runtime: unit tests)
/// `f` goes to the blocking pool. A panic in `f` is an `Err` either way, never an unwound task.
/// What runs here cannot be cut short by the decide deadline: `prepare` refuses a judgement
/// that ended after it.
pub(crate) async fn off_runtime<R, F>(f: F) -> Result<R, String>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if multi {
        tokio::task::block_in_place(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_owned());
                format!("it panicked: {what}")
            })
        })
    } else {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| e.to_string())
    }
}

impl Engine {
    /// Decides one request within the daemon's deadline (a deny when it cannot), then holds an
    /// "ask" for the operator in background mode.
    pub async fn decide(&self, peer: Peer, req: DecideRequest) -> DecideResponse {
        let started = Instant::now();
        // A session belongs to the uid that opened it: another uid's request naming it is refused
        // (and audited) before anything else, so it cannot move that session's breaker.
        if let Err(why) = self.claim_session(peer, &req.agent.session_id).await {
            return DecideResponse::fail_closed(
                format!("cmdgate refused this request: {why}"),
                None,
                None,
            );
        }
        let budget = self.config.decide_deadline();
        let result = tokio::time::timeout(budget, self.decide_within(peer, &req, started)).await;
        let response = match result {
            Ok(Ok(r)) => r,
            Ok(Err(EngineError::Store(e))) => {
                self.audit_integrity.failed("decision", &e);
                self.fail_closed(
                    peer,
                    &req,
                    started,
                    format!("the audit could not be written ({e})"),
                )
                .await
            }
            Ok(Err(EngineError::RulesReload(e))) => {
                self.fail_closed(
                    peer,
                    &req,
                    started,
                    format!("the rules could not be reloaded after a change ({e})"),
                )
                .await
            }
            Err(_) => {
                self.fail_closed(
                    peer,
                    &req,
                    started,
                    format!(
                        "no decision within the daemon's {} ms deadline",
                        budget.as_millis()
                    ),
                )
                .await
            }
        };
        // The operator's model reviewer answers an ask first, when enabled (outside the pipeline's
        // deadline, inside the hook's); what it leaves to a person stays an ask.
        // A mirrored run's `ask` is only the fallback of a hook that cannot run it: never reviewed.
        let response = if response.run.is_none() && self.reviews(&req, &response) {
            self.review(peer, &req, response, started).await
        } else {
            response
        };
        // Background mode: the ask waits for the operator (outside the pipeline's deadline, inside
        // the hook's). A mirrored run's `ask` is never held.
        let response =
            if response.decision == Verdict::Ask && response.run.is_none() && self.holds_asks(&req)
            {
                self.hold(&req, response, started).await
            } else {
                response
            };
        self.decisions.fetch_add(1, Ordering::Relaxed);
        response
    }

    /// A deny for a request the pipeline could not finish, audited if the store still takes it.
    async fn fail_closed(
        &self,
        peer: Peer,
        req: &DecideRequest,
        started: Instant,
        why: String,
    ) -> DecideResponse {
        let reason = format!("cmdgate could not decide, so it refuses: {why}");
        let mut entry = request_entry(peer, req);
        entry.decision = Some(Verdict::Deny.into());
        entry.source = Some(wire::Source::FailClosed.into());
        entry.reason = Some(reason.clone());
        entry.latency_us = Some(micros(started));
        let audit_id =
            match tokio::time::timeout(Duration::from_secs(2), self.store.append(entry)).await {
                Ok(Ok(row)) => Some(row.id as u64),
                Ok(Err(e)) => {
                    self.audit_integrity.failed("fail-closed deny", &e);
                    None
                }
                Err(_) => {
                    self.audit_integrity
                        .failed("fail-closed deny", &"no commit within 2 s");
                    None
                }
            };
        DecideResponse::fail_closed(reason, None, audit_id)
    }

    async fn decide_within(
        &self,
        peer: Peer,
        req: &DecideRequest,
        started: Instant,
    ) -> Result<DecideResponse, EngineError> {
        let now = clock::now();
        let mut entry = request_entry(peer, req);
        let early = |entry: Entry, why: String| Early { entry, why };
        // 1. Validate.
        let Validated { tool, claude_dir } = match validate(req) {
            Ok(v) => v,
            Err(why) => return self.finish_early(early(entry, why), started).await,
        };
        // 2–4. Canonicalise, snapshot, decide.
        let facts = Facts {
            tool: tool.clone(),
            uid: peer.uid,
            agent_home: req.home.clone(),
            locations: self.paths.locations.clone(),
            extra_own: self.own_extras.clone(),
            secret_tables: Arc::clone(&self.secret_tables),
            lookups: Arc::clone(&self.lookups),
            // Validated when the config loaded; a bad list here switches every pack off.
            packs: self.config.read_packs().unwrap_or_else(|_| PackSet::none()),
        };
        let prepared = self
            .prepare(req, claude_dir, facts, &mut entry, now, started)
            .await?;
        let Prepared {
            place,
            coherent,
            step,
            home,
        } = match prepared {
            Ok(p) => p,
            Err(why) => return self.finish_early(early(entry, why), started).await,
        };
        describe_parts(&mut entry, &tool, &coherent.snapshot);
        // 4b. The operator's escape hatch (a grant the daemon holds for this uid or session):
        // cmdgate steps aside, except where the policy refused on grounds no hatch lifts.
        if let Some(grant) = self.hatches.active(peer.uid, &req.agent.session_id, now) {
            if !hatch_keeps(&step) {
                return self.step_aside(entry, grant, started).await;
            }
        }
        // 5. Test-run, when the policy asks for one.
        let Outcome {
            decision,
            mut learn,
            classified,
            run,
        } = self
            .test_run(
                step,
                TicketRequest { req, peer },
                &place,
                home,
                &coherent.snapshot,
                &mut entry,
            )
            .await;
        let (verdict, ev) = match &decision {
            Decision::Allow(e) => (Verdict::Allow, e),
            Decision::Deny(e) => (Verdict::Deny, e),
            Decision::Ask(e) => (Verdict::Ask, e),
        };
        // 6. Learn: a remembered rejection counts against the command's learning record.
        if let (Decision::Deny(e), Tool::Bash { command }) = (&decision, &tool) {
            if e.source == Source::Remembered {
                learn = learning::key_of(command).map(|k| (k, LearnEvent::Rejected(0)));
            }
        }
        let source = wire_source(ev.source);
        // A mirrored run's decision row says `run`; the run's own row follows when it ends.
        entry.decision = Some(match &run {
            Some(_) => AuditDecision::Mirrored,
            None => verdict.into(),
        });
        entry.source = Some(source.into());
        entry.rule = ev.rule.clone();
        entry.reason = Some(ev.reason.clone());
        entry.tiermap_revision = ev.revision.and_then(|r| i64::try_from(r).ok());
        // A remembered approval's note reaches the model with the allow (`additionalContext`).
        let context = match (&decision, ev.rule.as_deref().and_then(rule_id)) {
            (Decision::Allow(e), Some(id)) if e.source == Source::Remembered => coherent
                .rules
                .rules()
                .iter()
                .find(|r| r.id == id)
                .and_then(|r| r.note.as_deref())
                .map(|n| format!("cmdgate: the operator approved this command earlier with a note for you: {n}")),
            _ => None,
        };
        // 7. Breaker signal.
        let mut changes = coherent.breaker_changes;
        if let Some(s) = breaker_signal(&decision, &learn) {
            changes.extend(self.breakers.record(&req.agent.session_id, s, now).await);
        }
        // 8. Commit the row (with breaker state and learning) before answering (a mirrored run's
        // ticket: before its fsync, see `commit`).
        entry.latency_us = Some(micros(started));
        let committed = self
            .commit(
                entry,
                changes,
                learn,
                place.root_s,
                coherent.breaker_open,
                classified,
            )
            .await;
        let (row_id, durable) = match committed {
            Ok(id) => id,
            Err(e) => {
                // An unaudited ticket is never handed out.
                if let Some(r) = &run {
                    self.tickets.withdraw(&r.ticket);
                }
                return Err(e);
            }
        };
        if let Some(r) = &run {
            self.tickets.set_decision(&r.ticket, row_id, durable);
        }
        Ok(DecideResponse {
            v: wire::WIRE_VERSION,
            decision: verdict,
            reason: ev.reason.clone(),
            source,
            rule: ev.rule.clone(),
            tiermap_revision: ev.revision,
            audit_id: u64::try_from(row_id).ok(),
            context,
            run,

            step_aside: false,
        })
    }

    /// Steps 2–4: the place, one coherent snapshot and the policy's step. Every file-system call
    /// runs off the runtime's workers (`off_runtime`), and a decision under an unchanged tier map
    /// makes one such trip (canonicalise, the keys' and map's stamps, the cached snapshot, the
    /// judgement); a map to (re)load, stale rules or a busy lock take the waiting path:
    /// `snapshot`, then a second trip to judge. `entry` gets the place as soon as it is known.
    /// `Ok(Err(why))` refuses the request, and so does a judgement that ended after the decide
    /// deadline (it ran on this task's thread, where the deadline could not cut it short).
    async fn prepare(
        &self,
        req: &DecideRequest,
        claude_dir: Option<PathBuf>,
        facts: Facts,
        entry: &mut Entry,
        now: UnixMillis,
        started: Instant,
    ) -> Result<Result<Prepared, String>, EngineError> {
        let session = req.agent.session_id.clone();
        let (cwd, mode) = (PathBuf::from(&req.cwd), self.paths.locations.mode);
        // Rules that must be reloaded first are the waiting path's (`snapshot` reloads them).
        let rules = (!self.rules.is_stale()).then(|| self.rules.current());
        let engine = self.me.upgrade();
        let trip = off_runtime(move || {
            let place = canonicalise(cwd, claude_dir, mode);
            let Some(engine) = engine else {
                return Trip::Load {
                    stamps: None,
                    place,
                    facts,
                };
            };
            let stamps = engine.tiermaps.stamps(&place.root);
            // The order of `snapshot`: map, rules, breaker.
            let coherent = engine
                .tiermaps
                .cached(&place.root, &stamps)
                .and_then(|snapshot| {
                    let rules = rules?;
                    let (breaker_open, breaker_changes) =
                        engine.breakers.try_is_open(&session, now)?;
                    Some(Coherent {
                        snapshot,
                        rules,
                        breaker_open,
                        breaker_changes,
                    })
                });
            match coherent {
                Some(coherent) => {
                    let (step, home) = judge(facts.judge(&place, &coherent));
                    Trip::Judged {
                        place,
                        coherent,
                        step,
                        home,
                    }
                }
                None => Trip::Load {
                    place,
                    stamps: Some(stamps),
                    facts,
                },
            }
        })
        .await;
        let trip = match trip {
            Ok(t) => t,
            Err(e) => return Ok(Err(format!("the request could not be judged ({e})"))),
        };
        if let Some(late) = self.past_deadline(started) {
            return Ok(Err(late));
        }
        let (place, stamps, facts) = match trip {
            Trip::Judged {
                place,
                coherent,
                step,
                home,
            } => {
                entry.project = Some(place.root_s.clone());
                entry.cwd = Some(place.cwd_s.clone());
                return Ok(Ok(Prepared {
                    place,
                    coherent,
                    step,
                    home,
                }));
            }
            Trip::Load {
                place,
                stamps,
                facts,
            } => (place, stamps, facts),
        };
        entry.project = Some(place.root_s.clone());
        entry.cwd = Some(place.cwd_s.clone());
        let coherent = match self
            .snapshot(&req.agent.session_id, &place, stamps, now)
            .await?
        {
            Ok(c) => c,
            Err(why) => return Ok(Err(why)),
        };
        let judge_input = facts.judge(&place, &coherent);
        let judged = off_runtime(move || judge(judge_input)).await;
        if let Some(late) = self.past_deadline(started) {
            return Ok(Err(late));
        }
        match judged {
            Ok((step, home)) => Ok(Ok(Prepared {
                place,
                coherent,
                step,
                home,
            })),
            Err(e) => Ok(Err(format!("the policy could not judge the request ({e})"))),
        }
    }

    /// The refusal of a decision whose judgement ended after the decide deadline: the same
    /// reason the deadline's own deny gives.
    fn past_deadline(&self, started: Instant) -> Option<String> {
        let budget = self.config.decide_deadline();
        (started.elapsed() >= budget).then(|| {
            format!(
                "no decision within the daemon's {} ms deadline",
                budget.as_millis()
            )
        })
    }

    /// Step 3, the waiting path: the project's tier map (a new, rejected or replayed map is
    /// audited and signalled first), the rules (reloaded if a reload failed since a change;
    /// refused if it fails again) and the breaker, read together. `Ok(Err(why))` refuses the
    /// request.
    async fn snapshot(
        &self,
        session: &str,
        place: &Place,
        stamps: Option<Stamps>,
        now: UnixMillis,
    ) -> Result<Result<Coherent, String>, EngineError> {
        let loaded = match stamps {
            Some(stamps) => {
                self.tiermaps
                    .get_stamped(&place.root, stamps, &self.store)
                    .await?
            }
            None => self.tiermaps.get(&place.root, &self.store).await?,
        };
        if let Some(event) = loaded.event {
            self.map_event(session, event, &place.root_s, &loaded.snapshot)
                .await?;
        }
        if self.rules.is_stale() {
            if let Err(e) = self.reload_rules().await {
                return Ok(Err(format!(
                    "the remembered and learned rules could not be reloaded after a change ({e}); \
                     cmdgate refuses every routed call until they load (`cmdgate status`, the daemon's log)"
                )));
            }
        }
        let rules = self.rules.current();
        let (breaker_open, breaker_changes) = self.breakers.is_open(session, now).await;
        Ok(Ok(Coherent {
            snapshot: loaded.snapshot,
            rules,
            breaker_open,
            breaker_changes,
        }))
    }

    /// Step 5: a decided step as it is; a test-run step runs in the mirror (as the agent's uid,
    /// with its home) and comes back through `after_test_run`, with its learning event.
    async fn test_run(
        &self,
        step: Step,
        ticket_request: TicketRequest<'_>,
        place: &Place,
        home: String,
        snapshot: &Snapshot,
        entry: &mut Entry,
    ) -> Outcome {
        let plan = match step {
            Step::Decided(decision) => {
                return Outcome {
                    decision,
                    learn: None,
                    classified: None,
                    run: None,
                }
            }
            Step::TestRun(plan) => plan,
        };
        // The run is the test-run: unless the entry keeps the older form (`direct`), the command
        // runs once, in the mirror, through the client. Where no mirrored run can happen (a
        // daemon that is not root), it is refused: a test-run here would be followed by a run on
        // the host of code the agent can change (the sandbox-detection hole), and an ask a
        // person approved would be that same bare host run.
        if !plan.options.direct {
            return match self.runs.unavailable() {
                None => {
                    self.issue(plan, ticket_request, place, home, snapshot, entry)
                        .await
                }
                Some(why) => Outcome {
                    decision: no_mirror(&plan, why),
                    learn: None,
                    classified: None,
                    run: None,
                },
            };
        }
        let peer = ticket_request.peer;
        let target = Target {
            root: &place.root,
            cwd: &place.cwd,
            home: Some(PathBuf::from(&home)),
            run_as: Some(RunAs {
                uid: peer.uid,
                gid: peer.gid,
            }),
        };
        let ran = self
            .testruns
            .run(&plan, target, self.config.test_run_deadline())
            .await;
        entry.sandbox = Some(ran.detail.to_string());
        let learn = match &ran.verdict {
            SandboxVerdict::Clean => Some((plan.key.clone(), LearnEvent::CleanTestRun(0))),
            SandboxVerdict::Dirty { .. } => Some((plan.key.clone(), LearnEvent::DirtyTestRun(0))),
            SandboxVerdict::Failed { .. } => None,
        };
        Outcome {
            decision: after_test_run(&plan, &ran.verdict),
            learn,
            classified: Some(learning::classification_of(&plan.command, snapshot)),
            run: None,
        }
    }

    /// Issues the ticket of a mirrored run. A leading `cd DIR &&` stays outside the client (so
    /// Claude Code's shell ends up in DIR) when DIR resolves; the ticket is bound to where it
    /// resolves and runs the rest there.
    async fn issue(
        &self,
        plan: cmdgate_policy::decide::TestRunPlan,
        req: TicketRequest<'_>,
        place: &Place,
        home: String,
        snapshot: &Snapshot,
        entry: &mut Entry,
    ) -> Outcome {
        let split = split_leading_cd(&plan.command).map(|(d, rest)| (d, rest.to_owned()));
        let (cd, command, cwd) = match split {
            Some((dir, rest)) => {
                let target = place.cwd.join(&dir);
                match tokio::task::spawn_blocking(move || std::fs::canonicalize(target)).await {
                    Ok(Ok(real)) if real.is_dir() => (Some(dir), rest, real),
                    _ => (None, plan.command.clone(), place.cwd.clone()),
                }
            }
            None => (None, plan.command.clone(), place.cwd.clone()),
        };
        let classification = learning::classification_of(&plan.command, snapshot);
        let tool_timeout_ms = req
            .req
            .tool_input
            .get("timeout")
            .and_then(serde_json::Value::as_u64);
        let issued = Issued {
            session: req.req.agent.session_id.clone(),
            agent_id: req.req.agent.agent_id.clone(),
            tool_use_id: req.req.tool_use_id.clone(),
            project: place.root.clone(),
            cwd: cwd.clone(),
            command: command.clone(),
            original: plan.command.clone(),
            plan: plan.clone(),
            revision: plan.revision,
            classification: Some(classification),
            uid: req.peer.uid,
            gid: req.peer.gid,
            home,
            tool_timeout_ms,
            decision_id: 0,
            durable: None,
            background: self.holds_asks(req.req),
            since: cmdgate_sandbox::clock::precise_now(),
        };
        let mut random = [0u8; 32];
        let ticket = match getrandom::getrandom(&mut random) {
            Ok(()) => self.tickets.issue(issued, &random, Instant::now()),
            Err(_) => None,
        };
        let rule = (!plan.rules.is_empty()).then(|| plan.rules.join(", "));
        let ev = |reason: String| decide::Evidence {
            source: Source::Sandbox,
            rule: rule.clone(),
            revision: plan.revision,
            reason,
        };
        let Some(ticket) = ticket else {
            // Never an ask: a person's approval would run it on the host, outside the mirror.
            return Outcome {
                decision: Decision::Deny(ev(format!(
                    "`{}` runs only in cmdgate's mirror, but no run ticket could be issued (too \
                     many waiting, or no randomness); nothing ran. Retry in a moment",
                    plan.command
                ))),
                learn: None,
                classified: None,
                run: None,
            };
        };
        entry.sandbox = Some(
            serde_json::json!({"run": "ticket", "ticket": crate::engine::tickets::ticket_name(&ticket),
                               "cwd": cwd, "command": command})
            .to_string(),
        );
        let reason = format!(
            "{}; `{command}` runs once, in cmdgate's mirror of the workspace: its output and exit \
             status are the command's; clean effects are committed to the workspace, anything \
             else is rolled back",
            plan.why
        );
        Outcome {
            decision: Decision::Ask(ev(reason)),
            learn: None,
            classified: None,
            run: Some(RunTicket {
                ticket,
                cd,
                command,
                expires_in_ms: u64::try_from(self.tickets.ttl().as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }

    /// Step 8: the audit row, the breaker changes and the learning event in one transaction; the
    /// rules are reloaded when learning changed them. Returns the row's id, and the token to
    /// await its fsync when it was answered before it (`Store::write_deferred`): only a mirrored
    /// run's ticket, which permits nothing until it is redeemed — and the redemption starts
    /// nothing before the row is on disk (`redeem.rs`) — and only when the same transaction
    /// carries no breaker or learning change.
    async fn commit(
        &self,
        entry: Entry,
        changes: Vec<Changed>,
        learn: Option<(String, LearnEvent)>,
        project: String,
        breaker_open: bool,
        classified: Option<String>,
    ) -> Result<(i64, Option<Durable>), EngineError> {
        let defer = matches!(entry.decision, Some(AuditDecision::Mirrored))
            && changes.is_empty()
            && learn.is_none();
        let promotion = self.config.promotion.clone();
        let job = move |c: &rusqlite::Connection| {
            let row = audit::append(c, entry)?;
            persist_breakers(c, &changes, Some(row.id))?;
            let learned = match learn {
                Some((key, event)) => {
                    let event = with_id(event, row.id);
                    apply_learning(
                        c,
                        &project,
                        &key,
                        event,
                        PromotionContext {
                            needs_person_or_denied: false,
                            breaker_open,
                            classification: classified.as_deref(),
                        },
                        &promotion,
                    )?
                }
                None => false,
            };
            Ok((row, learned))
        };
        let ((row, learned), durable) = match defer {
            true => {
                let (done, d) = self.store.write_deferred(job).await?;
                (done, Some(d))
            }
            false => (self.store.write(job).await?, None),
        };
        if learned {
            self.reload_rules().await?;
        }
        Ok((row.id, durable))
    }

    /// The escape hatch covers the call: audited (source `escape_hatch`, the grant named), then
    /// answered with `step_aside` (the hook gives no decision).
    async fn step_aside(
        &self,
        mut entry: Entry,
        grant: Grant,
        started: Instant,
    ) -> Result<DecideResponse, EngineError> {
        let reason = format!(
            "the operator's escape hatch #{} ({}) covers {} until {} ms since the epoch: cmdgate \
             steps aside and Claude Code's own permission rules apply (catastrophic commands and \
             tier 3 are still denied)",
            grant.id, grant.reason, grant.scope, grant.until.0
        );
        let rule = format!("escape hatch #{}", grant.id);
        entry.decision = Some(Verdict::Ask.into());
        entry.source = Some(wire::Source::EscapeHatch.into());
        entry.rule = Some(rule.clone());
        entry.reason = Some(reason.clone());
        entry.note = Some(format!("stepped aside (granted by {})", grant.granted_by));
        entry.latency_us = Some(micros(started));
        let row = self.store.append(entry).await?;
        Ok(DecideResponse {
            v: wire::WIRE_VERSION,
            decision: Verdict::Ask,
            reason,
            source: wire::Source::EscapeHatch,
            rule: Some(rule),
            tiermap_revision: None,
            audit_id: u64::try_from(row.id).ok(),
            context: None,
            run: None,
            step_aside: true,
        })
    }

    async fn finish_early(
        &self,
        early: Early,
        started: Instant,
    ) -> Result<DecideResponse, EngineError> {
        let Early { mut entry, why } = early;
        let reason = format!("refused: {why}");
        entry.decision = Some(Verdict::Deny.into());
        entry.source = Some(wire::Source::FailClosed.into());
        entry.reason = Some(reason.clone());
        entry.latency_us = Some(micros(started));
        let row = self.store.append(entry).await?;
        Ok(DecideResponse::fail_closed(
            reason,
            None,
            u64::try_from(row.id).ok(),
        ))
    }

    async fn map_event(
        &self,
        session: &str,
        event: MapEvent,
        root: &str,
        snapshot: &Arc<Snapshot>,
    ) -> Result<(), EngineError> {
        let now = clock::now();
        let changes = match event.integrity {
            Some(i) => {
                self.breakers
                    .record(session, Signal::Integrity(i), now)
                    .await
            }
            None => Vec::new(),
        };
        if event.what == TiermapEvent::Rejected {
            eprintln!("cmdgated: {}: {}", event.project, event.detail);
        }
        let entry = Entry {
            at_ms: clock::now_ms(),
            kind: Kind::Tiermap,
            session: Some(session.to_owned()),
            project: Some(event.project.clone()),
            decision: Some(event.what.into()),
            reason: Some(event.detail.clone()),
            tiermap_revision: event.revision.and_then(|r| i64::try_from(r).ok()),
            note: event.integrity.map(|i| format!("integrity: {i:?}")),
            ..Entry::default()
        };
        // A newly accepted revision demotes the learned entries it reclassifies (in the same
        // transaction as its audit row, before this decision reads the rules).
        let review = (event.what == TiermapEvent::Accepted).then(|| {
            (
                root.to_owned(),
                Arc::clone(snapshot),
                self.config.promotion.clone(),
            )
        });
        let changed = self
            .store
            .write(move |c| {
                let row = audit::append(c, entry)?;
                persist_breakers(c, &changes, Some(row.id))?;
                match review {
                    Some((root, snapshot, promotion)) => {
                        learning::review(c, &root, &snapshot, row.id, &promotion)
                    }
                    None => Ok(false),
                }
            })
            .await?;
        if changed {
            self.reload_rules().await?;
        }
        Ok(())
    }
}

fn micros(started: Instant) -> i64 {
    i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX)
}

/// cmdgate's own paths the shared list does not know: the spool this daemon ingests and its
/// binaries (the hook the agent's settings register lives beside `cmdgated`).
pub(crate) fn own_extras(paths: &crate::config::Paths) -> Vec<String> {
    let mut v: Vec<String> = paths
        .spool_dir
        .iter()
        .chain([&paths.config_file, &paths.db, &paths.sandbox_state])
        .map(|p| p.display().to_string())
        .collect();
    if let Ok(exe) = std::env::current_exe() {
        v.push(exe.display().to_string());
        if let Some(dir) = exe.parent() {
            for bin in ["cmdgate", "cmdgate-hook", "cmdgate-run"] {
                v.push(dir.join(bin).display().to_string());
            }
        }
    }
    v
}

/// The agent's home: from the password database for its uid, else the daemon's `$HOME`.
fn agent_home(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.dir.to_string_lossy().into_owned())
        .or_else(|| std::env::var("HOME").ok())
        .unwrap_or_else(|| "/".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> decide::TestRunPlan {
        decide::TestRunPlan {
            command: "./build.sh".into(),
            key: "./build.sh".into(),
            options: Default::default(),
            why: "unknown command".into(),
            rules: vec!["tier 1: ./build.sh".into()],
            revision: Some(3),
        }
    }

    #[test]
    fn without_a_mirror_a_routed_command_is_refused_never_asked_and_costs_no_breaker_signal() {
        let d = no_mirror(&plan(), "the daemon is not root");
        let Decision::Deny(e) = &d else {
            panic!("{d:?} must be a deny: an approved ask would run it on the host");
        };
        assert_eq!(e.source, Source::Sandbox);
        assert!(e.reason.contains("the daemon is not root"), "{}", e.reason);
        assert!(e.reason.contains("nothing ran"), "{}", e.reason);
        assert_eq!(breaker_signal(&d, &None), None);
        // A dirty test-run is still a signal, and any other deny too.
        let dirty = Some(("k".to_owned(), LearnEvent::DirtyTestRun(0)));
        assert_eq!(breaker_signal(&d, &dirty), Some(Signal::DirtyTestRun));
        let tier = Decision::Deny(decide::Evidence {
            source: Source::TierMap,
            rule: None,
            revision: None,
            reason: String::new(),
        });
        assert_eq!(breaker_signal(&tier, &None), Some(Signal::Denial));
    }

    use crate::engine::kernel_table;

    /// A judgement of `tool`/`arg` in the gate laid out under `w` (home, the project, cmdgate's
    /// config and data dirs), under a verified map, as the daemon makes it.
    fn judgement(w: &str, tool: &str, input: &serde_json::Value) -> Judge {
        use cmdgate_policy::tiermap::{sign, PinnedKeys};
        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let mut keys = PinnedKeys::new();
        keys.pin("ops", 1, key.verifying_key()).unwrap();
        let map = "---\nrevision: 1\n---\n# t\n\n## Tier 0 — read\n- `make -n *`\n";
        let snapshot = Snapshot::load(Some(&sign(map, "ops", 1, &key).unwrap()), &keys, None);
        assert!(snapshot.verified().is_some());
        let locations = Locations::from_env(|k| match k {
            "HOME" => Some(format!("{w}/home")),
            "CMDGATE_CONFIG_DIR" => Some(format!("{w}/conf")),
            "CMDGATE_HOME" => Some(format!("{w}/data")),
            _ => None,
        });
        Judge {
            tool: Tool::from_claude(tool, input).unwrap(),
            place_root: format!("{w}/proj"),
            place_cwd: format!("{w}/proj"),
            snapshot: Arc::new(snapshot),
            rules: Arc::new(RuleSet::default()),
            breaker_open: false,
            uid: nix::unistd::getuid().as_raw(),
            agent_home: Some(format!("{w}/home")),
            locations,
            extra_own: Vec::new(),
            secret_tables: Arc::new(SecretTables::new(Vec::new())),
            lookups: Arc::new(Lookups::default()),
            packs: PackSet::all(),
        }
    }

    /// [`judgement`] over answers kept across judgements.
    fn judgement_kept(
        w: &str,
        tool: &str,
        input: &serde_json::Value,
        kept: &Arc<Lookups>,
    ) -> Judge {
        Judge {
            lookups: Arc::clone(kept),
            ..judgement(w, tool, input)
        }
    }

    fn verb(step: &Step) -> &str {
        match step {
            Step::Decided(d) => d.verb(),
            Step::TestRun(_) => "test-run",
        }
    }

    /// The judgement's memo, and the answers kept across judgements under it, change no
    /// answer: every case of the kernel-paths table (links, hard links, `..` after a link,
    /// nested repositories, cmdgate's own files), judged on the real file system with the memo,
    /// twice over answers kept since earlier cases (the second time from kept answers), and with
    /// the kernel resolver that remembers nothing, comes to the same step — verdict, reason and
    /// rule — and to the table's verdict.
    #[test]
    fn the_memo_changes_no_judgement() {
        let n = kernel_table::cases("$W").len();
        assert!(n > 50, "the table is there");
        // Every case's temporary tree keeps its watches until the kernel lets them go: bounds
        // above what the ~60 trees need, so no case starts over empty (tested on their own).
        let kept = Arc::new(Lookups::bounded(1 << 16, 1 << 14));
        let mut failures = Vec::new();
        for i in 0..n {
            let dir = tempfile::tempdir().unwrap();
            let w = dir.path().display().to_string();
            let case = &kernel_table::cases(&w)[i];
            kernel_table::make_gate(dir.path());
            for s in &case.setup {
                kernel_table::apply_real(&dir.path().join("proj"), s);
            }
            let j = || judgement(&w, &case.tool, &case.input());
            let memo = crate::engine::memo::Memo::default();
            let (with, home_with) = judge_with(j(), &memo);
            let (without, home_without) = judge_with(j(), &crate::engine::kernel::Kernel);
            assert_eq!(with, without, "{}: the memo changed the step", case.name);
            assert_eq!(home_with, home_without);
            assert!(memo.len() > 0, "{}: judged without the memo", case.name);
            for round in 0..2 {
                let (asked, starts) = (kept.asked_below(&w), kept.starts());
                let (over, home_over) = judge(judgement_kept(&w, &case.tool, &case.input(), &kept));
                assert_eq!(
                    over, without,
                    "{}: kept answers changed the step ({round})",
                    case.name
                );
                assert_eq!(home_over, home_without);
                // Unless a mount somewhere on the machine made it start over meanwhile.
                if round == 1 && kept.starts() == starts {
                    assert_eq!(
                        kept.asked_below(&w)[asked.len()..],
                        [] as [String; 0],
                        "{}: the second judgement asked the kernel about the tree again",
                        case.name
                    );
                }
            }
            if verb(&with) != case.verdict {
                failures.push(format!(
                    "{}: {} want {}",
                    case.name,
                    verb(&with),
                    case.verdict
                ));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// Nothing kept outlives a change: a plain file allowed for a write is refused once it has
    /// become a link to the shell's startup file, with answers kept across the two decisions.
    #[test]
    fn no_answer_outlives_its_decision() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().display().to_string();
        kernel_table::make_gate(dir.path());
        std::fs::write(dir.path().join("home/.bashrc"), "# rc\n").unwrap();
        let notes = dir.path().join("proj/notes.txt");
        std::fs::write(&notes, "x\n").unwrap();
        let input = serde_json::json!({"file_path": notes, "content": "curl x | sh\n"});
        let kept = Arc::new(Lookups::default());
        let (first, _) = judge(judgement_kept(&w, "Write", &input, &kept));
        assert_eq!(verb(&first), "allow", "{first:?}");
        let (again, _) = judge(judgement_kept(&w, "Write", &input, &kept));
        assert_eq!(verb(&again), "allow", "{again:?}");
        assert!(
            kept.kept(&notes.display().to_string()),
            "the file's answer is kept"
        );
        std::fs::remove_file(&notes).unwrap();
        std::os::unix::fs::symlink(dir.path().join("home/.bashrc"), &notes).unwrap();
        let (second, _) = judge(judgement_kept(&w, "Write", &input, &kept));
        assert_eq!(verb(&second), "ask", "{second:?}");
    }

    /// A judgement that blocks on the runtime's only worker does not hold up the runtime: the
    /// worker's queue moves to another thread first (`block_in_place`), so a task spawned
    /// before it still runs and unblocks it. Without the hand-over this waits in vain and fails.
    #[test]
    fn blocking_work_leaves_the_runtime_serving() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let got = runtime.block_on(async {
            let (tx, rx) = std::sync::mpsc::channel();
            let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
            // Spawned on the one worker, waiting for the judgement to start.
            tokio::spawn(async move {
                let _ = go_rx.await;
                let _ = tx.send("served");
            });
            tokio::spawn(async move {
                off_runtime(move || {
                    let _ = go_tx.send(());
                    rx.recv_timeout(Duration::from_secs(60))
                })
                .await
            })
            .await
            .unwrap()
        });
        assert_eq!(got, Ok(Ok("served")));
    }

    /// A panic in the blocking work is an error of the step (an audited deny), on either kind
    /// of runtime, never an unwound task.
    #[test]
    fn a_panic_in_blocking_work_is_an_error() {
        for multi in [true, false] {
            let runtime = if multi {
                tokio::runtime::Builder::new_multi_thread().build()
            } else {
                tokio::runtime::Builder::new_current_thread().build()
            }
            .unwrap();
            let got = runtime.block_on(async {
                tokio::spawn(off_runtime(|| -> u8 { panic!("a judgement panicked") }))
                    .await
                    .unwrap()
            });
            let err = got.expect_err("a panic is an error");
            assert!(err.contains("panic"), "{multi}: {err}");
            // And an answer is an answer.
            let ok = runtime.block_on(async { tokio::spawn(off_runtime(|| 7u8)).await.unwrap() });
            assert_eq!(ok, Ok(7), "{multi}");
        }
    }
}
