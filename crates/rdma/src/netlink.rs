//! Hardware counters through RDMA netlink: [`NetlinkHwCounters`] answers the
//! RDMA reader's per-port question with one `RDMA_NLDEV_CMD_STAT_GET` per
//! port and sample, and answers `None` (the reader then reads sysfs
//! `hw_counters/`) whenever netlink cannot answer for that port.
//!
//! Why netlink: on mlx5 (kernels from 5.16) reading any `hw_counters/`
//! file makes the driver query firmware for all counters, and the 10 ms
//! `lifespan` cache is re-armed only when `rx_write_requests` is read, so
//! reading the folder file by file costs about one firmware query per file;
//! STAT_GET costs one per port. It also returns the optional counters an
//! administrator enabled, which sysfs never lists.
//!
//! What is an error (returned by [`NetlinkHwCounters::take_errors`], counted
//! by the collector) and what is not:
//! - no `NETLINK_RDMA` at all (socket refused: module not loaded, seccomp):
//!   not an error, netlink is simply unavailable; logged once; the socket
//!   is tried again next sample, so a late `modprobe ib_core` is picked up.
//! - device unknown to netlink after a refresh (another network namespace
//!   in exclusive mode), or a port the kernel has no counters for (EINVAL
//!   for a current index): not an error, sysfs answers; the port is not
//!   asked again until the device list changes.
//! - anything else (timeout, EPERM, a malformed reply, ...): an error for
//!   this sample, sysfs answers. After a timeout the rest of the sample
//!   skips netlink, so one hung kernel costs one timeout per sample, not
//!   one per port.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::{Counter, CounterNames, HwCounterSource};
use roce_netlink::rdma::{HwCounter, RdmaDevice};
use roce_netlink::{NlError, Protocol, Socket};

use roce_host::HostError;

/// The two nldev queries, behind a trait so that tests script the kernel.
pub trait Nldev: Send {
    fn list_devices(&mut self) -> Result<Vec<RdmaDevice>, NlError>;
    fn port_hw_counters(&mut self, dev_index: u32, port: u32) -> Result<Vec<HwCounter>, NlError>;
}

/// The running kernel: a `NETLINK_RDMA` socket, opened on first use and
/// reopened after it could not be opened.
#[derive(Debug)]
pub struct KernelNldev {
    timeout: Duration,
    socket: Option<Socket>,
}

impl KernelNldev {
    pub fn new(timeout: Duration) -> Self {
        KernelNldev {
            timeout,
            socket: None,
        }
    }

    fn socket(&mut self) -> Result<&mut Socket, NlError> {
        match &mut self.socket {
            Some(s) => Ok(s),
            slot => Ok(slot.insert(Socket::open(Protocol::Rdma, self.timeout)?)),
        }
    }
}

impl Nldev for KernelNldev {
    fn list_devices(&mut self) -> Result<Vec<RdmaDevice>, NlError> {
        roce_netlink::rdma::list_devices(self.socket()?)
    }

    fn port_hw_counters(&mut self, dev_index: u32, port: u32) -> Result<Vec<HwCounter>, NlError> {
        roce_netlink::rdma::port_hw_counters(self.socket()?, dev_index, port)
    }
}

/// Whether the last attempt used netlink, for logging state changes once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathState {
    Unknown,
    Netlink,
    Fallback,
}

/// A [`HwCounterSource`] over RDMA netlink. Call [`Self::begin_sample`]
/// before each reader pass and [`Self::take_errors`] after it.
pub struct NetlinkHwCounters<N: Nldev = KernelNldev> {
    nldev: N,
    /// Device name → kernel device index, from the last `CMD_GET` dump.
    indexes: HashMap<String, u32>,
    loaded: bool,
    refreshed_this_sample: bool,
    /// `indexes` was loaded during this sample.
    fresh_this_sample: bool,
    /// Netlink gave up for the rest of this sample (unavailable, timeout).
    skip_sample: bool,
    /// (device index, port) the kernel has no counters for.
    no_counters: HashSet<(u32, u32)>,
    state: PathState,
    errors: Vec<HostError>,
    /// Netlink requests sent in the current sample (a dump counts one).
    pub requests: u64,
    /// Netlink requests sent since start.
    pub requests_total: u64,
    /// One shared name per counter name (the reply carries them as text).
    names: CounterNames,
}

impl NetlinkHwCounters<KernelNldev> {
    pub fn new(timeout: Duration) -> Self {
        NetlinkHwCounters::with_nldev(KernelNldev::new(timeout))
    }
}

fn unavailable(e: &NlError) -> bool {
    matches!(
        e,
        NlError::Io {
            op: "socket"
                | "bind"
                | "getsockname"
                | "setsockopt(SO_RCVTIMEO)"
                | "setsockopt(SO_SNDTIMEO)",
            ..
        }
    )
}

fn stale_index(e: &NlError) -> bool {
    matches!(e.errno(), Some(libc::EINVAL | libc::ENODEV)) && matches!(e, NlError::Kernel { .. })
}

impl<N: Nldev> NetlinkHwCounters<N> {
    pub fn with_nldev(nldev: N) -> Self {
        NetlinkHwCounters {
            nldev,
            indexes: HashMap::new(),
            loaded: false,
            refreshed_this_sample: false,
            fresh_this_sample: false,
            skip_sample: false,
            no_counters: HashSet::new(),
            state: PathState::Unknown,
            errors: Vec::new(),
            requests: 0,
            requests_total: 0,
            names: CounterNames::new(),
        }
    }

    /// Resets the per-sample state (request count, refresh budget).
    pub fn begin_sample(&mut self) {
        self.requests = 0;
        self.refreshed_this_sample = false;
        self.fresh_this_sample = false;
        self.skip_sample = false;
    }

    /// The errors of this sample, for the collector's error list.
    pub fn take_errors(&mut self) -> Vec<HostError> {
        std::mem::take(&mut self.errors)
    }

    fn count_request(&mut self) {
        self.requests = self.requests.saturating_add(1);
        self.requests_total = self.requests_total.saturating_add(1);
    }

    fn fall_back(&mut self, why: &str) {
        if self.state != PathState::Fallback {
            tracing::warn!(
                reason = why,
                "RDMA netlink hardware counters unavailable, reading sysfs hw_counters instead"
            );
            self.state = PathState::Fallback;
        }
    }

    fn fail(&mut self, what: String, e: &NlError) {
        if unavailable(e) {
            self.skip_sample = true;
            self.fall_back(&e.to_string());
            return;
        }
        if matches!(e, NlError::Timeout) {
            self.skip_sample = true;
        }
        let error = HostError::request(format!("rdma netlink {what}"), e);
        self.fall_back(&error.to_string());
        self.errors.push(error);
    }

    /// Reloads the name → index map, at most once per sample.
    fn refresh(&mut self) {
        if self.refreshed_this_sample {
            return;
        }
        self.refreshed_this_sample = true;
        self.count_request();
        match self.nldev.list_devices() {
            Ok(devices) => {
                let indexes: HashMap<String, u32> =
                    devices.into_iter().map(|d| (d.name, d.index)).collect();
                if indexes != self.indexes {
                    self.no_counters.clear();
                }
                self.indexes = indexes;
                self.loaded = true;
                self.fresh_this_sample = true;
            }
            Err(e) => self.fail("RDMA_NLDEV_CMD_GET".into(), &e),
        }
    }

    fn index_of(&mut self, device: &str) -> Option<u32> {
        if !self.loaded || !self.indexes.contains_key(device) {
            self.refresh();
        }
        self.indexes.get(device).copied()
    }

    fn query(&mut self, device: &str, port: u32) -> Option<Vec<HwCounter>> {
        let index = self.index_of(device)?;
        if self.no_counters.contains(&(index, port)) {
            return None;
        }
        self.count_request();
        let err = match self.nldev.port_hw_counters(index, port) {
            Ok(c) => return Some(c),
            Err(e) => e,
        };
        if !stale_index(&err) {
            self.fail(format!("RDMA_NLDEV_CMD_STAT_GET {device}/{port}"), &err);
            return None;
        }
        // EINVAL: an index that no longer exists (the device was re-created
        // under a new one) or a port without counters. A device list from
        // this sample tells them apart.
        if !self.refreshed_this_sample {
            self.refresh();
        }
        if !self.fresh_this_sample {
            return None;
        }
        match self.indexes.get(device).copied() {
            Some(new) if new != index => {
                self.count_request();
                match self.nldev.port_hw_counters(new, port) {
                    Ok(c) => Some(c),
                    Err(e) if stale_index(&e) => {
                        self.no_counters.insert((new, port));
                        None
                    }
                    Err(e) => {
                        self.fail(format!("RDMA_NLDEV_CMD_STAT_GET {device}/{port}"), &e);
                        None
                    }
                }
            }
            Some(_) => {
                tracing::debug!(
                    device,
                    port,
                    "no hardware counters over netlink for this port"
                );
                self.no_counters.insert((index, port));
                None
            }
            None => None,
        }
    }
}

impl<N: Nldev> HwCounterSource for NetlinkHwCounters<N> {
    fn port_counters(&mut self, device: &str, port: u32) -> Option<Vec<Counter>> {
        if self.skip_sample {
            return None;
        }
        let counters = self.query(device, port)?;
        if self.state != PathState::Netlink {
            tracing::info!("reading hardware counters through RDMA netlink");
            self.state = PathState::Netlink;
        }
        Some(
            counters
                .into_iter()
                .map(|c| Counter {
                    name: self.names.get(&c.name),
                    value: c.value,
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted kernel: devices, per-(index, port) answers, call counts.
    #[derive(Default)]
    struct Fake {
        devices: Vec<RdmaDevice>,
        list_error: Option<NlError>,
        answers: HashMap<(u32, u32), Result<Vec<HwCounter>, NlError>>,
        lists: u32,
        stats: u32,
    }

    impl Nldev for Fake {
        fn list_devices(&mut self) -> Result<Vec<RdmaDevice>, NlError> {
            self.lists += 1;
            match &self.list_error {
                Some(e) => Err(e.clone()),
                None => Ok(self.devices.clone()),
            }
        }
        fn port_hw_counters(&mut self, i: u32, p: u32) -> Result<Vec<HwCounter>, NlError> {
            self.stats += 1;
            self.answers
                .get(&(i, p))
                .cloned()
                .unwrap_or(Err(NlError::Kernel {
                    errno: libc::EINVAL,
                    message: None,
                }))
        }
    }

    fn dev(index: u32, name: &str, ports: u32) -> RdmaDevice {
        RdmaDevice {
            index,
            name: name.into(),
            port_count: ports,
        }
    }

    fn hw(name: &str, value: u64) -> HwCounter {
        HwCounter {
            name: name.into(),
            value,
        }
    }

    fn counters(v: &[(&str, u64)]) -> Vec<Counter> {
        v.iter()
            .map(|(n, x)| Counter {
                name: (*n).into(),
                value: *x,
            })
            .collect()
    }

    fn two_port_fake() -> Fake {
        let mut f = Fake {
            devices: vec![dev(0, "mlx5_0", 1), dev(1, "mlx5_1", 1)],
            ..Fake::default()
        };
        f.answers.insert((0, 1), Ok(vec![hw("out_of_buffer", 7)]));
        f.answers.insert((1, 1), Ok(vec![hw("out_of_buffer", 9)]));
        f
    }

    #[test]
    fn one_request_per_port_per_sample_after_the_first() {
        let mut n = NetlinkHwCounters::with_nldev(two_port_fake());
        assert_eq!(n.nldev.lists + n.nldev.stats, 0, "opened lazily");
        n.begin_sample();
        assert_eq!(
            n.port_counters("mlx5_0", 1),
            Some(counters(&[("out_of_buffer", 7)]))
        );
        assert_eq!(
            n.port_counters("mlx5_1", 1),
            Some(counters(&[("out_of_buffer", 9)]))
        );
        assert_eq!(n.requests, 3); // one dump + two STAT_GET
        for _ in 0..3 {
            n.begin_sample();
            assert!(n.port_counters("mlx5_0", 1).is_some());
            assert!(n.port_counters("mlx5_1", 1).is_some());
            assert_eq!(n.requests, 2);
        }
        assert_eq!(n.requests_total, 9);
        assert_eq!((n.nldev.lists, n.nldev.stats), (1, 8));
        assert!(n.take_errors().is_empty());
    }

    #[test]
    fn unknown_device_refreshes_once_per_sample() {
        let mut n = NetlinkHwCounters::with_nldev(two_port_fake());
        n.begin_sample();
        assert_eq!(n.port_counters("rxe9", 1), None);
        assert_eq!(n.port_counters("rxe9", 2), None);
        assert!(n.port_counters("mlx5_0", 1).is_some());
        assert_eq!(n.nldev.lists, 1);
        n.begin_sample();
        assert_eq!(n.port_counters("rxe9", 1), None);
        assert_eq!(n.nldev.lists, 2);
        assert!(n.take_errors().is_empty());
    }

    #[test]
    fn recreated_device_is_found_under_its_new_index() {
        let mut n = NetlinkHwCounters::with_nldev(two_port_fake());
        n.begin_sample();
        assert!(n.port_counters("mlx5_0", 1).is_some());
        // Driver reload: mlx5_0 is now index 5; index 0 is gone (EINVAL).
        n.nldev.devices = vec![dev(5, "mlx5_0", 1), dev(1, "mlx5_1", 1)];
        n.nldev.answers.remove(&(0, 1));
        n.nldev
            .answers
            .insert((5, 1), Ok(vec![hw("out_of_buffer", 1)]));
        n.begin_sample();
        assert_eq!(
            n.port_counters("mlx5_0", 1),
            Some(counters(&[("out_of_buffer", 1)]))
        );
        assert_eq!(n.requests, 3); // failed STAT_GET, dump, retried STAT_GET
        n.begin_sample();
        assert!(n.port_counters("mlx5_0", 1).is_some());
        assert_eq!(n.requests, 1);
        assert!(n.take_errors().is_empty());
    }

    #[test]
    fn port_without_counters_is_not_asked_again() {
        let mut f = two_port_fake();
        f.devices.push(dev(2, "siw0", 1));
        let mut n = NetlinkHwCounters::with_nldev(f);
        n.begin_sample();
        assert_eq!(n.port_counters("siw0", 1), None);
        assert!(n.take_errors().is_empty());
        let stats = n.nldev.stats;
        n.begin_sample();
        assert_eq!(n.port_counters("siw0", 1), None);
        assert_eq!((n.nldev.stats, n.requests), (stats, 0));
    }

    #[test]
    fn timeout_is_an_error_and_skips_the_rest_of_the_sample() {
        let mut f = two_port_fake();
        f.answers.insert((0, 1), Err(NlError::Timeout));
        let mut n = NetlinkHwCounters::with_nldev(f);
        n.begin_sample();
        assert_eq!(n.port_counters("mlx5_0", 1), None);
        assert_eq!(n.port_counters("mlx5_1", 1), None);
        assert_eq!(n.nldev.stats, 1);
        assert_eq!(
            n.take_errors(),
            vec![HostError::request(
                "rdma netlink RDMA_NLDEV_CMD_STAT_GET mlx5_0/1",
                "netlink request timed out"
            )]
        );
        // The next sample tries again.
        n.nldev.answers.insert((0, 1), Ok(vec![]));
        n.begin_sample();
        assert_eq!(n.port_counters("mlx5_0", 1), Some(vec![]));
        assert!(n.port_counters("mlx5_1", 1).is_some());
    }

    #[test]
    fn other_failures_are_errors_for_that_port_only() {
        let mut f = two_port_fake();
        f.answers.insert(
            (0, 1),
            Err(NlError::Malformed {
                what: "attribute",
                detail: "x".into(),
            }),
        );
        let mut n = NetlinkHwCounters::with_nldev(f);
        n.begin_sample();
        assert_eq!(n.port_counters("mlx5_0", 1), None);
        assert!(n.port_counters("mlx5_1", 1).is_some());
        assert_eq!(n.take_errors().len(), 1);
        assert!(n.take_errors().is_empty());
    }

    #[test]
    fn unavailable_netlink_is_not_an_error() {
        let f = Fake {
            list_error: Some(NlError::Io {
                op: "socket",
                errno: libc::EPROTONOSUPPORT,
            }),
            ..Fake::default()
        };
        let mut n = NetlinkHwCounters::with_nldev(f);
        n.begin_sample();
        assert_eq!(n.port_counters("rxe0", 1), None);
        assert_eq!(n.port_counters("rxe1", 1), None);
        assert_eq!(n.nldev.lists, 1);
        assert!(n.take_errors().is_empty());
        assert_eq!(n.state, PathState::Fallback);
    }

    /// The running kernel, whatever it has: this host without RDMA refuses
    /// the socket (EPROTONOSUPPORT); a host with ib_core lists no such
    /// device. Either way: sysfs fallback, no error.
    #[test]
    fn real_kernel_unknown_device_falls_back_cleanly() {
        let mut n = NetlinkHwCounters::new(Duration::from_secs(2));
        n.begin_sample();
        assert_eq!(n.port_counters("roce-test-no-such-dev", 1), None);
        assert!(n.take_errors().is_empty());
        assert_eq!(n.requests, 1);
    }
}
