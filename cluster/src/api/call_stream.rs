//! The server's side of a stream of calls (`RaftService.ForwardStream`,
//! `NodeService.CallStream`; the caller's is
//! [`stampede_proto::call_stream`]): each request is started as soon as it
//! is read, and its answer goes out when it finishes, in whatever order.
//! It all runs on the task that sends the answers: no task per call, no
//! channel between.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use tonic::{Status, Streaming};

/// One call in progress, to its answer.
pub type Call<A> = Pin<Box<dyn Future<Output = A> + Send>>;

/// Starts a call from its request, or refuses the request with the status
/// that ends the stream (a request whose answer could not be named).
pub type Start<R, A> = Box<dyn FnMut(R) -> Result<Call<A>, Box<Status>> + Send>;

/// The answers on one stream of calls.
pub struct Answers<R, A> {
    /// `None` once the caller has closed its side (or broken it): the calls
    /// in progress are still answered, then the stream ends.
    requests: Option<Streaming<R>>,
    calls: FuturesUnordered<Call<A>>,
    /// Most calls in progress at once; past it the stream is not read, and
    /// HTTP/2 flow control holds the caller back.
    limit: usize,
    start: Start<R, A>,
}

impl<R, A> Answers<R, A> {
    pub fn new(requests: Streaming<R>, limit: usize, start: Start<R, A>) -> Self {
        Self {
            requests: Some(requests),
            calls: FuturesUnordered::new(),
            limit,
            start,
        }
    }
}

impl<R, A> Stream for Answers<R, A> {
    type Item = Result<A, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        while this.calls.len() < this.limit {
            let Some(requests) = this.requests.as_mut() else {
                break;
            };
            match requests.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(req))) => match (this.start)(req) {
                    Ok(call) => this.calls.push(call),
                    Err(status) => {
                        this.requests = None;
                        this.calls.clear();
                        return Poll::Ready(Some(Err(*status)));
                    }
                },
                // The caller is gone or its side broke: nothing more to read.
                Poll::Ready(Some(Err(_)) | None) => this.requests = None,
                Poll::Pending => break,
            }
        }
        match this.calls.poll_next_unpin(cx) {
            Poll::Ready(Some(answer)) => Poll::Ready(Some(Ok(answer))),
            Poll::Ready(None) if this.requests.is_none() => Poll::Ready(None),
            // No call in progress: the requests' waker is registered.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }
}
