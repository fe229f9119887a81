//! Which learned commands may skip the mirror and run on the host (issue 19).
//!
//! A learned entry used to skip the test-run and run on the host. Code the agent can write (a
//! script, a Makefile, a build or test file, `python3 -c`) can count its runs — clean three times,
//! harmful the fourth — so a promotion must never let such code run on the host unobserved. The
//! rule: a learned command runs on the host only when **every** part is a program that executes
//! nothing the agent wrote, working on paths checked now, at decision time:
//!
//! - the program is on [`HOST_PROGRAMS`]: it creates directories or touches files and runs no
//!   other program, interprets no file, reads no configuration that could run code;
//! - it is named bare and resolves (the caller looks it up on the system `PATH`, not the agent's)
//!   to a file owned by root, not group- or world-writable, outside the project and the home;
//! - no wrapper, no assignment, no redirection, no expansion, and it sits at the top level;
//! - every argument that is not an option is a path inside the project (resolved lexically against
//!   the working directory) that is not one of cmdgate's protected paths (`.git`, `.claude`,
//!   `CLAUDE_CMDS.md`).
//!
//! Everything else that was learned — every build, test, package script or interpreter — keeps
//! running in the mirror: it still needs no person (its clean effects commit), and a run that
//! turns dirty is rolled back and demotes the entry. See docs/threats.md, "Learning".

use crate::decide::paths::{resolve_str, Base};
use crate::shell::{Context, Script, Word};

/// Programs a learned entry may run on the host, and why each is safe: none executes another
/// program or interprets a file; each only creates (`mkdir`) or updates timestamps (`touch`).
pub const HOST_PROGRAMS: &[&str] = &["mkdir", "touch"];

/// What the caller found for a program name on the system `PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// The resolved absolute path (symbolic links followed).
    pub path: String,
    pub owner_uid: u32,
    /// Permission bits.
    pub mode: u32,
}

/// Paths a host run never touches, relative to the project root.
const PROTECTED: &[&str] = &[".git", ".claude", "CLAUDE_CMDS.md"];

/// `Ok` when the learned command may run on the host; otherwise why it stays in the mirror.
pub fn host_runnable(
    script: &Script,
    project: &str,
    cwd: &str,
    home: &str,
    resolve: &dyn Fn(&str) -> Option<Program>,
) -> Result<(), String> {
    if script.commands.is_empty() || !script.functions.is_empty() {
        return Err("it is not a plain list of commands".into());
    }
    let inside = |p: &str, root: &str| p == root || p.starts_with(&format!("{root}/"));
    // A `cd` part would move later parts elsewhere; none of the allowed programs needs one.
    for cmd in &script.commands {
        let argv: Vec<&str> = cmd.argv.iter().filter_map(Word::as_static).collect();
        let name = argv.first().copied().unwrap_or_default();
        if cmd.argv.is_empty() || argv.len() != cmd.argv.len() {
            return Err("a part has a value only known when it runs".into());
        }
        if cmd.context != Context::TopLevel {
            return Err(format!(
                "`{name}` runs inside a substitution, a function or a nested shell"
            ));
        }
        if !cmd.wrappers.is_empty() || !cmd.env.is_empty() || !cmd.redirects.is_empty() {
            return Err(format!(
                "`{name}` runs with a wrapper, assignment or redirection"
            ));
        }
        if !HOST_PROGRAMS.contains(&name) {
            return Err(format!(
                "`{name}` can run code the agent could have changed (scripts, build and test \
                 files, interpreters) or is not on cmdgate's short list of host-safe programs \
                 ({})",
                HOST_PROGRAMS.join(", ")
            ));
        }
        let Some(program) = resolve(name) else {
            return Err(format!("`{name}` is not found on the system PATH"));
        };
        if program.owner_uid != 0
            || program.mode & 0o022 != 0
            || inside(&program.path, project)
            || inside(&program.path, home)
        {
            return Err(format!(
                "`{name}` resolves to {}, which is not a root-owned system binary",
                program.path
            ));
        }
        for arg in &argv[1..] {
            if arg.starts_with('-') {
                continue;
            }
            let path = resolve_str(arg, Base { home, cwd });
            if !inside(&path, project) || path == project {
                return Err(format!("`{arg}` is not inside the project"));
            }
            let rel = &path[project.len() + 1..];
            if PROTECTED
                .iter()
                .any(|p| rel == *p || rel.starts_with(&format!("{p}/")))
            {
                return Err(format!("`{arg}` is a protected path"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::{analyze, Analysis, Limits};

    fn system(name: &str) -> Option<Program> {
        match name {
            "mkdir" | "touch" | "make" | "python3" => Some(Program {
                path: format!("/usr/bin/{name}"),
                owner_uid: 0,
                mode: 0o755,
            }),
            _ => None,
        }
    }

    fn check(cmd: &str, resolve: &dyn Fn(&str) -> Option<Program>) -> Result<(), String> {
        let Analysis::Parsed(script) = analyze(cmd, &Limits::default()) else {
            panic!("{cmd}")
        };
        host_runnable(&script, "/p", "/p", "/home/a", resolve)
    }

    #[test]
    fn only_short_list_programs_on_project_paths_run_on_the_host() {
        for ok in [
            "mkdir -p build",
            "mkdir -p build && touch build/stamp",
            "touch src/../out.txt",
        ] {
            assert_eq!(check(ok, &system), Ok(()), "{ok}");
        }
        for (no, why) in [
            ("make", "short list"),
            ("./build.sh", "short list"),
            ("python3 -c 'print(1)'", "short list"),
            ("mkdir -p build && make", "short list"),
            ("touch /etc/x", "not inside the project"),
            ("touch ~/x", "not inside the project"),
            ("touch ../x", "not inside the project"),
            ("touch .git/hooks/pre-commit", "protected"),
            ("touch CLAUDE_CMDS.md", "protected"),
            ("mkdir .claude", "protected"),
            ("touch $X", "only known when it runs"),
            ("echo x > f", "redirection"),
            ("touch f > log", "redirection"),
            ("env touch f", "wrapper"),
            ("X=1 touch f", "assignment"),
            ("touch $(make)", "substitution"),
            ("f() { make; }; f", "plain list"),
            ("mkdir .", "not inside the project"),
        ] {
            let err = check(no, &system).unwrap_err();
            assert!(err.contains(why), "{no}: {err}");
        }
    }

    #[test]
    fn the_binary_must_be_root_owned_and_outside_reach() {
        let owned_by_agent = |_: &str| {
            Some(Program {
                path: "/usr/local/bin/touch".into(),
                owner_uid: 1000,
                mode: 0o755,
            })
        };
        assert!(check("touch f", &owned_by_agent).is_err());
        let writable = |_: &str| {
            Some(Program {
                path: "/usr/bin/touch".into(),
                owner_uid: 0,
                mode: 0o777,
            })
        };
        assert!(check("touch f", &writable).is_err());
        let in_project = |_: &str| {
            Some(Program {
                path: "/p/bin/touch".into(),
                owner_uid: 0,
                mode: 0o755,
            })
        };
        assert!(check("touch f", &in_project).is_err());
        assert!(check("touch f", &|_| None).is_err());
    }
}
