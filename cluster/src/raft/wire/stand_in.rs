//! A stand-in peer for unit tests of the client sides of the raft wire
//! (`network`'s AppendEntries, `forwarder`'s writes), on 127.0.0.1. It is
//! not a server: the integration tests run real ones.
//!
//! AppendEntries are answered with their own bytes, the message `slow`
//! after a pause. Forwarded writes are written at index = ticket, except on
//! the stream: ticket 1 is answered last (after a pause), ticket 2 is
//! refused as `NotFound`, and ticket 3 ends the stream. With `streams`
//! false it serves neither stream, as a build from before them.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use stampede_proto::raft_service_server::{RaftService, RaftServiceServer};
use stampede_proto::{
    forward_answer, ForwardAnswer, ForwardReply, ForwardRequest, RaftPayload, Refusal,
};
use tonic::{Code, Request, Response, Status, Streaming};

/// The pause before a slow answer.
pub const SLOW: Duration = Duration::from_millis(200);

#[derive(Clone, Default)]
pub struct StandIn {
    streams: bool,
    /// AppendEntries calls of one message (not on the stream).
    pub append_calls: Arc<AtomicUsize>,
    /// Forward calls of one write (not on the stream).
    pub forward_calls: Arc<AtomicUsize>,
}

impl StandIn {
    /// Serves a new stand-in on 127.0.0.1; returns it and its address.
    pub async fn serve(streams: bool) -> (Self, String) {
        let peer = Self {
            streams,
            ..Default::default()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RaftServiceServer::new(peer.clone()))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        (peer, addr)
    }
}

async fn echo(payload: RaftPayload) -> RaftPayload {
    if payload.data == b"slow" {
        tokio::time::sleep(SLOW).await;
    }
    payload
}

fn written(ticket: u64) -> ForwardAnswer {
    ForwardAnswer {
        ticket,
        outcome: Some(forward_answer::Outcome::Written(ForwardReply {
            index: ticket,
            eval_id: String::new(),
        })),
    }
}

async fn answer(request: Result<ForwardRequest, Status>) -> Result<ForwardAnswer, Status> {
    let ticket = request?.ticket;
    match ticket {
        1 => {
            tokio::time::sleep(SLOW).await;
            Ok(written(1))
        }
        2 => Ok(ForwardAnswer {
            ticket,
            outcome: Some(forward_answer::Outcome::Refused(Refusal {
                code: Code::NotFound as i32,
                message: "job_id: no such job".into(),
            })),
        }),
        3 => Err(Status::unavailable("the stand-in ends the stream")),
        _ => Ok(written(ticket)),
    }
}

type Answers<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl RaftService for StandIn {
    async fn append_entries(
        &self,
        req: Request<RaftPayload>,
    ) -> Result<Response<RaftPayload>, Status> {
        self.append_calls.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(echo(req.into_inner()).await))
    }

    type AppendEntriesStreamStream = Answers<RaftPayload>;

    async fn append_entries_stream(
        &self,
        req: Request<Streaming<RaftPayload>>,
    ) -> Result<Response<Answers<RaftPayload>>, Status> {
        if !self.streams {
            return Err(Status::unimplemented("no such method"));
        }
        let answers = req.into_inner().then(|m| async move { Ok(echo(m?).await) });
        Ok(Response::new(Box::pin(answers)))
    }

    async fn vote(&self, _: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        Err(Status::unimplemented("vote"))
    }

    async fn pre_vote(&self, _: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        Err(Status::unimplemented("pre_vote"))
    }

    async fn install_snapshot(
        &self,
        _: Request<RaftPayload>,
    ) -> Result<Response<RaftPayload>, Status> {
        Err(Status::unimplemented("install_snapshot"))
    }

    async fn forward(
        &self,
        req: Request<ForwardRequest>,
    ) -> Result<Response<ForwardReply>, Status> {
        self.forward_calls.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(ForwardReply {
            index: req.into_inner().ticket,
            eval_id: String::new(),
        }))
    }

    type ForwardStreamStream = Answers<ForwardAnswer>;

    async fn forward_stream(
        &self,
        req: Request<Streaming<ForwardRequest>>,
    ) -> Result<Response<Answers<ForwardAnswer>>, Status> {
        if !self.streams {
            return Err(Status::unimplemented("no such method"));
        }
        Ok(Response::new(Box::pin(
            req.into_inner().map(answer).buffer_unordered(16),
        )))
    }
}
