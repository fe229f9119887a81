//! Every Claude Code settings scope a session reads, and which of them the agent can change. Claude
//! Code merges managed settings (`/etc/claude-code/managed-settings.json`, then the drop-ins in
//! `managed-settings.d/` in name order), the user's `~/.claude/settings.json`, and the project's
//! `.claude/settings.json` and `.claude/settings.local.json`; hooks from every scope run, and the
//! managed-only key `allowManagedHooksOnly` makes it ignore every hook outside managed settings.
//! A registration that lives only in a file the agent can write (or replace, through a directory
//! it can write or owns) is one the agent can delete before its next session: in system mode
//! that is fail-open, and `cmdgate doctor` says so.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Claude Code's managed settings directory on Linux.
pub const MANAGED_DIR: &str = "/etc/claude-code";
/// The managed settings file inside it.
pub const MANAGED_FILE: &str = "managed-settings.json";
/// Its drop-in directory (files merged in name order after the main file).
pub const MANAGED_DROP_INS: &str = "managed-settings.d";

/// Which settings scope a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Managed,
    ManagedDropIn,
    User,
    Project,
    Local,
}

impl Scope {
    pub fn is_managed(self) -> bool {
        matches!(self, Scope::Managed | Scope::ManagedDropIn)
    }
}

/// One settings file Claude Code reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SettingsFile {
    pub scope: Scope,
    pub path: PathBuf,
}

/// The settings files a session in `project` with `home` reads, managed first (drop-ins in name
/// order; only `*.json` files count).
pub fn settings_files(project: &Path, home: &Path, managed_dir: &Path) -> Vec<SettingsFile> {
    let mut files = vec![SettingsFile {
        scope: Scope::Managed,
        path: managed_dir.join(MANAGED_FILE),
    }];
    let mut drop_ins: Vec<PathBuf> = std::fs::read_dir(managed_dir.join(MANAGED_DROP_INS))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect()
        })
        .unwrap_or_default();
    drop_ins.sort();
    files.extend(drop_ins.into_iter().map(|path| SettingsFile {
        scope: Scope::ManagedDropIn,
        path,
    }));
    files.push(SettingsFile {
        scope: Scope::User,
        path: home.join(".claude/settings.json"),
    });
    files.push(SettingsFile {
        scope: Scope::Project,
        path: project.join(".claude/settings.json"),
    });
    files.push(SettingsFile {
        scope: Scope::Local,
        path: project.join(".claude/settings.local.json"),
    });
    files
}

/// A user as the kernel checks file access: uid and every group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub uid: u32,
    pub gids: Vec<u32>,
    pub home: PathBuf,
}

impl Identity {
    /// Looks `who` (a name or a numeric uid) up in `/etc/passwd` and `/etc/group`.
    pub fn lookup(who: &str) -> Option<Identity> {
        let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
        let group = std::fs::read_to_string("/etc/group").ok()?;
        Identity::from_files(who, &passwd, &group)
    }

    /// [`Identity::lookup`] over the files' text.
    pub fn from_files(who: &str, passwd: &str, group: &str) -> Option<Identity> {
        let fields = passwd
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.len() >= 7 && (f[0] == who || f[2] == who))?;
        let name = fields[0].to_owned();
        let uid = fields[2].parse().ok()?;
        let gid: u32 = fields[3].parse().ok()?;
        let mut gids = vec![gid];
        for g in group.lines().map(|l| l.split(':').collect::<Vec<_>>()) {
            if g.len() >= 4 && g[3].split(',').any(|m| m == name) {
                if let Ok(id) = g[2].parse() {
                    gids.push(id);
                }
            }
        }
        gids.sort_unstable();
        gids.dedup();
        Some(Identity {
            name,
            uid,
            gids,
            home: PathBuf::from(fields[5]),
        })
    }

    /// Can this identity change the entry `meta` describes (write it, or chmod it as its owner)?
    fn can_write(&self, meta: &std::fs::Metadata) -> bool {
        let mode = meta.mode();
        self.uid == 0
            || meta.uid() == self.uid
            || (self.gids.contains(&meta.gid()) && mode & 0o020 != 0)
            || mode & 0o002 != 0
    }
}

/// Why `who` can change what Claude Code reads at `path` (`None`: it cannot): the file itself is
/// writable, or a directory on the way to it is (so the file can be created, replaced or renamed
/// away). A sticky directory protects entries `who` does not own.
pub fn agent_can_change(path: &Path, who: &Identity) -> Option<String> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if who.can_write(&meta) {
            return Some(format!("{} can write {}", who.name, path.display()));
        }
    }
    let mut child = path;
    while let Some(dir) = child.parent() {
        if let Ok(meta) = std::fs::metadata(dir) {
            let sticky = meta.mode() & 0o1000 != 0;
            let owns_child = std::fs::symlink_metadata(child).is_ok_and(|m| m.uid() == who.uid);
            if who.can_write(&meta) && (!sticky || owns_child || meta.uid() == who.uid) {
                return Some(format!(
                    "{} can write the directory {}",
                    who.name,
                    dir.display()
                ));
            }
        }
        child = dir;
    }
    None
}

/// Does a PreToolUse matcher cover every tool? Claude Code treats a missing or empty matcher and
/// `*` as "all tools"; anything else (`Bash`, `Bash|Write`) is a pattern that leaves others out.
pub fn covers_all_tools(matcher: Option<&str>) -> bool {
    matches!(matcher.map(str::trim), None | Some("" | "*" | ".*"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const PASSWD: &str =
        "root:x:0:0:root:/root:/bin/bash\nalice:x:1001:1001::/home/alice:/bin/sh\n";
    const GROUP: &str = "root:x:0:\nalice:x:1001:\nagents:x:900:alice,bob\nops:x:901:carol\n";

    #[test]
    fn identities_come_from_passwd_and_group() {
        let a = Identity::from_files("alice", PASSWD, GROUP).unwrap();
        assert_eq!((a.uid, a.gids.clone()), (1001, vec![900, 1001]));
        assert_eq!(a.home, PathBuf::from("/home/alice"));
        assert_eq!(
            Identity::from_files("1001", PASSWD, GROUP).unwrap().name,
            "alice"
        );
        assert!(Identity::from_files("mallory", PASSWD, GROUP).is_none());
    }

    #[test]
    fn matchers() {
        for all in [None, Some(""), Some("*"), Some(" * "), Some(".*")] {
            assert!(covers_all_tools(all), "{all:?}");
        }
        for some in ["Bash", "Bash|Write|Edit", "mcp__.*", "Write"] {
            assert!(!covers_all_tools(Some(some)), "{some}");
        }
    }

    #[test]
    fn writable_files_and_directories() {
        let dir = tempfile::tempdir().unwrap();
        let me = Identity {
            name: "nobody-in-particular".into(),
            uid: 4_000_000,
            gids: vec![4_000_000],
            home: dir.path().into(),
        };
        // root-owned 0755 directory, 0644 file: not changeable by another uid.
        let managed = dir.path().join("managed");
        std::fs::create_dir(&managed).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = managed.join(MANAGED_FILE);
        std::fs::write(&file, "{}").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        // Everything above the temp dir is root's on a normal system (/tmp is sticky).
        assert_eq!(agent_can_change(&file, &me), None);
        // World-writable directory: the file can be replaced.
        std::fs::set_permissions(&managed, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(agent_can_change(&file, &me).is_some());
        std::fs::set_permissions(&managed, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Group-writable file of one of its groups.
        let gid = std::fs::metadata(&file).unwrap().gid();
        let member = Identity {
            gids: vec![gid],
            ..me.clone()
        };
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o664)).unwrap();
        assert!(agent_can_change(&file, &member).is_some());
        assert_eq!(agent_can_change(&file, &me), None);
    }

    #[test]
    fn scopes_in_order_with_drop_ins_sorted() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join(MANAGED_DROP_INS);
        std::fs::create_dir(&d).unwrap();
        for f in ["20-b.json", "10-a.json", "notes.txt"] {
            std::fs::write(d.join(f), "{}").unwrap();
        }
        let files = settings_files(Path::new("/p"), Path::new("/h"), dir.path());
        let scopes: Vec<Scope> = files.iter().map(|f| f.scope).collect();
        assert_eq!(
            scopes,
            [
                Scope::Managed,
                Scope::ManagedDropIn,
                Scope::ManagedDropIn,
                Scope::User,
                Scope::Project,
                Scope::Local
            ]
        );
        assert!(files[1].path.ends_with("10-a.json"));
    }
}
