//! Property tests for shell analysis and read classification: no input makes the analyzer panic,
//! and nothing the analyzer could not fully see is ever classified as a read.

use cmdgate_policy::shell::read::{classify, classify_analysis, ReadPolicy, ReadVerdict};
use cmdgate_policy::shell::{analyze, Analysis, Limits, Word};
use proptest::prelude::*;

fn policy() -> ReadPolicy<'static> {
    ReadPolicy::new("/home/agent")
}

include!("soup_atoms.rs");

/// Shell soup: up to 40 of [`SOUP_ATOMS`] joined by spaces.
fn shellish() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(SOUP_ATOMS.to_vec());
    prop::collection::vec(atoms, 0..40).prop_map(|v| v.join(" "))
}

fn all_static_argv0(a: &Analysis) -> bool {
    match a {
        Analysis::Parsed(s) => s
            .commands
            .iter()
            .all(|c| !matches!(c.argv.first(), Some(Word::Dynamic(_)))),
        Analysis::Unanalyzable(_) => true,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Arbitrary Unicode strings never panic the analyzer, and classifying the result never panics.
    #[test]
    fn analyze_never_panics_on_strings(s in any::<String>()) {
        let a = analyze(&s, &Limits::default());
        let _ = classify_analysis(&a, &policy());
    }

    /// Arbitrary bytes, decoded lossily as the hook would, never panic the analyzer.
    #[test]
    fn analyze_never_panics_on_bytes(b in prop::collection::vec(any::<u8>(), 0..400)) {
        let s = String::from_utf8_lossy(&b);
        let a = analyze(&s, &Limits::default());
        let _ = classify_analysis(&a, &policy());
    }

    /// Shell-like soup never panics, and is deterministic.
    #[test]
    fn analyze_shellish_is_deterministic(s in shellish()) {
        let a = analyze(&s, &Limits::default());
        let b = analyze(&s, &Limits::default());
        prop_assert_eq!(&a, &b);
        let _ = classify_analysis(&a, &policy());
    }

    /// An unanalyzable string is never a read.
    #[test]
    fn unanalyzable_is_never_read(s in shellish()) {
        let a = analyze(&s, &Limits::default());
        if let Analysis::Unanalyzable(_) = a {
            prop_assert_ne!(classify_analysis(&a, &policy()), ReadVerdict::PureRead);
        }
    }

    /// A script with a dynamic command word is never a read.
    #[test]
    fn dynamic_command_is_never_read(s in shellish()) {
        let a = analyze(&s, &Limits::default());
        if let Analysis::Parsed(script) = &a {
            if !all_static_argv0(&a) {
                prop_assert_ne!(classify(script, &policy()), ReadVerdict::PureRead);
            }
        }
    }

    /// Appending `rm x` on its own line to anything makes it not a read. (Two newlines: a trailing
    /// backslash joins the next line into the last command, legitimately.)
    #[test]
    fn appended_write_is_never_read(s in shellish()) {
        let cmd = format!("{s}\n\nrm x");
        let a = analyze(&cmd, &Limits::default());
        prop_assert_ne!(classify_analysis(&a, &policy()), ReadVerdict::PureRead);
    }

    /// Tight limits are honoured: a tiny limit never yields more commands than allowed.
    #[test]
    fn limits_are_honoured(s in shellish(), max in 1usize..5) {
        let limits = Limits { max_len: 4096, max_depth: 2, max_commands: max };
        if let Analysis::Parsed(script) = analyze(&s, &limits) {
            prop_assert!(script.commands.len() <= max);
        }
    }
}
