//! A streamed response body: frames the engine pushes into a channel, written as they come
//! (hyper sends them with `Transfer-Encoding: chunked`). When the client goes away, hyper's write
//! fails and it drops the body, which closes the channel: the sender sees it and stops (for a
//! mirrored run: kills the run, see `engine::runs`). The body also carries a `written` signal,
//! dropped with it (the engine waits for that before it starts work that would compete with the
//! last write: the next run's helper).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper::body::{Body, Bytes, Frame};
use tokio::sync::{mpsc, oneshot};

type Parts = (mpsc::Receiver<Vec<u8>>, oneshot::Sender<()>);

/// A stream handed from the handler to the server: taken once, when the response is built.
#[derive(Clone)]
pub struct Streamed(Arc<Mutex<Option<Parts>>>);

impl Streamed {
    /// `written` is dropped when the body ends or is dropped (never sent on).
    pub fn new(rx: mpsc::Receiver<Vec<u8>>, written: oneshot::Sender<()>) -> Streamed {
        Streamed(Arc::new(Mutex::new(Some((rx, written)))))
    }

    /// The body (empty if it was taken before).
    pub fn take(&self) -> ChannelBody {
        match self.0.lock().ok().and_then(|mut slot| slot.take()) {
            Some((rx, written)) => ChannelBody {
                rx: Some(rx),
                written: Some(written),
            },
            None => ChannelBody {
                rx: None,
                written: None,
            },
        }
    }
}

impl PartialEq for Streamed {
    fn eq(&self, other: &Streamed) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for Streamed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Streamed")
    }
}

/// The receiving end, as a hyper body.
pub struct ChannelBody {
    rx: Option<mpsc::Receiver<Vec<u8>>>,
    /// Dropped at the body's end (its last frame taken) or with the body.
    written: Option<oneshot::Sender<()>>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let Some(rx) = self.rx.as_mut() else {
            return Poll::Ready(None);
        };
        match rx.poll_recv(cx) {
            Poll::Ready(Some(bytes)) => Poll::Ready(Some(Ok(Frame::data(Bytes::from(bytes))))),
            Poll::Ready(None) => {
                self.written = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
