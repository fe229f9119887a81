//! The systemd units pass `systemd-analyze verify` without a single warning, and the check itself
//! catches a broken unit (so a green run means something).

use std::path::{Path, PathBuf};
use std::process::Command;

fn systemd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd")
}

fn verify(dir: &Path) -> (bool, String) {
    let out = Command::new("bash")
        .arg(dir.join("verify"))
        .output()
        .expect("run systemd/verify (needs bash and systemd-analyze: apt-get install systemd)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn units_verify_cleanly() {
    let (ok, text) = verify(&systemd_dir());
    assert!(ok, "systemd/verify failed:\n{text}");
    assert!(text.contains("systemd units: ok"), "{text}");
}

#[test]
fn a_unit_with_an_unknown_directive_fails_the_check() {
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("systemd");
    std::fs::create_dir_all(copy.join("user")).unwrap();
    for entry in [
        "verify",
        "cmdgated.service",
        "cmdgated.socket",
        "cmdgated-admin.socket",
    ] {
        std::fs::copy(systemd_dir().join(entry), copy.join(entry)).unwrap();
    }
    for entry in [
        "cmdgated.service",
        "cmdgated.socket",
        "cmdgated-admin.socket",
    ] {
        std::fs::copy(
            systemd_dir().join("user").join(entry),
            copy.join("user").join(entry),
        )
        .unwrap();
    }
    let service = copy.join("cmdgated.service");
    let text = std::fs::read_to_string(&service)
        .unwrap()
        .replace("[Service]\n", "[Service]\nProtectEverything=yes\n");
    std::fs::write(&service, text).unwrap();
    let (ok, text) = verify(&copy);
    assert!(!ok, "a bogus directive must fail the check:\n{text}");
    assert!(text.contains("ProtectEverything"), "{text}");
}
