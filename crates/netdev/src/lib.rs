//! Congestion and lossless-Ethernet state of the netdevs behind RDMA ports:
//! ethtool statistics mapped to meanings (PFC pause per priority, pause
//! storms, discards, ...), DCB configuration (PFC, trust, APP), ECN enable,
//! MTU and link state. (Skeleton: the readers land with issue 3.)

/// Everything read about netdevs in one sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetdevSnapshot {}
