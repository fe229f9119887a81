//! Fuzz the parser of the daemon's HTTP status line and headers: never a panic, and a parsed head
//! always has a status in 100..=599.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((status, _len)) = cmdgate_hook::client::parse_head(data) {
        assert!((100..=599).contains(&status));
    }
});
