//! Address handles of the peer probes, created off the port's thread and
//! kept between sends.
//!
//! On RoCE, creating an address handle resolves the destination's MAC
//! address in the kernel, which waits for ARP/ND up to about a second when
//! the neighbour is not known. Done on the probe's timed path it would read
//! as a slow path; done on the port's thread it would stall the responder,
//! and other nodes would record loss to this healthy node. So a resolver
//! thread creates every handle, the port's thread only asks and polls, and
//! the handles are kept (at most [`MAX_HANDLES`], least recently used
//! dropped first, never one in use by a send in flight). A key that failed
//! to resolve is not asked again for [`RETRY_AFTER`]. The resolver signals
//! each result on an `eventfd` ([`AhCache::wake_fd`]) that the port's
//! thread waits on in the same `poll(2)` as its completion channel, so a
//! send waiting for its handle goes out as soon as it is made, without the
//! port polling for it.
#![allow(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Handles kept at most per port.
pub const MAX_HANDLES: usize = 1024;
/// A destination that did not resolve is asked again after this long.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Requests waiting for the resolver at most.
const QUEUE: usize = 64;

/// What an address handle is made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AhKey {
    pub gid: Ipv6Addr,
    pub traffic_class: u8,
    pub flow_label: u32,
}

/// Creates and destroys handles; used from the resolver thread (create)
/// and the port's thread (destroy).
pub trait AhFactory: Send + Sync + 'static {
    type Handle: Copy + Send + 'static;
    /// Creates a handle; the error is an errno.
    fn create(&self, key: &AhKey) -> Result<Self::Handle, i32>;
    fn destroy(&self, handle: Self::Handle);
}

/// The state of one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<H> {
    Ready(H),
    /// Asked; the resolver has not answered yet.
    Waiting,
    /// The last attempt failed with this errno (not asked again before
    /// [`RETRY_AFTER`]).
    Failed(i32),
}

struct Entry<H> {
    handle: H,
    used: u64,
    in_flight: u32,
}

/// The handles of one port and its resolver thread.
pub struct AhCache<F: AhFactory> {
    factory: std::sync::Arc<F>,
    entries: HashMap<AhKey, Entry<F::Handle>>,
    failed: HashMap<AhKey, (Instant, i32)>,
    asked: HashSet<AhKey>,
    requests: Option<SyncSender<AhKey>>,
    results: Receiver<(AhKey, Result<F::Handle, i32>)>,
    thread: Option<JoinHandle<()>>,
    tick: u64,
    /// Readable once the resolver finished something (see the module doc).
    wake: std::sync::Arc<OwnedFd>,
}

/// A non-blocking `eventfd`.
fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: plain system call; the descriptor is owned below.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd's counter (it is readable while not zero).
fn signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to an eventfd; a full counter
    // (EAGAIN) still leaves it readable, which is all a signal means.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

impl<F: AhFactory> AhCache<F> {
    /// Starts the resolver thread.
    pub fn new(factory: F) -> std::io::Result<AhCache<F>> {
        let factory = std::sync::Arc::new(factory);
        let (req_tx, req_rx) = mpsc::sync_channel::<AhKey>(QUEUE);
        let (res_tx, res_rx) = mpsc::channel();
        let f = std::sync::Arc::clone(&factory);
        let wake = std::sync::Arc::new(eventfd()?);
        let waker = std::sync::Arc::clone(&wake);
        let thread = std::thread::Builder::new()
            .name("peer-probe-ah".into())
            .spawn(move || {
                for key in req_rx {
                    let r = f.create(&key);
                    match res_tx.send((key, r)) {
                        Ok(()) => signal(&waker),
                        Err(mpsc::SendError((_, Ok(h)))) => f.destroy(h),
                        Err(_) => {}
                    }
                }
            })?;
        Ok(AhCache {
            factory,
            entries: HashMap::new(),
            failed: HashMap::new(),
            asked: HashSet::new(),
            requests: Some(req_tx),
            results: res_rx,
            thread: Some(thread),
            tick: 0,
            wake,
        })
    }

    /// The descriptor that is readable once the resolver has finished a
    /// handle (made or failed) since the last [`AhCache::pump`].
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Takes in what the resolver finished.
    pub fn pump(&mut self, now: Instant) {
        let mut counter = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from the non-blocking
        // eventfd (EAGAIN when nothing was signalled: nothing to clear).
        unsafe { libc::read(self.wake.as_raw_fd(), (&mut counter as *mut u64).cast(), 8) };
        while let Ok((key, r)) = self.results.try_recv() {
            self.asked.remove(&key);
            match r {
                Ok(handle) => {
                    self.failed.remove(&key);
                    self.tick += 1;
                    if let Some(old) = self.entries.insert(
                        key,
                        Entry {
                            handle,
                            used: self.tick,
                            in_flight: 0,
                        },
                    ) {
                        self.factory.destroy(old.handle);
                    }
                    self.evict();
                }
                Err(errno) => {
                    self.failed.insert(key, (now, errno));
                }
            }
        }
        self.failed
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < RETRY_AFTER);
    }

    /// The handle for `key`, asking the resolver for it when there is none.
    pub fn get(&mut self, key: &AhKey, now: Instant) -> Lookup<F::Handle> {
        self.pump(now);
        self.tick += 1;
        if let Some(e) = self.entries.get_mut(key) {
            e.used = self.tick;
            return Lookup::Ready(e.handle);
        }
        if let Some((_, errno)) = self.failed.get(key) {
            return Lookup::Failed(*errno);
        }
        if !self.asked.contains(key) {
            match self.requests.as_ref().map(|r| r.try_send(*key)) {
                Some(Ok(())) => {
                    self.asked.insert(*key);
                }
                // The resolver is behind: asked again on the next call.
                Some(Err(TrySendError::Full(_))) => {}
                Some(Err(TrySendError::Disconnected(_))) | None => {
                    return Lookup::Failed(libc::EPIPE);
                }
            }
        }
        Lookup::Waiting
    }

    /// Marks `key`'s handle in use by a send (not evicted until released).
    pub fn hold(&mut self, key: &AhKey) {
        if let Some(e) = self.entries.get_mut(key) {
            e.in_flight += 1;
        }
    }

    /// A send using `key`'s handle completed.
    pub fn release(&mut self, key: &AhKey) {
        if let Some(e) = self.entries.get_mut(key) {
            e.in_flight = e.in_flight.saturating_sub(1);
        }
        self.evict();
    }

    /// Handles kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn evict(&mut self) {
        while self.entries.len() > MAX_HANDLES {
            let victim = self
                .entries
                .iter()
                .filter(|(_, e)| e.in_flight == 0)
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| *k);
            let Some(k) = victim else { return };
            if let Some(e) = self.entries.remove(&k) {
                self.factory.destroy(e.handle);
            }
        }
    }

    /// Stops the resolver (waiting for the creation it may be blocked in)
    /// and destroys every handle. Called before the protection domain the
    /// handles belong to goes away; idempotent.
    pub fn shutdown(&mut self) {
        self.requests = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        while let Ok((_, r)) = self.results.try_recv() {
            if let Ok(h) = r {
                self.factory.destroy(h);
            }
        }
        for (_, e) in self.entries.drain() {
            self.factory.destroy(e.handle);
        }
    }
}

impl<F: AhFactory> Drop for AhCache<F> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
    use std::sync::Arc;

    /// Handles are numbers; gids ending in 0xff never resolve and take
    /// `slow` to say so.
    #[derive(Default)]
    struct Counting {
        live: Arc<AtomicI64>,
        made: Arc<AtomicU32>,
        slow: Duration,
    }

    impl AhFactory for Counting {
        type Handle = u32;
        fn create(&self, key: &AhKey) -> Result<u32, i32> {
            if key.gid.octets()[15] == 0xff {
                std::thread::sleep(self.slow);
                return Err(libc::ETIMEDOUT);
            }
            self.live.fetch_add(1, Ordering::SeqCst);
            Ok(self.made.fetch_add(1, Ordering::SeqCst))
        }
        fn destroy(&self, _: u32) {
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn key(last: u8, label: u32) -> AhKey {
        AhKey {
            gid: std::net::Ipv4Addr::new(10, 0, 0, last).to_ipv6_mapped(),
            traffic_class: 106,
            flow_label: label,
        }
    }

    fn wait_ready<F: AhFactory>(c: &mut AhCache<F>, k: &AhKey) -> Lookup<F::Handle> {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            match c.get(k, Instant::now()) {
                Lookup::Waiting if Instant::now() < until => {
                    readable(c.wake_fd(), 100);
                }
                other => return other,
            }
        }
    }

    /// Whether `fd` is readable within `ms`.
    fn readable(fd: RawFd, ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, ms) == 1 }
    }

    #[test]
    fn the_resolver_wakes_the_port_when_a_handle_is_made_and_not_before() {
        let f = Counting {
            slow: Duration::from_millis(50),
            ..Counting::default()
        };
        let mut c = AhCache::new(f).unwrap();
        assert!(!readable(c.wake_fd(), 0));
        assert_eq!(c.get(&key(0xff, 1), Instant::now()), Lookup::Waiting);
        // The port sleeps in poll(2) until the resolver has an answer.
        assert!(readable(c.wake_fd(), 5000));
        assert_eq!(
            c.get(&key(0xff, 1), Instant::now()),
            Lookup::Failed(libc::ETIMEDOUT)
        );
        // Taken in: not readable again until the next result.
        assert!(!readable(c.wake_fd(), 0));
    }

    #[test]
    fn handles_are_made_once_and_kept() {
        let f = Counting::default();
        let made = Arc::clone(&f.made);
        let mut c = AhCache::new(f).unwrap();
        let k = key(1, 1);
        assert!(matches!(wait_ready(&mut c, &k), Lookup::Ready(_)));
        for _ in 0..100 {
            assert!(matches!(c.get(&k, Instant::now()), Lookup::Ready(_)));
        }
        assert_eq!(made.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn an_unresolved_neighbour_never_blocks_the_caller() {
        let f = Counting {
            slow: Duration::from_millis(300),
            ..Counting::default()
        };
        let mut c = AhCache::new(f).unwrap();
        let dead = key(0xff, 1);
        let t = Instant::now();
        assert_eq!(c.get(&dead, Instant::now()), Lookup::Waiting);
        // The caller goes on at once while the resolver waits on "ARP".
        assert!(t.elapsed() < Duration::from_millis(300));
        assert_eq!(wait_ready(&mut c, &dead), Lookup::Failed(libc::ETIMEDOUT));
        // Not asked again at once: the failure is remembered.
        assert_eq!(
            c.get(&dead, Instant::now()),
            Lookup::Failed(libc::ETIMEDOUT)
        );
    }

    #[test]
    fn the_cache_is_bounded_and_spares_handles_in_flight() {
        let f = Counting::default();
        let live = Arc::clone(&f.live);
        let mut c = AhCache::new(f).unwrap();
        let first = key(1, 0);
        assert!(matches!(wait_ready(&mut c, &first), Lookup::Ready(_)));
        c.hold(&first);
        for i in 1..(MAX_HANDLES as u32 + 50) {
            let k = key(2, i);
            assert!(matches!(wait_ready(&mut c, &k), Lookup::Ready(_)));
        }
        assert_eq!(c.len(), MAX_HANDLES);
        assert!(matches!(c.get(&first, Instant::now()), Lookup::Ready(_)));
        assert_eq!(live.load(Ordering::SeqCst), MAX_HANDLES as i64);
        c.release(&first);
        drop(c);
        assert_eq!(live.load(Ordering::SeqCst), 0, "every handle destroyed");
    }

    #[test]
    fn shutdown_waits_for_the_resolver_and_frees_what_it_made() {
        let f = Counting {
            slow: Duration::from_millis(100),
            ..Counting::default()
        };
        let live = Arc::clone(&f.live);
        let mut c = AhCache::new(f).unwrap();
        let _ = c.get(&key(0xff, 1), Instant::now());
        let _ = c.get(&key(3, 1), Instant::now());
        c.shutdown();
        assert_eq!(live.load(Ordering::SeqCst), 0);
        assert_eq!(
            c.get(&key(4, 1), Instant::now()),
            Lookup::Failed(libc::EPIPE)
        );
    }
}
