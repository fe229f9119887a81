//! Canonical bytes of a tier map: exactly what a signature covers, and the message sent to the signer.
//!
//! Canonicalisation (documented in `docs/tiermap.md`) is deliberately small:
//!
//! 1. split the text into lines at LF;
//! 2. remove every carriage return at the end of a line (so CRLF and LF files sign alike);
//! 3. remove, from the end, every line that is empty or looks like a signature trailer;
//! 4. join the remaining lines, each followed by exactly one LF.
//!
//! Nothing else is normalised: trailing spaces, tabs, blank lines inside the text, a byte-order mark,
//! Unicode forms — all of it is signed as is, so changing any of it breaks the signature.

use sha2::{Digest, Sha256};
use std::fmt;

/// Prefix of the message handed to the signer; the rest is the lowercase hex SHA-256 of the
/// canonical bytes. The prefix keeps a tier-map signature from meaning anything in another
/// protocol that might share the transit key, and versions the scheme.
pub const SIGNING_DOMAIN: &str = "cmdgate-tiermap-v1 sha256:";

/// Whether a line looks like a signature trailer (well-formed or not). Generous on purpose: every
/// such line is either the one trailer at the end, or an error.
pub(crate) fn is_trailer_like(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("<!--") && t.contains("cmdgate-signature")
}

/// Finds LF bytes with SIMD without asking the CPU what it supports. The `memchr` crate's
/// top-level functions detect AVX2 at their first call (std's feature detection: ~7 `cpuid`
/// instructions), and a virtual machine traps every `cpuid` to its hypervisor: ~9 µs each on the
/// development VM, ~60 µs of a hook call that splits the project's map (docs/benchmarks.md, "Where
/// the time over the floor goes"). SSE2 is part of x86-64, known at compile time; elsewhere the
/// portable word-at-a-time search.
enum Newlines {
    #[cfg(target_arch = "x86_64")]
    Sse2(memchr::arch::x86_64::sse2::memchr::One),
    Words(memchr::arch::all::memchr::One),
}

impl Newlines {
    fn new() -> Newlines {
        #[cfg(target_arch = "x86_64")]
        if let Some(one) = memchr::arch::x86_64::sse2::memchr::One::new(b'\n') {
            return Newlines::Sse2(one);
        }
        Newlines::Words(memchr::arch::all::memchr::One::new(b'\n'))
    }

    fn find(&self, b: &[u8]) -> Option<usize> {
        match self {
            #[cfg(target_arch = "x86_64")]
            Newlines::Sse2(one) => one.find(b),
            Newlines::Words(one) => one.find(b),
        }
    }

    fn count(&self, b: &[u8]) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Newlines::Sse2(one) => one.count(b),
            Newlines::Words(one) => one.count(b),
        }
    }
}

/// The lines of `text` as canonicalisation sees them: split at LF, trailing CRs removed. Line `i`
/// of the result is line `i + 1` of the file.
pub(crate) fn lines(text: &str) -> Vec<&str> {
    // `text.split('\n')`, found with SIMD (the hook splits the project's map on every Bash call:
    // a `char` search cost ~5 instructions a byte, a sixth of the call's look at the map).
    let b = text.as_bytes();
    let newlines = Newlines::new();
    let mut out = Vec::with_capacity(newlines.count(b) + 1);
    let mut start = 0;
    loop {
        let end = newlines.find(&b[start..]).map_or(b.len(), |at| start + at);
        let mut line = &b[start..end];
        while let [rest @ .., b'\r'] = line {
            line = rest;
        }
        // Cut before an LF and CRs (ASCII): at a character boundary.
        out.push(&text[start..start + line.len()]);
        if end == b.len() {
            return out;
        }
        start = end + 1;
    }
}

/// How many leading lines survive canonicalisation (trailing empty and trailer-like lines removed).
pub(crate) fn body_len(lines: &[&str]) -> usize {
    let mut n = lines.len();
    while n > 0 && (lines[n - 1].is_empty() || is_trailer_like(lines[n - 1])) {
        n -= 1;
    }
    n
}

/// The canonical text: see the module documentation. Idempotent, and unaffected by appending a
/// trailer line.
pub fn canonical_text(text: &str) -> String {
    let lines = lines(text);
    let n = body_len(&lines);
    let mut out = String::with_capacity(text.len() + 1);
    for l in &lines[..n] {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// The canonical bytes a signature covers (the UTF-8 of [`canonical_text`]).
pub fn canonical_bytes(text: &str) -> Vec<u8> {
    canonical_text(text).into_bytes()
}

/// SHA-256 of the canonical bytes: identifies a map's content independently of its signature.
pub fn content_hash(text: &str) -> ContentHash {
    ContentHash(Sha256::digest(canonical_bytes(text)).into())
}

/// The exact bytes to send to the signer (Vault transit, or the development signer):
/// `cmdgate-tiermap-v1 sha256:<64 lowercase hex digits>`. Signing a fixed-size digest keeps every
/// transit request small whatever the map's size, and lets an operator recompute it by hand.
pub fn signing_message(text: &str) -> Vec<u8> {
    message_for(&content_hash(text))
}

pub(crate) fn message_for(hash: &ContentHash) -> Vec<u8> {
    format!("{SIGNING_DOMAIN}{hash}").into_bytes()
}

/// A SHA-256 content hash of a map's canonical bytes. Displays as lowercase hex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash(pub [u8; 32]);

impl ContentHash {
    /// Lowercase hex, 64 characters.
    pub fn to_hex(&self) -> String {
        self.to_string()
    }

    /// Parses 64 hex digits (either case); `None` for anything else.
    pub fn from_hex(s: &str) -> Option<ContentHash> {
        if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(ContentHash(out))
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::lines;
    use proptest::prelude::*;

    /// What `lines` must equal: split at LF, every trailing CR removed.
    fn reference(text: &str) -> Vec<&str> {
        text.split('\n').map(|l| l.trim_end_matches('\r')).collect()
    }

    #[test]
    fn lines_of_edge_cases() {
        for text in [
            "",
            "\n",
            "\r",
            "\r\n",
            "a\r\r\n\rb\r",
            "\n\n",
            "a",
            "é\r\né",
            "\r\r\r",
        ] {
            assert_eq!(lines(text), reference(text), "{text:?}");
        }
    }

    proptest! {
        #[test]
        fn lines_split_as_the_char_search_did(text in "[a\r\n é#-]{0,80}") {
            prop_assert_eq!(lines(&text), reference(&text));
        }
    }
}
