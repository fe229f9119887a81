//! What every mirror the daemon builds — mirrored runs and the test-runs of `direct` entries —
//! hides, and how it judges git: cmdgate's own sockets, config dir, data dir (audit store, keys,
//! published revisions), sandbox state and spool are masked (a script must not talk to the admin
//! socket or read the audit), the operator's `secret_paths` are masked beside the policy's secret
//! table (`~/` is the agent's home: the sandbox expands it with `RunConfig::home`), and a command
//! that is git itself (`policy::decide::protected::git_only`) may leave git's bookkeeping under
//! `.git/` as a clean effect.

use std::path::{Path, PathBuf};

use cmdgate_policy::decide::protected::git_only;
use cmdgate_policy::shell::{analyze, Limits};
use cmdgate_sandbox::{HelperCommand, Privilege, RunConfig};

use crate::config::{Config, Paths};

/// The daemon's part of every mirror's configuration, fixed at start.
#[derive(Debug, Clone, Default)]
pub struct MirrorScope {
    /// cmdgate's own paths, as the mirror's mounts see them (links resolved).
    own: Vec<PathBuf>,
    /// The operator's `secret_paths`, as written in config.toml.
    secret_paths: Vec<String>,
}

impl MirrorScope {
    pub fn new(paths: &Paths, config: &Config) -> MirrorScope {
        let mut own: Vec<PathBuf> = [
            &paths.decide_socket,
            &paths.admin_socket,
            &paths.config_dir,
            &paths.data_dir,
            &paths.db,
            &paths.sandbox_state,
        ]
        .into_iter()
        .chain(paths.spool_dir.as_ref())
        .filter(|p| p.is_absolute() && p.parent().is_some())
        .map(|p| where_it_is(p))
        .collect();
        own.sort();
        own.dedup();
        MirrorScope {
            own,
            secret_paths: config.secret_paths.clone(),
        }
    }

    /// cmdgate's own paths the mirror masks.
    pub fn own(&self) -> &[PathBuf] {
        &self.own
    }

    /// The operator's `secret_paths`, as written in config.toml.
    pub fn secret_paths(&self) -> &[String] {
        &self.secret_paths
    }

    /// Sets `cfg`'s masks, secret paths and git bookkeeping for `command` (the exact string that
    /// runs), and the secret paths its tier-map entry unmasks (`unmask=`, `~/` is `cfg.home`, so
    /// set that first). A mask that contains the workspace masks the rest of its entries (the
    /// sandbox's `RunConfig::masks`), so a data dir above the project does not stop the run.
    pub fn apply(&self, cfg: &mut RunConfig, command: &str, unmask: &[String]) {
        for p in &self.own {
            if !cfg.masks.contains(p) {
                cfg.masks.push(p.clone());
            }
        }
        cfg.mask_secrets = true;
        cfg.secret_paths = self.secret_paths.clone();
        cfg.git_bookkeeping = git_only(&analyze(command, &Limits::default()));
        cfg.unmask = unmask
            .iter()
            .filter_map(|p| match (p.strip_prefix("~/"), &cfg.home) {
                (Some(rest), Some(home)) => Some(home.join(rest)),
                // `~/` without a home to expand it against names nothing.
                (Some(_), None) => None,
                (None, _) => Some(PathBuf::from(p)),
            })
            .collect();
    }
}

/// Which program builds the mirrors (mirrored runs and test-runs alike), and why mirrors cannot
/// be built here (`None`: they can). System mode: the configured `[sandbox] helper` holds the
/// privileges (file capabilities), the daemon none; it must exist. Otherwise the daemon
/// re-executes itself (`own`), so it must be root.
pub(crate) fn mirror_helper(
    configured: Option<&Path>,
    own: HelperCommand,
) -> (HelperCommand, Option<String>) {
    match configured {
        Some(program) => (
            HelperCommand {
                program: program.to_path_buf(),
                args: Vec::new(),
            },
            std::fs::metadata(program)
                .err()
                .map(|e| format!("the mirror helper {} is unusable ({e})", program.display())),
        ),
        None => (
            own,
            match cmdgate_sandbox::detect_privilege() {
                Privilege::Root => None,
                Privilege::UserNamespace => Some(
                    "the daemon is not root and no mirror helper is configured (`[sandbox] \
                     helper`, systemd/README.md)"
                        .into(),
                ),
                Privilege::Unavailable(why) => Some(format!(
                    "the daemon is not root and user namespaces are unavailable ({why})"
                )),
            },
        ),
    }
}

/// `p` with links resolved, as the mirror's mounts reach it (a mount on a link lands on its
/// target, so the mask must be typed by the target); a path that does not exist yet (a socket not
/// bound) with its directory resolved.
fn where_it_is(p: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(p) {
        return real;
    }
    match (p.parent(), p.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| p.to_path_buf()),
        _ => p.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_paths_secret_paths_and_git_are_set() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        std::os::unix::fs::symlink(&real, dir.path().join("data")).expect("symlink");
        let config = Config {
            secret_paths: vec!["~/vault".into()],
            ..Config::default()
        };
        let d = dir.path().to_string_lossy().into_owned();
        let var = |k: &str| match k {
            "CMDGATE_HOME" => Some(format!("{d}/data")),
            "CMDGATE_CONFIG_DIR" => Some(format!("{d}/conf")),
            "CMDGATE_SOCKET" => Some(format!("{d}/data/cmdgate.sock")),
            "HOME" => Some(format!("{d}/home")),
            _ => None,
        };
        let paths = Paths::resolve(&var, &config);
        let scope = MirrorScope::new(&paths, &config);
        let canon = std::fs::canonicalize(dir.path()).expect("canon");
        assert!(
            scope.own().contains(&canon.join("real")),
            "{:?}",
            scope.own()
        );
        assert!(
            scope.own().contains(&canon.join("real/cmdgate.sock")),
            "{:?}",
            scope.own()
        );
        assert!(
            scope.own().contains(&canon.join("conf")),
            "{:?}",
            scope.own()
        );
        let helper = cmdgate_sandbox::HelperCommand {
            program: PathBuf::from("/x"),
            args: vec![],
        };
        let mut cfg = RunConfig::new(PathBuf::from("/ws"), PathBuf::from("/s"), helper);
        cfg.home = Some(PathBuf::from("/home/agent"));
        scope.apply(
            &mut cfg,
            "git add f && git commit -m x",
            &["~/.npmrc".into(), "/srv/token".into()],
        );
        assert_eq!(
            cfg.unmask,
            [
                PathBuf::from("/home/agent/.npmrc"),
                PathBuf::from("/srv/token")
            ]
        );
        assert!(cfg.git_bookkeeping);
        assert_eq!(cfg.secret_paths, ["~/vault"]);
        assert!(cfg.masks.contains(&PathBuf::from("/s")));
        assert!(cfg.masks.contains(&canon.join("real")));
        scope.apply(&mut cfg, "git add f && python3 -c 'x'", &[]);
        assert!(cfg.unmask.is_empty());
        assert!(!cfg.git_bookkeeping);
        let n = cfg.masks.len();
        scope.apply(&mut cfg, "make", &[]);
        assert_eq!(cfg.masks.len(), n, "applied twice, masked once");
    }
}
