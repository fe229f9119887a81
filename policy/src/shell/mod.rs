//! Shell analysis: what would a command string given to Claude Code's Bash tool execute?
//!
//! [`analyze`] turns a command string into an [`Analysis`]: either every simple command that would
//! run (with wrappers such as `sudo`/`env`/`xargs` unwrapped and `bash -c`/`eval` re-entered), or an
//! [`Unanalyzable`] result that no later stage may turn into an allow.

mod types;

pub use types::*;
