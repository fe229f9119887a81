//! Recursive content reads: `grep -r`, `rg`, `ag`, `diff -r`, `git grep --no-index`, and Claude
//! Code's Grep tool read every file under the places they are given, not only the paths named.
//! Decided from the paths and patterns alone (no directory is listed), shared by the hook's fast
//! path and the daemon.
//!
//! The rule. A recursive content read is a read only if, for every place it searches:
//!
//! 1. the place is not a secret path and is not *above* one: `~`, `/home`, `/`, `~/.config`, `/etc`
//!    hold `~/.ssh`, `~/.config/gh`, `/etc/shadow`, … ([`SecretPaths::tree_holds_anchored`]);
//! 2. and either the search is limited by an include filter that no secret *file name* can match
//!    (`grep --include='*.rs'`, `rg -g '*.rs'`, Grep's `glob: "*.rs"`), or the place lies strictly
//!    inside the project and strictly below every directory the command may run in (`src/`,
//!    `./docs`), and the search does not follow symbolic links met in the tree.
//!
//! Why 2: secret file names (`.env`, `.env.*`, `*.pem`, `*.key`, `id_rsa`, …) may sit in any
//! directory, and only listing it would tell. The directory a command runs in (usually the project
//! root) is where `.env` files are kept and loaded from, so searching it, anything above it, or
//! anything outside the project is not a read; a subdirectory the agent names is. What remains (a
//! key file planted deep in `src/`) is a documented limit; `secret_paths` names such a place, and
//! rule 1 then covers every search above it. `.gitignore` and ripgrep's skipping of hidden files
//! are not counted as exclusions: both are configuration the agent can change, and Claude Code's
//! Grep passes `--hidden`.

use super::secrets::{normalized, SecretPaths};

/// Why a searched place makes a recursive content read not a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeRisk {
    /// The place is a secret path, or above one (rule 1).
    HoldsSecret,
    /// Secret files could be anywhere under the place (rule 2).
    MayHoldSecretFiles,
    /// The place is only known at run time, or relative to an unknown directory.
    Unknown,
}

impl TreeRisk {
    /// Says why, for the model and the audit.
    pub fn why(self) -> &'static str {
        match self {
            TreeRisk::HoldsSecret => {
                "holds secret paths (keys, tokens, credentials), and a recursive search reads them"
            }
            TreeRisk::MayHoldSecretFiles => {
                "may hold secret files (.env, *.pem, *.key, id_*) that a recursive search reads; \
                 search a subdirectory below the working directory inside the project, or limit \
                 the search to non-secret names (--include/--glob '*.rs')"
            }
            TreeRisk::Unknown => {
                "is only known at run time, so the secrets under it cannot be ruled out"
            }
        }
    }
}

/// Where a recursive search runs, for rule 2.
#[derive(Debug, Clone, Copy)]
pub struct SearchSite<'a> {
    pub secrets: &'a SecretPaths,
    /// The project root, when known; unknown ⇒ no place qualifies by location.
    pub project: Option<&'a str>,
    /// Every directory the command may run in (absolute).
    pub cwds: &'a [String],
}

impl SearchSite<'_> {
    /// Do the include filters `only` keep every secret file name out? Empty: no filter.
    pub fn filtered<S: AsRef<str>>(&self, only: &[S]) -> bool {
        !only.is_empty()
            && only
                .iter()
                .all(|g| !self.secrets.filter_may_select_secret(g.as_ref()))
    }

    /// Judge one searched place `root` (absolute, `~` expanded; with `glob`, `*` and `?` are
    /// wildcards, so it stands for every directory it could match). `filtered`: [`Self::filtered`];
    /// `follows`: symbolic links inside the tree are followed.
    pub fn judge(
        &self,
        root: &str,
        glob: bool,
        filtered: bool,
        follows: bool,
    ) -> Result<(), TreeRisk> {
        if !root.starts_with('/') {
            return Err(TreeRisk::Unknown);
        }
        if self.secrets.matches(root, &[], glob) || self.secrets.tree_holds_anchored(root, glob) {
            return Err(TreeRisk::HoldsSecret);
        }
        if filtered || (!follows && self.below_cwd_in_project(root, glob)) {
            Ok(())
        } else {
            Err(TreeRisk::MayHoldSecretFiles)
        }
    }

    fn below_cwd_in_project(&self, root: &str, glob: bool) -> bool {
        let Some(project) = self.project else {
            return false;
        };
        let root = normalized(root);
        let project = normalized(project);
        let inside = root.len() > project.len() && project.iter().zip(&root).all(|(p, r)| p == r);
        // `root` must not be, or be able to match, a cwd or a directory above one.
        let above_a_cwd = self.cwds.iter().any(|cwd| {
            let cwd = normalized(cwd);
            root.len() <= cwd.len()
                && root
                    .iter()
                    .zip(&cwd)
                    .all(|(r, c)| super::secrets::may_match(r, c, glob))
        });
        inside && !above_a_cwd && !self.cwds.is_empty()
    }
}

/// Claude Code's Grep `glob` as the `--glob` arguments it becomes: split at white space, then at
/// commas unless the part has a `{…}` group. Parts starting with `!` exclude, the others include.
pub fn claude_grep_globs(glob: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for part in glob.split_whitespace() {
        if part.contains('{') && part.contains('}') {
            out.push(part);
        } else {
            out.extend(part.split(',').filter(|p| !p.is_empty()));
        }
    }
    out
}

/// Claude Code's Grep tool (ripgrep with `--hidden --no-follow`) over `path` (absolute, `~` and
/// `..` resolved) with its optional `glob`, run from `cwd` in `project`.
pub fn claude_grep(
    secrets: &SecretPaths,
    path: &str,
    glob: Option<&str>,
    cwd: &str,
    project: Option<&str>,
) -> Result<(), TreeRisk> {
    let cwds = [cwd.to_owned()];
    let site = SearchSite {
        secrets,
        project,
        cwds: &cwds,
    };
    let parts = glob.map(claude_grep_globs).unwrap_or_default();
    if parts.iter().any(|g| {
        let joined = if g.starts_with('/') {
            (*g).to_owned()
        } else {
            format!("{path}/{}", g.trim_start_matches('!'))
        };
        !g.starts_with('!') && secrets.matches(&joined, &[], true)
    }) {
        return Err(TreeRisk::HoldsSecret);
    }
    let only: Vec<&str> = parts.into_iter().filter(|g| !g.starts_with('!')).collect();
    site.judge(path, false, site.filtered(&only), false)
}
