//! Byte comparison eight bytes at a time: [`compare`], and on musl the C `memcmp` and `bcmp`
//! built on it, which replace the C runtime's in the hook's static link; and [`rsplit_slash`], a
//! path split at its last `/` by a byte scan.
//!
//! Why: musl's `memcmp` (and its `bcmp`, which calls it) compares one byte per loop step, about
//! five instructions a byte; every `==` or `cmp` of Rust strings and byte slices ends there. The
//! hook compares paths tens of bytes long hundreds of times a call (cmdgate's own paths, the
//! memo's keys, the walks' prefixes, sorting): ~160 k instructions of the 400-character compound
//! read were musl's loop (docs/benchmarks.md, "issue 17, part 1, session 10"). glibc's are
//! vector code; on glibc nothing here is exported (its `libc.a` defines them in objects the link
//! pulls in anyway, so two definitions would clash).
//!
//! How the override works: a static link resolves `memcmp` from the first object that defines
//! it, and the Rust objects come before `libc.a` on the link line, so musl's `memcmp.o` and
//! `bcmp.o` (each defines only that one function) are not pulled in. `nm` of the release hook
//! shows one `memcmp`, this one (docs/benchmarks.md gives the check). The functions never call
//! `memcmp` or `bcmp` themselves: their loop reads `u64`s, which the compiler does not turn back
//! into a library call (the disassembly is checked in the same section).
#![cfg_attr(
    target_env = "musl",
    expect(
        unsafe_code,
        reason = "`memcmp`/`bcmp` are C functions over raw pointers, exported with `no_mangle`"
    )
)]

use std::cmp::Ordering;

/// The order of `a` and `b` as C's `memcmp` gives it: bytes compared as unsigned, the first
/// difference decides; -1, 0 or 1. Both must have the same length (the C functions' `n`).
#[inline]
pub fn compare(a: &[u8], b: &[u8]) -> i32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut i = 0;
    while i + 8 <= n {
        let x = word(a, i);
        let y = word(b, i);
        if x != y {
            return order(x.cmp(&y));
        }
        i += 8;
    }
    if n >= 8 {
        // The last eight bytes, overlapping what was compared (all equal there): the first
        // difference in them is the first of the whole.
        let x = word(a, n - 8);
        let y = word(b, n - 8);
        return order(x.cmp(&y));
    }
    while i < n {
        if a[i] != b[i] {
            return order(a[i].cmp(&b[i]));
        }
        i += 1;
    }
    0
}

/// `s.rsplit_once('/')`, by a plain backward scan over the bytes: `str`'s char searcher costs
/// ~150 instructions a call, and the hook splits every word and every looked-up path.
#[inline]
pub fn rsplit_slash(s: &str) -> Option<(&str, &str)> {
    let i = s.bytes().rposition(|b| b == b'/')?;
    Some((&s[..i], &s[i + 1..]))
}

/// Eight bytes of `s` from `at`, the first the most significant (so integer order is byte order).
#[inline(always)]
fn word(s: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&s[at..at + 8]);
    u64::from_be_bytes(w)
}

#[inline(always)]
fn order(o: Ordering) -> i32 {
    match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }
}

/// C's `memcmp`, for the musl hook (see the module's comment).
///
/// # Safety
///
/// C's contract: `a` and `b` are readable for `n` bytes each.
#[cfg(target_env = "musl")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> std::ffi::c_int {
    if n == 0 {
        // C allows any pointers with `n == 0`; a slice may not be made from a null one.
        return 0;
    }
    // SAFETY: the caller guarantees `n` readable bytes at `a` and at `b` (non-null since
    // `n > 0`); they are only read, while the call lasts.
    let (a, b) = unsafe {
        (
            std::slice::from_raw_parts(a, n),
            std::slice::from_raw_parts(b, n),
        )
    };
    compare(a, b)
}

/// C's `bcmp` (zero when equal, else nonzero): what `==` of byte slices calls.
///
/// # Safety
///
/// As for [`memcmp`].
#[cfg(target_env = "musl")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> std::ffi::c_int {
    // SAFETY: the caller's contract is `memcmp`'s.
    unsafe { memcmp(a, b, n) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The byte loop C's `memcmp` is defined by.
    fn bytewise(a: &[u8], b: &[u8]) -> i32 {
        for (x, y) in a.iter().zip(b) {
            if x != y {
                return if x < y { -1 } else { 1 };
            }
        }
        0
    }

    /// Two slices of one length that agree up to a chosen byte, then differ (or not) there.
    fn pair() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
        (
            prop::collection::vec(any::<u8>(), 0..80),
            any::<usize>(),
            any::<u8>(),
        )
            .prop_map(|(a, at, v)| {
                let mut b = a.clone();
                if !b.is_empty() {
                    let i = at % b.len();
                    b[i] = v;
                }
                (a, b)
            })
    }

    #[test]
    fn rsplit_slash_is_rsplit_once() {
        for w in ["", "/", "a", "/bin/rm", "./x", "a/b/", "//x", "é/ü", "a/é"] {
            assert_eq!(rsplit_slash(w), w.rsplit_once('/'), "{w}");
        }
    }

    proptest! {
        #[test]
        fn compare_is_the_byte_loop((a, b) in pair()) {
            prop_assert_eq!(compare(&a, &b), bytewise(&a, &b));
            prop_assert_eq!(compare(&b, &a), bytewise(&b, &a));
        }

        #[test]
        fn compare_of_unrelated_bytes(a in prop::collection::vec(any::<u8>(), 0..40),
                                      b in prop::collection::vec(any::<u8>(), 0..40)) {
            let n = a.len().min(b.len());
            prop_assert_eq!(compare(&a[..n], &b[..n]), bytewise(&a[..n], &b[..n]));
        }
    }

    /// Every length up to 40 with one difference at every position, both signs (the high bit
    /// too: bytes compare unsigned), and from every alignment.
    #[test]
    fn every_length_and_position() {
        let base: Vec<u8> = (0..48u8).map(|i| i.wrapping_mul(37)).collect();
        for off in 0..8 {
            for n in 0..=40 {
                let a = &base[off..off + n];
                assert_eq!(compare(a, a), 0);
                for i in 0..n {
                    for v in [0u8, 0x7f, 0x80, 0xff] {
                        let mut b = a.to_vec();
                        b[i] = v;
                        assert_eq!(compare(a, &b), bytewise(a, &b), "n {n} at {i} to {v}");
                    }
                }
            }
        }
    }

    /// The exported functions are the ones `==` and `cmp` of byte slices reach in this test
    /// binary (linked against musl): they answer as the byte loop does.
    #[cfg(target_env = "musl")]
    #[test]
    fn exported_functions_answer_as_the_byte_loop() {
        let a = b"/home/me/project/src/main.rs".to_vec();
        for i in 0..a.len() {
            let mut b = a.clone();
            b[i] = b[i].wrapping_add(1);
            // SAFETY: both are `a.len()` bytes long.
            let got = unsafe { memcmp(a.as_ptr(), b.as_ptr(), a.len()) };
            assert_eq!(got, bytewise(&a, &b));
            // SAFETY: as above.
            assert_ne!(unsafe { bcmp(a.as_ptr(), b.as_ptr(), a.len()) }, 0);
            assert_eq!(a.cmp(&b), std::cmp::Ordering::Less);
            assert!(a != b);
        }
        // SAFETY: zero bytes are read; C allows null pointers then.
        assert_eq!(unsafe { memcmp(std::ptr::null(), std::ptr::null(), 0) }, 0);
    }
}
