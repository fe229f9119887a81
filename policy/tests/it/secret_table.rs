//! The one secret-path table (`cmdgate_policy::secrets`), tested per category through every path
//! that consults it: the compiled list, the Bash read classifier (`cat`, `grep -r`), and the
//! daemon's decision for Claude Code's Read tool. The hook runs the same table through its Read and
//! Bash paths in `hook/tests/cli/secret_table.rs`. Also: environment dumps are secret reads, and no
//! second list of secret paths exists anywhere in the workspace's sources.

use std::collections::BTreeSet;
use std::path::Path;

use cmdgate_policy::decide::{decide, Context, RuleSet, Step, Tool};
use cmdgate_policy::secrets::{
    secret_env_name, Category, SecretPaths, NOT_SECRET_NAMES, SECRET_PATTERNS, SECRET_TABLE,
};
use cmdgate_policy::shell::read::{classify_analysis, NotReadReason, ReadPolicy, ReadVerdict};
use cmdgate_policy::shell::{analyze, Limits};
use cmdgate_policy::tiermap::{PinnedKeys, Snapshot};

const HOME: &str = "/home/agent";
const PROJECT: &str = "/home/agent/proj";

/// A concrete path an entry covers: `*`/`?` filled in, `~` expanded, a file name placed in the
/// project.
fn example(pattern: &str) -> String {
    let filled = pattern.replace(['*', '?'], "x");
    if let Some(rest) = filled.strip_prefix("~/") {
        format!("{HOME}/{rest}")
    } else if filled.starts_with('/') {
        filled
    } else {
        format!("{PROJECT}/sub/{filled}")
    }
}

fn bash_verdict(cmd: &str) -> ReadVerdict {
    let mut p = ReadPolicy::new(HOME);
    p.cwd = Some(PROJECT.to_owned());
    p.project = Some(PROJECT.to_owned());
    classify_analysis(&analyze(cmd, &Limits::default()), &p)
}

/// The shell spelling of a path (single-quoted: examples may hold spaces).
fn quoted(path: &str) -> String {
    format!("'{path}'")
}

#[track_caller]
fn assert_secret_read(cmd: &str) {
    match bash_verdict(cmd) {
        ReadVerdict::NotRead { reason, .. } => assert!(
            reason.reads_secret(),
            "`{cmd}` is refused, but not as a secret read: {reason}"
        ),
        ReadVerdict::PureRead => panic!("`{cmd}` must not be a read"),
    }
}

fn read_tool_verb(path: &str) -> &'static str {
    let snapshot = Snapshot::load(None, &PinnedKeys::new(), None);
    let rules = RuleSet::default();
    let policy = ReadPolicy::new(HOME);
    let own: Vec<String> = Vec::new();
    let tool = Tool::Read {
        tool: "Read".into(),
        path: path.into(),
    };
    let step = decide(
        cmdgate_policy::decide::Request {
            tool: &tool,
            project_root: PROJECT,
            cwd: PROJECT,
        },
        Context {
            snapshot: &snapshot,
            rules: &rules,
            breaker_open: false,
            read_policy: &policy,
            limits: Limits::default(),
            home: HOME,
            own_paths: &own,
        },
    );
    match step {
        Step::Decided(d) => d.verb(),
        Step::TestRun(_) => "test-run",
    }
}

/// Every entry of one category: the compiled list, `cat`, a file under it, and the Read tool.
fn category(cat: Category) {
    let list = SecretPaths::builtin::<&str>(HOME, &[]);
    let entries: Vec<_> = SECRET_TABLE.iter().filter(|e| e.category == cat).collect();
    assert!(!entries.is_empty(), "{cat:?} has no entries");
    for e in entries {
        let path = example(e.pattern);
        assert!(
            list.matches(&path, &[], false),
            "{cat:?} {}: {path} is not secret",
            e.pattern
        );
        assert!(
            list.matches(&format!("{path}/inner"), &[], false),
            "{cat:?} {}: below {path} is not secret",
            e.pattern
        );
        assert_secret_read(&format!("cat {}", quoted(&path)));
        assert_secret_read(&format!("head -5 -- {}", quoted(&path)));
        assert_eq!(
            read_tool_verb(&path),
            "ask",
            "Read of {path} ({})",
            e.pattern
        );
        // Case does not hide a file name (`SERVER.PEM`, `.ENV`).
        if !e.pattern.starts_with(['~', '/']) {
            let upper = path
                .rsplit_once('/')
                .map(|(d, n)| format!("{d}/{}", n.to_uppercase()));
            let upper = upper.unwrap_or_default();
            assert!(list.matches(&upper, &[], false), "{upper}");
        }
    }
}

#[test]
fn private_keys() {
    category(Category::PrivateKeys);
}
#[test]
fn ssh_gpg() {
    category(Category::SshGpg);
}
#[test]
fn env_files() {
    category(Category::EnvFiles);
}
#[test]
fn generic_credentials() {
    category(Category::GenericCredentials);
}
#[test]
fn cloud_cli() {
    category(Category::CloudCli);
}
#[test]
fn containers() {
    category(Category::Containers);
}
#[test]
fn package_registries() {
    category(Category::PackageRegistries);
}
#[test]
fn version_control() {
    category(Category::VersionControl);
}
#[test]
fn ai_tools() {
    category(Category::AiTools);
}
#[test]
fn databases() {
    category(Category::Databases);
}
#[test]
fn history() {
    category(Category::History);
}
#[test]
fn browsers() {
    category(Category::Browsers);
}
#[test]
fn password_managers() {
    category(Category::PasswordManagers);
}
#[test]
fn infrastructure() {
    category(Category::Infrastructure);
}
#[test]
fn cloud_sync() {
    category(Category::CloudSync);
}
#[test]
fn wallets() {
    category(Category::Wallets);
}
#[test]
fn system() {
    category(Category::System);
}

#[test]
fn the_table_is_well_formed() {
    assert_eq!(SECRET_PATTERNS.len(), SECRET_TABLE.len());
    let mut seen = BTreeSet::new();
    for e in SECRET_TABLE {
        assert!(seen.insert(e.pattern), "duplicate entry {}", e.pattern);
        assert!(!e.why.is_empty() && !e.why.contains('\n'), "{}", e.pattern);
        assert!(!e.pattern.contains("//") && !e.pattern.ends_with('/'));
    }
    for c in Category::ALL {
        assert!(SECRET_TABLE.iter().any(|e| e.category == *c), "{c:?}");
    }
}

#[test]
fn named_cases_from_the_issue() {
    let list = SecretPaths::builtin::<&str>(HOME, &[]);
    for path in [
        "/home/agent/.claude/.credentials.json",
        "/home/agent/.config/google-chrome/Default/Login Data",
        "/home/agent/.mozilla/firefox/abc.default/logins.json",
        "/home/agent/snap/firefox/common/.mozilla/firefox/p/key4.db",
        "/home/agent/proj/infra/terraform.tfstate",
        "/home/agent/proj/infra/prod.tfvars",
        "/home/agent/.psql_history",
        "/home/agent/proj/.pgpass",
        "/home/agent/.local/share/keyrings/login.keyring",
        "/home/agent/.config/rclone/rclone.conf",
        "/home/agent/.bitcoin/wallets/w/wallet.dat",
        "/home/agent/proj/gcp/credentials.json",
        "/home/agent/proj/deploy/id_ed25519",
        "/proc/1/environ",
        "/proc/self/task/7/environ",
    ] {
        assert!(list.matches(path, &[], false), "{path}");
    }
    assert_secret_read("cat ~/.claude/.credentials.json");
    assert_eq!(read_tool_verb("~/.claude/.credentials.json"), "ask");
}

#[test]
fn ordinary_files_are_not_secret() {
    let list = SecretPaths::builtin::<&str>(HOME, &[]);
    for path in [
        "/home/agent/proj/src/main.rs",
        "/home/agent/proj/README.md",
        "/home/agent/proj/Cargo.toml",
        "/home/agent/proj/package.json",
        "/home/agent/proj/src/keyboard.rs",
        "/home/agent/proj/src/secrets.rs",
        "/home/agent/proj/src/credentials_test.py",
        "/home/agent/proj/.gitignore",
        "/home/agent/.gitconfig",
        "/home/agent/.bashrc",
        "/home/agent/.config/nvim/init.lua",
        "/home/agent/.cargo/config.toml",
        "/home/agent/.ssh.txt",
        "/etc/hostname",
        "/etc/ssh/sshd_config",
        "/proc/1/status",
    ] {
        assert!(!list.matches(path, &[], false), "{path}");
    }
    // Templates by convention, spelled literally.
    for (name, _) in NOT_SECRET_NAMES {
        let path = format!("{PROJECT}/{name}");
        assert!(!list.matches(&path, &[], false), "{path}");
        assert_eq!(bash_verdict(&format!("cat {name}")), ReadVerdict::PureRead);
        assert_eq!(read_tool_verb(&path), "allow");
    }
    // … but a glob that could also match a real one is still secret.
    assert_secret_read("cat .env.*");
}

/// Environment dumps read secrets: never reads, and asked (not test-run) by the daemon.
#[test]
fn environment_dumps_are_secret_reads() {
    for cmd in [
        "env",
        "env -0",
        "env | grep -i token",
        "printenv",
        "printenv GITHUB_TOKEN",
        "printenv AWS_SECRET_ACCESS_KEY",
        "printenv $NAME",
        "export",
        "export -p",
        "declare -x",
        "declare -p",
        "declare",
        "typeset -x",
        "declare -p ANTHROPIC_API_KEY",
        "set",
        "set | grep KEY",
        "ps e",
        "ps auxeww",
        "ps axe -o pid,command",
        "ps -o pid,environ -p 1",
        "cat /proc/1/environ",
        "cat /proc/self/environ | tr '\\0' '\\n'",
        "strings /proc/self/task/1/environ",
        "xargs -0 -n1 < /proc/self/environ",
        "echo $GITHUB_TOKEN",
        "echo \"token: ${CLAUDE_CODE_OAUTH_TOKEN}\"",
        "printf '%s\\n' \"$DB_PASSWORD\"",
        "echo ${!AWS*}",
    ] {
        assert_secret_read(cmd);
    }
    for cmd in [
        "printenv HOME",
        "printenv PATH LANG",
        "echo $HOME",
        "echo $PWD",
        "ps aux",
        "ps -ef",
        "ps -o pid,user,comm",
    ] {
        assert_eq!(bash_verdict(cmd), ReadVerdict::PureRead, "{cmd}");
    }
    // `set -e` and `export X=1` are not dumps (and not reads either).
    for cmd in ["set -euo pipefail", "export X=1"] {
        if let ReadVerdict::NotRead { reason, .. } = bash_verdict(cmd) {
            assert!(
                !matches!(reason, NotReadReason::EnvironmentDump { .. }),
                "{cmd}: {reason}"
            );
        }
    }
    assert!(secret_env_name("npm_config__authToken"));
    assert!(!secret_env_name("OLDPWD"));
}

/// Lists that name some of the same files for another question (not "may its contents be read").
const OTHER_LISTS: &[(&str, &str)] = &[(
    "policy/src/decide/persistence.rs",
    "project files whose *writes* run code later (`.envrc`, `.npmrc`): writes ask",
)];

/// The list exists once. A source file outside `policy/src/secrets.rs` that quotes several of the
/// table's patterns (or the names they are built from) is a second list: fail, and point at it.
#[test]
fn there_is_no_second_secret_list() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace");
    // Distinctive names from the table (and their common spellings in a list), quoted.
    let mut needles: BTreeSet<String> = BTreeSet::new();
    for e in SECRET_TABLE {
        needles.insert(format!("\"{}\"", e.pattern));
        let last = e.pattern.rsplit('/').next().unwrap_or(e.pattern);
        // File-like last components (`.netrc`, `id_rsa`, `rclone.conf`), not words that any CLI
        // table quotes (`config`, `gcloud`).
        if last.len() > 4 && !last.contains('*') && last.contains(['.', '_']) {
            needles.insert(format!("\"{last}\""));
        }
        if let Some(rest) = e.pattern.strip_prefix("~/") {
            needles.insert(format!("\"{rest}\""));
        }
    }
    let mut offenders = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                // Only sources: not build output, not tests (which quote paths as cases).
                if !matches!(
                    name.as_str(),
                    "target" | "tests" | "node" | "fuzz" | "benches" | ".git"
                ) {
                    stack.push(path);
                }
                continue;
            }
            if !name.ends_with(".rs")
                || path.ends_with("policy/src/secrets.rs")
                || OTHER_LISTS.iter().any(|(p, _)| path.ends_with(p))
            {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // `#[cfg(test)]` modules quote paths as cases too.
            let text = text.split("#[cfg(test)]").next().unwrap_or_default();
            let hits: Vec<&String> = needles
                .iter()
                .filter(|n| text.contains(n.as_str()))
                .collect();
            if hits.len() >= 3 {
                offenders.push(format!("{}: {hits:?}", path.display()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "a second secret-path list: use cmdgate_policy::secrets instead\n{}",
        offenders.join("\n")
    );
}
