//! Choosing the `revision:` of a map about to be signed, so a freshly signed map always supersedes
//! the last one, and rewriting it in the front matter.
//!
//! The rule (see [`next_revision`]), with `R` the revision in the file:
//!
//! - the file is validly signed (pinned key) and unchanged since, and `R` is not below what this
//!   machine signed before ⇒ keep `R`: re-signing the same content, e.g. with a new key version
//!   after a rotation, which the daemon accepts (same revision, same content hash);
//! - otherwise the new revision is above both `R` when the file carries a stale signature (edited
//!   after signing, and the operator may not have raised it) and the highest revision this machine
//!   signed for this path (the *signing ledger*, `signed-revisions` in the config dir); and at least
//!   `R`, so an operator who raised it by hand keeps their number.
//!
//! Gaps in the numbering are harmless: the daemon only requires growth.

use super::files::{self, FileError};
use cmdgate_policy::tiermap::{ContentHash, SeenRevision};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// File in the config dir recording the highest revision signed per map path on this machine.
pub const LEDGER_FILE: &str = "signed-revisions";

/// Why the revision could not be rewritten or the ledger read.
#[derive(Debug, thiserror::Error)]
pub enum RevisionError {
    /// No `revision:` line inside the front matter to rewrite.
    #[error("no `revision:` line in the front matter")]
    NoRevisionLine,
    /// The revision cannot grow any further.
    #[error("revision {0} cannot be raised any further")]
    Overflow(u64),
    /// The ledger file could not be read or written.
    #[error(transparent)]
    File(#[from] FileError),
    /// A ledger line is not `<revision> <sha256 hex> <path>`.
    #[error("{}:{line}: expected `<revision> <sha256> <path>`", path.display())]
    MalformedLedger { path: PathBuf, line: usize },
}

/// What is known about the map before signing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Before {
    /// `revision:` in the file.
    pub revision: u64,
    /// Content hash of the file as it is.
    pub content_hash: ContentHash,
    /// The file's signature verifies against the pinned keys (so its content is what was signed).
    pub validly_signed: bool,
    /// The file carries a signature trailer at all (valid or not).
    pub has_trailer: bool,
}

/// The revision to sign with; see the module documentation.
pub fn next_revision(before: &Before, ledger: Option<&SeenRevision>) -> Result<u64, RevisionError> {
    let r = before.revision;
    let ledger_allows_keeping = ledger.is_none_or(|s| {
        r > s.revision || (r == s.revision && s.content_hash == before.content_hash)
    });
    if before.validly_signed && ledger_allows_keeping {
        return Ok(r);
    }
    let bump = |n: u64| n.checked_add(1).ok_or(RevisionError::Overflow(n));
    let mut next = r;
    if before.has_trailer {
        next = next.max(bump(r)?);
    }
    if let Some(s) = ledger {
        next = next.max(bump(s.revision)?);
    }
    Ok(next)
}

/// `text` with the front matter's `revision:` value replaced by `revision`. Every other byte stays
/// as it is (line endings, spacing around the value).
pub fn set_revision(text: &str, revision: u64) -> Result<String, RevisionError> {
    let mut offset = 0;
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        let line = raw.trim_end_matches('\n').trim_end_matches('\r');
        let start = offset;
        offset += raw.len();
        if i == 0 {
            if line.trim_start_matches('\u{feff}') != "---" {
                return Err(RevisionError::NoRevisionLine);
            }
            continue;
        }
        if line == "---" {
            break;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key.trim() != "revision" {
            continue;
        }
        let lead = value.len() - value.trim_start().len();
        let value_start = start + key.len() + 1 + lead;
        let value_end = value_start + value.trim().len();
        let mut out = String::with_capacity(text.len() + 4);
        out.push_str(&text[..value_start]);
        out.push_str(&revision.to_string());
        out.push_str(&text[value_end..]);
        return Ok(out);
    }
    Err(RevisionError::NoRevisionLine)
}

/// The signing ledger: highest revision signed per map (absolute path) on this machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Absolute path of the map ⇒ highest revision signed and its content hash.
    entries: BTreeMap<String, SeenRevision>,
}

impl Ledger {
    /// Reads the ledger in `config_dir`; a missing file is an empty ledger.
    pub fn load(config_dir: &Path) -> Result<Ledger, RevisionError> {
        let path = config_dir.join(LEDGER_FILE);
        let Some(text) = files::read_text(&path)? else {
            return Ok(Ledger::default());
        };
        let mut entries = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = || RevisionError::MalformedLedger {
                path: path.clone(),
                line: i + 1,
            };
            let mut parts = line.splitn(3, ' ');
            let revision = parts.next().and_then(|r| r.parse().ok()).ok_or_else(bad)?;
            let content_hash = parts
                .next()
                .and_then(ContentHash::from_hex)
                .ok_or_else(bad)?;
            let map = parts.next().filter(|p| !p.is_empty()).ok_or_else(bad)?;
            entries.insert(
                map.to_owned(),
                SeenRevision {
                    revision,
                    content_hash,
                },
            );
        }
        Ok(Ledger { entries })
    }

    /// The highest revision signed for `map` (an absolute path).
    pub fn get(&self, map: &Path) -> Option<&SeenRevision> {
        self.entries.get(map.to_string_lossy().as_ref())
    }

    /// Records a signing of `map`; never lowers what was recorded.
    pub fn record(&mut self, map: &Path, seen: SeenRevision) {
        let key = map.to_string_lossy().into_owned();
        if key.contains('\n') {
            return;
        }
        let e = self.entries.entry(key).or_insert(seen);
        if seen.revision >= e.revision {
            *e = seen;
        }
    }

    /// Writes the ledger atomically to `config_dir`.
    pub fn save(&self, config_dir: &Path) -> Result<(), RevisionError> {
        let mut out = String::from(
            "# cmdgate: highest tier-map revision signed on this machine, per map.\n\
             # <revision> <sha256 of the canonical map> <absolute path>\n",
        );
        for (map, s) in &self.entries {
            let _ = writeln!(out, "{} {} {map}", s.revision, s.content_hash);
        }
        files::ensure_dir(config_dir, files::CONFIG_DIR_MODE)?;
        // It lists every signed map's path: the signers' (the config dir's group in system mode).
        files::write_atomic(&config_dir.join(LEDGER_FILE), out.as_bytes(), 0o640)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: ContentHash = ContentHash([1; 32]);
    const H2: ContentHash = ContentHash([2; 32]);

    fn before(revision: u64, validly_signed: bool, has_trailer: bool) -> Before {
        Before {
            revision,
            content_hash: H1,
            validly_signed,
            has_trailer,
        }
    }

    fn seen(revision: u64, content_hash: ContentHash) -> SeenRevision {
        SeenRevision {
            revision,
            content_hash,
        }
    }

    #[test]
    fn revision_rule() {
        let next = |b: Before, l: Option<SeenRevision>| next_revision(&b, l.as_ref()).unwrap();
        // A fresh, never signed map keeps its revision.
        assert_eq!(next(before(1, false, false), None), 1);
        // Edited after signing (stale trailer): raised.
        assert_eq!(next(before(4, false, true), None), 5);
        // Unchanged and validly signed (re-sign after a rotation): kept.
        assert_eq!(next(before(4, true, true), None), 4);
        assert_eq!(next(before(4, true, true), Some(seen(4, H1))), 4);
        // ...unless this machine already signed something newer or different at that revision.
        assert_eq!(next(before(4, true, true), Some(seen(6, H2))), 7);
        assert_eq!(next(before(4, true, true), Some(seen(4, H2))), 5);
        // An old file copied back over the map: above what was signed here.
        assert_eq!(next(before(2, false, false), Some(seen(6, H2))), 7);
        // Raised by hand beyond the ledger: the operator's number stays.
        assert_eq!(next(before(9, false, false), Some(seen(6, H2))), 9);
        assert!(matches!(
            next_revision(&before(u64::MAX, false, true), None),
            Err(RevisionError::Overflow(_))
        ));
    }

    #[test]
    fn set_revision_touches_only_the_value() {
        let text = "---\r\nproject: x\r\nrevision:   41  \r\n---\r\nrevision: 7\r\n";
        let out = set_revision(text, 42).unwrap();
        assert_eq!(
            out,
            "---\r\nproject: x\r\nrevision:   42  \r\n---\r\nrevision: 7\r\n"
        );
        assert!(matches!(
            set_revision("---\nproject: x\n---\nrevision: 1\n", 2),
            Err(RevisionError::NoRevisionLine)
        ));
        assert!(matches!(
            set_revision("# no front matter\n", 2),
            Err(RevisionError::NoRevisionLine)
        ));
    }

    #[test]
    fn ledger_round_trips_and_never_goes_down() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::default();
        let p = Path::new("/p/with space/CLAUDE_CMDS.md");
        l.record(p, seen(3, H1));
        l.record(p, seen(2, H2));
        l.save(dir.path()).unwrap();
        let back = Ledger::load(dir.path()).unwrap();
        assert_eq!(back, l);
        assert_eq!(back.get(p), Some(&seen(3, H1)));
    }
}
