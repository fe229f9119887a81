//! One-level directory listings for the policy's recursive-read rule 3 (the policy crate does no
//! IO): asked for only when a recursive search of the working directory or project root is
//! otherwise a read.

use cmdgate_policy::shell::read::MAX_LISTING;

/// The entry names of `dir`, or `None` when it (or an entry) cannot be read or it has more than
/// `MAX_LISTING` entries. Names only: links are not followed into.
pub fn list_dir(dir: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).ok()? {
        if out.len() == MAX_LISTING {
            return None;
        }
        out.push(entry.ok()?.file_name().to_string_lossy().into_owned());
    }
    Some(out)
}
