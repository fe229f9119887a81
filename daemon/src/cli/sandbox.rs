//! `cmdgate sandbox …`: test-run a command in the container mirror and print the TestRun (for
//! people, and for tests), plus the hidden `__helper` entry the library re-executes.

use anyhow::Context;
use cmdgate_sandbox::{HelperCommand, RunAs, RunConfig, TestRun};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `cmdgate sandbox`.
#[derive(Debug, clap::Args)]
pub struct SandboxArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SandboxCommand,
}

/// The sandbox verbs.
#[derive(Debug, clap::Subcommand)]
pub enum SandboxCommand {
    /// Test-run COMMAND in a throw-away mirror of the workspace and print what it did.
    ///
    /// Exits 0 whenever the command ran (clean or not); non-zero when no sandbox could be built
    /// (the command is then never run unsandboxed).
    Run(RunArgs),
    /// Remove runs left behind by crashed processes.
    Sweep {
        /// Directory holding run bookkeeping.
        #[arg(long, default_value_os_t = default_state_dir())]
        state_dir: PathBuf,
    },
    /// Internal: the single-threaded helper process the library launches for each run.
    #[command(name = "__helper", hide = true)]
    Helper,
}

/// `cmdgate sandbox run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The workspace to mirror (the command's working directory).
    #[arg(long)]
    pub workspace: PathBuf,
    /// Wall-clock limit in seconds; everything in the run is killed past it.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// Keep the host network (otherwise an empty network namespace; attempts are reported).
    #[arg(long)]
    pub network: bool,
    /// Print the TestRun as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// $HOME to mirror (default: $HOME).
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// Run the command as UID[:GID] (recommended: the agent's).
    #[arg(long, value_parser = parse_run_as)]
    pub user: Option<RunAs>,
    /// Memory limit in MiB; 0: three quarters of the machine's memory (the daemon's default).
    #[arg(long, default_value_t = 0)]
    pub memory_mib: u64,
    /// Maximum number of processes and threads together.
    #[arg(long, default_value_t = 4096)]
    pub pids: u64,
    /// Changes outside the workspace under this path keep the run clean (repeatable).
    #[arg(long)]
    pub extra_writable: Vec<PathBuf>,
    /// Changing files tracked by git keeps the run clean (e.g. a formatter).
    #[arg(long)]
    pub allow_tracked_changes: bool,
    /// Directory holding run bookkeeping.
    #[arg(long, default_value_os_t = default_state_dir())]
    pub state_dir: PathBuf,
    /// The command: its words are joined with spaces and given to `bash -c` (like ssh does).
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

fn default_state_dir() -> PathBuf {
    std::env::var_os("CMDGATE_SANDBOX_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/cmdgate/sandbox"))
}

fn parse_run_as(s: &str) -> Result<RunAs, String> {
    let (uid, gid) = s.split_once(':').unwrap_or((s, s));
    Ok(RunAs {
        uid: uid.parse().map_err(|_| format!("bad uid {uid:?}"))?,
        gid: gid.parse().map_err(|_| format!("bad gid {gid:?}"))?,
    })
}

/// Run a `cmdgate sandbox …` verb.
pub fn main(args: SandboxArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        SandboxCommand::Helper => Ok(cmdgate_sandbox::helper_main()),
        SandboxCommand::Sweep { state_dir } => {
            let swept = cmdgate_sandbox::sweep_stale(&state_dir)
                .with_context(|| format!("failed to sweep {}", state_dir.display()))?;
            println!("swept {} stale run(s)", swept.len());
            Ok(ExitCode::SUCCESS)
        }
        SandboxCommand::Run(run) => {
            let config = config(&run)?;
            let script = run.command.join(" ");
            let result = cmdgate_sandbox::run(&config, &script)
                .context("the sandbox could not be set up; the command was not run")?;
            if run.json {
                println!("{}", serde_json::to_string_pretty(&result)?);
            } else {
                print!("{}", table(&script, &result));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// How the daemon starts the sandbox helper: the `cmdgate` binary installed next to `cmdgated`,
/// re-executed as `cmdgate sandbox __helper` (the daemon must never fork from its own threads).
pub fn helper_command_beside(daemon_exe: &std::path::Path) -> anyhow::Result<HelperCommand> {
    let program = daemon_exe.with_file_name("cmdgate");
    anyhow::ensure!(
        program.is_file(),
        "the sandbox helper {} is missing (install cmdgate next to cmdgated)",
        program.display()
    );
    Ok(HelperCommand {
        program,
        args: vec!["sandbox".into(), "__helper".into()],
    })
}

fn config(run: &RunArgs) -> anyhow::Result<RunConfig> {
    let exe =
        std::env::current_exe().context("cannot find the cmdgate binary to run the helper")?;
    let mut config = RunConfig::new(
        run.workspace.clone(),
        run.state_dir.clone(),
        HelperCommand {
            program: exe,
            args: vec!["sandbox".into(), "__helper".into()],
        },
    );
    if let Some(home) = &run.home {
        config.home = Some(home.clone());
        config.env.retain(|(k, _)| k != "HOME");
        config.env.push(("HOME".into(), home.display().to_string()));
    }
    if !(run.timeout.is_finite() && run.timeout > 0.0) {
        anyhow::bail!("--timeout must be a positive number of seconds");
    }
    config.limits.timeout = Duration::from_secs_f64(run.timeout);
    config.limits.memory_bytes = run.memory_mib << 20;
    config.limits.pids = run.pids;
    config.network = run.network;
    config.run_as = run.user;
    config.extra_writable = run.extra_writable.clone();
    config.allow_tracked_changes = run.allow_tracked_changes;
    Ok(config)
}

/// The human rendering of a TestRun.
pub fn table(script: &str, run: &TestRun) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let opt = |v: Option<i32>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    let _ = writeln!(s, "command    {script}");
    let _ = writeln!(
        s,
        "verdict    {}",
        if run.clean { "clean" } else { "DIRTY" }
    );
    let _ = writeln!(
        s,
        "exit       {}   signal {}   timed out {}   {} ms",
        opt(run.exit),
        opt(run.signal),
        if run.timed_out { "yes" } else { "no" },
        run.duration.as_millis()
    );
    let _ = writeln!(s, "effects    {}", run.effects.len());
    for e in &run.effects {
        let _ = writeln!(s, "  {e}");
    }
    if !run.why.is_empty() {
        let _ = writeln!(s, "why dirty");
        for w in &run.why {
            let _ = writeln!(s, "  - {w}");
        }
    }
    for (name, text) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
        if !text.is_empty() {
            let _ = writeln!(
                s,
                "{name} ({} bytes{})",
                text.len(),
                if run.output_truncated {
                    ", truncated"
                } else {
                    ""
                }
            );
            for line in text.lines() {
                let _ = writeln!(s, "  | {line}");
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Top,
    }
    #[derive(Debug, clap::Subcommand)]
    enum Top {
        Sandbox(SandboxArgs),
    }

    #[test]
    fn parses_run() {
        let cli = Cli::try_parse_from([
            "cmdgate",
            "sandbox",
            "run",
            "--workspace",
            "/w",
            "--timeout",
            "2.5",
            "--network",
            "--json",
            "--user",
            "1000:100",
            "--",
            "cargo",
            "build",
        ])
        .expect("parses");
        let Top::Sandbox(SandboxArgs {
            command: SandboxCommand::Run(run),
        }) = cli.command
        else {
            panic!("not a run: {cli:?}");
        };
        assert_eq!(run.command, vec!["cargo", "build"]);
        assert!(run.network && run.json);
        assert_eq!(
            run.user,
            Some(RunAs {
                uid: 1000,
                gid: 100
            })
        );
        let config = config(&run).expect("config");
        assert_eq!(config.limits.timeout, Duration::from_millis(2500));
    }

    #[test]
    fn command_is_required() {
        assert!(Cli::try_parse_from(["cmdgate", "sandbox", "run", "--workspace", "/w"]).is_err());
    }

    #[test]
    fn table_shows_verdict_and_reasons() {
        let run = TestRun {
            exit: Some(1),
            signal: None,
            timed_out: false,
            duration: Duration::from_millis(7),
            stdout: "out\n".into(),
            stderr: String::new(),
            output_truncated: false,
            effects: vec![],
            clean: false,
            why: vec!["exit status 1".into()],
            refusals: vec![],
        };
        let t = table("false", &run);
        assert!(t.contains("verdict    DIRTY"), "{t}");
        assert!(t.contains("  - exit status 1"), "{t}");
        assert!(t.contains("  | out"), "{t}");
    }
}
