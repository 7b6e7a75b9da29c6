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
