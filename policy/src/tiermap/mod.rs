//! The tier map `CLAUDE_CMDS.md`: parsing, canonical bytes, signature trailer, verification.
//!
//! The format is specified in `docs/tiermap.md`. In short:
//!
//! - [`parse`] turns the text into a [`TierMap`] or every [`Diagnostic`] with its line (fail closed).
//! - [`canonical_bytes`] defines exactly which bytes a signature covers; [`signing_message`] is what
//!   is sent to the signer (a domain-separated SHA-256 digest of the canonical bytes).
//! - [`verify`] checks the trailer's signature against [`PinnedKeys`] and only then parses the map.
//! - [`check_revision`] rejects replayed (older, or same-revision-different-content) maps.
//! - [`published`] is the daemon's record of accepted revisions, which the hook's fast path reads.
//! - [`Snapshot`] is what the decision engine sees: a verified map, or read-only with a reason.
//!
//! Everything here is pure: text in, values out.

mod canonical;
mod examples;
pub mod expansion;
mod keys;
mod parse;
mod pattern;
pub mod published;
mod starter;
mod verify;

pub use canonical::{
    canonical_bytes, canonical_text, content_hash, signing_message, ContentHash, SIGNING_DOMAIN,
};
pub use keys::{PinError, PinnedKey, PinnedKeys, MAX_KEY_NAME_LEN, PINNED_KEYS_FILE};
pub use parse::{
    parse, sketch, Entry, Example, SandboxOptions, Sketch, TierMap, MAX_MAP_BYTES, MAX_TIMEOUT,
};
pub use pattern::{Pattern, PatternError, PatternWord};
pub use starter::STARTER_MAP;
pub use verify::{
    attach_signature, check_revision, sign, verify, ReplayError, SeenRevision, Snapshot, Trailer,
    TrailerError, Unverified, VerifiedMap, VerifyError, TRAILER_PREFIX, TRAILER_SUFFIX,
};

use serde::{Deserialize, Serialize};
use std::fmt;

/// The name the tier map has at the project root; diagnostics and rule names use it.
pub const FILE_NAME: &str = "CLAUDE_CMDS.md";

/// How much a command is trusted. Ordered from most to least permissive, so `max` is "strictest".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Allowed by the hook locally, without a test-run.
    Read = 0,
    /// Test-run in the container mirror; allowed when the run is clean.
    Sandbox = 1,
    /// Needs a person.
    Ask = 2,
    /// Never runs; nothing learned or remembered overrides it.
    Deny = 3,
}

impl Tier {
    /// All tiers, most permissive first.
    pub const ALL: [Tier; 4] = [Tier::Read, Tier::Sandbox, Tier::Ask, Tier::Deny];

    /// The tier's number as written in a heading (`## Tier 2 — ask`).
    pub fn number(self) -> u8 {
        self as u8
    }

    /// The tier's name as written in a heading.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Read => "read",
            Tier::Sandbox => "sandbox",
            Tier::Ask => "ask",
            Tier::Deny => "deny",
        }
    }

    /// The tier with this heading number, if any.
    pub fn from_number(n: u8) -> Option<Tier> {
        match n {
            0 => Some(Tier::Read),
            1 => Some(Tier::Sandbox),
            2 => Some(Tier::Ask),
            3 => Some(Tier::Deny),
            _ => None,
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tier {} ({})", self.number(), self.name())
    }
}

/// One problem found in an operator file, located by line (1-based) so the operator can fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Which file the line belongs to (`CLAUDE_CMDS.md`, or the pinned-keys file's name).
    pub file: String,
    /// 1-based line number; 0 only for whole-file problems (for example, the file is too large).
    pub line: usize,
    /// Lowercase fragment saying what is wrong and, where useful, how to fix it.
    pub message: String,
}

impl Diagnostic {
    pub(crate) fn new(file: &str, line: usize, message: impl Into<String>) -> Self {
        Diagnostic {
            file: file.to_owned(),
            line,
            message: message.into(),
        }
    }

    /// The same diagnostic attributed to another file name (for example, the path the operator gave).
    pub fn in_file(mut self, file: &str) -> Self {
        self.file = file.to_owned();
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

impl std::error::Error for Diagnostic {}
