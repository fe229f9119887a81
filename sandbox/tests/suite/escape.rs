//! The escape suite: each case tries to reach the host from inside the mirror, and asserts both
//! that the host is untouched and that the attempt shows up in the run's report.

use super::common::{self, process_with, Env};
use cmdgate_sandbox::{Area, Effect, TestRun};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A directory outside the workspace, $HOME and /tmp (on the host's root filesystem).
fn outside() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cmdgate-outside-")
        .tempdir_in("/var/tmp")
        .expect("tempdir in /var/tmp")
}

fn dirty_with(run: &TestRun, needle: &str) {
    assert!(!run.clean, "expected dirty: {}", common::show(run));
    assert!(
        run.why.iter().any(|w| w.contains(needle)),
        "expected a reason containing {needle:?}: {}",
        common::show(run)
    );
}

fn blocked(run: &TestRun, syscall: &str) -> bool {
    run.effects
        .iter()
        .any(|e| matches!(e, Effect::Blocked { syscall: s, .. } if s == syscall))
}

#[test]
fn write_to_an_absolute_path_outside() {
    let env = Env::new();
    let out = outside();
    let victim = out.path().join("victim");
    std::fs::write(&victim, "safe").expect("write");
    let new = out.path().join("new");
    let run = env.run(&format!(
        "echo pwned > {v}; echo pwned > {n}",
        v = victim.display(),
        n = new.display()
    ));
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "safe");
    assert!(!new.exists());
    assert!(
        run.stderr.contains("Read-only file system"),
        "{}",
        common::show(&run)
    );
    for p in [&victim, &new] {
        assert!(wrote_read_only(&run, p), "{}", common::show(&run));
    }
    dirty_with(&run, "tried to write outside the writable trees");
}

#[test]
fn a_swallowed_write_error_is_still_reported() {
    let env = Env::new();
    let run = env.run("echo pwned >> /etc/passwd 2>/dev/null; mkdir /usr/evil 2>/dev/null; true");
    assert_eq!(run.exit, Some(0));
    assert!(
        wrote_read_only(&run, Path::new("/etc/passwd")),
        "{}",
        common::show(&run)
    );
    assert!(
        wrote_read_only(&run, Path::new("/usr/evil")),
        "{}",
        common::show(&run)
    );
    dirty_with(&run, "tried to write outside the writable trees");
}

/// Writes through `/proc/self/fd/N` to what has no path — the run's own output pipes, a pipe
/// of a pipeline, a memfd — are no filesystem writes and leave the run clean: cargo's
/// jobserver re-opens its pipe that way in every build. The same magic link to a real file
/// outside the writable trees is still noted, at the file's own path.
#[test]
fn writes_through_fd_links_to_pipes_are_no_filesystem_writes() {
    let env = Env::new();
    let run = env.run(concat!(
        "echo out > /dev/stdout; echo err > /dev/stderr; ",
        "echo x > /proc/self/fd/1 | cat > /dev/null; ",
        "/usr/bin/python3 -c \"import os; f = os.memfd_create('m'); ",
        "open(f'/proc/self/fd/{f}', 'w').write('x')\""
    ));
    assert_eq!(run.exit, Some(0), "{}", common::show(&run));
    assert!(run.clean, "{}", common::show(&run));
    assert_eq!(run.stdout, "out\n", "{}", common::show(&run));
    assert!(run.stderr.contains("err"), "{}", common::show(&run));

    let run = env.run("exec 3< /etc/passwd; echo pwned >> /proc/self/fd/3 2>/dev/null; true");
    assert!(
        wrote_read_only(&run, Path::new("/etc/passwd")),
        "{}",
        common::show(&run)
    );
    dirty_with(&run, "tried to write outside the writable trees");
}

fn wrote_read_only(run: &TestRun, p: &Path) -> bool {
    run.effects
        .iter()
        .any(|e| matches!(e, Effect::ReadOnlyWrite { path, .. } if path == p))
}

#[test]
fn write_through_dot_dot() {
    let env = Env::new();
    let run = env.run("echo pwned > ../escaped && echo pwned > ../../escaped2");
    let parent = env.ws.parent().expect("parent");
    assert!(!parent.join("escaped").exists());
    assert!(!parent
        .parent()
        .expect("grandparent")
        .join("escaped2")
        .exists());
    // The workspace sits under /tmp here, so `..` lands in the mirror's private /tmp.
    dirty_with(&run, "wrote outside the workspace");
    assert!(run.effects.iter().any(|e| matches!(e,
        Effect::Created { area: Area::Scratch, path, .. } if path.ends_with("escaped"))));
}

#[test]
fn write_through_planted_symlinks() {
    let env = Env::new();
    let out = outside();
    let victim = out.path().join("victim");
    std::fs::write(&victim, "safe").expect("write");
    std::os::unix::fs::symlink(&victim, env.ws.join("file-link")).expect("symlink");
    std::os::unix::fs::symlink(out.path(), env.ws.join("dir-link")).expect("symlink");
    std::fs::write(env.home.join(".bashrc"), "# rc\n").expect("write");
    std::os::unix::fs::symlink(env.home.join(".bashrc"), env.ws.join("rc-link")).expect("symlink");
    let before = common::tree_hash(&env.home);

    let run = env.run("echo pwned > file-link; echo pwned > dir-link/new; echo pwned >> rc-link");
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "safe");
    assert!(!out.path().join("new").exists());
    assert_eq!(before, common::tree_hash(&env.home), "host $HOME changed");
    // Both writes through links out of the workspace are reported at their real targets.
    assert!(wrote_read_only(&run, &victim), "{}", common::show(&run));
    assert!(
        wrote_read_only(&run, &out.path().join("new")),
        "{}",
        common::show(&run)
    );
    // The write through the link into $HOME landed in the $HOME overlay: reported with its prefix.
    dirty_with(&run, "~/.bashrc");
}

#[test]
fn write_through_a_planted_hardlink() {
    let env = Env::new();
    // Same filesystem as the workspace (a hard link cannot cross filesystems).
    let victim = env.ws.parent().expect("parent").join("victim");
    std::fs::write(&victim, "safe").expect("write");
    std::fs::hard_link(&victim, env.ws.join("hl")).expect("hard link");
    let run = env.run("echo pwned >> hl");
    assert_eq!(run.exit, Some(0), "{}", common::show(&run));
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "safe");
    assert_eq!(
        std::fs::read_to_string(env.ws.join("hl")).expect("read"),
        "safe"
    );
    // Copy-up broke the link inside the mirror; the change is reported on the workspace path.
    assert!(run.effects.iter().any(|e| matches!(e,
        Effect::Modified { area: Area::Workspace, path, .. } if path == Path::new("hl"))));
    assert!(!run.clean);
}

#[test]
fn tmp_and_home_writes_are_reported_not_persisted() {
    let env = Env::new();
    let name = format!("cmdgate-escape-{}", std::process::id());
    std::fs::write(env.home.join(".profile"), "# profile\n").expect("write");
    let run = env.run(&format!(
        "echo x > /tmp/{name}; echo x > /dev/shm/{name}; echo x >> ~/.profile; mkdir -p ~/.config/evil"
    ));
    assert_eq!(run.exit, Some(0), "{}", common::show(&run));
    assert!(!Path::new("/tmp").join(&name).exists());
    assert!(!Path::new("/dev/shm").join(&name).exists());
    assert_eq!(
        std::fs::read_to_string(env.home.join(".profile")).expect("read"),
        "# profile\n"
    );
    assert!(!env.home.join(".config").exists());
    let tmp = PathBuf::from("/tmp").join(&name);
    let shm = PathBuf::from("/dev/shm").join(&name);
    assert!(run
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Created { area: Area::Scratch, path, .. } if *path == tmp)));
    assert!(run
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Created { area: Area::Scratch, path, .. } if *path == shm)));
    assert!(run.effects.iter().any(|e| matches!(e, Effect::Modified { area: Area::Home, path, .. } if path == Path::new(".profile"))));
    dirty_with(&run, "wrote outside the workspace");
}

#[test]
fn connect_to_a_host_tcp_listener() {
    let env = Env::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let run = env.run(&format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
    ));
    assert!(!run.stdout.contains("connected"), "{}", common::show(&run));
    assert_eq!(
        listener.accept().map(drop).map_err(|e| e.kind()),
        Err(ErrorKind::WouldBlock),
        "the host listener was reached"
    );
    let target = format!("inet 127.0.0.1:{port}");
    assert!(
        run.effects.iter().any(|e| matches!(e,
        Effect::Network { target: t, allowed: false } if *t == target)),
        "{}",
        common::show(&run)
    );
    dirty_with(&run, "network attempted");
}

#[test]
fn network_allowed_reaches_the_host_and_is_reported() {
    let env = Env::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let mut config = env.config();
    config.network = true;
    let run = common::run_with(
        &config,
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"),
    );
    assert!(run.stdout.contains("connected"), "{}", common::show(&run));
    assert!(run
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Network { allowed: true, .. })));
    assert!(run.clean, "{}", common::show(&run));
}

#[test]
fn connect_to_a_host_unix_socket() {
    let env = Env::new();
    let out = outside();
    let outside_sock = out.path().join("s.sock");
    let ws_sock = env.ws.join("ws.sock");
    let l1 = std::os::unix::net::UnixListener::bind(&outside_sock).expect("bind");
    let l2 = std::os::unix::net::UnixListener::bind(&ws_sock).expect("bind");
    l1.set_nonblocking(true).expect("nonblocking");
    l2.set_nonblocking(true).expect("nonblocking");
    let perl = |p: &Path| {
        format!(
            "perl -MSocket -e 'socket(S, PF_UNIX, SOCK_STREAM, 0) or die \"socket: $!\"; connect(S, pack_sockaddr_un(\"{}\")) or die \"connect: $!\"; print \"connected\\n\"'",
            p.display()
        )
    };
    let run = env.run(&format!("{}; {}", perl(&outside_sock), perl(&ws_sock)));
    assert!(!run.stdout.contains("connected"), "{}", common::show(&run));
    for l in [&l1, &l2] {
        assert_eq!(
            l.accept().map(drop).map_err(|e| e.kind()),
            Err(ErrorKind::WouldBlock),
            "a host unix socket was reached"
        );
    }
    for sock in [&outside_sock, &ws_sock] {
        let target = format!("unix {}", sock.display());
        assert!(
            run.effects.iter().any(|e| matches!(e,
            Effect::Network { target: t, allowed: false } if *t == target)),
            "{}",
            common::show(&run)
        );
    }
    dirty_with(&run, "network attempted");
}

#[test]
fn unix_datagram_sockets_are_refused() {
    let env = Env::new();
    let run = env.run(
        "perl -MSocket -e 'socket(S, PF_UNIX, SOCK_DGRAM, 0) and print \"created\\n\"; exit 0'",
    );
    assert!(!run.stdout.contains("created"), "{}", common::show(&run));
}

#[test]
fn signal_a_host_process() {
    let env = Env::new();
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep");
    let pid = victim.id();
    let run = env.run(&format!("kill -9 {pid}; kill -9 -1; kill -KILL 1"));
    let alive = victim.try_wait().expect("try_wait").is_none();
    let _ = victim.kill();
    let _ = victim.wait();
    assert!(alive, "the host process was killed from the mirror");
    // Host pids do not exist in the run's pid namespace: the kill fails and the run says so.
    dirty_with(&run, "exit status");
    assert!(
        run.stderr.contains("No such process"),
        "{}",
        common::show(&run)
    );
}

#[test]
fn mount_and_namespaces_are_refused() {
    let env = Env::new();
    let run = env.run("mount -t tmpfs none /mnt; unshare -m true; unshare -U true; exit 0");
    assert!(blocked(&run, "mount"), "{}", common::show(&run));
    assert!(blocked(&run, "unshare"), "{}", common::show(&run));
    dirty_with(&run, "refused by the syscall filter");
}

#[test]
fn mknod_of_a_device_is_refused() {
    let env = Env::new();
    let run = env.run("mknod ./sda b 8 0; mknod ./mem c 1 1; mkfifo ./fifo; exit 0");
    assert!(!env.ws.join("sda").exists() && !env.ws.join("mem").exists());
    assert!(
        blocked(&run, "mknodat") || blocked(&run, "mknod"),
        "{}",
        common::show(&run)
    );
    // A FIFO is harmless and allowed.
    assert!(run
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Created { path, .. } if path == Path::new("fifo"))));
    assert!(!run.effects.iter().any(|e| matches!(e, Effect::Created { path, .. } if path == Path::new("sda") || path == Path::new("mem"))));
}

#[test]
fn ptrace_and_process_vm_are_refused() {
    let env = Env::new();
    let run = env.run(&format!(
        "perl -e 'syscall({ptrace}, 16, getppid(), 0, 0) == -1 or print \"attached\\n\"; \
         syscall({vm}, getppid(), 0, 0, 0, 0, 0) == -1 or print \"read\\n\"'",
        ptrace = libc::SYS_ptrace,
        vm = libc::SYS_process_vm_readv
    ));
    assert!(
        !run.stdout.contains("attached") && !run.stdout.contains("read"),
        "{}",
        common::show(&run)
    );
    assert!(blocked(&run, "ptrace"), "{}", common::show(&run));
    assert!(blocked(&run, "process_vm_readv"), "{}", common::show(&run));
}

#[test]
fn pid1_and_its_seccomp_listener_are_out_of_reach() {
    let env = Env::new();
    // pid 1 of the run answers the seccomp notifications: holding its listener fd would let the
    // command approve its own mount. pidfd_getfd is refused by the filter, /proc/1/fd/N by the
    // kernel's ptrace access check (pid 1 has capabilities the command lacks), signals to pid 1
    // by the pid namespace and Landlock's signal scope.
    let run = env.run(&format!(
        "perl -e '$p = syscall({open}, 1, 0); for $n (3..12) {{ syscall({getfd}, $p, $n, 0) >= 0 and print \"stole $n\\n\" }}'; \
         for f in /proc/1/fd/*; do readlink $f; exec 9<$f; done; cat /proc/1/environ; kill -9 1; echo still here",
        open = libc::SYS_pidfd_open,
        getfd = libc::SYS_pidfd_getfd
    ));
    assert!(!run.stdout.contains("stole"), "{}", common::show(&run));
    // Listing /proc/1/fd shows numbers (uid 0 owns it), but no fd can be resolved or opened.
    assert!(!run.stdout.contains("seccomp"), "{}", common::show(&run));
    assert!(
        run.stderr.contains("/proc/1/fd/3: Permission denied"),
        "{}",
        common::show(&run)
    );
    assert!(
        run.stderr.contains("/proc/1/environ: Permission denied"),
        "{}",
        common::show(&run)
    );
    assert!(run.stdout.contains("still here"), "{}", common::show(&run));
    assert!(blocked(&run, "pidfd_getfd"), "{}", common::show(&run));
}

#[test]
fn fork_bomb_is_contained() {
    let env = Env::new();
    let mut config = env.config();
    config.limits.pids = 64;
    config.limits.timeout = Duration::from_secs(3);
    // The foreground form: every level waits for its two children, so the tree keeps growing
    // until fork fails. (`bomb | bomb &` lets the top shell exit first on a fast machine, and the
    // run then ends with a handful of killed stragglers before the limit is reached.)
    let run = common::run_with(&config, "bomb() { bomb | bomb; }; bomb");
    assert!(
        run.effects
            .iter()
            .any(|e| matches!(e, Effect::LimitHit { limit, .. } if limit == "pids")),
        "{}",
        common::show(&run)
    );
    assert!(!run.clean);
}

#[test]
fn memory_hog_is_contained() {
    let env = Env::new();
    let mut config = env.config();
    config.limits.memory_bytes = 64 << 20;
    let run = common::run_with(
        &config,
        "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo ${#x}",
    );
    assert!(
        run.effects
            .iter()
            .any(|e| matches!(e, Effect::LimitHit { limit, .. } if limit == "memory")),
        "{}",
        common::show(&run)
    );
    assert!(!run.clean);
}

#[test]
fn setsid_background_process_ignoring_term_is_gone() {
    let env = Env::new();
    let run =
        env.run("setsid bash -c 'trap \"\" TERM HUP; exec sleep 997.25' & sleep 0.3; echo started");
    assert_eq!(run.exit, Some(0), "{}", common::show(&run));
    assert!(
        !process_with("sleep 997.25"),
        "background process survived the run"
    );
    assert!(
        run.effects.iter().any(
            |e| matches!(e, Effect::BackgroundProcess { command, .. } if command.contains("997.25"))
        ),
        "{}",
        common::show(&run)
    );
    dirty_with(&run, "background process");
}

#[test]
fn timeout_kills_everything() {
    let env = Env::new();
    let mut config = env.config();
    config.limits.timeout = Duration::from_millis(500);
    let run = common::run_with(
        &config,
        "trap '' TERM HUP; setsid sleep 996.5 & nohup sleep 996.75 & sleep 996.25",
    );
    assert!(run.timed_out, "{}", common::show(&run));
    for marker in ["sleep 996.5", "sleep 996.75", "sleep 996.25"] {
        assert!(!process_with(marker), "{marker} survived the timeout");
    }
    dirty_with(&run, "timed out");
}

#[test]
fn rm_rf_rolls_back_byte_identical() {
    let env = Env::new();
    env.write("src/main.rs", "fn main() {}\n");
    env.write(".hidden/config", "k=v\n");
    env.write("README.md", "# readme\n");
    std::os::unix::fs::symlink("README.md", env.ws.join("link")).expect("symlink");
    let before = common::tree_hash(&env.ws);
    let run = env.run("rm -rf ./* ./.[!.]* && ls -A | wc -l");
    assert_eq!(run.stdout.trim(), "0", "{}", common::show(&run));
    assert_eq!(
        before,
        common::tree_hash(&env.ws),
        "rollback left the workspace changed"
    );
    assert!(
        run.effects
            .iter()
            .filter(|e| matches!(e, Effect::Deleted { .. }))
            .count()
            >= 4
    );
    dirty_with(&run, "changed a pre-existing file");
}

#[test]
fn protected_paths_are_dirty_even_when_created() {
    let env = Env::new();
    let run =
        env.run("mkdir -p .claude && echo '{}' > .claude/settings.json && echo x > CLAUDE_CMDS.md");
    assert_eq!(run.exit, Some(0));
    assert!(!env.ws.join(".claude").exists());
    dirty_with(&run, "protected path");
}

#[test]
fn state_dir_and_scratch_are_invisible_inside() {
    let env = Env::new();
    let run = env.run(&format!("ls -A {}/runs 2>&1; cat /proc/1/cmdline >/dev/null; ls /sys/fs/cgroup >/dev/null; echo done", env.state.display()));
    // The run's own scratch (upper dirs) is detached inside the mirror: the runs dir is empty.
    assert!(run.stdout.ends_with("done\n"), "{}", common::show(&run));
    assert!(!run.stdout.contains("upper"), "{}", common::show(&run));
}

#[test]
fn landlock_is_a_second_layer() {
    let env = Env::new();
    // /proc is mounted read-write inside the mirror (a fresh proc for the run's pid namespace):
    // only Landlock stops writes there, so this shows it is in force.
    let run = env.run("echo 0 > /proc/self/oom_score_adj && echo written");
    if cmdgate_sandbox::confine::landlock_abi() > 0 {
        assert!(!run.stdout.contains("written"), "{}", common::show(&run));
        assert!(
            run.stderr.contains("Permission denied"),
            "{}",
            common::show(&run)
        );
    } else {
        // Without Landlock (old kernel) the mounts are the only layer; say so in the output.
        eprintln!("this kernel has no Landlock: only the mount layer was tested");
        assert!(run.stdout.contains("written"), "{}", common::show(&run));
    }
}

#[test]
fn udp_to_the_host_is_reported() {
    let env = Env::new();
    let bind = || {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        s.set_nonblocking(true).expect("nonblocking");
        let port = s.local_addr().expect("addr").port();
        (s, port)
    };
    let ((a, port_a), (b, port_b)) = (bind(), bind());
    // Both ways a program sends UDP: connect + send (bash's /dev/udp) and sendto with an address.
    let run = env.run(&format!(
        "echo hi > /dev/udp/127.0.0.1/{port_a}; \
         perl -MSocket -e 'socket(S, PF_INET, SOCK_DGRAM, 0) or die; \
         send(S, \"x\", 0, pack_sockaddr_in({port_b}, inet_aton(\"127.0.0.1\"))) or die \"send: $!\"'"
    ));
    let mut buf = [0u8; 16];
    for s in [&a, &b] {
        assert_eq!(
            s.recv_from(&mut buf).map(drop).map_err(|e| e.kind()),
            Err(ErrorKind::WouldBlock),
            "a datagram reached the host"
        );
    }
    for port in [port_a, port_b] {
        let target = format!("inet 127.0.0.1:{port}");
        assert!(
            run.effects.iter().any(
                |e| matches!(e, Effect::Network { target: t, allowed: false } if *t == target)
            ),
            "{target}: {}",
            common::show(&run)
        );
    }
    assert!(run.stderr.contains("send:"), "{}", common::show(&run));
    dirty_with(&run, "network attempted");
}

#[test]
fn filling_the_disk_stops_at_the_scratch_size() {
    let env = Env::new();
    let mut config = env.config();
    config.limits.scratch_bytes = 8 << 20;
    let run = common::run_with(
        &config,
        "head -c 20000000 /dev/zero > big; head -c 20000000 /dev/zero > /tmp/big",
    );
    assert!(
        run.stderr.matches("No space left on device").count() >= 1,
        "{}",
        common::show(&run)
    );
    assert!(!env.ws.join("big").exists());
    let written: u64 = run
        .effects
        .iter()
        .map(|e| match e {
            Effect::Created { size, .. } => *size,
            _ => 0,
        })
        .sum();
    assert!(written <= 8 << 20, "{}", common::show(&run));
    dirty_with(&run, "exit status");
}
