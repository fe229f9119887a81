//! Shared helpers for the sandbox integration tests: a temp workspace/home, a config pointing at
//! the built helper binary, tree hashing, and the root check.

use cmdgate_sandbox::{HelperCommand, RunConfig, TestRun};
use sha2::{Digest, Sha256};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every test here builds real namespaces and mounts: say so loudly when not root.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the sandbox tests need root (mount/pid/net namespaces, overlayfs, cgroups); run them as root (CI does)"
    );
}

/// A workspace, a home and a state dir under one temp dir.
pub struct Env {
    /// Keeps the temp dir alive (removed on drop).
    pub _dir: tempfile::TempDir,
    pub ws: PathBuf,
    pub home: PathBuf,
    pub state: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        Env::new_in(&std::env::temp_dir())
    }

    /// Under `parent` (`/var/tmp` for a `write=` path: one under /tmp is scratch, never kept).
    pub fn new_in(parent: &std::path::Path) -> Env {
        require_root();
        let dir = tempfile::Builder::new()
            .prefix("cmdgate-sb-")
            .tempdir_in(parent)
            .expect("tempdir");
        let ws = dir.path().join("ws");
        let home = dir.path().join("home");
        let state = dir.path().join("state");
        for d in [&ws, &home, &state] {
            std::fs::create_dir(d).expect("mkdir");
        }
        Env {
            _dir: dir,
            ws,
            home,
            state,
        }
    }

    pub fn config(&self) -> RunConfig {
        let mut c = RunConfig::new(
            self.ws.clone(),
            self.state.clone(),
            HelperCommand {
                program: PathBuf::from(env!("CARGO_BIN_EXE_cmdgate-sandbox-helper")),
                args: vec![],
            },
        );
        c.home = Some(self.home.clone());
        c.env.retain(|(k, _)| k != "HOME");
        c.env.push(("HOME".into(), self.home.display().to_string()));
        c.limits.timeout = Duration::from_secs(20);
        c
    }

    pub fn run(&self, cmd: &str) -> TestRun {
        run_with(&self.config(), cmd)
    }

    pub fn write(&self, rel: &str, content: &str) {
        let p = self.ws.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(p, content).expect("write");
    }
}

pub fn run_with(config: &RunConfig, cmd: &str) -> TestRun {
    match cmdgate_sandbox::run(config, cmd) {
        Ok(run) => run,
        Err(e) => panic!("sandbox run of {cmd:?} failed: {e}"),
    }
}

/// Hash of a whole tree: paths, types, modes, owners, symlink targets and file bytes.
pub fn tree_hash(root: &Path) -> String {
    let mut h = Sha256::new();
    let mut stack = vec![root.to_path_buf()];
    let mut all = Vec::new();
    while let Some(p) = stack.pop() {
        all.push(p.clone());
        if p.is_dir() && !p.is_symlink() {
            for e in std::fs::read_dir(&p).expect("read_dir") {
                stack.push(e.expect("entry").path());
            }
        }
    }
    all.sort();
    for p in all {
        let m = std::fs::symlink_metadata(&p).expect("lstat");
        h.update(
            p.strip_prefix(root)
                .unwrap_or(&p)
                .as_os_str()
                .as_encoded_bytes(),
        );
        h.update(m.mode().to_le_bytes());
        h.update(m.uid().to_le_bytes());
        h.update(m.nlink().to_le_bytes());
        if m.is_symlink() {
            h.update(
                std::fs::read_link(&p)
                    .expect("readlink")
                    .as_os_str()
                    .as_encoded_bytes(),
            );
        } else if m.is_file() {
            h.update(std::fs::read(&p).expect("read"));
        }
    }
    format!("{:x}", h.finalize())
}

pub fn show(run: &TestRun) -> String {
    format!("{run:#?}")
}

/// Whether any host process has `marker` in its command line.
pub fn process_with(marker: &str) -> bool {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(marker)
                })
                .unwrap_or(false)
        })
}
