//! `cmdgate explain`: the full decision path for a command, without executing anything.

use std::path::PathBuf;

use cmdgate_policy::decide::{self, Context, Request, RuleSet, Step, Tool};
use cmdgate_policy::locations::Locations;
use cmdgate_policy::shell::read::{packs, PackSet, PackVerdict, ReadPolicy};
use cmdgate_policy::shell::{self, Analysis, Limits, Word};
use cmdgate_policy::tiermap::Snapshot;
use serde_json::json;

use crate::engine::project;

/// Arguments of `cmdgate explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// Directory the command would run in (default: the current directory).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// The project root, as Claude Code's CLAUDE_PROJECT_DIR (default: the git root of --cwd).
    #[arg(long)]
    pub project: Option<PathBuf>,
    /// Print JSON instead of a human summary.
    #[arg(long)]
    pub json: bool,
    /// Pretend the circuit breaker is open (read-only mode).
    #[arg(long)]
    pub breaker_open: bool,
    /// The command, as the agent's Bash tool would receive it (several words are joined by spaces).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// The operator's acceptance of the command's dirty runs (`engine/accept.rs`), from the store
/// (read-only): accepted signatures and candidates, under the command's classification now.
/// `null` without a store, or with acceptance off.
fn acceptance(project: &str, key: &str, command: &str, snapshot: &Snapshot) -> serde_json::Value {
    let Ok((config, paths)) = crate::api::serve::load(None) else {
        return serde_json::Value::Null;
    };
    let k = config.promotion.accept_k;
    if k == 0 || !paths.db.exists() {
        return serde_json::Value::Null;
    }
    let record = crate::store::open_read_only(&paths.db)
        .ok()
        .and_then(|c| crate::store::state::learn_record(&c, project, key).ok())
        .flatten()
        .unwrap_or_default();
    let class = crate::engine::learning::classification_of(command, snapshot);
    let same = record.classification.as_deref() == Some(class.as_str());
    let (accepted, candidates): (Vec<_>, Vec<_>) = record
        .acceptance
        .entries()
        .iter()
        .filter(|_| same)
        .partition(|a| a.accepted.is_some());
    json!({
        "k": k,
        "accepted": accepted.iter().map(|a| json!({"signature": a.signature.to_string(), "applies": a.applies})).collect::<Vec<_>>(),
        "candidates": candidates.iter().map(|a| json!({"signature": a.signature.to_string(), "applies": a.applies.len()})).collect::<Vec<_>>(),
    })
}

/// Runs `explain`; returns the process exit code (0 whatever the decision).
pub fn run(args: ExplainArgs) -> anyhow::Result<()> {
    let json = args.json;
    let e = explain(args)?;
    if json {
        print_json(&e)
    } else {
        print_text(&e)
    }
}

/// A command judged as the daemon would judge it now, and what the explanation shows of it.
struct Explained {
    command: String,
    root_s: String,
    root_source: project::RootSource,
    snapshot: Snapshot,
    analysis: Analysis,
    /// Each simple command: its words, context, wrappers, and whether (and why not) it reads.
    parts: Vec<serde_json::Value>,
    step: Step,
    /// The step as JSON (with the acceptance of a mirror step).
    outcome: serde_json::Value,
}

/// The project, its tier map, the policy's step with paths resolved as the daemon would now, and
/// each part's read verdict; nothing runs.
fn explain(args: ExplainArgs) -> anyhow::Result<Explained> {
    let command = args.command.join(" ");
    let cwd = match args.cwd {
        Some(c) => c,
        None => std::env::current_dir()?,
    };
    let env_project = std::env::var_os("CLAUDE_PROJECT_DIR").map(PathBuf::from);
    let (root, root_source) =
        project::project_root(&cwd, args.project.as_deref().or(env_project.as_deref()));
    let locations = Locations::from_env(|k| std::env::var(k).ok());
    let home = std::env::var("HOME").unwrap_or_else(|_| "/".into());
    let keys = project::load_pinned_keys(&locations);
    let snapshot = project::load_snapshot(&root, keys.as_ref().map_err(String::as_str), None);
    let root_s = root.to_string_lossy().into_owned();
    let cwd_s = std::fs::canonicalize(&cwd)
        .unwrap_or(cwd)
        .to_string_lossy()
        .into_owned();
    let mut read_policy = ReadPolicy::new(&home);
    // As the daemon: a recursive search of the cwd / project root is judged by listing it.
    read_policy.listing = Some(&crate::engine::listing::list_dir);
    // As the daemon: the operator's switched-off read packs.
    if let Ok((config, _)) = crate::api::serve::load(None) {
        read_policy.packs = config.read_packs().unwrap_or_else(|_| PackSet::none());
    }
    let own = locations.own_paths(&home);
    let rules = RuleSet::default();
    let limits = Limits::default();
    let ctx = Context {
        snapshot: &snapshot,
        rules: &rules,
        breaker_open: args.breaker_open,
        read_policy: &read_policy,
        limits,
        home: &home,
        own_paths: &own,
    };
    let tool = Tool::Bash {
        command: command.clone(),
    };
    // Paths as the daemon would resolve them now (links, hard links, the repository git uses).
    let step = decide::decide_with(
        Request {
            tool: &tool,
            project_root: &root_s,
            cwd: &cwd_s,
        },
        ctx,
        &crate::engine::kernel::Kernel,
    );

    let analysis = shell::analyze(&command, &limits);
    let parts: Vec<serde_json::Value> = match &analysis {
        Analysis::Parsed(script) => script
            .commands
            .iter()
            .zip(decide::read_verdicts(script, &cwd_s, &root_s, ctx))
            .map(|(c, read)| {
                json!({
                    "argv": c.argv.iter().map(word_text).collect::<Vec<_>>(),
                    "context": c.context,
                    "wrappers": c.wrappers.iter().map(|w| w.iter().map(word_text).collect::<Vec<_>>()).collect::<Vec<_>>(),
                    "read": read.is_ok(),
                    "not_read_because": read.err(),
                    "read_pack": read_pack(&c.argv),
                })
            })
            .collect(),
        Analysis::Unanalyzable(_) => Vec::new(),
    };
    let outcome = match &step {
        Step::Decided(d) => json!({
            "decision": d.verb(),
            "source": d.evidence().source,
            "rule": d.evidence().rule,
            "reason": d.evidence().reason,
        }),
        Step::TestRun(plan) => json!({
            "decision": "test-run",
            "why": plan.why,
            "rules": plan.rules,
            "timeout_s": plan.options.timeout.map(|t| t.as_secs()),
            "network": plan.options.network,
            "network_hosts": plan.options.hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
            "extra_writable": plan.options.extra_writable,
            "unmask": plan.options.unmask,
            "edit_tracked": plan.options.edit_tracked,
            "direct": plan.options.direct,
            "then": then(plan.options.direct),
            "acceptance": acceptance(&root_s, &plan.key, &plan.command, &snapshot),
        }),
    };
    Ok(Explained {
        command,
        root_s,
        root_source,
        snapshot,
        analysis,
        parts,
        step,
        outcome,
    })
}

/// The explanation as one JSON document.
fn print_json(e: &Explained) -> anyhow::Result<()> {
    let map = match &e.snapshot {
        Snapshot::Verified(v) => {
            json!({"valid": true, "revision": v.revision, "key": v.key, "key_version": v.key_version})
        }
        Snapshot::ReadOnly { reason } => json!({"valid": false, "read_only_because": reason}),
    };
    let out = json!({
        "command": e.command,
        "project": e.root_s,
        "project_from": e.root_source,
        "tier_map": map,
        "analysis": match &e.analysis { Analysis::Parsed(_) => json!("parsed"), Analysis::Unanalyzable(u) => json!(u) },
        "parts": e.parts,
        "outcome": e.outcome,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// The explanation for a person: the project, the map, each part, the decision.
fn print_text(e: &Explained) -> anyhow::Result<()> {
    println!("command   {}", e.command);
    println!(
        "project   {} ({})",
        e.root_s,
        serde_json::to_value(e.root_source)?
            .as_str()
            .unwrap_or_default()
    );
    match &e.snapshot {
        Snapshot::Verified(v) => println!(
            "tier map  CLAUDE_CMDS.md revision {}, signed by {} v{}",
            v.revision, v.key, v.key_version
        ),
        Snapshot::ReadOnly { reason } => {
            println!("tier map  none valid ⇒ read-only project: {reason}")
        }
    }
    if let Analysis::Unanalyzable(u) = &e.analysis {
        println!("analysis  not analysable: {u:?}");
    }
    for (i, p) in e.parts.iter().enumerate() {
        let argv: Vec<&str> = p["argv"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .collect();
        let verdict = match p["not_read_because"].as_str() {
            None => match (
                p["read_pack"]["pack"].as_str(),
                p["read_pack"]["rule"].as_str(),
            ) {
                (Some(pack), Some(rule)) => format!("read (read pack `{pack}`, rule `{rule}`)"),
                _ => "read".to_owned(),
            },
            Some(why) => format!("not a read: {why}"),
        };
        println!("part {:<3}  {:<40} {verdict}", i + 1, argv.join(" "));
    }
    print_step(&e.step, &e.outcome)
}

/// The decision, or the mirror step with its options and the operator's acceptance.
fn print_step(step: &Step, outcome: &serde_json::Value) -> anyhow::Result<()> {
    match step {
        Step::Decided(d) => {
            let e = d.evidence();
            println!(
                "decision  {} (by {}{})",
                d.verb().to_uppercase(),
                serde_json::to_value(e.source)?.as_str().unwrap_or("?"),
                e.rule
                    .as_deref()
                    .map(|r| format!(", {r}"))
                    .unwrap_or_default()
            );
            println!("reason    {}", e.reason);
        }
        Step::TestRun(plan) => {
            if plan.options.direct {
                println!(
                    "decision  TEST-RUN in the container mirror, then on the host (`direct`; {})",
                    plan.why
                );
            } else {
                println!(
                    "decision  RUN once, in the container mirror, through cmdgate-run ({})",
                    plan.why
                );
            }
            println!(
                "options   timeout {}, network {}, extra writable {:?}, unmasked secrets {:?}, \
                 tracked edits {}",
                plan.options
                    .timeout
                    .map(|t| format!("{} s", t.as_secs()))
                    .unwrap_or_else(|| "default".into()),
                if plan.options.network {
                    "allowed (the host's, unfiltered)".to_owned()
                } else if !plan.options.hosts.is_empty() {
                    format!(
                        "only {} through cmdgate's proxy",
                        plan.options
                            .hosts
                            .iter()
                            .map(|h| h.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                } else {
                    "none".to_owned()
                },
                plan.options.extra_writable,
                plan.options.unmask,
                if plan.options.edit_tracked {
                    "allowed"
                } else {
                    "dirty"
                },
            );
            println!("then      {}", then(plan.options.direct));
            let a = &outcome["acceptance"];
            if let Some(accepted) = a["accepted"].as_array() {
                println!(
                    "accepted  {} effect signature(s) the operator applied {} times commit \
                     without asking ([promotion] accept_k; `cmdgate apply` counts)",
                    accepted.len(),
                    a["k"]
                );
                for sig in accepted {
                    println!("          - {}", sig["signature"]);
                }
                for c in a["candidates"].as_array().into_iter().flatten() {
                    println!(
                        "          candidate ({} of {} applies): {}",
                        c["applies"], a["k"], c["signature"]
                    );
                }
            }
        }
    }
    Ok(())
}

/// What follows a mirror step: a mirrored run (issue 19), or the test-run of a `direct` entry.
fn then(direct: bool) -> &'static str {
    if direct {
        "clean ⇒ allow (it runs again on the host); dirty ⇒ deny with the effects; error or timeout ⇒ ask"
    } else {
        "the agent sees its output and exit status; clean effects ⇒ committed (undo with `cmdgate undo`); \
         dirty ⇒ rolled back with the reason; a conflict with the host ⇒ nothing committed"
    }
}

/// The read pack covering a part and its rule (`kubectl`, `kubectl get`), when one does.
fn read_pack(argv: &[Word]) -> serde_json::Value {
    let texts: Vec<String> = argv.iter().map(word_text).collect();
    let Some((name, args)) = texts.split_first() else {
        return serde_json::Value::Null;
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let name = name.rsplit('/').next().unwrap_or(name);
    match packs::judge(name, &args) {
        Some((pack, PackVerdict::Read { rule })) => json!({"pack": pack.name(), "rule": rule}),
        Some((pack, _)) => json!({"pack": pack.name(), "rule": null}),
        None => serde_json::Value::Null,
    }
}

fn word_text(w: &Word) -> String {
    match w {
        Word::Static(s) => s.clone(),
        Word::Dynamic(raw) => format!("{raw} (dynamic)"),
    }
}
