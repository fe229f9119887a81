//! The decision engine: `decide(request, context) -> Step`, the README's precedence ("Concepts") as one pure
//! function of the request and one coherent snapshot (tier map, rules, breaker state).
//!
//! Precedence, first match wins:
//!
//! 1. the command cannot be analysed (parse error, too large, too deep) ⇒ **deny**;
//! 2. built-in catastrophic pattern, cmdgate's own paths, or tier 3 ⇒ **deny**;
//! 3. no valid tier map (read-only project) or breaker open ⇒ anything but a read ⇒ **deny**;
//! 4. remembered rejection ⇒ **deny**; always-ask exception ⇒ **ask**;
//! 5. every part a read ⇒ **allow**; remembered approval or learned entry ⇒ **allow**;
//! 6. any part reads a secret path (named, or inside a tree it searches recursively), tier 2, run
//!    through `sudo`-like wrappers, or with run-time-only values ⇒ **ask** (a test-run cannot see
//!    what a command read, so a clean one would vouch for nothing);
//! 7. tier 1 and unknown ⇒ **test-run** in the mirror, then [`after_test_run`]: clean ⇒ allow,
//!    dirty ⇒ deny with the effects, error or timeout ⇒ ask.
//!
//! A compound command is decided part by part and the strictest part wins; every decision carries
//! the rule or evidence that produced it and the tier map revision.

pub mod catastrophic;
pub mod kernel;
pub mod paths;
pub mod persistence;
pub mod protected;
pub mod reach;
mod rules;
mod tools;

pub use catastrophic::{Catastrophe, Guarded};
pub use rules::{canonical_key, Rule, RuleKind, RuleRef, RuleSet};
pub use tools::Tool;

use serde::{Deserialize, Serialize};

use crate::shell::read::{self, ReadPolicy, ReadVerdict};
use crate::shell::{self, Analysis, Limits, RedirectKind, Script, SimpleCommand, Word};
use crate::tiermap::{SandboxOptions, Snapshot, Tier};
use kernel::PathResolver;

/// The final answer for one request.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    Allow(Evidence),
    Deny(Evidence),
    Ask(Evidence),
}

impl Decision {
    pub fn evidence(&self) -> &Evidence {
        match self {
            Decision::Allow(e) | Decision::Deny(e) | Decision::Ask(e) => e,
        }
    }

    /// `allow` / `deny` / `ask`, as Claude Code spells them.
    pub fn verb(&self) -> &'static str {
        match self {
            Decision::Allow(_) => "allow",
            Decision::Deny(_) => "deny",
            Decision::Ask(_) => "ask",
        }
    }
}

/// What the engine needs next: a final decision, or a test-run in the container mirror.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Decided(Decision),
    TestRun(TestRunPlan),
}

/// Why a decision came out the way it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub source: Source,
    /// The rule that decided: a tier-map line, a built-in rule name, a remembered rule id.
    pub rule: Option<String>,
    /// The tier map revision the decision was made under (`None`: no valid map).
    pub revision: Option<u64>,
    /// Shown to the model and the operator: what was decided, why, and what would be allowed.
    pub reason: String,
}

/// Which stage of the precedence decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The command string could not be analysed.
    Unanalyzable,
    /// A built-in catastrophic pattern (including cmdgate's own paths).
    Catastrophic,
    /// The signed tier map.
    TierMap,
    /// The project has no valid tier map: read-only.
    ReadOnlyMap,
    /// The circuit breaker is open: read-only.
    Breaker,
    /// A rule the operator remembered (approval, rejection, always-ask).
    Remembered,
    /// A learned allowlist entry.
    Learned,
    /// The built-in read classification.
    BuiltinRead,
    /// Built-in policy for a non-Bash tool or a wrapper.
    ToolPolicy,
    /// A test-run in the container mirror.
    Sandbox,
}

/// A test-run to perform before deciding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRunPlan {
    /// The whole command string, as the agent gave it.
    pub command: String,
    /// The rule key of the request (for learning and remembering).
    pub key: String,
    /// Merged options of the tier-1 entries that matched (an unknown part contributes defaults).
    pub options: SandboxOptions,
    /// Why a test-run: which parts are tier 1, which unknown.
    pub why: String,
    /// The tier-1 rules involved.
    pub rules: Vec<String>,
    pub revision: Option<u64>,
}

/// What the container mirror said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum SandboxVerdict {
    Clean,
    /// The effects that made it dirty, in words.
    Dirty {
        effects: Vec<String>,
    },
    /// The run errored or timed out: nothing is known.
    Failed {
        why: String,
    },
}

/// One request to decide.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub tool: &'a Tool,
    /// Canonical project root; rules are scoped to it, Write paths are judged against it.
    pub project_root: &'a str,
    pub cwd: &'a str,
}

/// Everything the decision depends on besides the request: one coherent snapshot.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    pub snapshot: &'a Snapshot,
    pub rules: &'a RuleSet,
    /// The breaker (session or global) is open: read-only mode.
    pub breaker_open: bool,
    /// Secret paths, home and directory listing for read classification (its `cwd`, `project` and
    /// `extension` are replaced per request: the request's cwd and project root, and tier 0 of
    /// `snapshot`).
    pub read_policy: &'a ReadPolicy<'a>,
    pub limits: Limits,
    /// The agent's home directory (for `~`, catastrophic targets).
    pub home: &'a str,
    /// cmdgate's own files: config, pinned keys, store, sockets, hook binary, Claude settings.
    pub own_paths: &'a [String],
}

/// Wrappers that change who runs the command: never decided without a person.
const PRIVILEGE_WRAPPERS: &[&str] = &[
    "sudo", "doas", "su", "pkexec", "run0", "runuser", "setpriv", "chroot", "nsenter", "unshare",
];

/// Decide a request as if nothing existed on disk (every path is what it says): for requests judged
/// in the abstract. A caller deciding a real call uses [`decide_with`] and its resolver.
pub fn decide(req: Request<'_>, ctx: Context<'_>) -> Step {
    decide_with(req, ctx, &kernel::Spelling)
}

/// Decide a request, with paths as `kernel` resolves them now ([`kernel`]). Pure: the same request,
/// context and resolutions always give the same step.
pub fn decide_with(req: Request<'_>, ctx: Context<'_>, kernel: &dyn PathResolver) -> Step {
    match req.tool {
        Tool::Bash { command } => decide_bash(command, req, ctx, kernel),
        other => Step::Decided(tools::decide_tool(other, req, ctx, kernel)),
    }
}

/// Only the checks that nothing overrides (1 and 2): what the escape hatch still enforces.
/// `None` means the hatch may step aside.
pub fn escape_hatch_check(
    req: Request<'_>,
    ctx: Context<'_>,
    kernel: &dyn PathResolver,
) -> Option<Decision> {
    match req.tool {
        Tool::Bash { command } => match shell::analyze(command, &ctx.limits) {
            Analysis::Unanalyzable(u) => Some(deny_unanalyzable(&u, revision(ctx))),
            Analysis::Parsed(script) => hard_deny(&script, req, ctx, kernel),
        },
        other => match tools::decide_tool(other, req, ctx, kernel) {
            d @ Decision::Deny(Evidence {
                source: Source::Catastrophic,
                ..
            }) => Some(d),
            _ => None,
        },
    }
}

/// Turn a test-run's verdict into the final decision.
pub fn after_test_run(plan: &TestRunPlan, verdict: &SandboxVerdict) -> Decision {
    let rule = (!plan.rules.is_empty()).then(|| plan.rules.join(", "));
    let ev = |reason: String| Evidence {
        source: Source::Sandbox,
        rule: rule.clone(),
        revision: plan.revision,
        reason,
    };
    match verdict {
        SandboxVerdict::Clean => Decision::Allow(ev(format!(
            "test-ran `{}` in a mirror of the workspace: clean (exit 0, no effects outside build outputs), so it may run for real",
            plan.command
        ))),
        SandboxVerdict::Dirty { effects } => Decision::Deny(ev(format!(
            "test-ran `{}` in a mirror of the workspace and it was not clean: {}. It was rolled back; nothing changed. \
             Narrow the command so it only creates build outputs, or ask the operator to allow it",
            plan.command,
            effects.join("; ")
        ))),
        SandboxVerdict::Failed { why } => Decision::Ask(ev(format!(
            "could not finish a test-run of `{}` ({why}); a person must decide",
            plan.command
        ))),
    }
}

fn revision(ctx: Context<'_>) -> Option<u64> {
    match ctx.snapshot {
        Snapshot::Verified(v) => Some(v.revision),
        Snapshot::ReadOnly { .. } => None,
    }
}

fn deny_unanalyzable(u: &shell::Unanalyzable, revision: Option<u64>) -> Decision {
    Decision::Deny(Evidence {
        source: Source::Unanalyzable,
        rule: None,
        revision,
        reason: format!(
            "the command could not be analysed ({}), and cmdgate never allows what it cannot read; \
             split it into simpler commands",
            describe_unanalyzable(u)
        ),
    })
}

fn describe_unanalyzable(u: &shell::Unanalyzable) -> String {
    use shell::Unanalyzable as U;
    match u {
        U::TooLarge { len, max } => format!("{len} bytes, over the {max}-byte limit"),
        U::TooDeep { max } => format!("nested deeper than {max} levels"),
        U::TooManyCommands { max } => format!("more than {max} commands"),
        U::ParseError { message } => format!("parse error: {message}"),
        U::BadInput { message } => format!("bad input: {message}"),
    }
}

/// Steps 1–2 on a parsed script: catastrophic patterns and tier 3.
fn hard_deny(
    script: &Script,
    req: Request<'_>,
    ctx: Context<'_>,
    kernel: &dyn PathResolver,
) -> Option<Decision> {
    let rev = revision(ctx);
    let guarded = Guarded {
        base: paths::Base {
            home: ctx.home,
            cwd: req.cwd,
        },
        project_root: req.project_root,
        own_paths: ctx.own_paths,
    };
    if let Some(c) = catastrophic::find_with(script, guarded, kernel) {
        return Some(Decision::Deny(Evidence {
            source: Source::Catastrophic,
            rule: Some(format!("built-in:{}", c.rule)),
            revision: rev,
            reason: format!(
                "refused: part {} {}. This is on cmdgate's built-in catastrophic list; no rule can allow it",
                c.command_index + 1,
                c.what
            ),
        }));
    }
    if let Snapshot::Verified(v) = ctx.snapshot {
        for cmd in &script.commands {
            let argv = static_argv(cmd);
            if let Some((Tier::Deny, entry)) = v.map.classify(&argv) {
                return Some(Decision::Deny(Evidence {
                    source: Source::TierMap,
                    rule: Some(entry.rule()),
                    revision: rev,
                    reason: format!(
                        "refused: `{}` is tier 3 (deny) in the signed tier map",
                        argv.join(" ")
                    ),
                }));
            }
        }
    }
    None
}

fn decide_bash(
    command: &str,
    req: Request<'_>,
    ctx: Context<'_>,
    kernel: &dyn PathResolver,
) -> Step {
    let rev = revision(ctx);
    let decided = |d| Step::Decided(d);
    // 1. Unanalysable ⇒ deny.
    let script = match shell::analyze(command, &ctx.limits) {
        Analysis::Unanalyzable(u) => return decided(deny_unanalyzable(&u, rev)),
        Analysis::Parsed(script) => script,
    };
    // 2. Catastrophic / own paths / tier 3 ⇒ deny.
    if let Some(d) = hard_deny(&script, req, ctx, kernel) {
        return decided(d);
    }
    let reads = part_verdicts(&script, req.cwd, req.project_root, ctx);
    let whole = whole_is_read(&script, req.cwd, req.project_root, ctx);
    let all_reads = whole.is_ok();
    let ev = |source, rule: Option<String>, reason: String| Evidence {
        source,
        rule,
        revision: rev,
        reason,
    };
    // 3. Read-only project or open breaker ⇒ reads only.
    if !all_reads {
        let (first_not_read, why_not) = whole
            .as_ref()
            .err()
            .map(|(i, why)| (*i, why.to_string()))
            .unwrap_or_default();
        if let Snapshot::ReadOnly { reason } = ctx.snapshot {
            return decided(Decision::Deny(ev(
                Source::ReadOnlyMap,
                None,
                format!(
                    "this project is read-only because it has no valid signed tier map ({reason}); only reads run. \
                     Part {} is not a read: {why_not}. The operator can sign CLAUDE_CMDS.md to enable more",
                    first_not_read + 1
                ),
            )));
        }
        if ctx.breaker_open {
            return decided(Decision::Deny(ev(
                Source::Breaker,
                None,
                format!(
                    "read-only mode: the circuit breaker tripped after repeated denied or failed commands; only reads run \
                     until the operator runs `cmdgate breaker reset`. Part {} is not a read: {why_not}",
                    first_not_read + 1
                ),
            )));
        }
    }
    // 4. Remembered rejection ⇒ deny; always-ask ⇒ ask.
    let key = canonical_key(&script);
    let rule_hit = ctx.rules.lookup(req.project_root, &key);
    if let Some(r) = rule_hit.iter().find(|r| r.kind == RuleKind::Reject) {
        let note = r
            .note
            .as_deref()
            .map(|n| format!(" Operator's note: {n}"))
            .unwrap_or_default();
        return decided(Decision::Deny(ev(
            Source::Remembered,
            Some(r.reference().to_string()),
            format!("the operator rejected this exact command before and asked cmdgate to remember it; do not retry it.{note}"),
        )));
    }
    if let Some(r) = rule_hit.iter().find(|r| r.kind == RuleKind::AlwaysAsk) {
        return decided(Decision::Ask(ev(
            Source::Remembered,
            Some(r.reference().to_string()),
            "the operator asked to be asked every time for this command".into(),
        )));
    }
    // What the words reach on disk (links, hard links) and where `git` runs: never allowed on
    // the spelling, never test-run (the real run would meet the same link or repository).
    let base = paths::Base {
        home: ctx.home,
        cwd: req.cwd,
    };
    let secrets = &ctx.read_policy.secrets;
    if let Some(why) = reach::bash_risk(&script, base, req.project_root, secrets, kernel) {
        return decided(Decision::Ask(ev(
            Source::ToolPolicy,
            None,
            format!("{why}; a person must decide"),
        )));
    }
    // 5. Reads ⇒ allow; remembered approval / learned ⇒ allow.
    if all_reads {
        return decided(Decision::Allow(ev(
            Source::BuiltinRead,
            None,
            "every part is a read with no writing flag, redirection or secret path".into(),
        )));
    }
    if let Some(r) = rule_hit.iter().find(|r| r.kind == RuleKind::Approve) {
        return decided(Decision::Allow(ev(
            Source::Remembered,
            Some(r.reference().to_string()),
            "the operator approved this exact command and asked cmdgate to remember it".into(),
        )));
    }
    // A learned entry only stands where the command would otherwise be test-run: a map that now
    // puts a part in tier 2 (or behind a privilege wrapper) asks, whatever was learned before.
    let learned = rule_hit.iter().find(|r| r.kind == RuleKind::Learned);
    // 6. A secret only the whole string reaches (`cd ~/.config && cat gh/hosts.yml`: each part
    // alone reads nothing secret) is asked too, never test-run.
    if let Err((i, why)) = &whole {
        if why.reads_secret() {
            return decided(Decision::Ask(ev(
                Source::ToolPolicy,
                None,
                format!("part {} reads secrets: {why}; a person must decide", i + 1),
            )));
        }
    }
    // 6–7. Per part: tier 2, privilege wrappers and run-time values ⇒ ask; else test-run.
    let mut options = SandboxOptions::default();
    let mut first_tier1 = true;
    let mut tier1_rules = Vec::new();
    let mut unknown = Vec::new();
    for (i, (cmd, read)) in script.commands.iter().zip(&reads).enumerate() {
        if read.is_ok() {
            continue;
        }
        let part = i + 1;
        let argv = static_argv(cmd);
        if let Err(why) = read {
            if why.reads_secret() {
                return decided(Decision::Ask(ev(
                    Source::ToolPolicy,
                    None,
                    format!("part {part} reads secrets: {why}; a person must decide"),
                )));
            }
        }
        if let Some(w) = cmd.wrappers.iter().find_map(|w| privilege_wrapper(w)) {
            return decided(Decision::Ask(ev(
                Source::ToolPolicy,
                None,
                format!("part {part} runs through `{w}`, which changes who runs it; a person must decide"),
            )));
        }
        if let Some(raw) = dynamic_word(cmd) {
            return decided(Decision::Ask(ev(
                Source::ToolPolicy,
                None,
                format!(
                    "part {part} contains `{raw}`, whose value is only known when it runs, so the tier map cannot \
                     tell what will run; write the value literally, or a person must decide"
                ),
            )));
        }
        let matched = match ctx.snapshot {
            Snapshot::Verified(v) => v.map.classify(&argv),
            Snapshot::ReadOnly { .. } => None,
        };
        match matched {
            Some((Tier::Ask, entry)) => {
                return decided(Decision::Ask(ev(
                    Source::TierMap,
                    Some(entry.rule()),
                    format!(
                        "`{}` is tier 2 (ask) in the signed tier map: a person must decide",
                        argv.join(" ")
                    ),
                )));
            }
            Some((Tier::Sandbox, entry)) => {
                options = if first_tier1 {
                    entry.options.clone()
                } else {
                    merge(&options, &entry.options)
                };
                first_tier1 = false;
                tier1_rules.push(entry.rule());
            }
            // Tier 0 of the map was already honoured by the read classification; a tier-0 entry
            // reaching here failed a read check (a writing flag, a redirection), so test-run it.
            Some((Tier::Read, _)) | None => {
                options = if first_tier1 {
                    SandboxOptions::default()
                } else {
                    merge(&options, &SandboxOptions::default())
                };
                first_tier1 = false;
                unknown.push(format!("`{}`", argv.join(" ")));
            }
            Some((Tier::Deny, entry)) => {
                // hard_deny already refused tier 3; kept for exhaustiveness and defence in depth.
                return decided(Decision::Deny(ev(
                    Source::TierMap,
                    Some(entry.rule()),
                    "tier 3".into(),
                )));
            }
        }
    }
    if let Some(r) = learned {
        return decided(Decision::Allow(ev(
            Source::Learned,
            Some(r.reference().to_string()),
            "learned: this exact command test-ran clean and then succeeded for real repeatedly"
                .into(),
        )));
    }
    let mut why = Vec::new();
    if !tier1_rules.is_empty() {
        why.push(format!("tier 1 (sandbox): {}", tier1_rules.join(", ")));
    }
    if !unknown.is_empty() {
        why.push(format!("not in the tier map: {}", unknown.join(", ")));
    }
    Step::TestRun(TestRunPlan {
        command: command.to_owned(),
        key,
        options,
        why: why.join("; "),
        rules: tier1_rules,
        revision: rev,
    })
}

/// Read verdict of each part: `Ok` for a read, `Err(reason)` otherwise. Each part is classified
/// on its own (to know which parts need the tier map); whether the *whole* string is a read is
/// [`whole_is_read`]'s answer, which also follows `cd` between parts.
pub fn read_verdicts(
    script: &Script,
    cwd: &str,
    project_root: &str,
    ctx: Context<'_>,
) -> Vec<Result<(), String>> {
    part_verdicts(script, cwd, project_root, ctx)
        .into_iter()
        .map(|r| r.map_err(|why| why.to_string()))
        .collect()
}

fn part_verdicts(
    script: &Script,
    cwd: &str,
    project_root: &str,
    ctx: Context<'_>,
) -> Vec<Result<(), read::NotReadReason>> {
    with_read_policy(cwd, project_root, ctx, |policy| {
        script
            .commands
            .iter()
            .map(|cmd| {
                let one = Script {
                    commands: vec![cmd.clone()],
                    functions: script.functions.clone(),
                };
                match read::classify(&one, policy) {
                    ReadVerdict::PureRead => Ok(()),
                    ReadVerdict::NotRead { reason, .. } => Err(reason),
                }
            })
            .collect()
    })
}

fn whole_is_read(
    script: &Script,
    cwd: &str,
    project_root: &str,
    ctx: Context<'_>,
) -> Result<(), (usize, read::NotReadReason)> {
    with_read_policy(cwd, project_root, ctx, |policy| {
        match read::classify(script, policy) {
            ReadVerdict::PureRead => Ok(()),
            ReadVerdict::NotRead {
                command_index,
                reason,
            } => Err((command_index, reason)),
        }
    })
}

/// Tier 0 of the verified map, as the read classifier's operator extension.
struct TierZero<'a>(&'a Snapshot);

impl read::ReadExtension for TierZero<'_> {
    fn is_read(&self, argv: &[&str]) -> bool {
        match self.0 {
            Snapshot::Verified(v) => matches!(v.map.classify(argv), Some((Tier::Read, _))),
            Snapshot::ReadOnly { .. } => false,
        }
    }
}

/// Runs `f` with the caller's read policy, set to the request's cwd and project and extended with
/// tier 0 of the snapshot (so no caller can pair a policy with the wrong map).
fn with_read_policy<R>(
    cwd: &str,
    project_root: &str,
    ctx: Context<'_>,
    f: impl FnOnce(&ReadPolicy<'_>) -> R,
) -> R {
    let tier_zero = TierZero(ctx.snapshot);
    let policy = ReadPolicy {
        home: ctx.read_policy.home.clone(),
        cwd: Some(cwd.to_owned()),
        project: Some(project_root.to_owned()),
        secrets: std::borrow::Cow::Borrowed(&ctx.read_policy.secrets),
        extension: Some(&tier_zero),
        listing: ctx.read_policy.listing,
        // A verified map may switch read packs off for its project (`read-packs-off:`).
        packs: match ctx.snapshot {
            Snapshot::Verified(v) => v.map.read_packs(ctx.read_policy.packs),
            Snapshot::ReadOnly { .. } => ctx.read_policy.packs,
        },
    };
    f(&policy)
}

/// The strictest combination of two sets of sandbox options: the longest timeout (a slow part must
/// not be cut short, the timeout never makes a run more permissive), network only if both allow it
/// (a host list only the hosts both allow),
/// extra writable paths only if both allow them, tracked edits only if both allow them, `direct`
/// only if both are, an unmasked secret only if both unmask it.
fn merge(a: &SandboxOptions, b: &SandboxOptions) -> SandboxOptions {
    SandboxOptions {
        timeout: a.timeout.max(b.timeout),
        network: a.network && b.network,
        // A host list is narrower than the whole network: full ∩ list = list; two lists meet in
        // the hosts both name (as written); no network on either side means none.
        hosts: match (a.network, b.network) {
            (true, true) => Vec::new(),
            (true, false) => b.hosts.clone(),
            (false, true) => a.hosts.clone(),
            (false, false) => a
                .hosts
                .iter()
                .filter(|h| b.hosts.contains(h))
                .cloned()
                .collect(),
        },
        extra_writable: a
            .extra_writable
            .iter()
            .filter(|p| b.extra_writable.contains(p))
            .cloned()
            .collect(),
        edit_tracked: a.edit_tracked && b.edit_tracked,
        // Only when every part is a `direct` entry (an unknown part contributes the default).
        direct: a.direct && b.direct,
        // A secret is readable only when every part's entry unmasks it.
        unmask: a
            .unmask
            .iter()
            .filter(|p| b.unmask.contains(p))
            .cloned()
            .collect(),
    }
}

fn static_argv(cmd: &SimpleCommand) -> Vec<&str> {
    cmd.argv
        .iter()
        .map(|w| match w {
            Word::Static(s) | Word::Dynamic(s) => s.as_str(),
        })
        .collect()
}

fn privilege_wrapper(wrapper: &[Word]) -> Option<&str> {
    match wrapper.first() {
        Some(Word::Static(s)) => {
            let base = s.rsplit('/').next().unwrap_or(s);
            PRIVILEGE_WRAPPERS.contains(&base).then_some(base)
        }
        _ => None,
    }
}

/// The first word of a command (argv, env value, redirection target, wrapper) whose value is only
/// known at run time.
fn dynamic_word(cmd: &SimpleCommand) -> Option<&str> {
    let words = cmd
        .argv
        .iter()
        .chain(cmd.wrappers.iter().flatten())
        .chain(cmd.env.iter().map(|a| &a.value))
        // Heredoc and here-string bodies are data on stdin, not names of things to touch.
        .chain(
            cmd.redirects
                .iter()
                .filter(|r| !matches!(r.kind, RedirectKind::HereDoc | RedirectKind::HereString))
                .map(|r| &r.target),
        );
    words.into_iter().find_map(|w| match w {
        Word::Dynamic(raw) => Some(raw.as_str()),
        Word::Static(_) => None,
    })
}
