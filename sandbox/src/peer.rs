//! The supplementary groups of the process at the other end of a Unix socket (`SO_PEERGROUPS`):
//! the daemon admits agents and operators by group (`cmdgate-agents`, `cmdgate-operators`), and
//! `SO_PEERCRED` carries only the primary gid. It lives here because `sandbox` is the one crate
//! allowed `unsafe`, and neither `nix` nor `rustix` wraps this option.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// First guess of the group count; the kernel says how many there are when it is too small.
const FIRST_GUESS: usize = 32;
/// Linux's `NGROUPS_MAX`.
const NGROUPS_MAX: usize = 65_536;

/// The peer's supplementary groups as the kernel recorded them when it connected (not forgeable by
/// the peer, and not changed by whatever it does after connecting).
pub fn peer_groups(socket: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; FIRST_GUESS];
    loop {
        let mut len = libc::socklen_t::try_from(groups.len() * size_of::<libc::gid_t>())
            .map_err(|_| io::Error::other("group buffer too large"))?;
        // SAFETY: `groups` is a live, writable buffer of exactly `len` bytes, and `len` points to
        // a socklen_t the kernel updates with the size it wrote (or needs). The fd is borrowed,
        // so it stays open for the call.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let needed = len as usize / size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(needed.min(groups.len()));
            return Ok(groups);
        }
        let err = io::Error::last_os_error();
        // ERANGE: the buffer was too small and `len` now holds the size needed.
        if err.raw_os_error() == Some(libc::ERANGE)
            && needed > groups.len()
            && needed <= NGROUPS_MAX
        {
            groups.resize(needed, 0);
            continue;
        }
        return Err(err);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    /// Our own groups, as `/proc/self/status` lists them.
    fn own_groups() -> Vec<u32> {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .unwrap();
        let mut g: Vec<u32> = line
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        g.sort_unstable();
        g
    }

    #[test]
    fn a_socket_pair_reports_our_own_groups() {
        let (a, _b) = UnixStream::pair().unwrap();
        let mut got = peer_groups(a.as_fd()).unwrap();
        got.sort_unstable();
        assert_eq!(got, own_groups());
    }

    #[test]
    fn not_a_socket_is_an_error() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(peer_groups(f.as_fd()).is_err());
    }
}
