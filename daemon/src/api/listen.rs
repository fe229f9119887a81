//! Getting the listening sockets: passed by systemd (`LISTEN_FDS`, socket activation) or bound here
//! with tight modes.

use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a socket could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("cannot create the socket directory {path}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket { path: PathBuf },
    #[error("another cmdgated is already serving {path}")]
    InUse { path: PathBuf },
    #[error("cannot bind {path}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set the mode of {path}")]
    Mode {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the socket systemd passed is unusable")]
    Systemd(#[source] std::io::Error),
}

/// Binds `path` with `mode`. The directory is created 0700 if missing (0711 would leak names;
/// the agent needs to traverse it only in system mode, where systemd creates it). A stale socket
/// left by a crash is replaced; a live one (something answers) is not.
pub fn bind(path: &Path, mode: u32) -> Result<std::os::unix::net::UnixListener, ListenError> {
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| ListenError::Dir {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        {
            if !meta.file_type().is_socket() {
                return Err(ListenError::NotASocket {
                    path: path.to_path_buf(),
                });
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(ListenError::InUse {
                    path: path.to_path_buf(),
                });
            }
            let _ = std::fs::remove_file(path);
        }
    }
    // Bind under a private name and rename into place, so the socket never exists with the
    // umask's looser mode at its public path.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener =
        std::os::unix::net::UnixListener::bind(&tmp).map_err(|source| ListenError::Bind {
            path: tmp.clone(),
            source,
        })?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).map_err(|source| {
        ListenError::Mode {
            path: tmp.clone(),
            source,
        }
    })?;
    std::fs::rename(&tmp, path).map_err(|source| ListenError::Bind {
        path: path.to_path_buf(),
        source,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| ListenError::Bind {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(listener)
}

/// The Unix listeners systemd passed (`LISTEN_PID` must be us; `LISTEN_FDNAMES` names them), in
/// order. `listenfd` does the fd adoption (its only unsafe is `from_raw_fd` on fds ≥ 3 that
/// systemd handed over), so this crate stays free of unsafe code.
pub fn from_systemd() -> Result<Vec<(Option<String>, std::os::unix::net::UnixListener)>, ListenError>
{
    let ours = for_us(
        std::env::var("LISTEN_PID").ok().as_deref(),
        std::process::id(),
    );
    let names: Vec<String> = std::env::var("LISTEN_FDNAMES")
        .map(|n| n.split(':').map(str::to_owned).collect())
        .unwrap_or_default();
    // Also removes LISTEN_PID and LISTEN_FDS from our environment, so nothing we start takes them.
    let mut fds = listenfd::ListenFd::from_env();
    if !ours {
        // Not for us: leave the fds alone (listenfd itself would take them without LISTEN_PID).
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for i in 0..fds.len() {
        if let Some(l) = fds.take_unix_listener(i).map_err(ListenError::Systemd)? {
            l.set_nonblocking(true).map_err(ListenError::Systemd)?;
            out.push((names.get(i).cloned(), l));
        }
    }
    Ok(out)
}

/// Whether `LISTEN_FDS` is meant for the process `pid`, as `sd_listen_fds(3)` decides: only when
/// `LISTEN_PID` is exactly that pid. Absent, empty or another pid means the fds were passed to
/// some other process (a parent that left its environment to us) and are not ours to serve.
fn for_us(listen_pid: Option<&str>, pid: u32) -> bool {
    listen_pid
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|p| p.parse::<u32>().ok())
        == Some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn listen_fds_are_ours_only_when_listen_pid_names_us() {
        assert!(for_us(Some("4242"), 4242));
        for other in [
            None,
            Some(""),
            Some("1"),
            Some("+4242"),
            Some(" 4242"),
            Some("4242x"),
        ] {
            assert!(!for_us(other, 4242), "{other:?}");
        }
    }

    #[test]
    fn binds_with_the_mode_and_refuses_a_live_socket_or_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/admin.sock");
        let l = bind(&path, 0o600).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(path.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        assert!(matches!(bind(&path, 0o600), Err(ListenError::InUse { .. })));
        drop(l);
        // A stale socket (nobody listening) is replaced.
        bind(&path, 0o660).unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(
            bind(&file, 0o600),
            Err(ListenError::NotASocket { .. })
        ));
    }
}
