//! RDMA nldev queries over `NETLINK_RDMA`: the device list
//! (`RDMA_NLDEV_CMD_GET` dump) and a port's hardware counters
//! (`RDMA_NLDEV_CMD_STAT_GET`, what `rdma statistic show link DEV/PORT`
//! sends). Requests and replies are built and parsed by pure functions so
//! that the tests and the fuzzer need no kernel.
//!
//! Numbers from `include/uapi/rdma/rdma_netlink.h` (checked against the
//! Debian 12 header by compiling it); reply layout from
//! `drivers/infiniband/core/nldev.c`:
//! - `fill_dev_info` puts `DEV_INDEX` (u32), `DEV_NAME` (string) and, for
//!   `CMD_GET`, `PORT_INDEX` = `rdma_end_port(device)`, the port count.
//! - `stat_get_doit_default_counter` (chosen when the request has no
//!   `STAT_RES`) answers `DEV_INDEX`, `DEV_NAME`, `PORT_INDEX`, then a
//!   `STAT_HWCOUNTERS` nest of `STAT_HWCOUNTER_ENTRY` nests, each with
//!   `ENTRY_NAME` (string) and `ENTRY_VALUE` (u64 via `nla_put_u64_64bit`,
//!   so `PAD` attributes may sit between them). It refuses with EINVAL an
//!   unknown device index, a device without hardware counters, and a port
//!   without them.
//!
//! Optional counters (`IB_STAT_FLAG_OPTIONAL`, e.g. mlx5's per-opcode
//! counters): the kernel skips every counter whose `is_disabled` bit is
//! set, so the reply holds all mandatory counters plus the optional ones
//! an administrator enabled (`rdma statistic set link DEV/PORT optional-
//! counters ...`). `RDMA_NLDEV_ATTR_STAT_HWCOUNTER_DYNAMIC` is only sent
//! by `RDMA_NLDEV_CMD_STAT_GET_STATUS` (the list of what could be enabled)
//! and never in this reply, so [`port_hw_counters`] returns exactly the
//! counters the kernel sent, in its order, and does not say which were
//! optional. Sysfs `hw_counters/` lists only the mandatory ones (plus the
//! `lifespan` setting, which is not a counter and is absent here). Each
//! value is the port's counter plus what QPs bound to per-QP counters
//! accumulated (`rdma_counter_get_hwstat_value`), as sysfs shows it.

use crate::error::NlError;
use crate::msg::{attrs, Attrs, MessageBuilder, NLM_F_DUMP};
use crate::socket::Socket;

/// `RDMA_NL_NLDEV`, the nldev client.
pub const RDMA_NL_NLDEV: u16 = 5;
pub const RDMA_NLDEV_CMD_GET: u16 = 1;
pub const RDMA_NLDEV_CMD_STAT_GET: u16 = 17;

pub const RDMA_NLDEV_ATTR_PAD: u16 = 0;
pub const RDMA_NLDEV_ATTR_DEV_INDEX: u16 = 1;
pub const RDMA_NLDEV_ATTR_DEV_NAME: u16 = 2;
pub const RDMA_NLDEV_ATTR_PORT_INDEX: u16 = 3;
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTERS: u16 = 80;
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY: u16 = 81;
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME: u16 = 82;
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE: u16 = 83;
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTER_INDEX: u16 = 94;
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTER_DYNAMIC: u16 = 95;

/// `RDMA_NL_GET_TYPE(client, op)`: `(client << 10) + op`.
pub const fn nldev_type(op: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) + op
}

/// One RDMA device as `RDMA_NLDEV_CMD_GET` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDevice {
    /// The kernel's device index (stable while the device exists; a
    /// re-created device gets a new one).
    pub index: u32,
    pub name: String,
    /// Ports are numbered 1..=port_count.
    pub port_count: u32,
}

/// One hardware counter, under its kernel name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwCounter {
    pub name: String,
    pub value: u64,
}

/// A parsed `STAT_GET` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatGetReply {
    pub dev_index: Option<u32>,
    pub port: Option<u32>,
    pub counters: Vec<HwCounter>,
}

/// The `RDMA_NLDEV_CMD_GET` dump request.
pub fn get_devices_request() -> Result<Vec<u8>, NlError> {
    MessageBuilder::new(nldev_type(RDMA_NLDEV_CMD_GET), NLM_F_DUMP).finish()
}

/// The `RDMA_NLDEV_CMD_STAT_GET` request for one port's default counters.
pub fn stat_get_request(dev_index: u32, port: u32) -> Result<Vec<u8>, NlError> {
    MessageBuilder::new(nldev_type(RDMA_NLDEV_CMD_STAT_GET), 0)
        .attr_u32(RDMA_NLDEV_ATTR_DEV_INDEX, dev_index)
        .attr_u32(RDMA_NLDEV_ATTR_PORT_INDEX, port)
        .finish()
}

/// Parses one `RDMA_NLDEV_CMD_GET` reply payload (nldev has no family
/// header: attributes start right after the `nlmsghdr`).
pub fn parse_device(payload: &[u8]) -> Result<RdmaDevice, NlError> {
    let (mut index, mut name, mut ports) = (None, None, None);
    for a in attrs(payload) {
        let a = a?;
        match a.kind {
            RDMA_NLDEV_ATTR_DEV_INDEX => index = Some(a.as_u32()?),
            RDMA_NLDEV_ATTR_DEV_NAME => name = Some(a.as_str()?.to_owned()),
            RDMA_NLDEV_ATTR_PORT_INDEX => ports = Some(a.as_u32()?),
            _ => {}
        }
    }
    Ok(RdmaDevice {
        index: index.ok_or(NlError::MissingAttr {
            what: "RDMA_NLDEV_ATTR_DEV_INDEX",
        })?,
        name: name.ok_or(NlError::MissingAttr {
            what: "RDMA_NLDEV_ATTR_DEV_NAME",
        })?,
        // Absent only if the kernel changed: treat as no ports.
        port_count: ports.unwrap_or(0),
    })
}

/// Parses one `RDMA_NLDEV_CMD_STAT_GET` reply payload.
pub fn parse_port_stats(payload: &[u8]) -> Result<StatGetReply, NlError> {
    let (mut dev_index, mut port, mut table) = (None, None, None);
    for a in attrs(payload) {
        let a = a?;
        match a.kind {
            RDMA_NLDEV_ATTR_DEV_INDEX => dev_index = Some(a.as_u32()?),
            RDMA_NLDEV_ATTR_PORT_INDEX => port = Some(a.as_u32()?),
            RDMA_NLDEV_ATTR_STAT_HWCOUNTERS => table = Some(a.nested()),
            _ => {}
        }
    }
    let table = table.ok_or(NlError::MissingAttr {
        what: "RDMA_NLDEV_ATTR_STAT_HWCOUNTERS",
    })?;
    Ok(StatGetReply {
        dev_index,
        port,
        counters: parse_hw_counter_table(table)?,
    })
}

/// The entries of a `STAT_HWCOUNTERS` nest. Any malformed entry fails the
/// whole table: a partial set would look like counters that vanished.
pub fn parse_hw_counter_table(table: Attrs<'_>) -> Result<Vec<HwCounter>, NlError> {
    let mut out = Vec::new();
    for entry in table {
        let entry = entry?;
        if entry.kind != RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY {
            continue;
        }
        let (mut name, mut value) = (None, None);
        for a in entry.nested() {
            let a = a?;
            match a.kind {
                RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME => name = Some(a.as_str()?),
                RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE => value = Some(a.as_u64()?),
                _ => {}
            }
        }
        let name = name.ok_or(NlError::MissingAttr {
            what: "RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME",
        })?;
        let value = value.ok_or(NlError::MissingAttr {
            what: "RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE",
        })?;
        out.push(HwCounter {
            name: name.to_owned(),
            value,
        });
    }
    Ok(out)
}

/// Every RDMA device the kernel shows in this network namespace, in the
/// kernel's order. A host without RDMA answers an empty list.
pub fn list_devices(sock: &mut Socket) -> Result<Vec<RdmaDevice>, NlError> {
    let want = nldev_type(RDMA_NLDEV_CMD_GET);
    sock.request(get_devices_request()?)?
        .iter()
        .filter(|m| m.kind == want)
        .map(|m| parse_device(&m.payload))
        .collect()
}

/// The hardware counters of one port (see the module doc for which).
/// The kernel's EINVAL means: unknown device index, or no counters there.
pub fn port_hw_counters(
    sock: &mut Socket,
    dev_index: u32,
    port: u32,
) -> Result<Vec<HwCounter>, NlError> {
    let want = nldev_type(RDMA_NLDEV_CMD_STAT_GET);
    let replies = sock.request(stat_get_request(dev_index, port)?)?;
    let reply = replies
        .iter()
        .find(|m| m.kind == want)
        .ok_or(NlError::MissingAttr {
            what: "RDMA_NLDEV_CMD_STAT_GET reply",
        })?;
    let stats = parse_port_stats(&reply.payload)?;
    if stats.dev_index.is_some_and(|d| d != dev_index) || stats.port.is_some_and(|p| p != port) {
        return Err(NlError::Malformed {
            what: "RDMA_NLDEV_CMD_STAT_GET reply",
            detail: format!(
                "asked for device {dev_index} port {port}, got {:?} port {:?}",
                stats.dev_index, stats.port
            ),
        });
    }
    Ok(stats.counters)
}

#[cfg(test)]
mod tests;
