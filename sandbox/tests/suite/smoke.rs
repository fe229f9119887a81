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
