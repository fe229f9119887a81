//! A streamed response body: frames the engine pushes into a channel, written as they come
//! (hyper sends them with `Transfer-Encoding: chunked`). When the client goes away, hyper's write
//! fails and it drops the body, which closes the channel: the sender sees it and stops (for a
//! mirrored run: kills the run, see `engine::runs`).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper::body::{Body, Bytes, Frame};
use tokio::sync::mpsc;

/// A stream handed from the handler to the server: taken once, when the response is built.
#[derive(Clone)]
pub struct Streamed(Arc<Mutex<Option<mpsc::Receiver<Vec<u8>>>>>);

impl Streamed {
    pub fn new(rx: mpsc::Receiver<Vec<u8>>) -> Streamed {
        Streamed(Arc::new(Mutex::new(Some(rx))))
    }

    /// The body (empty if it was taken before).
    pub fn take(&self) -> ChannelBody {
        let rx = self.0.lock().ok().and_then(|mut slot| slot.take());
        ChannelBody(rx)
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
pub struct ChannelBody(Option<mpsc::Receiver<Vec<u8>>>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let Some(rx) = self.0.as_mut() else {
            return Poll::Ready(None);
        };
        match rx.poll_recv(cx) {
            Poll::Ready(Some(bytes)) => Poll::Ready(Some(Ok(Frame::data(Bytes::from(bytes))))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
