//! Network by domain (issue 14), the mirror's side: a run with [`crate::RunConfig::proxy`] keeps
//! its own network namespace, where only loopback is up, and gets one listening TCP socket on
//! `127.0.0.1` made *inside* that namespace by the run's pid 1 during setup. The listener is
//! handed out (SCM_RIGHTS over the helper's fd 5) to the caller, whose proxy accepts on it and
//! connects from the host side; the command never holds it. Nothing else crosses the namespace
//! boundary: the namespace has no other interface, Landlock lets TCP connect only to the proxy's
//! port, and the seccomp supervisor refuses (and reports) every other inet connect.
//!
//! ```text
//!  mirror netns (lo only)                        host netns
//!  command ── connect 127.0.0.1:P ──▶ listener ══ fd ══▶ caller's proxy ── connect ──▶ allowed host
//! ```

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd};

/// The proxy's address inside the mirror, for the command's environment.
pub fn proxy_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// The variables pointing clients at the proxy: the upper- and lower-case forms tools read
/// (curl reads only lower-case `http_proxy`; npm, pip, cargo, git and Go read either), and an
/// empty `NO_PROXY` so nothing the agent's environment exempted goes around it (it would only be
/// refused).
pub fn proxy_env(port: u16) -> Vec<(String, String)> {
    let url = proxy_url(port);
    let mut env: Vec<(String, String)> = PROXY_VARS
        .iter()
        .map(|k| ((*k).to_owned(), url.clone()))
        .collect();
    for k in ["NO_PROXY", "no_proxy"] {
        env.push((k.to_owned(), String::new()));
    }
    env
}

/// The variables [`proxy_env`] sets (and replaces when the caller's environment had them).
pub const PROXY_VARS: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// `env` with every proxy variable replaced by the mirror's proxy.
pub fn with_proxy_env(env: &[(String, String)], port: u16) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| !PROXY_VARS.contains(&k.as_str()) && k != "NO_PROXY" && k != "no_proxy")
        .cloned()
        .collect();
    out.extend(proxy_env(port));
    out
}

/// Bring the namespace's loopback interface up (a new network namespace starts with `lo` down
/// and without 127.0.0.1). Needs CAP_NET_ADMIN over the namespace (the run's pid 1 has it).
pub fn loopback_up() -> std::io::Result<()> {
    // SAFETY: socket(2) with integer arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd we own.
    let sock = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags into `req`, valid for the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the union's flags member was just written by the kernel.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: SIOCSIFFLAGS reads `req`, valid for the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The proxy's listener inside the current (the mirror's) network namespace: loopback up, a TCP
/// socket bound to 127.0.0.1 on a port the kernel picks. Returns it with its port.
pub fn open_listener() -> std::io::Result<(TcpListener, u16)> {
    loopback_up()?;
    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    let port = listener.local_addr()?.port();
    Ok((listener, port))
}

/// The caller's end of the listener hand-off: one SCM_RIGHTS message from the run's pid 1.
pub struct Handoff(pub(crate) OwnedFd);

impl Handoff {
    /// Blocks until pid 1 sends the listener (during setup, before the command starts) or the
    /// run ends without one (setup failed: `None`). The listener is blocking; set it
    /// non-blocking before handing it to an async runtime.
    pub fn receive(self) -> Option<TcpListener> {
        crate::init::recv_fd(&self.0).map(TcpListener::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_points_every_client_at_the_proxy() {
        let env = vec![
            ("PATH".to_owned(), "/bin".to_owned()),
            ("https_proxy".to_owned(), "http://corp:3128".to_owned()),
            ("NO_PROXY".to_owned(), "*.internal".to_owned()),
        ];
        let out = with_proxy_env(&env, 4242);
        let get = |k: &str| -> Vec<&str> {
            out.iter()
                .filter(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .collect()
        };
        assert_eq!(get("PATH"), ["/bin"]);
        for k in PROXY_VARS {
            assert_eq!(get(k), ["http://127.0.0.1:4242"], "{k}");
        }
        assert_eq!(get("NO_PROXY"), [""]);
        assert_eq!(get("no_proxy"), [""]);
    }
}
