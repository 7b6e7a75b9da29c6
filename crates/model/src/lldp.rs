//! The LLDP part of a snapshot: each RDMA netdev's link partner as its LLDP
//! frames (or lldpd) describe it, with the switch port's DCBX view. The
//! types are roce-lldp's, whose reader fills them.

pub use roce_lldp::{LldpPort, LldpSnapshot};
