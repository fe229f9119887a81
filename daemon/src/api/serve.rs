//! Running the daemon: config, store, sockets (bound here or passed by systemd), both servers, the
//! spool timer, and a graceful shutdown on SIGTERM/SIGINT that finishes in-flight decisions and
//! commits the audit before exiting. Shared by `cmdgated` and `cmdgate up`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cmdgate_sandbox::HelperCommand;
use tokio::net::UnixListener;
use tokio::sync::watch;

use crate::api::console::{self, Console, WithConsole};
use crate::api::listen::{self, ListenError};
use crate::api::{self, Peer, Role};
use crate::config::{Config, ConfigError, Paths};
use crate::engine::{Engine, Options, StartError};

/// How often the hook's spool is ingested.
const SPOOL_EVERY: Duration = Duration::from_secs(2);

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Listen(#[from] ListenError),
    #[error(
        "systemd passed sockets named {0}; expected one decide socket and at most one admin socket \
         (FileDescriptorName=decide / admin, else in that order)"
    )]
    SystemdSockets(String),
    #[error("{0}")]
    ConsoleAddr(String),
    #[error("cannot serve the web console on {addr}")]
    Console {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot run on the tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// What the caller chooses.
pub struct ServeOptions {
    /// Config file (default: `config.toml` in the config dir).
    pub config_file: Option<PathBuf>,
    pub helper: HelperCommand,
    /// Printed once the sockets accept connections (`cmdgate up` prints where things are).
    pub announce: bool,
}

/// Loads the config and resolves paths from the process environment.
pub fn load(config_file: Option<PathBuf>) -> Result<(Config, Paths), ConfigError> {
    let var = |k: &str| std::env::var(k).ok();
    let file = config_file.unwrap_or_else(|| Paths::config_file_from_env(&var));
    let config = Config::load(&file)?;
    let mut paths = Paths::resolve(&var, &config);
    paths.config_file = file;
    Ok((config, paths))
}

/// Runs until SIGTERM/SIGINT.
pub fn run_blocking(options: ServeOptions) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    runtime.block_on(async move {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            let _ = tx.send(true);
        });
        serve(options, rx).await
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending::<()>().await,
    }
}

/// Serves until `shutdown` turns true.
pub async fn serve(
    options: ServeOptions,
    shutdown: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let (config, paths) = load(options.config_file)?;
    let uid = nix::unistd::getuid().as_raw();
    // Sockets first: a second daemon fails here before touching the store.
    let Listeners {
        decide,
        admin,
        bound,
        passed,
    } = listeners(&config, &paths)?;
    let console_listener = if config.console.enabled {
        let addr = console::loopback(config.console.listen).map_err(ServeError::ConsoleAddr)?;
        let l = std::net::TcpListener::bind(addr)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|source| ServeError::Console { addr, source })?;
        Some(l)
    } else {
        None
    };
    let daemon = Engine::open(Options {
        config,
        paths,
        helper: options.helper,
        uid,
    })
    .await?;
    let decide = UnixListener::from_std(decide).map_err(ServeError::Runtime)?;
    let admin = UnixListener::from_std(admin).map_err(ServeError::Runtime)?;
    if options.announce {
        let at = |passed: bool, name: &str, path: &std::path::Path| {
            if passed {
                format!("the socket systemd passed ({name})")
            } else {
                path.display().to_string()
            }
        };
        eprintln!(
            "cmdgated: serving decisions on {} and the operator on {}; store {}",
            at(passed.0, "decide", &daemon.paths.decide_socket),
            at(passed.1, "admin", &daemon.paths.admin_socket),
            daemon.paths.db.display()
        );
    }
    let agent = tokio::spawn(api::run(
        decide,
        Role::Agent,
        daemon.clone(),
        shutdown.clone(),
    ));
    let mut console_task = None;
    let console = match console_listener {
        Some(l) => {
            let port = l.local_addr().map_err(ServeError::Runtime)?.port();
            let l = tokio::net::TcpListener::from_std(l).map_err(ServeError::Runtime)?;
            let peer = Peer {
                uid,
                gid: nix::unistd::getgid().as_raw(),
                pid: None,
            };
            let c = Arc::new(Console::new(daemon.clone(), port, peer));
            if options.announce {
                eprintln!(
                    "cmdgated: web console on http://127.0.0.1:{port}/ (`cmdgate console` prints a login link)"
                );
            }
            console_task = Some(tokio::spawn(console::run(l, c.clone(), shutdown.clone())));
            Some(c)
        }
        None => None,
    };
    let operator = tokio::spawn(api::run(
        admin,
        Role::Admin,
        Arc::new(WithConsole {
            inner: daemon.clone(),
            console,
        }),
        shutdown.clone(),
    ));
    let spool = tokio::spawn(spool_timer(daemon.clone(), shutdown.clone()));
    // Held asks would keep their connections (and so the shutdown) waiting: deny them at once.
    let holds = {
        let daemon = daemon.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            while !*shutdown.borrow_and_update() {
                if shutdown.changed().await.is_err() {
                    break;
                }
            }
            daemon.stop_holding();
        })
    };
    let _ = agent.await;
    let _ = operator.await;
    if let Some(t) = console_task {
        let _ = t.await;
    }
    let _ = spool.await;
    let _ = holds.await;
    // Last ingestion, then commit everything queued and stop the writer.
    let _ = daemon.ingest_spool().await;
    daemon.close().await;
    let _ = tokio::task::spawn_blocking(move || {
        for path in bound {
            let _ = std::fs::remove_file(path);
        }
    })
    .await;
    Ok(())
}

/// The sockets to serve, the paths bound here (removed at shutdown; never systemd's), and whether
/// the (decide, admin) sockets came from systemd.
struct Listeners {
    decide: std::os::unix::net::UnixListener,
    admin: std::os::unix::net::UnixListener,
    bound: Vec<PathBuf>,
    passed: (bool, bool),
}

/// Systemd's sockets when it passed any (see `roles`), otherwise both bound here. Without an admin
/// socket from systemd the daemon binds its own (operator only).
fn listeners(config: &Config, paths: &Paths) -> Result<Listeners, ServeError> {
    let passed = listen::from_systemd()?;
    if passed.is_empty() {
        return Ok(Listeners {
            decide: listen::bind(&paths.decide_socket, config.sockets.decide_mode)?,
            admin: listen::bind(&paths.admin_socket, config.sockets.admin_mode)?,
            bound: vec![paths.decide_socket.clone(), paths.admin_socket.clone()],
            passed: (false, false),
        });
    }
    let names: Vec<Option<&str>> = passed.iter().map(|(n, _)| n.as_deref()).collect();
    let (decide_at, admin_at) = roles(&names)?;
    let mut passed: Vec<_> = passed.into_iter().map(|(_, l)| Some(l)).collect();
    let decide = passed[decide_at]
        .take()
        .expect("roles gives distinct indices");
    Ok(match admin_at.and_then(|i| passed[i].take()) {
        Some(admin) => Listeners {
            decide,
            admin,
            bound: Vec::new(),
            passed: (true, true),
        },
        None => Listeners {
            decide,
            admin: listen::bind(&paths.admin_socket, config.sockets.admin_mode)?,
            bound: vec![paths.admin_socket.clone()],
            passed: (true, false),
        },
    })
}

/// Which of the sockets systemd passed is the decide socket and which (if any) the admin socket:
/// by name (`FileDescriptorName=decide` / `admin`); a socket with another name (systemd's default
/// is the socket unit's name) or none by position, first decide, second admin. Two sockets for one
/// role, a third socket, or no decide socket are refused: serving one socket of a role and closing
/// the other would leave the other's clients waiting for an answer that never comes.
fn roles(names: &[Option<&str>]) -> Result<(usize, Option<usize>), ServeError> {
    let refuse = || {
        let named: Vec<&str> = names.iter().map(|n| n.unwrap_or("(none)")).collect();
        ServeError::SystemdSockets(named.join(":"))
    };
    let (mut decide, mut admin) = (None, None);
    for (i, name) in names.iter().enumerate() {
        let slot = match (*name, i) {
            (Some("decide"), _) => &mut decide,
            (Some("admin"), _) => &mut admin,
            (_, 0) => &mut decide,
            (_, 1) => &mut admin,
            _ => return Err(refuse()),
        };
        if slot.replace(i).is_some() {
            return Err(refuse());
        }
    }
    Ok((decide.ok_or_else(refuse)?, admin))
}

async fn spool_timer(daemon: Arc<Engine>, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(SPOOL_EVERY) => {
                if let Err(e) = daemon.ingest_spool().await {
                    eprintln!("cmdgated: spool: {e}");
                }
                // Quiet session breakers go (rate-limited inside: at most once a minute).
                if let Err(e) = daemon.prune_breakers().await {
                    eprintln!("cmdgated: pruning breakers: {e}");
                }
            }
            r = shutdown.changed() => {
                if r.is_err() || *shutdown.borrow() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passed_sockets_are_told_apart_by_name_else_by_position() {
        let ok = |names: &[Option<&str>]| roles(names).unwrap();
        assert_eq!(ok(&[Some("decide"), Some("admin")]), (0, Some(1)));
        assert_eq!(ok(&[Some("admin"), Some("decide")]), (1, Some(0)));
        assert_eq!(ok(&[Some("decide")]), (0, None));
        assert_eq!(ok(&[None, None]), (0, Some(1)));
        assert_eq!(ok(&[None]), (0, None));
        // systemd's default name is the socket unit's.
        assert_eq!(
            ok(&[Some("cmdgated.socket"), Some("cmdgated-admin.socket")]),
            (0, Some(1))
        );
    }

    #[test]
    fn two_sockets_for_one_role_a_third_socket_or_no_decide_socket_are_refused() {
        for names in [
            &[Some("decide"), Some("decide")][..],
            &[Some("admin"), Some("admin")],
            &[Some("admin"), None],
            &[None, Some("decide")],
            &[Some("admin")],
            &[None, None, None],
            &[Some("decide"), Some("admin"), Some("x")],
        ] {
            assert!(
                matches!(roles(names), Err(ServeError::SystemdSockets(_))),
                "{names:?}"
            );
        }
        let err = roles(&[Some("decide"), Some("decide")]).unwrap_err();
        assert!(err.to_string().contains("named decide:decide"), "{err}");
    }
}
