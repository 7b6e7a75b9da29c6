//! How the port's thread waits: on events only. Both CQs notify one
//! completion channel; its descriptor and the address-handle resolver's
//! `eventfd` share one `ppoll(2)` whose timeout is the deadline of what
//! the thread waits for (the echo of the probe in flight, an address
//! handle, the gap before the next probe). Arm, then drain, then sleep:
//! a completion that lands after the drain raises an event, one that
//! landed before it is handled by the drain, so nothing is missed and
//! nothing is polled for. The [`PeerPort`] the prober drives is built on
//! it.

use super::datapath::{Event, Expect};
use super::*;

/// Completions handled per wake-up at most before the thread looks at its
/// deadline again (a flood cannot hold it past the echo it waits for).
const DRAIN_ROUNDS: usize = 64;

impl UdPort {
    /// Sleeps until the completion channel or the resolver's descriptor is
    /// readable, or `until`; takes and acknowledges the CQ events (every
    /// event must be acknowledged before the CQ can be destroyed). The CQs
    /// to be woken by must have been armed.
    pub(super) fn sleep(&mut self, until: Instant) {
        let left = until.saturating_duration_since(Instant::now());
        // SAFETY: the channel is live.
        let channel = unsafe { (*self.channel).fd };
        let resolver = self.ahs.as_ref().map_or(-1, |a| a.wake_fd());
        let mut fds = [
            libc::pollfd {
                fd: channel,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: resolver,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ts = libc::timespec {
            tv_sec: left.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        // SAFETY: two valid pollfds (a negative fd is ignored), a valid
        // timespec, no signal mask change.
        let ready = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, ptr::null()) };
        if ready > 0 && fds[0].revents != 0 {
            // The channel is non-blocking: EAGAIN ends the loop.
            for _ in 0..DRAIN_ROUNDS {
                let mut cq = ptr::null_mut();
                let mut ctx = ptr::null_mut();
                // SAFETY: the channel is live; an event got is acknowledged
                // at once.
                unsafe {
                    if ibv_get_cq_event(self.channel, &mut cq, &mut ctx) != 0 {
                        break;
                    }
                    ibv_ack_cq_events(cq, 1);
                }
            }
        }
    }

    /// Handles what completed until the CQs are empty (or
    /// [`DRAIN_ROUNDS`] polls): returns the event of `expect`, if any.
    fn drain(
        &mut self,
        expect: Option<&Expect>,
        responder: &mut Responder,
        served: &mut Served,
    ) -> Result<Option<Event>, Failure> {
        let mut event = None;
        for _ in 0..DRAIN_ROUNDS {
            let (n, e) = self.poll_once(expect, responder, served)?;
            if e.is_some() {
                event = e;
            }
            if n == 0 {
                break;
            }
        }
        Ok(event)
    }

    /// One wait: arms both CQs, handles what is there, and unless that
    /// brought `expect`'s event or `until` has passed, sleeps until an
    /// event or `until` and handles what the wake-up brought. Returns the
    /// event of `expect`, if any; callers loop until their deadline.
    pub(super) fn wait_once(
        &mut self,
        until: Instant,
        expect: Option<&Expect>,
        responder: &mut Responder,
        served: &mut Served,
    ) -> Result<Option<Event>, Failure> {
        let armed = self.recv_cq.arm() & self.send_cq.arm();
        if let Some(e) = self.drain(expect, responder, served)? {
            return Ok(Some(e));
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        if !armed {
            // Without notification a sleep could outlast a datagram: wake
            // in a millisecond at most (a provider that refuses to arm).
            self.sleep(until.min(Instant::now() + Duration::from_millis(1)));
        } else {
            self.sleep(until);
        }
        self.drain(expect, responder, served)
    }

    /// The round trip of the answer received at `at` (device timestamp
    /// `ts`) to the probe sent at `started` (send `wr_id`), less the
    /// responder's hold time: on the device's clock where both completions
    /// carry its timestamps, on the host's otherwise.
    fn round_trip(
        &self,
        started: Instant,
        at: Instant,
        ts: Option<u64>,
        wr_id: u64,
        hold_ns: u32,
    ) -> Duration {
        let hold = Duration::from_nanos(u64::from(hold_ns));
        let device = match (self.clock, self.sent_ts, ts) {
            (Some(c), Some((id, sent)), Some(got)) if id == wr_id => Some(c.between(sent, got)),
            _ => None,
        };
        device.unwrap_or(at - started).saturating_sub(hold)
    }
}

impl PeerPort for UdPort {
    fn local(&self) -> (Ipv6Addr, u32, u32) {
        (self.gid, self.qpn, self.mtu)
    }

    fn ping(
        &mut self,
        to: &Endpoint,
        probe: &Probe,
        timeout: Duration,
        responder: &mut Responder,
        served: &mut Served,
    ) -> ProbeOutcome {
        // Answer what is waiting first, so that its answers do not count
        // against this probe's round trip.
        self.serve(responder, served);
        // The address handle comes before the clock starts; the port goes
        // on answering while the resolver waits for the neighbour, and
        // wakes when the resolver is done.
        let key = AhKey {
            gid: to.gid,
            traffic_class: probe.traffic_class,
            flow_label: probe.flow_label,
        };
        let give_up = Instant::now() + timeout;
        let ah = loop {
            match self.handle_for(&key) {
                Lookup::Ready(ah) => break ah,
                Lookup::Failed(_) => return ProbeOutcome::Unresolved,
                Lookup::Waiting => {}
            }
            if Instant::now() >= give_up {
                return ProbeOutcome::Unresolved;
            }
            if let Err(f) = self.wait_once(give_up, None, responder, served) {
                return ProbeOutcome::Failed(f);
            }
        };
        let send = |port: &mut UdPort, cookie: u64| {
            let payload = Message::probe(probe.nonce, probe.seq, probe.incarnation, cookie)
                .encode(probe.size as usize);
            port.send(key, ah, to.qpn, &payload)
        };
        let mut started = Instant::now();
        let deadline = started + timeout;
        let mut expect = Expect {
            flight: InFlight {
                gid: to.gid,
                qpn: to.qpn,
                nonce: probe.nonce,
                seq: probe.seq,
            },
            wr_id: match send(self, responder.cookie_for(&to.gid, to.qpn)) {
                Ok(id) => id,
                Err(f) => return ProbeOutcome::Failed(f),
            },
        };
        let mut resent = false;
        loop {
            match self.wait_once(deadline, Some(&expect), responder, served) {
                Ok(Some(Event::Reply(at, m, ts))) => {
                    responder.keep_cookie(&to.gid, to.qpn, m.cookie);
                    match m.kind {
                        MessageKind::Echo => {
                            return ProbeOutcome::Answered {
                                rtt: self.round_trip(started, at, ts, expect.wr_id, m.hold_ns),
                                incarnation: m.incarnation,
                            }
                        }
                        // Challenged (no cookie yet, or one of a key the
                        // responder no longer has): the same probe again
                        // with the cookie, timed from its new send, once.
                        MessageKind::Challenge if !resent => {
                            resent = true;
                            started = Instant::now();
                            match send(self, m.cookie) {
                                Ok(id) => expect.wr_id = id,
                                Err(f) => return ProbeOutcome::Failed(f),
                            }
                        }
                        MessageKind::Challenge | MessageKind::Probe => {}
                    }
                }
                Ok(Some(Event::SendFailed(status, vendor))) => {
                    return ProbeOutcome::Failed(Failure::new(
                        Reason::Completion(status),
                        format!(
                            "work completion {} on the probe's send (vendor error {vendor:#x})",
                            crate::wc_status_name(status)
                        ),
                    ))
                }
                Ok(None) => {}
                Err(f) => return ProbeOutcome::Failed(f),
            }
            if Instant::now() >= deadline {
                return ProbeOutcome::Lost;
            }
        }
    }

    fn serve(&mut self, responder: &mut Responder, served: &mut Served) {
        let _ = self.drain(None, responder, served);
    }

    fn idle(&mut self, timeout: Duration, responder: &mut Responder, served: &mut Served) {
        let until = Instant::now() + timeout;
        if self.wait_once(until, None, responder, served).is_err() {
            // The CQs fail to poll (a device gone): wait out the time on
            // the descriptors instead of returning to be called again.
            self.sleep(until);
        }
    }

    fn clock(&self) -> RttClock {
        if self.clock.is_some() {
            RttClock::Device
        } else {
            RttClock::Host
        }
    }
}
