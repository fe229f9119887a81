//! Finding the workspace's binaries from a test of this crate: built on demand (debug profile, same
//! target directory as the running test) with the cargo that runs the tests, so `cargo test` alone
//! is enough and a stale binary is never tested.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use crate::proc::run_bounded;

/// Serialises builds from parallel tests of one test binary.
static BUILD: Mutex<()> = Mutex::new(());

/// The repository root (this crate lives in `<root>/tests`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `target/<profile>` of the running test binary (`target/<profile>/deps/<test>-<hash>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("exe dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// Path to the workspace binary `bin` of `package`, built first (a no-op when it is up to date).
pub fn cargo_bin(package: &str, bin: &str) -> PathBuf {
    let _guard = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    let profile = profile_dir();
    let target = profile.parent().expect("target dir").to_path_buf();
    let release = profile.file_name().is_some_and(|n| n == "release");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(repo_root())
        .args(["build", "--quiet", "--package", package, "--bin", bin])
        .env("CARGO_TARGET_DIR", &target);
    if release {
        cmd.arg("--release");
    }
    let done = run_bounded(&mut cmd, b"", Duration::from_secs(1200));
    assert!(
        done.status.success(),
        "building {bin} failed:\n{}",
        done.stderr_text()
    );
    let path = profile.join(bin);
    assert!(path.is_file(), "{} was not built", path.display());
    path
}
