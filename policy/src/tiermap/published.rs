//! The tier map revisions the daemon publishes for the hook: `<data dir>/tiermap-revisions`
//! (`Locations::tiermap_revisions`). The daemon keeps the highest revision it accepted per project
//! and key in its store and refuses a replayed map; the hook keeps no state, so before it uses a
//! project map's tier 0 to allow a command by itself it looks the project up here and refuses the
//! map locally when the daemon already accepted a higher revision, or the same revision with other
//! content (`check_revision`).
//!
//! Format (UTF-8, LF line endings, written whole with tmp + rename, mode 0644):
//!
//! ```text
//! # cmdgate tier map revisions v1: <revision>\t<content hash>\t<canonical project root>
//! 7\t9c1f…(64 lowercase hex)…\t/home/me/src/app
//! ```
//!
//! - Lines starting with `#` and empty lines are comments.
//! - One line per project: the highest revision accepted under **any** key (keys rotate: a map
//!   signed by another key must still not go below it), the SHA-256 of that revision's canonical
//!   bytes ([`super::content_hash`]), and the canonical project root exactly as the daemon keys it
//!   (`to_string_lossy()` of the canonicalised root). Three tab-separated fields; the root is last
//!   and taken verbatim (it may contain spaces).
//! - A root that contains a tab, CR or LF cannot be written on one line: the daemon leaves it out,
//!   and the hook never uses a map locally for such a root ([`representable`]).
//! - A malformed line makes the whole file unusable to the hook, which then does not use any map
//!   locally (the daemon still decides): an error never widens what runs.
//!
//! Everything here is pure: the daemon does the writing and the hook the reading.

use std::fmt::Write as _;

use super::{ContentHash, SeenRevision};

/// The first line of the file.
pub const HEADER: &str =
    "# cmdgate tier map revisions v1: <revision>\\t<content hash>\\t<canonical project root>";

/// Largest file the hook reads: ~100 bytes a project, so room for thousands of projects.
pub const MAX_PUBLISHED_BYTES: usize = 1024 * 1024;

/// One project's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// Canonical project root, as the daemon keys it.
    pub root: String,
    /// The highest revision accepted under any key, and its content hash.
    pub seen: SeenRevision,
}

/// Whether `root` can be written on one line of the file (no tab, CR or LF, not empty).
pub fn representable(root: &str) -> bool {
    !root.is_empty() && !root.contains(['\t', '\r', '\n'])
}

/// The file's text for `entries` (sorted by root; unrepresentable roots left out).
pub fn render(entries: &[Published]) -> String {
    let mut sorted: Vec<&Published> = entries.iter().filter(|e| representable(&e.root)).collect();
    sorted.sort_by(|a, b| a.root.cmp(&b.root));
    let mut out = String::with_capacity(HEADER.len() + 1 + sorted.len() * 100);
    out.push_str(HEADER);
    out.push('\n');
    for e in sorted {
        let _ = writeln!(
            out,
            "{}\t{}\t{}",
            e.seen.revision,
            e.seen.content_hash.to_hex(),
            e.root
        );
    }
    out
}

/// The recorded revision for `root` in the file's `text`: `Ok(None)` when the project has no line;
/// `Err` (with the line number) when any line is malformed, so a damaged file is never read as
/// "nothing recorded". When a root appears twice the highest revision wins.
pub fn lookup(text: &str, root: &str) -> Result<Option<SeenRevision>, String> {
    let mut found: Option<SeenRevision> = None;
    for (i, line) in text.split('\n').enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |what: &str| format!("line {}: {what}", i + 1);
        let mut fields = line.splitn(3, '\t');
        let (Some(rev), Some(hash), Some(line_root)) =
            (fields.next(), fields.next(), fields.next())
        else {
            return Err(bad("not three tab-separated fields"));
        };
        if rev.is_empty() || !rev.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("the revision is not a number"));
        }
        let revision: u64 = rev.parse().map_err(|_| bad("the revision is too large"))?;
        let content_hash = ContentHash::from_hex(hash).ok_or_else(|| bad("bad content hash"))?;
        if !representable(line_root) {
            return Err(bad("bad project root"));
        }
        if line_root == root && found.as_ref().is_none_or(|f| revision > f.revision) {
            found = Some(SeenRevision {
                revision,
                content_hash,
            });
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiermap::content_hash;

    fn seen(revision: u64, text: &str) -> SeenRevision {
        SeenRevision {
            revision,
            content_hash: content_hash(text),
        }
    }

    #[test]
    fn render_then_lookup_round_trips() {
        let entries = vec![
            Published {
                root: "/w/b b".into(),
                seen: seen(3, "b"),
            },
            Published {
                root: "/w/a".into(),
                seen: seen(12, "a"),
            },
            Published {
                root: "/w/bad\nroot".into(),
                seen: seen(1, "x"),
            },
        ];
        let text = render(&entries);
        assert!(text.starts_with(HEADER));
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.find("/w/a").unwrap() < text.find("/w/b b").unwrap());
        assert_eq!(lookup(&text, "/w/a").unwrap(), Some(seen(12, "a")));
        assert_eq!(lookup(&text, "/w/b b").unwrap(), Some(seen(3, "b")));
        assert_eq!(lookup(&text, "/w/c").unwrap(), None);
        assert_eq!(lookup(&text, "/w").unwrap(), None);
        assert_eq!(lookup("", "/w/a").unwrap(), None);
    }

    #[test]
    fn malformed_lines_are_errors() {
        let h = content_hash("a").to_hex();
        for text in [
            format!("7 {h} /w/a"),
            format!("7\t{h}"),
            format!("-7\t{h}\t/w/a"),
            format!("x\t{h}\t/w/a"),
            format!("99999999999999999999999\t{h}\t/w/a"),
            "7\tabc\t/w/a".to_string(),
            format!("7\t{h}\t"),
            format!("7\t{h}\t/w/a\r"),
        ] {
            assert!(lookup(&text, "/w/a").is_err(), "{text:?}");
            // Also when the damaged line is another project's.
            assert!(lookup(&text, "/w/z").is_err(), "{text:?}");
        }
    }

    #[test]
    fn the_highest_of_duplicate_lines_wins() {
        let (a, b) = (content_hash("a").to_hex(), content_hash("b").to_hex());
        let text = format!("9\t{a}\t/w\n4\t{b}\t/w\n");
        assert_eq!(lookup(&text, "/w").unwrap().unwrap().revision, 9);
    }
}
