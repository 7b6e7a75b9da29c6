//! A verbs layer in memory, for the engine's and the runner's tests
//! (`cfg(test)` here, the `fake` feature for other crates' and the
//! integration tests; never in a production build). One [`FakeDevice`],
//! shared by the test and the layer, scripts what opens and rounds do and
//! fails as libibverbs does once the kernel has disassociated an unplugged
//! device; its [`Log`] says what the engine asked of it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{qp_path, Landed, OpenError, QpPath, Session, Verbs};
use crate::{Failure, ProbeTarget, Reason};

/// The round trip of a round the script says nothing about.
pub const RTT: Duration = Duration::from_micros(7);

/// What the next round does.
#[derive(Debug, Clone)]
pub enum Step {
    /// Lands what was sent after `rtt`.
    Ok(Duration),
    /// Fails.
    Fail(Failure),
    /// Lands other bytes than those written.
    Garbage,
    /// Delivers another tag than the one sent.
    WrongTag,
}

/// What the engine asked of the layer.
#[derive(Debug, Default)]
pub struct Log {
    /// Sessions opened.
    pub opens: usize,
    /// Sessions released.
    pub closes: usize,
    /// Rounds run.
    pub rounds: usize,
    /// The timeout each round was given.
    pub timeouts_seen: Vec<Duration>,
    /// The queue-pair path of each session opened on a port with an
    /// active MTU.
    pub paths: Vec<QpPath>,
}

/// One RDMA device and its port, as the test sets them.
#[derive(Debug)]
pub struct FakeDevice {
    /// Listed by libibverbs and answering; cleared: unplugged (opens fail
    /// with `device_open`, port queries with EIO, rounds time out).
    pub present: AtomicBool,
    /// Unplug the device while the next round waits for its completions.
    pub vanish_mid_round: AtomicBool,
    /// Releasing a session of an unplugged device panics, as the real
    /// layer's asserting destructors do when a destroy fails with EIO.
    pub panicking_release: AtomicBool,
    /// The port is ACTIVE.
    pub port_up: AtomicBool,
    /// `ibv_query_port`'s active MTU, which sessions connect their queue
    /// pairs with (`qp_path`); `None`: the layer reports no path.
    pub active_mtu: Option<u32>,
    /// The outcome of the next opens, in order; `Ok` once empty.
    pub opens: Mutex<VecDeque<Result<(), OpenError>>>,
    /// What the next rounds do, in order; [`Step::Ok`] after [`RTT`] once
    /// empty.
    pub rounds: Mutex<VecDeque<Step>>,
    pub log: Mutex<Log>,
}

impl FakeDevice {
    /// A present device whose port is ACTIVE, with nothing scripted.
    pub fn new() -> Arc<FakeDevice> {
        Self::with_active_mtu(None)
    }

    /// [`Self::new`] with a port whose active MTU is `mtu` bytes.
    pub fn with_active_mtu(mtu: Option<u32>) -> Arc<FakeDevice> {
        Arc::new(FakeDevice {
            present: AtomicBool::new(true),
            vanish_mid_round: AtomicBool::new(false),
            panicking_release: AtomicBool::new(false),
            port_up: AtomicBool::new(true),
            active_mtu: mtu,
            opens: Mutex::new(VecDeque::new()),
            rounds: Mutex::new(VecDeque::new()),
            log: Mutex::new(Log::default()),
        })
    }

    fn present(&self) -> bool {
        self.present.load(Ordering::SeqCst)
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().expect("fake log")
    }
}

/// The layer over a [`FakeDevice`].
pub struct FakeVerbs(pub Arc<FakeDevice>);

/// A session of [`FakeVerbs`].
pub struct FakeSession {
    device: Arc<FakeDevice>,
    path: Option<QpPath>,
}

impl Verbs for FakeVerbs {
    type Session = FakeSession;

    fn open(&mut self, target: &ProbeTarget, buffer_len: usize) -> Result<FakeSession, OpenError> {
        assert!(buffer_len <= 4096, "a probe buffer fits in a page");
        if !self.0.present() {
            // What the real layer says when the device list lacks it.
            return Err(OpenError::Failed(Failure::new(
                Reason::DeviceOpen,
                format!(
                    "{} is not listed by libibverbs (no uverbs device or provider for it)",
                    target.device
                ),
            )));
        }
        let scripted = self.0.opens.lock().expect("fake opens").pop_front();
        scripted.unwrap_or(Ok(()))?;
        let path = self.0.active_mtu.map(|mtu| qp_path(target, mtu));
        let mut log = self.0.log();
        log.opens += 1;
        log.paths.extend(path);
        Ok(FakeSession {
            device: self.0.clone(),
            path,
        })
    }
}

impl Session for FakeSession {
    fn path(&self) -> Option<QpPath> {
        self.path
    }

    fn port_active(&mut self) -> Result<bool, Failure> {
        if !self.device.present() {
            return Err(Failure::with_errno(
                Reason::QueryPort,
                Some(libc::EIO),
                "ibv_query_port(port 1): Input/output error (os error 5)",
            ));
        }
        Ok(self.device.port_up.load(Ordering::SeqCst))
    }

    fn round(&mut self, payload: &[u8], tag: u32, timeout: Duration) -> Result<Landed, Failure> {
        {
            let mut log = self.device.log();
            log.rounds += 1;
            log.timeouts_seen.push(timeout);
        }
        if self.device.vanish_mid_round.swap(false, Ordering::SeqCst) {
            self.device.present.store(false, Ordering::SeqCst);
        }
        if !self.device.present() {
            // The CQ of a disassociated mlx5 device is a zero page: no
            // completion ever comes.
            return Err(Failure::new(
                Reason::Timeout,
                format!(
                    "3 of 3 completions missing after {} ms",
                    timeout.as_millis()
                ),
            ));
        }
        let step = self.device.rounds.lock().expect("fake rounds").pop_front();
        match step.unwrap_or(Step::Ok(RTT)) {
            Step::Ok(rtt) => Ok(Landed {
                rtt,
                written: payload.to_vec(),
                tag,
            }),
            Step::Fail(f) => Err(f),
            Step::Garbage => Ok(Landed {
                rtt: RTT,
                written: vec![0; payload.len()],
                tag,
            }),
            Step::WrongTag => Ok(Landed {
                rtt: RTT,
                written: payload.to_vec(),
                tag: tag.wrapping_add(1),
            }),
        }
    }
}

impl Drop for FakeSession {
    fn drop(&mut self) {
        self.device.log().closes += 1;
        if !self.device.present() && self.device.panicking_release.load(Ordering::SeqCst) {
            panic!("assertion `left == right` failed: ibv_destroy_qp returned 5");
        }
    }
}
