//! The stable train/test split and the dedup key, both from a hash of the normalised command.
//!
//! The normalised command is the engine's [`canonical_key`] for a Bash command (so `ls  -la` and
//! `ls '-la'` are one command), with secrets redacted (so two commands that differ only in a token
//! are one command, and land in the same split: no leak from train to test through a rotated key),
//! hashed with SHA-256. The split compares the first 8 bytes, big-endian, with `train × 2^64`: the
//! same command gets the same split on every run and machine, whatever the row order or filters.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use cmdgate_policy::decide::canonical_key;
use cmdgate_policy::shell::{self, Analysis, Limits};

use super::redact::redact;

/// Which side of the split an example is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    Train,
    Test,
}

/// The normalised, redacted form of a request's command: the canonical key for an analysable Bash
/// command; whitespace-collapsed text otherwise, prefixed with the tool for non-Bash tools.
pub fn normalized_command(tool: &str, command: &str) -> String {
    let normal = match tool {
        "Bash" => match shell::analyze(command, &Limits::default()) {
            Analysis::Parsed(script) => canonical_key(&script),
            Analysis::Unanalyzable(_) => collapse(command),
        },
        _ => format!("{tool}\t{}", collapse(command)),
    };
    redact(&normal).0
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// SHA-256 of the normalised command, lower-case hex: the record's `command_key`.
pub fn command_key(normalized: &str) -> String {
    hex(&Sha256::digest(normalized.as_bytes()))
}

/// The split of a command: `train` when the first 8 bytes of its SHA-256 (big-endian) are below
/// `train_fraction × 2^64`. `1.0` puts everything in train, `0.0` everything in test.
pub fn split_for(normalized: &str, train_fraction: f64) -> Split {
    let digest = Sha256::digest(normalized.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let h = u128::from(u64::from_be_bytes(first));
    // f64 → u128 saturates; NaN becomes 0 (everything test), which the CLI refuses before here.
    let threshold = (train_fraction.clamp(0.0, 1.0) * 18_446_744_073_709_551_616.0) as u128;
    if h < threshold {
        Split::Train
    } else {
        Split::Test
    }
}

/// Two examples are duplicates when they have the same normalised command and the same verdict:
/// the first 16 bytes of SHA-256 over both (the exporter keeps a set of these).
pub fn dedup_key(normalized: &str, verdict: &str) -> u128 {
    let mut h = Sha256::new();
    h.update(normalized.as_bytes());
    h.update([0]);
    h.update(verdict.as_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_be_bytes(first)
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}
