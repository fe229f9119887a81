//! `cmdgate hook install [--project DIR | --user | --managed]`: register the hook binary in Claude
//! Code's settings for PreToolUse, PostToolUse and PostToolUseFailure, merged into whatever the
//! settings already hold (never clobbered), with matcher `*` (every tool) and a timeout above the
//! hook's own deadline. `--managed` writes Claude Code's root-owned managed settings
//! (`/etc/claude-code/managed-settings.json`), the only scope an agent cannot rewrite, and
//! `--system` puts the system-mode arguments on the hook's command line (the hook then reads
//! nothing that loosens it from the agent's environment).
//!
//! The settings logic ([`register`], [`inspect`]) is shared with `cmdgate doctor`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Map, Value};

use crate::cli::settings::{covers_all_tools, MANAGED_DIR, MANAGED_FILE};
use crate::config::HOOK_DEADLINE;

/// The events cmdgate must be registered for; missing any one is a fail-open setup.
pub const EVENTS: [&str; 3] = ["PreToolUse", "PostToolUse", "PostToolUseFailure"];
/// Claude Code's hook timeout (seconds) written by default: above the hook's 45 s deadline.
pub const DEFAULT_TIMEOUT_S: u64 = 60;
/// Margin between the hook's deadline and Claude Code's timeout: the hook must answer first.
pub const MARGIN_S: u64 = 5;

/// Bounds of the hook's own `--deadline-ms` (the hook clamps to the same range).
pub const DEADLINE_RANGE_MS: std::ops::RangeInclusive<u64> = 50..=600_000;

/// The hook's deadline as its registered command line sets it (`--deadline-ms N`), else the
/// default. (`CMDGATE_HOOK_DEADLINE_MS` in Claude Code's environment is not visible here.)
pub fn deadline_of(command: &str) -> Duration {
    let mut words = command.split_whitespace();
    while let Some(w) = words.next() {
        if w == "--deadline-ms" {
            if let Some(ms) = words.next().and_then(|n| n.parse::<u64>().ok()) {
                let ms = ms.clamp(*DEADLINE_RANGE_MS.start(), *DEADLINE_RANGE_MS.end());
                return Duration::from_millis(ms);
            }
        }
    }
    HOOK_DEADLINE
}

/// The shortest acceptable Claude Code timeout for a hook whose deadline is `deadline`.
pub fn min_timeout_s(deadline: Duration) -> u64 {
    deadline.as_millis().div_ceil(1000) as u64 + MARGIN_S
}

/// Arguments of `cmdgate hook`.
#[derive(Debug, clap::Args)]
pub struct HookArgs {
    #[command(subcommand)]
    pub command: HookCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum HookCommand {
    /// Register the hook in Claude Code's settings (project: DIR/.claude/settings.json).
    Install {
        /// The project whose .claude/settings.json to change (default: the current directory).
        #[arg(long, conflicts_with_all = ["user", "managed"])]
        project: Option<PathBuf>,
        /// Change ~/.claude/settings.json instead (every project of this user).
        #[arg(long, conflicts_with = "managed")]
        user: bool,
        /// Change Claude Code's managed settings (root-owned; every user of this machine):
        /// `/etc/claude-code/managed-settings.json`. The one scope an agent cannot rewrite.
        #[arg(long)]
        managed: bool,
        /// Claude Code's managed settings directory (with --managed).
        #[arg(long, requires = "managed", default_value = MANAGED_DIR)]
        managed_dir: PathBuf,
        /// Also set the managed-only `allowManagedHooksOnly: true`: hooks from user and project
        /// settings (files the agent can write) no longer run at all (with --managed).
        #[arg(long, requires = "managed")]
        allow_managed_hooks_only: bool,
        /// Register the hook in system mode (`--system` on its command line): it takes socket,
        /// keys and records from that command line and the system locations, never from the
        /// agent's environment.
        #[arg(long)]
        system: bool,
        /// System mode's config dir, if not /etc/cmdgate (written on the command line).
        #[arg(long, requires = "system")]
        config_dir: Option<PathBuf>,
        /// System mode's data dir, if not /var/lib/cmdgate.
        #[arg(long, requires = "system")]
        data_dir: Option<PathBuf>,
        /// System mode's decide socket, if not /run/cmdgate/cmdgate.sock.
        #[arg(long, requires = "system")]
        socket: Option<PathBuf>,
        /// The hook binary (default: cmdgate-hook next to this cmdgate).
        #[arg(long)]
        hook: Option<PathBuf>,
        /// The hook's own deadline, in ms (default 45000): past it the hook answers deny. Raise it
        /// to give the operator longer to answer pending approvals (`[approvals]` in config.toml).
        #[arg(long)]
        deadline_ms: Option<u64>,
        /// Claude Code's timeout for the hook, in seconds (default: 60, or the deadline plus 5 s).
        #[arg(long)]
        timeout: Option<u64>,
        #[arg(long)]
        json: bool,
    },
}

/// Where a hook registration was found, per event.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Registration {
    /// Event → (command, timeout seconds if set) of every cmdgate-hook entry.
    pub events: Vec<(String, String, Option<u64>)>,
    /// `disableAllHooks: true`: every hook is off, cmdgate included.
    pub all_hooks_disabled: bool,
    /// `env` entries relevant to cmdgate (`CMDGATE_*`).
    pub env: Vec<(String, String)>,
    /// Event → matcher of every cmdgate entry whose matcher leaves tools out (`Bash` lets Write,
    /// Edit, Read and MCP tools through unchecked).
    pub narrow: Vec<(String, String)>,
    /// `allowManagedHooksOnly: true` (honoured only in managed settings).
    pub managed_hooks_only: bool,
}

/// Is this hook command cmdgate's? (The binary's file name is `cmdgate-hook`.)
pub fn is_cmdgate_hook(command: &str) -> bool {
    command
        .split_whitespace()
        .next()
        .is_some_and(|prog| prog.rsplit('/').next() == Some("cmdgate-hook"))
}

/// Adds or updates cmdgate's entry for every event in `settings`; returns what changed.
pub fn register(
    settings: &mut Value,
    command: &str,
    timeout_s: u64,
) -> anyhow::Result<Vec<String>> {
    let Some(root) = settings.as_object_mut() else {
        bail!("the settings file is not a JSON object")
    };
    let hooks = root
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(hooks) = hooks.as_object_mut() else {
        bail!("`hooks` in the settings is not an object")
    };
    let mut changes = Vec::new();
    for event in EVENTS {
        let list = hooks
            .entry(event)
            .or_insert_with(|| Value::Array(Vec::new()));
        let Some(list) = list.as_array_mut() else {
            bail!("`hooks.{event}` in the settings is not a list")
        };
        // cmdgate under a matcher that leaves tools out is taken out of that group (the group's
        // other hooks stay; an emptied group goes) and registered again under `*` below.
        let mut moved = false;
        for group in list.iter_mut() {
            let matcher = group.get("matcher").and_then(Value::as_str);
            if covers_all_tools(matcher) {
                continue;
            }
            if let Some(hs) = group.get_mut("hooks").and_then(Value::as_array_mut) {
                let before = hs.len();
                hs.retain(|h| {
                    !h.get("command")
                        .and_then(Value::as_str)
                        .is_some_and(is_cmdgate_hook)
                });
                moved |= hs.len() != before;
            }
        }
        list.retain(|g| {
            g.get("hooks")
                .and_then(Value::as_array)
                .is_none_or(|hs| !hs.is_empty())
        });
        if moved {
            changes.push(format!("moved {event} to matcher *"));
        }
        let mut found = false;
        for group in list.iter_mut() {
            for h in group
                .get_mut("hooks")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                let ours = h
                    .get("command")
                    .and_then(Value::as_str)
                    .is_some_and(is_cmdgate_hook);
                if ours {
                    found = true;
                    if h.get("command").and_then(Value::as_str) != Some(command)
                        || h.get("timeout").and_then(Value::as_u64) != Some(timeout_s)
                    {
                        h["command"] = json!(command);
                        h["timeout"] = json!(timeout_s);
                        h["type"] = json!("command");
                        changes.push(format!("updated {event}"));
                    }
                }
            }
        }
        if !found {
            list.push(json!({"matcher": "*", "hooks": [{"type": "command", "command": command, "timeout": timeout_s}]}));
            if !moved {
                changes.push(format!("registered {event}"));
            }
        }
    }
    Ok(changes)
}

/// What a settings document says about cmdgate.
pub fn inspect(settings: &Value) -> Registration {
    let mut r = Registration {
        all_hooks_disabled: settings.get("disableAllHooks").and_then(Value::as_bool) == Some(true),
        managed_hooks_only: settings
            .get("allowManagedHooksOnly")
            .and_then(Value::as_bool)
            == Some(true),
        ..Default::default()
    };
    for event in EVENTS {
        for group in settings["hooks"][event].as_array().into_iter().flatten() {
            let matcher = group.get("matcher").and_then(Value::as_str);
            for h in group["hooks"].as_array().into_iter().flatten() {
                if let Some(c) = h["command"].as_str().filter(|c| is_cmdgate_hook(c)) {
                    r.events
                        .push((event.to_owned(), c.to_owned(), h["timeout"].as_u64()));
                    if !covers_all_tools(matcher) {
                        r.narrow
                            .push((event.to_owned(), matcher.unwrap_or_default().to_owned()));
                    }
                }
            }
        }
    }
    for (k, v) in settings["env"].as_object().into_iter().flatten() {
        if k.starts_with("CMDGATE_") {
            r.env.push((
                k.clone(),
                v.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string()),
            ));
        }
    }
    r
}

/// Reads a settings file; a missing file is an empty object, an unparsable one an error (it is
/// never overwritten).
pub fn read_settings(path: &Path) -> anyhow::Result<Value> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(json!({})),
        Ok(text) => serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not valid JSON; fix it by hand, cmdgate will not overwrite it",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(json!({})),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The default hook binary: `cmdgate-hook` next to this executable.
pub fn default_hook() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find this cmdgate binary")?;
    Ok(exe.with_file_name("cmdgate-hook"))
}

fn write_atomically(path: &Path, value: &Value) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = path.parent().context("settings path has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0o644);
    let tmp = path.with_extension(format!("json.cmdgate-{}", std::process::id()));
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}

pub fn run(args: HookArgs) -> anyhow::Result<ExitCode> {
    let HookCommand::Install {
        project,
        user,
        managed,
        managed_dir,
        allow_managed_hooks_only,
        system,
        config_dir,
        data_dir,
        socket,
        hook,
        deadline_ms,
        timeout,
        json,
    } = args.command;
    if let Some(ms) = deadline_ms {
        if !DEADLINE_RANGE_MS.contains(&ms) {
            bail!(
                "--deadline-ms {ms} is outside {}..={} ms",
                DEADLINE_RANGE_MS.start(),
                DEADLINE_RANGE_MS.end()
            );
        }
    }
    let deadline = deadline_ms.map_or(HOOK_DEADLINE, Duration::from_millis);
    let min = min_timeout_s(deadline);
    let timeout = timeout.unwrap_or(DEFAULT_TIMEOUT_S.max(min));
    if timeout < min {
        bail!(
            "a {timeout} s hook timeout is too short: the hook answers by its own {} ms deadline and Claude Code lets \
             the call through when the timeout passes first; use at least {min} s",
            deadline.as_millis(),
        );
    }
    let hook = match hook {
        Some(h) => h,
        None => default_hook()?,
    };
    let hook = std::fs::canonicalize(&hook)
        .with_context(|| format!("the hook binary {} does not exist", hook.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(&hook)?;
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            bail!("{} is not an executable file", hook.display());
        }
    }
    let mut command = hook.to_string_lossy().into_owned();
    if !is_cmdgate_hook(&command) {
        bail!("{command} is not named cmdgate-hook; `cmdgate doctor` and later installs recognise the hook by that name");
    }
    if command.contains(char::is_whitespace) {
        bail!("the hook path {command:?} contains whitespace, which Claude Code's command line would split");
    }
    if system {
        command.push_str(" --system");
        for (flag, value) in [
            ("--config-dir", &config_dir),
            ("--data-dir", &data_dir),
            ("--socket", &socket),
        ] {
            if let Some(v) = value {
                let v = v.to_string_lossy();
                if !v.starts_with('/') || v.contains(char::is_whitespace) {
                    bail!("{flag} {v:?} must be an absolute path without whitespace");
                }
                command.push_str(&format!(" {flag} {v}"));
            }
        }
    }
    if let Some(ms) = deadline_ms {
        command.push_str(&format!(" --deadline-ms {ms}"));
    }
    // The operator's switched-off read packs, so the hook refuses their commands as the daemon does.
    let (config, _) = crate::api::serve::load(None).context("cannot read the operator's config")?;
    if !config.read_packs_off.is_empty() {
        command.push_str(&format!(
            " --read-packs-off {}",
            config.read_packs_off.join(",")
        ));
    }
    let path = if managed {
        managed_dir.join(MANAGED_FILE)
    } else if user {
        let home = std::env::var_os("HOME").context("HOME is not set")?;
        PathBuf::from(home).join(".claude/settings.json")
    } else {
        let dir = match project {
            Some(p) => p,
            None => std::env::current_dir()?,
        };
        dir.join(".claude/settings.json")
    };
    let mut settings = read_settings(&path)?;
    let mut changes = register(&mut settings, &command, timeout)?;
    if allow_managed_hooks_only && settings.get("allowManagedHooksOnly") != Some(&json!(true)) {
        // Checked a JSON object by `register`.
        settings["allowManagedHooksOnly"] = json!(true);
        changes.push("set allowManagedHooksOnly".into());
    }
    if !changes.is_empty() {
        write_atomically(&path, &settings)?;
    }
    if managed
        && !allow_managed_hooks_only
        && settings.get("allowManagedHooksOnly") != Some(&json!(true))
    {
        eprintln!(
            "note: hooks from user and project settings (files the agent can write) still run \
             beside cmdgate; they cannot undo its deny, but they run the agent's code at every tool \
             call. `--allow-managed-hooks-only` sets allowManagedHooksOnly, which stops them."
        );
    }
    if json {
        println!(
            "{}",
            json!({"settings": path, "hook": command, "timeout_s": timeout, "changes": changes})
        );
    } else if changes.is_empty() {
        println!(
            "{} already registers {command} for {} (timeout {timeout} s)",
            path.display(),
            EVENTS.join(", ")
        );
    } else {
        println!(
            "{}: {} ({command}, timeout {timeout} s)",
            path.display(),
            changes.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_on_the_command_line_sets_the_minimum_timeout() {
        assert_eq!(deadline_of("/opt/cmdgate-hook"), HOOK_DEADLINE);
        assert_eq!(min_timeout_s(HOOK_DEADLINE), 50);
        let long = deadline_of("/opt/cmdgate-hook --deadline-ms 300000");
        assert_eq!(long, Duration::from_secs(300));
        assert_eq!(min_timeout_s(long), 305);
        assert_eq!(min_timeout_s(Duration::from_millis(45_001)), 51);
        // Out of range is clamped like the hook does; garbage is the default.
        assert_eq!(
            deadline_of("/opt/cmdgate-hook --deadline-ms 99999999"),
            Duration::from_secs(600)
        );
        assert_eq!(
            deadline_of("/opt/cmdgate-hook --deadline-ms x"),
            HOOK_DEADLINE
        );
    }

    #[test]
    fn registers_all_three_events_and_keeps_everything_else() {
        let mut s = json!({
            "model": "x",
            "env": {"FOO": "1"},
            "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "/other/hook"}]}]}
        });
        let changes = register(&mut s, "/opt/cmdgate-hook", 60).unwrap();
        assert_eq!(changes.len(), 3);
        assert_eq!(s["model"], "x");
        assert_eq!(s["env"]["FOO"], "1");
        assert_eq!(
            s["hooks"]["PreToolUse"][0]["hooks"][0]["command"],
            "/other/hook"
        );
        let r = inspect(&s);
        assert_eq!(r.events.len(), 3);
        // Idempotent; a changed timeout updates in place.
        assert!(register(&mut s, "/opt/cmdgate-hook", 60)
            .unwrap()
            .is_empty());
        assert_eq!(register(&mut s, "/opt/cmdgate-hook", 90).unwrap().len(), 3);
        assert_eq!(
            inspect(&s)
                .events
                .iter()
                .filter(|e| e.2 == Some(90))
                .count(),
            3
        );
        assert_eq!(s["hooks"]["PreToolUse"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_matcher_that_leaves_tools_out_is_flagged_and_install_moves_cmdgate_to_star() {
        let mut s = json!({"hooks": {"PreToolUse": [
            {"matcher": "Bash", "hooks": [
                {"type": "command", "command": "/opt/cmdgate-hook"},
                {"type": "command", "command": "/other/hook"}
            ]},
            {"matcher": "Write", "hooks": [{"type": "command", "command": "/opt/cmdgate-hook"}]}
        ]}});
        let r = inspect(&s);
        assert_eq!(
            r.narrow,
            vec![
                ("PreToolUse".to_owned(), "Bash".to_owned()),
                ("PreToolUse".to_owned(), "Write".to_owned())
            ]
        );
        let changes = register(&mut s, "/opt/cmdgate-hook", 60).unwrap();
        assert!(
            changes.contains(&"moved PreToolUse to matcher *".to_owned()),
            "{changes:?}"
        );
        let r = inspect(&s);
        assert!(r.narrow.is_empty(), "{:?}", r.narrow);
        // The other hook keeps its group and matcher; the emptied `Write` group is gone.
        let groups = s["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(groups.len(), 2, "{s}");
        assert_eq!(groups[0]["matcher"], "Bash");
        assert_eq!(groups[0]["hooks"][0]["command"], "/other/hook");
        assert_eq!(groups[1]["matcher"], "*");
    }

    #[test]
    fn refuses_settings_of_the_wrong_shape() {
        assert!(register(&mut json!([]), "/x/cmdgate-hook", 60).is_err());
        assert!(register(&mut json!({"hooks": []}), "/x/cmdgate-hook", 60).is_err());
        assert!(inspect(&json!({"disableAllHooks": true})).all_hooks_disabled);
    }
}
