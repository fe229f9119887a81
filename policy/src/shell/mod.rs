//! Shell analysis: what would a command string given to Claude Code's Bash tool execute?
//!
//! [`analyze`] turns a command string into an [`Analysis`]: either every simple command that would
//! run (with wrappers such as `sudo`/`env`/`xargs` unwrapped and `bash -c`/`eval` re-entered), or an
//! [`Unanalyzable`] result that no later stage may turn into an allow. [`read::classify`] then says
//! whether a parsed script is a *pure read* the hook may allow on its own.

mod analyze;
pub mod read;
mod types;
mod words;
mod wrappers;

pub use analyze::analyze;
pub use types::*;
pub use wrappers::command_name;
