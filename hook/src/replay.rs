//! The hook's replay check. The hook keeps no state, so it cannot tell by itself that a validly
//! signed `CLAUDE_CMDS.md` is an older revision put back over the current one. The daemon can (it
//! stores the highest revision it accepted per project and key) and publishes what it accepted in
//! `<data dir>/tiermap-revisions` (format: `cmdgate_policy::tiermap::published`). Before the hook
//! allows a command by itself on the strength of a project map's tier 0, it looks the project up
//! there: a higher recorded revision, or the same revision with other content, means the map on
//! disk is a replay and its tier 0 is not used locally (the built-in read list still is; the
//! daemon decides the rest and refuses the replayed map itself).
//!
//! - No file (the daemon never ran with this data dir): nothing recorded, the map is used — in
//!   user mode. In system mode (`required`) the record is the daemon's and must be there: a
//!   missing one means the hook is not looking where the daemon publishes, and the map is not
//!   used locally.
//! - A file that cannot be read, is too large, is not UTF-8 or has a malformed line: the map is
//!   not used locally (an error never widens what runs).
//! - The project root is looked up exactly as the daemon keys it: the hook's project dir
//!   canonicalised (the daemon canonicalises the `project_dir` the hook sends), as UTF-8. A root
//!   that is relative, not UTF-8, or holds a tab/CR/LF cannot be looked up: the map is not used.
//!
//! Cost: one `realpath` and one read of a small file, only when a tier-0 entry vouched for a
//! command that is about to be allowed locally.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use cmdgate_policy::tiermap::published::{self, MAX_PUBLISHED_BYTES};
use cmdgate_policy::tiermap::{check_revision, VerifiedMap};

/// The key the daemon records for `project_dir`, or why there is none.
fn daemon_key(project_dir: &Path) -> Result<String, String> {
    if !project_dir.is_absolute() {
        return Err(format!(
            "the project dir {} is not absolute",
            project_dir.display()
        ));
    }
    // The daemon: `std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())`.
    let canon = std::fs::canonicalize(project_dir).unwrap_or_else(|_| project_dir.to_path_buf());
    let key = canon
        .to_str()
        .ok_or_else(|| format!("the project root {} is not UTF-8", canon.display()))?;
    if !published::representable(key) {
        return Err(format!(
            "the project root {key:?} cannot be recorded (tab or line break)"
        ));
    }
    Ok(key.to_owned())
}

/// The file's text; `Ok(None)` when it does not exist.
fn read_published(path: &Path) -> io::Result<Option<String>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut buf = Vec::new();
    file.take(MAX_PUBLISHED_BYTES as u64 + 1)
        .read_to_end(&mut buf)?;
    if buf.len() > MAX_PUBLISHED_BYTES {
        return Err(io::Error::other(format!(
            "larger than {MAX_PUBLISHED_BYTES} bytes"
        )));
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| io::Error::other("not UTF-8"))
}

/// `Ok(())` when `map` (verified, in `project_dir`) may be used for a local allow; otherwise why
/// not, for the hook note. `published_path` is `Locations::tiermap_revisions` (`None`: no known
/// location, nothing recorded); `required` (system mode) makes a missing record a refusal.
pub fn check(
    published_path: Option<&Path>,
    required: bool,
    project_dir: &Path,
    map: &VerifiedMap,
) -> Result<(), String> {
    let Some(path) = published_path else {
        return if required {
            Err("no record of accepted tier map revisions is configured".into())
        } else {
            Ok(())
        };
    };
    let text = match read_published(path) {
        Ok(Some(t)) => t,
        Ok(None) if required => {
            let path = path.display();
            return Err(format!(
                "the daemon's record of accepted revisions {path} does not exist (system mode \
                 needs it)"
            ));
        }
        Ok(None) => return Ok(()),
        Err(e) => {
            return Err(format!(
                "the daemon's record of accepted revisions {} is unusable ({e})",
                path.display()
            ))
        }
    };
    let key = daemon_key(project_dir)?;
    let recorded = published::lookup(&text, &key).map_err(|e| {
        format!(
            "the daemon's record of accepted revisions {} is malformed ({e})",
            path.display()
        )
    })?;
    check_revision(map.revision, &map.content_hash, recorded.as_ref()).map_err(|e| {
        format!(
            "{e}: the daemon already accepted a newer map for {key} (recorded in {})",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cmdgate_policy::tiermap::published::{render, Published};
    use cmdgate_policy::tiermap::{content_hash, parse, SeenRevision};

    fn map(revision: u64, body: &str) -> VerifiedMap {
        let text = format!("---\nrevision: {revision}\n---\n\n## Tier 0 — read\n\n{body}\n");
        VerifiedMap {
            map: parse(&text).expect("parses"),
            key: "k".into(),
            key_version: 1,
            revision,
            content_hash: content_hash(&text),
        }
    }

    fn publish(path: &Path, root: &Path, m: &VerifiedMap) {
        let entry = Published {
            root: std::fs::canonicalize(root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned(),
            seen: SeenRevision {
                revision: m.revision,
                content_hash: m.content_hash,
            },
        };
        std::fs::write(path, render(&[entry])).unwrap();
    }

    #[test]
    fn nothing_recorded_uses_the_map() {
        let dir = tempfile::tempdir().unwrap();
        let m = map(2, "- `make lint`");
        assert_eq!(check(None, false, dir.path(), &m), Ok(()));
        let missing = dir.path().join("tiermap-revisions");
        assert_eq!(check(Some(&missing), false, dir.path(), &m), Ok(()));
        // Another project's line says nothing about this one.
        let other = tempfile::tempdir().unwrap();
        publish(&missing, other.path(), &map(9, "- `pwd`"));
        assert_eq!(check(Some(&missing), false, dir.path(), &m), Ok(()));
    }

    #[test]
    fn the_recorded_revision_or_an_older_one_is_refused_only_when_it_is_a_replay() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tiermap-revisions");
        let proj = dir.path().join("proj");
        std::fs::create_dir(&proj).unwrap();
        let (r1, r2) = (map(1, "- `make lint`"), map(2, "- `pwd`"));
        publish(&file, &proj, &r2);
        // The accepted revision itself, and a newer one the daemon has not seen yet: used.
        assert_eq!(check(Some(&file), false, &proj, &r2), Ok(()));
        assert_eq!(check(Some(&file), false, &proj, &map(3, "- `pwd`")), Ok(()));
        // An older revision: a replay.
        let why = check(Some(&file), false, &proj, &r1).unwrap_err();
        assert!(why.contains("older than revision 2"), "{why}");
        // The same revision with other content: a replay too.
        let why = check(Some(&file), false, &proj, &map(2, "- `make lint`")).unwrap_err();
        assert!(why.contains("different content"), "{why}");
    }

    #[test]
    fn the_root_is_looked_up_as_the_daemon_keys_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tiermap-revisions");
        let proj = dir.path().join("proj");
        std::fs::create_dir(&proj).unwrap();
        std::os::unix::fs::symlink(&proj, dir.path().join("link")).unwrap();
        publish(&file, &proj, &map(2, "- `pwd`"));
        let r1 = map(1, "- `make lint`");
        // Another spelling of the same directory: a symlink, a trailing `/.`.
        for spelling in [dir.path().join("link"), proj.join(".")] {
            assert!(
                check(Some(&file), false, &spelling, &r1).is_err(),
                "{spelling:?}"
            );
        }
        // A relative project dir is never looked up, so never used.
        assert!(check(Some(&file), false, Path::new("proj"), &r1).is_err());
    }

    #[test]
    fn an_unusable_record_refuses_the_map() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tiermap-revisions");
        let m = map(2, "- `make lint`");
        for bad in [
            b"2 not-a-line\n".to_vec(),
            vec![0xff, 0xfe, b'\n'],
            vec![b'#'; MAX_PUBLISHED_BYTES + 1],
        ] {
            std::fs::write(&file, &bad).unwrap();
            assert!(check(Some(&file), false, dir.path(), &m).is_err());
        }
        // A directory where the file should be (unreadable as a file).
        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir(&file).unwrap();
        assert!(check(Some(&file), false, dir.path(), &m).is_err());
        // An empty file records nothing.
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "").unwrap();
        assert_eq!(check(Some(&empty), false, dir.path(), &m), Ok(()));
    }

    #[test]
    fn system_mode_needs_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let m = map(2, "- `make lint`");
        let missing = dir.path().join("tiermap-revisions");
        let why = check(Some(&missing), true, dir.path(), &m).unwrap_err();
        assert!(why.contains("does not exist"), "{why}");
        assert!(check(None, true, dir.path(), &m).is_err());
        // Present (even with no line for this project yet): the map is judged by it.
        std::fs::write(&missing, "").unwrap();
        assert_eq!(check(Some(&missing), true, dir.path(), &m), Ok(()));
    }
}
