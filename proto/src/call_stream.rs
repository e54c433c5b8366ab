//! The caller's side of a stream of calls (`RaftService.ForwardStream`,
//! `NodeService.CallStream`): many calls on one long-lived gRPC stream, each
//! request carrying a ticket and each answer naming it, answered in
//! whatever order the calls finish. A call of its own costs both ends a new
//! HTTP/2 stream (headers, trailers, a task on the server); on the stream a
//! call is one data frame each way, and calls that are ready together
//! share frames.
//!
//! A stream that ends fails every call still waiting on it with the status
//! it ended with, or `Unavailable` when it just closed; its owner opens a
//! new one for the next call ([`CallStream::is_open`]).

// tonic calls return `Result<_, tonic::Status>`, a large error type.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Response, Status, Streaming};

/// An answer on a stream of calls: it names the call it answers.
pub trait Ticketed {
    fn ticket(&self) -> u64;
}

/// A call's answer, or the status the stream ended with: boxed, as a
/// `Status` is several times an answer's size and every waiting call's
/// channel has room for one.
type Answer<A> = Result<A, Box<Status>>;

type Waiting<A> = HashMap<u64, oneshot::Sender<Answer<A>>>;

/// One open stream: where requests go, and who waits for which ticket.
pub struct CallStream<Req, Ans> {
    /// What the stream is, for the status of a stream that closed
    /// ("the forward stream to the leader").
    name: &'static str,
    requests: mpsc::UnboundedSender<Req>,
    /// `None` once the stream has ended: no call may wait on it any more.
    waiting: Mutex<Option<Waiting<Ans>>>,
}

impl<Req, Ans> CallStream<Req, Ans>
where
    Req: Send + 'static,
    Ans: Ticketed + Send + 'static,
{
    /// Opens a stream named `name` by `start`, which makes the streaming
    /// call with the requests to send. Must run inside a tokio runtime: a
    /// task reads the answers. Requests sent before the server's headers
    /// arrive wait in the channel and go out with the call.
    pub fn open<F, Fut>(name: &'static str, start: F) -> Arc<Self>
    where
        F: FnOnce(UnboundedReceiverStream<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Streaming<Ans>>, Status>> + Send + 'static,
    {
        let (requests, rx) = mpsc::unbounded_channel();
        let open = Arc::new(Self {
            name,
            requests,
            waiting: Mutex::new(Some(HashMap::new())),
        });
        let call = start(UnboundedReceiverStream::new(rx));
        let reader = open.clone();
        tokio::spawn(async move {
            let status = match call.await {
                Err(status) => status,
                Ok(answers) => {
                    let mut answers = answers.into_inner();
                    loop {
                        match answers.message().await {
                            Ok(Some(answer)) => reader.answered(answer),
                            Ok(None) => break reader.closed(),
                            Err(status) => break status,
                        }
                    }
                }
            };
            reader.end(status);
        });
        open
    }

    /// Ends the stream from this side: every call still waiting gets
    /// `status` and new calls need a new stream. For a stream whose server
    /// went silent, which would otherwise hold its calls until the
    /// connection's own ping fails.
    pub fn abandon(&self, status: Status) {
        self.end(status);
    }

    /// Whether calls may still go on this stream.
    pub fn is_open(&self) -> bool {
        self.waiting().is_some() && !self.requests.is_closed()
    }

    /// Sends `request`, which carries `ticket`, at once, and returns the
    /// wait for its answer, which holds no copy of the request: a caller
    /// may have thousands parked. Whoever stops waiting (a timeout, a
    /// dropped future) takes its ticket off the stream; its answer, if it
    /// comes, is dropped.
    pub fn call(self: &Arc<Self>, ticket: u64, request: Req) -> Pending<Req, Ans> {
        let failed = |status| {
            let (tx, answer) = oneshot::channel();
            let _ = tx.send(Err(Box::new(status)));
            Pending {
                answer,
                _waiter: None,
                name: self.name,
            }
        };
        let (tx, answer) = oneshot::channel();
        match self.waiting().as_mut() {
            Some(w) if w.contains_key(&ticket) => {
                let status = Status::already_exists(format!(
                    "ticket {ticket} is waiting on {} already",
                    self.name
                ));
                return failed(status);
            }
            Some(w) => w.insert(ticket, tx),
            None => return failed(closed(self.name)),
        };
        let waiter = Waiter {
            stream: self.clone(),
            ticket,
        };
        if self.requests.send(request).is_err() {
            drop(waiter);
            return failed(closed(self.name));
        }
        Pending {
            answer,
            _waiter: Some(waiter),
            name: self.name,
        }
    }
}

/// The wait for one call's answer on a [`CallStream`].
pub struct Pending<Req, Ans: Ticketed> {
    /// Filled at once when the call could not be sent.
    answer: oneshot::Receiver<Answer<Ans>>,
    /// Held for its drop.
    _waiter: Option<Waiter<Req, Ans>>,
    name: &'static str,
}

impl<Req, Ans: Ticketed> Future for Pending<Req, Ans> {
    type Output = Result<Ans, Status>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let name = self.name;
        Pin::new(&mut self.answer)
            .poll(cx)
            .map(|answer| match answer {
                Ok(answer) => answer.map_err(|status| *status),
                Err(_) => Err(closed(name)),
            })
    }
}

impl<Req, Ans: Ticketed> CallStream<Req, Ans> {
    fn waiting(&self) -> MutexGuard<'_, Option<Waiting<Ans>>> {
        crate::lock(&self.waiting)
    }

    fn closed(&self) -> Status {
        closed(self.name)
    }

    /// An answer arrived: to whoever waits for its ticket, if anyone still
    /// does.
    fn answered(&self, answer: Ans) {
        let tx = self
            .waiting()
            .as_mut()
            .and_then(|w| w.remove(&answer.ticket()));
        if let Some(tx) = tx {
            let _ = tx.send(Ok(answer));
        }
    }

    /// The stream ended with `status`: every call still waiting gets it,
    /// and no call waits on this stream again.
    fn end(&self, status: Status) {
        let waiting = self.waiting().take().unwrap_or_default();
        for (_, tx) in waiting {
            let _ = tx.send(Err(Box::new(status.clone())));
        }
    }
}

/// The status of calls on the stream `name` once it closed.
fn closed(name: &str) -> Status {
    Status::unavailable(format!("{name} closed"))
}

/// Takes its ticket off the stream when the call stops waiting, however it
/// stops.
struct Waiter<Req, Ans: Ticketed> {
    stream: Arc<CallStream<Req, Ans>>,
    ticket: u64,
}

impl<Req, Ans: Ticketed> Drop for Waiter<Req, Ans> {
    fn drop(&mut self) {
        if let Some(w) = self.stream.waiting().as_mut() {
            w.remove(&self.ticket);
        }
    }
}

impl Ticketed for crate::ForwardAnswer {
    fn ticket(&self) -> u64 {
        self.ticket
    }
}

impl Ticketed for crate::NodeAnswer {
    fn ticket(&self) -> u64 {
        self.ticket
    }
}

/// The status a refused call on a stream carries, as the call of its own
/// would have ended.
impl From<crate::Refusal> for Status {
    fn from(r: crate::Refusal) -> Self {
        Status::new(tonic::Code::from(r.code), r.message)
    }
}

impl From<&Status> for crate::Refusal {
    fn from(s: &Status) -> Self {
        crate::Refusal {
            code: s.code() as i32,
            message: s.message().to_string(),
        }
    }
}
