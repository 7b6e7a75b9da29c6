//! In-memory sides of a stream for the tests: a requester whose writes
//! complete as soon as it waits (or fail, or never complete), and a
//! receiver fed from a script. No device, no thread.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::{write_of, Completion, Receiver, Requester, Waker};
use crate::Failure;

/// Writes complete at the next wait, in order.
#[derive(Debug)]
pub struct FakeRequester {
    qps: usize,
    queue: VecDeque<u64>,
    per_qp: Vec<u32>,
    max_per_qp: u32,
    posted: u64,
    posted_bytes: u64,
    /// After this many posts, completions carry this status.
    fail: Option<(u64, u32)>,
    /// After this many posts, nothing completes any more.
    silent_after: Option<u64>,
}

impl FakeRequester {
    pub fn new(qps: usize) -> Self {
        FakeRequester {
            qps,
            queue: VecDeque::new(),
            per_qp: vec![0; qps],
            max_per_qp: 0,
            posted: 0,
            posted_bytes: 0,
            fail: None,
            silent_after: None,
        }
    }

    pub fn fail_after(&mut self, posts: u64, status: u32) {
        self.fail = Some((posts, status));
    }

    pub fn go_silent_after(&mut self, posts: u64) {
        self.silent_after = Some(posts);
    }

    pub fn outstanding(&self) -> u32 {
        self.per_qp.iter().sum()
    }

    pub fn max_outstanding_per_qp(&self) -> u32 {
        self.max_per_qp
    }

    pub fn posted_bytes(&self) -> u64 {
        self.posted_bytes
    }
}

impl Requester for FakeRequester {
    fn qps(&self) -> usize {
        self.qps
    }

    fn post_write(&mut self, qp: usize, len: u32, wr_id: u64) -> Result<(), Failure> {
        self.posted += 1;
        self.posted_bytes += u64::from(len);
        if let Some(n) = self.per_qp.get_mut(qp) {
            *n += 1;
            self.max_per_qp = self.max_per_qp.max(*n);
        }
        if self.silent_after.is_none_or(|s| self.posted <= s) {
            self.queue.push_back(wr_id);
        }
        Ok(())
    }

    fn wait(&mut self, until: Instant, out: &mut Vec<Completion>) -> Result<(), Failure> {
        if self.queue.is_empty() {
            // What a blocked wait would do: nothing comes before `until`.
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
            return Ok(());
        }
        let status = match self.fail {
            Some((after, status)) if self.posted > after => status,
            _ => 0,
        };
        while let Some(wr_id) = self.queue.pop_front() {
            let (qp, len) = write_of(wr_id);
            if let Some(n) = self.per_qp.get_mut(qp) {
                *n = n.saturating_sub(1);
            }
            out.push(Completion {
                wr_id,
                status,
                bytes: len,
                qp,
            });
        }
        Ok(())
    }
}

/// Messages arrive as scripted, one batch per wait.
#[derive(Debug)]
pub struct FakeReceiver {
    qps: usize,
    script: VecDeque<(usize, u32)>,
    endless: Option<u32>,
    fail: Option<u32>,
    posted: Vec<u32>,
    halted: bool,
    woken: Arc<AtomicBool>,
}

impl FakeReceiver {
    pub fn new(qps: usize) -> Self {
        FakeReceiver {
            qps,
            script: VecDeque::new(),
            endless: None,
            fail: None,
            posted: vec![0; qps],
            halted: false,
            woken: Arc::new(AtomicBool::new(false)),
        }
    }

    /// (QP, bytes) of the messages to deliver, one per wait.
    pub fn script(&mut self, messages: &[(usize, u32)]) {
        self.script.extend(messages.iter().copied());
    }

    /// A message of `bytes` on QP 0 at every wait, for ever.
    pub fn endless(&mut self, bytes: u32) {
        self.endless = Some(bytes);
    }

    /// Once the script is delivered, one completion with this status.
    pub fn fail_next(&mut self, status: u32) {
        self.fail = Some(status);
    }

    pub fn posted(&self, qp: usize) -> u32 {
        self.posted.get(qp).copied().unwrap_or(0)
    }

    pub fn halted(&self) -> bool {
        self.halted
    }
}

impl Receiver for FakeReceiver {
    fn qps(&self) -> usize {
        self.qps
    }

    fn post_receives(&mut self, qp: usize, n: u32) -> Result<(), Failure> {
        if let Some(p) = self.posted.get_mut(qp) {
            *p += n;
        }
        Ok(())
    }

    fn wait(&mut self, until: Instant, out: &mut Vec<Completion>) -> Result<(), Failure> {
        let next = self
            .script
            .pop_front()
            .or(self.endless.map(|b| (0, b)))
            .map(|m| (m, 0))
            .or_else(|| self.fail.take().map(|s| ((0, 0), s)));
        match next {
            Some(((qp, bytes), status)) => out.push(Completion {
                wr_id: 0,
                status,
                bytes,
                qp,
            }),
            None => {
                if !self.woken.swap(false, Ordering::SeqCst) {
                    std::thread::sleep(until.saturating_duration_since(Instant::now()));
                }
            }
        }
        Ok(())
    }

    fn halt(&mut self) {
        self.halted = true;
    }

    fn waker(&self) -> Waker {
        let w = self.woken.clone();
        Waker::new(move || w.store(true, Ordering::SeqCst))
    }
}

/// A fabric of fake load ports in one process: a requester's writes land
/// in the receiver whose queue pair it connected to (one receive
/// completion each, over a channel, so the receiver's wait is a real
/// blocking wait), and every open port is counted, so that a test sees
/// the resources go back to where they were.
#[derive(Debug, Clone, Default)]
pub struct FakeLoadFabric {
    inner: Arc<std::sync::Mutex<FabricState>>,
}

#[derive(Debug, Default)]
struct FabricState {
    next_qpn: u32,
    /// Receivers' queue pairs: where a write to the QPN goes.
    inbox:
        std::collections::HashMap<u32, (std::sync::mpsc::Sender<Inbound>, usize, Arc<AtomicBool>)>,
    open: usize,
    opened: u64,
    /// Every port opened from now on fails with this.
    fail_open: Option<String>,
}

#[derive(Debug)]
enum Inbound {
    Write(usize, u32),
    Wake,
}

impl FakeLoadFabric {
    pub fn new() -> Self {
        FakeLoadFabric::default()
    }

    /// Ports open now (requesters and receivers).
    pub fn open(&self) -> usize {
        self.lock().open
    }

    /// Ports opened since the fabric was made.
    pub fn opened(&self) -> u64 {
        self.lock().opened
    }

    pub fn fail_open(&self, why: Option<&str>) {
        self.lock().fail_open = why.map(str::to_string);
    }

    /// The verbs of one node, whose ports have `gid`.
    pub fn node(&self, gid: std::net::Ipv6Addr) -> FakeLoadVerbs {
        FakeLoadVerbs {
            fabric: self.clone(),
            gid,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FabricState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One node's [`super::LoadVerbs`] on a [`FakeLoadFabric`].
#[derive(Debug, Clone)]
pub struct FakeLoadVerbs {
    fabric: FakeLoadFabric,
    gid: std::net::Ipv6Addr,
}

impl FakeLoadVerbs {
    fn open(
        &self,
        spec: &super::PortSpec,
        responder: bool,
    ) -> Result<FakeLoadPort, crate::verbs::OpenError> {
        let mut s = self.fabric.lock();
        if let Some(why) = &s.fail_open {
            return Err(crate::verbs::OpenError::Failed(Failure::new(
                crate::Reason::CreateQp,
                why.clone(),
            )));
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let halted = Arc::new(AtomicBool::new(false));
        let mut qpns = Vec::new();
        for i in 0..spec.qps.max(1) as usize {
            s.next_qpn += 1;
            let qpn = s.next_qpn + 16;
            if responder {
                s.inbox.insert(qpn, (tx.clone(), i, halted.clone()));
            }
            qpns.push(qpn);
        }
        s.open += 1;
        s.opened += 1;
        Ok(FakeLoadPort {
            fabric: self.fabric.clone(),
            gid: self.gid,
            qpns,
            responder,
            rx,
            tx,
            remote: Vec::new(),
            window: None,
            done: VecDeque::new(),
            halted,
            buffer: spec.buffer_bytes,
        })
    }
}

impl super::LoadVerbs for FakeLoadVerbs {
    type Requester = FakeLoadPort;
    type Receiver = FakeLoadPort;

    fn requester(&self, spec: &super::PortSpec) -> Result<FakeLoadPort, crate::verbs::OpenError> {
        self.open(spec, false)
    }

    fn receiver(&self, spec: &super::PortSpec) -> Result<FakeLoadPort, crate::verbs::OpenError> {
        self.open(spec, true)
    }
}

/// One side of a fake stream.
#[derive(Debug)]
pub struct FakeLoadPort {
    fabric: FakeLoadFabric,
    gid: std::net::Ipv6Addr,
    qpns: Vec<u32>,
    responder: bool,
    rx: std::sync::mpsc::Receiver<Inbound>,
    tx: std::sync::mpsc::Sender<Inbound>,
    remote: Vec<u32>,
    window: Option<super::Window>,
    done: VecDeque<Completion>,
    halted: Arc<AtomicBool>,
    buffer: u64,
}

impl Drop for FakeLoadPort {
    fn drop(&mut self) {
        let mut s = self.fabric.lock();
        for q in &self.qpns {
            s.inbox.remove(q);
        }
        s.open = s.open.saturating_sub(1);
    }
}

impl super::Connect for FakeLoadPort {
    fn local(&self) -> super::QpSet {
        super::QpSet {
            gid: self.gid,
            lid: 0,
            qpns: self.qpns.clone(),
            psn: 1,
            mtu: 1024,
        }
    }

    fn window(&self) -> Option<super::Window> {
        self.responder.then_some(super::Window {
            rkey: 7,
            addr: 0x1000,
            len: self.buffer,
        })
    }

    fn connect(
        &mut self,
        remote: &super::QpSet,
        window: Option<super::Window>,
    ) -> Result<(), Failure> {
        if remote.qpns.len() != self.qpns.len() {
            return Err(Failure::new(
                crate::Reason::QpRtr,
                "queue pair counts differ",
            ));
        }
        self.remote = remote.qpns.clone();
        self.window = window;
        Ok(())
    }

    fn memory(&self) -> super::MemoryUsed {
        super::MemoryUsed::Host { fallback: None }
    }
}

impl Requester for FakeLoadPort {
    fn qps(&self) -> usize {
        self.qpns.len()
    }

    fn post_write(&mut self, qp: usize, len: u32, wr_id: u64) -> Result<(), Failure> {
        let target = self.remote.get(qp).copied();
        let delivered = {
            let s = self.fabric.lock();
            target
                .and_then(|q| s.inbox.get(&q))
                .is_some_and(|(tx, i, halted)| {
                    !halted.load(Ordering::SeqCst) && tx.send(Inbound::Write(*i, len)).is_ok()
                })
        };
        self.done.push_back(Completion {
            wr_id,
            // IBV_WC_RETRY_EXC_ERR: nobody acknowledged it.
            status: if delivered { 0 } else { 12 },
            bytes: len,
            qp,
        });
        Ok(())
    }

    fn wait(&mut self, until: Instant, out: &mut Vec<Completion>) -> Result<(), Failure> {
        if self.done.is_empty() {
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
        }
        out.extend(self.done.drain(..));
        Ok(())
    }
}

impl Receiver for FakeLoadPort {
    fn qps(&self) -> usize {
        self.qpns.len()
    }

    fn post_receives(&mut self, _qp: usize, _n: u32) -> Result<(), Failure> {
        Ok(())
    }

    fn wait(&mut self, until: Instant, out: &mut Vec<Completion>) -> Result<(), Failure> {
        let left = until.saturating_duration_since(Instant::now());
        let first = match self.rx.recv_timeout(left) {
            Ok(m) => m,
            Err(_) => return Ok(()),
        };
        for m in std::iter::once(first).chain(self.rx.try_iter()) {
            if let Inbound::Write(qp, bytes) = m {
                out.push(Completion {
                    wr_id: qp as u64,
                    status: 0,
                    bytes,
                    qp,
                });
            }
        }
        Ok(())
    }

    fn halt(&mut self) {
        self.halted.store(true, Ordering::SeqCst);
    }

    fn waker(&self) -> Waker {
        let tx = std::sync::Mutex::new(self.tx.clone());
        Waker::new(move || {
            if let Ok(tx) = tx.lock() {
                let _ = tx.send(Inbound::Wake);
            }
        })
    }
}
