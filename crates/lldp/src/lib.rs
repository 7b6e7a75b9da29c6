//! LLDP neighbours of RDMA netdevs, for telling which switch port each NIC
//! is cabled to and what that switch port says about lossless traffic (its
//! IEEE 802.1Qaz DCBX TLVs: PFC, APP priority, ETS). Plain data out, no
//! Prometheus: the exporter names the families and judges the findings.
//!
//! Layers:
//! - [`tlv`]: IEEE 802.1AB LLDPDU decoding with the 802.1/802.3 and DCBX
//!   organizationally specific TLVs, bounded and checked as lldpd does.
//! - [`lldpd`]: lldpd's neighbours from `lldpcli -f json0 show neighbors
//!   details`, for hosts where lldpd runs.
//! - [`table`]: the neighbour table: bounded per port, aged by TTL, with
//!   the first neighbour heard kept to spot a recabling.
//! - [`capture`]: passive, receive-only AF_PACKET capture behind the
//!   [`capture::FrameSource`] trait (needs `CAP_NET_RAW`).
//! - [`reader`]: the reader the exporter's LLDP source calls each sample:
//!   `lldp.mode`, lldpcli (bounded in time and output) or the capture into
//!   the table, and the part it hands over ([`LldpSnapshot`]).
//! - [`build`]: frames built byte by byte, for tests and the test harness
//!   that plays the switch.

#![deny(unsafe_code)]

pub mod build;
pub mod capture;
pub mod lldpd;
pub mod reader;
pub mod table;
pub mod tlv;

pub use reader::{LldpPort, LldpSnapshot, MAX_FRAMES_PER_SAMPLE, MAX_FRAMES_PER_SAMPLE_WHY};
pub use table::{Identity, NeighbourTable, PortNeighbours};
pub use tlv::{parse_frame, AdvertisedEts, AppEntry, FrameError, Id, Lldpdu, Pfc};
