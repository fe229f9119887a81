//! Lifecycle: the run dies with its helper or its parent, stale runs are swept, and without
//! root the helper refuses instead of running anything unsandboxed.

use super::common::{process_with, Env};
use cmdgate_sandbox::cgroup::RunCgroup;
use cmdgate_sandbox::protocol::{HelperReply, HelperRequest, ParentMessage};
use cmdgate_sandbox::{Limits, Privilege};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn helper(uid: Option<u32>) -> Child {
    helper_at(
        std::path::Path::new(env!("CARGO_BIN_EXE_cmdgate-sandbox-helper")),
        uid,
    )
}

fn helper_at(program: &std::path::Path, uid: Option<u32>) -> Child {
    let mut cmd = Command::new(program);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    cmd.spawn().expect("spawn helper")
}

fn send(child: &mut Child, env: &Env, run_id: &str, command: &str) {
    let req = ParentMessage::Run(Box::new(HelperRequest {
        run_id: run_id.to_string(),
        command: command.to_string(),
        config: env.config(),
        mirror: None,
    }));
    let mut line = serde_json::to_vec(&req).expect("json");
    line.push(b'\n');
    let stdin = child.stdin.as_mut().expect("stdin");
    stdin.write_all(&line).expect("write request");
    stdin.flush().expect("flush");
}

/// Wait (bounded, generously) until `cond` holds; the assertion is on the state, not the time.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn runs_dir_is_empty(env: &Env) -> bool {
    std::fs::read_dir(env.state.join("runs"))
        .map(|mut d| d.next().is_none())
        .unwrap_or(true)
}

#[test]
fn killing_the_helper_kills_the_run_and_sweep_cleans_up() {
    let env = Env::new();
    let mut h = helper(None);
    send(&mut h, &env, "crash-1", "sleep 994.5");
    eventually("the run started", || process_with("sleep 994.5"));
    let lock = env.state.join("runs/crash-1.lock");
    let cgroup: RunCgroup =
        serde_json::from_str(&std::fs::read_to_string(&lock).expect("lock file"))
            .expect("cgroup paths in the lock file");
    h.kill().expect("kill helper");
    h.wait().expect("reap helper");
    eventually("the run died with its helper", || {
        !process_with("sleep 994.5")
    });
    // The helper had no chance to clean up: its bookkeeping is still there...
    assert!(lock.exists());
    assert!(cgroup.dirs.iter().all(|(_, _, d)| d.exists()));
    // ...until the sweep.
    let swept = cmdgate_sandbox::sweep_stale(&env.state).expect("sweep");
    assert_eq!(swept, vec!["crash-1".to_string()]);
    assert!(runs_dir_is_empty(&env));
    assert!(cgroup.dirs.iter().all(|(_, _, d)| !d.exists()));
}

#[test]
fn parent_hang_up_kills_the_run() {
    let env = Env::new();
    let mut h = helper(None);
    send(&mut h, &env, "hangup-1", "sleep 993.5");
    eventually("the run started", || process_with("sleep 993.5"));
    drop(h.stdin.take());
    let status = h.wait().expect("helper exits");
    assert!(status.success(), "{status:?}");
    assert!(!process_with("sleep 993.5"));
    // The lock file (naming the cgroups the helper sat in) is the parent's to remove; the parent
    // is gone, so the sweep does it.
    let swept = cmdgate_sandbox::sweep_stale(&env.state).expect("sweep");
    assert_eq!(swept, vec!["hangup-1".to_string()]);
    assert!(runs_dir_is_empty(&env));
}

#[test]
fn a_prepared_helper_whose_parent_died_removes_its_own_cgroups() {
    // The helper's parent is a shell the test kills: nobody is left to remove the run's cgroups
    // (a daemon killed with a warm helper, its state dir deleted after it, as the end-to-end
    // tests do), so the helper does it itself once its stdin hangs up.
    let env = Env::new();
    let fifo = env.state.join("helper-stdin");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let out = env.state.join("helper-stdout");
    let mut sh = Command::new("sh")
        .arg("-c")
        .arg("\"$0\" < \"$1\" > \"$2\" 2>/dev/null & wait")
        .arg(env!("CARGO_BIN_EXE_cmdgate-sandbox-helper"))
        .arg(&fifo)
        .arg(&out)
        .spawn()
        .expect("spawn sh");
    let mut stdin = std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .expect("open the helper's stdin");
    let prepare = ParentMessage::Prepare {
        run_id: "orphan-1".into(),
        state_dir: env.state.clone(),
        overlay: None,
        whole: None,
    };
    let mut line = serde_json::to_vec(&prepare).expect("json");
    line.push(b'\n');
    stdin.write_all(&line).expect("write Prepare");
    eventually("the helper is prepared", || {
        std::fs::read_to_string(&out).is_ok_and(|o| o.contains("Ready"))
    });
    let cgroup: RunCgroup = serde_json::from_str(
        &std::fs::read_to_string(env.state.join("runs/orphan-1.lock")).expect("lock file"),
    )
    .expect("cgroup paths in the lock file");
    assert!(cgroup.dirs.iter().all(|(_, _, d)| d.exists()));
    sh.kill().expect("kill the helper's parent");
    sh.wait().expect("reap it");
    drop(stdin);
    eventually("the orphaned helper removed its cgroups", || {
        cgroup.dirs.iter().all(|(_, _, d)| !d.exists())
    });
}

#[test]
fn the_sweep_reaps_empty_run_cgroups_of_a_dead_creator_and_keeps_a_live_ones() {
    // A daemon killed while its helper was preparing, its state dir deleted after it: no lock
    // file names the cgroups any more; its pid (the run id's first part) is gone.
    let env = Env::new();
    let mut dead = Command::new("true").spawn().expect("spawn true");
    let dead_pid = dead.id();
    dead.wait().expect("reap true");
    let orphan = RunCgroup::create(&format!("{dead_pid}-0-0")).expect("cgroup");
    let live = RunCgroup::create(&format!("{}-0-0", std::process::id())).expect("cgroup");
    cmdgate_sandbox::sweep_stale(&env.state).expect("sweep");
    assert!(orphan.dirs.iter().all(|(_, _, d)| !d.exists()));
    assert!(live.dirs.iter().all(|(_, _, d)| d.exists()));
    live.remove();
}

#[test]
fn sweep_kills_what_is_left_in_a_stale_cgroup_and_skips_live_runs() {
    let env = Env::new();
    let runs = env.state.join("runs");
    std::fs::create_dir_all(runs.join("stale-1")).expect("mkdir");
    let cg = RunCgroup::create("stale-1").expect("cgroup");
    cg.set_limits(&Limits::default()).expect("limits");
    let mut orphan = Command::new("sleep").arg("992.5").spawn().expect("spawn");
    cg.join(orphan.id() as i32).expect("join");
    std::fs::write(
        runs.join("stale-1.lock"),
        serde_json::to_string(&cg).expect("json"),
    )
    .expect("lock");
    // A live run: its lock is held.
    let live = std::fs::File::create(runs.join("live-1.lock")).expect("lock");
    use std::os::fd::AsRawFd;
    // SAFETY: flock on an fd we own.
    assert_eq!(unsafe { libc::flock(live.as_raw_fd(), libc::LOCK_EX) }, 0);

    let swept = cmdgate_sandbox::sweep_stale(&env.state).expect("sweep");
    assert_eq!(swept, vec!["stale-1".to_string()]);
    let status = orphan.wait().expect("reaped");
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(cg.dirs.iter().all(|(_, _, d)| !d.exists()));
    assert!(!runs.join("stale-1").exists() && !runs.join("stale-1.lock").exists());
    assert!(runs.join("live-1.lock").exists());
}

#[test]
fn without_root_the_helper_refuses_and_runs_nothing() {
    let env = Env::new();
    assert_eq!(cmdgate_sandbox::detect_privilege(), Privilege::Root);
    let marker = env.ws.join("ran");
    // A copy the unprivileged uid can execute wherever the build dir lives (e.g. under /root).
    let bin_dir = tempfile::Builder::new()
        .prefix("cmdgate-helper-")
        .tempdir()
        .expect("tempdir");
    let program = bin_dir.path().join("helper");
    // Copied by `cp`, not `fs::copy`: a write fd to the copy held by this (multi-threaded) test
    // process leaks into any child another test forks meanwhile, and exec of the copy then fails
    // with ETXTBSY until that child has exec'd. Only `cp` ever holds it open for writing.
    let copied = Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_cmdgate-sandbox-helper"))
        .arg(&program)
        .status()
        .expect("run cp");
    assert!(copied.success(), "copy helper: {copied}");
    use std::os::unix::fs::PermissionsExt;
    for p in [bin_dir.path(), program.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let mut h = helper_at(&program, Some(65534));
    send(
        &mut h,
        &env,
        "nobody-1",
        &format!("touch {}", marker.display()),
    );
    let mut line = String::new();
    BufReader::new(h.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("answer");
    drop(h.stdin.take());
    h.wait().expect("helper exits");
    match serde_json::from_str::<HelperReply>(&line).expect("a reply") {
        HelperReply::Failed { message, .. } => {
            assert!(message.contains("not running as root"), "{message}");
            assert!(message.contains("NOT run"), "{message}");
        }
        HelperReply::Done(raw) => panic!("ran without root: {raw:?}"),
        HelperReply::Ready => panic!("prepared without root"),
        HelperReply::Store(reply) => panic!("a store answer to a run: {reply:?}"),
    }
    assert!(!marker.exists());
}

#[test]
fn a_prepared_helper_runs_later_or_cleans_up_unused() {
    let env = Env::new();
    let config = env.config();
    let warm = cmdgate_sandbox::prepare(&config).expect("prepare");
    let run = warm.run(&config, "echo warm").expect("run");
    assert_eq!(run.stdout, "warm\n");
    assert!(run.clean);
    assert!(runs_dir_is_empty(&env));

    let unused = cmdgate_sandbox::prepare(&config).expect("prepare");
    assert!(
        !runs_dir_is_empty(&env),
        "a prepared run holds its lock file"
    );
    drop(unused);
    assert!(runs_dir_is_empty(&env));
}

#[test]
fn sweep_finds_cgroups_by_name_when_the_lock_file_is_empty() {
    let env = Env::new();
    let runs = env.state.join("runs");
    std::fs::create_dir_all(&runs).expect("mkdir");
    // A helper that died between creating its cgroups and writing their paths down.
    let cg = RunCgroup::create("early-1").expect("cgroup");
    std::fs::write(runs.join("early-1.lock"), "").expect("lock");
    let swept = cmdgate_sandbox::sweep_stale(&env.state).expect("sweep");
    assert_eq!(swept, vec!["early-1".to_string()]);
    assert!(cg.dirs.iter().all(|(_, _, d)| !d.exists()));
    assert!(runs_dir_is_empty(&env));
}

/// A finished mirrored run's helper is reaped and its lock file and cgroups removed off the
/// caller's path, by the process's one reaper thread (`reaper.rs`): the same for many runs.
#[test]
fn finished_mirrored_runs_helpers_are_reaped_and_leave_nothing() {
    let env = Env::new();
    for i in 0..3 {
        let cmd = super::mirror::command(&env, &format!("echo run{i}"));
        let (out, _, fin) = super::mirror::mirrored(&env, &cmd);
        assert_eq!(out, format!("run{i}\n"));
        assert_eq!(fin.run.exit, Some(0));
        fin.kept.discard().expect("discard");
    }
    eventually("every helper reaped, its lock file removed", || {
        std::fs::read_dir(env.state.join("runs"))
            .map(|d| {
                d.flatten()
                    .all(|e| !e.file_name().to_string_lossy().ends_with(".lock"))
            })
            .unwrap_or(true)
    });
}

/// A helper that dies without an answer: its stderr (read by the reaper thread) is in the error.
#[test]
fn a_helper_that_dies_without_an_answer_is_named_with_its_stderr() {
    let env = Env::new();
    let mut config = env.config();
    config.helper = cmdgate_sandbox::HelperCommand {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            "echo 'the helper broke' >&2; read line; exit 3".into(),
        ],
    };
    let err = match cmdgate_sandbox::prepare(&config) {
        Ok(_) => panic!("a helper that answers nothing was prepared"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("the helper broke"), "{err}");
}
