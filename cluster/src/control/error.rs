//! What a control-plane call can fail with. Each variant says whose mistake
//! it was, so the API edge above the control plane can give the caller the
//! right status: a bad request is never `Internal`, a moving leader is
//! `Unavailable`.

use std::sync::Arc;

use crate::control::leader::alloc_updates::UpdateError;
use crate::control::leader::broker::BrokerError;
use crate::control::leader::plan_apply::PlanError;
use crate::model::identity::NodeDenied;
use crate::model::validate::InvalidField;
use crate::raft::NodeId;
use crate::raft::ProposeError;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The request itself is wrong; the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// The request is over a stated bound; the message names it.
    #[error("{0}")]
    TooLarge(String),
    /// The request names something that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A node call without the node's secret.
    #[error(transparent)]
    Denied(#[from] NodeDenied),
    /// Leadership is moving or not settled; the caller should retry.
    #[error("{0}")]
    Unavailable(String),
    /// A forwarded call reached a server that is not the leader (any more).
    #[error("this server is not the leader; the leader is server {id} at {addr}")]
    NotLeader { id: NodeId, addr: String },
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error(transparent)]
    Propose(#[from] ProposeError),
    /// The leader's own answer to a call this server sent on, passed back as is.
    #[error("{}", .0.message())]
    Leader(Box<tonic::Status>),
}

impl From<InvalidField> for ControlError {
    fn from(e: InvalidField) -> Self {
        ControlError::Invalid(e.to_string())
    }
}

/// A batch's failure, shared by every caller in it.
impl From<Arc<UpdateError>> for ControlError {
    fn from(e: Arc<UpdateError>) -> Self {
        ControlError::Unavailable(e.to_string())
    }
}

/// A plan's broker and raft errors stay what they are; a closed queue means
/// leadership moved.
impl From<PlanError> for ControlError {
    fn from(e: PlanError) -> Self {
        match e {
            PlanError::Broker(e) => e.into(),
            PlanError::Propose(e) => e.into(),
            PlanError::NotLeader | PlanError::LeadershipChanged => {
                ControlError::Unavailable(e.to_string())
            }
        }
    }
}

impl From<tonic::Status> for ControlError {
    fn from(s: tonic::Status) -> Self {
        ControlError::Leader(Box::new(s))
    }
}
