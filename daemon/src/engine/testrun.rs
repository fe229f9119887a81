//! Test-runs for the pipeline: `cmdgate_sandbox::run` on a blocking thread (the library execs its
//! single-threaded helper, so no tokio thread ever forks), at most `max_concurrent` at once, inside
//! the test-run deadline. Anything but a finished, judged run is `Failed` (⇒ ask, never allow).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cmdgate_policy::decide::{SandboxVerdict, TestRunPlan};
use cmdgate_sandbox::{HelperCommand, RunAs, RunConfig};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::config::SandboxConfig;
use crate::engine::scope::{mirror_helper, MirrorScope};

/// The test-run facility.
pub struct TestRunner {
    slots: Arc<Semaphore>,
    helper: HelperCommand,
    state_dir: PathBuf,
    config: SandboxConfig,
    /// Why no mirror can be built here, found once at start (`None`: it can).
    unavailable: Option<String>,
    /// What every test-run hides (cmdgate's own paths, secret paths) and how it judges git.
    scope: MirrorScope,
}

/// What the pipeline gets back: the verdict, and what to put in the audit's `sandbox` column.
pub struct Ran {
    pub verdict: SandboxVerdict,
    pub detail: serde_json::Value,
}

/// Where and as whom to run.
pub struct Target<'a> {
    pub root: &'a Path,
    pub cwd: &'a Path,
    pub home: Option<PathBuf>,
    pub run_as: Option<RunAs>,
}

impl TestRunner {
    pub fn new(helper: HelperCommand, state_dir: PathBuf, config: SandboxConfig) -> TestRunner {
        // Whether the helper can build a mirror shows at its first run (a refusal is "ask").
        let (helper, unavailable) = mirror_helper(config.helper.as_deref(), helper);
        if unavailable.is_none() {
            if let Err(e) = cmdgate_sandbox::sweep_stale(&state_dir) {
                eprintln!(
                    "cmdgated: sweeping stale test-runs in {}: {e}",
                    state_dir.display()
                );
            }
        }
        TestRunner {
            slots: Arc::new(Semaphore::new(config.max_concurrent.max(1))),
            helper,
            state_dir,
            config,
            unavailable,
            scope: MirrorScope::default(),
        }
    }

    /// The daemon's masks, secret paths and git judgement for every test-run.
    pub fn scoped(mut self, scope: MirrorScope) -> TestRunner {
        self.scope = scope;
        self
    }

    /// Why test-runs cannot happen, if they cannot.
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// Runs the plan within `budget` (waiting for a slot included).
    pub async fn run(&self, plan: &TestRunPlan, target: Target<'_>, budget: Duration) -> Ran {
        let failed = |why: String| Ran {
            verdict: SandboxVerdict::Failed { why: why.clone() },
            detail: json!({"verdict": "failed", "why": why}),
        };
        if let Some(why) = &self.unavailable {
            return failed(format!("sandbox unavailable: {why}"));
        }
        // The command runs from the agent's cwd inside the mirrored project.
        let (workspace, command) = match target.cwd.strip_prefix(target.root) {
            Ok(rel) if rel.as_os_str().is_empty() => {
                (target.root.to_path_buf(), plan.command.clone())
            }
            Ok(_) => (
                target.root.to_path_buf(),
                format!(
                    "cd {} || exit 126\n{}",
                    shell_quote(&target.cwd.to_string_lossy()),
                    plan.command
                ),
            ),
            Err(_) => (target.cwd.to_path_buf(), plan.command.clone()),
        };
        let mut cfg = RunConfig::new(workspace, self.state_dir.clone(), self.helper.clone());
        let wanted = plan
            .options
            .timeout
            .unwrap_or(Duration::from_millis(self.config.timeout_ms));
        // Leave the helper a margin to tear down and report inside the budget.
        let cap = budget
            .saturating_sub(Duration::from_millis(1500))
            .max(Duration::from_millis(500));
        cfg.limits.timeout = wanted.min(cap);
        cfg.limits.memory_bytes = self.config.memory_bytes;
        cfg.limits.pids = self.config.pids;
        cfg.limits.cpu_millis = self.config.cpu_millis;
        cfg.limits.scratch_bytes = self.config.scratch_bytes;
        cfg.network = plan.options.network;
        cfg.allow_tracked_changes = plan.options.edit_tracked;
        cfg.run_as = target.run_as;
        if let Some(home) = &target.home {
            cfg.home = Some(home.clone());
            cfg.env.retain(|(k, _)| k != "HOME");
            cfg.env
                .push(("HOME".into(), home.to_string_lossy().into_owned()));
        }
        cfg.extra_writable = plan
            .options
            .extra_writable
            .iter()
            .map(|p| match (p.strip_prefix("~/"), &target.home) {
                (Some(rest), Some(home)) => home.join(rest),
                _ => PathBuf::from(p),
            })
            .collect();
        self.scope
            .apply(&mut cfg, &plan.command, &plan.options.unmask);
        let home = target.home.clone();
        let slots = self.slots.clone();
        let started = Instant::now();
        let agent_home = home.clone();
        let run = async move {
            let _permit = slots
                .acquire_owned()
                .await
                .map_err(|e| format!("no sandbox slot: {e}"))?;
            let queued_ms = started.elapsed().as_millis();
            tokio::task::spawn_blocking(move || {
                let ran = cmdgate_sandbox::run(&cfg, &command);
                // What the policy refuses reads the file system (the agent's home, canonical):
                // here, off the async runtime.
                let refused = match &ran {
                    Ok(tr) => protected_effects(&tr.effects, agent_home.as_deref()),
                    Err(_) => Vec::new(),
                };
                (queued_ms, ran, refused)
            })
            .await
            .map_err(|e| format!("the test-run thread failed: {e}"))
        };
        match tokio::time::timeout(budget, run).await {
            Err(_) => failed(format!(
                "no test-run result within the daemon's {} ms test-run deadline",
                budget.as_millis()
            )),
            Ok(Err(why)) => failed(why),
            Ok(Ok((_, Err(e), _))) => failed(format!("sandbox error: {e}")),
            Ok(Ok((queued_ms, Ok(tr), refused))) => {
                let detail = json!({
                    "clean": tr.clean,
                    "why": tr.why,
                    "exit": tr.exit,
                    "signal": tr.signal,
                    "timed_out": tr.timed_out,
                    "duration_ms": tr.duration.as_millis() as u64,
                    "queued_ms": queued_ms as u64,
                    "effects": tr.effects,
                });
                let verdict = if tr.timed_out {
                    SandboxVerdict::Failed {
                        why: format!(
                            "the test-run timed out after {} ms",
                            tr.duration.as_millis()
                        ),
                    }
                } else if tr.clean {
                    // The mirror protects the root's `.git`, `.claude` and map; persistence files
                    // and other repositories' configuration at any depth are the policy's.
                    if refused.is_empty() {
                        SandboxVerdict::Clean
                    } else {
                        SandboxVerdict::Dirty { effects: refused }
                    }
                } else if tr.why.is_empty() {
                    // Not clean without a stated reason: still not clean.
                    SandboxVerdict::Dirty {
                        effects: vec!["the sandbox judged the run not clean".into()],
                    }
                } else {
                    SandboxVerdict::Dirty {
                        effects: tr.why.clone(),
                    }
                };
                Ran { verdict, detail }
            }
        }
    }
}

/// Effects the policy refuses (`policy::decide::protected::effect_refusal`): in the workspace a
/// persistence file, `.claude/` or another repository's configuration or hooks, at any depth; in
/// `$HOME` (a `write=` path there, or a write a mirrored run leaves behind) the files that run
/// code later (`policy::decide::persistence::home_persistence`), whatever `write=` says.
pub(crate) fn protected_effects(
    effects: &[cmdgate_sandbox::Effect],
    home: Option<&std::path::Path>,
) -> Vec<String> {
    use cmdgate_policy::decide::persistence::{home_persistence, persistence};
    use cmdgate_policy::decide::protected::{effect_refusal, Touch};
    use cmdgate_sandbox::{Area, Effect};
    // A kept write= path is reported canonical; the agent's `HOME` may not be.
    let homes: Vec<std::path::PathBuf> = home
        .into_iter()
        .flat_map(|h| [h.canonicalize().ok(), Some(h.to_path_buf())])
        .flatten()
        .collect();
    let mut out = Vec::new();
    for e in effects {
        let Some((area, path)) = e.location() else {
            continue;
        };
        let touch = match e {
            Effect::Created { .. } => Touch::Created,
            _ => Touch::Changed,
        };
        let mut paths = vec![path];
        if let Effect::Renamed { from, .. } = e {
            paths.push(from);
        }
        for p in paths {
            let why = match area {
                Area::Workspace => effect_refusal(&p.to_string_lossy(), touch),
                Area::Home => home_persistence(&p.to_string_lossy()),
                Area::Extra => match homes.iter().find_map(|h| p.strip_prefix(h).ok()) {
                    Some(rel) => home_persistence(&rel.to_string_lossy()),
                    None => persistence(&p.to_string_lossy()).map(|e| {
                        format!("changed {}, which runs later: {}", p.display(), e.reason)
                    }),
                },
                Area::Scratch => None,
            };
            if let Some(why) = why {
                out.push(why);
            }
        }
    }
    out
}

/// Single-quotes a word for `bash -c`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
