//! Paths as the kernel sees them on the hook's fast path: a read tool or a Bash read is not allowed
//! locally when what it names on disk is one of cmdgate's own files, a link into a secret, another
//! name of a hard-linked file, something that cannot be resolved, or a `git` repository other than
//! the project's own (`cmdgate_policy::decide::{kernel, reach}`; the daemon decides those).

use std::path::Path;

use cmdgate_policy::decide::kernel::{tool_path_doubt, OwnPaths, PathDoubt, PathResolver};
use cmdgate_policy::decide::paths::Base;
use cmdgate_policy::decide::reach::bash_risk;
use cmdgate_policy::decide::Tool;
use cmdgate_policy::shell::Script;

use crate::config::Config;
use crate::input::HookCall;
use crate::memo::Memo;
use crate::reads::Local;

/// cmdgate's own paths as the hook knows them: the shared list, plus the spool in use and the hook
/// binary itself.
pub fn own_paths(cfg: &Config) -> Vec<String> {
    let mut v = cfg.own_paths.clone();
    if let Some(spool) = &cfg.spool_dir {
        v.push(spool.display().to_string());
    }
    if let Ok(exe) = std::env::current_exe() {
        v.push(exe.display().to_string());
    }
    v
}

fn home(cfg: &Config) -> String {
    cfg.home
        .as_ref()
        .map_or_else(|| "/nonexistent".to_string(), |h| h.display().to_string())
}

/// What the hook must say about a Read/Glob/Grep/LS or Write-family call for what its path is on
/// disk: catastrophic (cmdgate's own files, so the escape hatch does not lift it either), routed
/// to the daemon (a read path that is not only what it is called), or `None`.
pub fn tool_call(call: &HookCall, cfg: &Config, project_dir: &Path) -> Option<Local> {
    let tool = Tool::from_claude(&call.tool_name, &call.tool_input).ok()?;
    let home = home(cfg);
    let base = Base {
        home: &home,
        cwd: &call.cwd,
    };
    let kernel = Memo::default();
    let own = OwnPaths::resolve(&own_paths(cfg), &project_dir.display().to_string(), &kernel);
    tool_path_doubt(&tool, base, &own, &kernel).map(|d| match d {
        PathDoubt::Own(why) => Local::Catastrophic(format!("{why} (built-in:cmdgate-own-path)")),
        PathDoubt::Other(why) => Local::Route(why),
    })
}

/// Why a Bash command the read classifier calls a read must still go to the daemon, or `None`.
pub fn bash_read(
    script: &Script,
    cwd: &Path,
    project_dir: &Path,
    cfg: &Config,
    secrets: &cmdgate_policy::shell::read::SecretPaths,
    kernel: &dyn PathResolver,
) -> Option<String> {
    let home = home(cfg);
    let cwd = cwd.display().to_string();
    let base = Base {
        home: &home,
        cwd: &cwd,
    };
    bash_risk(
        script,
        base,
        &project_dir.display().to_string(),
        secrets,
        kernel,
    )
}
