//! `cmdgate doctor`: find every setup in which cmdgate would fail open or not be consulted — hook
//! missing or not executable, not registered for all three events, registered under a matcher
//! that leaves tools out, a hook timeout too short, hooks disabled, the daemon unreachable, the map
//! unsigned or invalid, no pinned keys, the escape hatch set, `cmdgate-run` missing beside the
//! hook; warns when another PreToolUse hook on Bash could replace cmdgate's rewrite or Claude Code
//! is not the tested version. It reads every settings scope Claude Code merges (managed, user,
//! project, local) and judges them from the agent's point of view (`--agent USER`, default:
//! whoever runs it): in system mode a registration only in files the agent can change is
//! fail-open (the agent can delete it before its next session). Exits 1 when any check fails.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use cmdgate_policy::tiermap::{self, PinnedKeys};
use serde::Serialize;
use serde_json::json;

use crate::api::serve;
use crate::cli::client;
use crate::cli::hook::{self, EVENTS};
use crate::cli::settings::{self, Identity, Scope, MANAGED_DIR};
use crate::config::{Config, ConfigError, Paths};

/// The daemon's configuration as `serve::load` finds it.
type Loaded = Result<(Config, Paths), ConfigError>;

/// Arguments of `cmdgate doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The project to check (default: the current directory).
    #[arg(long)]
    pub project: Option<PathBuf>,
    /// Judge the settings as this agent user (name or uid; its home from the password database).
    /// Default: whoever runs doctor.
    #[arg(long)]
    pub agent: Option<String>,
    /// Claude Code's managed settings directory.
    #[arg(long, default_value = MANAGED_DIR)]
    pub managed_dir: PathBuf,
    #[arg(long)]
    pub json: bool,
}

/// Who the agent is: `--agent`, else the user running doctor (with `$HOME` as its home).
fn agent_identity(agent: Option<&str>) -> anyhow::Result<Identity> {
    if let Some(who) = agent {
        return Identity::lookup(who)
            .ok_or_else(|| anyhow::anyhow!("no user {who} in /etc/passwd"));
    }
    let uid = nix::unistd::getuid().as_raw();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut me = Identity::lookup(&uid.to_string()).unwrap_or_else(|| Identity {
        name: format!("uid {uid}"),
        uid,
        gids: Vec::new(),
        home: PathBuf::from("/"),
    });
    // The groups this process really has (newgrp, a login that predates a group change).
    if let Ok(groups) = nix::unistd::getgroups() {
        me.gids.extend(groups.iter().map(|g| g.as_raw()));
    }
    me.gids.push(nix::unistd::getgid().as_raw());
    me.gids.sort_unstable();
    me.gids.dedup();
    if let Some(h) = home {
        me.home = h;
    }
    Ok(me)
}

/// One registration found, where, and whether the agent can change that file.
struct Found {
    event: String,
    command: String,
    timeout: Option<u64>,
    file: PathBuf,
    scope: Scope,
    agent_can_change: Option<String>,
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    /// `ok`, `warn` (works, but weaker than it should be) or `fail` (fails open or not at all).
    pub status: &'static str,
    pub detail: String,
}

fn check(name: &'static str, ok: bool, detail: String) -> Check {
    Check {
        name,
        status: if ok { "ok" } else { "fail" },
        detail,
    }
}

/// The Claude Code version the rewrite into `cmdgate-run` (`updatedInput`) was tested with.
pub const TESTED_CLAUDE_CODE: &str = "2.1.332";

/// `claude --version` against [`TESTED_CLAUDE_CODE`]: a warning when it differs or is not found.
fn claude_code_version() -> Check {
    let name = "claude code version";
    let out = std::process::Command::new("claude")
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    let found = out
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match found {
        Some(v) if v.split_whitespace().next() == Some(TESTED_CLAUDE_CODE) => Check {
            name,
            status: "ok",
            detail: format!("{v} (tested: {TESTED_CLAUDE_CODE})"),
        },
        Some(v) => Check {
            name,
            status: "warn",
            detail: format!(
                "{v}; cmdgate's rewrite of Bash calls (`updatedInput`) was tested with \
                 {TESTED_CLAUDE_CODE}: a version that ignores it runs commands on the host unjudged \
                 (the daemon reports that as an integrity event afterwards)"
            ),
        },
        None => Check {
            name,
            status: "warn",
            detail: format!(
                "`claude --version` did not run here (not on PATH?); the rewrite was tested with \
                 {TESTED_CLAUDE_CODE}"
            ),
        },
    }
}

pub fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let project = match args.project {
        Some(p) => p,
        None => std::env::current_dir()?,
    };
    let project = std::fs::canonicalize(&project).unwrap_or(project);
    let agent = agent_identity(args.agent.as_deref())?;
    let home = agent.home.clone();
    let mut checks = Vec::new();

    let loaded = serve::load(None);
    let paths = config(&loaded, &mut checks);
    let system = paths
        .as_ref()
        .is_some_and(|p| p.mode == cmdgate_policy::locations::Mode::System);
    let found = registrations(&project, &home, &args.managed_dir, &agent, &mut checks);
    hooks_enabled(&found, &mut checks);
    registered_events(&found, &agent, system, &project, &mut checks);
    if system {
        system_mode(&found, &mut checks);
    }
    hook_binaries(&found.registered, &mut checks);
    // Mirrored runs (issue 19): the hook rewrites tier-1 Bash calls into `cmdgate-run`, which must
    // sit beside it; another PreToolUse hook on Bash could replace that rewrite (with several
    // hooks the last rewrite wins); and Claude Code must honour `updatedInput`.
    run_clients(&found.registered, &mut checks);
    checks.push(other_bash_hooks(&project, &home, &args.managed_dir));
    checks.push(claude_code_version());
    checks.push(escape_hatch(&found));
    if let Some(p) = &paths {
        checks.push(daemon(p));
        if let Some(c) = model_reviewer(p, &loaded) {
            checks.push(c);
        }
    }
    keys_and_map(paths.as_ref(), &project, &mut checks);

    let failed = checks.iter().any(|c| c.status == "fail");
    report(&project, &checks, failed, args.json)?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The daemon's configuration: loaded, or why the daemon will not start.
fn config(loaded: &Loaded, checks: &mut Vec<Check>) -> Option<Paths> {
    let paths = match loaded {
        Ok((_, p)) => Some(p.clone()),
        Err(e) => {
            checks.push(check(
                "config",
                false,
                format!("{e}: the daemon will not start"),
            ));
            None
        }
    };
    if let Some(p) = &paths {
        checks.push(check(
            "config",
            true,
            format!("{} (defaults where absent)", p.config_file.display()),
        ));
    }
    paths
}

/// What every settings file Claude Code merges registers, managed first.
struct Registrations {
    registered: Vec<Found>,
    /// The settings' `env` blocks.
    env: Vec<(String, String)>,
    /// Files that set `disableAllHooks`.
    disabled: Vec<(PathBuf, Scope)>,
    /// The managed settings set `allowManagedHooksOnly`.
    managed_only: bool,
}

impl Registrations {
    /// `event` is registered in the managed settings, out of the agent's reach.
    fn managed(&self, event: &str) -> bool {
        self.registered
            .iter()
            .any(|r| r.event == event && r.scope.is_managed() && r.agent_can_change.is_none())
    }
}

/// Hook registration across every settings file Claude Code merges, managed first; a matcher
/// that leaves tools out and an unreadable file are findings.
fn registrations(
    project: &Path,
    home: &Path,
    managed_dir: &Path,
    agent: &Identity,
    checks: &mut Vec<Check>,
) -> Registrations {
    let mut found = Registrations {
        registered: Vec::new(),
        env: Vec::new(),
        disabled: Vec::new(),
        managed_only: false,
    };
    for file in settings::settings_files(project, home, managed_dir) {
        match hook::read_settings(&file.path) {
            Ok(value) => {
                let r = hook::inspect(&value);
                if r.all_hooks_disabled {
                    found.disabled.push((file.path.clone(), file.scope));
                }
                found.managed_only |= file.scope.is_managed() && r.managed_hooks_only;
                for (event, matcher) in &r.narrow {
                    checks.push(check(
                        "hook matcher",
                        false,
                        format!(
                            "{}: {event} is registered under matcher `{matcher}`: every tool it does \
                             not match (Write, Edit, Read, MCP tools, …) runs unchecked; register \
                             it under `*` (`cmdgate hook install` moves it)",
                            file.path.display()
                        ),
                    ));
                }
                let changeable = settings::agent_can_change(&file.path, agent);
                found
                    .registered
                    .extend(r.events.into_iter().map(|(event, command, timeout)| Found {
                        event,
                        command,
                        timeout,
                        file: file.path.clone(),
                        scope: file.scope,
                        agent_can_change: changeable.clone(),
                    }));
                found.env.extend(r.env);
            }
            Err(e) => checks.push(check("settings", false, format!("{e:#}"))),
        }
    }
    found
}

/// `disableAllHooks`: fatal in the managed settings or when cmdgate is not registered there.
fn hooks_enabled(found: &Registrations, checks: &mut Vec<Check>) {
    for (file, scope) in &found.disabled {
        let all_managed = EVENTS.iter().all(|e| found.managed(e));
        checks.push(if scope.is_managed() {
            check(
                "hooks enabled",
                false,
                format!(
                    "{} (managed) sets disableAllHooks: no hook runs, cmdgate included",
                    file.display()
                ),
            )
        } else if all_managed {
            Check {
                name: "hooks enabled",
                status: "warn",
                detail: format!(
                    "{} sets disableAllHooks; managed hooks (cmdgate's registration) still run",
                    file.display()
                ),
            }
        } else {
            check(
                "hooks enabled",
                false,
                format!(
                    "{} sets disableAllHooks: every call runs unchecked",
                    file.display()
                ),
            )
        });
    }
}

/// Each event registered, and held where the agent cannot remove it (system mode).
fn registered_events(
    found: &Registrations,
    agent: &Identity,
    system: bool,
    project: &Path,
    checks: &mut Vec<Check>,
) {
    for event in EVENTS {
        let found: Vec<&Found> = found
            .registered
            .iter()
            .filter(|r| r.event == event)
            .collect();
        let name = match event {
            "PreToolUse" => "registered: PreToolUse",
            "PostToolUse" => "registered: PostToolUse",
            _ => "registered: PostToolUseFailure",
        };
        let held = found.iter().find(|r| r.agent_can_change.is_none());
        checks.push(match (found.first(), held) {
            (None, _) => check(
                name,
                false,
                format!(
                    "cmdgate-hook is not registered for {event}; run `cmdgate hook install {}`",
                    if system {
                        "--managed --system".to_owned()
                    } else {
                        format!("--project {}", project.display())
                    }
                ),
            ),
            // System mode: a registration the agent can delete is no registration.
            (Some(r), None) if system => check(
                name,
                false,
                format!(
                    "fail-open: {event} is registered only in files {} can change ({}: {}); it can \
                     remove cmdgate before its next session. Register it in the managed settings: \
                     `sudo cmdgate hook install --managed --system`",
                    agent.name,
                    r.file.display(),
                    r.agent_can_change.as_deref().unwrap_or_default()
                ),
            ),
            (Some(r), held) => {
                let r = held.copied().unwrap_or(r);
                let whose = match (r.scope.is_managed(), &r.agent_can_change) {
                    (true, None) => "managed settings, out of the agent's reach".to_owned(),
                    (_, None) => format!("not changeable by {}", agent.name),
                    (_, Some(why)) => why.clone(),
                };
                check(
                    name,
                    true,
                    format!("{} in {} ({whose})", r.command, r.file.display()),
                )
            }
        });
    }
}

/// System mode: the managed registration carries `--system`, and only managed hooks run.
fn system_mode(found: &Registrations, checks: &mut Vec<Check>) {
    for r in found.registered.iter().filter(|r| r.scope.is_managed()) {
        if !r.command.split_whitespace().any(|w| w == "--system") {
            checks.push(check(
                "system-mode hook",
                false,
                format!(
                    "{} registers `{}` without --system: that hook trusts the agent's \
                     environment (CMDGATE_SOCKET, CMDGATE_CONFIG_DIR, CMDGATE_ESCAPE_HATCH, …); \
                     `sudo cmdgate hook install --managed --system`",
                    r.file.display(),
                    r.command
                ),
            ));
        }
    }
    if EVENTS.iter().all(|e| found.managed(e)) && !found.managed_only {
        checks.push(Check {
            name: "managed hooks only",
            status: "warn",
            detail: "allowManagedHooksOnly is not set in the managed settings: hooks from files \
                     the agent can write still run beside cmdgate (they cannot undo its deny, \
                     but they run the agent's code at every tool call); `cmdgate hook install \
                     --managed --allow-managed-hooks-only`"
                .into(),
        });
    }
}

/// Each registration's program is executable, with a timeout above its deadline; a dynamically
/// linked hook is slower than it needs to be.
fn hook_binaries(registered: &[Found], checks: &mut Vec<Check>) {
    for Found {
        event,
        command,
        timeout,
        file,
        ..
    } in registered
    {
        let deadline = hook::deadline_of(command);
        let min = hook::min_timeout_s(deadline);
        let program = command.split_whitespace().next().unwrap_or_default();
        let executable = {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(program)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        };
        if !executable {
            checks.push(check("hook binary", false, format!("{program} ({event}, {}) is missing or not executable: Claude Code treats a hook that cannot run as no decision", file.display())));
        } else if *event == "PreToolUse" {
            let slow = match linking(Path::new(program)) {
                Some(Linking::Dynamic) => Some(
                    "is dynamically linked: every tool call pays the dynamic loader (about a third of \
                     the hook's time, docs/benchmarks.md)",
                ),
                Some(Linking::StaticGlibc) => Some(
                    "is linked statically against glibc, whose start probes the CPU with dozens of \
                     `cpuid` instructions that a virtual machine's hypervisor traps (~150 µs a call on \
                     the development VM, docs/benchmarks.md)",
                ),
                Some(Linking::Static) | None => None,
            };
            if let Some(why) = slow {
                checks.push(Check {
                    name: "hook build",
                    status: "warn",
                    detail: format!(
                        "{program} {why}; build it with `.ci/build-release` (static, musl) and install again"
                    ),
                });
            }
        }
        // Claude Code's default timeout is 60 s when none is set.
        let t = timeout.unwrap_or(60);
        if t < min {
            checks.push(check("hook timeout", false, format!("{event} in {}: timeout {t} s is below {min} s; the call would proceed when the hook's {} ms deadline is still running", file.display(), deadline.as_millis())));
        }
    }
    if !registered.is_empty()
        && !checks
            .iter()
            .any(|c| c.name == "hook binary" || c.name == "hook timeout")
    {
        checks.push(check(
            "hook binary and timeout",
            true,
            "every registration is executable with a timeout above its deadline".to_owned(),
        ));
    }
}

/// `cmdgate-run` beside each PreToolUse hook.
fn run_clients(registered: &[Found], checks: &mut Vec<Check>) {
    for Found {
        event,
        command,
        file,
        ..
    } in registered.iter().filter(|r| r.event == "PreToolUse")
    {
        let program = PathBuf::from(command.split_whitespace().next().unwrap_or_default());
        let client = program.with_file_name(cmdgate_policy::wire::run::CLIENT_NAME);
        let ok = {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(&client)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        };
        checks.push(check(
            "run client",
            ok,
            if ok {
                format!("{} beside the hook", client.display())
            } else {
                format!(
                    "{} is missing or not executable ({event} in {}): every call the daemon would \
                     run in its mirror is denied; install cmdgate-run beside cmdgate-hook",
                    client.display(),
                    file.display()
                )
            },
        ));
    }
}

/// Another PreToolUse hook on Bash could replace cmdgate's rewrite.
fn other_bash_hooks(project: &Path, home: &Path, managed_dir: &Path) -> Check {
    let mut rewriters = Vec::new();
    for file in settings::settings_files(project, home, managed_dir) {
        let file = file.path;
        let Ok(settings) = hook::read_settings(&file) else {
            continue;
        };
        for entry in settings["hooks"]["PreToolUse"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let matcher = entry["matcher"].as_str().unwrap_or("");
            let on_bash = matcher.is_empty() || matcher == "*" || matcher.contains("Bash");
            for h in entry["hooks"].as_array().into_iter().flatten() {
                let cmd = h["command"].as_str().unwrap_or_default();
                if on_bash && !cmd.contains("cmdgate-hook") {
                    rewriters.push(format!(
                        "`{cmd}` (matcher {matcher:?}) in {}",
                        file.display()
                    ));
                }
            }
        }
    }
    Check {
        name: "other Bash hooks",
        status: if rewriters.is_empty() { "ok" } else { "warn" },
        detail: if rewriters.is_empty() {
            "no other PreToolUse hook on Bash could replace cmdgate's rewrite".to_owned()
        } else {
            format!(
                "another PreToolUse hook runs on Bash and could replace cmdgate's `updatedInput` \
                 (with several hooks the last rewrite wins, and the original command would run on \
                 the host): {}",
                rewriters.join("; ")
            )
        },
    }
}

/// The escape hatch, in the environment or the settings' env block.
fn escape_hatch(found: &Registrations) -> Check {
    let mut hatch: Vec<String> = found
        .env
        .iter()
        .filter(|(k, v)| k == "CMDGATE_ESCAPE_HATCH" && !v.is_empty())
        .map(|(_, v)| format!("settings env: {v}"))
        .collect();
    if let Ok(v) = std::env::var("CMDGATE_ESCAPE_HATCH") {
        if !v.is_empty() {
            hatch.push(format!("environment: {v}"));
        }
    }
    // A system-mode hook (every registration with --system) reads no hatch variable.
    let system_hooks = !found.registered.is_empty()
        && found
            .registered
            .iter()
            .all(|r| r.command.split_whitespace().any(|w| w == "--system"));
    if hatch.is_empty() {
        check("escape hatch", true, "not set".into())
    } else if system_hooks {
        Check {
            name: "escape hatch",
            status: "warn",
            detail: format!(
                "CMDGATE_ESCAPE_HATCH is set ({}) but ignored: the system-mode hook reads no hatch \
                 variable (the operator grants it: `cmdgate escape-hatch grant`)",
                hatch.join("; ")
            ),
        }
    } else {
        check(
            "escape hatch",
            false,
            format!(
                "CMDGATE_ESCAPE_HATCH is set ({}): cmdgate steps aside except for tier 3",
                hatch.join("; ")
            ),
        )
    }
}

/// `GET path` on one of the daemon's sockets, waiting at most 3 s.
fn get(socket: &Path, path: &str) -> Result<client::Reply, client::ClientError> {
    client::request(socket, "GET", path, None, Duration::from_secs(3))
}

/// The daemon answers on its decide socket.
fn daemon(p: &Paths) -> Check {
    let health = get(&p.decide_socket, "/v1/health");
    match health {
        Ok(r) if r.status == 200 => check(
            "daemon",
            true,
            format!("answering on {}", p.decide_socket.display()),
        ),
        Ok(r) => check(
            "daemon",
            false,
            format!("{} answered {}", p.decide_socket.display(), r.status),
        ),
        Err(e) => check("daemon", false, format!("{e}: every routed call is denied")),
    }
}

/// The model reviewer (off by default): what it is, and whether its key is there.
fn model_reviewer(p: &Paths, loaded: &Loaded) -> Option<Check> {
    let status = get(&p.admin_socket, "/admin/status")
        .ok()
        .filter(|r| r.status == 200)
        .and_then(|r| serde_json::from_slice::<serde_json::Value>(&r.body).ok());
    let c = &loaded.as_ref().ok()?.0.reviewer;
    let what = format!(
        "{} `{}` at {}{}",
        c.provider.as_str(),
        c.model,
        c.base_url(),
        c.api_key_env
            .as_deref()
            .map(|k| format!(", key from ${k}"))
            .unwrap_or_default()
    );
    let key = status
        .as_ref()
        .and_then(|s| s["reviewer"]["api_key"].as_str().map(str::to_owned));
    Some(match (c.enabled, c.configured(), key.as_deref()) {
        (false, false, _) => check("model reviewer", true, "off (not configured)".into()),
        (false, true, _) => check(
            "model reviewer",
            true,
            format!("off; configured ({what}): sessions may turn it on with CMDGATE_REVIEWER=on"),
        ),
        (true, _, Some("missing")) => Check {
            name: "model reviewer",
            status: "warn",
            detail: format!("on ({what}), but the daemon's environment lacks the key: a person decides every ask"),
        },
        (true, _, _) => check("model reviewer", true, format!("on ({what}); it answers asks only, never denials")),
    })
}

/// The pinned keys, and the project's tier map verified against them.
fn keys_and_map(paths: Option<&Paths>, project: &Path, checks: &mut Vec<Check>) {
    let keys = paths.map(|p| {
        let file = p.locations.trusted_keys();
        match std::fs::read_to_string(&file) {
            Ok(text) => PinnedKeys::parse(&text).map_err(|d| {
                format!(
                    "{file}: {} problems, first: {}",
                    d.len(),
                    d.first().map(|x| x.to_string()).unwrap_or_default()
                )
            }),
            Err(e) => Err(format!("{file}: {e}")),
        }
    });
    match &keys {
        Some(Ok(k)) if !k.is_empty() => checks.push(check(
            "pinned keys",
            true,
            format!("{} key(s) pinned", k.keys().count()),
        )),
        Some(Ok(_)) => checks.push(check(
            "pinned keys",
            false,
            "no key pinned: no tier map can verify, every project is read-only".into(),
        )),
        Some(Err(e)) => checks.push(check("pinned keys", false, e.clone())),
        None => {}
    }
    let map = project.join(tiermap::FILE_NAME);
    match (std::fs::read_to_string(&map), &keys) {
        (Err(_), _) => checks.push(Check {
            name: "tier map",
            status: "warn",
            detail: format!(
                "no {}: the project is read-only (`cmdgate init --sign`)",
                map.display()
            ),
        }),
        (Ok(text), Some(Ok(k))) => match tiermap::verify(&text, k) {
            Ok(v) => checks.push(check(
                "tier map",
                true,
                format!(
                    "revision {} signed by `{}` v{}",
                    v.revision, v.key, v.key_version
                ),
            )),
            Err(e) => checks.push(check(
                "tier map",
                false,
                format!("{}: {e}: the project is read-only", map.display()),
            )),
        },
        (Ok(_), _) => checks.push(check(
            "tier map",
            false,
            "cannot verify without pinned keys".into(),
        )),
    }
}

/// Prints the findings, as a table or as JSON.
fn report(project: &Path, checks: &[Check], failed: bool, json: bool) -> anyhow::Result<()> {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"project": project, "ok": !failed, "checks": checks})
            )?
        );
    } else {
        for c in checks {
            println!("{:<5} {:<32} {}", c.status.to_uppercase(), c.name, c.detail);
        }
        println!(
            "{}",
            if failed {
                "cmdgate is NOT fully protecting this project"
            } else {
                "no fail-open setup found"
            }
        );
    }
    Ok(())
}

/// How an ELF executable is linked, as far as the hook's start-up cost goes.
#[derive(Debug, PartialEq, Eq)]
enum Linking {
    /// It names a program interpreter (the dynamic loader).
    Dynamic,
    /// Static, with glibc's ABI note (`NT_GNU_ABI_TAG`, from glibc's start files): glibc's start.
    StaticGlibc,
    /// Static without it (musl's start, or no C library).
    Static,
}

/// How the 64-bit little-endian ELF executable at `path` is linked; `None` when it cannot be read
/// or is not one. Program headers and notes are read from the first 64 KiB (where linkers put
/// them); a note beyond that counts as absent.
fn linking(path: &Path) -> Option<Linking> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(64 * 1024)
        .read_to_end(&mut head)
        .ok()?;
    if head.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(head.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(head.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(head.get(o..o + 8)?.try_into().ok()?));
    let at = |v: u64| usize::try_from(v).ok();
    let phoff = at(u64_at(0x20)?)?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    const PT_INTERP: u32 = 3;
    const PT_NOTE: u32 = 4;
    const NT_GNU_ABI_TAG: u32 = 1;
    let mut interp = false;
    let mut glibc = false;
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        match u32_at(ph)? {
            PT_INTERP => interp = true,
            PT_NOTE => {
                // Notes: namesz, descsz, type, then the name and the description, each padded
                // to 4 bytes.
                let start = at(u64_at(ph + 8)?)?;
                let end = start.checked_add(at(u64_at(ph + 32)?)?)?;
                let mut n = start;
                while n.checked_add(12)? <= end {
                    let (Some(namesz), Some(descsz), Some(kind)) =
                        (u32_at(n), u32_at(n + 4), u32_at(n + 8))
                    else {
                        break;
                    };
                    let namesz = usize::try_from(namesz).ok()?;
                    let descsz = usize::try_from(descsz).ok()?;
                    let name = head.get(n + 12..(n + 12).checked_add(namesz)?);
                    glibc |= kind == NT_GNU_ABI_TAG && name == Some(b"GNU\0".as_slice());
                    n = n
                        .checked_add(12)?
                        .checked_add(namesz.checked_add(3)? & !3)?
                        .checked_add(descsz.checked_add(3)? & !3)?;
                }
            }
            _ => {}
        }
    }
    Some(if interp {
        Linking::Dynamic
    } else if glibc {
        Linking::StaticGlibc
    } else {
        Linking::Static
    })
}

#[cfg(test)]
mod build_tests {
    use super::*;

    #[test]
    fn tells_a_dynamic_executable_from_a_static_one() {
        // /bin/sh is dynamically linked on every system the tests run on.
        assert_eq!(linking(Path::new("/bin/sh")), Some(Linking::Dynamic));
        assert_eq!(linking(Path::new("/etc/hostname")), None);
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("s.c");
        let bin = dir.path().join("s");
        std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
        let built = std::process::Command::new("cc")
            .args(["-static", "-o"])
            .arg(&bin)
            .arg(&src)
            .status()
            .expect("cc (libc6-dev) is installed for the tests");
        assert!(built.success());
        // glibc's static start files carry its ABI note.
        assert_eq!(linking(&bin), Some(Linking::StaticGlibc));
        // The same executable with the note's type changed (as a musl or libc-free executable
        // has no such note): static, not glibc's.
        let mut bytes = std::fs::read(&bin).unwrap();
        let at = bytes
            .windows(8)
            .position(|w| w == [1, 0, 0, 0, b'G', b'N', b'U', 0])
            .expect("the ABI note's type and name");
        bytes[at] = 0x7f;
        let other = dir.path().join("other");
        std::fs::write(&other, &bytes).unwrap();
        assert_eq!(linking(&other), Some(Linking::Static));
    }
}
