//! Kept runs (rolled back, their upper dir kept for the operator) and `apply`: the operator's
//! decision to commit one after reading its diff (`super::diff`).
//!
//! A kept run is committed by the same code as any run ([`super::commit`]): the same plan, the
//! same refusals (devices, set-id files, overlay markers), the same conflict check against the
//! run's *start* (a host entry the run changes that changed on the host since, however long ago
//! the run was, is a conflict), the same journal, so `undo` works on it. Applied, the upper dir
//! is spent; a second apply finds nothing. Kept runs are bounded by time (`keep_until`, pruned by
//! `super::prune`) and by bytes ([`prune_kept`]: the oldest go first).

use super::{commit, CommitConfig, CommitError, CommitReport};
use crate::mirror::{load_kept, remove_tree, Meta};
use crate::store;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why an apply committed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// No kept upper dir for this id: never kept (committed, conflicted, killed), pruned, or
    /// already applied.
    #[error("run {0} is not kept (it was committed, already applied, never kept, or pruned)")]
    Gone(String),
    /// The commit refused, conflicted or failed; the kept run stays until it expires.
    #[error(transparent)]
    Commit(#[from] CommitError),
}

/// Commit kept run `run_id` to its workspace (all or nothing; see the module docs).
pub fn apply(
    state_dir: &Path,
    run_id: &str,
    config: &CommitConfig,
) -> Result<CommitReport, ApplyError> {
    let kept = load_kept(state_dir, run_id).map_err(|_| ApplyError::Gone(run_id.into()))?;
    if kept.meta.keep_until.is_none() {
        // A run still being judged (its meta is written before the commit decides): not ours.
        return Err(ApplyError::Gone(run_id.into()));
    }
    Ok(commit(kept, config)?)
}

/// Bytes a directory tree holds on disk (blocks, so sparse files count what they use).
pub fn tree_bytes(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

/// A kept run on disk.
#[derive(Clone, Debug)]
pub struct KeptRun {
    pub run_id: String,
    pub workspace: PathBuf,
    /// Unix seconds until which it is kept.
    pub keep_until: u64,
    pub bytes: u64,
    /// Its kept dirs: the workspace's, then each `write=` tree's.
    dirs: Vec<PathBuf>,
}

/// Every kept run (rolled back and kept for an apply), newest first.
pub fn kept_runs(state_dir: &Path) -> Vec<KeptRun> {
    let mut out = Vec::new();
    for store in store::stores(state_dir) {
        let Ok(rd) = std::fs::read_dir(store.runs()) else {
            continue;
        };
        for e in rd.flatten() {
            let meta: Option<Meta> = std::fs::read(e.path().join("meta.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let Some(meta) = meta else { continue };
            let Some(keep_until) = meta.keep_until else {
                continue;
            };
            // A `write=` tree's dir (`<id>-w<n>`) carries its run's record too: counted with it.
            if e.file_name().to_str() != Some(meta.run_id.as_str()) {
                continue;
            }
            let dirs: Vec<PathBuf> = std::iter::once(e.path())
                .chain(meta.extra.iter().map(|k| k.keep.clone()))
                .collect();
            out.push(KeptRun {
                bytes: dirs.iter().map(|d| tree_bytes(d)).sum(),
                run_id: meta.run_id,
                workspace: meta.workspace,
                keep_until,
                dirs,
            });
        }
    }
    out.sort_by_key(|k| std::cmp::Reverse(k.keep_until));
    out
}

/// Drop the oldest kept runs until the rest hold at most `max_bytes`. Returns the ids dropped.
pub fn prune_kept(state_dir: &Path, max_bytes: u64) -> Vec<String> {
    let mut total = 0u64;
    let mut dropped = Vec::new();
    for k in kept_runs(state_dir) {
        total = total.saturating_add(k.bytes);
        if total > max_bytes && k.dirs.iter().all(|d| remove_tree(d).is_ok()) {
            dropped.push(k.run_id);
        }
    }
    dropped
}
