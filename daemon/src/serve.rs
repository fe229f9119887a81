//! Running the daemon: config, store, sockets (bound here or passed by systemd), both servers, the
//! spool timer, and a graceful shutdown on SIGTERM/SIGINT that finishes in-flight decisions and
//! commits the audit before exiting. Shared by `cmdgated` and `cmdgate up`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cmdgate_sandbox::HelperCommand;
use tokio::net::UnixListener;
use tokio::sync::watch;

use crate::config::{Config, ConfigError, Paths};
use crate::daemon::{Daemon, Options, StartError};
use crate::server::listen::{self, ListenError};
use crate::server::{self, Role};

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
        "systemd passed {0} sockets; expected the decide socket and optionally the admin socket"
    )]
    SystemdSockets(usize),
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
    let (decide, admin, bound) = listeners(&config, &paths)?;
    let daemon = Daemon::open(Options {
        config,
        paths,
        helper: options.helper,
        uid,
    })
    .await?;
    let decide = UnixListener::from_std(decide).map_err(ServeError::Runtime)?;
    let admin = admin
        .map(UnixListener::from_std)
        .transpose()
        .map_err(ServeError::Runtime)?;
    if options.announce {
        eprintln!(
            "cmdgated: serving decisions on {} and the operator on {}; store {}",
            daemon.paths.decide_socket.display(),
            daemon.paths.admin_socket.display(),
            daemon.paths.db.display()
        );
    }
    let agent = tokio::spawn(server::run(
        decide,
        Role::Agent,
        daemon.clone(),
        shutdown.clone(),
    ));
    let operator = admin.map(|l| {
        tokio::spawn(server::run(
            l,
            Role::Admin,
            daemon.clone(),
            shutdown.clone(),
        ))
    });
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
    if let Some(op) = operator {
        let _ = op.await;
    }
    let _ = spool.await;
    let _ = holds.await;
    // Last ingestion, then commit everything queued and stop the writer.
    let _ = daemon.ingest_spool().await;
    daemon.close().await;
    for path in bound {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

type Listeners = (
    std::os::unix::net::UnixListener,
    Option<std::os::unix::net::UnixListener>,
    Vec<PathBuf>,
);

/// Systemd's sockets when it passed any (`FileDescriptorName=decide` / `admin`, else in that
/// order), otherwise both bound here.
fn listeners(config: &Config, paths: &Paths) -> Result<Listeners, ServeError> {
    let passed = listen::from_systemd()?;
    if !passed.is_empty() {
        let mut decide = None;
        let mut admin = None;
        let n = passed.len();
        for (i, (name, l)) in passed.into_iter().enumerate() {
            match (name.as_deref(), i) {
                (Some("admin"), _) | (None, 1) => admin = Some(l),
                (Some("decide"), _) | (None, 0) => decide = Some(l),
                _ if decide.is_none() => decide = Some(l),
                _ => return Err(ServeError::SystemdSockets(n)),
            }
        }
        let decide = decide.ok_or(ServeError::SystemdSockets(n))?;
        // No admin socket from systemd: bind it ourselves (operator only).
        let (admin, bound) = match admin {
            Some(a) => (Some(a), Vec::new()),
            None => (
                Some(listen::bind(
                    &paths.admin_socket,
                    config.sockets.admin_mode,
                )?),
                vec![paths.admin_socket.clone()],
            ),
        };
        return Ok((decide, admin, bound));
    }
    let decide = listen::bind(&paths.decide_socket, config.sockets.decide_mode)?;
    let admin = listen::bind(&paths.admin_socket, config.sockets.admin_mode)?;
    Ok((
        decide,
        Some(admin),
        vec![paths.decide_socket.clone(), paths.admin_socket.clone()],
    ))
}

async fn spool_timer(daemon: Arc<Daemon>, mut shutdown: watch::Receiver<bool>) {
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
