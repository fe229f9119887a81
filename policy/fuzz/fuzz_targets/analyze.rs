//! Fuzz target: shell analysis and read classification never panic, and what the analyzer could
//! not see is never a read.
#![no_main]

use cmdgate_policy::shell::read::{classify_analysis, ReadPolicy, ReadVerdict};
use cmdgate_policy::shell::{analyze, Analysis, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cmd = String::from_utf8_lossy(data);
    let analysis = analyze(&cmd, &Limits::default());
    let mut policy = ReadPolicy::new("/home/agent");
    policy.cwd = Some("/home/agent/project".to_owned());
    let verdict = classify_analysis(&analysis, &policy);
    if matches!(analysis, Analysis::Unanalyzable(_)) {
        assert_ne!(verdict, ReadVerdict::PureRead);
    }
});
