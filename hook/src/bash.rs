//! Bash commands on the fast path: shell analysis, then tier 0 (verified map or built-in list).

use std::path::Path;

use crate::catastrophic;
use crate::config::Config;
use crate::reads::Local;

/// Classifies a Bash `command` string.
pub fn classify(command: &str, _cwd: &Path, _project_dir: &Path, _cfg: &Config) -> Local {
    if let Some(why) = catastrophic::check_source(command) {
        return Local::Catastrophic(why);
    }
    Local::Route("the shell analyzer is not wired into this hook build yet".into())
}
