//! `cmdgate reviewer try -- COMMAND` (what the configured model reviewer would say about a command
//! the policy asks about, with the evidence it would see) and `cmdgate reviewer eval FILE` (replays
//! the person-decided examples of an `export` file through it: a confusion matrix against the
//! people's decisions, with latency). Both run in the CLI with the operator's config and the
//! operator's environment (the key variable named by `reviewer.api_key_env`); nothing is audited.

use std::io::BufRead;
use std::path::PathBuf;
use std::time::Duration;

use cmdgate_policy::decide::{
    self, canonical_key, Context, Decision, Request, Rule, RuleSet, Step, Tool,
};
use cmdgate_policy::locations::Locations;
use cmdgate_policy::shell::{self, read::ReadPolicy, Analysis, Limits};
use cmdgate_policy::tiermap::Snapshot;
use serde_json::{json, Value};

use crate::api::types::RulesList;
use crate::cli::client;
use crate::engine::project;
use crate::engine::reviewer::evidence::{
    candidates, render_call, render_prefix, CallEvidence, CallFacts, Classification, Prompt,
    TurnEvidence, UserTurns,
};
use crate::engine::reviewer::{ReviewDecision, Reviewer, ReviewerConfig, SYSTEM_PROMPT};
use crate::engine::rules::rule_kind;
use crate::store::audit::TierSeen;

/// `cmdgate reviewer …`.
#[derive(Debug, clap::Args)]
pub struct ReviewerArgs {
    #[command(subcommand)]
    pub verb: ReviewerVerb,
}

#[derive(Debug, clap::Subcommand)]
pub enum ReviewerVerb {
    /// What the reviewer would say about COMMAND, with the evidence it would see.
    Try(TryArgs),
    /// Replay an export file's person-decided examples through the reviewer.
    Eval(EvalArgs),
}

/// Arguments of `cmdgate reviewer try`.
#[derive(Debug, clap::Args)]
pub struct TryArgs {
    /// Directory the command would run in (default: the current directory).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// The project root (default: the git root of --cwd).
    #[arg(long)]
    pub project: Option<PathBuf>,
    /// A user turn to show the reviewer (repeatable; oldest first).
    #[arg(long = "user-turn")]
    pub user_turns: Vec<String>,
    /// Config file (default: config.toml in the config dir).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// The command, as the agent's Bash tool would receive it.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// Arguments of `cmdgate reviewer eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// An export file (`cmdgate export`, JSONL).
    pub file: PathBuf,
    /// At most this many examples.
    #[arg(long, default_value_t = 200)]
    pub limit: usize,
    /// Config file (default: config.toml in the config dir).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ReviewerArgs) -> anyhow::Result<std::process::ExitCode> {
    match args.verb {
        ReviewerVerb::Try(a) => try_one(a),
        ReviewerVerb::Eval(a) => eval(a),
    }
}

/// The saved rules, from the daemon over the admin socket (the operator's): the policy decides
/// with them and the reviewer's saved-rule candidates come from them. `Err` says why there are
/// none (no daemon, not an operator).
fn saved_rules(admin: &std::path::Path) -> Result<Vec<Rule>, String> {
    let listed = client::get::<RulesList>(admin, "/admin/rules").map_err(|e| e.to_string())?;
    Ok(listed
        .value
        .rules
        .into_iter()
        .filter_map(|r| {
            Some(Rule {
                id: r.id,
                kind: rule_kind(&r.kind)?,
                project: r.project,
                key: r.key,
                enabled: r.enabled,
                note: r.note,
            })
        })
        .collect())
}

/// The operator's reviewer (configured or not: `try` and `eval` work on a disabled one).
fn reviewer(config: Option<PathBuf>) -> anyhow::Result<Reviewer> {
    let (config, _) = crate::api::serve::load(config)?;
    let rc: ReviewerConfig = config.reviewer;
    if !rc.configured() {
        anyhow::bail!(
            "no reviewer is configured: set [reviewer] provider, model (and api_key_env) in config.toml (docs/reviewer.md)"
        );
    }
    Ok(Reviewer::new(rc, |k| std::env::var(k).ok()))
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn try_one(args: TryArgs) -> anyhow::Result<std::process::ExitCode> {
    let reviewer = reviewer(args.config.clone())?;
    let (_, paths) = crate::api::serve::load(args.config.clone())?;
    let saved = saved_rules(&paths.admin_socket);
    let command = args.command.join(" ");
    let cwd = match args.cwd {
        Some(c) => c,
        None => std::env::current_dir()?,
    };
    let (root, _) = project::project_root(&cwd, args.project.as_deref());
    let locations = Locations::from_env(|k| std::env::var(k).ok());
    let home = std::env::var("HOME").unwrap_or_else(|_| "/".into());
    let keys = project::load_pinned_keys(&locations);
    let snapshot = project::load_snapshot(&root, keys.as_ref().map_err(String::as_str), None);
    let root_s = root.to_string_lossy().into_owned();
    let cwd_s = std::fs::canonicalize(&cwd)
        .unwrap_or(cwd)
        .to_string_lossy()
        .into_owned();
    let read_policy = ReadPolicy::new(&home);
    let own = locations.own_paths(&home);
    let rules = RuleSet::new(saved.clone().unwrap_or_default());
    let ctx = Context {
        snapshot: &snapshot,
        rules: &rules,
        breaker_open: false,
        read_policy: &read_policy,
        limits: Limits::default(),
        home: &home,
        own_paths: &own,
    };
    let tool = Tool::Bash {
        command: command.clone(),
    };
    let step = decide::decide(
        Request {
            tool: &tool,
            project_root: &root_s,
            cwd: &cwd_s,
        },
        ctx,
    );
    let revision = match &snapshot {
        Snapshot::Verified(v) => Some(v.revision),
        Snapshot::ReadOnly { .. } => None,
    };
    let ev = match &step {
        Step::Decided(Decision::Ask(e)) => e.clone(),
        Step::Decided(d) => {
            println!(
                "the policy decides this itself ({}: {}); the reviewer never sees it",
                d.verb(),
                d.evidence().reason
            );
            return Ok(std::process::ExitCode::SUCCESS);
        }
        Step::TestRun(_) => {
            println!("the policy test-runs this in the mirror; the reviewer sees it only if the run cannot finish");
            return Ok(std::process::ExitCode::SUCCESS);
        }
    };
    let turn = TurnEvidence {
        user_turns: UserTurns {
            turns: args.user_turns,
            left_out: 0,
        },
        session_rules: Vec::new(),
    };
    let call = CallEvidence {
        call: CallFacts {
            tool: "Bash".into(),
            input: json!({"command": command}),
            cwd: cwd_s,
            project: root_s.clone(),
            session: "cmdgate reviewer try".into(),
            agent_id: None,
            agent_type: None,
        },
        classification: Classification {
            tier: None,
            rule: ev.rule.clone(),
            reason: ev.reason.clone(),
            tiermap_revision: revision,
        },
        mirror: None,
        candidates: match shell::analyze(&command, &Limits::default()) {
            Analysis::Parsed(script) => {
                candidates(rules.rules(), &root_s, &command, &canonical_key(&script))
            }
            Analysis::Unanalyzable(_) => Vec::new(),
        },
    };
    let prompt = Prompt {
        prefix: render_prefix(&turn),
        call: render_call(&call),
    };
    let budget = Duration::from_millis(reviewer.config().timeout_ms);
    let out = runtime()?.block_on(reviewer.ask(&prompt, budget));
    let (decision, reason) = match &out.answer {
        Ok(a) => (a.decision.as_str().to_owned(), a.reason.clone()),
        Err(d) => (
            "unavailable (the person decides)".to_owned(),
            match &d.said {
                Some(s) => format!("{}; it said: {s}", d.why),
                None => d.why.clone(),
            },
        ),
    };
    if args.json {
        println!(
            "{}",
            json!({"policy": {"decision": "ask", "rule": ev.rule, "reason": ev.reason},
                   "candidates": call.candidates,
                   "saved_rules": saved.as_ref().map(Vec::len).map_err(String::as_str),
                   "evidence": prompt.text(), "system_prompt_bytes": SYSTEM_PROMPT.len(),
                   "decision": decision, "reason": reason, "model": out.model,
                   "latency_ms": out.latency.as_millis() as u64, "digest": out.digest, "usage": out.usage})
        );
    } else {
        println!("policy: ask ({})", ev.reason);
        match &saved {
            Ok(all) => println!(
                "saved-rule candidates: {} of {} saved rules",
                call.candidates.len(),
                all.len()
            ),
            Err(why) => {
                println!("saved-rule candidates: none, the saved rules are unavailable ({why})")
            }
        }
        for c in &call.candidates {
            println!(
                "  {} `{}`: {}{}",
                c.rule,
                c.command,
                c.matched,
                if c.enabled { "" } else { " (disabled)" }
            );
        }
        println!("--- evidence the reviewer sees (after the fixed system prompt) ---");
        print!("{}", prompt.text());
        println!("---");
        println!(
            "reviewer ({}, {} ms): {decision}: {reason}",
            out.model,
            out.latency.as_millis()
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// One person-decided example of an export file, as evidence.
fn example_evidence(ex: &Value) -> Option<(CallEvidence, bool)> {
    let d = &ex["decision"];
    if d["source"] != "human" {
        return None;
    }
    let allowed = match d["verdict"].as_str()? {
        "allow" => true,
        "deny" => false,
        _ => return None,
    };
    let r = &ex["request"];
    let tool = r["tool"].as_str()?.to_owned();
    let input = match &r["input"] {
        Value::Null => json!({"command": r["command"]}),
        v => v.clone(),
    };
    let c = &ex["context"];
    Some((
        CallEvidence {
            call: CallFacts {
                tool,
                input,
                cwd: r["cwd"].as_str().unwrap_or(".").to_owned(),
                project: c["project"].as_str().unwrap_or_default().to_owned(),
                session: c["session"].as_str().unwrap_or_default().to_owned(),
                agent_id: c["agent_id"].as_str().map(str::to_owned),
                agent_type: c["agent_type"].as_str().map(str::to_owned),
            },
            classification: Classification {
                tier: c["tier"].as_str().and_then(TierSeen::parse),
                rule: None,
                reason: "a person had to decide this call".into(),
                tiermap_revision: c["tiermap_revision"].as_u64(),
            },
            mirror: match &d["sandbox"] {
                Value::Null => None,
                v => Some(v.clone()),
            },
            candidates: Vec::new(),
        },
        allowed,
    ))
}

fn eval(args: EvalArgs) -> anyhow::Result<std::process::ExitCode> {
    let reviewer = reviewer(args.config.clone())?;
    let file = std::fs::File::open(&args.file)
        .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", args.file.display()))?;
    let rt = runtime()?;
    let budget = Duration::from_millis(reviewer.config().timeout_ms);
    // Rows: the person allowed / denied. Columns: allow-once, deny, ask, unavailable.
    let mut matrix = [[0u64; 4]; 2];
    let mut latencies: Vec<u128> = Vec::new();
    let mut seen = 0usize;
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        let Ok(ex) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some((call, allowed)) = example_evidence(&ex) else {
            continue;
        };
        if seen >= args.limit {
            break;
        }
        seen += 1;
        let prompt = Prompt {
            prefix: render_prefix(&TurnEvidence::default()),
            call: render_call(&call),
        };
        let out = rt.block_on(reviewer.ask(&prompt, budget));
        latencies.push(out.latency.as_millis());
        let col = match out.answer.map(|a| a.decision) {
            Ok(ReviewDecision::AllowOnce) => 0,
            Ok(ReviewDecision::Deny) => 1,
            Ok(ReviewDecision::Ask) => 2,
            Err(_) => 3,
        };
        matrix[usize::from(!allowed)][col] += 1;
    }
    latencies.sort_unstable();
    let pct = |p: usize| -> u128 {
        if latencies.is_empty() {
            0
        } else {
            latencies[(latencies.len() - 1) * p / 100]
        }
    };
    let agreed = matrix[0][0] + matrix[1][1];
    let wrong_allows = matrix[1][0];
    if args.json {
        println!(
            "{}",
            json!({"examples": seen, "matrix": {"person_allowed": matrix[0], "person_denied": matrix[1]},
                   "columns": ["allow-once", "deny", "ask", "unavailable"], "agreed": agreed,
                   "allowed_what_a_person_denied": wrong_allows,
                   "latency_ms": {"p50": pct(50) as u64, "p95": pct(95) as u64, "max": pct(100) as u64}})
        );
    } else {
        println!(
            "{seen} person-decided examples from {}",
            args.file.display()
        );
        println!(
            "{:<16}{:>12}{:>8}{:>8}{:>13}",
            "person \\ model", "allow-once", "deny", "ask", "unavailable"
        );
        for (name, row) in [("allowed", matrix[0]), ("denied", matrix[1])] {
            println!(
                "{name:<16}{:>12}{:>8}{:>8}{:>13}",
                row[0], row[1], row[2], row[3]
            );
        }
        println!(
            "agreed on {agreed} of {seen}; allowed {wrong_allows} a person denied; latency p50 {} ms, p95 {} ms, max {} ms",
            pct(50),
            pct(95),
            pct(100)
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}
