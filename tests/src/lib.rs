//! cmdgate-tests: end-to-end tests that drive the real binaries. Helpers live here (finding and
//! building workspace binaries, a scripted fake of the Anthropic Messages API, running the real
//! Claude Code CLI in a throwaway workspace, a real desktop notification server); the tests are
//! under `tests/tests/`.

pub mod bins;
pub mod browser;
pub mod claude;
pub mod desktop;
pub mod fake_api;
pub mod fake_reviewer;
pub mod gate;
pub mod proc;
pub mod system;
