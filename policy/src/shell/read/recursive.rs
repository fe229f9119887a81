//! Recursive content reads: `grep -r`, `rg`, `ag`, `diff -r`, `git grep --no-index`, and Claude
//! Code's Grep tool read every file under the places they are given, not only the paths named.
//! Decided from the paths, the patterns and, for the working directory or the project root, a
//! one-level listing of that directory that the caller makes ([`DirListing`]: this crate does no
//! IO). Shared by the hook's fast path and the daemon.
//!
//! The rule. A recursive content read is a read only if, for every place it searches:
//!
//! 1. the place is not a secret path and is not *above* one: `~`, `/home`, `/`, `~/.config`, `/etc`
//!    hold `~/.ssh`, `~/.config/gh`, `/etc/shadow`, … ([`SecretPaths::tree_holds_anchored`]);
//! 2. and either the search is limited by an include filter that no secret *file name* can match
//!    (`grep --include='*.rs'`, `rg -g '*.rs'`, Grep's `glob: "*.rs"`), or the place lies strictly
//!    inside the project and strictly below every directory the command may run in (`src/`,
//!    `./docs`), and the search does not follow symbolic links met in the tree;
//! 3. or, for a place inside the project that is the working directory, the project root, or a
//!    directory between them (not above a secret path, no link following, no filter needed): the
//!    caller's one-level listing of the place and of every working directory below it shows no
//!    entry with a secret name (`.env`, `id_rsa`, `*.pem`) and none that starts a secret path
//!    (`.ssh`, `.aws`, `.config/gh`: followed down the listing). A listing that is missing,
//!    unreadable or longer than [`MAX_LISTING`] entries leaves the place not a read.
//!
//! Why 2 and 3: secret file names (`.env`, `.env.*`, `*.pem`, `*.key`, `id_rsa`, …) may sit in
//! any directory, and only listing it would tell. The directory a command runs in (usually the
//! project root) is where `.env` files are kept and loaded from, so it is looked at (rule 3);
//! anything above it or outside the project is not a read; a subdirectory the agent names is.
//! What remains (a key file planted deep in `src/`, or below a top-level directory) is a
//! documented limit; `secret_paths` names such a place, and rule 1 then covers every search above
//! it. Entries are judged by name only: a top-level symbolic link is not followed by a search that
//! does not follow links (Claude Code's Grep, `grep -r`, `rg`), and searches that follow them
//! never pass rule 2 or 3. `.gitignore` and ripgrep's skipping of hidden files
//! are not counted as exclusions: both are configuration the agent can change, and Claude Code's
//! Grep passes `--hidden`.

use super::secrets::{normalized, Comp, SecretPaths};

/// The most entries a listing may have for rule 3; a longer one leaves the place not a read.
pub const MAX_LISTING: usize = 4096;

/// A one-level directory listing, made by the caller (the hook, the daemon) when the rule asks
/// for it: only for a recursive search of the working directory or the project root that nothing
/// else refuses.
pub trait DirListing {
    /// The names of the entries of `dir` (an absolute path), without following into them; `None`
    /// when it cannot be read or has more than [`MAX_LISTING`] entries.
    fn list(&self, dir: &str) -> Option<Vec<String>>;
}

impl<F: Fn(&str) -> Option<Vec<String>>> DirListing for F {
    fn list(&self, dir: &str) -> Option<Vec<String>> {
        self(dir)
    }
}

/// The most listings one judged place may take (secret paths followed down the tree).
const MAX_LISTINGS: usize = 32;

/// Why a searched place makes a recursive content read not a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeRisk {
    /// The place is a secret path, or above one (rule 1).
    HoldsSecret,
    /// Secret files could be anywhere under the place (rule 2).
    MayHoldSecretFiles,
    /// The place is only known at run time, or relative to an unknown directory.
    Unknown,
    /// The listing of the place shows this entry (`./.env`, `./.ssh`), a secret path (rule 3).
    SecretEntry(String),
    /// The place (or this directory in it) could not be listed, or has too many entries (rule 3).
    Unlisted(String),
}

impl TreeRisk {
    /// Says why, for the model and the audit.
    pub fn why(&self) -> String {
        match self {
            TreeRisk::HoldsSecret => {
                "holds secret paths (keys, tokens, credentials), and a recursive search reads them"
                    .into()
            }
            TreeRisk::MayHoldSecretFiles => {
                "may hold secret files (.env, *.pem, *.key, id_*) that a recursive search reads; \
                 search a subdirectory below the working directory inside the project, or limit \
                 the search to non-secret names (--include/--glob '[!.]*.rs')"
                    .into()
            }
            TreeRisk::Unknown => {
                "is only known at run time, so the secrets under it cannot be ruled out".into()
            }
            TreeRisk::SecretEntry(entry) => format!(
                "holds `{entry}`, which is on the secret-path list and a recursive search reads; \
                 search a subdirectory, or limit the search to names no secret has \
                 (--include/--glob '[!.]*.rs')"
            ),
            TreeRisk::Unlisted(dir) => format!(
                "may hold secret files (.env, *.pem, *.key, id_*), and `{dir}` could not be \
                 listed to rule them out (unreadable, or more than {MAX_LISTING} entries); search \
                 a subdirectory, or limit the search to names no secret has \
                 (--include/--glob '[!.]*.rs')"
            ),
        }
    }
}

/// Where a recursive search runs, for rule 2.
#[derive(Clone, Copy)]
pub struct SearchSite<'a> {
    pub secrets: &'a SecretPaths,
    /// The project root, when known; unknown ⇒ no place qualifies by location.
    pub project: Option<&'a str>,
    /// Every directory the command may run in (absolute).
    pub cwds: &'a [String],
    /// Lists the working directory or project root for rule 3; `None`: rule 3 never applies.
    pub listing: Option<&'a dyn DirListing>,
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
            return Ok(());
        }
        match self.listing {
            Some(listing) if !follows && !glob => self.top_level_clean(root, listing),
            _ => Err(TreeRisk::MayHoldSecretFiles),
        }
    }

    /// Rule 3: `root` (absolute, not a glob) is inside the project or its root, and the listing of
    /// `root` and of every working directory below it shows no secret entry.
    fn top_level_clean(&self, root: &str, listing: &dyn DirListing) -> Result<(), TreeRisk> {
        let Some(project) = self.project else {
            return Err(TreeRisk::MayHoldSecretFiles);
        };
        let comps = normalized(root);
        let project = normalized(project);
        let within = |outer: &[&str], inner: &[&str]| {
            inner.len() >= outer.len() && outer.iter().zip(inner).all(|(o, i)| o == i)
        };
        if self.cwds.is_empty() || !within(&project, &comps) {
            return Err(TreeRisk::MayHoldSecretFiles);
        }
        // The place as given (the OS resolves it as the search will), then each working directory
        // below it, shown relative to the place.
        let mut dirs = vec![(root.to_owned(), ".".to_owned())];
        for cwd in self.cwds {
            let c = normalized(cwd);
            if c.len() > comps.len() && within(&comps, &c) {
                dirs.push((cwd.clone(), format!("./{}", c[comps.len()..].join("/"))));
            }
        }
        let mut budget = MAX_LISTINGS;
        for (dir, shown) in &dirs {
            self.walk(listing, dir, shown, None, &mut budget)?;
        }
        Ok(())
    }

    /// Lists `dir` and refuses a secret entry. With `tails` (the rests of anchored secret paths,
    /// `gh` of `.config/gh`), only entries continuing one of them count, followed down: each
    /// directory is listed once, however many secret paths run through it.
    fn walk(
        &self,
        listing: &dyn DirListing,
        dir: &str,
        shown: &str,
        tails: Option<&[&[Comp]]>,
        budget: &mut usize,
    ) -> Result<(), TreeRisk> {
        if *budget == 0 {
            return Err(TreeRisk::Unlisted(shown.to_owned()));
        }
        *budget -= 1;
        let entries = listing
            .list(dir)
            .filter(|e| e.len() <= MAX_LISTING)
            .ok_or_else(|| TreeRisk::Unlisted(shown.to_owned()))?;
        let dir = dir.trim_end_matches('/');
        for entry in &entries {
            let entry_shown = format!("{}/{entry}", shown.trim_end_matches('/'));
            let nexts: Vec<&[Comp]> = match tails {
                None => {
                    if self.secrets.secret_name(entry) {
                        return Err(TreeRisk::SecretEntry(entry_shown));
                    }
                    self.secrets.tails_after(entry).collect()
                }
                Some(tails) => tails
                    .iter()
                    .filter_map(|t| match t.split_first() {
                        Some((first, rest)) if super::secrets::may_match(entry, first, false) => {
                            Some(rest)
                        }
                        _ => None,
                    })
                    .collect(),
            };
            if nexts.iter().any(|n| n.is_empty()) {
                return Err(TreeRisk::SecretEntry(entry_shown));
            }
            if !nexts.is_empty() {
                let path = format!("{dir}/{entry}");
                self.walk(listing, &path, &entry_shown, Some(&nexts), budget)?;
            }
        }
        Ok(())
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
/// `..` resolved) with its optional `glob`, run from `cwd` in `project`; `listing` for rule 3.
pub fn claude_grep(
    secrets: &SecretPaths,
    path: &str,
    glob: Option<&str>,
    cwd: &str,
    project: Option<&str>,
    listing: Option<&dyn DirListing>,
) -> Result<(), TreeRisk> {
    let cwds = [cwd.to_owned()];
    let site = SearchSite {
        secrets,
        project,
        cwds: &cwds,
        listing,
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
