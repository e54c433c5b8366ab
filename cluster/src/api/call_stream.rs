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
use futures::{FutureExt, Stream, StreamExt};
use tonic::{Status, Streaming};

/// One call in progress, to its answer.
type Call<A> = Pin<Box<dyn Future<Output = A> + Send>>;

/// Starts a call from its request, or refuses the request with the status
/// that ends the stream.
type Start<R, A> = Box<dyn FnMut(R) -> Result<Call<A>, Box<Status>> + Send>;

/// A request on a stream of calls: its ticket, what it asks, and how its
/// outcome is answered under that ticket. What every stream does alike
/// (a ticketless request ends the stream; a refusal is an answer, and the
/// stream goes on) is done by [`Answers`], so a service supplies only how
/// it serves one call.
pub trait Ticketed: Sized {
    /// The request without its ticket.
    type Ask: Send + 'static;
    /// What a call that was served returns.
    type Reply: Send + 'static;
    /// The answer on the stream.
    type Answer: Send + 'static;
    /// The stream, as named in the status of a request without a ticket
    /// ("a forward stream").
    const STREAM: &'static str;

    fn split(self) -> (u64, Self::Ask);
    /// The answer for `ticket`: the reply, or the refusal of the call.
    fn answer(ticket: u64, outcome: Result<Self::Reply, Status>) -> Self::Answer;
}

/// The answers on one stream of calls.
pub struct Answers<R: Ticketed> {
    /// `None` once the caller has closed its side (or broken it): the calls
    /// in progress are still answered, then the stream ends.
    requests: Option<Streaming<R>>,
    calls: FuturesUnordered<Call<R::Answer>>,
    /// Most calls in progress at once; past it the stream is not read, and
    /// HTTP/2 flow control holds the caller back.
    limit: usize,
    start: Start<R, R::Answer>,
}

impl<R: Ticketed + 'static> Answers<R> {
    /// Answers `requests`, each served by `serve`, at most `limit` at once.
    pub fn new<F, Fut>(requests: Streaming<R>, limit: usize, mut serve: F) -> Self
    where
        F: FnMut(R::Ask) -> Fut + Send + 'static,
        Fut: Future<Output = Result<R::Reply, Status>> + Send + 'static,
    {
        let start = move |request: R| -> Result<Call<R::Answer>, Box<Status>> {
            let (ticket, ask) = request.split();
            if ticket == 0 {
                return Err(Box::new(Status::invalid_argument(format!(
                    "ticket: is required on {}",
                    R::STREAM
                ))));
            }
            // `map`, not an `async` block around `call.await`: the block
            // kept the call's future twice in its state (the moved value
            // and the awaited one), doubling what each parked call holds.
            Ok(Box::pin(serve(ask).map(move |out| R::answer(ticket, out))))
        };
        Self {
            requests: Some(requests),
            calls: FuturesUnordered::new(),
            limit,
            start: Box::new(start),
        }
    }
}

impl<R: Ticketed> Stream for Answers<R> {
    type Item = Result<R::Answer, Status>;

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
