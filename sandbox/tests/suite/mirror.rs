//! Mirrored runs (issue 19): output streams as produced, the exit status is not the verdict, the
//! upper dir is kept on the workspace's mount, the caller can kill the run, and the command is
//! evaluated the way Claude Code's Bash tool does (aliases on, filtered environment).

use crate::common::{process_with, Env};
use cmdgate_sandbox::mirror::{self, Finished, MirrorCommand};
use cmdgate_sandbox::{Area, Effect, RunConfig};
use std::io::{BufRead, BufReader, Read};

pub fn command(env: &Env, cmd: &str) -> MirrorCommand {
    MirrorCommand {
        command: cmd.to_string(),
        cwd: env.ws.clone(),
        env: env.config().env,
        since: None,
    }
}

/// Run to the end, returning (stdout, stderr, finished).
pub fn mirrored(env: &Env, cmd: &MirrorCommand) -> (String, String, Finished) {
    mirrored_with(&env.config(), cmd)
}

/// [`mirrored`] with a config of the caller's.
pub fn mirrored_with(config: &RunConfig, cmd: &MirrorCommand) -> (String, String, Finished) {
    let mut run = mirror::start(config, cmd).expect("start");
    let mut out = run.take_stdout().expect("stdout");
    let mut err = run.take_stderr().expect("stderr");
    let t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let mut stdout = Vec::new();
    out.read_to_end(&mut stdout).expect("read stdout");
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    let stderr = t.join().expect("stderr thread");
    (stdout, stderr, run.wait().expect("wait"))
}

#[test]
fn output_streams_and_a_failing_command_is_still_clean() {
    let env = Env::new();
    let cmd = command(
        &env,
        "echo out; echo err >&2; mkdir -p target; echo x > target/o; echo t > /tmp/t; exit 3",
    );
    let (out, err, fin) = mirrored(&env, &cmd);
    assert_eq!(out, "out\n");
    assert_eq!(err, "err\n");
    assert_eq!(fin.run.exit, Some(3));
    assert!(fin.run.clean, "{:?}", fin.run.why);
    assert!(!fin.killed);
    assert!(fin.run.effects.iter().any(|e| matches!(e,
        Effect::Created { area: Area::Workspace, path, .. } if path.ends_with("target/o"))));
    assert_eq!(fin.scratch_writes().count(), 1, "{:?}", fin.run.effects);
    // The upper dir is on the workspace's mount, outside the workspace, and holds the file.
    let upper = fin.kept.upper();
    assert!(!upper.starts_with(&env.ws));
    assert_eq!(std::fs::read(upper.join("target/o")).expect("kept"), b"x\n");
    assert!(!env.ws.join("target").exists(), "nothing committed yet");
    let dir = fin.kept.dir();
    fin.kept.discard().expect("discard");
    assert!(!dir.exists());
}

#[test]
fn killing_a_streaming_run_ends_it_and_marks_it_killed() {
    let env = Env::new();
    let cmd = command(&env, "echo first; touch made; exec sleep 600");
    let mut run = mirror::start(&env.config(), &cmd).expect("start");
    let mut out = BufReader::new(run.take_stdout().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("first line");
    assert_eq!(
        line, "first\n",
        "output arrives while the command still runs"
    );
    run.killer().kill();
    let fin = run.wait().expect("wait");
    assert!(fin.killed);
    assert!(!env.ws.join("made").exists());
}

#[test]
fn aliases_expand_as_in_claude_codes_shell() {
    let env = Env::new();
    env.write("README.md", "hi\n");
    let (_, _, fin) = mirrored(&env, &command(&env, "alias ls=\"rm README.md\"\nls"));
    assert!(
        fin.run.effects.iter().any(|e| matches!(e,
            Effect::Deleted { path, .. } if path.as_os_str() == "README.md")),
        "{:?}",
        fin.run.effects
    );
}

#[test]
fn the_environment_is_filtered_and_cwd_is_the_callers() {
    let env = Env::new();
    env.write("sub/x", "");
    let mut cmd = command(&env, "pwd; env | sort");
    cmd.cwd = env.ws.join("sub");
    cmd.env.extend(
        [
            ("CMDGATE_SOCKET", "/run/cmdgate.sock"),
            ("LD_PRELOAD", "/x.so"),
            ("BASH_ENV", "/x"),
            ("KEEP_ME", "1"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let (out, _, fin) = mirrored(&env, &cmd);
    assert!(
        out.starts_with(&format!("{}\n", env.ws.join("sub").display())),
        "{out}"
    );
    assert!(out.contains("KEEP_ME=1"), "{out}");
    for gone in ["CMDGATE_", "LD_PRELOAD", "BASH_ENV"] {
        assert!(!out.contains(gone), "{gone} reached the command: {out}");
    }
    fin.kept.discard().expect("discard");
}

#[test]
fn cmdgates_own_sockets_config_and_state_are_masked() {
    let env = Env::new();
    let conf = env.home.join(".config/cmdgate");
    std::fs::create_dir_all(&conf).expect("mkdir");
    std::fs::write(conf.join("config.toml"), "SECRET-CONFIG\n").expect("write");
    let sock = env.home.join("admin.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    std::fs::write(env.state.join("audit.db"), "SECRET-STATE\n").expect("write");
    let mut config = env.config();
    config.masks.extend([conf.clone(), sock.clone()]);
    let script = format!(
        "cat {conf}/config.toml; ls -A {conf}; cat {state}/audit.db; ls -A {state}; \
         [ -S {sock} ] && echo SOCKET-VISIBLE; ls -A {store}; true",
        conf = conf.display(),
        state = env.state.display(),
        sock = sock.display(),
        store = env.state.join("mirror").display(),
    );
    let (out, err, fin) = mirrored_with(&config, &command(&env, &script));
    for leak in [
        "SECRET-CONFIG",
        "config.toml",
        "SECRET-STATE",
        "audit.db",
        "SOCKET-VISIBLE",
        "runs",
    ] {
        assert!(!out.contains(leak), "{leak} reachable: {out} {err}");
    }
    assert!(fin.run.clean, "{:?}", fin.run.why);
    fin.kept.discard().expect("discard");
}

#[test]
fn a_mask_above_the_workspace_masks_its_other_entries_and_the_run_goes_on() {
    // cmdgate's data dir may hold the workspace (a test's temp dir, `CMDGATE_HOME=/srv`): the
    // mask then covers everything in it but the way down to the workspace and the home.
    let env = Env::new();
    let above = env.ws.parent().expect("parent").to_path_buf();
    std::fs::write(above.join("cmdgate.db"), "SECRET-DB\n").expect("write");
    std::fs::create_dir(above.join("keys")).expect("mkdir");
    std::fs::write(above.join("keys/dev-signing-key"), "SECRET-KEY\n").expect("write");
    std::os::unix::fs::symlink(&env.ws, above.join("link-to-ws")).expect("symlink");
    env.write("src.txt", "work\n");
    std::fs::write(env.home.join("h.txt"), "home\n").expect("write");
    let mut config = env.config();
    config.masks.push(above.clone());
    let script = format!(
        "cat {a}/cmdgate.db; ls -A {a}/keys; cat {a}/keys/dev-signing-key; cat src.txt; \
         cat {h}/h.txt; ls {a}/link-to-ws/; echo made > out.txt",
        a = above.display(),
        h = env.home.display(),
    );
    let (out, err, fin) = mirrored_with(&config, &command(&env, &script));
    println!("{out}\n{err}");
    assert!(!out.contains("SECRET"), "{out}");
    assert!(!out.contains("dev-signing-key"), "{out}");
    assert!(
        out.contains("work\n") && out.contains("home\n"),
        "{out} {err}"
    );
    assert!(fin.run.clean, "{:?}", fin.run.why);
    assert!(
        fin.run.effects.iter().any(|e| matches!(e,
            Effect::Created { area: Area::Workspace, path, .. } if path.ends_with("out.txt"))),
        "{:?}",
        fin.run.effects
    );
    fin.kept.discard().expect("discard");
    // A mask that is the workspace itself hides the work: refused, nothing runs.
    let mut config = env.config();
    config.masks.push(env.ws.clone());
    let refused = mirror::start(&config, &command(&env, "true")).and_then(|run| run.wait());
    assert!(refused.is_err(), "a mask over the workspace itself ran");
}

#[test]
fn an_unmasked_secret_is_readable_and_nothing_else_is() {
    // A tier-map entry's `unmask=` (the daemon expands `~/`): those paths only, never cmdgate's.
    let env = Env::new();
    for (rel, text) in [
        (".npmrc", "NPM-TOKEN"),
        (".aws/credentials", "AWS-CREDENTIALS"),
        (".aws/config", "AWS-CONFIG"),
        (".ssh/id_rsa", "SSH-KEY"),
        (".config/cmdgate/dev-signing-key", "OWN-KEY"),
    ] {
        let p = env.home.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    let own = env.home.join(".config/cmdgate");
    let mut config = env.config();
    config.masks.push(own.clone());
    config.unmask = vec![
        env.home.join(".npmrc"),
        env.home.join(".aws/credentials"),
        own.clone(),
    ];
    let script = "for f in .npmrc .aws/credentials .aws/config .ssh/id_rsa \
                  .config/cmdgate/dev-signing-key; do echo \"$f=$(cat ~/$f 2>/dev/null)\"; done";
    let (out, err, fin) = mirrored_with(&config, &command(&env, script));
    println!("{out}{err}");
    assert!(out.contains(".npmrc=NPM-TOKEN\n"), "{out}");
    assert!(out.contains(".aws/credentials=AWS-CREDENTIALS\n"), "{out}");
    assert!(
        out.contains(".aws/config=\n"),
        "the rest of ~/.aws stays masked: {out}"
    );
    assert!(out.contains(".ssh/id_rsa=\n"), "{out}");
    assert!(
        out.contains(".config/cmdgate/dev-signing-key=\n"),
        "cmdgate's own paths are never unmasked: {out}"
    );
    fin.kept.discard().expect("discard");
}

#[test]
fn a_run_over_its_upper_limit_is_killed_and_not_clean() {
    let env = Env::new();
    let mut config = env.config();
    config.limits.upper_bytes = 8 << 20;
    let (_, _, fin) = mirrored_with(
        &config,
        &command(&env, "head -c 128M /dev/zero > big; sleep 5"),
    );
    assert!(
        fin.run
            .effects
            .iter()
            .any(|e| matches!(e, Effect::LimitHit { limit, .. } if limit == "upper")),
        "{:?}",
        fin.run.effects
    );
    assert!(!fin.run.clean);
}

#[test]
fn secrets_are_masked_for_opaque_code() {
    let env = Env::new();
    let put = |p: std::path::PathBuf, text: &str| {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    put(env.home.join(".ssh/id_rsa"), "SECRET-SSH-KEY\n");
    put(env.home.join(".aws/credentials"), "SECRET-AWS\n");
    put(env.home.join(".netrc"), "SECRET-NETRC\n");
    put(env.ws.join(".env"), "SECRET-DOTENV\n");
    put(env.ws.join("app/.env.production"), "SECRET-DOTENV-PROD\n");
    put(env.home.join("vault/token"), "SECRET-OPERATOR\n");
    put(env.ws.join("src/main.py"), "VISIBLE-SOURCE\n");
    // A link in the workspace to a secret elsewhere reaches the mask, not the data.
    std::os::unix::fs::symlink(env.home.join(".aws/credentials"), env.ws.join("creds"))
        .expect("symlink");
    let mut config = env.config();
    config.secret_paths = vec![format!("{}/vault", env.home.display())];
    let script = "PATH=/usr/bin:/bin:$PATH python3 -c '
import os, sys
home = os.environ[\"HOME\"]
for p in [home + \"/.ssh/id_rsa\", home + \"/.aws/credentials\", home + \"/.netrc\",
          \".env\", \"app/.env.production\", home + \"/vault/token\", \"creds\", \"src/main.py\"]:
    try:
        print(p, repr(open(p).read()))
    except Exception as e:
        print(p, \"error\", type(e).__name__)
print(\"ssh dir\", os.listdir(home + \"/.ssh\"))
try:
    open(home + \"/.ssh/planted\", \"w\").write(\"x\")
    print(\"ssh dir writable\")
except OSError as e:
    print(\"ssh dir read-only\", e.errno)
'";
    let (out, err, fin) = mirrored_with(&config, &command(&env, script));
    for leak in [
        "SECRET-SSH-KEY",
        "SECRET-AWS",
        "SECRET-NETRC",
        "SECRET-DOTENV",
        "SECRET-OPERATOR",
        "ssh dir writable",
    ] {
        assert!(!out.contains(leak), "{leak} reachable:\n{out}\n{err}");
    }
    assert!(out.contains("VISIBLE-SOURCE"), "{out}\n{err}");
    // The names of a masked directory's entries are placeholders (so an open of one is seen),
    // never their content.
    assert!(out.contains("ssh dir ['id_rsa']"), "{out}\n{err}");
    assert!(out.contains("/.ssh/id_rsa ''"), "{out}\n{err}");
    assert!(out.contains("ssh dir read-only"), "{out}\n{err}");
    // Nothing of the masks becomes a file effect, and the host files are untouched. (Not
    // `clean`: the upper-dir guard also counts free space on the test machine's disk.)
    let files: Vec<_> = fin
        .run
        .effects
        .iter()
        .filter(|e| e.location().is_some())
        .collect();
    assert!(files.is_empty(), "{files:?}");
    // Every open of a masked path is an effect that names it (and makes nothing dirty).
    let opened: Vec<String> = fin
        .run
        .effects
        .iter()
        .filter_map(|e| match e {
            cmdgate_sandbox::Effect::MaskedOpen { path } => Some(path.display().to_string()),
            _ => None,
        })
        .collect();
    println!("masked opens: {opened:?}");
    let home = env.home.canonicalize().expect("home");
    let ws = env.ws.canonicalize().expect("ws");
    for p in [
        home.join(".ssh/id_rsa"),
        home.join(".ssh"),
        home.join(".aws/credentials"),
        home.join(".netrc"),
        home.join("vault/token"),
        ws.join(".env"),
        ws.join("app/.env.production"),
    ] {
        assert!(
            opened.contains(&p.display().to_string()),
            "{} not reported: {opened:?}",
            p.display()
        );
    }
    assert!(!opened.iter().any(|p| p.contains("main.py")), "{opened:?}");
    assert!(
        !fin.run.why.iter().any(|w| w.contains("masked")),
        "a masked open is not a reason: {:?}",
        fin.run.why
    );
    fin.kept.discard().expect("discard");
    assert_eq!(
        std::fs::read_to_string(env.ws.join(".env")).expect("read"),
        "SECRET-DOTENV\n"
    );

    // A test-run masks the same.
    let run = crate::common::run_with(&config, "cat .env ~/.ssh/id_rsa creds; true");
    assert!(!run.stdout.contains("SECRET"), "{}", run.stdout);

    // The operator can turn masking off for one run (a tier-map entry that needs a key).
    config.mask_secrets = false;
    let run = crate::common::run_with(&config, "cat ~/.ssh/id_rsa");
    assert!(run.stdout.contains("SECRET-SSH-KEY"), "{}", run.stdout);
}

#[test]
fn a_warm_helper_runs_with_the_mounts_and_secrets_of_its_run_not_of_its_preparation() {
    // A helper prepared ahead (the daemon keeps one ready) is bound to nothing of a run: a volume
    // unmounted and a secret file created after it was prepared are what the run sees, and it
    // serves one run only.
    let env = Env::new_in(std::path::Path::new("/var/tmp"));
    let vol = env._dir.path().join("vol");
    std::fs::create_dir(&vol).expect("mkdir vol");
    mount_volume(&vol);
    let warm = mirror::Warm::new();
    let filled = warm.fill(&env.config());
    let unmounted = nix::mount::umount(&vol);
    filled.expect("prepare a helper");
    unmounted.expect("unmount the volume");
    let locks: Vec<String> = std::fs::read_dir(env.state.join("runs"))
        .expect("runs dir")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".lock").map(str::to_owned)
        })
        .collect();
    assert_eq!(locks.len(), 1, "one prepared helper: {locks:?}");
    env.write(".env", "TOKEN=prepared-after\n");
    let cmd = command(
        &env,
        &format!("cat {}/data; cat .env; echo end", vol.display()),
    );
    let mut run = mirror::start_with(&warm, &env.config(), &cmd).expect("start");
    assert_eq!(run.run_id(), locks[0], "the prepared helper ran it");
    let mut out = run.take_stdout().expect("stdout");
    let mut stdout = String::new();
    out.read_to_string(&mut stdout).expect("read stdout");
    let fin = run.wait().expect("wait");
    assert_eq!(stdout, "end\n", "{:?}", fin.run);
    // Spent: the next run starts its own helper.
    let run = mirror::start_with(&warm, &env.config(), &command(&env, "true")).expect("start");
    assert_ne!(run.run_id(), locks[0]);
    run.wait().expect("wait").kept.discard().expect("discard");
    fin.kept.discard().expect("discard");
}

/// Pid 1 hands the mirror's mount namespace and its fanotify group to the helper, which holds
/// them until after its answer (their teardown is off the run's path): the run still ends only
/// when every process of it is gone, so a background writer cannot change the kept upper dir
/// after the effects were read; it is reported, and masked opens still are.
#[test]
fn a_background_writer_is_gone_when_the_run_ends_and_the_upper_dir_stays_as_judged() {
    let env = Env::new();
    std::fs::create_dir_all(env.home.join(".ssh")).expect("mkdir");
    std::fs::write(env.home.join(".ssh/id_rsa"), "KEY").expect("key");
    let cmd = command(
        &env,
        "cat ~/.ssh/id_rsa; \
         setsid sh -c 'trap \"\" TERM HUP; while :; do echo bg-writer-6133 >> bg.log; done' & \
         while [ ! -s bg.log ]; do :; done; echo started",
    );
    let (out, _, fin) = mirrored(&env, &cmd);
    assert_eq!(out, "started\n");
    assert!(
        !process_with("bg-writer-6133"),
        "the background writer survived the run"
    );
    assert!(
        fin.run.effects.iter().any(|e| matches!(e,
            Effect::BackgroundProcess { command, .. } if command.contains("bg-writer-6133"))),
        "{:?}",
        fin.run.effects
    );
    assert!(
        fin.run.effects.iter().any(|e| matches!(e,
            Effect::MaskedOpen { path } if path.ends_with(".ssh/id_rsa"))),
        "{:?}",
        fin.run.effects
    );
    let log = fin.kept.upper().join("bg.log");
    let judged = std::fs::read(&log).expect("bg.log kept");
    assert!(!judged.is_empty());
    assert!(!process_with("bg-writer-6133"));
    assert_eq!(std::fs::read(&log).expect("bg.log kept"), judged);
    fin.kept.discard().expect("discard");
}

/// A warm helper makes the run's empty network, IPC and UTS namespaces and its `/dev` ahead
/// (`helper::fresh_namespaces`, `setup::prepare_dev`): the run is in namespaces of its own —
/// not the host's, not the previous run's — the network one holding only loopback, the UTS one
/// named `cmdgate-mirror`, and its `/dev` holds exactly the harmless devices (the host's own
/// nodes), the links and `shm`; a run with `network` keeps the host's network namespace. (A
/// namespace made ahead that were the host's, or shared between runs, would give a run a
/// network, IPC objects or a hostname it was not granted; a `/dev` other than the minimal one
/// would give it the host's disks.)
#[test]
fn a_warm_helpers_namespaces_and_dev_are_the_runs_own_and_empty() {
    let env = Env::new();
    let ns = |kind: &str| {
        std::fs::read_link(format!("/proc/self/ns/{kind}"))
            .expect("own namespace")
            .to_string_lossy()
            .into_owned()
    };
    let host: Vec<String> = ["net", "ipc", "uts"].into_iter().map(ns).collect();
    let probe = "readlink /proc/self/ns/net /proc/self/ns/ipc /proc/self/ns/uts; hostname; \
                 ls -A /dev | tr '\\n' ' '; echo; stat -c '%F %t:%T' /dev/null /dev/tty; \
                 cat /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem | grep -vc key; \
                 cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '";
    // All three prepared before any runs: their namespaces exist at once, so two distinct ones
    // cannot have the same inode number (a freed namespace's number may be reused).
    let table = mount_table();
    let configs: Vec<(bool, RunConfig, mirror::Warm)> = [false, false, true]
        .into_iter()
        .map(|network| {
            let mut config = env.config();
            config.network = network;
            let warm = mirror::Warm::new();
            warm.fill(&config).expect("prepare a helper");
            (network, config, warm)
        })
        .collect();
    let mut seen: Vec<String> = Vec::new();
    for (network, config, warm) in &configs {
        let (network, config) = (*network, config.clone());
        let (stdout, fin) = warm_run(warm, &config, &command(&env, probe));
        // Built whole ahead (`helper::Whole`): the namespaces were entered then (unless the
        // host's mount table changed meanwhile).
        assert!(fin.built_ahead || mounts_changed(&table), "{:?}", fin.run);
        let lines: Vec<&str> = stdout.lines().collect();
        assert!(lines.len() >= 8, "{stdout} {:?}", fin.run);
        let (spaces, rest) = lines.split_at(3);
        // Every kind but the network one of a `network` run is the run's own.
        for (i, (space, host)) in spaces.iter().zip(&host).enumerate() {
            if network && i == 0 {
                assert_eq!(space, host, "{stdout}");
                continue;
            }
            assert_ne!(space, host, "the host's namespace: {stdout}");
            assert!(
                !seen.iter().any(|s| s == space),
                "a namespace shared between runs: {space}"
            );
            seen.push((*space).to_owned());
        }
        assert_eq!(rest[0], "cmdgate-mirror", "{stdout}");
        assert_eq!(
            rest[1].trim(),
            "fd full null random shm stderr stdin stdout tty urandom zero",
            "{stdout}"
        );
        assert_eq!(rest[2], "character special file 1:3", "{stdout}");
        assert_eq!(rest[3], "character special file 5:0", "{stdout}");
        assert_eq!(rest[4], "0", "IPC objects in a fresh namespace: {stdout}");
        if !network {
            assert_eq!(rest[5..], ["lo"], "{stdout}");
        }
        fin.kept.discard().expect("discard");
    }
}

/// A warm helper makes the workspace's overlay ahead, for the project it was prepared for
/// (`helper::PreparedOverlay`): its kept dir's upper and work exist before the run starts, and
/// the run uses it only for that workspace as it is when the run starts — another project's
/// workspace, the workspace renamed away and replaced, or its root's mode changed get an
/// overlay made at the run, showing the tree and the mode the host has then. (An overlay made
/// ahead used for another tree would run the command on files the run was not for, and a commit
/// would apply its changes to the wrong project.)
/// Run `cmd` to the end with the helper `warm` prepared, returning (stdout, finished).
fn warm_run(warm: &mirror::Warm, config: &RunConfig, cmd: &MirrorCommand) -> (String, Finished) {
    let mut run = mirror::start_with(warm, config, cmd).expect("start");
    let mut stdout = String::new();
    run.take_stdout()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    (stdout, run.wait().expect("wait"))
}

/// The host's mount table, to tell whether it changed ([`mounts_changed`]).
fn mount_table() -> std::fs::File {
    std::fs::File::open("/proc/self/mountinfo").expect("open mountinfo")
}

/// Whether anything was mounted or unmounted on the host since `table` was opened (another
/// test, or another process of the machine): a mirror built ahead is then rightly not used.
fn mounts_changed(table: &std::fs::File) -> bool {
    use std::os::fd::AsFd;
    let mut fds = [nix::poll::PollFd::new(
        table.as_fd(),
        nix::poll::PollFlags::POLLPRI,
    )];
    nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).expect("poll mountinfo");
    fds[0]
        .revents()
        .is_some_and(|r| r.contains(nix::poll::PollFlags::POLLPRI))
}

/// [`warm_run`] with a helper filled for `config`, again while the host's mount table changed
/// during the attempt and the mirror built ahead was (rightly) not used.
fn ahead_run(config: &RunConfig, cmd: &MirrorCommand) -> (String, Finished) {
    loop {
        let table = mount_table();
        let warm = mirror::Warm::new();
        warm.fill(config).expect("prepare a helper");
        let (stdout, fin) = warm_run(&warm, config, cmd);
        if fin.built_ahead || !mounts_changed(&table) {
            return (stdout, fin);
        }
        fin.kept.discard().expect("discard");
    }
}

/// [`ahead_run`] with `change` made between the preparation and the run: again while the
/// mirror built ahead was not used or its secret walk's watch did not hold, at most five times
/// — the watch counts any change another process of the machine makes to a name the walk read
/// (`/etc/ssh`, `/run/user` are listed whole), and a test cannot tell those apart; what is
/// tested is that an unrelated change does not end it.
fn ahead_run_after(
    config: &RunConfig,
    change: &dyn Fn(),
    cmd: &MirrorCommand,
) -> (String, Finished) {
    for _ in 0..4 {
        let warm = mirror::Warm::new();
        warm.fill(config).expect("prepare a helper");
        change();
        let (stdout, fin) = warm_run(&warm, config, cmd);
        if fin.built_ahead && fin.secrets_watched {
            return (stdout, fin);
        }
        fin.kept.discard().expect("discard");
    }
    let warm = mirror::Warm::new();
    warm.fill(config).expect("prepare a helper");
    change();
    warm_run(&warm, config, cmd)
}

#[test]
fn a_workspace_overlay_made_ahead_serves_only_its_workspace_as_it_is_at_the_run() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    env.write("old.txt", "old\n");
    let config = env.config();
    let run = |config: &RunConfig, cmd: &str| -> (String, Finished, bool) {
        let warm = mirror::Warm::new();
        let prepared_for = env.config();
        warm.fill(&prepared_for).expect("prepare a helper");
        let after_fill = cmdgate_sandbox::clock::settle();
        let mut command = command(&env, cmd);
        command.cwd = config.workspace.clone();
        let (stdout, fin) = warm_run(&warm, config, &command);
        let born = std::fs::metadata(fin.kept.upper())
            .and_then(|m| m.created())
            .expect("upper dir's birth time")
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch");
        let born = [born.as_secs() as i64, i64::from(born.subsec_nanos())];
        (stdout, fin, born <= after_fill)
    };
    // The workspace it was prepared for: made ahead, used, the run's writes in its upper dir.
    let mode = std::fs::metadata(&env.ws).expect("ws").permissions().mode() & 0o7777;
    let (out, fin, ahead) = run(&config, "ls; echo x > made.txt; stat -c %a .");
    assert!(ahead, "the upper dir was made at the run");
    assert_eq!(out, format!("old.txt\n{mode:o}\n"), "{:?}", fin.run);
    assert!(fin.kept.upper().join("made.txt").is_file());
    fin.kept.discard().expect("discard");

    // Another project's workspace on the same mount (the same kept dir path): its own tree.
    let other = env.ws.with_file_name("ws2");
    std::fs::create_dir(&other).expect("mkdir");
    std::fs::write(other.join("theirs.txt"), "theirs\n").expect("write");
    let mut config2 = env.config();
    config2.workspace = other.clone();
    let (out, fin, ahead) = run(&config2, "ls; echo y > made2.txt");
    assert!(!ahead, "another project's overlay was used");
    assert_eq!(out, "theirs.txt\n", "{:?}", fin.run);
    assert!(fin.kept.upper().join("made2.txt").is_file());
    fin.kept.discard().expect("discard");

    // The workspace renamed away and replaced after the helper was prepared: the new tree.
    let warm = mirror::Warm::new();
    warm.fill(&config).expect("prepare a helper");
    std::fs::rename(&env.ws, env.ws.with_file_name("ws.old")).expect("rename");
    std::fs::create_dir(&env.ws).expect("mkdir");
    std::fs::write(env.ws.join("new.txt"), "new\n").expect("write");
    let (out, fin) = warm_run(&warm, &config, &command(&env, "ls"));
    assert_eq!(out, "new.txt\n", "{:?}", fin.run);
    fin.kept.discard().expect("discard");

    // The workspace root's mode changed after the helper was prepared: the mode of now.
    let warm = mirror::Warm::new();
    warm.fill(&config).expect("prepare a helper");
    std::fs::set_permissions(&env.ws, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    let (out, fin) = warm_run(&warm, &config, &command(&env, "stat -c %a ."));
    assert_eq!(out, "750\n", "{:?}", fin.run);
    fin.kept.discard().expect("discard");
}

/// A warm helper dropped unused (the daemon stops, or the next run is for another helper or
/// state dir) leaves nothing of its workspace overlay made ahead in the store.
#[test]
fn an_unused_warm_helper_leaves_no_kept_dir() {
    let env = Env::new();
    let config = env.config();
    let runs = cmdgate_sandbox::store::for_workspace(&env.ws.canonicalize().unwrap(), &env.state)
        .expect("store")
        .runs();
    let listed = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&runs)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let before = listed();
    let warm = mirror::Warm::new();
    warm.fill(&config).expect("prepare a helper");
    let made: Vec<_> = listed()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(made[0].join("upper").is_dir() && made[0].join("work").is_dir());
    drop(warm);
    assert_eq!(listed(), before);
}

/// A warm helper filled for a project builds the next run's whole mirror ahead
/// (`helper::Whole`: pid 1 forked, mounts, masks, pivot and mask watch done, waiting): a run
/// with that config gets it — its command, working directory, environment and output come with
/// the run, its masks hold and an open through one is reported, its writes land in the run's
/// upper dir.
#[test]
fn a_mirror_built_ahead_runs_the_command_given_at_the_run() {
    let env = Env::new();
    env.write("sub/file.txt", "content\n");
    std::fs::create_dir(env.home.join(".ssh")).expect("mkdir .ssh");
    std::fs::write(env.home.join(".ssh/id_rsa"), "PRIVATE-KEY\n").expect("write key");
    let config = env.config();
    let mut cmd = command(
        &env,
        "pwd; cat file.txt; echo \"$MARK\"; cat ~/.ssh/id_rsa; echo made > ../made.txt",
    );
    cmd.cwd = env.ws.join("sub");
    cmd.env.push(("MARK".into(), "given-at-the-run".into()));
    let (stdout, fin) = ahead_run_after(&config, &|| {}, &cmd);
    assert!(
        fin.built_ahead && fin.secrets_watched,
        "the mirror was built at the run: {:?}",
        fin.run
    );
    assert_eq!(
        stdout,
        format!(
            "{}\ncontent\ngiven-at-the-run\n",
            env.ws.join("sub").canonicalize().unwrap().display()
        ),
        "{:?}",
        fin.run
    );
    assert!(
        fin.run.effects.iter().any(|e| matches!(e,
            Effect::MaskedOpen { path } if path.ends_with(".ssh/id_rsa"))),
        "{:?}",
        fin.run.effects
    );
    assert!(fin.kept.upper().join("made.txt").is_file());
    fin.kept.discard().expect("discard");
}

/// A run reports where its time went: the command as pid 1 timed it (at least its sleep, and
/// within the run's wall time), the setup before it and the effects' walk after it.
#[test]
fn a_run_reports_its_phases() {
    let env = Env::new();
    let config = env.config();
    let cmd = command(&env, "sleep 0.2; echo done > slept.txt");
    let started = std::time::Instant::now();
    let (_, fin) = ahead_run_after(&config, &|| {}, &cmd);
    let wall = started.elapsed().as_micros() as u64;
    let p = fin.phases;
    assert!(
        (200_000..wall).contains(&p.command_us),
        "{p:?}, wall {wall} us"
    );
    assert!(
        p.ready_us > 0 && p.effects_us > 0 && p.ready_us + p.command_us + p.effects_us < wall,
        "{p:?}, wall {wall} us"
    );
    assert!(fin.kept.upper().join("slept.txt").is_file());
    fin.kept.discard().expect("discard");
}

/// A run whose entry keeps `write=` trees (the starter map's `cargo build` keeps `~/.cargo`)
/// gets its mirror built ahead too, with the kept dirs of its trees made for it: its writes
/// there land in the tree's kept dir and commit to the tree. A warm helper taken by a run
/// without those trees, or dropped unused, leaves none of their kept dirs in the tree's store.
#[test]
fn a_mirror_with_kept_write_trees_is_built_ahead_and_leaves_nothing_unused() {
    use cmdgate_sandbox::commit::{self, CommitConfig};
    let env = Env::new_in(std::path::Path::new("/var/tmp"));
    let reg = env.home.join(".cargo/registry");
    std::fs::create_dir_all(&reg).expect("mkdir registry");
    std::fs::write(reg.join("old"), "old\n").expect("write old");
    let mut config = env.config();
    config.extra_writable = vec![reg.clone()];
    let reg = reg.canonicalize().expect("canonical registry");
    let runs = cmdgate_sandbox::store::for_workspace(&reg, &env.state)
        .expect("the registry's store")
        .runs();
    // The kept `write=` trees' dirs (`<run id>-w<n>`; the workspace's store may be the same).
    let listed = || -> Vec<std::path::PathBuf> {
        let mut all: Vec<_> = std::fs::read_dir(&runs)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        all.retain(|p| p.to_string_lossy().ends_with("-w0"));
        all.sort();
        all
    };
    let before = listed();

    let cmd = command(&env, "echo new > ~/.cargo/registry/old; echo b > out");
    let (_, fin) = ahead_run(&config, &cmd);
    assert!(fin.built_ahead, "{:?}", fin.run);
    assert!(fin.run.clean, "{:?}", fin.run.why);
    assert_eq!(fin.kept.kept_writes().collect::<Vec<_>>(), [reg.as_path()]);
    commit::commit(fin.kept, &CommitConfig::default()).expect("commit");
    assert_eq!(std::fs::read_to_string(reg.join("old")).unwrap(), "new\n");
    assert_eq!(std::fs::read_to_string(env.ws.join("out")).unwrap(), "b\n");
    assert_eq!(
        listed(),
        before,
        "the committed run's kept dir stays behind"
    );

    // Built ahead, then stale at the run (a secret made in the workspace since): torn down,
    // the tree's `upper` and `work` with it, and built at the run in the same kept dirs.
    let warm = mirror::Warm::new();
    warm.fill(&config).expect("prepare a helper");
    env.write(".env", "TOKEN=made-after\n");
    let cmd = command(&env, "cat .env; echo newer > ~/.cargo/registry/old");
    let (out, fin) = warm_run(&warm, &config, &cmd);
    assert_eq!(out, "", "{:?}", fin.run);
    assert!(!fin.built_ahead, "{:?}", fin.run);
    assert_eq!(fin.kept.kept_writes().collect::<Vec<_>>(), [reg.as_path()]);
    commit::commit(fin.kept, &CommitConfig::default()).expect("commit");
    assert_eq!(std::fs::read_to_string(reg.join("old")).unwrap(), "newer\n");

    // The tree renamed away and replaced after the preparation: the run's overlay is on the
    // new one, and so is its commit.
    let warm = mirror::Warm::new();
    warm.fill(&config).expect("prepare a helper");
    std::fs::rename(&reg, reg.with_file_name("registry.old")).expect("rename the registry");
    std::fs::create_dir(&reg).expect("mkdir registry");
    std::fs::write(reg.join("old"), "fresh\n").expect("write old");
    let cmd = command(
        &env,
        "cat ~/.cargo/registry/old; echo made > ~/.cargo/registry/made",
    );
    let (out, fin) = warm_run(&warm, &config, &cmd);
    assert_eq!(out, "fresh\n", "{:?}", fin.run);
    assert!(!fin.built_ahead, "{:?}", fin.run);
    commit::commit(fin.kept, &CommitConfig::default()).expect("commit");
    assert!(reg.join("made").is_file() && !reg.with_file_name("registry.old/made").exists());
    std::fs::write(reg.join("old"), "newer\n").expect("write old");

    // Prepared for a run keeping the tree, taken by one that does not: its kept dir goes.
    let warm = mirror::Warm::new();
    warm.fill(&config).expect("prepare a helper");
    assert_eq!(listed().len(), before.len() + 1, "{:?}", listed());
    let (out, fin) = warm_run(
        &warm,
        &env.config(),
        &command(&env, "cat ~/.cargo/registry/old"),
    );
    assert_eq!(out, "newer\n", "{:?}", fin.run);
    assert!(!fin.built_ahead);
    assert_eq!(fin.kept.kept_writes().count(), 0);
    fin.kept.discard().expect("discard");
    assert_eq!(listed(), before);

    // Dropped unused.
    let warm = mirror::Warm::new();
    warm.fill(&config).expect("prepare a helper");
    assert_eq!(listed().len(), before.len() + 1, "{:?}", listed());
    drop(warm);
    assert_eq!(listed(), before);
}

/// A mirror built ahead serves a run only while it is the mirror a run built then would be:
/// after each change a script or the operator could make between the preparation and the run
/// — a secret created, a volume mounted, a directory on the way to a mask renamed and
/// replaced (an overlay keeps what it looked up: the old directory's mask would follow it and
/// the new one's secret be open), another config (the network granted) — the run gets a mirror
/// built when it starts, and sees what the host holds then.
#[test]
fn a_mirror_built_ahead_is_rebuilt_after_any_change_since() {
    let env = Env::new_in(std::path::Path::new("/var/tmp"));
    std::fs::create_dir(env.home.join("keys")).expect("mkdir keys");
    std::fs::write(env.home.join("keys/token"), "OLD-SECRET\n").expect("write token");
    let mut config = env.config();
    config.secret_paths = vec!["~/keys/token".into()];
    let keys = env.home.join("keys");
    let run = |config: &RunConfig, change: &dyn Fn(), cmd: &str| -> (String, Finished) {
        let warm = mirror::Warm::new();
        warm.fill(config).expect("prepare a helper");
        change();
        warm_run(&warm, config, &command(&env, cmd))
    };
    // Nothing changed: served ahead, the token masked.
    let cmd = command(&env, &format!("cat {}/token; echo end", keys.display()));
    let (out, fin) = ahead_run(&config, &cmd);
    assert!(fin.built_ahead, "{:?}", fin.run);
    assert_eq!(out, "end\n", "{:?}", fin.run);
    fin.kept.discard().expect("discard");

    // An ordinary file edited in the workspace, another made in the home, after the
    // preparation: nothing the secret walk read changed, its watch holds (the walk is not
    // done again) and the mirror built ahead serves the run, with what the host holds now.
    let edited = || {
        env.write("notes.txt", "edited\n");
        std::fs::write(env.home.join("notes"), "home notes\n").expect("write home notes");
    };
    let (out, fin) = ahead_run_after(&config, &edited, &command(&env, "cat notes.txt ~/notes"));
    assert!(fin.built_ahead && fin.secrets_watched, "{:?}", fin.run);
    assert_eq!(out, "edited\nhome notes\n", "{:?}", fin.run);
    fin.kept.discard().expect("discard");

    // A secret file made in a directory created after the preparation (not watched itself: its
    // creation is the event).
    let deeper = || {
        std::fs::create_dir(env.ws.join("deeper")).expect("mkdir deeper");
        env.write("deeper/.env", "TOKEN=deeper\n");
    };
    let (out, fin) = run(&config, &deeper, "cat deeper/.env; echo end");
    assert_eq!(out, "end\n", "{:?}", fin.run);
    assert!(!fin.built_ahead);
    fin.kept.discard().expect("discard");

    // A secret file created in the workspace after the preparation.
    let (out, fin) = run(
        &config,
        &|| env.write(".env", "TOKEN=made-after\n"),
        "cat .env; echo end",
    );
    assert_eq!(out, "end\n", "{:?}", fin.run);
    assert!(!fin.built_ahead);
    fin.kept.discard().expect("discard");

    // A volume mounted on the host after the preparation: the run sees it.
    let vol = env._dir.path().join("vol");
    std::fs::create_dir(&vol).expect("mkdir vol");
    let mounted = || mount_volume(&vol);
    let (out, fin) = run(&config, &mounted, &format!("cat {}/data", vol.display()));
    nix::mount::umount(&vol).expect("unmount the volume");
    assert_eq!(out, "volume-data\n", "{:?}", fin.run);
    assert!(!fin.built_ahead);
    fin.kept.discard().expect("discard");

    // The directory above a mask renamed away and replaced, a new secret at the masked path
    // (the masks are the same list, placeholders included): the new token stays masked.
    let swapped = || {
        std::fs::rename(&keys, env.home.join("keys-old")).expect("rename keys");
        std::fs::create_dir(&keys).expect("mkdir keys");
        std::fs::write(keys.join("token"), "NEW-SECRET\n").expect("write token");
    };
    let probe = format!(
        "cat {home}/keys-old/token >/dev/null; cat {home}/keys/token; echo end",
        home = env.home.display()
    );
    let (out, fin) = run(&config, &swapped, &probe);
    assert_eq!(out, "end\n", "{:?}", fin.run);
    assert!(!fin.built_ahead);
    fin.kept.discard().expect("discard");

    // Another config at the run than the one it was built for: the network granted.
    let host_net = std::fs::read_link("/proc/self/ns/net").expect("own network namespace");
    let mut network = config.clone();
    network.network = true;
    let warm = mirror::Warm::new();
    warm.fill(&config).expect("prepare a helper");
    let (out, fin) = warm_run(
        &warm,
        &network,
        &command(&env, "readlink /proc/self/ns/net"),
    );
    assert_eq!(out.trim(), host_net.to_string_lossy(), "{:?}", fin.run);
    assert!(!fin.built_ahead);
    fin.kept.discard().expect("discard");
}

/// A small tmpfs on `vol` holding `data` ("volume-data"): a volume the host mounts.
fn mount_volume(vol: &std::path::Path) {
    nix::mount::mount(
        Some("tmpfs"),
        vol,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=64k"),
    )
    .expect("mount the volume");
    std::fs::write(vol.join("data"), "volume-data\n").expect("write on the volume");
}

/// The lock files of the helpers in `env`'s state dir.
fn lock_files(env: &Env) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(env.state.join("runs"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "lock"))
                .collect()
        })
        .unwrap_or_default()
}

/// The processes of the one helper prepared in `env`'s state dir since `before` was listed
/// ([`lock_files`]: its run's cgroups are named in its lock file), as (pid, parent pid, pid
/// inside its own pid namespace).
fn prepared_processes(env: &Env, before: &[std::path::PathBuf]) -> Vec<(i32, i32, i32)> {
    let locks: Vec<_> = lock_files(env)
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert_eq!(locks.len(), 1, "one prepared helper: {locks:?}");
    let cgroup: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&locks[0]).expect("lock file"))
            .expect("cgroups named");
    let dir = cgroup["dirs"][0][2]
        .as_str()
        .expect("a cgroup dir")
        .to_owned();
    let procs = std::fs::read_to_string(std::path::Path::new(&dir).join("cgroup.procs"))
        .expect("cgroup.procs");
    procs
        .lines()
        .filter_map(|l| l.trim().parse::<i32>().ok())
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let field = |name: &str| -> Option<Vec<i32>> {
                let line = status.lines().find_map(|l| l.strip_prefix(name))?;
                Some(
                    line.split_whitespace()
                        .filter_map(|w| w.parse().ok())
                        .collect(),
                )
            };
            let ppid = *field("PPid:")?.first()?;
            let inner = *field("NSpid:")?.last()?;
            Some((pid, ppid, inner))
        })
        .collect()
}

/// A mirror built ahead whose waiting pid 1 or builder died before the run (killed by the
/// OOM killer or an operator, say) is not a failed run: the run is built at `Run`, as after
/// any other change since the preparation.
#[test]
fn a_mirror_built_ahead_whose_processes_died_is_rebuilt_at_the_run() {
    let env = Env::new();
    env.write("file.txt", "content\n");
    let config = env.config();
    for victim in ["pid 1", "builder"] {
        // Again when the host's mount table changed meanwhile (another test mounted
        // something): the helper then tore the mirror down itself, and its processes may be
        // gone before ours is killed.
        let (warm, procs, helper) = loop {
            let table = mount_table();
            let before = lock_files(&env);
            let warm = mirror::Warm::new();
            warm.fill(&config).expect("prepare a helper");
            let procs = prepared_processes(&env, &before);
            let me = std::process::id() as i32;
            let helper = procs.iter().find(|p| p.1 == me).expect("the helper").0;
            let target = match victim {
                "pid 1" => procs.iter().find(|p| p.2 == 1),
                _ => procs.iter().find(|p| p.1 == helper && p.2 != 1),
            };
            let killed = target.map(|t| {
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(t.0),
                    nix::sys::signal::Signal::SIGKILL,
                )
            });
            match killed {
                Some(Ok(())) => break (warm, procs, helper),
                _ if mounts_changed(&table) => continue,
                None => panic!("no {victim} in {procs:?}"),
                Some(Err(e)) => panic!("kill {victim}: {e}"),
            }
        };
        // The builder and pid 1 both gone (zombies at most) before the run: the other ends
        // with the one killed.
        let gone = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/status")).map_or(true, |s| {
                s.lines()
                    .any(|l| l.starts_with("State:") && l.contains('Z'))
            })
        };
        let t0 = std::time::Instant::now();
        while !procs.iter().all(|p| p.0 == helper || gone(p.0)) {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(10),
                "{victim} killed: the mirror's other processes still live: {procs:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut run =
            mirror::start_with(&warm, &config, &command(&env, "cat file.txt")).expect("start");
        let mut stdout = String::new();
        run.take_stdout()
            .expect("stdout")
            .read_to_string(&mut stdout)
            .expect("read stdout");
        let fin = run
            .wait()
            .unwrap_or_else(|e| panic!("{victim} killed: the run failed: {e}"));
        assert_eq!(stdout, "content\n", "{victim}: {:?}", fin.run);
        assert!(!fin.built_ahead, "{victim}");
        fin.kept.discard().expect("discard");
    }
}

/// A run in a mirror built ahead is killed when its caller goes away (the builder, not the
/// helper, watches the caller's hang-up), and is marked killed.
#[test]
fn a_run_in_a_mirror_built_ahead_is_killed_when_its_caller_goes_away() {
    let env = Env::new();
    let config = env.config();
    loop {
        let table = mount_table();
        let warm = mirror::Warm::new();
        warm.fill(&config).expect("prepare a helper");
        let cmd = command(&env, "echo first; touch made; exec sleep 600");
        let mut run = mirror::start_with(&warm, &config, &cmd).expect("start");
        let mut out = BufReader::new(run.take_stdout().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("first line");
        assert_eq!(line, "first\n");
        let t0 = std::time::Instant::now();
        run.killer().kill();
        let fin = run.wait().expect("wait");
        assert!(t0.elapsed() < std::time::Duration::from_secs(10));
        assert!(fin.killed, "{:?}", fin.run);
        let served = fin.built_ahead;
        fin.kept.discard().expect("discard");
        if served || !mounts_changed(&table) {
            assert!(served);
            break;
        }
    }
}

/// Whether process `pid` is gone (a zombie at most).
fn gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).map_or(true, |s| {
        s.lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
    })
}

/// A mirror built ahead lets go of the host's mounts as soon as they change, not at the next
/// run: its copy of the host's mount tree holds every file system mounted when it was built, so
/// a volume the operator unmounts while it waits stayed alive in it (its device busy, its last
/// writes not flushed by the unmount) until the agent's next command.
#[test]
fn a_mirror_built_ahead_lets_go_of_a_volume_unmounted_while_it_waits() {
    let env = Env::new();
    let config = env.config();
    let vol = env._dir.path().join("vol");
    std::fs::create_dir(&vol).expect("mkdir vol");
    let me = std::process::id() as i32;
    // Again while another test's mount let go of the mirror before this test's unmount.
    let (warm, procs, helper) = loop {
        mount_volume(&vol);
        let before = lock_files(&env);
        let warm = mirror::Warm::new();
        warm.fill(&config).expect("prepare a helper");
        let procs = prepared_processes(&env, &before);
        let helper = procs.iter().find(|p| p.1 == me).expect("the helper").0;
        if procs.iter().any(|p| p.0 != helper && !gone(p.0)) {
            break (warm, procs, helper);
        }
        drop(warm);
        nix::mount::umount(&vol).expect("unmount the volume");
    };
    nix::mount::umount(&vol).expect("unmount the volume");
    let t0 = std::time::Instant::now();
    while !procs.iter().all(|p| p.0 == helper || gone(p.0)) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "the mirror built ahead still holds the unmounted volume: {procs:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // The run is then built at `Run`, without the volume.
    let (out, fin) = warm_run(
        &warm,
        &config,
        &command(&env, &format!("cat {}/data 2>&1; echo end", vol.display())),
    );
    assert!(!fin.built_ahead);
    assert!(
        out.ends_with("end\n") && !out.contains("volume-data"),
        "{out}"
    );
    fin.kept.discard().expect("discard");
}

/// A file mask's path replaced by another file between the preparation and the run (Claude
/// Code rewrites `~/.claude.json`, a masked path, by a rename up to several times a second):
/// inside the home's overlay the mask's mount is on the overlay's dentry, which the host's
/// rename leaves in place, so the mirror built ahead serves the run; on the host tree (a mask
/// outside the home and the workspace) the rename detached the mask's mount, and the run gets
/// a mirror built when it starts. Either way the new file is masked.
#[test]
fn a_file_mask_replaced_by_a_rename_keeps_a_mirror_built_ahead_only_inside_an_overlay() {
    let env = Env::new_in(std::path::Path::new("/var/tmp"));
    let state = env.home.join(".claude.json");
    std::fs::write(&state, "OLD-STATE\n").expect("write state");
    let outside = env._dir.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir outside");
    let token = outside.join("token");
    std::fs::write(&token, "OLD-TOKEN\n").expect("write token");
    let mut config = env.config();
    config.secret_paths = vec![token.display().to_string()];
    let replace = |path: &std::path::Path, text: &str| {
        let new = path.with_extension("new");
        std::fs::write(&new, text).expect("write");
        std::fs::rename(&new, path).expect("rename");
    };
    let run_after = |change: &dyn Fn(), cmd: &str| -> (String, Finished) {
        loop {
            let table = mount_table();
            let warm = mirror::Warm::new();
            warm.fill(&config).expect("prepare a helper");
            change();
            let (stdout, fin) = warm_run(&warm, &config, &command(&env, cmd));
            if fin.built_ahead || !mounts_changed(&table) {
                return (stdout, fin);
            }
            fin.kept.discard().expect("discard");
        }
    };
    let (out, fin) = run_after(
        &|| replace(&state, "NEW-STATE\n"),
        "cat ~/.claude.json; echo end",
    );
    assert!(fin.built_ahead, "{:?}", fin.run);
    assert_eq!(out, "end\n", "{:?}", fin.run);
    fin.kept.discard().expect("discard");

    let probe = format!("cat {}; echo end", token.display());
    let (out, fin) = run_after(&|| replace(&token, "NEW-TOKEN\n"), &probe);
    assert_eq!(out, "end\n", "{:?}", fin.run);
    assert!(!fin.built_ahead, "{:?}", fin.run);
    fin.kept.discard().expect("discard");
}
