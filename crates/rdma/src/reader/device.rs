//! Reading one device per sample: its identity and static attributes, its
//! ports' state, counters and GIDs, and its netdev.
//!
//! `fw_ver`, `board_id`, `hca_type`, `node_guid`, `node_type`, the PCI
//! function's NUMA node and each port's `link_layer` belong to the device as
//! registered: a firmware update, a port type change or a driver reload
//! unregisters the device and registers it again, which the reader sees as a
//! vanished device or as stale handles, and scans afresh. They are read at
//! the scan and every [`super::DEFAULT_STATIC_REFRESH_INTERVAL`] (a safety net),
//! not every sample; so is `lid` on Ethernet ports (RoCE has no LIDs). An
//! error on one of them has them read again next sample, so the error keeps
//! being reported.

use std::path::PathBuf;
use std::sync::Arc;

use crate::parse::{self, CounterText};
use crate::types::{Counter, Device, HwCounterPath, LinkLayer, Port};

use super::attr::{close_attr, parsed_attr, read_attr, text_attr, Attr, Got};
use roce_host::Einval;

use super::errno::{is_absent, push_io, push_parse};
use super::gid::read_gid_table;
use super::layout::{resolve_parent, scan, Backing, DeviceStatics, Layout, PortLayout};
use super::{Ctx, HwCounterSource};

/// Per-device state kept between samples.
pub(super) struct DeviceState {
    pub(super) dir: PathBuf,
    pub(super) layout: Option<Layout>,
    /// A kept handle went stale or a listing failed: take the listings
    /// again next sample.
    pub(super) rescan: bool,
}

impl DeviceState {
    pub(super) fn new(dir: PathBuf) -> Self {
        DeviceState {
            dir,
            layout: None,
            rescan: false,
        }
    }

    pub(super) fn open_files(&self) -> usize {
        self.layout.as_ref().map_or(0, Layout::open_files)
    }

    pub(super) fn read(
        &mut self,
        name: &str,
        ctx: &mut Ctx<'_>,
        hw: &mut dyn HwCounterSource,
    ) -> Option<Device> {
        if self.rescan || self.layout.is_none() {
            ctx.io.open = ctx.io.open.saturating_sub(self.open_files());
            self.layout = None;
            let before = ctx.errors.len();
            self.layout = Some(scan(&self.dir, ctx)?);
            // A listing that failed (EACCES on `counters/`, say) is retried
            // next sample rather than reported once and then forgotten. So
            // is a device without ports: every RDMA device has one, and
            // none listed means the sample fell between the device folder
            // and its port kobjects (`ib_register_device` adds them after
            // `device_add`; unregistration removes them first). Kept, an
            // empty layout would hide the ports for the device's whole life.
            self.rescan = ctx.errors.len() > before
                || self.layout.as_ref().is_some_and(|l| l.ports.is_empty());
        }
        let layout = self.layout.as_mut()?;
        let mut stale = false;
        let device = read_device(name, layout, ctx, hw, &mut stale);
        if stale {
            self.rescan = true;
            // If the whole device went away since it was listed, it is not
            // reported half-empty.
            if let Err(e) = ctx.io.fs.read_dir(&self.dir) {
                if is_absent(&e) {
                    return None;
                }
            }
        }
        Some(device)
    }
}

pub(super) fn read_device(
    name: &str,
    layout: &mut Layout,
    ctx: &mut Ctx<'_>,
    hw: &mut dyn HwCounterSource,
    stale: &mut bool,
) -> Device {
    let mut dev = Device {
        name: name.to_string(),
        ..Device::default()
    };
    if !layout.backing.hardware {
        // Software devices: rxe names its netdev in `parent`
        // (drivers/infiniband/sw/rxe/rxe_verbs.c `parent_show`); the netdev
        // (and so its PCI function) can change while the device lives.
        dev.parent_netdev = text_attr(&mut layout.parent, ctx, stale);
        if dev.parent_netdev != layout.parent_seen {
            ctx.io.open = ctx.io.open.saturating_sub(
                layout
                    .backing
                    .numa
                    .as_ref()
                    .map_or(0, |a| usize::from(a.is_open())),
            );
            layout.backing = match &dev.parent_netdev {
                Some(parent) => resolve_parent(parent, ctx),
                None => Backing::default(),
            };
            layout.parent_seen = dev.parent_netdev.clone();
            // Another PCI function: another NUMA node.
            layout.statics = None;
        }
        dev.driver = if dev.parent_netdev.is_some() {
            Some("rxe".to_string())
        } else if name.starts_with("siw") {
            Some("siw".to_string())
        } else {
            None
        };
    } else {
        dev.driver = layout.backing.driver.clone();
    }
    dev.pci_address = layout.backing.pci_address.clone();

    let refresh = layout.statics.as_ref().is_none_or(|(at, _)| {
        ctx.now.saturating_duration_since(*at) >= ctx.static_refresh_interval
    });
    let errors_before = ctx.errors.len();
    if refresh {
        let statics = DeviceStatics {
            fw_version: text_attr(&mut layout.fw_ver, ctx, stale),
            board_id: text_attr(&mut layout.board_id, ctx, stale),
            hca_type: text_attr(&mut layout.hca_type, ctx, stale),
            node_guid: text_attr(&mut layout.node_guid, ctx, stale),
            node_type: parsed_attr(&mut layout.node_type, ctx, stale, parse::node_type),
            numa_node: layout
                .backing
                .numa
                .as_mut()
                .and_then(|numa| parsed_attr(numa, ctx, stale, parse::numa_node).flatten()),
        };
        layout.statics = Some((ctx.now, statics));
        // Read once a minute: their handles would only take budget from the
        // files read every sample.
        for attr in [
            &mut layout.fw_ver,
            &mut layout.board_id,
            &mut layout.hca_type,
            &mut layout.node_guid,
            &mut layout.node_type,
        ] {
            close_attr(attr, ctx);
        }
        if let Some(numa) = layout.backing.numa.as_mut() {
            close_attr(numa, ctx);
        }
    }
    if let Some((_, st)) = &layout.statics {
        dev.fw_version = st.fw_version.clone();
        dev.board_id = st.board_id.clone();
        dev.hca_type = st.hca_type.clone();
        dev.node_guid = st.node_guid.clone();
        dev.node_type = st.node_type.clone();
        dev.numa_node = st.numa_node;
    }

    let mut static_failed = ctx.errors.len() > errors_before;
    for pl in &mut layout.ports {
        let port = read_port(&dev, pl, refresh, &mut static_failed, ctx, hw, stale);
        dev.ports.push(port);
    }
    if static_failed {
        // An attribute that should be there failed: read the static ones
        // again next sample rather than reporting the error once.
        layout.statics = None;
    }
    dev
}

/// `refresh`: the static attributes are read this sample (a failure among
/// them sets `static_failed`).
pub(super) fn read_port(
    dev: &Device,
    pl: &mut PortLayout,
    refresh: bool,
    static_failed: &mut bool,
    ctx: &mut Ctx<'_>,
    hw: &mut dyn HwCounterSource,
    stale: &mut bool,
) -> Port {
    let mut port = Port {
        number: pl.number,
        state: parsed_attr(&mut pl.state, ctx, stale, parse::port_state),
        phys_state: parsed_attr(&mut pl.phys_state, ctx, stale, parse::phys_state),
        rate_bytes_per_second: parsed_attr(&mut pl.rate, ctx, stale, parse::rate_bytes_per_second),
        ..Port::default()
    };
    // A port's link layer is fixed while the device exists (changing a
    // ConnectX port between IB and Ethernet re-creates the device). LIDs
    // are InfiniBand addresses the subnet manager assigns, and can change;
    // RoCE has none and the file reads 0x0 (as rxe's in the VM captures).
    let errors_before = ctx.errors.len();
    if refresh {
        pl.link_layer_seen = parsed_attr(&mut pl.link_layer, ctx, stale, |t| {
            Ok::<_, std::convert::Infallible>(parse::link_layer(t))
        });
    }
    let lid_static = matches!(pl.link_layer_seen, Some(LinkLayer::Ethernet));
    if refresh || !lid_static {
        pl.lid_seen = parsed_attr(&mut pl.lid, ctx, stale, parse::hex_u32);
    }
    if refresh {
        close_attr(&mut pl.link_layer, ctx);
        if lid_static {
            close_attr(&mut pl.lid, ctx);
        }
    }
    if refresh && ctx.errors.len() > errors_before {
        *static_failed = true;
    }
    port.link_layer = pl.link_layer_seen.clone();
    port.lid = pl.lid_seen;

    port.counters = read_counters(&mut pl.counters, ctx, stale);
    match hw.port_counters(&dev.name, pl.number) {
        Some(mut counters) => {
            counters.retain(|c| &*c.name != "lifespan");
            counters.sort_by(|a, b| a.name.cmp(&b.name));
            port.hw_counters = counters;
            port.hw_counter_path = HwCounterPath::Netlink;
        }
        None if !pl.hw_counters.is_empty() => {
            port.hw_counters = read_counters(&mut pl.hw_counters, ctx, stale);
            port.hw_counter_path = HwCounterPath::Sysfs;
        }
        None => {}
    }

    let state_changed = pl.state_seen.as_ref() != Some(&port.state);
    port.gids = read_gid_table(pl, &port.state, ctx, stale);
    port.netdev = port.gids.iter().find_map(|g| g.netdev.clone());
    if port.netdev.is_none() {
        port.netdev = match &pl.listed_netdev {
            Some(listed) if !refresh && !state_changed => listed.clone(),
            _ => {
                let listed = device_netdev(pl, ctx);
                pl.listed_netdev = Some(listed.clone());
                listed
            }
        };
    }
    if port.netdev.is_none() {
        port.netdev = dev.parent_netdev.clone();
    }
    port
}

pub(super) fn read_counters(
    files: &mut [(Arc<str>, Attr)],
    ctx: &mut Ctx<'_>,
    stale: &mut bool,
) -> Vec<Counter> {
    let mut out = Vec::with_capacity(files.len());
    for (name, attr) in files.iter_mut() {
        let Got::Len(n) = read_attr(attr, Einval::Error, ctx, stale) else {
            continue;
        };
        match parse::counter_bytes(ctx.io.buf.bytes(n)) {
            Ok(CounterText::Value(value)) => out.push(Counter {
                name: Arc::clone(name),
                value,
            }),
            Ok(CounterText::NotAvailable) => {}
            Err(msg) => push_parse(ctx.errors, &attr.path, msg),
        }
    }
    out
}

/// The first netdev in the backing function's `net/` folder. Listed every
/// time it is needed (a rename changes the folder's entries), through the
/// port's kept handle of the folder; a failed or empty listing lets go of
/// the handle, so the next one opens the folder afresh.
pub(super) fn device_netdev(pl: &mut PortLayout, ctx: &mut Ctx<'_>) -> Option<String> {
    // `<dev>/ports/N/state`.
    let dev_dir = pl.state.path.parent()?.parent()?.parent()?;
    let net = dev_dir.join("device/net");
    if let Err(e) = ctx
        .io
        .fs
        .list_kept(&net, &mut pl.net_dir, &mut pl.net_names)
    {
        pl.net_dir.forget();
        if !is_absent(&e) {
            push_io(ctx.errors, &net, &e);
        }
        return None;
    }
    for name in pl.net_names.iter().filter(|n| n.to_str().is_none()) {
        ctx.errors
            .push(super::not_utf8(&net.join(name), "netdev", name));
    }
    let first = pl
        .net_names
        .iter()
        .filter_map(|n| n.to_str())
        .min()
        .map(str::to_string);
    if first.is_none() {
        pl.net_dir.forget();
    }
    first
}
