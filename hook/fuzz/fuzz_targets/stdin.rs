//! Fuzz the hook's stdin parser: any bytes must give a validated call or an error, never a panic;
//! a call that parses must carry an object `tool_input` and an absolute `cwd`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(call) = cmdgate_hook::input::parse_call(data) {
        assert!(call.tool_input.is_object());
        assert!(call.cwd.starts_with('/'));
    }
    let _ = cmdgate_hook::input::sniff_event(data);
});
