//! Which workspace paths git tracks: asked of the real workspace, after the run, for just the
//! paths the run changed or deleted (or the whole index when there are many).
//!
//! Why after and only those: the mirror never writes the real workspace, so its index is the
//! same before and after; and asking for the handful of touched paths costs nothing for a
//! `true`, where listing a 100k-file index would dominate the run. The query runs outside the
//! sandbox, so it is hardened: `core.fsmonitor` (which executes a configured program) is forced
//! off, no system config, no pager, a timeout and an output bound.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What git said about a set of workspace-relative paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tracked {
    /// The tracked files at or below the queried paths.
    Known(BTreeSet<PathBuf>),
    /// No answer (not a git work tree, git missing, timeout): every pre-existing path counts as
    /// tracked, which errs towards "dirty".
    Unknown(String),
}

impl Tracked {
    /// Whether `path` (or, for a directory, anything below it) is tracked. Unknown ⇒ true.
    pub fn covers(&self, path: &Path) -> bool {
        match self {
            Tracked::Known(set) => set
                .range(path.to_path_buf()..)
                .next()
                .is_some_and(|p| p.starts_with(path)),
            Tracked::Unknown(_) => true,
        }
    }
}

/// Above this many paths, list the whole index instead of naming them.
const MAX_PATHSPECS: usize = 1000;

/// Upper bound on git's answer; past it we stop reading and answer Unknown.
const MAX_OUTPUT: usize = 64 << 20;

/// Ask git which of `paths` (workspace-relative) are tracked, bounded by `timeout`.
pub fn query(workspace: &Path, paths: &[PathBuf], timeout: Duration) -> Tracked {
    if paths.is_empty() {
        return Tracked::Known(BTreeSet::new());
    }
    let mut child = match Command::new("git")
        .arg("-C")
        .arg(workspace)
        .args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "safe.directory=*",
            "--no-pager",
            "--literal-pathspecs",
            "ls-files",
            "-z",
            "--",
        ])
        // Few paths: name them (git answers for just those). Many: list the whole index (the
        // answer is a superset, which `covers` handles) rather than hit the argv limit.
        .args(if paths.len() <= MAX_PATHSPECS {
            paths
        } else {
            &[]
        })
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Tracked::Unknown(format!("cannot run git: {e}")),
    };
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.take(MAX_OUTPUT as u64 + 1).read_to_end(&mut out);
        }
        out
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = reader.join().unwrap_or_default();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    match status {
        None => Tracked::Unknown("git ls-files timed out".into()),
        Some(s) if !s.success() => Tracked::Unknown(format!("git ls-files failed: {}", err.trim())),
        Some(_) if out.len() > MAX_OUTPUT => {
            Tracked::Unknown("git ls-files output too large".into())
        }
        Some(_) => Tracked::Known(
            out.split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| PathBuf::from(String::from_utf8_lossy(s).into_owned()))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_files_and_directories() {
        let t = Tracked::Known(
            ["src/a.rs", "src/b/c.rs", "srcx"]
                .iter()
                .map(PathBuf::from)
                .collect(),
        );
        assert!(t.covers(Path::new("src/a.rs")));
        assert!(t.covers(Path::new("src")));
        assert!(t.covers(Path::new("src/b")));
        assert!(!t.covers(Path::new("src/z")));
        assert!(!t.covers(Path::new("target")));
        assert!(Tracked::Unknown("x".into()).covers(Path::new("anything")));
    }
}
