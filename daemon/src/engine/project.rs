//! Finding a request's project and loading its tier map snapshot from disk.

use std::path::{Path, PathBuf};

use cmdgate_policy::locations::Locations;
use cmdgate_policy::tiermap::{self, PinnedKeys, SeenRevision, Snapshot};

/// How the project root was found, for `explain` and the audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RootSource {
    /// `CLAUDE_PROJECT_DIR` (Claude Code sets it for hooks).
    ClaudeProjectDir,
    /// The nearest ancestor of the cwd holding `.git`.
    GitRoot,
    /// Neither: the cwd itself.
    Cwd,
}

/// The canonical project root for `cwd`. `claude_project_dir` wins when given. Canonicalised so
/// rules scoped to a project never match another spelling of the same path, nor a moved copy.
pub fn project_root(cwd: &Path, claude_project_dir: Option<&Path>) -> (PathBuf, RootSource) {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if let Some(dir) = claude_project_dir {
        return (canon(dir), RootSource::ClaudeProjectDir);
    }
    let cwd = canon(cwd);
    let mut dir = Some(cwd.as_path());
    while let Some(d) = dir {
        if d.join(".git").exists() {
            return (d.to_path_buf(), RootSource::GitRoot);
        }
        dir = d.parent();
    }
    (cwd.clone(), RootSource::Cwd)
}

/// Reads the pinned keys. A missing file is "no keys" (every map then fails to verify, which is
/// the fail-closed outcome); an unreadable or malformed file is an error naming every problem.
pub fn load_pinned_keys(locations: &Locations) -> Result<PinnedKeys, String> {
    let path = locations.trusted_keys();
    match std::fs::read_to_string(&path) {
        Ok(text) => PinnedKeys::parse(&text).map_err(|diags| {
            let lines: Vec<String> = diags
                .into_iter()
                .map(|d| d.in_file(&path).to_string())
                .collect();
            format!("pinned keys are invalid:\n{}", lines.join("\n"))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(PinnedKeys::new()),
        Err(e) => Err(format!("cannot read pinned keys {path}: {e}")),
    }
}

/// The snapshot for a project: its `CLAUDE_CMDS.md` verified against the pinned keys and checked
/// against the highest revision seen. Every failure is a read-only snapshot with the reason.
pub fn load_snapshot(
    root: &Path,
    keys: Result<&PinnedKeys, &str>,
    highest_seen: Option<&SeenRevision>,
) -> Snapshot {
    let keys = match keys {
        Ok(k) => k,
        Err(e) => return Snapshot::read_only(e.to_owned()),
    };
    let path = root.join(tiermap::FILE_NAME);
    match std::fs::read(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Snapshot::load(None, keys, highest_seen)
        }
        Err(e) => Snapshot::read_only(format!("cannot read {}: {e}", path.display())),
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Snapshot::load(Some(&text), keys, highest_seen),
            Err(_) => Snapshot::read_only(format!("{} is not UTF-8", path.display())),
        },
    }
}
