//! The local classification of a PreToolUse call: a read the hook may allow by itself, a catastrophic
//! command (matters only under the escape hatch), a command that cannot be analysed, or something the
//! daemon must decide.

use std::path::Path;

use serde_json::Value;

use crate::config::Config;
use crate::input::HookCall;
use cmdgate_policy::shell::read::recursive::{claude_grep, claude_grep_globs};

use crate::secrets::{normalize, policy_secrets, Secrets};

/// What the hook can say about a call without the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Local {
    /// A pure read: allow locally.
    Read {
        /// Which list made it a read (for the reason and the spool).
        rule: String,
        /// The verified tier map's revision when tier 0 came from it.
        tiermap_revision: Option<u64>,
    },
    /// On the built-in catastrophic list or tier 3 of the verified map.
    Catastrophic(String),
    /// The shell analysis refused the command string.
    Unanalyzable(String),
    /// Not a read: the daemon decides. The note says why, for the audit.
    Route(String),
}

impl Local {
    /// The note sent to the daemon as `hook_note`.
    pub fn note(&self) -> String {
        match self {
            Local::Read { rule, .. } => format!("read ({rule})"),
            Local::Catastrophic(why) => format!("catastrophic: {why}"),
            Local::Unanalyzable(why) => format!("unanalysable: {why}"),
            Local::Route(why) => why.clone(),
        }
    }
}

fn str_field<'a>(input: &'a Value, key: &str) -> Option<&'a str> {
    input.get(key).and_then(Value::as_str)
}

/// Classifies one PreToolUse call.
pub fn classify(call: &HookCall, cfg: &Config, project_dir: &Path) -> Local {
    let cwd = Path::new(&call.cwd);
    let input = &call.tool_input;
    if call.tool_name != "Bash" {
        if let Some(local) = crate::own::tool_call(call, cfg, project_dir) {
            return local;
        }
    }
    if call.tool_name == "Bash" {
        return match str_field(input, "command") {
            Some(command) => crate::bash::classify(command, cwd, project_dir, cfg),
            None => Local::Route("Bash call without a string `command`".into()),
        };
    }
    let home = cfg
        .home
        .as_deref()
        .map_or_else(|| "/nonexistent".to_string(), |h| h.display().to_string());
    let policy = policy_secrets(&home, &cfg.extra_secrets, cfg.passwd_home.as_deref());
    let secrets = Secrets {
        home: cfg.home.as_deref(),
        paths: &policy,
    };
    match call.tool_name.as_str() {
        "Read" => match str_field(input, "file_path") {
            Some(p) if !secrets.is_secret(&normalize(p, cwd, secrets.home)) => {
                read("Read outside secret paths")
            }
            Some(p) => Local::Route(format!("Read of a secret path {p}")),
            None => Local::Route("Read without a string `file_path`".into()),
        },
        "LS" => match str_field(input, "path") {
            Some(p) if !secrets.is_secret(&normalize(p, cwd, secrets.home)) => {
                read("LS outside secret paths")
            }
            Some(p) => Local::Route(format!("LS of a secret path {p}")),
            None => Local::Route("LS without a string `path`".into()),
        },
        "Glob" => {
            let base = normalize(str_field(input, "path").unwrap_or("."), cwd, secrets.home);
            match str_field(input, "pattern") {
                Some(pattern)
                    if !secrets.is_secret(&base)
                        && !secrets.pattern_names_secret(pattern, &base) =>
                {
                    read("Glob outside secret paths")
                }
                Some(pattern) => Local::Route(format!("Glob {pattern} may reach a secret path")),
                None => Local::Route("Glob without a string `pattern`".into()),
            }
        }
        "Grep" => {
            let base = normalize(str_field(input, "path").unwrap_or("."), cwd, secrets.home);
            let glob = str_field(input, "glob");
            let glob_secret = glob.is_some_and(|g| {
                claude_grep_globs(g)
                    .iter()
                    .any(|part| secrets.pattern_names_secret(part, &base))
            });
            if glob_secret {
                return Local::Route(format!("Grep in {} may read a secret path", base.display()));
            }
            if !base.is_dir() {
                // One file (or nothing): no tree to search.
                return if secrets.is_secret(&base) {
                    Local::Route(format!("Grep in {} may read a secret path", base.display()))
                } else {
                    read("Grep outside secret paths")
                };
            }
            // The hook's own look at the tree (anchored secrets below it, secret names at its top).
            let hook_refuses = secrets.tree_has_secret(&base);
            // The recursive rule the daemon applies too, on the path as given and as resolved; its
            // reason names the secret entry, so it is preferred.
            let project = project_dir.display().to_string();
            let cwd_s = normalize(".", cwd, secrets.home).display().to_string();
            let real = std::fs::canonicalize(&base).unwrap_or_else(|_| base.clone());
            let places = if real == base {
                vec![&base]
            } else {
                vec![&base, &real]
            };
            // The listing (rule 3) is made only when nothing else refuses the search.
            let listing = crate::secrets::list_dir;
            for place in places {
                let place = place.display().to_string();
                if let Err(risk) = claude_grep(
                    &policy,
                    &place,
                    glob,
                    &cwd_s,
                    Some(&project),
                    Some(&listing),
                ) {
                    return Local::Route(format!(
                        "Grep searches {place} recursively, which {}",
                        risk.why()
                    ));
                }
            }
            if hook_refuses {
                return Local::Route(format!("Grep in {} may read a secret path", base.display()));
            }
            read("Grep outside secret paths")
        }
        other => Local::Route(format!("{other} is not a read")),
    }
}

fn read(rule: &str) -> Local {
    Local::Read {
        rule: rule.to_string(),
        tiermap_revision: None,
    }
}
