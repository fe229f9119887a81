//! The HTTP/1.1 server over Unix sockets: accept, check the peer (`SO_PEERCRED`), parse each request
//! once into an [`ApiRequest`], hand it to the [`Handler`], write its [`ApiResponse`].
//!
//! [`run`] takes its listener and shutdown signal from outside (the binary binds the socket or takes
//! it from systemd; tests bind one in a temp dir). On shutdown it stops accepting, lets every
//! connection finish the request it is serving, and returns once all have.

pub mod console;
mod handler;
pub mod listen;
pub mod routes;
pub mod serve;
pub mod stream;
pub mod types;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

pub use crate::engine::{Peer, Role};
pub use routes::{ApiRequest, ApiResponse};

/// Largest request body: the wire's bound on what the hook sends.
pub const MAX_BODY: usize = cmdgate_policy::wire::MAX_REQUEST_BYTES;

/// How long a client may take to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// What the server needs from the daemon. Handlers see parsed requests only.
pub trait Handler: Send + Sync + 'static {
    /// May this peer use this socket? `groups` are its supplementary groups (`SO_PEERGROUPS`).
    fn allowed(&self, role: Role, peer: &Peer, groups: &[u32]) -> bool;
    /// A peer was refused (count it, audit it).
    fn refused(&self, role: Role, peer: Peer) -> impl Future<Output = ()> + Send;
    /// Answers one request.
    fn handle(
        &self,
        role: Role,
        peer: Peer,
        request: ApiRequest,
    ) -> impl Future<Output = ApiResponse> + Send;
    /// The answer to a request that did not parse. The default is the rejection's status and message;
    /// the daemon audits decide requests that fail here too.
    fn rejected(
        &self,
        role: Role,
        peer: Peer,
        rejection: routes::Rejection,
    ) -> impl Future<Output = ApiResponse> + Send {
        let _ = (role, peer);
        async move { ApiResponse::error(rejection.status, &rejection.message) }
    }
}

/// Serves `listener` until `shutdown` turns true, then drains in-flight requests and returns.
pub async fn run<H: Handler>(
    listener: UnixListener,
    role: Role,
    handler: Arc<H>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        if *shutdown.borrow() {
            break;
        }
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let handler = handler.clone();
                    let shutdown = shutdown.clone();
                    connections.spawn(serve_connection(stream, role, handler, shutdown));
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning; the hook times out into deny.
                    eprintln!("cmdgated: accept on the {} socket failed: {e}", role.as_str());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => {}
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

async fn serve_connection<H: Handler>(
    stream: UnixStream,
    role: Role,
    handler: Arc<H>,
    mut shutdown: watch::Receiver<bool>,
) {
    let peer = match stream.peer_cred() {
        Ok(c) => Peer {
            uid: c.uid(),
            gid: c.gid(),
            pid: c.pid(),
        },
        Err(e) => {
            eprintln!(
                "cmdgated: no peer credentials on the {} socket: {e}",
                role.as_str()
            );
            return;
        }
    };
    // Group-based access (cmdgate-agents, cmdgate-operators) rests on the supplementary groups,
    // which SO_PEERCRED does not carry. Unreadable groups are no groups: fewer peers pass.
    let groups = {
        use std::os::fd::AsFd;
        cmdgate_sandbox::peer::peer_groups(stream.as_fd()).unwrap_or_else(|e| {
            eprintln!(
                "cmdgated: no peer groups on the {} socket: {e}",
                role.as_str()
            );
            Vec::new()
        })
    };
    if !handler.allowed(role, &peer, &groups) {
        handler.refused(role, peer).await;
        // Read the request before answering, so the client sees the 403 instead of a broken pipe
        // (one request, bounded by the header timeout; the body is never read).
        let message = format!("peer {peer} is not allowed on the {} socket", role.as_str());
        let refuse = service_fn(move |_req: Request<Incoming>| {
            let r = ApiResponse::error(403, &message);
            async move { Ok::<_, Infallible>(to_hyper(r)) }
        });
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .keep_alive(false);
        let _ = builder.serve_connection(TokioIo::new(stream), refuse).await;
        return;
    }
    let service = service_fn(move |req: Request<Incoming>| {
        let handler = handler.clone();
        async move { Ok::<_, Infallible>(answer(role, peer, handler.as_ref(), req).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        () = stopping(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// Resolves once shutdown is requested (or its sender is gone, which also means stop).
async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    while !*shutdown.borrow_and_update() {
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}

async fn answer<H: Handler>(
    role: Role,
    peer: Peer,
    handler: &H,
    req: Request<Incoming>,
) -> Response<Reply> {
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let rejection = routes::Rejection {
                status: 413,
                message: format!("request body refused: {e}"),
            };
            return to_hyper(handler.rejected(role, peer, rejection).await);
        }
    };
    let response = match ApiRequest::parse(role, &method, &path, &body) {
        Ok(request) => handler.handle(role, peer, request).await,
        Err(rejection) => handler.rejected(role, peer, rejection).await,
    };
    to_hyper(response)
}

/// A whole body, or a stream of frames (a mirrored run).
type Reply = Either<Full<Bytes>, stream::ChannelBody>;

fn to_hyper(r: ApiResponse) -> Response<Reply> {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut builder = Response::builder().status(status);
    let body = match (r.stream, r.body) {
        (Some(stream), _) => {
            builder = builder.header("content-type", cmdgate_policy::wire::run::RUN_CONTENT_TYPE);
            Either::Right(stream.take())
        }
        (None, Some(body)) => {
            builder = builder.header("content-type", "application/json");
            Either::Left(Full::new(Bytes::from(body)))
        }
        (None, None) => Either::Left(Full::new(Bytes::new())),
    };
    builder.body(body).unwrap_or_else(|_| {
        let mut resp = Response::new(Either::Left(Full::new(Bytes::new())));
        *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        resp
    })
}
