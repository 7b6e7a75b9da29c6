//! The verbs layer behind two small traits, so that the engine (scheduling,
//! timeouts, classification, resource reuse) is tested with a fake and the
//! device is touched in one place only ([`crate::ibverbs`]).

use std::time::Duration;

use crate::{Failure, Target};

/// Opens probe sessions on a host.
pub trait Verbs: Send {
    type Session: Session;

    /// Creates everything a round on `target` needs (device context, PD, a
    /// registered buffer of `buffer_len` bytes, CQ, two RC QPs taken to RTS
    /// and connected to each other or to the peer).
    fn open(&mut self, target: &Target, buffer_len: usize) -> Result<Self::Session, OpenError>;
}

/// Why a session could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// Verbs cannot work on this host at all (libibverbs missing, no
    /// uverbs device): reported once as the probe's state, not counted as a
    /// failure per round.
    Unavailable(String),
    /// A step failed: counted under its reason.
    Failed(Failure),
}

impl From<Failure> for OpenError {
    fn from(f: Failure) -> Self {
        OpenError::Failed(f)
    }
}

/// The long-lived resources of one target, reused round after round.
pub trait Session: Send {
    /// Whether the port is ACTIVE now (`ibv_query_port`).
    fn port_active(&mut self) -> Result<bool, Failure>;

    /// One round: zero the destination, post a receive, an RDMA WRITE of
    /// `payload` and a SEND of `tag`, and wait for both completions at most
    /// `timeout`. Returns the round trip and what landed.
    fn round(&mut self, payload: &[u8], tag: u32, timeout: Duration) -> Result<Landed, Failure>;
}

/// A completed round, as the device reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    /// From the post to the requester's SEND completion.
    pub rtt: Duration,
    /// The destination bytes after the WRITE (as long as the payload).
    pub written: Vec<u8>,
    /// The tag the SEND delivered to the responder's receive.
    pub tag: u32,
}
