//! The verbs layer behind two small traits, so that the engine (scheduling,
//! timeouts, classification, resource reuse) is tested with a fake and the
//! device is touched in one place only ([`crate::ibverbs`]).

use std::time::Duration;

use crate::{Failure, ProbeTarget};

#[cfg(any(test, feature = "fake"))]
pub mod fake;

/// Opens probe sessions on a host.
pub trait Verbs: Send {
    type Session: Session;

    /// Creates everything a round on `target` needs (device context, PD, a
    /// registered buffer of `buffer_len` bytes, CQ, two RC QPs taken to RTS
    /// and connected to each other or to the peer).
    fn open(&mut self, target: &ProbeTarget, buffer_len: usize)
        -> Result<Self::Session, OpenError>;
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

/// What the INIT→RTR transition of a probe's queue pairs sets about the
/// path: the MTU and the traffic class of the packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpPath {
    /// Path MTU in bytes (256, 512, 1024, 2048 or 4096).
    pub mtu: u32,
    /// The GRH traffic class (DSCP << 2 on RoCE).
    pub traffic_class: u8,
}

/// The path a target's queue pairs use on a port whose active MTU is
/// `active_mtu` bytes (`ibv_query_port`): that MTU, so that a round sends
/// packets as large as the port's traffic does (RoCE: 4096 behind a 9000
/// netdev MTU), and the target's traffic class. An active MTU that is not
/// one of the IB MTUs is taken down to the next one (256 at least).
pub fn qp_path(target: &ProbeTarget, active_mtu: u32) -> QpPath {
    let mtu = [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| active_mtu >= *m)
        .unwrap_or(256);
    QpPath {
        mtu,
        traffic_class: target.traffic_class,
    }
}

/// The long-lived resources of one target, reused round after round.
pub trait Session: Send {
    /// The path the queue pairs were connected with, when the layer knows.
    fn path(&self) -> Option<QpPath> {
        None
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_carries_the_active_mtu_and_the_traffic_class() {
        let t = ProbeTarget::loopback("mlx5_0", 1, 3).with_traffic_class(26 << 2);
        assert_eq!(
            qp_path(&t, 4096),
            QpPath {
                mtu: 4096,
                traffic_class: 104
            }
        );
        assert_eq!(qp_path(&t, 2048).mtu, 2048);
        assert_eq!(qp_path(&t, 3000).mtu, 2048);
        assert_eq!(qp_path(&t, 0).mtu, 256);
        assert_eq!(
            qp_path(&ProbeTarget::loopback("rxe0", 1, 1), 1024).traffic_class,
            0
        );
    }
}
