//! Secret masks: the host paths of `cmdgate_policy::secrets` (the one secret list) made
//! unreachable inside the mirror, so code cmdgate cannot analyse (a script, `python3 -c`, a build
//! step) finds nothing where a key or token lives.
//!
//! What is masked, computed by the helper right before the mounts: every anchored entry of the
//! table (`~/.ssh`, `~/.aws`, `~/.cargo/credentials*`, `/etc/shadow`, …; `*` expanded against the
//! host), every entry of the home directory whose name is a secret file name (`~/.netrc`,
//! `~/.npmrc`, `~/.git-credentials`, …), the workspace's environment files (`.env`, `.env.*`,
//! `.envrc`, … at any depth, except under `.git`, `node_modules` and `target`), and the operator's
//! `secret_paths` (anchored ones where they point, name patterns in the home directory and the
//! workspace). Symlinks are resolved so the mask sits where the data is. Only the workspace's
//! environment files are masked by name there: a project's `credentials/` module or test `*.pem`
//! fixtures stay readable (the hook still asks before a command names them).
//!
//! Not covered: a secret path created on the host while the run is running (the mask list is fixed
//! when the mirror is built), and anything under `/proc`, `/sys`, `/dev` (the mirror has its own).

use crate::walkwatch::{Listed, Tracer};
use cmdgate_policy::secrets::{Category, SecretPaths, SECRET_PATTERNS, SECRET_TABLE};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Directories of the workspace not searched for environment files: git's own store and the
/// dependency and build trees tools generate.
const SKIPPED_DIRS: &[&str] = &[".git", "node_modules", "target"];

/// The masks for a run in `workspace` with the agent's `home` and the operator's extra secret
/// patterns `extra` (same syntax as the table). Paths are absolute as the mirror shows them; a
/// path that contains the workspace is left out (it would hide the work itself). Missing paths
/// are skipped; an error reading what exists is an error (the run is refused, never unmasked).
pub fn secret_masks(
    home: Option<&Path>,
    workspace: &Path,
    extra: &[String],
) -> io::Result<Vec<PathBuf>> {
    secret_masks_reading(home, workspace, extra, &mut None)
}

/// The names the walk calls secret: in the home directory (every non-anchored pattern of the
/// table and the operator's), and in the workspace's directories (environment files, and the
/// operator's name patterns). Also what tells whether a change `walkwatch` reports matters.
pub struct Names {
    home: Option<SecretPaths>,
    env: SecretPaths,
}

impl Names {
    pub fn new(home: Option<&Path>, extra: &[String]) -> Names {
        let home_str = home.map(|h| h.to_string_lossy().into_owned());
        let names: Vec<&str> = SECRET_PATTERNS
            .iter()
            .copied()
            .chain(extra.iter().map(String::as_str))
            .filter(|p| !(p.starts_with("~/") || p.starts_with('/')))
            .collect();
        let env_names: Vec<&str> = SECRET_TABLE
            .iter()
            .filter(|e| e.category == Category::EnvFiles)
            .map(|e| e.pattern)
            .filter(|p| !p.starts_with(['~', '/']))
            .chain(
                extra
                    .iter()
                    .map(String::as_str)
                    .filter(|p| !p.starts_with(['~', '/'])),
            )
            .collect();
        Names {
            home: home_str.as_deref().map(|h| SecretPaths::new(&names, h)),
            env: SecretPaths::new(&env_names, home_str.as_deref().unwrap_or("/")),
        }
    }

    /// A name the walk masks in the home directory.
    pub fn home_secret(&self, name: &str) -> bool {
        self.home.as_ref().is_some_and(|h| h.secret_name(name))
    }

    /// A name the walk masks in the workspace, at any depth.
    pub fn env_secret(&self, name: &str) -> bool {
        self.env.secret_name(name)
    }
}

/// [`secret_masks`], telling `reads` (when given) of each path right before it resolves it and
/// of each directory right before it lists it: `walkwatch` watches what the walk reads.
pub fn secret_masks_reading(
    home: Option<&Path>,
    workspace: &Path,
    extra: &[String],
    reads: &mut Option<Tracer>,
) -> io::Result<Vec<PathBuf>> {
    let home_str = home.map(|h| h.to_string_lossy().into_owned());
    let mut candidates: Vec<PathBuf> = Vec::new();
    let patterns = SECRET_PATTERNS
        .iter()
        .copied()
        .chain(extra.iter().map(String::as_str));
    for pattern in patterns {
        if pattern.starts_with("~/") || pattern.starts_with('/') {
            if let Some(abs) = anchored(pattern, home_str.as_deref()) {
                expand(&abs, &mut candidates, reads)?;
            }
        }
    }
    let names = Names::new(home, extra);
    // Secret file names directly in the home directory (`~/.netrc`, `~/.pypirc`).
    if let Some(home) = home {
        if let Some(r) = reads {
            r.list(home, Listed::Home);
        }
        for (path, name) in entries(home)? {
            if names.home_secret(&name) {
                candidates.push(path);
            }
        }
    }
    // The workspace's environment files, and the operator's own name patterns, at any depth.
    env_files(workspace, &names.env, &mut candidates, reads)?;

    // Where the mirror shows each path: symlinks resolved on the host, then put back under the
    // workspace / home path the mirror mounts its overlays at (they may be spelled through a link).
    let mut roots = vec![(
        canonical_or_same(workspace, reads)?,
        workspace.to_path_buf(),
    )];
    if let Some(home) = home {
        roots.push((canonical_or_same(home, reads)?, home.to_path_buf()));
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for c in candidates {
        // Before resolving: `/proc/<pid>/cwd` resolves to a process's working directory.
        if pseudo(&c) {
            continue;
        }
        if let Some(r) = reads {
            r.resolve(&c, true);
        }
        let real = match std::fs::canonicalize(&c) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", c.display()))),
        };
        let shown = roots
            .iter()
            .find_map(|(canon, spelled)| real.strip_prefix(canon).ok().map(|rel| spelled.join(rel)))
            .unwrap_or(real);
        // A mask over the workspace or the home (a link to `~`) would hide the work itself.
        if pseudo(&shown)
            || workspace.starts_with(&shown)
            || home.is_some_and(|h| h.starts_with(&shown))
        {
            continue;
        }
        if !out.contains(&shown) {
            out.push(shown);
        }
    }
    out.sort();
    Ok(out)
}

/// Under the kernel's own trees: the mirror mounts its own `/proc` (of the run's pid namespace),
/// `/sys` and `/dev`, so no host path there is ever masked.
fn pseudo(p: &Path) -> bool {
    ["/proc", "/sys", "/dev"].iter().any(|d| p.starts_with(d))
}

/// The absolute path an anchored pattern (`~/…` or `/…`) names, `None` without a home for a `~/`
/// pattern, and `None` under `/proc`, `/sys`, `/dev`: what it would match is never masked
/// ([`pseudo`]), and expanding `/proc/*/task/*/environ` on the host listed every process and
/// thread of the machine at each run (about 800 `statx` and 170 directory listings here).
fn anchored(pattern: &str, home: Option<&str>) -> Option<PathBuf> {
    let abs = match pattern.strip_prefix("~/") {
        Some(rest) => PathBuf::from(format!("{}/{rest}", home?.trim_end_matches('/'))),
        None => PathBuf::from(pattern),
    };
    (!pseudo(&abs)).then_some(abs)
}

fn canonical_or_same(p: &Path, reads: &mut Option<Tracer>) -> io::Result<PathBuf> {
    if let Some(r) = reads {
        r.resolve(p, true);
    }
    match std::fs::canonicalize(p) {
        Ok(c) => Ok(c),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(p.to_path_buf()),
        Err(e) => Err(e),
    }
}

/// The workspace's files and directories whose names `env` calls secret, at any depth below
/// `workspace` outside [`SKIPPED_DIRS`]; run before every mirror is built, so it is on each run's
/// path. Each directory is opened from its parent's fd (`O_NOFOLLOW`: never a link followed, and
/// no path walked again from `/`) and listed with `getdents64` into one reused buffer; the entry's
/// type comes with the listing (`d_type`; an `lstat` only where the filesystem does not fill it
/// in), and a path is built only for a match or a directory to descend into. Open directories
/// are held only along the path being walked (a pending directory holds its parent's fd).
/// A directory that is gone, or is no longer a directory (replaced by a link meanwhile), when it
/// is opened is skipped, as a missing one always was; any other error refuses the run.
fn env_files(
    workspace: &Path,
    env: &SecretPaths,
    out: &mut Vec<PathBuf>,
    reads: &mut Option<Tracer>,
) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    use std::rc::Rc;
    let gone = |e: Errno| matches!(e, Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP);
    let root = match nix::fcntl::open(
        workspace,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT | Errno::ENOTDIR) => return Ok(()),
        Err(e) => return Err(listing_error(workspace, e)),
    };
    // (the directory's fd, or its parent's fd and its name; its path)
    let mut stack: Vec<(Rc<OwnedFd>, Option<std::ffi::OsString>, PathBuf)> =
        vec![(Rc::new(root), None, workspace.to_path_buf())];
    let mut buf = vec![0u8; 32 * 1024];
    while let Some((fd, name, dir)) = stack.pop() {
        if let Some(r) = reads.as_mut() {
            r.list(&dir, Listed::Env);
        }
        let fd = match name {
            None => fd,
            Some(name) => match crate::commit::fsx::open_dir_at(&*fd, &name) {
                Ok(sub) => Rc::new(sub),
                Err(e) if gone(e) => continue,
                Err(e) => return Err(listing_error(&dir, e)),
            },
        };
        let mut result = Ok(());
        list(&fd, &mut buf, |name, d_type| {
            let text = String::from_utf8_lossy(name);
            if env.secret_name(&text) {
                out.push(dir.join(std::ffi::OsStr::from_bytes(name)));
                return;
            }
            if SKIPPED_DIRS.contains(&text.as_ref()) {
                return;
            }
            let is_dir = match d_type {
                libc::DT_DIR => true,
                libc::DT_UNKNOWN => {
                    match crate::commit::fsx::lstat_at(&*fd, std::ffi::OsStr::from_bytes(name)) {
                        Ok(Some(st)) => st.st_mode & libc::S_IFMT == libc::S_IFDIR,
                        Ok(None) => false,
                        Err(e) => {
                            result = Err(e);
                            false
                        }
                    }
                }
                _ => false,
            };
            if is_dir {
                let name = std::ffi::OsStr::from_bytes(name).to_os_string();
                let path = dir.join(&name);
                stack.push((fd.clone(), Some(name), path));
            }
        })
        .and(result)
        .map_err(|e| listing_error(&dir, e))?;
    }
    Ok(())
}

fn listing_error(dir: &Path, e: Errno) -> io::Error {
    let e = io::Error::from(e);
    io::Error::new(e.kind(), format!("{}: {e}", dir.display()))
}

/// Every entry of the directory `fd` but `.` and `..`: its name and `d_type`, from `getdents64`
/// into `buf` (reused between directories).
fn list(fd: &OwnedFd, buf: &mut [u8], mut each: impl FnMut(&[u8], u8)) -> Result<(), Errno> {
    use std::os::fd::AsRawFd;
    // `struct linux_dirent64`: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name (NUL-ended).
    const NAME: usize = 19;
    loop {
        // SAFETY: `buf` is writable for `buf.len()` bytes for the whole call; `fd` is open.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(Errno::last());
        }
        if n == 0 {
            return Ok(());
        }
        let filled = &buf[..n as usize];
        let mut at = 0;
        while at + NAME <= filled.len() {
            let reclen = u16::from_ne_bytes([filled[at + 16], filled[at + 17]]) as usize;
            let d_type = filled[at + 18];
            let end = at + reclen;
            if reclen <= NAME || end > filled.len() {
                return Err(Errno::EIO); // the kernel never writes a record like that
            }
            let raw = &filled[at + NAME..end];
            let name = &raw[..raw.iter().position(|b| *b == 0).unwrap_or(raw.len())];
            if name != b"." && name != b".." {
                each(name, d_type);
            }
            at = end;
        }
    }
}

/// The entries of `dir` (none when it does not exist or is not a directory).
fn entries(dir: &Path) -> io::Result<Vec<(PathBuf, String)>> {
    Ok(typed_entries(dir)?
        .into_iter()
        .map(|(path, name, _)| (path, name))
        .collect())
}

/// The entries of `dir` (none when it does not exist or is not a directory), with whether each
/// is a directory itself (a symlink is not).
fn typed_entries(dir: &Path) -> io::Result<Vec<(PathBuf, String, bool)>> {
    let read = match std::fs::read_dir(dir) {
        Ok(r) => r,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display()))),
    };
    let mut out = Vec::new();
    for entry in read {
        let entry = entry?;
        // `file_type` never follows a link: the type of the entry itself.
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        out.push((
            entry.path(),
            entry.file_name().to_string_lossy().into_owned(),
            is_dir,
        ));
    }
    Ok(out)
}

/// Every existing path matching the absolute pattern `abs` (`*` and `?` within a component).
fn expand(abs: &Path, out: &mut Vec<PathBuf>, reads: &mut Option<Tracer>) -> io::Result<()> {
    let mut partial = vec![PathBuf::from("/")];
    for comp in abs.components().skip(1) {
        let comp = comp.as_os_str().to_string_lossy();
        let mut next = Vec::new();
        for base in &partial {
            if comp.contains(['*', '?']) {
                if let Some(r) = reads.as_mut() {
                    r.list(base, Listed::All);
                }
                for (path, name) in entries(base)? {
                    if wildcard(comp.as_bytes(), name.as_bytes()) {
                        next.push(path);
                    }
                }
            } else {
                next.push(base.join(comp.as_ref()));
            }
        }
        partial = next;
    }
    if let Some(r) = reads.as_mut() {
        for p in &partial {
            r.resolve(p, false);
        }
    }
    out.extend(
        partial
            .into_iter()
            .filter(|p| std::fs::symlink_metadata(p).is_ok()),
    );
    Ok(())
}

/// Shell-style match of one component: `*` any run, `?` one byte, everything else literal.
fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            wildcard(&pattern[1..], name) || (!name.is_empty() && wildcard(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => wildcard(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => wildcard(&pattern[1..], &name[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn patterns_under_the_kernels_trees_are_not_expanded() {
        for p in [
            "/proc/*/environ",
            "/proc/*/task/*/environ",
            "/proc/*/mem",
            "/sys/x",
            "/dev/x",
        ] {
            assert_eq!(anchored(p, Some("/home/a")), None, "{p}");
        }
        assert!(
            SECRET_PATTERNS.iter().any(|p| p.starts_with("/proc/")),
            "the table names /proc paths (the case this skips)"
        );
        assert_eq!(
            anchored("~/.ssh", Some("/home/a/")),
            Some(PathBuf::from("/home/a/.ssh"))
        );
        assert_eq!(anchored("~/.ssh", None), None);
        assert_eq!(
            anchored("/etc/shadow", None),
            Some(PathBuf::from("/etc/shadow"))
        );
    }

    #[test]
    fn the_workspace_walk_reaches_every_width_and_depth_and_follows_no_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        // Wide: 300 directories, an environment file two levels down in each.
        for i in 0..300 {
            let d = ws.join(format!("d{i}/x"));
            std::fs::create_dir_all(&d).expect("mkdir");
            std::fs::write(d.join(".env"), "x").expect("write");
        }
        // Deep: 60 levels, one at the bottom.
        let mut deep = ws.join("deep");
        for i in 0..60 {
            deep.push(format!("l{i}"));
        }
        std::fs::create_dir_all(&deep).expect("mkdir");
        std::fs::write(deep.join(".envrc"), "x").expect("write");
        // A link to a directory is not walked; a skipped tree is not either.
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join(".env"), "x").expect("write");
        std::os::unix::fs::symlink(&outside, ws.join("link")).expect("symlink");
        std::fs::create_dir_all(ws.join("target/debug")).expect("mkdir");
        std::fs::write(ws.join("target/debug/.env"), "x").expect("write");
        // A name that is not UTF-8 is still walked.
        let odd = ws.join(std::ffi::OsStr::from_bytes(b"odd\xff"));
        std::fs::create_dir(&odd).expect("mkdir");
        std::fs::write(odd.join(".env.local"), "x").expect("write");
        let masks: Vec<PathBuf> = secret_masks(None, &ws, &[])
            .expect("masks")
            .into_iter()
            .filter(|m| m.starts_with(&ws))
            .collect();
        for i in 0..300 {
            assert!(masks.contains(&ws.join(format!("d{i}/x/.env"))), "d{i}");
        }
        assert!(masks.contains(&deep.join(".envrc")));
        assert!(masks.contains(&odd.join(".env.local")));
        assert_eq!(masks.len(), 302, "{masks:?}");
    }

    #[test]
    fn wildcard_matches_one_component() {
        assert!(wildcard(b"credentials*", b"credentials.toml"));
        assert!(wildcard(b"ssh_host_*_key", b"ssh_host_ed25519_key"));
        assert!(!wildcard(b"ssh_host_*_key", b"ssh_host_ed25519_key.pub"));
        assert!(wildcard(b"a?c", b"abc"));
        assert!(!wildcard(b"a?c", b"ac"));
    }

    #[test]
    fn table_locations_name_files_and_workspace_env_files_are_masked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let ws = home.join("proj");
        for d in [
            ".ssh",
            ".aws",
            ".config/gh",
            ".cargo",
            "proj/app/node_modules/x",
        ] {
            std::fs::create_dir_all(home.join(d)).expect("mkdir");
        }
        for f in [
            ".netrc",
            ".cargo/credentials.toml",
            ".cargo/config.toml",
            "proj/.env",
            "proj/app/.env.local",
            "proj/app/.env.example",
            "proj/app/node_modules/x/.env",
            "proj/id_rsa",
            "proj/vault.txt",
        ] {
            std::fs::write(home.join(f), "x").expect("write");
        }
        std::os::unix::fs::symlink(home.join(".aws"), ws.join("aws-link")).expect("symlink");
        // A secret name that is a link to the home itself does not mask the home.
        std::os::unix::fs::symlink(&home, home.join(".pgpass")).expect("symlink");
        let masks = secret_masks(Some(&home), &ws, &["vault.txt".to_string()]).expect("masks");
        assert!(!masks.iter().any(|m| home.starts_with(m)), "{masks:?}");
        assert!(!masks.iter().any(|m| m.starts_with("/proc")), "{masks:?}");
        let rel: Vec<String> = masks
            .iter()
            .filter_map(|p| p.strip_prefix(&home).ok())
            .map(|p| p.display().to_string())
            .collect();
        for want in [
            ".ssh",
            ".aws",
            ".config/gh",
            ".netrc",
            ".cargo/credentials.toml",
            "proj/.env",
            "proj/app/.env.local",
            "proj/vault.txt",
        ] {
            assert!(rel.contains(&want.to_string()), "{want} not in {rel:?}");
        }
        for not in [
            ".cargo/config.toml",
            "proj/app/.env.example",
            "proj/app/node_modules/x/.env",
            "proj/id_rsa",
            "proj/aws-link",
            "proj",
            "",
        ] {
            assert!(!rel.contains(&not.to_string()), "{not} in {rel:?}");
        }
    }
}
