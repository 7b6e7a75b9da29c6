//! A small netlink client, enough for the exporter's read-only queries: RDMA
//! nldev (hardware counters), rtnetlink DCB and generic-netlink ethtool.
//!
//! Layers, from pure to I/O:
//! - [`msg`]: netlink constants (from `include/uapi/linux/netlink.h`), the
//!   [`MessageBuilder`], and the parsers for a datagram's messages
//!   ([`messages`]) and a payload's attributes ([`attrs`]). No I/O, no
//!   panics on any input: every malformed buffer becomes an [`NlError`].
//! - [`socket`]: [`Socket`], one request at a time, with a receive timeout
//!   and a cap on the bytes one reply may take.
//! - [`rdma`]: the RDMA nldev queries (`RDMA_NLDEV_CMD_GET`,
//!   `RDMA_NLDEV_CMD_STAT_GET`) with their pure parse functions.
//!
//! Only `socket` holds `unsafe` (the libc calls).

#![deny(unsafe_code)]

pub mod error;
pub mod msg;
pub mod rdma;
pub mod socket;

pub use error::NlError;
pub use msg::{attrs, messages, Attr, Attrs, MessageBuilder, NestToken, NlMessage, RawMessage};
pub use socket::{Protocol, Socket};
