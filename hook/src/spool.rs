//! The hook's append-only JSONL spool: one `SpoolRecord` per line, one `write(2)` per line on an
//! `O_APPEND` descriptor. Best effort by design: a missing directory, a full disk or a read-only file
//! system costs the audit a line, never the answer (the answer is printed before the spool is written).

use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use cmdgate_policy::wire::{SpoolEntry, SpoolRecord, SPOOL_FILE, WIRE_VERSION};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Appends `entry` to `dir/hook.jsonl`, creating `dir` (0700) and the file (0600) if needed.
pub fn append(dir: &Path, entry: SpoolEntry) -> io::Result<()> {
    let record = SpoolRecord {
        v: WIRE_VERSION,
        at_ms: now_ms(),
        entry,
    };
    let mut line = serde_json::to_vec(&record).map_err(io::Error::other)?;
    line.push(b'\n');
    let path = dir.join(SPOOL_FILE);
    let open = || {
        OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
    };
    // The directory exists on every call but the first: made only when the open says it is not.
    let mut file = match open() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
            open()?
        }
        other => other?,
    };
    // One write: with O_APPEND the kernel places it at the end atomically, so concurrent hooks never
    // interleave their lines. A short write (disk full) leaves a torn last line the reader skips.
    let n = file.write(&line)?;
    if n != line.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short write to the spool",
        ));
    }
    Ok(())
}
