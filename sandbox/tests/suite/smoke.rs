//! Smoke test: a command runs in the mirror and its output comes back.

use super::common;

#[test]
fn echo_runs_and_is_clean() {
    let env = common::Env::new();
    let run = env.run("echo hello; pwd; id -u; hostname");
    assert_eq!(run.exit, Some(0), "{}", common::show(&run));
    assert!(run.stdout.starts_with("hello\n"), "{}", common::show(&run));
    assert!(run.clean, "{}", common::show(&run));
}

#[test]
fn runs_as_the_agent_uid() {
    let env = common::Env::new();
    std::os::unix::fs::chown(&env.ws, Some(65534), Some(65534)).expect("chown");
    let mut config = env.config();
    config.run_as = Some(cmdgate_sandbox::RunAs {
        uid: 65534,
        gid: 65534,
    });
    let run = common::run_with(
        &config,
        "id -u; id -g; echo built > out.txt; grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status",
    );
    assert_eq!(run.exit, Some(0), "{}", common::show(&run));
    let mut lines = run.stdout.lines();
    assert_eq!(lines.next(), Some("65534"));
    assert_eq!(lines.next(), Some("65534"));
    for line in lines {
        assert!(
            line.ends_with("0000000000000000"),
            "capabilities left: {line}"
        );
    }
    assert!(run.clean, "{}", common::show(&run));
    // Its own workspace is writable; root-owned $HOME is not (no capabilities to override).
    let run = common::run_with(&config, "echo x > ~/f");
    assert!(
        run.stderr.contains("Permission denied"),
        "{}",
        common::show(&run)
    );
}

#[test]
fn a_command_run_as_root_holds_no_capability_and_no_new_privileges() {
    let env = common::Env::new();
    let run = common::run_with(
        &env.config(),
        "id -u; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status",
    );
    assert_eq!(run.exit, Some(0), "{}", common::show(&run));
    let mut lines = run.stdout.lines();
    assert_eq!(lines.next(), Some("0"), "{}", common::show(&run));
    let rest: Vec<&str> = lines.collect();
    assert_eq!(rest.len(), 6, "{}", common::show(&run));
    for line in rest {
        if line.starts_with("NoNewPrivs:") {
            assert!(line.ends_with('1'), "{line}");
        } else {
            assert!(
                line.ends_with("0000000000000000"),
                "capabilities left: {line}"
            );
        }
    }
}

#[test]
fn output_is_bounded_and_fds_are_closed() {
    let env = common::Env::new();
    let mut config = env.config();
    config.limits.output_bytes = 1000;
    let run = common::run_with(
        &config,
        "ls /proc/self/fd | tr '\\n' ' ' >&2; head -c 5000000 /dev/zero | tr '\\0' a",
    );
    assert_eq!(run.exit, Some(0), "{}", common::show(&run));
    assert_eq!(run.stdout.len(), 1000);
    assert!(run.output_truncated);
    // 0, 1, 2 and the fd `ls` opened on /proc/self/fd: nothing inherited from the helper.
    assert_eq!(run.stderr, "0 1 2 3 ", "{}", common::show(&run));
}

#[test]
fn non_zero_exit_is_reported_dirty() {
    let env = common::Env::new();
    let run = env.run("echo oops >&2; exit 3");
    assert_eq!(run.exit, Some(3));
    assert_eq!(run.stderr, "oops\n");
    assert!(!run.clean);
    assert_eq!(run.why, vec!["exit status 3".to_string()]);
}
