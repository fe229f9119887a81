//! The project's tier map as the hook sees it: `CLAUDE_CMDS.md` at the project root, used only when
//! its signature verifies against the operator's pinned keys (never read from the project). The
//! hook keeps no state: before it uses tier 0 for a local allow, `replay::check` compares the map
//! with the revisions the daemon published as accepted (a replayed older map is not used locally);
//! tiers 1–3 only ever route or deny more, so they are used as they are.
//!
//! Three steps, because the map's parse and signature are most of what the hook's fast path
//! would cost and most commands are answered the same with or without the map: [`read`] reads the
//! text, `bash.rs` sketches it (`tiermap::sketch`: only the entries whose command word the string
//! names, without the checks that only refuse a map) and asks whether any of them could change
//! this command's answer, and only then [`verify`] parses the whole map and checks its signature.
//! Nothing read unverified ever widens an answer: a map that is not verified is no map.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use cmdgate_policy::tiermap::{self, PinnedKeys, Unverified, VerifiedMap, MAX_MAP_BYTES};

/// Largest pinned-keys file read: a handful of lines.
const MAX_KEYS_BYTES: usize = 64 * 1024;

/// A verified map, or why there is none (for the audit note).
#[derive(Debug)]
pub enum MapState {
    Verified(Box<VerifiedMap>),
    Absent(String),
}

impl MapState {
    pub fn verified(&self) -> Option<&VerifiedMap> {
        match self {
            MapState::Verified(v) => Some(v),
            MapState::Absent(_) => None,
        }
    }
}

/// The map on disk before it is parsed or its signature is checked.
#[derive(Debug)]
pub enum Seen {
    /// Its text; what it says is untrusted until [`verify`].
    Found(String),
    /// No map the hook could use, and why: it would not verify either.
    Absent(String),
}

impl Seen {
    /// The text, untrusted.
    pub fn text(&self) -> Option<&str> {
        match self {
            Seen::Found(t) => Some(t),
            Seen::Absent(_) => None,
        }
    }
}

/// Reads at most `max` bytes of `path` as UTF-8; `Ok(None)` when it does not exist. `size`, the
/// size `lstat` saw if the caller asked, sizes the buffer: one `read` and the one that finds the
/// end, instead of a read per doubling (ten for the starter map). Only a hint: a file that grew
/// since is still read to its end, within `max`.
fn read_small(path: &Path, max: usize, size: Option<u64>) -> io::Result<Option<String>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let hint = size.map_or(0, |s| usize::try_from(s).unwrap_or(max).min(max) + 1);
    let mut buf = Vec::with_capacity(hint);
    file.take(max as u64 + 1).read_to_end(&mut buf)?;
    if buf.len() > max {
        return Err(io::Error::other(format!("larger than {max} bytes")));
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| io::Error::other("not UTF-8"))
}

/// Reads `project_dir/CLAUDE_CMDS.md`, without parsing it or checking its signature. Without a
/// pinned-keys location no map can verify, so it is not even read.
pub fn read(keys_path: Option<&Path>, project_dir: &Path) -> Seen {
    if keys_path.is_none() {
        return Seen::Absent("no pinned-keys location".into());
    }
    let map_path = project_dir.join(tiermap::FILE_NAME);
    // The map is the file at the project root itself: a link (written through, or pointing at a
    // map kept elsewhere) or a file with other names is not it.
    let size = match std::fs::symlink_metadata(&map_path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Seen::Absent(format!("{} is a symbolic link", map_path.display()))
        }
        Ok(m) if std::os::unix::fs::MetadataExt::nlink(&m) > 1 => {
            return Seen::Absent(format!("{} has other hard links", map_path.display()))
        }
        Ok(m) => Some(m.len()),
        Err(_) => None,
    };
    match read_small(&map_path, MAX_MAP_BYTES, size) {
        Ok(Some(t)) => Seen::Found(t),
        Ok(None) => Seen::Absent(format!("no {}", map_path.display())),
        Err(e) => Seen::Absent(format!("{}: {e}", map_path.display())),
    }
}

/// Parses what [`read`] found and checks its signature against the keys at `keys_path`.
pub fn verify(keys_path: Option<&Path>, project_dir: &Path, seen: Seen) -> MapState {
    let map_path = project_dir.join(tiermap::FILE_NAME);
    let unverified = match seen {
        Seen::Found(text) => match Unverified::parse(text) {
            Ok(u) => u,
            Err(diags) => {
                let first = diags.first().map(ToString::to_string).unwrap_or_default();
                return MapState::Absent(format!(
                    "{} does not verify: it is not a valid tier map: {first}",
                    map_path.display()
                ));
            }
        },
        Seen::Absent(why) => return MapState::Absent(why),
    };
    let Some(keys_path) = keys_path else {
        return MapState::Absent("no pinned-keys location".into());
    };
    let keys_text = match read_small(keys_path, MAX_KEYS_BYTES, None) {
        Ok(Some(t)) => t,
        Ok(None) => return MapState::Absent(format!("no pinned keys at {}", keys_path.display())),
        Err(e) => return MapState::Absent(format!("pinned keys {}: {e}", keys_path.display())),
    };
    let keys = match PinnedKeys::parse(&keys_text) {
        Ok(k) => k,
        Err(diags) => {
            let first = diags.first().map(ToString::to_string).unwrap_or_default();
            return MapState::Absent(format!(
                "pinned keys {} are invalid: {first}",
                keys_path.display()
            ));
        }
    };
    match unverified.verify(&keys) {
        Ok(v) => MapState::Verified(Box::new(v)),
        Err(e) => MapState::Absent(format!("{} does not verify: {e}", map_path.display())),
    }
}
